"""Live workspaces: start, talk to, freeze, measure, snapshot, fork and destroy them.

A workspace is one process tree in its own pid/mnt/net/ipc/uts namespaces (and, when hardened, its own user
namespace) whose root is an overlay of read-only layers plus a private upper dir, mounted by the host (see
init.py for what is mounted where). `Workspace.snapshot()` dumps it with CRIU while it keeps running and
copies its upper into a new read-only layer; a `Snapshot` restores into any number of clones, each with fresh
namespaces and its own upper. How clones get their
memory is the job of a memory backend (backends.py).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import ctypes
import heapq
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
import weakref
import atexit
from pathlib import Path
from typing import Any, Sequence

from . import criu, layers, memfile, paths
from .accounting import TreeMemory, namespace_pids, pids_in_namespace, proc_stat, tree_memory
from .capabilities import non_root_services_snapshot, user_namespace_missing
from .init import MS_NODEV, device_nodes
from .cgroups import WorkspaceCgroups, reap
from .errors import (KernelFeatureMissing, NotRoot, RestoreFailed, ServiceDied, SnapshotError, SnapshotReleased,
                     WorkspaceDestroyed, WorkspaceError)
from .versions import HostVersions, host_versions
from .rpc import ExecutorClient
from .spec import WorkspaceSpec, validate_spec

log = logging.getLogger("forkcore")
_libc = ctypes.CDLL(None, use_errno=True)
_REPO_ROOT = Path(__file__).resolve().parent.parent
#: a dump that raced a process's exit or caught a thread's /proc file open is taken again this many times in all
DUMP_ATTEMPTS = 3
MEM_MOUNT = "/opt/bunshin/mem"  #: the memfile backend's shared tmpfs, bound read-only into every workspace
_ACTION_SCRIPT = """#!/bin/sh
# CRIU action script (forkcore): copy the overlay upper while the dumped tree is still frozen (post-dump runs
# before CRIU thaws it), noting when the copy began and ended (ns) for Snapshot.freeze_phases.
if [ "$CRTOOLS_SCRIPT_ACTION" = "post-dump" ]; then
  t0=$(date +%s%N)
  cp -a --reflink=auto "$BUNSHIN_UPPER" "$BUNSHIN_LAYER" || exit 1
  echo "$t0 $(date +%s%N)" > "$BUNSHIN_UPPER_COPY_TIMES"
fi
exit 0
"""
#: what the action script notes in a snapshot's dir: the upper copy's start and end (ns since the epoch)
UPPER_COPY_TIMES = "upper-copy.ns"


_LIVE: "weakref.WeakSet[Workspace]" = weakref.WeakSet()


class RestoreGate:
    """At most `limit` CRIU restores of this process at once; waiters go in order of priority (a caller
    waiting for its clone before a standby pool's background refill), then of arrival.

    A restore is CPU-bound: n of them side by side on c cores all end late together, while c at a time end
    one batch after another, so on average each clone is ready sooner (8 restores of a browser workspace on
    2 cores: mean ready 3.4 s all at once, 2.4 s two at a time; the last at ~4.1 s either way)."""

    FOREGROUND, BACKGROUND = 0, 1

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"RestoreGate(limit={limit}): expected >= 1")
        self.limit, self.running = limit, 0
        self._waiting: list[tuple[int, int]] = []  # (priority, arrival) heap
        self._arrivals = itertools.count()
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def slot(self, priority: int = FOREGROUND):
        me = (priority, next(self._arrivals))
        with self._cond:
            heapq.heappush(self._waiting, me)
            try:
                while self.running >= self.limit or self._waiting[0] != me:
                    self._cond.wait()
            except BaseException:  # interrupted while waiting: those behind must not wait for it
                self._waiting.remove(me)
                heapq.heapify(self._waiting)
                self._cond.notify_all()
                raise
            heapq.heappop(self._waiting)
            self.running += 1
            self._cond.notify_all()  # the next waiter may fit too
        try:
            yield
        finally:
            with self._cond:
                self.running -= 1
                self._cond.notify_all()


def _restore_limit() -> int:
    value = os.environ.get("BUNSHIN_RESTORE_CONCURRENCY", "").strip()
    if not value:
        return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"BUNSHIN_RESTORE_CONCURRENCY={value!r}: expected an integer (0: no limit)") from None
    return n if n > 0 else 1 << 30


#: this process's CRIU restores (`BUNSHIN_RESTORE_CONCURRENCY`: default the CPU count, 0 no limit)
RESTORE_GATE = RestoreGate(_restore_limit())


def live_workspaces() -> int:
    """Workspaces of this process not destroyed yet (frozen ones included)."""
    return sum(not ws._destroyed for ws in list(_LIVE))


@atexit.register
def _destroy_live_workspaces() -> None:
    """Workspaces the program forgot to destroy die with it: no process or mount outlives the host process."""
    for ws in list(_LIVE):
        try:
            ws.destroy()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _require_root() -> None:
    if os.geteuid() != 0:
        raise NotRoot()
    try:
        fs = open("/proc/filesystems").read()
    except OSError:
        fs = ""
    if "overlay" not in fs:
        raise KernelFeatureMissing("overlayfs is not available: `modprobe overlay` or use a kernel with "
                                   "CONFIG_OVERLAY_FS")


def _set_subreaper() -> None:
    # Restored clones are orphaned by `criu restore -d`; as their subreaper we can reap them on destroy.
    PR_SET_CHILD_SUBREAPER = 36
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _external_mounts(dev_nodes: Sequence[str], mem_view: Path | None = None) -> list[tuple[str, str, str]]:
    """(mount point inside, key, host source) of every host bind; keys name them in CRIU images. MEM_MOUNT's
    source is the workspace's memfile view (memfile.py), or all of SHM_DIR for an unhardened one."""
    out = [(b, "bind" + b.replace("/", "_"), layers.bind_source(b)) for b in layers.HOST_BINDS]
    out += [(f"/dev/{n}", f"dev_{n}", f"/dev/{n}") for n in dev_nodes]
    out.append((MEM_MOUNT, "bunshin_mem", str(mem_view or paths.SHM_DIR)))
    return out


def _mount_overlay(lowers: Sequence[Path], upper: Path, work: Path, merged: Path) -> None:
    opts = f"lowerdir={':'.join(map(str, lowers))},upperdir={upper},workdir={work}"
    if _libc.mount(b"overlay", str(merged).encode(), b"overlay", MS_NODEV, opts.encode()) != 0:  # nodes only in /dev
        e = ctypes.get_errno()
        raise WorkspaceError(f"mounting the overlay at {merged} failed: {os.strerror(e)} (options: {opts})")


def _umount(path: Path) -> None:
    _libc.umount2(str(path).encode(), 2)  # MNT_DETACH


def _discard(ws_dir: Path, cgroups: WorkspaceCgroups, mem_view: Path | None) -> None:
    """Undo a workspace that never came up: its processes, cgroups, mounts, state dir and memfile view."""
    cgroups.kill_all()
    cgroups.remove()
    _umount(ws_dir / "merged")
    _umount(ws_dir / "rw")
    shutil.rmtree(ws_dir, ignore_errors=True)
    if mem_view is not None:
        shutil.rmtree(mem_view, ignore_errors=True)


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of its stat), None once it is gone or a zombie: pid and start time
    name one process even after its pid is reused."""
    stat = proc_stat(pid)
    return None if stat is None or stat[1][0] in ("Z", "X") else stat[1][19]


def _claim_ws_dir(ws_dir: Path) -> None:
    """A new workspace's state dir, owned by this process before anything is mounted in it: a start or
    restore killed midway leaves state gc knows is an orphan's (and gc knows this state dir)."""
    ws_dir.mkdir(parents=True)
    (ws_dir / "owner.pid").write_text(str(os.getpid()))
    paths.register_state_dir()


def _make_rw_dirs(ws_dir: Path, disk_mb: int | None) -> None:
    """The workspace's dirs: merged (its root), and rw/upper + rw/work of its overlay on a tmpfs of `disk_mb`
    (its disk quota: a full root filesystem fills that tmpfs only; None: on the state dir, unlimited)."""
    (ws_dir / "merged").mkdir(parents=True)
    rw = ws_dir / "rw"
    rw.mkdir()
    if disk_mb is not None and _libc.mount(b"tmpfs", str(rw).encode(), b"tmpfs", 0,
                                           f"size={disk_mb}m,mode=755".encode()) != 0:
        e = ctypes.get_errno()
        raise WorkspaceError(f"mounting the {disk_mb} MB tmpfs of {ws_dir.name}'s upper dir failed: {os.strerror(e)}")
    for sub in ("upper", "work"):
        (rw / sub).mkdir()


class Workspace:
    """A running workspace. Create with `Workspace.start(spec)` or `Snapshot.fork(n)`.

    Attributes:
        id: unique id (also the name of its state dir and cgroup).
        spec: what it runs.
        init_pid: host pid of its PID 1.
        dev_nodes: the host's device nodes bound into its /dev (init.device_nodes(), fixed at the source's start).
        backend: memory backend it was restored with ("source" for a started workspace).
        parent_snapshot: the snapshot it was forked from, if any.
    """

    def __init__(self, spec: WorkspaceSpec, ws_id: str, init_pid: int, lowers: list[Path], ws_dir: Path,
                 cgroups: WorkspaceCgroups, *, dev_nodes: Sequence[str], backend: str,
                 parent_snapshot: "Snapshot | None", popen: subprocess.Popen | None = None) -> None:
        self.spec, self.id, self.init_pid, self.lowers, self.dir = spec, ws_id, init_pid, lowers, ws_dir
        self.dev_nodes, self.backend, self.parent_snapshot = tuple(dev_nodes), backend, parent_snapshot
        self._cgroups, self._popen = cgroups, popen
        self._pidns = os.readlink(f"/proc/{init_pid}/ns/pid")
        self._destroyed = False
        self._frozen = False
        self._lock = threading.RLock()
        self.client = ExecutorClient(self.host_path(paths.WS_EXECUTOR_SOCKET), label=f"workspace {ws_id}")
        self._services: dict[str, tuple[int, str]] = {}  # name -> (host pid, start time) while running
        self._oom_kills = 0  # the memory cgroup's OOM kills when the services were noted
        #: what it sees at MEM_MOUNT: its lineage's memfiles only (None: unhardened, all of SHM_DIR)
        self.mem_view = memfile.view_dir(ws_id) if spec.harden else None
        _LIVE.add(self)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def start(cls, spec: WorkspaceSpec, timeout: float = 180.0) -> "Workspace":
        """Start a workspace from `spec` and wait until all its services are ready.

        Raises:
            NotRoot, ValueError (bad spec), WorkspaceError (a service failed; its log is in the message).
        """
        _require_root()
        validate_spec(spec)
        if spec.harden and (why := user_namespace_missing()):
            raise KernelFeatureMissing(f"a hardened workspace runs in its own user namespace, but {why}")
        _set_subreaper()
        ws_id = f"{spec.name}-{uuid.uuid4().hex[:8]}"
        ws_dir = paths.STATE_DIR / "ws" / ws_id
        _claim_ws_dir(ws_dir)
        _make_rw_dirs(ws_dir, spec.disk_mb)
        paths.SHM_DIR.mkdir(parents=True, exist_ok=True)
        mem_dir = memfile.new_view(ws_id) if spec.harden else paths.SHM_DIR
        lowers = layers.stack(spec.layers)
        etc = ws_dir / "rw/upper/etc/bunshin"
        etc.mkdir(parents=True)
        (etc / "spec.json").write_text(spec.to_json())
        py = str(paths.VENV / "bin/python")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:" + str(paths.VENV / "bin"),
               "PYTHONPATH": paths.WS_CODE_DIR, "HOME": "/root", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", **dict(spec.env)}
        dev_nodes = device_nodes()
        cfg = {"merged": str(ws_dir / "merged"), "mem_dir": str(mem_dir),
               "binds": [(b, layers.bind_source(b)) for b in layers.HOST_BINDS],
               "dev_nodes": dev_nodes, "userns": spec.harden, "tmpfs_mb": spec.tmpfs_mb,
               "ksm_mergeable": spec.ksm_mergeable, "python": py, "env": env,
               "image_roots": sorted({s.root for s in spec.services if s.root})}
        cgroups = WorkspaceCgroups(ws_id, pids_max=spec.pids_max, memory_max_mb=spec.memory_max_mb,
                                   devices=dev_nodes if spec.harden else ())
        popen = None
        try:
            _mount_overlay(lowers, ws_dir / "rw/upper", ws_dir / "rw/work", ws_dir / "merged")
            with open(ws_dir / "stage1.log", "wb") as stage1_log:
                popen = subprocess.Popen(  # init.py's stage 0: makes the namespaces, forks PID 1
                    [*cgroups.exec_prefix(), py, "-m", "forkcore.init"],
                    env={"PATH": env["PATH"], "PYTHONPATH": str(_REPO_ROOT), "BUNSHIN_INIT_CONFIG": json.dumps(cfg),
                         "PYTHONDONTWRITEBYTECODE": "1"},
                    stdin=subprocess.DEVNULL, stdout=stage1_log, stderr=subprocess.STDOUT, close_fds=True,
                    start_new_session=True)
            init_pid = cls._find_init(popen, ws_dir)
        except BaseException:
            if popen is not None:
                popen.kill()
                popen.wait()
            _discard(ws_dir, cgroups, mem_dir if spec.harden else None)
            raise
        (ws_dir / "init.pid").write_text(str(init_pid))
        ws = cls(spec, ws_id, init_pid, lowers, ws_dir, cgroups, dev_nodes=dev_nodes, backend="source",
                 parent_snapshot=None, popen=popen)
        try:
            ws._wait_ready(timeout)
        except BaseException:
            ws.destroy()
            raise
        ws._watch_services()
        return ws

    @staticmethod
    def _find_init(popen: subprocess.Popen, ws_dir: Path) -> int:
        """The host pid of stage 0's child in a new pid namespace (its id-map helper is a child too, briefly)."""
        own_pidns = os.readlink("/proc/self/ns/pid")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                for kid in Path(f"/proc/{popen.pid}/task/{popen.pid}/children").read_text().split():
                    if os.readlink(f"/proc/{kid}/ns/pid") != own_pidns:
                        return int(kid)
            except OSError:
                pass
            if popen.poll() is not None:
                break
            time.sleep(0.005)
        log = (ws_dir / "stage1.log").read_text(errors="replace")
        raise WorkspaceError(f"workspace init did not start (stage 0 exit {popen.poll()}):\n{log}")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        ready, failed = Path(self.host_path(paths.WS_READY_FILE)), Path(self.host_path("/run/bunshin/failed"))
        while True:
            if not Path(f"/proc/{self.init_pid}").exists():
                raise WorkspaceError(f"workspace {self.id} died while starting:\n{self._stage1_log()}")
            if failed.exists():
                raise WorkspaceError(f"workspace {self.id} failed to start a service:\n{failed.read_text()}\n"
                                     f"{self.logs()}")
            if ready.exists():
                return
            if time.monotonic() > deadline:
                raise WorkspaceError(f"workspace {self.id} not ready after {timeout:.0f}s:\n{self.logs()}")
            time.sleep(0.02)

    def _watch_services(self) -> None:
        """Note the host pid of each service running now (one-shot services have exited already)."""
        try:
            started = json.loads(Path(self.host_path(paths.WS_READY_FILE)).read_text())["services"]
            kids = Path(f"/proc/{self.init_pid}/task/{self.init_pid}/children").read_text().split()
        except (OSError, ValueError, KeyError):
            return
        by_nspid = {}
        for pid in map(int, kids):
            try:
                nspid = next(line.split()[-1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                             if line.startswith("NSpid:"))
                by_nspid[int(nspid)] = (pid, _start_time(pid))
            except (OSError, StopIteration, ValueError):
                continue
        self._services = {name: by_nspid[p] for name, p in started.items() if p in by_nspid}
        self._oom_kills = self._cgroups.oom_kills()

    def check_services(self) -> None:
        """Raise ServiceDied if a service that was running when the workspace started (or was restored) has
        exited since (killed, crashed or OOM-killed), or if the OOM killer ended any process in it since (an
        app, a helper: its memory limit, not what it was asked, decided the outcome). Either way the
        workspace no longer is what its state says."""
        dead = [name for name, (pid, start) in self._services.items() if _start_time(pid) != start]
        if dead:
            raise ServiceDied(f"workspace {self.id}: service {', '.join(map(repr, dead))} is no longer running "
                              f"(killed or crashed; its log: {self.logs(dead[0], tail=5).strip()[-400:]})")
        oom = self._cgroups.oom_kills()
        if oom > self._oom_kills:
            killed, self._oom_kills = oom - self._oom_kills, oom
            raise ServiceDied(f"workspace {self.id}: the kernel's OOM killer ended {killed} "
                              f"process(es) in it (its memory limit is {self.spec.memory_max_mb} MB: "
                              "WorkspaceSpec.memory_max_mb)")

    def _damage_after_a_failed_dump(self, settle_s: float = 0.5) -> str:
        """A line for the dump's error saying why the workspace is broken now, or "". CRIU killed while its code
        ran inside a process (an injected syscall, its parasite) leaves that process unable to go back to what it
        ran: it dies a moment after CRIU, so this watches for a while."""
        deadline = time.monotonic() + settle_s
        while True:
            try:
                self.check_services()
            except ServiceDied as died:
                return f"\nthe interrupted dump damaged the workspace: {died}. Destroy it."
            if time.monotonic() > deadline:
                return ""
            time.sleep(0.05)

    def _stage1_log(self) -> str:
        try:
            return (self.dir / "stage1.log").read_text(errors="replace")
        except OSError:
            return ""

    # ---- using it ---------------------------------------------------------------------------------
    def _check_alive(self, op: str) -> None:
        if self._destroyed:
            raise WorkspaceDestroyed(self.id, op)

    def host_path(self, inside: str) -> str:
        """The host path of a path inside the workspace (through /proc/<init>/root)."""
        return f"/proc/{self.init_pid}/root{inside}"

    def call(self, method: str, timeout: float = 120.0, **params: Any) -> Any:
        """Call an executor method (see executor.py); raises ExecutorError if the handler raised."""
        with self._lock:  # never while a snapshot of this workspace is being taken (another thread)
            self._check_alive(method)
            if self._frozen:
                raise WorkspaceError(f"workspace {self.id} is frozen; thaw() it before calling {method}")
            return self.client.call(method, timeout=timeout, **params)

    def exec(self, argv: Sequence[str], timeout: float = 60.0, **kw: Any) -> dict:
        """Run a command inside the workspace; returns {returncode, stdout, stderr}."""
        return self.call("exec", timeout=timeout + 5, argv=list(argv), timeout_s=timeout, **kw)

    def logs(self, service: str | None = None, tail: int = 40) -> str:
        names = [service] if service else ["init"] + [s.name for s in self.spec.services] + ["executor"]
        out = []
        for n in names:
            try:
                lines = Path(self.host_path(f"/run/bunshin/log/{n}.log")).read_text(errors="replace").splitlines()
                out.append(f"--- {n}.log ---\n" + "\n".join(lines[-tail:]))
            except OSError:
                continue
        return "\n".join(out)

    def pids(self) -> list[int]:
        return namespace_pids(self.init_pid)

    def memory(self) -> TreeMemory:
        """RSS/PSS/USS of every process of the workspace."""
        self._check_alive("measure memory")
        return tree_memory(self.init_pid)

    @property
    def alive(self) -> bool:
        return not self._destroyed and Path(f"/proc/{self.init_pid}").exists()

    def freeze(self) -> None:
        self._check_alive("freeze")
        self.client.close()
        self._cgroups.freeze()
        self._frozen = True

    def thaw(self) -> None:
        self._check_alive("thaw")
        self._cgroups.thaw()
        self._frozen = False

    # ---- snapshot and fork ------------------------------------------------------------------------
    def snapshot(self) -> "Snapshot":
        """Dump the live workspace (it keeps running) into an immutable Snapshot.

        Raises:
            WorkspaceDestroyed, SnapshotError (with the CRIU log tail).
        """
        with self._lock:
            self._check_alive("snapshot")
            if self._frozen:
                raise WorkspaceError(f"workspace {self.id} is frozen; thaw() it before snapshot()")
            if self.backend == "kmod":
                raise SnapshotError(f"workspace {self.id} was restored with the kmod backend, whose device mappings "
                                    "CRIU cannot dump (kmod/README.md, design (b) limits); fork its parent snapshot "
                                    "again, or restore with backend='memfile' when clones must be snapshotted")
            if (self.spec.executor_user or any(sv.user for sv in self.spec.services)) \
                    and not non_root_services_snapshot(self.spec.harden):
                raise SnapshotError(
                    f"workspace {self.id} runs processes as a non-root user, and CRIU cannot dump them here: it "
                    "reads their rlimits with prlimit(2), which needs CAP_SYS_RESOURCE across uids, and this "
                    "process lacks it (see `bunshin doctor`). A hardened workspace (harden=True, the default) "
                    "runs in its own user namespace, where CRIU holds that capability; or run the services as root.")
            self.client.close()  # CRIU cannot dump a unix socket whose peer is outside the tree
            snap_id = uuid.uuid4().hex[:12]
            snap_dir = paths.STATE_DIR / "snapshots" / snap_id
            images = snap_dir / "images"
            try:
                images.mkdir(parents=True)
                (snap_dir / "owner.pid").write_text(str(os.getpid()))
                script = paths.STATE_DIR / "criu-action.sh"
                if not script.exists() or script.read_text() != _ACTION_SCRIPT:
                    tmp = script.with_suffix(".tmp")
                    tmp.write_text(_ACTION_SCRIPT)
                    tmp.chmod(0o755)
                    os.replace(tmp, script)
                layer = snap_dir / "layer"

                def dump_failed(why: str) -> SnapshotError:  # its log kept, its dir gone, damage it left named
                    keep = criu.keep_log(images / "dump.log", paths.STATE_DIR / "failed" / f"dump-{snap_id}.log")
                    shutil.rmtree(snap_dir, ignore_errors=True)
                    return SnapshotError(f"{why}{self._damage_after_a_failed_dump()}\nfull log: {keep or 'not kept'}",
                                         keep and str(keep))

                opts = criu.DumpOptions(
                    pid=self.init_pid, images_dir=images,
                    external_mounts=tuple((m, k) for m, k, _ in _external_mounts(self.dev_nodes)),
                    action_script=str(script), verbosity=criu.DUMP_VERBOSITY,
                    action_env=(("BUNSHIN_UPPER", str(self.dir / "rw/upper")), ("BUNSHIN_LAYER", str(layer)),
                                ("BUNSHIN_UPPER_COPY_TIMES", str(snap_dir / UPPER_COPY_TIMES))))
                verbosity = criu.DUMP_VERBOSITY
                for attempt in range(1, DUMP_ATTEMPTS + 1):
                    t0 = time.monotonic()
                    try:
                        r = criu.dump(dataclasses.replace(opts, verbosity=verbosity))
                    except subprocess.TimeoutExpired as e:  # CRIU was killed: it may have left damage too
                        raise dump_failed(f"criu dump of {self.id} timed out after {e.timeout}s")
                    dump_s = time.monotonic() - t0
                    # read from the images (after the thaw), not from the log, which is short on the hot path
                    unrestorable = criu.thread_proc_files_in_images(images) if r.returncode == 0 else []
                    raced = r.returncode != 0 and criu.dump_raced(images / "dump.log")
                    # CRIU's own failure of a dump logged briefly is taken again with the full log, kept if it
                    # recurs; not one killed from outside (a signal: nothing to learn, and it may have left damage)
                    quiet_failure = (r.returncode > 0 and not raced and verbosity < criu.FULL_VERBOSITY
                                     and self.alive and not self._damage_after_a_failed_dump(settle_s=0))
                    if attempt == DUMP_ATTEMPTS or not (unrestorable or raced or quiet_failure):
                        break
                    if quiet_failure:
                        log.info("criu dump of %s failed (exit %d, attempt %d): taking it again with the full log",
                                 self.id, r.returncode, attempt)
                        verbosity = criu.FULL_VERBOSITY
                    else:
                        # A process exited or a socket closed while CRIU seized the tree (e.g. a Chromium helper),
                        # or a process held a thread's /proc file for a moment: the tree still runs; take it again.
                        log.info("criu dump of %s raced a changing process tree (attempt %d%s); retrying", self.id,
                                 attempt, f", open: {', '.join(unrestorable)}" if unrestorable else "")
                    shutil.rmtree(layer, ignore_errors=True)
                    (snap_dir / UPPER_COPY_TIMES).unlink(missing_ok=True)
                    for f in images.iterdir():
                        f.unlink()
                    time.sleep(0.2 * attempt)
                if r.returncode != 0 or not layer.is_dir() or unrestorable:
                    why = (f"workspace {self.id} kept a thread's /proc file open ({', '.join(unrestorable)}) through "
                           f"{DUMP_ATTEMPTS} dumps: CRIU restores a process's files before its threads, so no clone "
                           "could be restored from them. Close it (a process's own /proc/<pid> entries are fine) "
                           "before snapshotting." if unrestorable else
                           f"criu dump of workspace {self.id} failed (exit {r.returncode}):\n"
                           f"{criu.log_tail(images / 'dump.log')}")
                    raise dump_failed(why)
                if not self.alive:
                    shutil.rmtree(snap_dir, ignore_errors=True)
                    raise SnapshotError(f"workspace {self.id} died during its snapshot:\n{self.logs()}")
                if self.mem_view is not None:
                    memfile.pin_lineage(self.mem_view, snap_id)
                snap = Snapshot(snap_id, snap_dir, self.spec, [layer] + self.lowers, parent=self.parent_snapshot,
                                dump_s=dump_s, dev_nodes=self.dev_nodes)
                try:
                    snap.write_manifest()
                except BaseException:
                    snap.release()  # its dir, its pin and its hold on the parent
                    raise
                return snap
            except BaseException as e:  # no partial snapshot stays, whatever stopped it
                shutil.rmtree(snap_dir, ignore_errors=True)
                shutil.rmtree(memfile.lineage_dir(snap_id), ignore_errors=True)
                if isinstance(e, OSError):  # the state dir is full or unwritable
                    raise SnapshotError(f"snapshot of workspace {self.id} failed writing {paths.STATE_DIR}: {e}") from e
                raise

    def fork(self, n: int = 1, backend: str = "auto") -> list["Workspace"]:
        """n live clones of this workspace as it is now (snapshot + fork; the snapshot is released after)."""
        if n < 1:
            raise ValueError(f"fork(n={n}): n must be >= 1")
        snap = self.snapshot()
        try:
            return snap.fork(n, backend=backend)
        finally:
            snap.release()

    # ---- teardown ---------------------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL every process now, without waiting for a call in flight (it fails: the executor is gone);
        `destroy()` still reaps, unmounts and removes the state. Never during `snapshot()`."""
        if not self._destroyed:
            self._kill_init()

    def _kill_init(self) -> None:
        try:
            os.kill(self.init_pid, signal.SIGKILL)  # PID 1 of a pid namespace: the kernel kills all of it
        except ProcessLookupError:
            pass

    def destroy(self) -> None:
        """Kill every process, unmount, remove its state. Idempotent; leaves nothing behind."""
        with self._lock:
            if self._destroyed:
                return
            self._destroyed = True
            self.client.close()
            try:
                self._cgroups.thaw()  # a frozen task cannot die
            except (OSError, TimeoutError):
                pass
            self._kill_init()
            self._reap()
            _umount(self.dir / "merged")
            _umount(self.dir / "rw")
            self._cgroups.remove()
            shutil.rmtree(self.dir, ignore_errors=True)
            if self.mem_view is not None:
                shutil.rmtree(self.mem_view, ignore_errors=True)
            if self.parent_snapshot is not None:
                self.parent_snapshot.release()

    def _reap(self) -> None:
        if self._popen is not None:
            try:
                self._popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        # A clone's init, restored detached, is this process's child (a subreaper); so is a source's whose
        # `unshare` parent was killed before it.
        reap(self.init_pid, time.monotonic() + 20)
        deadline = time.monotonic() + 20
        while pids_in_namespace(self._pidns) and time.monotonic() < deadline:  # until the namespace is empty
            time.sleep(0.01)

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else ("frozen" if self._frozen else "running")
        return f"<Workspace {self.id} init={self.init_pid} backend={self.backend} {state}>"


class Snapshot:
    """An immutable, refcounted CRIU image + filesystem layers of a workspace at one instant.

    `fork(n)` restores n clones. The snapshot's files are deleted when the last reference is released;
    every clone holds a reference (its root filesystem stacks the snapshot's layer).
    """

    def __init__(self, snap_id: str, snap_dir: Path, spec: WorkspaceSpec, lowers: list[Path],
                 parent: "Snapshot | None", dump_s: float, dev_nodes: Sequence[str]) -> None:
        self.id, self.dir, self.spec, self.lowers, self.dump_s = snap_id, snap_dir, spec, lowers, dump_s
        self.dev_nodes = tuple(dev_nodes)  # its images name one external mount per node: restores give the same
        self.images = snap_dir / "images"
        self._refs = 1
        self._lock = threading.Lock()
        self._prepare_lock = threading.Lock()
        self.parent = parent
        if parent is not None:
            parent.retain()  # our layers stack the parent's
        self.backend_data: dict[str, Any] = {}  # per-backend prepared state (e.g. memfile images)
        self.restore_timeout_s = float(os.environ.get("BUNSHIN_RESTORE_TIMEOUT_S", "120"))

    def _image_sizes(self) -> dict[str, int]:
        # CRIU itself adds stats-restore (and we keep dump.log) beside the images: not part of the state.
        return {f.name: f.stat().st_size for f in sorted(self.images.iterdir())
                if not f.name.startswith("stats-") and not f.name.endswith(".log")}

    def write_manifest(self) -> None:
        """Record every image file's size and the host's versions (both checked before each restore: a
        damaged snapshot, or one dumped under other builds of what the workspace runs, never restores)."""
        host = host_versions()
        (self.dir / "host_versions.json").write_text(json.dumps(host.to_dict()))
        tmp = self.dir / "manifest.json.tmp"
        tmp.write_text(json.dumps({"images": self._image_sizes(), "host_versions": host.digest()}))
        os.replace(tmp, self.dir / "manifest.json")

    def recorded_host_versions(self) -> HostVersions:
        """The host's versions when this snapshot was dumped."""
        return HostVersions.from_dict(json.loads((self.dir / "host_versions.json").read_text()))

    def verify(self, deep: bool = False) -> None:
        """Raise SnapshotError if image files are missing, added or resized since the dump, or if the host's
        kernel, CRIU, Debian packages or venv packages differ from the dump's (see versions.py).

        With deep=True also compare a sha256 of every image (computed and stored on first use)."""
        try:
            recorded = json.loads((self.dir / "manifest.json").read_text())
        except (OSError, ValueError) as e:
            raise SnapshotError(f"snapshot {self.id}: manifest unreadable ({e}); the snapshot is damaged") from e
        now_host = host_versions()
        if recorded.get("host_versions") != now_host.digest():
            try:
                changed = self.recorded_host_versions().differences(now_host)
            except (OSError, ValueError, KeyError):
                changed = ["(the snapshot records no host versions)"]
            raise SnapshotError(f"snapshot {self.id} was dumped under other versions of what its workspace runs "
                                f"({len(changed)} changed: {'; '.join(changed[:6])}{' …' if len(changed) > 6 else ''}); "
                                "its processes would run over files they were not started from: take a new "
                                "snapshot")
        now = self._image_sizes()
        if now != recorded["images"]:
            diff = sorted(set(now.items()) ^ set(recorded["images"].items()))
            raise SnapshotError(f"snapshot {self.id} is damaged: image files changed since the dump "
                                f"(name, size): {diff[:6]}; take a new snapshot")
        if deep:
            import hashlib

            digests = {n: hashlib.sha256((self.images / n).read_bytes()).hexdigest() for n in now}
            if "sha256" not in recorded:
                recorded["sha256"] = digests
                tmp = self.dir / "manifest.json.tmp"
                tmp.write_text(json.dumps(recorded))
                os.replace(tmp, self.dir / "manifest.json")
            elif digests != recorded["sha256"]:
                bad = sorted(n for n in digests if digests[n] != recorded["sha256"].get(n))
                raise SnapshotError(f"snapshot {self.id} is damaged: content of {bad[:6]} changed; take a new snapshot")

    @property
    def released(self) -> bool:
        return self._refs <= 0

    @property
    def frozen_s(self) -> float | None:
        """How long the workspace stood frozen for this snapshot, as CRIU measured it (its stats-dump; the
        rest of `dump_s` ran while the workspace ran on); None when CRIU recorded no stats."""
        frozen_us = criu.stats(self.images, "dump").get("frozen_time")
        return None if frozen_us is None else frozen_us / 1e6

    @property
    def freeze_phases(self) -> dict[str, float | int]:
        """Where the frozen time of this snapshot's dump went (seconds; CRIU's stats-dump and the action script's
        notes): frozen_s (the whole window), freezing_s (seizing the tree, before it), memdump_s (collecting and
        writing the pages, memwrite_s of it the writing), irmap_resolve_s (finding inotify watches' paths),
        upper_copy_s (the overlay upper copied into the layer, in CRIU's post-dump), other_s (the rest: files,
        sockets, mounts and their tmpfs tars, namespaces, registers); pages_written, pages_scanned. {} when
        CRIU recorded no stats."""
        st = criu.stats(self.images, "dump")
        if "frozen_time" not in st:
            return {}
        out: dict[str, float | int] = {k.removesuffix("_time") + "_s": round(st.get(k, 0) / 1e6, 4) for k in (
            "frozen_time", "freezing_time", "memdump_time", "memwrite_time", "irmap_resolve")}
        try:
            start, end = map(int, (self.dir / UPPER_COPY_TIMES).read_text().split())
            out["upper_copy_s"] = round((end - start) / 1e9, 4)
        except (OSError, ValueError):
            out["upper_copy_s"] = None
        out["other_s"] = round(out["frozen_s"] - out["memdump_s"] - out["irmap_resolve_s"]
                               - (out["upper_copy_s"] or 0.0), 4)
        out["pages_written"], out["pages_scanned"] = st.get("pages_written", 0), st.get("pages_scanned", 0)
        return out

    def size_bytes(self) -> int:
        """Bytes on disk, each file once (a backend's prepared images hard-link the dumped ones)."""
        total, seen = 0, set()
        for dirpath, _, files in os.walk(self.dir):
            for f in files:
                try:
                    st = os.lstat(os.path.join(dirpath, f))
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
        return total

    def retain(self) -> "Snapshot":
        with self._lock:
            if self._refs <= 0:
                raise SnapshotReleased(self.id)
            self._refs += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            from .backends import release_backend_data

            release_backend_data(self)
            shutil.rmtree(self.dir, ignore_errors=True)
            if self.parent is not None:
                self.parent.release()

    def fork(self, n: int = 1, backend: str = "auto", background: bool = False) -> list[Workspace]:
        """Restore n live clones, each with fresh namespaces, its own upper dir and executor connection
        (restored in parallel, up to the number of CPUs; with the process's other restores, through
        `RESTORE_GATE`).

        Args:
            n: number of clones (>= 1).
            backend: memory backend: "auto" (best available: kmod → ksm → private), or one of
                "kmod", "memfile" (opt-in, see backends.py), "ksm", "private". Each clone's `.backend` says
                which ran.
            background: no caller waits for these clones yet (a standby pool's refill): restores that one
                waits for go first.
        Raises:
            ValueError (n < 1), BackendUnavailable, RestoreFailed (with the CRIU log tail), SnapshotReleased.
        """
        from .backends import backend_report, get_backend

        if not isinstance(n, int) or n < 1:
            raise ValueError(f"fork(n={n!r}): n must be an int >= 1")
        if self.released:
            raise SnapshotReleased(self.id)
        _require_root()
        _set_subreaper()
        impl = get_backend(backend)
        if backend == "auto":
            skipped = {n: why for n, why in backend_report().items() if why and n != "memfile"}
            log.info("backend auto -> %s (unavailable: %s)", impl.name, skipped)
        self.verify()
        with self._prepare_lock:  # concurrent forks of one snapshot prepare it once
            images = impl.prepare(self)
        priority = RestoreGate.BACKGROUND if background else RestoreGate.FOREGROUND
        if n == 1:
            return [self._restore_one(impl, images, priority)]
        # Restores of one image set are independent CRIU processes: run them side by side, up to the cores.
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(n, os.cpu_count() or 1),
                                                   thread_name_prefix="forkcore-restore") as pool:
            futures = [pool.submit(self._restore_one, impl, images, priority) for _ in range(n)]
            concurrent.futures.wait(futures)
        clones = [f.result() for f in futures if f.exception() is None]
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            for c in clones:
                c.destroy()
            raise failed[0]
        return clones

    def _restore_one(self, impl, images: Path, priority: int) -> Workspace:
        ws_id = f"{self.spec.name}-{uuid.uuid4().hex[:8]}"
        ws_dir = paths.STATE_DIR / "ws" / ws_id
        # CRIU runs in the clone's cgroup, so every task it forks is there too: a failed or hung restore is
        # killed whole, whatever namespaces its half-restored tasks already entered.
        _claim_ws_dir(ws_dir)
        _make_rw_dirs(ws_dir, self.spec.disk_mb)
        cgroups = WorkspaceCgroups(ws_id, pids_max=self.spec.pids_max, memory_max_mb=self.spec.memory_max_mb,
                                   devices=self.dev_nodes if self.spec.harden else ())
        _mount_overlay(self.lowers, ws_dir / "rw/upper", ws_dir / "rw/work", ws_dir / "merged")
        pidfile = ws_dir / "init.pid"
        log = ws_dir / "restore.log"
        mem_view = None
        try:
            if self.spec.harden:
                mem_view = memfile.new_view(ws_id, self.id, own=impl.name == "memfile")
            try:
                with RESTORE_GATE.slot(priority):
                    r = criu.restore(criu.RestoreOptions(
                        images_dir=images, root=ws_dir / "merged", pidfile=pidfile, log_file=log,
                        external_mounts=tuple((k, src) for _, k, src in _external_mounts(self.dev_nodes, mem_view)),
                        exec_prefix=(*cgroups.exec_prefix(), *impl.exec_prefix())), timeout=self.restore_timeout_s)
            except subprocess.TimeoutExpired:
                r = subprocess.CompletedProcess([], returncode=-9, stderr=f"timed out after {self.restore_timeout_s} s")
            if r.returncode != 0 or not pidfile.exists():
                cgroups.kill_all()
                keep = criu.keep_log(log, paths.STATE_DIR / "failed" / f"restore-{ws_id}.log")
                raise RestoreFailed(f"criu restore of snapshot {self.id} ({impl.name} backend) failed "
                                    f"(exit {r.returncode}{': ' + r.stderr.strip()[-300:] if r.stderr else ''}):\n"
                                    f"{criu.log_tail(log)}\nfull log: {keep or 'not kept'}", keep and str(keep))
            init_pid = int(pidfile.read_text())
        except BaseException:
            _discard(ws_dir, cgroups, mem_view)
            raise
        self.retain()
        ws = Workspace(self.spec, ws_id, init_pid, self.lowers, ws_dir, cgroups, dev_nodes=self.dev_nodes,
                       backend=impl.name, parent_snapshot=self)
        ws._watch_services()
        return ws

    def __repr__(self) -> str:
        return f"<Snapshot {self.id} refs={self._refs} dump_s={self.dump_s:.2f}>"
