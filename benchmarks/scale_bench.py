"""`bunshin bench scale`: one GRPO epoch on 1, 2, 3 Ray nodes (bunshin_gym.cluster), and a model of 256 rollouts.

With no `--address`, each node count gets its own contained local cluster (bunshin_gym.local_cluster: a private
network namespace, each node its own state dir) and the driver runs inside it; with `--address` the epoch runs
once on that cluster with all its nodes. On one machine the nodes share its cores and memory: the measured
rows show placement and correctness (rewards identical to one node, every group on one node so every fork is
local), not speed-up. The model extrapolates to 256 concurrent rollouts on N machines
like the one measured, from the one-node row (see `model`).

Writes OUT/scale.json = {"rows": [{"nodes", "envs", "episodes", "steps_per_s", "peak_mb_per_node",
"local_fork_fraction", "shipped_snapshots", "rewards", "wall_s", "cpu_busy", "hub"}], "fork_across_nodes": {the
costs of one fork onto its own node and onto another by shipping and by replay, cold and warm, from the largest
cluster (see `fork_costs`)}, "model": [...], "args"}
+ OUT/scale.png.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_TASKS = {"BunshinWebArena-v0": ("0", "1", "2", "3", "5", "6"),
                 "BunshinOSWorld-v0": ("calc-rename-header", "calc-add-row", "calc-average")}


@dataclass
class Args:
    env: str = "BunshinWebArena-v0"
    nodes: tuple[int, ...] = (1, 2, 3)
    tasks: tuple[str, ...] = ()
    """task ids (default: six WebArena tasks)"""
    group: int = 4
    """samples per GRPO group"""
    think_median_s: float = 1.0
    perturb_p: float = 0.3
    """samples' chance of a detour per step (StochasticTracePolicy), so a group's samples differ"""
    address: str | None = None
    """a running Ray cluster (default: a contained local one per node count)"""
    target_rollouts: int = 256
    model_nodes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    out: str = "bench-out/scale"
    seed: int = 0
    memory_per_node_gb: float = field(default=0.0)
    """memory of one modelled machine (default: this one's)"""


def epoch(address: str, a: Args) -> dict:
    """Driver: one epoch on the cluster at `address` (run inside the cluster's namespace when local)."""
    import ray

    import bunshin_gym
    from bunshin_gym.cluster import Cluster
    from bunshin_gym.rollout import StochasticTracePolicy, ThinkTimeModel
    from bunshin_gym.runtime import cpu_times

    adapter = bunshin_gym.adapter_for(a.env)
    tasks = list(a.tasks or DEFAULT_TASKS[a.env])
    oracles = {t: adapter.oracle_actions(adapter.load_task(t)) for t in tasks}
    cluster = Cluster(address)
    peaks = [0.0] * len(cluster.hosts)
    stop = threading.Event()

    def sample_memory() -> None:
        while not stop.is_set():
            for i, h in enumerate(cluster.hosts):
                if cluster.alive[i]:
                    try:
                        peaks[i] = max(peaks[i], ray.get(h.memory_mb.remote(), timeout=30))
                    except Exception:  # noqa: BLE001 - a host busy or gone: the next sample
                        pass
            stop.wait(1.0)

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    cpu0 = cpu_times()
    t0 = time.monotonic()
    try:
        results = cluster.run_groups(a.env, tasks, a.group,
                                     lambda t, g: StochasticTracePolicy(oracles[t], perturb_p=a.perturb_p),
                                     think=ThinkTimeModel(a.think_median_s), seed=a.seed, concurrency=a.group)
        wall = time.monotonic() - t0
        cpu1 = cpu_times()
    finally:
        stop.set()
        sampler.join()
        hub = cluster.hub_stats()
        cluster.close()
    steps = sum(len(r.actions) for g in results for r in g.rollouts)
    return {"nodes": len(cluster.hosts), "envs": len(tasks) * a.group, "episodes": len(tasks) * a.group,
            "steps": steps, "wall_s": round(wall, 2), "steps_per_s": round(steps / wall, 3),
            "cpu_busy": round(1 - (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]), 3) if cpu0 and cpu1 else None,
            "peak_mb_per_node": [round(p) for p in peaks],
            "local_fork_fraction": sum(len(g.attempts) == 1 for g in results) / len(results),
            "shipped_snapshots": 0, "placement": {g.task_id: g.node for g in results},
            "rewards": {g.task_id: [r.reward for r in g.rollouts] for g in results}, "hub": hub}


def fork_costs(address: str, a: Args) -> dict:
    """Driver, on a cluster of >= 2 nodes: one fork of an env (after all but its last oracle action) onto its
    own node, and onto another node each way (`Slot.fork`'s `via`): shipped (its live state and task snapshot,
    moved by Ray, restored there) and replayed (that node's task snapshot, then the actions from the shared
    records), each cold (the node lacks the task snapshot: a replay builds it) and warm (it holds it). Cold
    replay needs a third node (a ship leaves its node warm)."""
    import ray

    import bunshin_gym
    from bunshin_gym.cluster import Cluster

    tasks = list(a.tasks or DEFAULT_TASKS[a.env])
    adapter = bunshin_gym.adapter_for(a.env)
    task = max(tasks, key=lambda t: len(adapter.oracle_actions(adapter.load_task(t))))
    actions = adapter.oracle_actions(adapter.load_task(task))
    cluster = Cluster(address)
    try:
        src = cluster.make(a.env, node=0, task_id=task)
        src.reset(seed=a.seed)
        for action in actions[:-1]:
            src.step(action)
        out: dict = {"task": task, "steps_before_fork": len(actions) - 1}
        plan = [("local_s", 0, "auto"), ("ship_cold_s", 1, "ship")]
        if len(cluster.hosts) >= 3:
            plan.append(("replay_cold_s", 2, "replay"))
        plan += [("replay_warm_s", 1, "replay"), ("ship_warm_s", 1, "ship")]
        for name, node, via in plan:
            t0 = time.perf_counter()
            (clone,) = src.fork(1, node=node, via=via)
            out[name] = round(time.perf_counter() - t0, 3)
            if name == "ship_cold_s":
                out["ship"] = {**clone.fork_timings, "transfer_and_rest_s": round(out[name] - sum(
                    v for k, v in clone.fork_timings.items() if k.endswith("_s")), 3)}
            clone.close()
        build_s = ray.get(cluster.hosts[0].position.remote(src.id))["task_build_s"]
        out["task_build_s_on_source"] = round(build_s, 3)
        out["auto_onto_a_cold_node"] = "ship" if cluster.ship_s[a.env] < build_s else "replay"  # Slot.fork's rule
        out["cheaper_across_nodes"] = {
            kind: None if f"replay_{kind}_s" not in out else
            "replay" if out[f"replay_{kind}_s"] <= out[f"ship_{kind}_s"] else "ship" for kind in ("warm", "cold")}
        src.close()
    finally:
        cluster.close()
    return out


def model(row: dict, a: Args, memory_gb: float) -> list[dict]:
    """`target_rollouts` rollouts on N machines like the one that measured `row` (a one-node row).

    A machine runs ceil(target / N) of them; its memory is that many times the measured PSS per running
    rollout; its throughput is what the measured node sustained (its CPUs were the limit: see `cpu_busy`),
    but never more than its rollouts can ask for (one step per think time each)."""
    per_rollout_mb = statistics.median(row["peak_mb_per_node"]) / row["envs"]
    out = []
    for n in a.model_nodes:
        per_node = -(-a.target_rollouts // n)
        mem_mb = per_node * per_rollout_mb
        fits = mem_mb <= memory_gb * 1024 * 0.9
        node_steps = min(row["steps_per_s"], per_node / max(a.think_median_s, 1e-3))
        out.append({"nodes": n, "rollouts_per_node": per_node, "memory_mb_per_node": round(mem_mb),
                    "fits": fits, "steps_per_s": round(n * node_steps, 2) if fits else None})
    return out


def run(a: Args, progress: bool = True) -> dict:
    from forkcore import accounting

    from bunshin_gym.local_cluster import LocalCluster

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, fork = [], None
    if a.address:
        rows.append(epoch(a.address, a))
    for n in ([] if a.address else a.nodes):
        if progress:
            print(f"scale: {n} node(s)", file=sys.stderr, flush=True)
        with LocalCluster(nodes=n) as cluster:
            row_json = cluster.dir / "row.json"
            args_json = json.dumps(asdict(a))
            r = cluster.python(["-m", "benchmarks.scale_bench", "--driver", cluster.address, args_json,
                                str(row_json)], check=False)
            if r.returncode != 0:
                raise RuntimeError(f"the driver on {n} node(s) failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
            rows.append(json.loads(row_json.read_text()))
            if n == max(a.nodes) and n >= 2:
                r = cluster.python(["-m", "benchmarks.scale_bench", "--fork-costs", cluster.address, args_json,
                                    str(row_json)], check=False)
                if r.returncode != 0:
                    raise RuntimeError(f"the fork-cost driver failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
                fork = json.loads(row_json.read_text())
    memory_gb = a.memory_per_node_gb or accounting.meminfo()["MemTotal"] / 2**30
    one = next((r for r in rows if r["nodes"] == 1), rows[0])
    base = one["rewards"]
    for r in rows:
        r["rewards_identical_to_first"] = r["rewards"] == base
    result = {"rows": rows, "fork_across_nodes": fork, "model": model(one, a, memory_gb),
              "model_memory_gb": round(memory_gb, 1), "args": asdict(a)}
    (out / "scale.json").write_text(json.dumps(result, indent=1))
    _plot(result, out / "scale.png")
    return result


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, mdl = result["rows"], result["model"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.plot([r["nodes"] for r in rows], [r["steps_per_s"] for r in rows], "o-", label="measured (nodes share this machine)")
    fit = [m for m in mdl if m["fits"]]
    ax1.plot([m["nodes"] for m in fit], [m["steps_per_s"] for m in fit], "s--",
             label=f"model: {result['args']['target_rollouts']} rollouts on N machines")
    for r in rows:
        ax2.scatter([r["nodes"]] * len(r["peak_mb_per_node"]), r["peak_mb_per_node"], color="tab:blue")
    ax2.plot([m["nodes"] for m in mdl], [m["memory_mb_per_node"] for m in mdl], "s--", color="tab:orange",
             label="model: memory per machine")
    ax2.axhline(result["model_memory_gb"] * 1024, color="0.5", ls=":", label="one machine's memory")
    for ax, ylabel, title in ((ax1, "environment steps / s", "throughput"),
                              (ax2, "peak PSS per node (MB)", "memory per node")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        ax.set_title(title)
    fig.suptitle("GRPO epoch on Ray nodes: every group on one node (all its forks local)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _driver_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="the driver of `bunshin bench scale` (inside the cluster)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--driver", metavar="ADDRESS", help="run the epoch on this cluster")
    which.add_argument("--fork-costs", metavar="ADDRESS", help="measure fork across nodes on this cluster")
    parser.add_argument("args_json")
    parser.add_argument("out")
    ns = parser.parse_args(argv)
    raw = json.loads(ns.args_json)
    a = Args(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})
    result = epoch(ns.driver, a) if ns.driver else fork_costs(ns.fork_costs, a)
    Path(ns.out).write_text(json.dumps(result))


if __name__ == "__main__":
    _driver_main(sys.argv[1:])
