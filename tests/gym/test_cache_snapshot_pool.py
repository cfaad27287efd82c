"""Snapshot pool: byte budget, ancestor-closed LRU, pins, release() calls."""

from __future__ import annotations

import threading

from bunshin_gym.cache import PrefixCache, CacheConfig, PrefixTree, SnapshotPool, CachedStep


class Handle:
    def __init__(self, size: int, name: str = ""):
        self.size_bytes = size
        self.name = name
        self.released = 0

    def release(self) -> None:
        self.released += 1

    def __repr__(self) -> str:
        return f"H({self.name})"


def chain(t: PrefixTree, sigs, start=None):
    n = start or t.root
    out = []
    for s in sigs:
        n = t.record(n, s, CachedStep(s), 1.0)
        out.append(n)
    return out


def tree_with_budget(budget):
    return PrefixTree("t", "d", pool=SnapshotPool(budget))


def resident(t):
    return {e.handle.name for e in t.pool.entries()}


def test_budget_evicts_least_recently_used_leaf_and_releases_it():
    t = tree_with_budget(300)
    a, b = chain(t, ["a", "b"])
    x, = chain(t, ["x"])
    ha, hb, hx = Handle(100, "a"), Handle(100, "b"), Handle(100, "x")
    assert t.attach_snapshot(a, ha) and t.attach_snapshot(x, hx) and t.attach_snapshot(b, hb)
    assert t.pool.resident_bytes == 300
    y, = chain(t, ["y"])
    hy = Handle(100, "y")
    assert t.attach_snapshot(y, hy)
    # x is the LRU evictable snapshot (a was refreshed when its dependent b was attached)
    assert hx.released == 1 and x.snapshot is None
    assert resident(t) == {"a", "b", "y"} and t.pool.resident_bytes == 300


def test_ancestor_stays_while_a_descendant_snapshot_depends_on_it():
    t = tree_with_budget(300)
    a, b, c = chain(t, ["a", "b", "c"])
    ha, hc = Handle(100, "a"), Handle(100, "c")
    t.attach_snapshot(a, ha)
    t.attach_snapshot(c, hc)
    assert a.snapshot.dependents == 1
    # make a the LRU entry artificially: touch c only (touching c also refreshes a, its ancestor)
    t.plan(c)
    order = [e.handle.name for e in t.pool.entries()]
    assert order.index("a") > order.index("c"), "an ancestor is never older than its descendants"
    # overflow: a must not go before c, because c depends on it
    z, = chain(t, ["z"])
    t.attach_snapshot(z, Handle(150, "z"))
    assert hc.released == 1 and ha.released == 0, "leaf first: c evicted, a kept"
    assert resident(t) == {"a", "z"} and a.snapshot.dependents == 0


def test_ancestor_closure_invariant_holds_under_random_workload():
    import random
    rng = random.Random(0)
    t = tree_with_budget(1000)
    nodes = [t.root]
    handles = []
    for i in range(2000):
        parent = rng.choice(nodes)
        n = t.record(parent, f"s{rng.randrange(5)}", CachedStep(i), rng.random())
        nodes.append(n)
        if rng.random() < 0.3 and n.snapshot is None:
            h = Handle(rng.randrange(10, 200), str(i))
            handles.append(h)
            t.attach_snapshot(n, h)
        if rng.random() < 0.2:
            with t.checkout(rng.choice(nodes)):
                pass
        # invariant: dependents count equals resident snapshots whose nearest resident ancestor is this one
        ent = t.pool.entries()
        assert t.pool.resident_bytes <= 1000
        assert sum(e.size_bytes for e in ent) == t.pool.resident_bytes
        for e in ent:
            cnt = 0
            for f in ent:
                p = f.node.parent
                while p is not None and p.snapshot is None:
                    p = p.parent
                cnt += p is e.node
            assert e.dependents == cnt
    live = {id(e.handle) for e in t.pool.entries()}
    for h in handles:
        assert h.released == (0 if id(h) in live else 1), "every dropped handle released exactly once"


def test_pinned_snapshot_is_not_evicted_during_checkout():
    t = tree_with_budget(100)
    a, = chain(t, ["a"])
    b, = chain(t, ["b"])
    ha = Handle(100, "a")
    t.attach_snapshot(a, ha)
    with t.checkout(a) as plan:
        assert plan.ancestor is a
        hb = Handle(100, "b")
        assert not t.attach_snapshot(b, hb), "does not fit: the only resident one is pinned"
        assert hb.released == 1 and ha.released == 0
    assert t.attach_snapshot(b, Handle(100, "b2")) and ha.released == 1


def test_oversized_snapshot_is_rejected_and_released():
    t = tree_with_budget(50)
    a, = chain(t, ["a"])
    h = Handle(51)
    assert not t.attach_snapshot(a, h) and h.released == 1 and t.pool.stats().rejected == 1


def test_drop_cascades_to_dependents_and_close_releases_everything():
    t = tree_with_budget(None)
    a, b, c = chain(t, ["a", "b", "c"])
    x, = chain(t, ["x"])
    hs = {n: Handle(1, n.signature) for n in (a, c, x)}
    for n, h in hs.items():
        t.attach_snapshot(n, h)
    t.drop_snapshot(a)
    assert hs[a].released == 1 and hs[c].released == 1 and hs[x].released == 0
    assert a.snapshot is None and c.snapshot is None
    t.pool.close()
    assert hs[x].released == 1 and t.pool.resident_bytes == 0


def test_attaching_above_existing_snapshots_reparents_them():
    t = tree_with_budget(None)
    a, b, c = chain(t, ["a", "b", "c"])
    t.attach_snapshot(c, Handle(1, "c"))
    t.attach_snapshot(a, Handle(1, "a"))
    assert a.snapshot.dependents == 1
    t.attach_snapshot(b, Handle(1, "b"))
    assert a.snapshot.dependents == 1 and b.snapshot.dependents == 1


def test_replacing_a_snapshot_releases_the_old_handle():
    t = tree_with_budget(None)
    a, = chain(t, ["a"])
    h1, h2 = Handle(5), Handle(7)
    t.attach_snapshot(a, h1)
    t.attach_snapshot(a, h2)
    assert h1.released == 1 and a.snapshot_handle is h2 and t.pool.resident_bytes == 7


def test_failing_release_is_logged_not_raised(caplog):
    class Bad(Handle):
        def release(self):
            raise OSError("criu image dir gone")
    t = tree_with_budget(10)
    a, b = chain(t, ["a"]), chain(t, ["b"])
    t.attach_snapshot(a[0], Bad(10))
    assert t.attach_snapshot(b[0], Handle(10))
    assert "release() failed" in caplog.text


def test_trees_of_one_cache_share_the_budget():
    cache = PrefixCache(CacheConfig(snapshot_budget_bytes=100))
    t1, t2 = cache.tree("t1", "d"), cache.tree("t2", "d")
    n1, = chain(t1, ["a"])
    n2, = chain(t2, ["a"])
    h1 = Handle(100)
    t1.attach_snapshot(n1, h1)
    t2.attach_snapshot(n2, Handle(100))
    assert h1.released == 1 and cache.pool.resident_bytes == 100
    cache.close()


def test_concurrent_attach_and_lookup_keep_budget():
    t = tree_with_budget(500)
    nodes = chain(t, [f"s{i}" for i in range(200)])
    errors = []

    def worker(seed):
        import random
        rng = random.Random(seed)
        try:
            for _ in range(300):
                n = rng.choice(nodes)
                if rng.random() < 0.5:
                    t.attach_snapshot(n, Handle(rng.randrange(1, 100)))
                else:
                    with t.checkout(n):
                        t.lookup(n.path())
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errors and t.pool.resident_bytes <= 500


def test_without_ancestor_closure_a_parent_can_go_before_its_descendant():
    t = PrefixTree("t", "d", pool=SnapshotPool(200, ancestor_closed=False))
    a, b, c = chain(t, ["a", "b", "c"])
    x, = chain(t, ["x"])
    ha, hc = Handle(100, "a"), Handle(100, "c")
    t.attach_snapshot(a, ha)
    t.attach_snapshot(c, hc)
    t.attach_snapshot(x, Handle(100, "x"))
    assert ha.released == 1 and hc.released == 0 and resident(t) == {"c", "x"}
    assert (t.plan(c, restore_s=0).ancestor, t.plan(c, restore_s=0).calls) == (c, ())
    assert (t.plan(b).ancestor, t.plan(b).calls) == (t.root, ("a", "b"))


def test_invalid_configs_name_the_field():
    import pytest
    from bunshin_gym.cache import CacheConfig, PrefixCache, SnapshotPolicy, SnapshotPolicyConfig
    with pytest.raises(ValueError, match="snapshot_budget_bytes"):
        PrefixCache(CacheConfig(snapshot_budget_bytes=-1))
    with pytest.raises(ValueError, match="size_ewma_alpha"):
        SnapshotPolicy(SnapshotPolicyConfig(size_ewma_alpha=0))
    with pytest.raises(TypeError, match="SnapshotHandle"):
        t = tree_with_budget(None)
        t.attach_snapshot(chain(t, ["a"])[0], object())  # type: ignore[arg-type]
