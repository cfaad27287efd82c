"""Clean up state of workspaces whose processes are gone (after a crash, kill -9 or a lost session)."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import time
from pathlib import Path

from . import criu, memfile, paths
from .cgroups import WorkspaceCgroups, reap_all, start_times

# PID 1 exits only after every task of its namespace is gone: a browser's tree on a loaded machine takes seconds.
INIT_EXIT_WAIT_S = 20.0


def _mounted_under(root: Path) -> list[str]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4]
            if mnt.startswith(str(root) + "/"):
                out.append(mnt)
    return sorted(out, key=len, reverse=True)


def _alive(pid_file: Path) -> bool:
    try:
        return Path(f"/proc/{int(pid_file.read_text())}").exists()
    except (OSError, ValueError):
        return False


def _kill_cgroup(name: str, log: list[str]) -> None:
    fz = WorkspaceCgroups(name, create=False)
    if not fz.path.is_dir():
        return
    if fz.pids():
        fz.kill_all()
        log.append(f"killed the processes left in cgroup {fz.path}")
    fz.remove()


def collect() -> list[str]:
    """Kill workspaces whose owning process is gone; unmount and delete their state. Returns a log.

    A workspace belongs to the process that started or restored it (ws_dir/owner.pid); while that process
    lives, its workspaces are left alone.
    """
    log = []
    libc = ctypes.CDLL(None, use_errno=True)
    ws_root = paths.STATE_DIR / "ws"
    if ws_root.is_dir():
        for d in ws_root.iterdir():
            if _alive(d / "owner.pid"):
                continue
            if _alive(d / "init.pid"):
                pid = int((d / "init.pid").read_text())
                # Its processes are this process's to reap once their owner is gone (a child subreaper adopts what
                # a dying parent leaves): the init, and what the owner had started, as a source's stage 0 (the
                # init's parent, which exits once the init has); a clone's init is adopted only when the CRIU that
                # restored it exits, maybe after this kill. Each is reaped as it exits, by a daemon thread after
                # the deadline, never left a zombie.
                members = start_times([pid, *WorkspaceCgroups(d.name, create=False).pids()])
                try:
                    os.kill(pid, signal.SIGKILL)  # PID 1 of the workspace's namespace: takes all of it down
                    log.append(f"killed orphaned workspace {d.name} (init {pid})")
                except ProcessLookupError:
                    pass
                reap_all(members, time.monotonic() + INIT_EXIT_WAIT_S)
            _kill_cgroup(d.name, log)  # a frozen (standby) clone ignores SIGKILL until thawed
            for m in _mounted_under(d):
                libc.umount2(m.encode(), 2)
            shutil.rmtree(d, ignore_errors=True)
            log.append(f"removed workspace state {d}")
    # cgroups are host-wide: a workspace of any state dir (another BUNSHIN_STATE_DIR, e.g. a local Ray node's)
    # keeps its cgroup; only those whose state is gone everywhere are orphans (a process killed mid-destroy)
    live = {d.name for root in paths.state_dirs() if (root / "ws").is_dir() for d in (root / "ws").iterdir()}
    for fz in WorkspaceCgroups.existing():
        if fz.path.name not in live:
            _kill_cgroup(fz.path.name, log)
    snap_root = paths.STATE_DIR / "snapshots"
    if snap_root.is_dir():
        for d in snap_root.iterdir():
            if (d / "owner.pid").exists() and _alive(d / "owner.pid"):
                continue
            if str(d) in Path("/proc/self/mountinfo").read_text():
                continue  # a live clone stacks its layer
            shutil.rmtree(d, ignore_errors=True)
            log.append(f"removed snapshot {d}")
    for d, owner in memfile.entries():  # memfiles, pins and views whose snapshot or workspace is gone
        if not owner.exists():
            shutil.rmtree(d, ignore_errors=True)
            log.append(f"removed memfiles {d}")
    for pid in criu.reap_orphaned_helpers():  # of a CRIU whose owner died mid-dump or mid-restore
        log.append(f"reaped orphaned CRIU helper {pid}")
    return log
