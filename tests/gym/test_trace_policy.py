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


def _detours_at(epoch: int, n: int = 400, **kw) -> list[str]:
    out = []
    for seed in range(n):
        policy = DriftingTracePolicy(["a", "b", "stop []"], epoch, perturb_p=0.6, drift_step=0.2, **kw)
        action = policy.act({}, ENV, random.Random(seed))
        out += [action] if action in CANDIDATES else []
    return out


def test_a_drifting_policy_detours_less_each_epoch_and_makes_new_calls_only_late():
    early, later, last = _detours_at(0, novel_from=2), _detours_at(1, novel_from=2), _detours_at(3, novel_from=2)
    assert len(early) > len(later) > 0 == len(last), "detour probability 0.6, 0.4, then 0 (floored)"
    new_late = _detours_at(2, novel_from=2, novel_p=1.0)
    assert new_late and not set(new_late) & set(early + later), "from novel_from on, calls no earlier epoch made"
    assert set(new_late) | set(early) <= set(CANDIDATES)


def test_a_drifting_policy_refuses_a_negative_epoch():
    with pytest.raises(ValueError, match="expected"):
        DriftingTracePolicy(["a"], -1)
