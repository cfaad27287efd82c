"""Prefix tree: longest-prefix semantics, read-only annotation, single flight, checkout/plan."""

from __future__ import annotations

import threading
import time

import pytest

from bunshin_gym.cache import (
    ForeignNodeError,
    MissExecutionError,
    PrefixCache,
    PrefixTree,
    SingleFlightTimeout,
    CachedStep,
)


def R(x, reward=0.0):
    return CachedStep(observation=x, reward=reward, info={"k": x})


def readonly(sig: str) -> bool:
    return sig.startswith("read(")


def make_tree() -> PrefixTree:
    t = PrefixTree("task", "init-digest", readonly=readonly)
    a = t.record(t.root, "a", R("A"), 1.0)
    b = t.record(a, "b", R("AB"), 2.0)
    t.record(b, "c", R("ABC"), 3.0)
    t.record(t.root, "b", R("B"), 1.5)
    return t


def test_full_prefix_match_is_a_hit_returning_recorded_result():
    t = make_tree()
    m = t.lookup(["a", "b", "c"])
    assert m.hit and m.depth == 3 and m.remaining == ()
    assert m.result.observation == "ABC"
    assert m.node.path() == ("a", "b", "c")


def test_same_call_after_a_different_earlier_call_is_a_miss():
    t = make_tree()
    # "c" was recorded after a,b; after b alone it is a different state.
    m = t.lookup(["b", "c"])
    assert not m.hit and m.result is None
    assert m.depth == 1 and m.node.path() == ("b",) and m.remaining == ("c",)
    # a different first call makes everything after it a miss, even if later calls match
    m = t.lookup(["x", "b", "c"])
    assert not m.hit and m.depth == 0 and m.node is t.root and m.remaining == ("x", "b", "c")


def test_longest_prefix_reports_deepest_matched_state():
    t = make_tree()
    m = t.lookup(["a", "b", "zz", "c"])
    assert not m.hit and m.depth == 2 and m.node.path() == ("a", "b") and m.remaining == ("zz", "c")


def test_empty_history_is_not_a_hit():
    t = make_tree()
    m = t.lookup([])
    assert not m.hit and m.node is t.root and m.depth == 0


def test_record_is_idempotent_and_keeps_first_result():
    t = make_tree()
    a = t.lookup(["a"]).node
    again = t.record(t.root, "a", R("other"), 9.0)
    assert again is a and a.result.observation == "A" and len(t) == 5


def test_readonly_call_is_cached_as_side_entry_and_does_not_advance_state():
    t = make_tree()
    a = t.lookup(["a"]).node
    n = t.record(a, "read(f)", R("contents-before"), 0.1)
    assert n is a and "read(f)" in a.side and "read(f)" not in a.children
    # last call read-only -> hit at the state of the stateful prefix
    m = t.lookup(["a", "read(f)"])
    assert m.hit and m.result.observation == "contents-before" and m.node is a
    # read-only calls before the last are skipped: the state after a, read(f), b is the state after a, b
    m = t.lookup(["a", "read(f)", "b", "read(g)", "c"])
    assert m.hit and m.result.observation == "ABC"


def test_readonly_result_after_a_mutation_is_not_the_stale_one():
    """TVCache's cat/patch/cat example: the second read happens in another state."""
    t = make_tree()
    a = t.lookup(["a"]).node
    t.record(a, "read(f)", R("before-patch"), 0.1)
    m = t.lookup(["a", "read(f)", "b", "read(f)"])
    assert not m.hit and m.node.path() == ("a", "b") and m.remaining == ("read(f)",)
    ab = m.node
    t.record(ab, "read(f)", R("after-patch"), 0.1)
    assert t.lookup(["a", "read(f)", "b", "read(f)"]).result.observation == "after-patch"
    assert t.lookup(["a", "read(f)"]).result.observation == "before-patch"


def test_readonly_calls_in_history_share_states_across_rollouts():
    t = make_tree()
    m1 = t.lookup(["read(x)", "read(y)", "a", "b"])
    assert m1.hit and m1.result.observation == "AB"


def test_foreign_node_is_rejected_with_a_clear_error():
    t1, t2 = make_tree(), PrefixTree("other", "d")
    with pytest.raises(ForeignNodeError, match="tree of task 'task'"):
        t2.record(t1.root, "a", R(1), 0.0)


def test_record_validates_inputs():
    t = make_tree()
    with pytest.raises(TypeError, match="CachedStep"):
        t.record(t.root, "q", {"obs": 1}, 0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cost_s"):
        t.record(t.root, "q", R(1), -1.0)
    with pytest.raises(TypeError, match="signature"):
        t.record(t.root, "", R(1), 0.0)


def test_step_result_info_is_read_only_and_picklable():
    import pickle
    r = R("x")
    with pytest.raises(TypeError):
        r.info["new"] = 1  # type: ignore[index]
    assert pickle.loads(pickle.dumps(r)) == r


def test_trees_are_per_task_and_initial_digest():
    cache = PrefixCache()
    t1 = cache.tree("t", "d1")
    assert cache.tree("t", "d1") is t1
    assert cache.tree("t", "d2") is not t1 and cache.tree("u", "d1") is not t1
    t1.record(t1.root, "a", R(1), 0.0)
    assert not cache.tree("t", "d2").lookup(["a"]).hit


# -- single flight ---------------------------------------------------------------------------------------


def test_identical_concurrent_misses_execute_once_and_all_get_the_result():
    t = PrefixTree("task", "d")
    calls = []
    gate = threading.Event()

    def run():
        calls.append(1)
        gate.wait(5)
        return R("done"), 0.5

    results, errors = [], []

    def worker():
        try:
            claim = t.execute(t.root, "slow()", run, timeout=10)
            results.append((claim.leader, claim.result.observation, claim.node))
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 5
    while t.stats().coalesced < 7 and time.monotonic() < deadline:
        time.sleep(0.005)
    gate.set()
    for th in threads:
        th.join(10)
    assert not errors and len(calls) == 1
    assert sum(1 for leader, _, _ in results if leader) == 1
    assert {obs for _, obs, _ in results} == {"done"} and len({id(n) for *_, n in results}) == 1
    assert t.in_flight() == 0 and t.lookup(["slow()"]).hit


def test_leader_failure_propagates_to_waiters_and_records_nothing():
    t = PrefixTree("task", "d")
    started = threading.Event()
    release = threading.Event()
    out = {}

    def leader():
        claim = t.acquire_miss(t.root, "boom()")
        assert claim.leader
        started.set()
        try:
            with claim:
                release.wait(5)
                raise RuntimeError("executor crashed")
        except RuntimeError:
            out["leader"] = "raised"

    def follower():
        started.wait(5)
        try:
            t.acquire_miss(t.root, "boom()", timeout=10)
        except MissExecutionError as e:
            out["follower"] = e

    th1, th2 = threading.Thread(target=leader), threading.Thread(target=follower)
    th1.start(); th2.start()
    deadline = time.monotonic() + 5
    while t.stats().coalesced < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    release.set()
    th1.join(10); th2.join(10)
    err = out["follower"]
    assert isinstance(err.__cause__, RuntimeError) and "executor crashed" in str(err)
    assert out["leader"] == "raised"
    assert not t.lookup(["boom()"]).hit and t.in_flight() == 0
    # a retry becomes the new leader
    claim = t.acquire_miss(t.root, "boom()")
    assert claim.leader
    claim.complete(R("ok"), 0.1)
    assert t.lookup(["boom()"]).result.observation == "ok"


def test_a_waiter_claims_an_abandoned_call_again_and_executes_it():
    """A leader that gives up without a verdict (a speculative call cut short) leaves nothing recorded and
    no error: the waiter becomes the leader, runs the call and records it."""
    t = PrefixTree("task", "d")
    claim = t.acquire_miss(t.root, "slow()")
    out = {}

    def follower():
        retry = t.acquire_miss(t.root, "slow()", timeout=10)
        out["leader"] = retry.leader
        if retry.leader:
            retry.complete(R("ran here"), 0.1)

    th = threading.Thread(target=follower)
    th.start()
    deadline = time.monotonic() + 5
    while t.stats().coalesced < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    claim.abandon()
    th.join(10)
    assert out == {"leader": True}, "the waiter raised or waited on, instead of claiming the call"
    assert t.lookup(["slow()"]).result.observation == "ran here" and t.in_flight() == 0


def test_follower_times_out_while_leader_is_stuck():
    t = PrefixTree("task", "d")
    claim = t.acquire_miss(t.root, "stuck()")
    with pytest.raises(SingleFlightTimeout, match="stuck"):
        t.acquire_miss(t.root, "stuck()", timeout=0.05)
    claim.fail(RuntimeError("gave up"))
    assert t.in_flight() == 0


def test_already_recorded_call_returns_non_leader_claim_immediately():
    t = make_tree()
    claim = t.acquire_miss(t.root, "a")
    assert not claim.leader and claim.result.observation == "A" and not claim.waited


def test_single_flight_for_readonly_call_records_side_entry():
    t = PrefixTree("task", "d", readonly=readonly)
    claim = t.execute(t.root, "read(x)", lambda: (R("rx"), 0.2))
    assert claim.leader and claim.node is t.root and claim.result.observation == "rx"
    assert t.lookup(["read(x)"]).hit


# -- plans -----------------------------------------------------------------------------------------------


class Handle:
    def __init__(self, size: int, name: str = ""):
        self.size_bytes = size
        self.name = name
        self.released = 0

    def release(self) -> None:
        self.released += 1


def test_plan_returns_nearest_retained_ancestor_and_calls_to_replay():
    t = make_tree()
    abc = t.lookup(["a", "b", "c"]).node
    plan = t.plan(abc)
    assert (plan.source, plan.ancestor, plan.handle, plan.calls) == ("initial", t.root, None, ("a", "b", "c"))
    a = t.lookup(["a"]).node
    h = Handle(10)
    assert t.attach_snapshot(a, h)
    plan = t.plan(abc, restore_s=0.0)
    assert (plan.source, plan.ancestor, plan.handle, plan.calls) == ("snapshot", a, h, ("b", "c"))
    assert t.replay_cost_s(abc) == pytest.approx(5.0)
    assert t.plan(a, restore_s=0.0).calls == ()


def test_selective_snapshot_policy_prefers_expensive_prefixes():
    from bunshin_gym.cache import SnapshotPolicy, SnapshotPolicyConfig
    pol = SnapshotPolicy(SnapshotPolicyConfig(snapshot_s=0.5, restore_s=0.5, bytes_cost_s_per_gib=0.0,
                                              prior_visits=1.0, reuse_factor=1.0))
    t = PrefixTree("task", "d", policy=pol)
    cheap = t.record(t.root, "ls()", R(1), 0.05)
    assert not t.should_snapshot(cheap).retain  # 0.05 s of replay never pays for a 0.5 s snapshot
    costly = t.record(cheap, "build()", R(2), 30.0)
    d = t.should_snapshot(costly)
    assert d.retain and d.replay_s == pytest.approx(30.05 - 0.5)
    # accumulated cost of cheap calls since the last snapshot also counts
    n = t.root
    for i in range(20):
        n = t.record(n, f"step({i})", R(i), 0.1)
    assert t.should_snapshot(n).retain
    assert not t.should_snapshot(t.lookup(["step(0)"], count=False).node).retain
    t.attach_snapshot(n, Handle(1))
    assert not t.should_snapshot(n).retain  # already retained


def test_replays_are_priced_at_what_replaying_costs_not_at_what_executing_took():
    # OSWorld: a step takes 6 s, of which 5.5 s observe the desktop; a replay skips the observation
    from bunshin_gym.cache import SnapshotPolicy, SnapshotPolicyConfig
    pol = SnapshotPolicy(SnapshotPolicyConfig(snapshot_s=1.0, restore_s=0.5, bytes_cost_s_per_gib=0.0,
                                              prior_visits=1.0, reuse_factor=1.0))
    t = PrefixTree("task", "d", policy=pol)
    observed = t.record(t.root, "click(1)", R(1), 6.0)
    assert observed.replay_s == 6.0 and t.should_snapshot(observed).retain
    unobserved = t.record(t.root, "click(2)", R(2), 6.0, replay_s=0.5)
    assert t.replay_cost_s(unobserved) == pytest.approx(0.5)
    d = t.should_snapshot(unobserved)
    assert not d.retain and d.replay_s == 0.0, "replaying 0.5 s never pays for a 1 s dump"
    deeper = t.record(unobserved, "click(3)", R(3), 6.0, replay_s=0.5)
    t.attach_snapshot(unobserved, Handle(1))
    # from the initial state: 0.5 s + two 0.5 s replays, cheaper than restoring the snapshot (2 s) + one replay
    # (priced at the 6 s the steps took, the 2 s restore would have won)
    plan = t.plan(deeper, restore_s=2.0, initial_s=0.5)
    assert plan.source == "initial" and plan.calls == ("click(2)", "click(3)") and plan.est_s == pytest.approx(1.5)
    with pytest.raises(ValueError, match="replay_s"):
        t.record(t.root, "click(4)", R(4), 1.0, replay_s=-1.0)


def test_no_snapshot_is_dumped_where_it_cannot_fit_the_budget():
    from bunshin_gym.cache import SnapshotPolicy, SnapshotPolicyConfig, SnapshotPool
    pol = SnapshotPolicy(SnapshotPolicyConfig(snapshot_s=0.5, restore_s=0.5, est_snapshot_bytes=300 << 20))
    for budget, worth_it in ((None, True), (400 << 20, True), (200 << 20, False), (0, False)):
        t = PrefixTree("task", "d", policy=pol, pool=SnapshotPool(budget))
        d = t.should_snapshot(t.record(t.root, "build()", R(2), 30.0))  # 30 s of replay: worth a snapshot
        assert d.retain == worth_it, (budget, d)
        assert worth_it or "exceeds the budget" in d.reason  # budget 0 turns snapshots off: nothing is dumped


def test_policy_weighs_memory_and_visits():
    from bunshin_gym.cache import SnapshotPolicy, SnapshotPolicyConfig
    cfg = SnapshotPolicyConfig(snapshot_s=0.0, restore_s=0.0, bytes_cost_s_per_gib=10.0,
                               est_snapshot_bytes=1 << 30, prior_visits=1.0, reuse_factor=1.0)
    pol = SnapshotPolicy(cfg)
    assert not pol.decide(replay_s=5.0, hits=0).retain  # 5 s saved once < 10 s for a GiB
    assert pol.decide(replay_s=5.0, hits=2).retain      # 3 expected visits * 5 s > 10 s


def test_retained_snapshots_nobody_restores_make_the_policy_retain_less():
    """Where live workspaces already hold the states rollouts come back to, retained snapshots go unused:
    the policy scales its prior visits by how often they were restored, and trusts them again on restores."""
    from bunshin_gym.cache import SnapshotPolicy, SnapshotPolicyConfig
    cfg = SnapshotPolicyConfig(snapshot_s=1.0, restore_s=0.0, bytes_cost_s_per_gib=0.0, prior_visits=1.0,
                               reuse_factor=1.0, use_prior=2.0)
    pol = SnapshotPolicy(cfg)
    t = PrefixTree("task", "d", policy=pol)
    n = t.root
    for i in range(6):
        n = t.record(n, f"calc({i})", R(i), 4.0)
        assert t.should_snapshot(n).retain  # 4 s of replay > a 1 s dump, down to 2/7 of a visit
        t.attach_snapshot(n, Handle(1))
    assert pol.use_rate == pytest.approx(2 / 8)
    m = t.record(n, "calc(6)", R(6), 4.0)
    d = t.should_snapshot(m)
    assert not d.retain and d.expected_visits == pytest.approx(0.25)  # six dumps, none restored
    assert t.should_snapshot(t.record(m, "calc(7)", R(7), 4.0)).retain  # 8 s of replay since the last one
    for _ in range(4):
        pol.observe_restored()
    assert pol.use_rate == pytest.approx(6 / 8) and t.should_snapshot(m).retain
    for _ in range(4):
        pol.observe_restored()
    assert pol.use_rate == 1.0  # capped: restores never make a never-hit node expect more than prior_visits
    assert SnapshotPolicy(SnapshotPolicyConfig(use_prior=None)).use_rate == 1.0
    with pytest.raises(ValueError, match="use_prior"):
        SnapshotPolicy(SnapshotPolicyConfig(use_prior=0))


def test_the_first_measurement_replaces_the_policys_priors():
    """A prior is a guess made before this machine and env were seen: the first measured snapshot (a task's
    initial one counts) replaces it, later ones are averaged in. A browser workspace dumps ~450 MB, seven
    times the 64 MB prior, which an average weighting the prior 0.8 would have trusted for several dumps."""
    from bunshin_gym.cache import SnapshotPolicy, SnapshotPolicyConfig
    pol = SnapshotPolicy(SnapshotPolicyConfig(snapshot_s=0.6, restore_s=0.5, est_snapshot_bytes=64 << 20,
                                              bytes_cost_s_per_gib=2.0, size_ewma_alpha=0.2, use_prior=None))
    assert pol.decide(replay_s=2.0, hits=0).retain  # by the priors: 1.5 s saved > 0.6 + 0.125 s
    pol.observe_initial(size_bytes=450 << 20, snapshot_s=2.0)
    d = pol.decide(replay_s=2.0, hits=0)
    assert pol.est_snapshot_bytes == 450 << 20 and d.cost_s == pytest.approx(2.0 + 450 / 1024 * 2.0)
    assert not d.retain
    pol.observe_timing(snapshot_s=1.0, restore_s=0.9)
    assert pol.est_restore_s == pytest.approx(0.9)  # the first restore measured
    assert pol.decide(replay_s=2.0, hits=0).cost_s == pytest.approx(0.8 * 2.0 + 0.2 * 1.0 + 450 / 1024 * 2.0)


def test_what_a_sync_replays_behind_the_think_time_is_not_worth_a_snapshot():
    """A background sync replays each hit's call while the policy thinks about the next step: calls faster
    than the think time cost a future visitor nothing a snapshot could save (WebArena: 0.3 s calls, 2 s think;
    its retained snapshots were never restored), slower ones only what exceeds it (OSWorld: 3-4 s calls)."""
    from bunshin_gym.cache import SnapshotPolicy, SnapshotPolicyConfig
    pol = SnapshotPolicy(SnapshotPolicyConfig(snapshot_s=0.5, restore_s=0.5, bytes_cost_s_per_gib=0.0,
                                              prior_visits=1.0, use_prior=None))
    t = PrefixTree("task", "d", policy=pol)
    n = t.root
    for i in range(4):
        n = t.record(n, f"click({i})", R(i), 0.3)
    assert t.should_snapshot(n).retain  # 1.2 s replayed on the critical path vs a 0.5 s restore + 0.5 s dump
    assert pol.est_think_s == 0.0
    pol.observe_think(2.0)
    assert pol.est_think_s == 2.0 and not t.should_snapshot(n, pol.est_think_s).retain
    slow = t.record(t.root, "save()", R("saved"), 4.0)
    d = t.should_snapshot(slow, pol.est_think_s)
    assert d.retain and d.replay_s == pytest.approx(4.0 - 2.0)  # what the sync cannot hide, the restore hidden


def test_plan_prefers_replaying_cheap_calls_and_takes_a_ready_standby():
    t = PrefixTree("task", "d")
    a = t.record(t.root, "a", R("A"), 10.0)
    b = t.record(a, "b", R("B"), 0.2)
    c = t.record(b, "c", R("C"), 0.3)
    t.attach_snapshot(a, Handle(1))
    t.attach_snapshot(c, Handle(1))
    p = t.plan(c, restore_s=0.5)
    assert (p.source, p.ancestor, p.calls) == ("snapshot", c, ())
    t.drop_snapshot(c)
    p = t.plan(c, restore_s=0.5)
    assert (p.source, p.ancestor, p.calls) == ("snapshot", a, ("b", "c")) and p.est_s == pytest.approx(1.0)
    p = t.plan(c, restore_s=0.5, standby_s=0.01, has_standby=lambda n: n is a)
    assert (p.source, p.ancestor, p.calls) == ("standby", a, ("b", "c")) and p.est_s == pytest.approx(0.51)
    # a standby of the initial state loses to a retained snapshot when the replay from the root is long
    p = t.plan(c, restore_s=0.5, has_standby=lambda n: n is t.root)
    assert p.source == "snapshot"
    t.drop_snapshot(a)
    p = t.plan(c, initial_s=1.0)
    assert (p.source, p.ancestor, p.calls, p.est_s) == ("initial", t.root, ("a", "b", "c"), pytest.approx(11.5))
    assert t.plan(c, initial_s=1.0, has_standby=lambda n: True).source == "standby"
    # a live workspace at an ancestor replays from there, unless a restore nearer the node is cheaper
    assert (t.plan(c, live=b).source, t.plan(c, live=b).calls) == ("live", ("c",))
    t.attach_snapshot(b, Handle(1))
    assert (t.plan(c, live=t.root).source, t.plan(c, live=t.root).ancestor) == ("snapshot", b)
    assert t.plan(a, live=c).source == "initial"  # a live workspace below the node is no start


def test_forget_drops_a_subtree_its_snapshots_and_its_hits():
    t = PrefixTree("task", "d")
    a = t.record(t.root, "a", R("A"), 1.0)
    b = t.record(a, "b", R("B"), 1.0)
    t.record(b, "c", R("C"), 1.0)
    x = t.record(t.root, "x", R("X"), 1.0)
    hb = Handle(1)
    t.attach_snapshot(b, hb)
    assert t.forget(a) == 3 and len(t) == 2
    assert hb.released == 1 and b.snapshot is None
    assert not t.lookup(["a"]).hit and t.lookup(["x"]).node is x
    assert t.forget(a) == 0, "forgetting twice is harmless"
    with pytest.raises(ValueError, match="root"):
        t.forget(t.root)


def test_expected_cost_of_a_call_is_what_it_cost_in_other_states():
    t = PrefixTree("task", "d")
    x = t.record(t.root, "x", R("X"), 0.2)
    t.record(t.root, "click", R("C1"), 3.0)
    t.record(x, "click", R("C2"), 1.0)
    assert t.expected_cost_s("click", default=0.1) == pytest.approx(2.0)
    assert t.expected_cost_s("never-run", default=0.1) == 0.1


def test_expected_cost_in_a_state_is_what_calls_of_its_cost_class_cost():
    """A click on an element of a role that times out costs the timeout, whatever its id, although the same
    id cost little in another state (the class comes from the state the call would run in)."""
    t = PrefixTree("task", "d")
    t.cost_class = lambda sig, obs: f"{sig.split()[0]} {obs['roles'].get(sig.split()[1], 'unlisted')}"
    page = lambda **roles: CachedStep({"roles": roles})  # noqa: E731 - the observation the class reads
    t.set_root_result(page(**{"1": "link", "2": "option", "3": "option"}))
    menu = t.record(t.root, "click 1", page(**{"1": "link"}), 0.3)  # a page load
    t.record(t.root, "click 2", page(), 3.1)  # an <option>: the click waits out its timeout
    t.record(t.root, "click 3", page(), 2.9)
    t.record(menu, "click 2", page(), 0.2)  # the same id, a link on another page: fast
    other = t.record(menu, "click 4", page(**{"5": "option"}), 0.2)
    assert t.expected_cost_s("click 5", default=0.1, at=other) == pytest.approx(3.0), "an option: its class"
    assert t.expected_cost_s("click 2", default=0.1) == pytest.approx(1.65), "no state: the id's mean"
    assert t.expected_cost_s("click 1", default=0.1, at=other) == pytest.approx(0.2), "not on the page: its class"
    button = t.record(menu, "click 6", page(**{"1": "button"}), 0.2)
    assert t.expected_cost_s("click 1", default=0.1, at=button) == pytest.approx(0.3), "no class yet: the id's"


def _kb(tag: str) -> CachedStep:
    return CachedStep(observation={"screenshot": bytes(1000), "tag": tag})  # 1001 bytes


def test_results_past_the_budget_forget_the_least_recently_used_leaves_first():
    from bunshin_gym.cache.tree import ResultLedger

    t = PrefixTree("task", "d", results=ResultLedger(budget_bytes=3100))
    for sig in ("a", "b", "c"):
        t.record(t.root, sig, _kb(sig), 1.0)
    assert t.results.used == 3003 and t.stats().evicted == 0
    assert t.lookup(["a"]).hit  # a is now more recently used than b
    t.record(t.root, "d", _kb("d"), 1.0)
    assert not t.lookup(["b"]).hit  # the oldest leaf went
    assert all(t.lookup([s]).hit for s in "acd")
    assert t.stats().evicted == 1 and t.results.used == 3003 and len(t) == 4  # root + a, c, d


def test_a_closed_cache_keeps_no_recorded_result_alive():
    """The soak's host memory stayed 4.4 GB above its start after close: the ledger's leaf list still held
    every node (and its screenshot) of the trees the cache had forgotten."""
    import gc
    import weakref

    import numpy as np

    cache = PrefixCache()
    t = cache.tree("task", "d")
    screenshot = np.zeros((720, 1280, 3), np.uint8)
    t.record(t.root, "a", CachedStep(observation={"screenshot": screenshot}), 1.0)
    alive = weakref.ref(screenshot)
    del screenshot, t
    cache.close()
    gc.collect()
    assert alive() is None and cache.results.used == 0


def test_a_node_whose_children_were_forgotten_goes_next_and_snapshots_or_flights_are_kept():
    from bunshin_gym.cache.tree import ResultLedger

    t = PrefixTree("task", "d", results=ResultLedger(budget_bytes=4100))
    a = t.record(t.root, "a", _kb("a"), 1.0)
    t.record(a, "a2", _kb("a2"), 1.0)  # a is internal: not a candidate while a2 lives
    kept = t.record(t.root, "k", _kb("k"), 1.0)
    t.attach_snapshot(kept, Handle(1))
    flying = t.record(t.root, "f", _kb("f"), 1.0)
    claim = t.acquire_miss(flying, "g")
    assert claim.leader
    t.record(t.root, "n", _kb("n"), 1.0)  # over: a2 (oldest leaf) goes, then a, its parent, became a leaf
    t.record(t.root, "m", _kb("m"), 1.0)
    assert not t.lookup(["a", "a2"]).hit and not t.lookup(["a"]).hit
    assert t.lookup(["k"]).hit and t.lookup(["f"]).hit and t.lookup(["n"]).hit and t.lookup(["m"]).hit
    claim.complete(_kb("g"), 1.0)
    assert t.lookup(["f", "g"]).hit


def test_forgetting_a_subtree_or_replacing_a_tree_uncounts_its_results():
    cache = PrefixCache()
    t = cache.tree("task", "d")
    a = t.record(t.root, "a", _kb("a"), 1.0)
    t.record(a, "b", _kb("b"), 1.0)
    t.record(t.root, "c", _kb("c"), 1.0)
    assert cache.results.used == 3003
    t.forget(a)
    assert cache.results.used == 1001
    cache.adopt(cache.new_tree("task", "d"))  # replaces t
    assert cache.results.used == 0
