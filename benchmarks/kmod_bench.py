"""kmod_bench: capture time and per-clone memory of the bunshin_cow module vs. copying.

What it measures (inside a qemu TCG guest of the installed Debian kernel, booted by
kmod/harness.py; the host kernel never loads the module):
  for each source size S (64 MiB ... 1 GiB of filled anonymous memory in a source process A):
  - capture_ms: wall time of ioctl(BUNSHIN_COW_CAPTURE) on A's S bytes, 3 trials (between
    trials the holder is released and A rewrites one word per page so every PTE is writable
    and exclusive again); the best and the first are reported;
  - copy_ms / copy_kb: the copying baseline -- memcpy of the S bytes into fresh anonymous
    memory (what a fork-free private restore costs at least), and its MemFree delta;
  - per_clone_kb: MemFree delta per clone after N clones (processes that are not A's
    children) mapped the holder and read one word of every page (MemFree moves in per-CPU
    batches: +-0.5 MiB noise); per_clone_pte_kb: the page tables those reads added (VmPTE),
    the exact floor of a clone's cost;
  - clone_map_read_ms: time for one clone to map and read every page.
The paper's number beside ours: BunshinRL (BunshinFork section 4.4) states clones share the
snapshot's pages copy-on-write, i.e. a clone costs page tables + its own writes.

TCG emulates the CPU: absolute times are ~10-50x slower than on hardware and noisy when
the host is busy; ratios (capture vs copy, clone vs source) are the meaningful output.

Full-scale command (about 2-4 minutes):
    /opt/bunshin/venv/bin/python benchmarks/kmod_bench.py --out out/kmod
CI scale (tiny):
    /opt/bunshin/venv/bin/python benchmarks/kmod_bench.py --quick --out /tmp/kmod_bench
Writes OUT/kmod.json and OUT/kmod.png.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kmod import harness  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Args:
    sizes_mib: tuple[int, ...] = (64, 128, 256, 512, 1024)
    """source sizes in MiB."""
    clones: int = 4
    """clones mapped per size (1..16)."""
    thp: bool = False
    """source memory THP-backed (MADV_HUGEPAGE) instead of 4 KiB pages (MADV_NOHUGEPAGE)."""
    mem_mb: int = 3072
    """guest memory in MiB (a 1 GiB source + its 1 GiB copy must fit)."""
    timeout_s: float = 900.0
    """guest timeout."""
    out: str = "out/kmod"
    """output directory for kmod.json and kmod.png."""
    build_dir: str | None = None
    """harness build directory (default kmod/build, git-ignored)."""
    quick: bool = False
    """tiny CI-scale run: sizes 16 and 32 MiB, 2 clones, 1024 MiB guest."""


def validate(args: Args) -> list[str]:
    """Named checks on Args; returns the problems (empty when fine)."""
    problems = []
    if not 1 <= args.clones <= 16:
        problems.append(f"clones must be 1..16 (the guest program's limit), got {args.clones}")
    if not args.sizes_mib or any(s <= 0 or s % 2 for s in args.sizes_mib):
        problems.append(f"sizes_mib must be positive even MiB counts, got {args.sizes_mib}")
    if max(args.sizes_mib or [0]) * 2 + 512 > args.mem_mb:
        problems.append(f"mem_mb={args.mem_mb} too small for a {max(args.sizes_mib)} MiB source "
                        "plus its copy; raise --mem-mb")
    return problems


def parse_args(argv: list[str] | None = None) -> Args:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=list(Args.sizes_mib))
    ap.add_argument("--clones", type=int, default=Args.clones)
    ap.add_argument("--thp", action="store_true")
    ap.add_argument("--mem-mb", type=int, default=Args.mem_mb)
    ap.add_argument("--timeout-s", type=float, default=Args.timeout_s)
    ap.add_argument("--out", default=Args.out)
    ap.add_argument("--build-dir", default=None)
    ap.add_argument("--quick", action="store_true")
    ns = ap.parse_args(argv)
    if ns.quick:
        return Args(sizes_mib=(16, 32), clones=2, thp=ns.thp, mem_mb=1024,
                    timeout_s=ns.timeout_s, out=ns.out, build_dir=ns.build_dir, quick=True)
    return Args(sizes_mib=tuple(ns.sizes_mib), clones=ns.clones, thp=ns.thp, mem_mb=ns.mem_mb,
                timeout_s=ns.timeout_s, out=ns.out, build_dir=ns.build_dir)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problems = validate(args)
    if problems:
        print("kmod_bench: " + "; ".join(problems), file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    # --- one guest boot runs every size
    commands = ["insmod /bunshin_cow.ko || echo 'FAIL insmod_bunshin_cow'"]
    commands += [f"/cowtest bench {s} {args.clones} {int(args.thp)}" for s in args.sizes_mib]
    commands += ["rmmod bunshin_cow || echo 'FAIL rmmod'"]
    t0 = time.monotonic()
    try:
        run = harness.run_guest(commands, mem_mb=args.mem_mb, timeout=args.timeout_s,
                                build_dir=Path(args.build_dir) if args.build_dir else None)
    except harness.HarnessError as e:
        print(f"kmod_bench: {e}", file=sys.stderr)
        return 2
    (out / "kmod_console.log").write_text(run.console)

    # --- parse BENCH lines
    rows = []
    for line in run.console.splitlines():
        if line.startswith("BENCH "):
            rows.append(json.loads(line[len("BENCH "):]))
    failures = [ln for ln in run.console.splitlines() if harness.BAD_LINE.search(ln)]
    for r in rows:
        r["capture_ms_best"] = min(r["capture_ms"])
        r["capture_ms_first"] = r["capture_ms"][0]
        r["clone_cost_vs_copy"] = r["per_clone_kb"] / max(r["copy_kb"], 1)
        r["capture_speedup_vs_copy"] = r["copy_ms"] / max(r["capture_ms_best"], 1e-3)
    result = {
        "args": dataclasses.asdict(args),
        "kernel": harness.find_kernel().version,
        "guest": "qemu-system-x86_64 -accel tcg -cpu max -smp 2",
        "wall_s": time.monotonic() - t0,
        "rows": rows,
        "problems": failures + ([] if len(rows) == len(args.sizes_mib) else
                                [f"expected {len(args.sizes_mib)} BENCH rows, got {len(rows)}"]),
        "paper": "BunshinRL/BunshinFork 4.4: clones share pages copy-on-write "
                 "(a clone costs page tables + its own writes)",
    }
    (out / "kmod.json").write_text(json.dumps(result, indent=2))

    # --- table
    print(f"{'MiB':>6} {'capture ms (best/first)':>24} {'memcpy ms':>10} {'copy MiB':>9} "
          f"{'per-clone KiB':>14} {'clone PTE KiB':>14} {'clone/copy':>10}")
    for r in rows:
        print(f"{r['size_mib']:>6} {r['capture_ms_best']:>12.2f}/{r['capture_ms_first']:<11.2f} "
              f"{r['copy_ms']:>10.1f} {r['copy_kb'] / 1024:>9.1f} {r['per_clone_kb']:>14.0f} "
              f"{r['per_clone_pte_kb']:>14.0f} "
              f"{r['clone_cost_vs_copy']:>10.4f}")
    print("paper:", result["paper"])

    # --- plot
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("kmod_bench: matplotlib missing, no PNG "
              "(fix: /opt/bunshin/venv/bin/pip install matplotlib)", file=sys.stderr)
    else:
        sizes = [r["size_mib"] for r in rows]
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        ax1.plot(sizes, [r["capture_ms_best"] for r in rows], "o-", label="capture (best of 3)")
        ax1.plot(sizes, [r["copy_ms"] for r in rows], "s--", label="memcpy copy")
        ax1.set(xscale="log", yscale="log", xlabel="source size (MiB)", ylabel="ms (TCG guest)",
                title="time to snapshot a source")
        ax1.legend()
        ax2.plot(sizes, [max(r["per_clone_kb"], 1) / 1024 for r in rows], "o-",
                 label="per clone, MemFree (kmod)")
        ax2.plot(sizes, [max(r["per_clone_pte_kb"], 1) / 1024 for r in rows], "^:",
                 label="per clone, page tables (kmod)")
        ax2.plot(sizes, [r["copy_kb"] / 1024 for r in rows], "s--", label="private copy")
        ax2.set(xscale="log", yscale="log", xlabel="source size (MiB)", ylabel="MiB",
                title=f"memory per clone ({args.clones} clones, read every page)")
        ax2.legend()
        fig.suptitle(f"bunshin_cow on {result['kernel']} ({'THP' if args.thp else '4 KiB pages'})")
        fig.tight_layout()
        fig.savefig(out / "kmod.png", dpi=100)
    print(f"wrote {out / 'kmod.json'} and {out / 'kmod.png'}")
    if result["problems"]:
        print("problems:\n  " + "\n  ".join(result["problems"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
