"""Clean up state of workspaces whose processes are gone (after a crash, kill -9 or a lost session)."""
from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

from . import paths


def _mounted_under(root: Path) -> list[str]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4]
            if mnt.startswith(str(root) + "/"):
                out.append(mnt)
    return sorted(out, key=len, reverse=True)


def collect() -> list[str]:
    """Unmount and delete workspace dirs no live process uses; delete orphaned snapshots. Returns a log."""
    log = []
    libc = ctypes.CDLL(None, use_errno=True)
    ws_root = paths.STATE_DIR / "ws"
    in_use = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                root = os.readlink(f"/proc/{entry}/root")
            except OSError:
                continue
            if root.startswith(str(ws_root)):
                in_use.add(Path(root).parent.name)
    if ws_root.is_dir():
        for d in ws_root.iterdir():
            pid_file = d / "init.pid"
            alive = d.name in in_use
            if pid_file.exists():
                try:
                    alive = alive or Path(f"/proc/{int(pid_file.read_text())}").exists()
                except ValueError:
                    pass
            if alive:
                continue
            for m in _mounted_under(d):
                libc.umount2(m.encode(), 2)
            shutil.rmtree(d, ignore_errors=True)
            log.append(f"removed workspace state {d}")
    return log
