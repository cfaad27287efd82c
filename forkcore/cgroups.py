"""A workspace's cgroups: the freezer (v1 hierarchy if mounted, else cgroup v2's cgroup.freeze) and its task
limit (the v1 pids controller, or pids.max of the v2 cgroup when the controller is enabled there)."""
from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from .errors import KernelFeatureMissing

log = logging.getLogger("forkcore")
_V1 = Path("/sys/fs/cgroup/freezer")
_V1_PIDS = Path("/sys/fs/cgroup/pids")
_V2_CANDIDATES = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def _v2_root() -> Path | None:
    for p in _V2_CANDIDATES:
        if (p / "cgroup.controllers").exists():
            return p
    return None


class Freezer:
    """One freezer cgroup per workspace: join(pid), freeze(), thaw(), remove(). With `pids_max`, the workspace's
    tasks (processes and threads) are also limited to that many: a fork bomb fails with EAGAIN inside it."""

    _warned_pids = False

    def __init__(self, name: str, create: bool = True, pids_max: int | None = None) -> None:
        parent = self.parent()
        self.path, self.v1 = parent / name, parent.parent == _V1
        self.pids_path = (_V1_PIDS / "bunshin" / name) if self.v1 and (_V1_PIDS / "cgroup.procs").exists() else None
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
            if pids_max is not None:
                self._limit_pids(pids_max)

    def _limit_pids(self, pids_max: int) -> None:
        if self.pids_path is not None:
            self.pids_path.mkdir(parents=True, exist_ok=True)
            (self.pids_path / "pids.max").write_text(str(pids_max))
            return
        if not (self.path / "pids.max").exists():  # cgroup v2: enable the controller for the workspaces' cgroups
            try:
                (self.path.parent / "cgroup.subtree_control").write_text("+pids")
            except OSError:
                pass
        if (self.path / "pids.max").exists():
            (self.path / "pids.max").write_text(str(pids_max))
        elif not Freezer._warned_pids:
            Freezer._warned_pids = True
            log.warning("no pids cgroup controller here (v1 not mounted at %s, v2 without +pids in %s): workspaces "
                        "run without their task limit (WorkspaceSpec.pids_max), so a fork bomb inside one reaches "
                        "the host's limits", _V1_PIDS, self.path.parent / "cgroup.subtree_control")

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
    def existing(cls) -> list["Freezer"]:
        """Every workspace freezer cgroup on this host (forkcore's gc sweeps the orphaned ones)."""
        try:
            parent = cls.parent()
        except KernelFeatureMissing:
            return []
        if not parent.is_dir():
            return []
        return [cls(d.name, create=False) for d in sorted(parent.iterdir()) if d.is_dir()]

    def _joined(self) -> list[Path]:
        return [self.path] + ([self.pids_path] if self.pids_path is not None and self.pids_path.is_dir() else [])

    def join(self, pid: int) -> None:
        for path in self._joined():
            (path / "cgroup.procs").write_text(str(pid))

    def join_self(self) -> None:
        """For subprocess preexec_fn: move the calling process into the cgroups."""
        for path in self._joined():
            with open(path / "cgroup.procs", "w") as f:
                f.write("0" if self.v1 else str(os.getpid()))

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

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill_all(self, timeout: float = 20.0) -> None:
        """SIGKILL every process in the cgroup (thawed first: a frozen task cannot die) and wait until it is
        empty. Reaches what a half-finished CRIU restore left, whatever namespaces those processes are in."""
        try:
            self.thaw()
        except (OSError, TimeoutError):
            pass
        deadline = time.monotonic() + timeout
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)

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
