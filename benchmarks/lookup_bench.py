"""Prefix-cache lookup latency: p50/p99 of `PrefixTree.lookup(history)` on random trees of N nodes.

What it measures: the time `step()` spends asking the prefix cache whether the full action history is
cached (longest-prefix match over the whole history, read-only calls skipped), on trees shaped like RL
rollouts: many rollouts of one task that share prefixes and diverge (GRPO groups), depth ~30, realistic
signature strings, 10% read-only calls. Queries are the histories a rollout presents step by step (hits),
plus 20% histories that diverge at the end (misses). Paper reference: TVCache reports a few milliseconds per
lookup through its HTTP server (O(log |V|)); this is the in-process structure alone.

Outputs: OUT/lookup.json = [{"nodes", "p50_us", "p99_us", ...}] and OUT/lookup.png.

Full-scale command (recorded):
    /opt/bunshin/venv/bin/python benchmarks/lookup_bench.py --nodes 1000,100000 --out runs/bench/lookup
CI (tiny):
    /opt/bunshin/venv/bin/python benchmarks/lookup_bench.py --nodes 200 --lookups 500 --out /tmp/lookup
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bunshin_gym.cache import PrefixTree, CachedStep


@dataclass(frozen=True)
class Args:
    nodes: tuple[int, ...] = (1_000, 100_000)
    """tree sizes (stateful nodes) to measure"""
    depth: int = 30
    """mean rollout length (calls); lengths are drawn from N(depth, depth/5)"""
    follow_p: float = 0.85
    """probability a rollout's next call repeats an existing sibling call (prefix sharing)"""
    readonly_frac: float = 0.1
    """fraction of calls that are read-only (skipped in keys, cached as side entries)"""
    lookups: int = 20_000
    """timed lookups per tree size"""
    miss_frac: float = 0.2
    """fraction of timed lookups whose last call is new (a miss)"""
    seed: int = 0
    """random seed"""
    out: str = "runs/bench/lookup"
    """output directory for lookup.json and lookup.png"""


TOOLS = ["click(element_id={})", "type(element_id={}, text='q{}')", "scroll(dir=down, amount={})",
         "goto(url='http://shop.local/p/{}')", "key(combo='ctrl+{}')"]
READ = "read_page(selector='#c{}')"


def random_signature(rng: random.Random, readonly_frac: float) -> str:
    if rng.random() < readonly_frac:
        return READ.format(rng.randrange(200))
    t = rng.choice(TOOLS)
    return t.format(*(rng.randrange(10_000) for _ in range(t.count("{}"))))


def build_tree(n_nodes: int, args: Args, rng: random.Random) -> tuple[PrefixTree, list[list[str]]]:
    """Grow a tree by simulated rollouts until it has ``n_nodes`` stateful nodes.

    Returns the tree and the rollouts' histories (lists of signatures, read-only calls included).
    """
    tree = PrefixTree("bench", "d0", readonly=lambda s: s.startswith("read_page("))
    histories: list[list[str]] = []
    res = CachedStep({"screenshot": b"", "url": "http://shop.local/"})
    while len(tree) - 1 < n_nodes:
        length = max(2, int(rng.gauss(args.depth, args.depth / 5)))
        node, hist = tree.root, []
        for _ in range(length):
            kids = list(node.children)
            if kids and rng.random() < args.follow_p:
                sig = rng.choice(kids[: max(1, len(kids) // 2 + 1)])  # popular (early) children more likely
            else:
                sig = random_signature(rng, args.readonly_frac)
            hist.append(sig)
            node = tree.record(node, sig, res, 0.5)
            if len(tree) - 1 >= n_nodes:
                break
        histories.append(hist)
    return tree, histories


def measure(tree: PrefixTree, histories: list[list[str]], args: Args, rng: random.Random) -> np.ndarray:
    """Latency in microseconds of ``args.lookups`` lookups, shape ``(lookups,)``."""
    queries: list[list[str]] = []
    for _ in range(args.lookups):
        h = rng.choice(histories)
        t = rng.randrange(1, len(h) + 1)
        q = h[:t]
        if rng.random() < args.miss_frac:
            q = q[:-1] + [f"click(element_id=miss{rng.randrange(1 << 30)})"]
        queries.append(q)
    lat = np.empty(len(queries))
    lookup, clock = tree.lookup, time.perf_counter_ns
    for i, q in enumerate(queries):
        t0 = clock()
        lookup(q)
        lat[i] = (clock() - t0) / 1000.0
    return lat


def main(args: Args) -> list[dict]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    rows: list[dict] = []
    for n in args.nodes:
        # --- build ---------------------------------------------------------------------------------
        t0 = time.perf_counter()
        tree, histories = build_tree(n, args, rng)
        build_s = time.perf_counter() - t0
        # --- measure (one warm-up pass, then timed) ------------------------------------------------
        measure(tree, histories, dataclasses.replace(args, lookups=min(1000, args.lookups)), rng)
        lat = measure(tree, histories, args, rng)
        st = tree.stats()
        row = {"nodes": n, "p50_us": float(np.percentile(lat, 50)), "p99_us": float(np.percentile(lat, 99)),
               "mean_us": float(lat.mean()), "lookups": int(lat.size), "max_depth": st.max_depth,
               "side_entries": st.side_entries, "rollouts": len(histories), "build_s": round(build_s, 3)}
        rows.append(row)
        print(f"nodes={n:>8}  p50={row['p50_us']:.1f} us  p99={row['p99_us']:.1f} us  "
              f"(max depth {st.max_depth}, {len(histories)} rollouts, built in {build_s:.1f}s)  "
              f"| TVCache paper: a few ms per lookup (HTTP service)")
    (out / "lookup.json").write_text(json.dumps(rows, indent=2))
    plot(rows, out / "lookup.png")
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    xs = [r["nodes"] for r in rows]
    ax.plot(xs, [r["p50_us"] for r in rows], "o-", label="p50")
    ax.plot(xs, [r["p99_us"] for r in rows], "s--", label="p99")
    ax.set_xscale("log")
    ax.set_xlabel("tree nodes")
    ax.set_ylabel("lookup latency (µs)")
    ax.set_title("Prefix-cache lookup (full history, depth ~30)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        default = f.default
        if f.name == "nodes":
            p.add_argument("--nodes", default=",".join(map(str, default)), help="comma-separated node counts")
        else:
            p.add_argument(f"--{f.name.replace('_', '-')}", type=type(default), default=default)
    ns = vars(p.parse_args(argv))
    ns["nodes"] = tuple(int(x) for x in str(ns["nodes"]).split(",") if x)
    return Args(**ns)


if __name__ == "__main__":
    main(parse_args())
