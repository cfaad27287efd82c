"""The runtime under BunshinWebArena-v0: failures leave the env usable and the tree clean, the differential
check catches a real key collision, the live workspace is handed out only after its background snapshot,
evaluations that could not run are never cached, standby clones, and the env under Gymnasium's vector modes."""
from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

import bunshin_gym  # noqa: F401 - registers the envs
from bunshin_gym.cache import CacheConfig, SnapshotPolicyConfig
from bunshin_gym.runtime import runtime

from .test_webarena_gym import TASK, _digest, _run

pytestmark = [pytest.mark.criu, pytest.mark.browser]
ENV_ID = "BunshinWebArena-v0"


def _oracle(task_id: str = TASK) -> list[str]:
    from envs.webarena.env import WebArenaAdapter

    a = WebArenaAdapter()
    return a.oracle_actions(a.load_task(task_id))


@pytest.fixture
def retain_all():
    """A cold prefix cache that retains every executed state (SnapshotPolicyConfig.retain_all)."""
    rt = runtime()
    default = rt.prefix_cache.config
    rt.reset_cache(CacheConfig(policy=SnapshotPolicyConfig(retain_all=True)))
    yield rt
    rt.reset_cache(default)


def test_the_live_workspace_is_handed_out_only_after_its_background_snapshot(retain_all):
    """An evaluator or user call on the live workspace must not race the dump of the state just executed
    (an evaluator that saves a file would end up inside the retained snapshot)."""
    env = gym.make(ENV_ID, task_id=TASK, diagnostics=True)
    try:
        env.reset()
        episode = env.unwrapped.episode  # the cold cache's first tree: its policy sizes dumps by the task's own
        assert episode.tree.policy.est_snapshot_bytes == episode.task_snapshot.snapshot.size_bytes() > 64 << 20
        time.sleep(0.5)  # the policy thinks about its first action; the snapshot rule weighs replay against it
        _, _, _, _, info = env.step("scroll [down]")
        assert info["bunshin"]["cache"] == "miss" and info["bunshin"]["snapshot_scheduled"]
        assert 0.5 <= episode.tree.policy.est_think_s < 5, "the first think is timed from reset's return"
        env.unwrapped.live_workspace()
        assert env.unwrapped.episode.node.snapshot is not None, "handed out while the dump was still running"
    finally:
        env.close()


def test_a_damaged_retained_snapshot_is_dropped_and_the_state_replayed(retain_all):
    actions = _oracle()[:3]
    env = gym.make(ENV_ID, task_id=TASK, diagnostics=True, background_sync=False)  # the miss must restore
    fresh = gym.make(ENV_ID, task_id=TASK, cache=False)
    try:
        expected = _run(fresh, actions)
        env.reset()
        for a in actions[:2]:
            env.step(a)
        u = env.unwrapped
        u.live_workspace()  # waits for the background snapshot of the second state
        node = u.episode.node
        snap = node.snapshot_handle.snapshot
        image = max((snap.dir / "images").iterdir(), key=lambda p: p.stat().st_size)
        image.write_bytes(image.read_bytes()[: image.stat().st_size // 2])
        # The miss must read the damaged image: no clone restored before the damage, and replaying the prefix
        # from the live workspace or a standby of the initial state priced above a restore (else the planner
        # may rightly prefer them on a machine where restores are slow).
        runtime().standby.discard(snap)
        node.replay_s = node.parent.replay_s = 100.0
        env.reset()
        trace = [_digest(env.unwrapped.episode.last_obs)]
        for a in actions:
            obs, r, term, trunc, info = env.step(a)
            trace.append((_digest(obs), r, term, trunc))
        assert info["bunshin"]["cache"] == "miss"
        assert info["bunshin"]["restore"]["replayed"] >= 1, "restored from an older state and replayed"
        assert node.snapshot is None, "the damaged snapshot was dropped from the tree"
        assert trace == expected
    finally:
        fresh.close()
        env.close()


def test_a_damaged_initial_snapshot_raises_reset_needed_and_reset_rebuilds_it():
    actions = ["scroll [down]"]
    env = gym.make(ENV_ID, task_id=TASK, cache=False)
    try:
        expected = _run(env, actions)
        env.close()
        env = gym.make(ENV_ID, task_id=TASK, cache=True, diagnostics=True, background_sync=False)
        env.reset(options={"task_id": TASK})
        ts = env.unwrapped.episode.task_snapshot
        runtime().standby.discard(ts.snapshot)  # else a clone restored before the damage would be thawed
        image = max((ts.snapshot.dir / "images").iterdir(), key=lambda p: p.stat().st_size)
        image.write_bytes(b"")
        history = list(env.unwrapped.history)
        with pytest.raises(gym.error.ResetNeeded, match="(?s)initial snapshot failed.*call reset"):
            env.step("goto [http://127.0.0.1:7770/cart]")
        assert env.unwrapped.history == history, "the failed call is not in the history"
        with pytest.raises(gym.error.ResetNeeded):
            env.step("scroll [down]")
        assert env.unwrapped.episode.tree.lookup(["goto [http://127.0.0.1:7770/cart]"], count=False).hit is False
        assert _run(env, actions) == expected, "reset built a new task snapshot"
    finally:
        env.close()


def test_a_key_collision_is_caught_by_the_differential_check():
    """Mislabel a navigation as read-only: the tree then keys [click, scroll] and [scroll] as one state, a
    real collision between valid actions. Without the cache the mislabel is harmless (the comparison
    passes); with it the cached trajectory differs from fresh execution and the check must say so."""
    probe = gym.make(ENV_ID, task_id=TASK, cache=False)
    try:
        obs, _ = probe.reset()
        adapter = probe.unwrapped.adapter
        link = next(a for a in adapter.candidate_actions(obs) if a.startswith("click"))
        truth = _run(probe, [link, "scroll [down]"])
    finally:
        probe.close()
    assert truth[1][0][0] != truth[0][0], "the link navigates"

    def mislabelled(cache: bool):
        env = gym.make(ENV_ID, task_id=TASK, cache=cache)
        a = env.unwrapped.adapter
        real = a.is_read_only
        a.is_read_only = lambda sig: sig == a.canonical_action(link) or real(sig)  # also a new identity
        return env

    for cache, should_match in ((False, True), (True, False)):
        env = mislabelled(cache)
        try:
            _run(env, ["scroll [down]"])  # records the scroll at the initial state
            served = _run(env, [link, "scroll [down]"])
        finally:
            env.close()
        assert (served == truth) is should_match, f"cache={cache}"


def test_an_evaluation_that_could_not_run_is_not_cached(monkeypatch):
    """A truncation whose evaluator timed out scores 0 for that episode but is not memoised: the next episode
    reaching the same state is evaluated for real."""
    from envs.webarena.env import WebArenaAdapter

    actions = _oracle()[:-1]  # everything but the final stop: truncated at the end state
    kw = dict(task_id=TASK, max_steps=len(actions), step_timeout_s=8.0, diagnostics=True)
    real_evaluate = WebArenaAdapter.evaluate
    reference = gym.make(ENV_ID, task_id=TASK, max_steps=len(actions), cache=False)
    try:
        truth = _run(reference, actions)[-1][1]
    finally:
        reference.close()
    assert truth == 1.0, "the oracle's end state passes the evaluation"
    monkeypatch.setattr(WebArenaAdapter, "evaluate",
                        lambda self, task, answer, call: call("exec", argv=["sleep", "60"], timeout_s=70))
    env = gym.make(ENV_ID, **kw)
    try:
        env.reset()
        for a in actions:
            _, r, term, trunc, info = env.step(a)
        assert trunc and r == 0.0 and "could not run" in info["bunshin"]["evaluation_error"]
        monkeypatch.setattr(WebArenaAdapter, "evaluate", real_evaluate)
        assert _run(env, actions)[-1][1] == truth
    finally:
        env.close()


def test_a_timed_out_step_is_not_recorded_and_the_episode_goes_on():
    """`step_timeout_s`: a call that does not answer in time (here: the site never answers) comes back as
    last_action_error; the workspace, maybe mid-call, is discarded, nothing is recorded or kept in the
    history, and the next step continues from the state before it."""
    env = gym.make(ENV_ID, task_id=TASK, step_timeout_s=6.0, diagnostics=True)
    fresh = gym.make(ENV_ID, task_id=TASK, cache=False)
    hang = "goto [http://127.0.0.1:7770/?never-answered]"  # the site is stopped (SIGSTOP) before it
    try:
        expected = _run(fresh, ["scroll [down]", "scroll [down]"])
        env.reset()
        env.step("scroll [down]")
        ws = env.unwrapped.live_workspace()
        # (another origin would not do: the browser aborts requests that leave the site at once)
        stopped = ws.exec(["sh", "-c", "for p in /proc/[0-9]*; do grep -q 'envs[.]webarena[.]site' $p/cmdline "
                           "2>/dev/null && kill -STOP ${p#/proc/} && echo ${p#/proc/}; done"])
        assert stopped["stdout"].split(), stopped
        obs, r, term, trunc, info = env.step(hang)
        assert info["bunshin"]["cache"] == "error" and info["last_action_error"].startswith("ExecutorUnreachable"), info
        assert env.unwrapped.history == [env.unwrapped.adapter.canonical_action("scroll [down]")]
        tree = env.unwrapped.episode.tree
        assert not tree.lookup(env.unwrapped.history + [env.unwrapped.adapter.canonical_action(hang)],
                               count=False).hit
        obs, *_ = env.step("scroll [down]")
        assert _digest(obs) == expected[2][0]
    finally:
        fresh.close()
        env.close()


def test_render_never_aliases_a_cached_observation():
    env = gym.make(ENV_ID, task_id=TASK, render_mode="rgb_array")
    try:
        env.reset()
        obs, *_ = env.step("scroll [down]")
        want = obs["screenshot"].copy()
        frame = env.render()
        frame[:] = 0
        env.reset()
        obs, *_ = env.step("scroll [down]")  # a hit
        assert np.array_equal(obs["screenshot"], want) and np.array_equal(env.render(), want)
    finally:
        env.close()


def test_a_directly_built_env_forks_with_its_settings_and_default_task():
    from envs.webarena.env import WebArenaEnv

    env = WebArenaEnv(task_id=TASK, viewport=(800, 600))
    try:
        env.reset()
        (clone,) = env.fork(1)
        try:
            assert clone.unwrapped.adapter.viewport == (800, 600)
            obs, *_ = clone.step("scroll [down]")
            assert obs["screenshot"].shape == (600, 800, 3)
            obs, _ = clone.reset()
            assert clone.unwrapped.task.id == TASK and obs["screenshot"].shape == (600, 800, 3)
        finally:
            clone.close()
    finally:
        env.close()


def test_disable_env_checker_is_honoured():
    def chain(env):
        out = []
        while isinstance(env, gym.Wrapper):
            out.append(type(env).__name__)
            env = env.env
        return out

    on, off = gym.make(ENV_ID, task_id=TASK), gym.make(ENV_ID, task_id=TASK, disable_env_checker=True)
    assert "PassiveEnvChecker" in chain(on) and "PassiveEnvChecker" not in chain(off)
    assert chain(off)[0] == "ForkableWrapper"
    on.close()
    off.close()


def test_a_reset_thaws_a_standby_clone_of_the_initial_snapshot():
    env = gym.make(ENV_ID, task_id=TASK, cache=False, diagnostics=True)
    fresh = gym.make(ENV_ID, task_id=TASK, cache=False)
    try:
        expected = _run(fresh, ["scroll [down]"])
        env.reset()
        ts = env.unwrapped.episode.task_snapshot
        deadline = time.monotonic() + 120
        while not runtime().standby.ready(ts.snapshot, "auto") and time.monotonic() < deadline:
            time.sleep(0.1)
        obs, info = env.reset()
        assert info["bunshin"]["restore"]["source"] == "standby"
        trace = [_digest(obs)]
        obs, r, term, trunc, _ = env.step("scroll [down]")
        trace.append((_digest(obs), r, term, trunc))
        assert trace == expected, "a thawed standby clone continues like a fresh restore"
    finally:
        fresh.close()
        env.close()


def test_after_cache_hits_a_miss_finds_the_live_workspace_in_step():
    """background_sync: the calls served from the tree run on the live workspace while the policy thinks, so
    the miss that follows them restores nothing on the critical path — and still equals a fresh run."""
    actions = _oracle()[:2]
    fresh = gym.make(ENV_ID, task_id=TASK, cache=False)
    env = gym.make(ENV_ID, task_id=TASK, diagnostics=True)
    try:
        expected = _run(fresh, [*actions, "scroll [down]"])
        _run(env, actions)  # records the two calls
        env.reset()
        for a in actions:
            _, _, _, _, info = env.step(a)
            assert info["bunshin"]["cache"] == "hit"
            time.sleep(1.0)  # the policy thinks
        obs, r, term, trunc, info = env.step("scroll [down]")
        assert info["bunshin"]["cache"] == "miss" and "restore" not in info["bunshin"], info["bunshin"]
        assert (_digest(obs), r, term, trunc) == expected[-1]
    finally:
        fresh.close()
        env.close()


def test_a_miss_below_hits_replays_on_the_live_workspace_instead_of_restoring():
    """The restore planner's cheapest start can be the live workspace itself: here it is one call behind the
    episode (another env recorded that call), so the miss replays one call on it — and equals a fresh run."""
    a1, a2 = _oracle()[:2]
    fresh = gym.make(ENV_ID, task_id=TASK, cache=False)
    env = gym.make(ENV_ID, task_id=TASK, diagnostics=True, background_sync=False)
    other = gym.make(ENV_ID, task_id=TASK)
    try:
        runtime().reset_cache()
        expected = _run(fresh, [a1, a2, "scroll [down]"])
        env.reset()
        assert env.step(a1)[4]["bunshin"]["cache"] == "miss"  # env's live workspace holds a1's state
        _run(other, [a1, a2])  # records a2 below it
        assert env.step(a2)[4]["bunshin"]["cache"] == "hit"
        obs, r, term, trunc, info = env.step("scroll [down]")
        assert info["bunshin"]["cache"] == "miss"
        assert info["bunshin"]["restore"]["source"] == "live" and info["bunshin"]["restore"]["replayed"] == 1
        assert (_digest(obs), r, term, trunc) == expected[-1]
    finally:
        for e in (fresh, env, other):
            e.close()


def test_a_shared_record_that_does_not_replay_here_is_executed_here_from_then_on():
    """A record made on another node (Runtime.shared_records) whose replay here gives something else is dropped
    and this process executes that call itself from then on; taking the same record again diverged again, until
    the step failed (seen in `bench scale` on 3 nodes)."""
    pytest.importorskip("ray", reason="the record hub lives in bunshin_gym.cluster (the ray extra)")
    from bunshin_gym.cache import CachedStep
    from bunshin_gym.cluster import RecordHub

    rt = runtime()
    rt.reset_cache()
    hub = rt.shared_records = RecordHub()  # its get/put are what a node's HubRecords forwards to the actor
    env = gym.make(ENV_ID, task_id=TASK, diagnostics=True)
    goto = "goto [http://127.0.0.1:7770/cart]"
    try:
        obs, _ = env.reset()
        # another node's record of `goto` that this node does not reproduce (it saw another page)
        other = dict(obs, url="http://127.0.0.1:7770/elsewhere")
        hub.put(env.unwrapped.episode.tree.key, (goto,), CachedStep(other, info={"last_action_error": ""}), 0.3)
        obs, *_, info = env.step(goto)
        assert info["bunshin"]["cache"] == "hit" and obs["url"].endswith("/elsewhere")  # served as recorded
        obs, _, _, _, info = env.step("scroll [down]")  # needs the live state: the replay of `goto` diverges
        assert info["bunshin"]["diverged"] >= 1 and info["bunshin"]["cache"] == "miss", info["bunshin"]
        assert obs["url"].endswith("/cart") and info["last_action_error"] == ""
        assert env.unwrapped.episode.tree.local_only == {(goto,)}
    finally:
        rt.shared_records = None
        env.close()
        rt.reset_cache()
