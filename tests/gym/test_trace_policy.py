"""StochasticTracePolicy: follows the oracle, detours with probability perturb_p, detours skewed Zipf-like;
DriftingTracePolicy: detours less each epoch and makes new calls from its `novel_from` epoch on."""
import collections
import random
from types import SimpleNamespace

import pytest

from bunshin_gym.rollout import DriftingTracePolicy, StochasticTracePolicy

CANDIDATES = [f"click [{i}]" for i in range(20)]
ENV = SimpleNamespace(unwrapped=SimpleNamespace(adapter=SimpleNamespace(candidate_actions=lambda obs: CANDIDATES)))


def _first_detours(skew: float, n: int = 400) -> collections.Counter:
    out = collections.Counter()
    for seed in range(n):
        policy = StochasticTracePolicy(["a", "b", "stop []"], perturb_p=1.0, detour_skew=skew)
        out[policy.act({}, ENV, random.Random(seed))] += 1
    return out


def test_skewed_detours_are_shared_by_samples_and_uniform_ones_are_not():
    skewed, uniform = _first_detours(1.0), _first_detours(0.0)
    assert set(skewed) <= set(CANDIDATES) and set(uniform) <= set(CANDIDATES)
    # Zipf(1) over 20 items gives the top one ~28% of draws; uniform gives each 5%
    assert skewed.most_common(1)[0][1] > 0.2 * 400 > uniform.most_common(1)[0][1]


def test_without_detours_the_oracle_is_replayed_then_it_stops():
    policy = StochasticTracePolicy(["a", "b"], perturb_p=0.0)
    assert [policy.act({}, ENV, random.Random(0)) for _ in range(3)] == ["a", "b", "b"]


@pytest.mark.parametrize("kw", [{"perturb_p": 1.5}, {"detour_skew": -1}])
def test_bad_arguments_say_what_is_expected(kw):
    with pytest.raises(ValueError, match="expected"):
        StochasticTracePolicy(["a"], **kw)


def _first_actions(epoch: int, n: int = 400, **kw) -> list[str]:
    policies = [DriftingTracePolicy(["a", "b", "stop []"], epoch, perturb_p=0.6, drift_step=0.2, **kw)
                for _ in range(n)]
    return [p.act({}, ENV, random.Random(seed)) for seed, p in enumerate(policies)]


def test_a_drifting_policy_detours_less_each_epoch_and_makes_new_calls_only_late():
    early, later, last = (_first_actions(e, novel_from=2) for e in (0, 1, 3))
    detours = [[a for a in actions if a in CANDIDATES] for actions in (early, later)]
    assert len(detours[0]) > len(detours[1]) > 0, "detour probability 0.6, then 0.4"
    assert set(last) <= {"a"} | set(CANDIDATES) and last.count("a") < len(last), "new calls from novel_from on"
    late_calls = {a for a in last if a != "a"}
    assert late_calls and not late_calls & set(detours[0] + detours[1]), "calls no earlier epoch made"
    assert last.count("a") > 0.6 * len(last), "by epoch 3 the detour probability is 0: new calls at novel_p 0.25"


def test_a_drifting_policy_refuses_a_negative_epoch():
    with pytest.raises(ValueError, match="expected"):
        DriftingTracePolicy(["a"], -1)
