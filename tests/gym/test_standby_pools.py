"""StandbyPools' budget: which pools keep how many frozen clones (the clones themselves are forkcore's, tested
in tests/forkcore/test_fork.py; here a stand-in pool records what it is asked)."""
from __future__ import annotations

import pytest

from bunshin_gym import runtime as runtime_module
from bunshin_gym.runtime import StandbyPools

MB = 1 << 20


class FakeSnapshot:
    def __init__(self, name: str, size_mb: int = 100) -> None:
        self.id, self._bytes = name, size_mb * MB

    def size_bytes(self) -> int:
        return self._bytes


class FakePool:
    def __init__(self, snapshot, size, backend, refill_delay_s) -> None:
        self.snapshot, self.size, self.closed = snapshot, size, False
        self.ready = size  # as if filled at once

    def shrink(self, size: int) -> None:
        self.size = min(self.size, size)
        self.ready = min(self.ready, self.size)

    def grow(self, size: int) -> None:
        self.size = max(self.size, size)
        self.ready = self.size

    def take_ready(self):  # refilled at once: the tasks here come back after a refill would be done
        return f"clone of {self.snapshot.id}" if self.ready else None

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def pools(monkeypatch):
    monkeypatch.setattr(runtime_module, "StandbyPool", FakePool)
    return StandbyPools(budget_bytes=400 * MB, per_snapshot=2)


def kept(pools: StandbyPools) -> dict[str, int]:
    return {key[0]: kept.size for key, kept in pools._pools.items()}


def test_tasks_that_come_back_in_turn_keep_a_clone_each_instead_of_closing_each_others_pools(pools):
    tasks = [FakeSnapshot(t) for t in "abcd"]  # 4 tasks x 2 clones x 100 MB: twice the budget
    for _ in range(3):  # three epochs, the tasks in turn
        for snap in tasks:
            pools.ensure(snap, "ksm")
            assert pools.take(snap, "ksm") is not None, f"task {snap.id} found no frozen clone"
    assert kept(pools) == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert pools.stats()["evicted"] == 0 and pools.stats()["reserved_mb"] <= 400
    assert pools.stats()["opened"] == 4, "each pool was opened once"


def test_the_budget_shrinks_the_least_recently_used_pools_first_and_closes_pools_only_when_one_clone_each_is_too_much(pools):
    a, b, c = FakeSnapshot("a"), FakeSnapshot("b"), FakeSnapshot("c")
    pools.ensure(a, "ksm")
    pools.ensure(b, "ksm")
    assert kept(pools) == {"a": 2, "b": 2}
    pools.ensure(c, "ksm")  # a (least recently used) gives one up first; then b has to as well
    assert kept(pools) == {"a": 1, "b": 1, "c": 2}
    pools.ensure(FakeSnapshot("d"), "ksm")
    pools.ensure(FakeSnapshot("e"), "ksm")  # one clone each of five does not fit 400 MB: a is closed
    assert list(kept(pools)) == ["b", "c", "d", "e"]
    assert sum(kept(pools).values()) * 100 <= 400
    assert pools.stats()["evicted"] == 1


def test_a_snapshot_bigger_than_the_budget_gets_no_pool_and_closes_none(pools):
    pools.ensure(FakeSnapshot("a"), "ksm")
    pools.ensure(FakeSnapshot("huge", size_mb=500), "ksm")
    assert kept(pools) == {"a": 2}


def test_a_task_keeps_no_more_frozen_clones_with_retained_snapshots_than_its_resets_alone_would(pools):
    initial, hot, hotter = FakeSnapshot("initial"), FakeSnapshot("hot"), FakeSnapshot("hotter")
    pools.ensure(initial, "ksm")
    pools.ensure(hot, "ksm", initial=initial)  # the budget has room for it, the task's share has not
    assert kept(pools) == {"initial": 1, "hot": 1}
    assert pools._pools[("initial", "ksm")].pool.size == 1, "the initial pool gave its second clone up"
    pools.ensure(hotter, "ksm", initial=initial)  # the task keeps one clone each of two states already
    assert kept(pools) == {"initial": 1, "hot": 1}
    other = FakeSnapshot("other")
    pools.ensure(other, "ksm")  # another task's share is its own
    assert kept(pools) == {"initial": 1, "hot": 1, "other": 2}


def test_a_discarded_retained_states_clone_goes_back_to_its_tasks_initial_pool_where_the_budget_allows(pools):
    initial, hot, other = FakeSnapshot("initial"), FakeSnapshot("hot"), FakeSnapshot("other")
    pools.ensure(initial, "ksm")
    pools.ensure(hot, "ksm", initial=initial)  # the initial pool gives its second clone up for it
    pools.ensure(other, "ksm")
    assert kept(pools) == {"initial": 1, "hot": 1, "other": 2}
    hot_pool = pools._pools[("hot", "ksm")].pool
    pools.discard(hot)  # the cache dropped the retained state: the task's resets get their clone back
    assert hot_pool.closed and kept(pools) == {"initial": 2, "other": 2}
    assert pools._pools[("initial", "ksm")].pool.size == 2 and pools.stats()["reserved_mb"] <= 400


def test_a_discarded_retained_states_clone_is_not_given_back_beyond_the_budget(pools):
    initial, hot = FakeSnapshot("initial", size_mb=100), FakeSnapshot("hot", size_mb=50)
    pools.ensure(initial, "ksm")
    pools.ensure(hot, "ksm", initial=initial)
    pools.ensure(FakeSnapshot("other", size_mb=250), "ksm")  # 100 + 50 + 250: the budget is full
    assert kept(pools) == {"initial": 1, "hot": 1, "other": 1}
    pools.discard(hot)  # a second initial clone (100 MB) would not fit where the hot one (50 MB) was
    assert kept(pools) == {"initial": 1, "other": 1}
