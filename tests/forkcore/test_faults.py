"""CRIU killed in the middle of a dump or a restore, a state directory that fills up during a snapshot, and a
host process killed while it restores a clone (gc must then reap all it leaves to this process).

Each gives a clear error, leaves the source workspace running and usable (a later snapshot and a clone of it
work), and leaves nothing behind: no clone process, cgroup, mount or state dir. The disk-filling test runs
with BUNSHIN_STATE_DIR on a small tmpfs it mounts itself, never on the real disk.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from forkcore import CriuUnavailable, RestoreFailed, ServiceDied, SnapshotError, Workspace, criu, paths
from forkcore.accounting import proc_stat
from forkcore.cgroups import WorkspaceCgroups
from forkcore.probe import probe_spec


def _kill_criu_when_it_runs(action: str, after_s: float, first: int | None = None) -> threading.Thread:
    """Kill -9 the `criu ACTION` process this test's call starts, `after_s` seconds after it appears (and
    the process `first` just before it)."""
    def watch():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for pid in criu.running(action):
                time.sleep(after_s)
                if first is not None:
                    os.kill(first, 9)
                    while (stat := proc_stat(first)) is not None and stat[1][0] not in "ZX":  # dead before CRIU
                        time.sleep(0.002)
                with contextlib.suppress(ProcessLookupError):  # CRIU may fail on its own at the death
                    os.kill(pid, 9)
                return
            time.sleep(0.002)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _leftovers() -> tuple:
    mounts = sum(1 for line in open("/proc/self/mountinfo") if str(paths.STATE_DIR) in line)
    ws, snaps = paths.STATE_DIR / "ws", paths.STATE_DIR / "snapshots"  # made by the first workspace
    listed = [sorted(os.listdir(d)) if d.is_dir() else [] for d in (ws, snaps)]
    return *listed, len(WorkspaceCgroups.existing()), mounts


def _start_busy() -> Workspace:
    return Workspace.start(probe_spec("fcfault", hold_mb=384))  # its dump takes long enough to be hit mid-way


@pytest.fixture(scope="module")
def busy():
    """[the module's workspace]: a test whose interrupted dump damaged it puts a new one in its place."""
    holder = [_start_busy()]
    yield holder
    holder[0].destroy()


@pytest.fixture
def busy_workspace(busy):
    return busy[0]


@pytest.mark.parametrize("after_s", [0.02, 0.25])  # before and after the parasite is in the processes
def test_criu_killed_during_a_dump_fails_the_snapshot_and_the_workspace_goes_on(busy, after_s):
    ws = busy[0]
    before = _leftovers()
    count = ws.call("probe.counter", inc=True)
    killer = _kill_criu_when_it_runs("dump", after_s)
    with pytest.raises(SnapshotError, match="failed") as failed:
        ws.snapshot()
    killer.join()
    assert _leftovers() == before
    if "damaged the workspace" in str(failed.value):
        # CRIU was killed while its code ran inside a process (a narrow window, seen once in CI): that process
        # died, and the error says so instead of leaving a workspace that answers from a broken state
        with pytest.raises(ServiceDied):
            ws.check_services()
        ws.destroy()
        busy[0] = ws = _start_busy()
        count = ws.call("probe.counter", inc=True)
    assert ws.call("probe.counter", inc=True) == count + 1  # running, not left frozen or seized
    snap = ws.snapshot()
    try:
        clone = snap.fork(1, backend="private")[0]
        try:
            assert clone.call("probe.counter", inc=True) == count + 2
        finally:
            clone.destroy()
    finally:
        snap.release()


def test_a_dump_whose_criu_and_a_service_die_says_the_workspace_is_damaged(busy):
    """What CI once met by chance (a process died with CRIU), forced: the error says so, and so does the
    workspace afterwards."""
    ws = busy[0]
    killer = _kill_criu_when_it_runs("dump", 0.1, first=ws._services["hold"][0])
    with pytest.raises(SnapshotError, match="(?s)failed.*damaged the workspace.*'hold'.*Destroy it"):
        ws.snapshot()
    killer.join()
    with pytest.raises(ServiceDied, match="'hold'"):
        ws.check_services()
    ws.destroy()
    busy[0] = _start_busy()


@pytest.mark.parametrize("after_s", [0.01, 0.15])
def test_criu_killed_during_a_restore_fails_the_fork_and_leaves_nothing(busy_workspace, after_s):
    snap = busy_workspace.snapshot()
    try:
        before = _leftovers()
        killer = _kill_criu_when_it_runs("restore", after_s)
        with pytest.raises(RestoreFailed, match="exit -9"):
            snap.fork(1, backend="private")
        killer.join()
        assert _leftovers() == before
        clone = snap.fork(1, backend="private")[0]  # the snapshot itself is intact
        clone.destroy()
    finally:
        snap.release()


def test_a_full_state_dir_fails_the_snapshot_clearly_and_leaves_no_partial_snapshot(tmp_path):
    from benchmarks.soak_bench import full_state_dir_snapshot

    out = full_state_dir_snapshot(tmp_path / "state")  # BUNSHIN_STATE_DIR on a 64 MB tmpfs, in a child
    # CRIU may not even get its own error line into a full disk: then the kept log says so
    assert out["error"] and ("No space left on device" in out["error"] or "full log: not kept" in out["error"])
    assert out["ping"] == "pong" and out["snapshots_left"] == []


def test_a_snapshot_that_cannot_run_criu_leaves_no_snapshot_dir(tmp_path, monkeypatch):
    fake = tmp_path / "criu"
    fake.write_text("#!/bin/sh\necho nothing\n")
    fake.chmod(0o755)
    with Workspace.start(probe_spec("fcnocriu")) as ws:
        before = sorted(os.listdir(paths.STATE_DIR / "snapshots"))
        monkeypatch.setenv("BUNSHIN_CRIU", str(fake))
        with pytest.raises(CriuUnavailable, match="printed no version"):
            ws.snapshot()
        assert sorted(os.listdir(paths.STATE_DIR / "snapshots")) == before
        monkeypatch.delenv("BUNSHIN_CRIU")
        ws.snapshot().release()  # and it works again


def test_reaping_orphaned_criu_helpers_never_takes_a_criu_this_process_runs(tmp_path):
    """reap_orphaned_helpers kills this process's children named criu that no CRIU run of it is waiting for
    (helpers of a CRIU that died); a run it started, a `--version` query included, is never one of them."""
    import subprocess

    fake = tmp_path / "criu"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    running = criu._start([str(fake)], {}, action="version")
    stray = subprocess.Popen([str(fake)])  # the control: a criu nobody registered, as an orphaned helper is
    try:
        reaped = criu.reap_orphaned_helpers()
        assert stray.pid in reaped and running.pid not in reaped
        assert running.poll() is None
    finally:
        running.kill()
        running.communicate()
        criu._finished(running)
        stray.kill()
        stray.wait()


def test_the_tools_a_dead_criu_was_running_are_killed_and_reaped(tmp_path):
    """Every CRIU runs tools (`sh -c "iptables -w -L"`); killed, as a fault or a timeout kills it, it leaves them
    to this process, their subreaper: they must neither run on nor stay zombies (a soak counted one as a leak)."""
    import subprocess

    from forkcore.workspace import _set_subreaper

    _set_subreaper()  # as every process that runs workspaces is
    pids = tmp_path / "pids"
    # a child tool, and the tool's own child, as sh -c forks iptables; on /dev/null, as CRIU's tools are
    fake = tmp_path / "criu"
    fake.write_text('#!/bin/sh\nsh -c \'sleep 60 & echo $! >> "$PIDS"; wait\' >/dev/null 2>&1 &\n'
                    'echo $! >> "$PIDS"\nexec sleep 60\n')
    fake.chmod(0o755)
    p = criu._start([str(fake)], {"PATH": os.environ["PATH"], "PIDS": str(pids)}, action="restore")
    deadline = time.monotonic() + 10
    while len(pids.read_text().split() if pids.exists() else []) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    tools = [int(pid) for pid in pids.read_text().split()]
    assert len(tools) == 2
    p.kill()
    p.communicate()
    criu._finished(p)
    assert [pid for pid in tools if os.path.exists(f"/proc/{pid}")] == []  # neither running nor a zombie
    assert p.pid not in criu._RUNNING


def test_a_namespace_init_that_dies_after_the_reap_deadline_is_still_reaped():
    """kill_all waits 2 s to reap the tasks it killed. A pid namespace's init leaves its cgroup first and becomes
    reapable only once the rest of its namespace has exited: here a task held frozen in another cgroup for 4 s,
    as a loaded machine delays it. The init, this process's child (a subreaper, as for restored clones), must
    still be reaped rather than left a zombie."""
    import subprocess

    from forkcore import workspace
    from forkcore.accounting import proc_stat

    workspace._set_subreaper()
    killed, frozen = WorkspaceCgroups("fcreap-killed"), WorkspaceCgroups("fcreap-frozen")
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "sh", "-c", "sleep 600 & wait"])
    try:
        def children(pid: int) -> list[int]:
            deadline = time.monotonic() + 10
            while not (found := open(f"/proc/{pid}/task/{pid}/children").read().split()):
                assert time.monotonic() < deadline, f"pid {pid} has no child"
                time.sleep(0.01)
            return [int(p) for p in found]

        init = children(ns.pid)[0]
        member = children(init)[0]
        frozen.join(member)
        frozen.freeze()
        killed.join(init)
        ns.kill()  # the init is now this process's child
        ns.wait()
        threading.Timer(4.0, frozen.thaw).start()
        killed.kill_all()
        time.sleep(6)
        left = proc_stat(init)
        assert left is None, f"the namespace's init is left in state {left[1][0]}"
    finally:
        frozen.thaw()
        for cg in (killed, frozen):
            cg.kill_all()
            cg.remove()


_HOST = """
from forkcore import Workspace
from forkcore.probe import probe_spec
source = Workspace.start(probe_spec("fchost", hold_mb=32))  # a started workspace: its stage 0 is this host's child
snap = source.snapshot()
print("live", flush=True)
clones = []
while True:  # restores back to back, so that the host dies in the middle of one
    clones.append(snap.fork(1, backend="private")[0])
    if len(clones) > 2:
        clones.pop(0).destroy()
"""


def _stop_criu_with_its_clone_restored(host: int) -> int:
    """Stop (SIGSTOP) `host`'s next `criu restore` once it has written the clone's pidfile, while the clone's init
    is still its child (before CRIU exits and the init is reparented). Returns CRIU's pid."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for d in os.listdir("/proc"):
            stat = proc_stat(d) if d.isdigit() else None
            try:
                args = open(f"/proc/{d}/cmdline").read().split("\0") if stat and stat[1][1] == str(host) else []
            except OSError:
                continue
            if "restore" not in args or "--pidfile" not in args:
                continue
            pid, pidfile, started = int(d), args[args.index("--pidfile") + 1], stat[1][19]

            def signal_criu(sig: int) -> None:  # never another process that took its pid
                if (now := proc_stat(pid)) is not None and now[1][19] == started:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)

            while not os.path.exists(pidfile) and proc_stat(pid) is not None:
                time.sleep(0.0002)
            signal_criu(signal.SIGSTOP)
            with contextlib.suppress(OSError, ValueError):
                init = proc_stat(int(open(pidfile).read()))
                if init is not None and init[1][1] == str(pid):
                    return pid
            signal_criu(signal.SIGCONT)  # too late: CRIU had exited; wait for the next restore
        time.sleep(0.002)
    raise AssertionError("never caught a restore between its pidfile and CRIU's exit")


def test_a_host_killed_while_its_clone_is_restored_leaves_nothing_after_gc(monkeypatch):
    """A Bunshin host process SIGKILLed with a started workspace and a clone half restored (a soak's kill_host once
    left a zombie this way): its processes are adopted by this process, their nearest child subreaper, and gc must
    kill and reap them all. The clone's init is CRIU's child until CRIU exits, so it is adopted only after gc
    killed it: CRIU is held stopped just after writing the clone's pidfile (as a loaded machine delays it) until gc
    kills it too, after its wait for the init (shortened here). Then the soak's leak census reads what it read
    before the host started."""
    import subprocess
    import sys

    from benchmarks.soak_bench import _census, _settled_census
    from forkcore import gc
    from forkcore.workspace import _set_subreaper

    _set_subreaper()  # as every process that runs workspaces is
    monkeypatch.setattr(gc, "INIT_EXIT_WAIT_S", 2.0)
    before, before_pids = _census()
    repo = Path(__file__).resolve().parents[2]
    host = subprocess.Popen([sys.executable, "-c", _HOST], stdout=subprocess.PIPE, text=True, cwd=repo,
                            env={**os.environ, "PYTHONPATH": str(repo)})
    criu_pid = None
    try:
        assert host.stdout.readline().strip() == "live"
        criu_pid = _stop_criu_with_its_clone_restored(host.pid)
    finally:
        host.kill()
        host.wait()
        host.stdout.close()
        if criu_pid is None:  # failed before the fault: leave nothing behind
            gc.collect()
    gc.collect()
    after, after_pids = _settled_census(before)
    leaked = {k: after[k] - before[k] for k in before if after[k] != before[k]}
    assert not leaked, (leaked, {pid: what for pid, what in after_pids.items() if pid not in before_pids})
