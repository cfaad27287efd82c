"""Fork latency and memory per memory backend and clone count (BunshinRL Fig. 12 style).

For each backend and clone count N: snapshot a live probe workspace (Chromium via Playwright, an HTTP
server with in-memory state, a TCP connection, an appended file, a process holding `hold_mb` MiB), fork
N clones, let memory settle (KSM: pages_sharing stable for 5 s, at most 60 s), and record host memory
used by source + clones above the pre-run baseline. Baseline in the same run: the `private` backend
(plain CRIU restore) and the os.fork() floor for the same memory size.

Writes OUT/fork.json (rows {"backend", "clones", "standby": false, "snapshot_s", "prepare_s", "fork_p50_s",
"critical_path_s", "critical_path_vs_dump_plus_restore", "memory_mb", "workspace_mb", "os_fork_floor_s", "pss_mb",
"workspace_pss_mb", "source_frozen_s", "freeze_phases"}, and per backend one row {"backend", "clones": 1,
"standby": true, "critical_path_s", "takes", "snapshot_s", "source_frozen_s", "freeze_phases"}) and OUT/fork.png.
source_frozen_s: how long the source stood frozen for the row's snapshot (CRIU's frozen_time; the rest of
snapshot_s it ran on); freeze_phases: where that time went (`Snapshot.freeze_phases`: frozen_s, freezing_s (the
seize, before the window), memdump_s (pages collected and written; memwrite_s of it the writing),
irmap_resolve_s, upper_copy_s (the overlay upper copied into the snapshot's layer in CRIU's post-dump, still
frozen), other_s (files, sockets, mounts with their tmpfs tars, namespaces), pages_written, pages_scanned). critical_path_s: from the call until every clone answered its first command —
for `standby: false` rows `Workspace.fork(n)` of the live source (one dump, then the restores in parallel),
for the standby row a thaw of a clone the pool restored beforehand (forkcore.standby). memory_mb is host memory
above the pre-run baseline (what the issue asks; noisy on a shared machine), pss_mb the summed PSS of
source + clones (only this benchmark's processes).
Memory is never a peak here: memory_mb and pss_mb are one sample each, taken once every clone answered and memory
settled (above), while source and clones are all alive; memory_mb counts everything the host uses
(MemTotal - MemAvailable, all programs, page cache excluded) above the baseline taken before the source started,
pss_mb only this benchmark's processes (their /proc/PID/smaps_rollup Pss: a page shared by k of them counts 1/k
to each, a KSM-merged page likewise).
Honest baseline: the (backend, clones) configurations run in ABBA order (`run_order`; each row's run_index says
where it ran, the standby rows last); the private leg runs with KSM off (run=2 unmerges every merged page, then
run=0) and its clones restore with nothing mergeable (backends.PrivateBackend); every row's "ksm" = {"mode"
("off" for private, "as-is" otherwise; the ksm backend turns KSM on), "run_before", "pages_sharing_before",
"pages_sharing_max"/"pages_sharing_last" (host-wide /sys/kernel/mm/ksm/pages_sharing, read after each fork, at the
memory sample and after the critical-path fork: 0 throughout proves the private leg shared nothing through KSM),
"samples", "ksm_restored_to" (run, pages_to_scan, sleep_millisecs put back after the leg: the machine's setting
before it)}.
Full run:  bunshin bench fork --clones 1,2,4,8,16 --out bench-out/fork
CI scale:  bunshin bench fork --clones 1,2 --hold-mb 16 --no-browser --out /tmp/fork
"""
from __future__ import annotations

import json
import mmap
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from forkcore import Workspace, backend_report, host_memory_used
from forkcore.backends import KSM_DIR, get_backend
from forkcore.ksm import ksm_off, ksm_restored
from forkcore.probe import probe_spec
from forkcore.standby import StandbyPool


@dataclass
class Args:
    out: str = "bench-out/fork"
    """output directory for fork.json and fork.png"""
    clones: tuple[int, ...] = (1, 2, 4, 8, 16)
    """clone counts to measure"""
    backends: tuple[str, ...] = ("private", "ksm", "memfile")
    """backends to measure (unavailable ones are reported and skipped)"""
    hold_mb: int = 200
    """anonymous memory held by one process of the workspace (MiB)"""
    browser: bool = True
    """run headless Chromium (Playwright) in the workspace"""
    settle_max_s: float = 60.0
    """longest wait for memory to settle after forking (KSM merging)"""
    standby_takes: int = 10
    """standby clones taken (each after the pool refilled) for the standby row of each backend"""
    harden: bool = True
    """hardened workspaces (own user namespace, seccomp, dropped capabilities, masks); --no-harden measures
    what the hardening costs"""


def settle(backend: str, max_s: float) -> None:
    """Wait until memory stops changing (at most max_s): for KSM, until ksmd has scanned everything twice since
    now (it merges a page only once its content held still for a whole scan: before that pages_sharing stands
    still at its old value) and pages_sharing then held still for 5 s; for other backends 2 s."""
    if backend != "ksm":
        time.sleep(min(2.0, max_s))
        return
    deadline, last, stable_since = time.monotonic() + max_s, -1, time.monotonic()
    scans_needed = int((KSM_DIR / "full_scans").read_text()) + 2
    while time.monotonic() < deadline:
        sharing = int((KSM_DIR / "pages_sharing").read_text())
        if sharing != last:
            last, stable_since = sharing, time.monotonic()
        elif (time.monotonic() - stable_since >= 5.0
              and int((KSM_DIR / "full_scans").read_text()) >= scans_needed):
            return
        time.sleep(0.5)


def run_order(backends: list[str], clones: tuple[int, ...]) -> list[tuple[str, int]]:
    """(backend, clone count) in the order they run: clone counts ascending, the backends' order reversed at every
    other count (ABBA: private, ksm, memfile, memfile, ksm, private, ...), so no backend always runs first, on
    the coldest machine (the first configuration used to read ~850 MB low)."""
    return [(b, n) for i, n in enumerate(clones) for b in (backends if i % 2 == 0 else backends[::-1])]


def ksm_leg(backend: str):
    """The private leg runs with KSM off (run=2: everything unmerged, then 0); every other leg as KSM is (the ksm
    backend turns it on). Either way KSM's previous run/pages_to_scan/sleep_millisecs come back after the leg."""
    return ksm_off() if backend == "private" else ksm_restored()


def os_fork_floor(mb: int, repeats: int = 5) -> float:
    """Median time of os.fork() in a process holding `mb` MiB of touched anonymous memory."""
    region = mmap.mmap(-1, max(mb, 1) * 2**20)
    for off in range(0, len(region), 4096):
        region[off] = 1
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        times.append(time.perf_counter() - t0)
        os.waitpid(pid, 0)
    region.close()
    return statistics.median(times)


def live_fork_critical_path(ws: Workspace, n: int, backend: str) -> float:
    """Seconds from `ws.fork(n)` (one dump, then the restores in parallel) until all n clones answered."""
    t0 = time.monotonic()
    clones = ws.fork(n, backend=backend)
    try:
        for c in clones:
            c.call("probe.counter")
        return time.monotonic() - t0
    finally:
        for c in clones:
            c.destroy()


def standby_takes_s(snap, backend: str, takes: int, method: str = "probe.counter") -> list[float]:
    """Seconds from taking a frozen standby clone of `snap` until it answered `method`, `takes` times; before
    each take the pool refills (as it would while a policy thinks)."""
    times = []
    with StandbyPool(snap, size=1, backend=backend) as pool:
        for _ in range(takes):
            deadline = time.monotonic() + 120
            while pool.ready < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            t0 = time.monotonic()
            clone = pool.take_ready()
            if clone is None:
                raise RuntimeError(f"standby pool of backend {backend} never refilled: {pool.last_error}")
            clone.call(method)
            times.append(time.monotonic() - t0)
            clone.destroy()
    return times


def freeze_fields(snap) -> dict:
    """The row fields of a snapshot's frozen window: source_frozen_s and freeze_phases (None/{} without CRIU stats)."""
    frozen = snap.frozen_s
    return {"source_frozen_s": None if frozen is None else round(frozen, 4), "freeze_phases": snap.freeze_phases}


def standby_row(ws: Workspace, backend: str, takes: int) -> dict:
    """One clone of a retained snapshot with a standby ready: thaw + first answer (p50 over `takes`)."""
    snap = ws.snapshot()
    phases = freeze_fields(snap)
    try:
        times = standby_takes_s(snap, backend, takes)
    finally:
        snap.release()
    return {"backend": backend, "clones": 1, "standby": True, "critical_path_s": round(statistics.median(times), 4),
            "takes": takes, "snapshot_s": round(snap.dump_s, 4), **phases}


def run(args: Args) -> list[dict]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = backend_report()
    backends = [b for b in args.backends if report.get(b) is None]
    for b in args.backends:
        if report.get(b) is not None:
            print(f"skipping backend {b}: {report[b]}")
    with ksm_restored():  # whatever a leg left, KSM ends the run as the machine had it
        return _run(args, out, backends)


def _run(args: Args, out: Path, backends: list[str]) -> list[dict]:
    baseline = host_memory_used()
    ws = Workspace.start(probe_spec("forkbench", hold_mb=args.hold_mb, harden=args.harden))
    rows = []
    try:
        if args.browser:
            ws.call("probe.browser_start", html="<h1>fork bench</h1><script>window.n = 1</script>")
        ws.call("probe.tcp_open")
        time.sleep(2)
        workspace_mb = (host_memory_used() - baseline) / 2**20
        workspace_pss_mb = ws.memory().pss / 2**20
        floor = os_fork_floor(int(ws.memory().rss / 2**20))
        bar = tqdm(total=len(backends) * sum(args.clones), desc="fork bench", unit="clone")
        order = run_order(backends, args.clones)
        for run_index, (backend, n) in enumerate(order):
            with ksm_leg(backend) as leg:
                snap = ws.snapshot()
                phases = freeze_fields(snap)
                t0 = time.monotonic()
                images = get_backend(backend).prepare(snap)
                prepare_s = time.monotonic() - t0
                assert images.is_dir()
                clones, times = [], []
                try:
                    for _ in range(n):
                        t0 = time.monotonic()
                        clones += snap.fork(1, backend=backend)
                        times.append(time.monotonic() - t0)
                        leg.sample()
                        bar.update(1)
                    for c in clones:  # every clone must be alive and answering
                        c.call("probe.counter")
                    settle(backend, args.settle_max_s)
                    leg.sample()
                    memory_mb = (host_memory_used() - baseline) / 2**20
                    # PSS of source + clones: immune to other programs on a shared machine
                    pss_mb = (ws.memory().pss + sum(c.memory().pss for c in clones)) / 2**20
                    leg.sample()
                finally:
                    for c in clones:
                        c.destroy()
                    snap.release()
                critical = live_fork_critical_path(ws, n, backend)
                leg.sample()
            fork_p50 = statistics.median(times)
            rows.append({"backend": backend, "clones": n, "standby": False, "harden": args.harden,
                         "run_index": run_index,
                         "snapshot_s": round(snap.dump_s, 4), "prepare_s": round(prepare_s, 4),
                         "fork_p50_s": round(fork_p50, 4), "critical_path_s": round(critical, 4),
                         "critical_path_vs_dump_plus_restore": round(critical / (snap.dump_s + fork_p50), 3),
                         "memory_mb": round(memory_mb, 1), "workspace_mb": round(workspace_mb, 1),
                         "pss_mb": round(pss_mb, 1), "workspace_pss_mb": round(workspace_pss_mb, 1),
                         "os_fork_floor_s": round(floor, 6), **phases, "ksm": leg.record()})
            bar.write(json.dumps({k: v for k, v in rows[-1].items() if k != "freeze_phases"}))
            time.sleep(1)
        for backend in backends:
            with ksm_leg(backend) as leg:
                row = standby_row(ws, backend, args.standby_takes)
                leg.sample()
            rows.append({**row, "run_index": len(order) + backends.index(backend), "ksm": leg.record()})
            bar.write(json.dumps(rows[-1]))
        bar.close()
    finally:
        ws.destroy()
    (out / "fork.json").write_text(json.dumps(rows, indent=2))
    _plot(rows, out / "fork.png")
    (out / "fork.args.json").write_text(json.dumps(asdict(args), indent=2))
    return rows


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for backend in sorted({r["backend"] for r in rows}):
        rs = sorted((r for r in rows if r["backend"] == backend and not r["standby"]), key=lambda r: r["clones"])
        ax1.plot([r["clones"] for r in rs], [r["memory_mb"] for r in rs], marker="o", label=f"{backend} (host)")
        ax1.plot([r["clones"] for r in rs], [r["pss_mb"] for r in rs], marker="x", ls="--", label=f"{backend} (PSS)")
        line, = ax2.plot([r["clones"] for r in rs], [r["fork_p50_s"] * 1000 for r in rs], marker="o",
                         label=f"{backend}: one restore")
        ax2.plot([r["clones"] for r in rs], [r["critical_path_s"] * 1000 for r in rs], marker="s", ls="--",
                 color=line.get_color(), label=f"{backend}: fork(n) until all answer")
        for r in rows:
            if r["backend"] == backend and r["standby"]:
                ax2.scatter([1], [r["critical_path_s"] * 1000], marker="*", s=120, color=line.get_color(),
                            label=f"{backend}: standby thaw", zorder=5)
    if rows:
        ax1.axhline(rows[0]["workspace_mb"], color="gray", ls=":", label="source workspace alone")
        ax2.axhline(rows[0]["os_fork_floor_s"] * 1000, color="gray", ls=":", label="os.fork() floor")
    ax1.set(xlabel="clones", ylabel="host memory above baseline (MB)", title="Memory: source + clones")
    ax2.set(xlabel="clones", ylabel="ms (log)", title="Fork latency", yscale="log")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    import sys

    from benchmarks.cli import app  # the same options as `bunshin bench fork`, without importing the core CLI

    app(["fork", *sys.argv[1:]], prog_name="bunshin bench")
