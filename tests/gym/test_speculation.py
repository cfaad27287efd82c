"""Spec Tool Selector, trajectory files and tail selection."""

from __future__ import annotations

import json
import os
import random

import pytest

from bunshin_gym.speculation import (
    SampleProgress,
    SelectorConfig,
    SelectorFormatError,
    SelectorNotTrained,
    SpecToolSelector,
    TailConfig,
    TailSelector,
    TimingModel,
    Trajectory,
    TrajectoryFormatError,
    TrajectoryStep,
    read_trajectories,
    write_trajectories,
)


def synthetic_corpus(n: int, seed: int) -> list[Trajectory]:
    """Structured rollouts a window-limited frequency model cannot fully predict.

    Each rollout opens one of several products (chosen at step 0), browses with a product-independent
    stretch of calls, then acts on the product it opened (a long-range dependency), with some noise.
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        task = f"shop-{rng.randrange(3)}"
        product = rng.randrange(4)
        steps = [f"open(product={product})"]
        steps += ["scroll(down)", "wait(1)", "scroll(down)", "wait(1)"]
        if rng.random() < 0.3:
            steps.append("read(reviews)")
        steps += [f"add_to_cart(product={product})", "go(cart)", f"set_qty(product={product}, qty={1 + int(task[-1])})",
                  "checkout()"]
        if rng.random() < 0.1:  # noise
            j = rng.randrange(1, len(steps))
            steps[j] = f"noise({rng.randrange(50)})"
        out.append(Trajectory(task, tuple(TrajectoryStep(s, rng.random() * 3, rng.random()) for s in steps),
                              rollout_id=f"r{i}", iteration=0))
    return out


@pytest.fixture(scope="module")
def trained() -> SpecToolSelector:
    return SpecToolSelector().fit(synthetic_corpus(300, 0))


def test_selector_beats_frequency_fallback_on_structured_corpus(trained):
    test = synthetic_corpus(100, 1)
    sel = trained
    assert sel.model is not None
    model_acc = sel.accuracy(test)
    ngram_acc = sel.accuracy(test, source="ngram")
    assert model_acc > ngram_acc + 0.1, (model_acc, ngram_acc)
    assert model_acc > 0.8
    rep = sel.evaluate(test, k=3, chain_len=3)
    ngram_rep = sel.evaluate(test, k=3, chain_len=3, source="ngram")
    assert rep.source == "model" and ngram_rep.source == "ngram"
    assert rep.chain_match > ngram_rep.chain_match and rep.topk >= rep.top1


def test_chain_predicts_k_calls_and_stops_at_rollout_end(trained):
    sel = trained
    hist = ["open(product=2)", "scroll(down)", "wait(1)", "scroll(down)", "wait(1)"]
    chain = sel.predict_chain(hist, 3, task_id="shop-1")
    assert [p.signature for p in chain] == ["add_to_cart(product=2)", "go(cart)", "set_qty(product=2, qty=2)"]
    assert chain[0].chain_prob >= chain[-1].chain_prob and all(p.source == "model" for p in chain)
    full = hist + ["add_to_cart(product=2)", "go(cart)", "set_qty(product=2, qty=2)", "checkout()"]
    assert sel.predict_chain(full, 3, task_id="shop-1") == [], "rollouts end after checkout()"
    assert len(sel.predict_chain(hist, 3, task_id="shop-1", min_chain_prob=1.01)) == 0


def test_scarce_data_uses_the_ngram_fallback():
    sel = SpecToolSelector(SelectorConfig(min_train_examples=1000)).fit(synthetic_corpus(5, 0))
    assert sel.model is None
    preds = sel.predict(["open(product=1)"], "shop-0", k=2)
    assert preds and preds[0].source == "ngram" and preds[0].signature == "scroll(down)"


def test_untrained_selector_says_how_to_fix():
    with pytest.raises(SelectorNotTrained, match="fit"):
        SpecToolSelector().predict([], None)


def test_save_load_round_trip_predicts_identically(tmp_path, trained):
    test = synthetic_corpus(30, 1)
    sel = trained
    path = tmp_path / "sel.pkl"
    sel.save(path)
    sel2 = SpecToolSelector.load(path)
    assert sel2.config == sel.config
    for t in test:
        for i in range(len(t.steps)):
            h = t.signatures[:i]
            assert sel.predict(h, t.task_id, 3) == sel2.predict(h, t.task_id, 3)
            assert sel.predict(h, t.task_id, 3, source="ngram") == sel2.predict(h, t.task_id, 3, source="ngram")
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(SelectorFormatError):
        SpecToolSelector.load(tmp_path / "junk.pkl")


def test_trajectory_jsonl_round_trip_and_errors(tmp_path):
    trajs = synthetic_corpus(5, 3)
    p = tmp_path / "t.jsonl"
    assert write_trajectories(p, trajs) == 5
    write_trajectories(p, trajs[:1], append=True)
    back = read_trajectories(p)
    assert back[:5] == trajs and back[5] == trajs[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "t", "steps": [{"signature": "a", "exec_s": -1}]}) + "\n")
    with pytest.raises(TrajectoryFormatError, match=r"bad.jsonl:1: steps\[0\]: exec_s"):
        read_trajectories(bad)
    bad.write_text('# comment\n\n{"steps": []}\n')
    with pytest.raises(TrajectoryFormatError, match="bad.jsonl:3: 'task_id'"):
        read_trajectories(bad)
    bad.write_text("{oops\n")
    with pytest.raises(TrajectoryFormatError, match="not valid JSON"):
        read_trajectories(bad)


def test_tail_selector_picks_historically_slow_samples_and_long_calls():
    hist = []
    for r in range(5):
        # "slow" task: 10 steps of 5 s; "fast" task: 3 steps of 1 s
        hist.append(Trajectory("slow", tuple(TrajectoryStep("build()" if i % 2 else "edit()", 2.0, 3.0 if i % 2 else 0.1)
                                              for i in range(10))))
        hist.append(Trajectory("fast", tuple(TrajectoryStep("ls()", 0.9, 0.1) for _ in range(3))))
    tm = TimingModel().fit(hist)
    sel = TailSelector(tm, TailConfig(quantile=0.5, min_call_exec_s=1.0))
    samples = [SampleProgress(f"s{i}", "slow" if i < 2 else "fast", steps_done=1, elapsed_s=1.0) for i in range(8)]
    samples.append(SampleProgress("late-slow", "slow", steps_done=9, elapsed_s=60.0))
    samples.append(SampleProgress("new", "never-seen", 0))
    chosen = sel.select(samples)
    assert {"s0", "s1", "new"} <= chosen and not any(s in chosen for s in ("s2", "s3", "s7"))
    assert tm.remaining_s("slow", 0) == pytest.approx(10 * 2 + 5 * 3.0 + 5 * 0.1)
    assert sel.worth_speculating("build()") and not sel.worth_speculating("ls()")
    assert sel.worth_speculating("build(target=all)"), "unknown signature falls back to its tool's timing"
    assert TailSelector(tm, TailConfig(unknown_is_tail=False)).select([SampleProgress("n", "never", 0)]) == frozenset()
    with pytest.raises(ValueError, match="quantile"):
        TailSelector(tm, TailConfig(quantile=1.5))


def test_speculative_chain_first_mismatch_aborts_the_rest():
    from bunshin_gym.speculation import ChainOutcome, SpeculationStats, SpeculativeChain
    stats = SpeculationStats()
    ch = SpeculativeChain(("a", "b", "c"), base="node-7")
    stats.start(ch)
    for actual, want in [("a", ChainOutcome.MATCH), ("x", ChainOutcome.MISMATCH), ("c", ChainOutcome.EXHAUSTED)]:
        out = ch.check(actual)
        stats.observe(out, ch, exec_s=1.5)
        assert out is want
    assert ch.position == 1 and ch.aborted and ch.pending == ()
    assert (stats.matched, stats.aborted, stats.hidden_s, stats.precision) == (1, 1, 1.5, pytest.approx(1 / 3))
    full = SpeculativeChain(["p", "q"])
    assert [full.check(s) for s in ("p", "q", "r")] == [ChainOutcome.MATCH, ChainOutcome.MATCH, ChainOutcome.EXHAUSTED]


def test_two_class_model_predicts_like_sklearn():
    import numpy as np
    from bunshin_gym.speculation import features
    trajs = [Trajectory.from_signatures("t", ["a"] * (1 + i % 3)) for i in range(60)]
    sel = SpecToolSelector(SelectorConfig(min_train_examples=10)).fit(trajs)
    assert sel.model is not None and len(sel.classes_) == 2
    for h in ([], ["a"], ["a", "a"], ["a", "a", "a"]):
        f = features(h, "t", sel.config)
        ref = sel.model.predict_proba(sel._hasher_().transform([f]))[0]
        assert np.allclose(sel._proba(f), ref)


def test_the_ngram_fallback_is_only_as_sure_as_its_evidence():
    """A context seen once must not predict its call with certainty: the speculator weighs a run-ahead (and a
    mismatch's restore) by this probability, and one oracle trajectory says little about a sampled policy."""
    oracle = Trajectory.from_signatures("t", ["open(a)", "click(b)", "type(c)"])
    once = SpecToolSelector(SelectorConfig(model="ngram")).fit([oracle])
    assert sum(p for _, p in once.fallback.distribution(["open(a)"], "t")) == pytest.approx(1 / 2)
    assert once.predict(["open(a)"], "t")[0].signature == "click(b)"
    assert 0.4 < once.predict(["open(a)"], "t")[0].prob <= 0.5
    often = SpecToolSelector(SelectorConfig(model="ngram")).fit([oracle] * 4)
    assert sum(p for _, p in often.fallback.distribution(["open(a)"], "t")) == pytest.approx(4 / 5)
    assert 0.7 < often.predict(["open(a)"], "t")[0].prob <= 0.8


def test_idle_cpus_reads_the_idle_share_of_proc_stat_since_the_oldest_sample(tmp_path):
    from bunshin_gym.runtime import IdleCpus

    stat = tmp_path / "stat"
    gauge = IdleCpus(window_s=60.0, stat_path=str(stat))
    stat.write_text("cpu  100 0 0 90 10 0 0 0 0 0\ncpu0 1 2 3\n")
    assert gauge() is None, "one sample says nothing about the recent load"
    stat.write_text("cpu  150 0 0 130 20 0 0 0 0 0\n")  # +50 busy, +50 idle/iowait
    assert gauge() == pytest.approx(os.cpu_count() * 0.5)
    stat.write_text("cpu  250 0 0 130 20 0 0 0 0 0\n")  # +100 busy since: the window still starts at sample 1
    assert gauge() == pytest.approx(os.cpu_count() * 50 / 200)
    assert IdleCpus(stat_path=str(tmp_path / "missing"))() is None


def test_speculation_waits_for_idle_cpu():
    from bunshin_gym.speculator import Speculator

    class Selector:
        calls = 0

        def predict_chain(self, history, k, task_id):
            Selector.calls += 1
            return []

    idle = [0.2]
    spec = Speculator(Selector(), 3, min_idle_cpus=0.5, idle_cpus=lambda: idle[0])
    diag: dict = {}
    args = (None, "t", [], None, None, None, lambda s: False, 0.0, diag)
    assert spec.start(*args) is False
    assert diag["speculation"] == {"skipped": "0.20 idle CPUs < 0.5"} and Selector.calls == 0
    idle[0] = 1.5
    diag.clear()
    assert spec.start(*args) is False and Selector.calls == 1, "enough idle CPU: the selector is asked"
    assert "speculation" not in diag


def test_a_chain_that_pays_only_without_replay_retains_its_start_state_first():
    from bunshin_gym.cache import CachedStep, PrefixTree, SnapshotPolicy, SnapshotPolicyConfig
    from bunshin_gym.speculation.selector import Prediction
    from bunshin_gym.speculator import Speculator

    class Selector:
        prob = 0.6

        def predict_chain(self, history, k, task_id):
            return [Prediction("c", Selector.prob, Selector.prob, "ngram")]

    tree = PrefixTree("t", "d", policy=SnapshotPolicy(SnapshotPolicyConfig(restore_s=1.0)))
    node = tree.record(tree.record(tree.root, "a", CachedStep("a"), 1.0), "b", CachedStep("b"), 1.0)
    events: list = []
    workspace = object()

    def execute(ws, sig):
        events.append(("execute", ws, sig))
        raise RuntimeError("the test's chain ends here")

    def start(spec, retain):
        diag: dict = {}
        started = spec.start(tree, "t", ["a", "b"], node, lambda: (workspace, node), execute, lambda s: False,
                             tree.replay_cost_s(node), diag, retain=retain)
        spec.stop()
        return started, diag

    def retain(ws, at):
        events.append(("retain", ws, at))

    # p x exec = 0.6 x 1 s; a mismatch: 0.4 x (1 s restore + 2 s replay) = 1.2 s, or 0.4 s with no replay
    spec = Speculator(Selector(), 1, discard=lambda ws: None)
    assert start(spec, None)[0] is False and spec.counters["skipped"] == 1 and not events
    started, diag = start(spec, retain)
    assert started and diag["speculation"] == {"started": ["c"], "retained_first": True}
    assert events == [("retain", workspace, node), ("execute", workspace, "c")], "retained before the chain ran"
    assert spec.counters["retained_first"] == 1
    events.clear()
    Selector.prob = 0.25  # 0.25 s < 0.75 x 1 s restore: not worth it even with no replay, so nothing is retained
    assert start(spec, retain)[0] is False and not events and spec.counters["skipped"] == 2
