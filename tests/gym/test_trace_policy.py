"""StochasticTracePolicy: follows the oracle, detours with probability perturb_p, detours skewed Zipf-like."""
import collections
import random
from types import SimpleNamespace

import pytest

from bunshin_gym.rollout import StochasticTracePolicy

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
