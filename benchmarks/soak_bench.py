"""`bunshin bench soak`: many envs of both kinds for a long time, with faults injected, then a count of what leaked.

`envs` worker threads each run episodes back to back until the time is up, alternating BunshinWebArena-v0 and
BunshinOSWorld-v0 (by worker) and oracle and random policies (by episode); every third episode forks the live
env once and steps the clone, and every second one closes the env (the others reset it). A fault thread
injects one fault every `fault_every_s`, in turn:

  kill_process     SIGKILL to a random process of a random live workspace (browser, site, desktop app,
                   executor, init, ...)
  kill_criu_dump   SIGKILL to the soak's next `criu dump` (a background snapshot or a fork) within 30 s
  kill_criu_restore  SIGKILL to the soak's next `criu restore` within 30 s
  corrupt_snapshot a byte flipped in a pages image of a random retained snapshot (its next restore must refuse)
  kill_host        a child process runs an episode with its own on-disk store and is SIGKILLed with live
                   workspaces; `forkcore.gc.collect()` then removes them
  state_dir_full   a child process snapshots a workspace whose state dir is a 64 MB tmpfs the soak mounts (the
                   soak's own state dir is the machine's disk, which it must not fill): the snapshot must fail
                   with a clear SnapshotError, the workspace answer and no partial snapshot stay

With `last_fault` (`--last-fault KIND`), the regular faults end `LAST_FAULT_S` before the end and KIND is injected
once more within that last stretch (or right after a regular fault that ran into it), so that the census follows
it closely (a kill_host there once left a zombie: the half-restored clone's init, adopted by the soak only when
its CRIU exited, after gc's kill).

Every exception and every step error is counted by type. At the end every env is closed, the runtime released
and gc run, and what outlived it all is counted against the start: processes, mounts, pid namespaces, cgroups,
this process's fds, state dirs, memfiles. Writes OUT/soak.json = {"envs", "minutes", "episodes", "steps",
"forks", "errors_by_type", "faults_injected", "leaked": {...}, "leaked_processes", the memory figures below,
"self_rss_mb_per_min_second_half" (is memory flat once the caches are full?), "samples"} and OUT/soak.png
(host memory and live workspaces over time, faults marked).

Memory figures (host_mb_*: in use on the whole host as free(1) counts it, other work on the machine included):
  host_mb_start          before the first env
  results_mb_end         what the recorded results held when the workers stopped (the prefix trees, in this
                         process, within $BUNSHIN_RESULT_BUDGET_MB; `results_budget_mb`)
  host_mb_end, self_rss_mb_end
                         after every env was closed, the runtime released (trees and results forgotten, snapshots
                         and standbys released) and gc run; this process's heap still holds what the results freed
                         (malloc keeps it)
  host_mb_after_release, self_rss_mb_after_release
                         the same once this process has collected its garbage and handed its free heap back to the
                         system (malloc_trim): what a leak would keep, a full cache no longer
"""
from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

import bunshin_gym  # noqa: F401 - registers the envs
from forkcore import accounting, criu, memfile, paths
from forkcore.cgroups import WorkspaceCgroups
from forkcore.gc import collect
from forkcore.workspace import _LIVE

ENVS = {"BunshinWebArena-v0": ("0", "40"), "BunshinOSWorld-v0": ("os-mkdir-nested", "edit-append-line")}
FAULTS = ("kill_process", "kill_criu_dump", "kill_criu_restore", "corrupt_snapshot", "kill_host", "state_dir_full")
#: the stretch at the end of a soak that `Args.last_fault` has to itself
LAST_FAULT_S = 10.0
_REPO = Path(__file__).resolve().parents[1]
_CHILD_EPISODE = """
import sys, time
import gymnasium as gym
import bunshin_gym
env = gym.make("BunshinWebArena-v0", task_id="0", cache_dir=sys.argv[1])
env.reset()
env.step("scroll [down]")
print("live", flush=True)
time.sleep(600)
"""


@dataclass
class Args:
    envs: int = 8
    minutes: float = 30.0
    fault_every_s: float = 50.0
    """one fault every this many seconds, the six types in turn (each type once per 5 min at 50 s)"""
    max_steps: int = 6
    sample_s: float = 5.0
    out: str = "bench-out/soak"
    seed: int = 0
    last_fault: str | None = None
    """one of FAULTS, injected once more in the last LAST_FAULT_S (the regular ones end before)"""

    def __post_init__(self) -> None:
        if self.last_fault is not None and self.last_fault not in FAULTS:
            raise ValueError(f"last_fault={self.last_fault!r}: not one of {', '.join(FAULTS)}")


class Soak:
    def __init__(self, a: Args) -> None:
        self.a = a
        self.deadline = time.monotonic() + a.minutes * 60
        self.counts = Counter()
        self.errors = Counter()
        self.faults = Counter()
        self.fault_times: list[tuple[float, str]] = []
        self.samples: list[dict] = []
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.interrupted = threading.Event()

    def interrupt(self) -> None:
        """End early (Ctrl-C): the workers finish their episodes, then everything is closed and counted."""
        self.deadline = time.monotonic()
        self.interrupted.set()

    def error(self, kind: str) -> None:
        with self.lock:
            self.errors[kind] += 1

    # ---- workers ------------------------------------------------------------------------------------
    def worker(self, i: int) -> None:
        rng = random.Random(self.a.seed * 1000 + i)
        env_id = list(ENVS)[i % len(ENVS)]
        env, episode = None, 0
        while time.monotonic() < self.deadline:
            try:
                if env is None:
                    env = gym.make(env_id, task_id=rng.choice(ENVS[env_id]), max_steps=self.a.max_steps)
                self.episode(env, oracle=episode % 2 == 0, fork=episode % 3 == 2, rng=rng)
            except Exception as e:  # noqa: BLE001 - counted; the worker goes on with a new env
                self.error(type(e).__name__)
                env = self.close(env)
            episode += 1
            if env is not None and episode % 2 == 0:
                env = self.close(env)
        self.close(env)

    def close(self, env) -> None:
        if env is not None:
            try:
                env.close()
            except Exception as e:  # noqa: BLE001
                self.error(f"close:{type(e).__name__}")
        return None

    def episode(self, env, oracle: bool, fork: bool, rng: random.Random) -> None:
        u = env.unwrapped
        obs, _ = env.reset()
        plan = list(u.adapter.oracle_actions(u.task)) if oracle else []
        with self.lock:
            self.counts["episodes"] += 1
        for n in range(self.a.max_steps):
            action = plan[n] if n < len(plan) else rng.choice(u.adapter.candidate_actions(obs) or ["scroll [down]"])
            obs, _, term, trunc, info = env.step(action)
            with self.lock:
                self.counts["steps"] += 1
            if info["last_action_error"]:
                self.error(info["last_action_error"].split(":")[0][:40])
            if fork and n == 1 and not (term or trunc):
                clone = u.fork(1)[0]
                try:
                    clone.step(rng.choice(u.adapter.candidate_actions(obs) or ["scroll [down]"]))
                    with self.lock:
                        self.counts["forks"] += 1
                finally:
                    clone.close()
            if term or trunc:
                break

    # ---- faults -------------------------------------------------------------------------------------
    def injector(self) -> None:
        rng = random.Random(self.a.seed)
        turn = 0
        end = self.deadline - (LAST_FAULT_S if self.a.last_fault else 0.0)
        while time.monotonic() + self.a.fault_every_s < end:
            if self.interrupted.wait(self.a.fault_every_s):
                return
            self.inject(FAULTS[turn % len(FAULTS)], rng)
            turn += 1
        if self.a.last_fault is not None:
            # halfway into the last stretch (at once if a regular fault ran into it)
            if not self.interrupted.wait(max(0.0, self.deadline - LAST_FAULT_S / 2 - time.monotonic())):
                self.inject(self.a.last_fault, rng)

    def inject(self, kind: str, rng: random.Random) -> None:
        try:
            done = getattr(self, kind)(rng)
        except Exception as e:  # noqa: BLE001 - an injection that failed is counted, not fatal
            self.error(f"inject:{kind}:{type(e).__name__}")
            done = False
        if done:
            with self.lock:
                self.faults[kind] += 1
                self.fault_times.append((time.monotonic() - self.t0, kind))

    def kill_process(self, rng: random.Random) -> bool:
        live = [ws for ws in list(_LIVE) if not ws._destroyed and not ws._frozen]
        pids = rng.choice(live)._cgroups.pids() if live else []
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
        return bool(pids)

    def _kill_criu(self, action: str) -> bool:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            for pid in criu.running(action):
                try:
                    os.kill(pid, signal.SIGKILL)
                    return True
                except ProcessLookupError:  # it finished meanwhile: wait for the next one
                    pass
            time.sleep(0.005)
        return False

    def kill_criu_dump(self, rng) -> bool:
        return self._kill_criu("dump")

    def kill_criu_restore(self, rng) -> bool:
        return self._kill_criu("restore")

    def corrupt_snapshot(self, rng: random.Random) -> bool:
        snaps = [d for d in (paths.STATE_DIR / "snapshots").iterdir()  # this process's own only
                 if (d / "owner.pid").exists() and (d / "owner.pid").read_text().strip() == str(os.getpid())]
        pages = [f for d in snaps for f in (d / "images").glob("pages-*.img") if f.stat().st_size > 4096]
        if not pages:
            return False
        victim = rng.choice(pages)
        with open(victim, "r+b") as f:
            f.seek(rng.randrange(victim.stat().st_size))
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        return True

    def kill_host(self, rng) -> bool:
        store = Path(self.a.out) / "killed-host-store"
        p = subprocess.Popen([sys.executable, "-c", _CHILD_EPISODE, str(store)], stdout=subprocess.PIPE, text=True,
                             cwd=_REPO, env={**os.environ, "PYTHONPATH": str(_REPO)})
        try:
            ok = p.stdout.readline().strip() == "live"
        finally:
            p.kill()
            p.wait()
        collect()
        return ok

    def state_dir_full(self, rng) -> bool:
        out = full_state_dir_snapshot(Path(self.a.out) / "full-state-dir")
        ok = bool(out["error"]) and out["ping"] == "pong" and out["snapshots_left"] == []
        if not ok:
            self.error("state_dir_full:unexpected")
        return ok

    # ---- measurement --------------------------------------------------------------------------------
    def sampler(self) -> None:
        from bunshin_gym.runtime import runtime

        while time.monotonic() < self.deadline:
            self.samples.append({"t_s": round(time.monotonic() - self.t0, 1),
                                 "host_mb": round(accounting.host_memory_used() / 2**20),
                                 "self_rss_mb": round(_self_rss() / 2**20),
                                 "results_mb": round(runtime().prefix_cache.results.used / 2**20),
                                 "malloc_free_mb": _malloc_free_mb(),
                                 "shmem_mb": round(accounting.meminfo().get("Shmem", 0) / 2**20),
                                 "workspaces": len([w for w in list(_LIVE) if not w._destroyed])})
            time.sleep(self.a.sample_s)


_FULL_STATE_DIR_CHILD = """
import json
from forkcore import SnapshotError, Workspace, paths
from forkcore.probe import probe_spec
ws = Workspace.start(probe_spec("fcfull", hold_mb=96))
try:
    try:
        ws.snapshot()
        out = {"error": None}
    except SnapshotError as e:
        out = {"error": str(e)}
    out["ping"] = ws.call("ping")
    out["snapshots_left"] = sorted(p.name for p in (paths.STATE_DIR / "snapshots").iterdir())
finally:
    ws.destroy()
print(json.dumps(out))
"""


def full_state_dir_snapshot(where: Path, size_mb: int = 64) -> dict:
    """Snapshot a workspace (96 MB of memory) whose BUNSHIN_STATE_DIR is a `size_mb` tmpfs mounted at `where`,
    in a child process. Returns {"error": the SnapshotError or None, "ping", "snapshots_left"}."""
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)], check=True)
    try:
        r = subprocess.run([sys.executable, "-c", _FULL_STATE_DIR_CHILD], capture_output=True, text=True,
                           timeout=300, cwd=_REPO,
                           env={**os.environ, "BUNSHIN_STATE_DIR": str(where), "PYTHONPATH": str(_REPO)})
        if r.returncode != 0:
            raise RuntimeError(f"the full-state-dir child failed (exit {r.returncode}): {r.stderr[-2000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def _malloc_free_mb() -> int | None:
    """MB that malloc's heaps hold free (fragmentation the process keeps); None off glibc."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    return round(mallinfo2().fordblks / 2**20)


def _released_memory() -> tuple[int, int]:
    """(host memory in use, this process's RSS) once this process has collected its garbage and returned its free
    heap to the system (glibc's malloc_trim; elsewhere the garbage collection only)."""
    import gc

    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return accounting.host_memory_used(), _self_rss()


def rss_slope_mb_per_min(samples: list[dict], since_s: float) -> float | None:
    """Least-squares slope of this process's RSS (MB per minute) over the samples from `since_s` on."""
    pts = [(s["t_s"] / 60, s["self_rss_mb"]) for s in samples if s["t_s"] >= since_s]
    if len(pts) < 3:
        return None
    return round(float(np.polyfit([t for t, _ in pts], [m for _, m in pts], 1)[0]), 2)


def _self_rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _owned(d: Path) -> bool:
    """A workspace or snapshot dir of this process, or of one that is gone (another live process's is not ours
    to count: tests and other benchmarks may share the machine)."""
    try:
        owner = int((d / "owner.pid").read_text())
    except (OSError, ValueError):
        return True
    return owner == os.getpid() or not Path(f"/proc/{owner}").exists()


def _census() -> tuple[dict, dict[int, str]]:
    """What a leak would leave: processes (this process's children and the tasks of its workspaces' cgroups),
    their pid namespaces, mounts of its state dirs, its workspace cgroups, its fds, state dirs and memfiles;
    and {pid: "comm state ppid"} of those processes."""
    ws_root, snap_root = paths.STATE_DIR / "ws", paths.STATE_DIR / "snapshots"
    dirs = [d for root in (ws_root, snap_root) if root.is_dir() for d in root.iterdir() if _owned(d)]
    cgroups = [c for c in WorkspaceCgroups.existing() if _owned(ws_root / c.path.name)]
    me, pids = os.getpid(), {p for c in cgroups for p in c.pids()}
    for p in Path("/proc").iterdir():
        stat = accounting.proc_stat(p.name) if p.name.isdigit() else None
        if stat is not None and int(stat[1][1]) == me:
            pids.add(int(p.name))
    pidns = set()
    for pid in pids:
        try:
            pidns.add(os.readlink(f"/proc/{pid}/ns/pid"))
        except OSError:
            continue
    pidns.discard(os.readlink("/proc/self/ns/pid"))
    owned = {str(d) for d in dirs}
    names = {d.name for d in dirs}  # memfiles, lineage pins and views (forkcore/memfile.py): ours or orphaned
    memfiles = [m for m, owner in memfile.entries() if m.name in names or not owner.exists()]
    return {"processes": len(pids), "namespaces": len(pidns),
            "mounts": sum(1 for line in open("/proc/self/mountinfo") if any(o in line for o in owned)),
            "cgroups": len(cgroups), "fds": len(os.listdir("/proc/self/fd")), "state_dirs": len(dirs),
            "memfiles": len(memfiles)}, {pid: _describe(pid) for pid in pids}


def _describe(pid: int) -> str:
    """A process as "comm state ppid P", and the states of its other threads (a zombie leader is not reapable
    while one of its threads lives: they say which holds it); "gone" once it has exited."""
    stat = accounting.proc_stat(pid)
    if stat is None:
        return "gone"
    try:
        tids = [t for t in os.listdir(f"/proc/{pid}/task") if t != str(pid)]
    except OSError:
        tids = []
    states = "".join(sorted(t[1][0] for t in (accounting.proc_stat(f"{pid}/task/{tid}") for tid in tids) if t))
    return f"{stat[0]} {stat[1][0]} ppid {stat[1][1]}" + (f" threads {states}" if states else "")


def _settled_census(start: dict, grace_s: float = 20.0) -> tuple[dict, dict[int, str]]:
    """The census once destroyed workspaces' last processes are gone: a process still exiting right after the
    close (a loaded machine reaps slowly) is not a leak, one alive after `grace_s` is."""
    deadline = time.monotonic() + grace_s
    while True:
        time.sleep(1)
        end, end_pids = _census()
        if end["processes"] <= start["processes"] or time.monotonic() > deadline:
            return end, end_pids


def run(a: Args, progress: bool = True) -> dict:
    from bunshin_gym.runtime import runtime

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    collect()
    (start, start_pids), host_start = _census(), accounting.host_memory_used()
    soak = Soak(a)
    threads = [threading.Thread(target=soak.worker, args=(i,), name=f"soak-{i}") for i in range(a.envs)]
    threads += [threading.Thread(target=soak.injector, name="soak-faults"),
                threading.Thread(target=soak.sampler, name="soak-sampler")]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if progress:
            left = max(0.0, soak.deadline - time.monotonic())
            print(f"\rsoak: {left / 60:5.1f} min left, {soak.counts['episodes']} episodes, {soak.counts['steps']} "
                  f"steps, faults {dict(soak.faults)}", end="", file=sys.stderr, flush=True)
        try:
            time.sleep(2)
        except KeyboardInterrupt:
            print("\nsoak: interrupted; the running episodes finish, then everything is closed and counted",
                  file=sys.stderr)
            soak.interrupt()
    if progress:
        print(file=sys.stderr)
    ledger = runtime().prefix_cache.results
    results_mb_end = round(ledger.used / 2**20)
    results_budget_mb = None if ledger.budget_bytes is None else round(ledger.budget_bytes / 2**20)
    runtime().close()
    collect()
    end, end_pids = _settled_census(start)
    host_end, rss_end = accounting.host_memory_used(), _self_rss()
    host_released, rss_released = _released_memory()
    result = {"envs": a.envs, "minutes": a.minutes, "interrupted": soak.interrupted.is_set(),
              "episodes": soak.counts["episodes"], "steps": soak.counts["steps"],
              "forks": soak.counts["forks"], "errors_by_type": dict(soak.errors),
              "faults_injected": dict(soak.faults), "fault_times": soak.fault_times,
              "leaked": {k: end[k] - start[k] for k in start}, "census_start": start, "census_end": end,
              "leaked_processes": {pid: d for pid, d in end_pids.items() if pid not in start_pids},
              "host_mb_start": round(host_start / 2**20), "results_mb_end": results_mb_end,
              "results_budget_mb": results_budget_mb,
              "host_mb_end": round(host_end / 2**20), "self_rss_mb_end": round(rss_end / 2**20),
              "host_mb_after_release": round(host_released / 2**20),
              "self_rss_mb_after_release": round(rss_released / 2**20),
              "self_rss_mb_per_min_second_half": rss_slope_mb_per_min(soak.samples, a.minutes * 30),
              "samples": soak.samples, "args": asdict(a)}
    (out / "soak.json").write_text(json.dumps(result, indent=1))
    _plot(result, out / "soak.png")
    return result


def _plot(r: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s["t_s"] / 60 for s in r["samples"]]
    fig, (mem, live) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    mem.plot(t, [s["host_mb"] for s in r["samples"]], color="tab:blue", label="host in use")
    mem.plot(t, [s["self_rss_mb"] for s in r["samples"]], color="tab:purple", label="this process (prefix trees)")
    mem.plot(t, [s["shmem_mb"] for s in r["samples"]], color="tab:gray", label="shmem (tmpfs uppers, /tmp)")
    mem.set_ylabel("memory (MB)")
    mem.legend(fontsize=7, loc="lower right")
    live.plot(t, [s["workspaces"] for s in r["samples"]], color="tab:green")
    live.set_ylabel("live workspaces")
    live.set_xlabel("minutes")
    for at, kind in r["fault_times"]:
        for ax in (mem, live):
            ax.axvline(at / 60, color="tab:red", alpha=0.3, lw=1)
        mem.annotate(kind, (at / 60, mem.get_ylim()[1]), rotation=90, fontsize=6, va="top", color="tab:red")
    mem.set_title(f"soak: {r['envs']} envs, {r['minutes']} min, {r['episodes']} episodes, {r['steps']} steps; "
                  f"leaked {sum(r['leaked'].values())} (red: injected faults)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
