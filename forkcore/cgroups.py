"""A workspace's cgroups: the freezer (v1 hierarchy if mounted, else cgroup v2's cgroup.freeze) and its limits:
tasks (the v1 pids controller, or pids.max of the v2 cgroup when the controller is enabled there), memory (v1
memory.limit_in_bytes, or v2 memory.max) and devices (the v1 devices controller: only the nodes of the
workspace's own /dev may be opened; cgroup v2 has no devices file, there the workspace relies on its minimal
/dev and the dropped CAP_MKNOD alone)."""
from __future__ import annotations

import logging
import os
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

from .accounting import proc_stat
from .errors import KernelFeatureMissing

log = logging.getLogger("forkcore")
_V1 = Path("/sys/fs/cgroup/freezer")
_V1_LIMITS = {c: Path("/sys/fs/cgroup") / c for c in ("pids", "memory", "devices")}
_V2_CANDIDATES = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
#: the ptmx and ptys of a workspace's own devpts, beside the nodes of its /dev (devices cgroup rules)
PTY_RULES = ("c 5:2 rwm", "c 136:* rwm")


#: how long a killed process that is not (yet) this process's child is watched for its adoption before it is left
#: to its parent: minutes, where its adoption takes milliseconds (a CRIU or stage 0 exiting after it)
ADOPTION_WATCH_S = 600.0


def start_times(pids: Iterable[int]) -> dict[int, str]:
    """{pid: start time (field 22 of its stat)} of those of `pids` that exist, zombies included: a pid and its
    start time name one process even once the pid is reused (pid_max may be only 32768)."""
    out = {}
    for pid in pids:
        if (stat := proc_stat(pid)) is not None:
            out[pid] = stat[1][19]
    return out


def _settle(procs: dict[int, str]) -> None:
    """Drop from `procs` every process that is gone (reaped by its parent, or its pid reused), reaping those that
    are this process's exited children."""
    for pid, started in list(procs.items()):
        stat = proc_stat(pid)
        if stat is None or stat[1][19] != started:
            del procs[pid]
            continue
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                del procs[pid]
        except ChildProcessError:
            pass  # not this process's child (yet): it is adopted if its parent exits first


def reap(pid: int, deadline: float) -> None:
    """`reap_all` of one pid."""
    reap_all(start_times([pid]), deadline)


def reap_all(procs: dict[int, str], deadline: float) -> None:
    """Reap the killed processes `procs` ({pid: start time}, `start_times`) as they exit, polling until `deadline`
    (monotonic); those not gone by then are watched on a daemon thread, so none is left a zombie. A process
    that is not this process's child is reaped if it becomes one: this process is a child subreaper (every
    process that runs workspaces is), and adopts what a dying parent leaves; a restored clone's init is CRIU's
    child until CRIU exits, a dead host's stage 0 is that host's (a soak's kill_host left such an init, killed
    by gc before its CRIU exited, a zombie). The init of a pid namespace is the slow case: it leaves its
    cgroup before it has waited for the rest of its namespace, then becomes reapable, seconds later on a loaded
    machine."""
    procs = dict(procs)
    while True:
        _settle(procs)
        if not procs:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)

    def watch() -> None:
        until = time.monotonic() + ADOPTION_WATCH_S
        while procs and time.monotonic() < until:
            time.sleep(0.05)
            _settle(procs)
        if procs:
            log.warning("killed processes %s outlived %.0f s, never this process's to reap", sorted(procs),
                        ADOPTION_WATCH_S)

    threading.Thread(target=watch, name=f"reap-{min(procs)}", daemon=True).start()


def _v2_root() -> Path | None:
    for p in _V2_CANDIDATES:
        if (p / "cgroup.controllers").exists():
            return p
    return None


def device_rules(dev_nodes: Sequence[str]) -> list[str]:
    """Devices cgroup rules opening exactly the host nodes bound into a workspace's /dev (init.device_nodes),
    and its ptys; nothing may be made (mknod) or opened besides."""
    rules = []
    for name in dev_nodes:
        rdev = os.stat(f"/dev/{name}").st_rdev
        rules.append(f"c {os.major(rdev)}:{os.minor(rdev)} rwm")
    return [*rules, *PTY_RULES]


class WorkspaceCgroups:
    """A workspace's freezer cgroup: join(pid), freeze(), thaw(), remove(), with the workspace's limits
    beside it: `pids_max` tasks (processes and threads: a fork bomb fails with EAGAIN inside it),
    `memory_max_mb` (a memory bomb meets the OOM killer inside it) and, given `devices` (the names of its
    /dev's nodes), only those devices and its ptys (`device_rules`)."""

    _warned: set[str] = set()

    def __init__(self, name: str, create: bool = True, pids_max: int | None = None,
                 memory_max_mb: int | None = None, devices: Sequence[str] = ()) -> None:
        parent = self.parent()
        self.path, self.v1 = parent / name, parent.parent == _V1
        #: the v1 hierarchies of the limits (absent where that controller is not mounted)
        self.limit_paths = {c: root / "bunshin" / name for c, root in _V1_LIMITS.items()
                            if self.v1 and (root / "cgroup.procs").exists()}
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
            if pids_max is not None:
                self._limit("pids", "pids.max", str(pids_max))
            if memory_max_mb is not None:
                self._limit("memory", "memory.limit_in_bytes" if self.v1 else "memory.max", str(memory_max_mb << 20))
            if devices:
                self._limit_devices(devices)

    def _limit(self, controller: str, knob: str, value: str) -> None:
        if controller in self.limit_paths:
            path = self.limit_paths[controller]
            path.mkdir(parents=True, exist_ok=True)
            (path / knob).write_text(value)
            return
        if not (self.path / knob).exists():  # cgroup v2: enable the controller for the workspaces' cgroups
            try:
                (self.path.parent / "cgroup.subtree_control").write_text(f"+{controller}")
            except OSError:
                pass
        if (self.path / knob).exists():
            (self.path / knob).write_text(value)
        elif controller not in WorkspaceCgroups._warned:
            WorkspaceCgroups._warned.add(controller)
            log.warning("no %s cgroup controller here (v1 not mounted at %s, v2 without +%s in %s): workspaces "
                        "run without that limit, so a bomb inside one reaches the host's limits", controller,
                        _V1_LIMITS[controller], controller, self.path.parent / "cgroup.subtree_control")

    def _limit_devices(self, dev_nodes: Sequence[str]) -> None:
        path = self.limit_paths.get("devices")
        if path is None:
            if "devices" not in WorkspaceCgroups._warned:
                WorkspaceCgroups._warned.add("devices")
                log.warning("no v1 devices cgroup here: workspaces rely on their minimal /dev and the dropped "
                            "CAP_MKNOD to keep the host's devices closed")
            return
        path.mkdir(parents=True, exist_ok=True)
        (path / "devices.deny").write_text("a")
        for rule in device_rules(dev_nodes):
            (path / "devices.allow").write_text(rule)

    @staticmethod
    def parent() -> Path:
        """The cgroup directory holding every workspace's freezer cgroup."""
        if (_V1 / "freezer.state").exists() or (_V1 / "tasks").exists():
            return _V1 / "bunshin"
        if (root := _v2_root()) is not None:
            return root / "bunshin"
        raise KernelFeatureMissing("no cgroup freezer: mount the v1 freezer at /sys/fs/cgroup/freezer "
                                   "or cgroup v2 at /sys/fs/cgroup")

    @classmethod
    def existing(cls) -> list["WorkspaceCgroups"]:
        """Every workspace freezer cgroup on this host (forkcore's gc sweeps the orphaned ones)."""
        try:
            parent = cls.parent()
        except KernelFeatureMissing:
            return []
        if not parent.is_dir():
            return []
        return [cls(d.name, create=False) for d in sorted(parent.iterdir()) if d.is_dir()]

    def _joined(self) -> list[Path]:
        return [self.path] + [p for p in self.limit_paths.values() if p.is_dir()]

    def join(self, pid: int) -> None:
        for path in self._joined():
            (path / "cgroup.procs").write_text(str(pid))

    def exec_prefix(self) -> tuple[str, ...]:
        """A command prefix that moves the process into the cgroups, then execs the rest of the command (so
        everything it forks is born inside). Not a subprocess preexec_fn: Python code between fork and exec
        can deadlock in a threaded process (a lock another thread held at the fork, e.g. tracemalloc's)."""
        joins = " && ".join(f"echo $$ > {shlex.quote(str(path / 'cgroup.procs'))}" for path in self._joined())
        return ("/bin/sh", "-c", f'{joins} && exec "$@"', "sh")

    def _set(self, frozen: bool, timeout: float = 10.0) -> None:
        if self.v1:
            want = "FROZEN" if frozen else "THAWED"
            (self.path / "freezer.state").write_text(want)
            deadline = time.monotonic() + timeout
            while (self.path / "freezer.state").read_text().strip() != want:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"cgroup {self.path} did not reach {want} in {timeout}s")
                time.sleep(0.001)
        else:
            (self.path / "cgroup.freeze").write_text("1" if frozen else "0")
            deadline = time.monotonic() + timeout
            want = f"frozen {1 if frozen else 0}"
            while want not in (self.path / "cgroup.events").read_text():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"cgroup {self.path} did not reach '{want}' in {timeout}s")
                time.sleep(0.001)

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer has killed in this workspace's memory cgroup so far (0 where no
        memory controller is there)."""
        if "memory" in self.limit_paths:
            path, key = self.limit_paths["memory"] / "memory.oom_control", "oom_kill"
        else:
            path, key = self.path / "memory.events", "oom_kill"
        try:
            for line in path.read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, timeout: float = 20.0) -> None:
        """SIGKILL every process in the cgroup (thawed first: a frozen task cannot die), wait until it is empty
        and reap those that were children of this process. Reaches what a half-finished CRIU restore left,
        whatever namespaces those processes are in."""
        killed = start_times(self.pids())  # before the thaw: a SIGKILL already pending ends them at once
        try:
            self.thaw()
        except (OSError, TimeoutError):
            pass
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            killed.update(start_times(p for p in pids if p not in killed))
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        # Those that were or become this process's children (adopted as a subreaper: a CRIU killed here leaves it
        # the tasks it was restoring) leave no zombie; a task leaves the cgroup before it is a zombie, so wait a
        # little for them.
        reap_all(killed, time.monotonic() + 2)

    def freeze(self) -> None:
        self._set(True)

    def thaw(self) -> None:
        self._set(False)

    def remove(self) -> None:
        try:
            self.thaw()
        except (OSError, TimeoutError):
            pass
        for path in self._joined():
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # tasks still exiting
