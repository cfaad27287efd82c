"""Freezing a workspace with the cgroup freezer (v1 hierarchy if mounted, else cgroup v2's cgroup.freeze)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .errors import KernelFeatureMissing

_V1 = Path("/sys/fs/cgroup/freezer")
_V2_CANDIDATES = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def _v2_root() -> Path | None:
    for p in _V2_CANDIDATES:
        if (p / "cgroup.controllers").exists():
            return p
    return None


class Freezer:
    """One freezer cgroup per workspace: join(pid), freeze(), thaw(), remove()."""

    def __init__(self, name: str, create: bool = True) -> None:
        parent = self.parent()
        self.path, self.v1 = parent / name, parent.parent == _V1
        if create:
            self.path.mkdir(parents=True, exist_ok=True)

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

    def join(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def join_self(self) -> None:
        """For subprocess preexec_fn: move the calling process into the cgroup."""
        with open(self.path / "cgroup.procs", "w") as f:
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
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)  # tasks still exiting
