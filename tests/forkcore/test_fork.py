"""Real workspaces, real CRIU: clones continue from the source's state and are isolated from each other."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from forkcore import (BackendUnavailable, ExecutorError, RestoreFailed, SnapshotError, SnapshotReleased, Workspace,
                      WorkspaceDestroyed, backend_report)
from forkcore.accounting import proc_stat

pytestmark = [pytest.mark.criu, pytest.mark.browser]


@contextmanager
def _one_clone(ws: Workspace):
    """A private-backend clone of `ws` (snapshot released and clone destroyed afterwards)."""
    snap = ws.snapshot()
    try:
        (c,) = snap.fork(1, backend="private")
        try:
            yield c
        finally:
            c.destroy()
    finally:
        snap.release()


def _state(ws: Workspace) -> dict:
    return {"counter": ws.call("probe.counter"),
            "page": ws.call("probe.browser_eval", expression="[window.x, document.getElementById('d').textContent]"),
            "echo": ws.call("probe.tcp_roundtrip", message="ping"),
            "digest": ws.call("probe.hold_digest")}


def test_clone_continues_from_source_state(source, snapshot, clone):
    expected = {"counter": 2, "page": [42, "changed"], "echo": "ping", "digest": source.call("probe.hold_digest")}
    assert _state(clone) == expected
    lines = clone.call("probe.read_append")
    assert lines[0] == "line 0" and len(lines) >= 1
    time.sleep(0.5)
    later = clone.call("probe.read_append")
    assert later[: len(lines)] == lines and len(later) > len(lines), "the appender keeps running in the clone"
    assert later == [f"line {i}" for i in range(len(later))], "no line lost or duplicated across the restore"


def test_clones_and_source_are_isolated(source, snapshot):
    a, b = snapshot.fork(2, backend="private")
    try:
        a.exec(["sh", "-c", "echo from-a > /tmp/iso; echo from-a > /var/tmp/iso"])
        for _ in range(5):
            a.call("probe.counter", inc=True)
        a.call("probe.browser_eval", expression="window.x = 1000")
        for other in (b, source):
            assert other.exec(["cat", "/tmp/iso"])["returncode"] != 0
            assert other.exec(["cat", "/var/tmp/iso"])["returncode"] != 0
            assert other.call("probe.browser_eval", expression="window.x") == 42
        assert a.call("probe.counter") == 7
        assert b.call("probe.counter") == 2 and source.call("probe.counter") == 2, "each has its own server on :8101"
    finally:
        a.destroy()
        b.destroy()


def test_clone_cannot_reach_host_or_siblings(snapshot, clone):
    sibling = snapshot.fork(1, backend="private")[0]
    try:
        repo = str(Path(__file__).resolve().parents[2])
        r = clone.exec(["sh", "-c", f"ls /root; ls {repo}; ls /work; cat /etc/shadow; ls /home"])
        assert r["stdout"].strip() == "", r
        assert clone.exec(["test", "-e", repo])["returncode"] != 0
        # the sibling's processes do not exist in this pid namespace
        assert clone.exec(["kill", "-0", str(sibling.init_pid)])["returncode"] != 0
        assert sibling.init_pid not in [int(p) for p in clone.exec(["ls", "/proc"])["stdout"].split() if p.isdigit()]
        links = clone.exec(["ls", "/sys/class/net"])["stdout"].split()
        assert links == ["lo"], "loopback only"
    finally:
        sibling.destroy()


def test_fork_of_a_clone_continues_from_the_clone(clone):
    clone.call("probe.counter", inc=True)
    clone.call("probe.browser_eval", expression="window.x = 7")
    grandchild = clone.fork(1, backend="private")[0]
    try:
        assert grandchild.call("probe.counter") == 3
        assert grandchild.call("probe.browser_eval", expression="window.x") == 7
        assert grandchild.call("probe.tcp_roundtrip", message="gc") == "gc"
        grandchild.call("probe.counter", inc=True)
        assert clone.call("probe.counter") == 3
    finally:
        grandchild.destroy()


def test_snapshot_leaves_source_running_unchanged(source):
    before = _state(source)
    snap = source.snapshot()
    try:
        assert _state(source) == before
        assert 0 < snap.frozen_s < snap.dump_s, "CRIU's own frozen time: a part of the dump's wall"
        n = len(source.call("probe.read_append"))
        time.sleep(0.3)
        assert len(source.call("probe.read_append")) > n
    finally:
        snap.release()
    assert not snap.dir.exists(), "the last release deletes the snapshot's files"


def test_destroy_leaves_nothing_behind(snapshot):
    ws = snapshot.fork(1, backend="private")[0]
    pids, ws_dir, cgroup = ws.pids(), ws.dir, ws._cgroups.path
    assert len(pids) > 5
    ws.destroy()
    assert not any(Path(f"/proc/{p}").exists() and os.readlink(f"/proc/{p}/ns/pid") == ws._pidns
                   for p in pids if Path(f"/proc/{p}").exists())
    assert str(ws_dir) not in Path("/proc/self/mountinfo").read_text()
    assert not ws_dir.exists() and not cgroup.exists()
    ws.destroy()  # idempotent


@pytest.mark.parametrize("backend", ["memfile", "ksm"])
def test_backends_behave_like_private(source, snapshot, backend):
    if backend_report()[backend] is not None:
        pytest.skip(f"backend {backend} unavailable here: {backend_report()[backend]}")
    reference = snapshot.fork(1, backend="private")[0]
    other = snapshot.fork(1, backend=backend)[0]
    try:
        assert other.backend == backend
        assert _state(other) == _state(reference)
        other.call("probe.counter", inc=True)
        assert reference.call("probe.counter") == 2 and source.call("probe.counter") == 2
    finally:
        reference.destroy()
        other.destroy()


def test_memfile_madv_dontneed_caveat(snapshot):
    """After MADV_DONTNEED, Linux gives anonymous memory back as zeros; a memfile clone re-reads the file."""
    if backend_report()["memfile"] is not None:
        pytest.skip(f"memfile unavailable: {backend_report()['memfile']}")
    private = snapshot.fork(1, backend="private")[0]
    memfile = snapshot.fork(1, backend="memfile")[0]
    try:
        assert private.call("probe.region_dontneed_then_read") == 0
        assert memfile.call("probe.region_dontneed_then_read") == 0xAB  # documented in forkcore/memfile.py
    finally:
        private.destroy()
        memfile.destroy()


def test_standby_rollback_restores_the_snapshot_state(snapshot):
    from forkcore.standby import StandbyPool

    with StandbyPool(snapshot, size=1, backend="private", refill_in_background=False) as pool:
        ws = pool.take()
        ws.call("probe.counter", inc=True)
        assert ws.call("probe.counter") == 3
        t0 = time.monotonic()
        ws = pool.rollback(ws)
        assert ws.call("probe.counter") == 2
        assert time.monotonic() - t0 < 30
        ws.destroy()


def test_standby_pool_fills_in_the_background_and_hands_out_thawed_clones(snapshot):
    from forkcore.standby import StandbyPool

    with StandbyPool(snapshot, size=2, backend="private") as pool:
        assert pool.ready < 2, "the constructor does not wait for the restores"
        deadline = time.monotonic() + 120
        while pool.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.ready == 2, pool.last_error
        a, b = pool.take_ready(), pool.take_ready()
        try:
            a.call("probe.counter", inc=True)
            assert (a.call("probe.counter"), b.call("probe.counter")) == (3, 2), "thawed clones are isolated"
        finally:
            a.destroy()
            b.destroy()


def test_standby_pool_shrinks_and_grows_and_refills_only_to_its_new_size(snapshot):
    from forkcore.standby import StandbyPool

    with StandbyPool(snapshot, size=2, backend="private") as pool:
        with pytest.raises(ValueError, match="size must be >= 1"):
            pool.shrink(0)
        deadline = time.monotonic() + 120
        while pool.ready < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.ready == 2, pool.last_error
        pool.shrink(1)
        assert (pool.size, pool.ready) == (1, 1), "the clone beyond the new size is destroyed"
        ws = pool.take_ready()
        try:
            assert ws.call("probe.counter") == 2
            deadline = time.monotonic() + 120
            while pool.ready < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.5)  # a refill beyond the new size would have landed by now
            assert pool.ready == 1, pool.last_error
            pool.grow(2)
            deadline = time.monotonic() + 120
            while pool.ready < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (pool.size, pool.ready) == (2, 2), pool.last_error
        finally:
            ws.destroy()


def test_standby_refill_waits_its_delay_and_close_does_not(snapshot):
    from forkcore.standby import StandbyPool

    with pytest.raises(ValueError, match="refill_delay_s"):
        StandbyPool(snapshot, refill_delay_s=-1)
    pool = StandbyPool(snapshot, size=1, backend="private", refill_delay_s=60)
    deadline = time.monotonic() + 120
    while pool.ready < 1 and time.monotonic() < deadline:  # the first fill is not delayed
        time.sleep(0.05)
    ws = pool.take_ready()
    try:
        assert ws is not None, pool.last_error
        time.sleep(1.5)  # a restore of this probe takes well under that
        assert pool.ready == 0, "the refill did not wait its delay"
    finally:
        ws.destroy()
        t0 = time.monotonic()
        pool.close()
    assert time.monotonic() - t0 < 30, "close() waited for the refill delay"


def test_bad_input_raises_typed_errors(source, snapshot, tmp_path):
    with pytest.raises(ValueError, match="n must be"):
        snapshot.fork(0)
    with pytest.raises(ValueError, match="unknown memory backend"):
        snapshot.fork(1, backend="nope")
    with pytest.raises(BackendUnavailable, match="kmod"):
        snapshot.fork(1, backend="kmod")
    with pytest.raises(ExecutorError, match="UnknownMethod"):
        source.call("no.such.method")
    with pytest.raises(ExecutorError, match="no TCP connection|FileNotFoundError|No such file"):
        source.call("read_file", path="/does/not/exist")
    ws = snapshot.fork(1, backend="private")[0]
    ws.destroy()
    with pytest.raises(WorkspaceDestroyed):
        ws.snapshot()
    with pytest.raises(WorkspaceDestroyed):
        ws.call("ping")
    snap2 = source.snapshot()
    snap2.release()
    with pytest.raises(SnapshotReleased):
        snap2.fork(1)


def test_corrupt_snapshot_fails_loudly_never_restores_wrong_state(source):
    snap = source.snapshot()
    try:
        pages = max(snap.images.glob("pages-*.img"), key=lambda p: p.stat().st_size)
        with open(pages, "r+b") as f:
            f.truncate(pages.stat().st_size // 2)
        with pytest.raises(SnapshotError, match="damaged"):
            snap.fork(1, backend="private")
        core = snap.images / "core-1.img"
        data = bytearray(core.read_bytes())
        data[len(data) // 2] ^= 0xFF
        core.write_bytes(bytes(data))  # same size: only the deep check or CRIU itself can notice
        snap.write_manifest()
        with pytest.raises(RestoreFailed) as err:
            snap.fork(1, backend="private")
        assert err.value.log_path and Path(err.value.log_path).exists()
    finally:
        snap.release()


def test_deep_verify_detects_changed_content(source):
    snap = source.snapshot()
    try:
        snap.verify(deep=True)
        img = snap.images / "pstree.img"
        data = bytearray(img.read_bytes())
        data[-1] ^= 0x01
        img.write_bytes(bytes(data))
        with pytest.raises(SnapshotError, match="content"):
            snap.verify(deep=True)
    finally:
        snap.release()


def test_invalid_spec_is_rejected():
    from forkcore import ServiceSpec, WorkspaceSpec, validate_spec

    with pytest.raises(ValueError, match="ready"):
        validate_spec(WorkspaceSpec("x", services=(ServiceSpec.make("s", ["true"], ready="port 80"),)))
    with pytest.raises(ValueError, match="layer"):
        validate_spec(WorkspaceSpec("x", layers=("relative/dir",)))
    with pytest.raises(ValueError, match="name"):
        validate_spec(WorkspaceSpec("bad name!"))


def test_one_shot_service_and_sub_second_mtimes_survive_a_fork():
    """A service that writes its ready file and exits counts as started (the next one runs after it); files
    on the workspace's tmpfs keep their nanosecond mtimes across snapshot/restore (apps compare them)."""
    from forkcore import ServiceSpec, WorkspaceSpec

    seed = ServiceSpec.make("seed", ["sh", "-c", "mkdir -p /home/u && echo hi > /home/u/f && touch -d "
                                     "'2024-01-02 03:04:05.123456789' /home/u/f && touch /home/u/ready"],
                            ready="file:/home/u/ready", ready_timeout_s=20)
    after = ServiceSpec.make("after", ["sh", "-c", "cat /home/u/f > /tmp/after; exec sleep 1000"],
                             ready="file:/tmp/after", ready_timeout_s=20)
    ws = Workspace.start(WorkspaceSpec("oneshot", services=(seed, after)))
    try:
        assert ws.exec(["cat", "/tmp/after"])["stdout"] == "hi\n"
        with _one_clone(ws) as c:
            assert c.exec(["stat", "-c", "%y", "/home/u/f"])["stdout"].startswith("2024-01-02 03:04:05.123456789")
    finally:
        ws.destroy()
    failing = ServiceSpec.make("bad", ["sh", "-c", "exit 3"], ready="file:/nonexistent", ready_timeout_s=20)
    with pytest.raises(Exception, match="exited with 3 before it was ready"):
        Workspace.start(WorkspaceSpec("oneshotbad", services=(failing,)))


def test_services_and_executor_run_as_a_layer_defined_user_with_sudo():
    """`user_layer` adds an account (password, sudo group) to the workspace's /etc; `ServiceSpec.user` and
    `executor_user` run processes as it. A hardened workspace lives in its own user namespace, where CRIU may
    dump other users' processes: its clone keeps the uids, and sudo works there too. Without hardening that
    takes CAP_SYS_RESOURCE: where this process lacks it, the snapshot refuses with the reason."""
    from forkcore import ServiceSpec, WorkspaceSpec
    from forkcore.capabilities import non_root_services_snapshot
    from forkcore.layers import user_layer

    account = user_layer("alice", 1000, "s3cret", sudo=True, hostname="box")
    svc = ServiceSpec.make("sleeper", ["sleep", "1000"], user="alice")

    def check_user(w: Workspace) -> None:
        ps = w.exec(["ps", "-eo", "user=,comm="])["stdout"].split("\n")
        assert any(ln.split() == ["alice", "sleep"] for ln in ps), ps
        assert w.exec(["id", "-un"])["stdout"] == "alice\n"  # exec runs in the executor, as alice
        ok = w.exec(["sh", "-c", "echo s3cret | sudo -S -k -p '' id -un"])
        assert (ok["returncode"], ok["stdout"]) == (0, "root\n"), ok
        bad = w.exec(["sh", "-c", "echo wrong | sudo -S -k -p '' id -un"])
        assert bad["returncode"] != 0 and "incorrect password" in bad["stderr"]

    for harden in (True, False):
        ws = Workspace.start(WorkspaceSpec("userws", services=(svc,), layers=(str(account),), hostname="box",
                                           executor_user="alice", harden=harden))
        try:
            check_user(ws)
            if non_root_services_snapshot(harden):
                with _one_clone(ws) as c:
                    check_user(c)
            else:
                with pytest.raises(SnapshotError, match="CAP_SYS_RESOURCE"):
                    ws.snapshot()
                assert ws.exec(["id", "-un"])["stdout"] == "alice\n"  # the refusal left the workspace usable
        finally:
            ws.destroy()
    with pytest.raises(Exception, match="'bob' is not in the workspace's /etc/passwd"):
        Workspace.start(WorkspaceSpec("nouser", executor_user="bob"))


PKEY_ALLOC = ("import ctypes, platform; libc = ctypes.CDLL(None, use_errno=True); "
              "r = libc.syscall({'x86_64': 330, 'aarch64': 289}[platform.machine()], 0, 0); "
              "print(r, ctypes.get_errno() if r < 0 else 0)")


def _pkey_alloc(ws: Workspace | None) -> tuple[int, int]:
    import subprocess
    import sys

    if ws is None:
        out = subprocess.run([sys.executable, "-c", PKEY_ALLOC], capture_output=True, text=True, check=True).stdout
    else:
        out = ws.exec([sys.executable, "-c", PKEY_ALLOC])["stdout"]
    ret, err = out.split()
    return int(ret), int(err)


def test_workspaces_answer_pkey_alloc_as_a_cpu_without_pku(source, clone):
    """CRIU 4.1.1 restores no protection-key state, so a workspace must never hold any: pkey_alloc fails with
    ENOSPC in the source and in a clone (the filter is restored with the processes); allow_pkeys=True gives
    the host kernel's own answer (a key on a PKU CPU, EINVAL/ENOSPC elsewhere)."""
    import dataclasses
    import errno

    from forkcore.probe import probe_spec

    assert _pkey_alloc(source) == (-1, errno.ENOSPC)
    assert _pkey_alloc(clone) == (-1, errno.ENOSPC)
    host = _pkey_alloc(None)
    with Workspace.start(dataclasses.replace(probe_spec("pkeys"), allow_pkeys=True)) as ws:
        inside = _pkey_alloc(ws)
    assert (inside[0] >= 0) == (host[0] >= 0) and (host[0] >= 0 or inside[1] == host[1]), (inside, host)


def test_clone_opens_new_pages_in_its_restored_browser(clone):
    """A new page is a new renderer forked by the restored zygote (what Chromium 156 on PKU CPUs broke)."""
    assert clone.call("probe.browser_new_page", html="<p>fresh</p>") == "fresh"
    assert clone.call("probe.browser_new_page", html="<p>again</p>") == "again"
    assert clone.call("probe.browser_eval", expression="window.x") == 42


def test_snapshot_refuses_to_restore_under_other_host_versions(snapshot, monkeypatch):
    """A snapshot records the host's package versions; after an upgrade (here: one version changed) it
    refuses to restore, naming what changed, instead of running old memory over new files."""
    import dataclasses

    from forkcore import versions as hv
    from forkcore import workspace

    now = hv.host_versions()
    assert now.version_of("chromium"), "the browser is a Debian package of this host"
    upgraded = dataclasses.replace(now, debian={**now.debian, "chromium": "999.0.1-1"})
    monkeypatch.setattr(workspace, "host_versions", lambda: upgraded)
    with pytest.raises(SnapshotError, match=r"chromium \S+ -> 999\.0\.1-1.*take a new snapshot"):
        snapshot.fork(1, backend="private")
    monkeypatch.undo()
    snapshot.fork(1, backend="private")[0].destroy()


def test_dump_retries_when_a_process_is_caught_mid_exit(tmp_path, caplog):
    """A process whose main thread has exited while another still runs (mid-exit) cannot be dumped; the
    snapshot is taken again once it is gone instead of failing (seen with exiting Chromium helpers)."""
    import base64
    import logging
    import subprocess

    from forkcore import ServiceSpec, WorkspaceSpec

    binary = tmp_path / "zombie_leader"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(binary), str(Path(__file__).parent / "data/zombie_leader.c")],
                   check=True)
    ws = Workspace.start(WorkspaceSpec("midexit", services=(ServiceSpec.make("idle", ["sleep", "1000"]),)))
    try:
        ws.call("write_file", path="/tmp/zombie_leader", data_b64=base64.b64encode(binary.read_bytes()).decode(),
                mode=0o755)
        ws.exec(["sh", "-c", "/tmp/zombie_leader 600 >/dev/null 2>&1 & sleep 0.1"])
        assert "Zl" in ws.exec(["ps", "-o", "stat=", "-C", "zombie_leader"])["stdout"], "the mid-exit state exists"
        with caplog.at_level(logging.INFO, logger="forkcore"):
            snap = ws.snapshot()
        _a_clone_runs_python(snap)
        assert any("raced a changing process tree" in r.message for r in caplog.records), "the first dump met it"
    finally:
        ws.destroy()


@pytest.mark.parametrize("recurs", [False, True])
def test_a_dump_criu_fails_is_taken_again_with_the_full_log(monkeypatch, recurs):
    """The hot path's dump logs without debug lines: a dump CRIU fails by itself is taken again at -v4, which
    either succeeds (a passing failure) or fails again and keeps its full log."""
    import subprocess

    from forkcore import ServiceSpec, WorkspaceSpec, criu

    real, seen = criu.dump, []

    def failing(opts, timeout=300):
        seen.append(opts.verbosity)
        if len(seen) == 1 or recurs:
            (opts.images_dir / opts.log_file).write_text(f"(00.1) -v{opts.verbosity}\n"
                                                          "(00.2) Error (criu/cr-dump.c:1): Dumping FAILED.\n")
            return subprocess.CompletedProcess([], 1, "", "")
        return real(opts, timeout)

    monkeypatch.setattr(criu, "dump", failing)
    ws = Workspace.start(WorkspaceSpec("dumpretry", services=(ServiceSpec.make("idle", ["sleep", "1000"]),)))
    try:
        if recurs:
            with pytest.raises(SnapshotError, match="full log: ") as failed:
                ws.snapshot()
            assert "-v4" in Path(failed.value.log_path).read_text(), "the kept log is the full one"
        else:
            _a_clone_runs_python(ws.snapshot())
    finally:
        ws.destroy()
    assert seen == [criu.DUMP_VERBOSITY, criu.FULL_VERBOSITY]


def _a_clone_runs_python(snap) -> None:
    """A private clone of `snap` restores and runs Python; the snapshot is released after."""
    import sys

    try:
        with snap.fork(1, backend="private")[0] as c:
            assert c.exec([sys.executable, "-c", "print(6 * 7)"])["stdout"] == "42\n"
    finally:
        snap.release()


#: a thread that holds its own /proc/<pid>/task/<tid>/status open until /tmp/release exists
_THREAD_PROC_HOLDER = """
import os, threading, time
def hold():
    f = open(f"/proc/self/task/{threading.get_native_id()}/status")
    while not os.path.exists("/tmp/release"):
        time.sleep(0.05)
    f.close()
    time.sleep(100000)
threading.Thread(target=hold).start()
"""


def test_a_snapshot_never_keeps_a_threads_proc_file_no_clone_could_reopen():
    """CRIU restores a process's files before its threads: a dump that caught a non-leader thread's /proc file
    open (Chromium's browser reads its children's threads' status) restored nowhere. It is dumped again, and a
    tree that keeps such a file open fails its snapshot clearly instead of leaving a snapshot no fork can use."""
    import sys

    from forkcore import ServiceSpec, WorkspaceSpec

    ws = Workspace.start(WorkspaceSpec("threadproc", services=(
        ServiceSpec.make("holder", [sys.executable, "-c", _THREAD_PROC_HOLDER]),)))
    try:
        held = ws.exec(["sh", "-c", "sleep 0.3; ls -l /proc/*/fd | grep -o '/proc/[0-9]*/task/[0-9]*/status'"])
        assert held["stdout"].strip(), "the thread holds its status file"
        with pytest.raises(SnapshotError, match=r"kept a thread's /proc file open \(/proc/\d+/task/\d+/status\)"):
            ws.snapshot()
        ws.exec(["touch", "/tmp/release"])
        time.sleep(0.3)
        _a_clone_runs_python(ws.snapshot())  # the same tree once the file is closed
    finally:
        ws.destroy()


def test_a_dump_log_names_the_thread_proc_files_a_restore_could_not_reopen(tmp_path):
    from forkcore import criu

    log = tmp_path / "dump.log"
    log.write_text("(02.2) Dumping path for 23 fd via self 41 [/proc/123/statm]\n"
                   "(02.2) Dumping path for 24 fd via self 42 [/proc/123/task/123/status]\n"
                   "(02.3) Dumping path for 116 fd via self 43 [/proc/180/task/192/status]\n"
                   "(02.3) Dumping path for 117 fd via self 44 [/proc/180/task/193]\n")
    assert criu.thread_proc_files(log) == ["/proc/180/task/192/status", "/proc/180/task/193"]
    assert criu.thread_proc_files(tmp_path / "missing.log") == []


def test_a_dumps_files_image_names_the_thread_proc_files_at_any_log_level(tmp_path):
    """The same check as the log's, read from files.img: the hot path's dump logs only errors and warnings."""
    import pycriu.images

    from forkcore import criu

    names = ["/proc/123/statm", "/proc/123/task/123/status", "/proc/180/task/192/status", "/proc/180/task/193",
             "/usr/lib/x86_64-linux-gnu/libc.so.6"]
    fown = {"uid": 0, "euid": 0, "signum": 0, "pid_type": 0, "pid": 0}
    with open(tmp_path / "files.img", "wb") as f:
        pycriu.images.dump({"magic": "FILES", "entries": [
            {"id": i, "type": "REG", "reg": {"id": i, "flags": 0, "pos": 0, "fown": fown, "name": n}}
            for i, n in enumerate(names, 1)]}, f)
    assert criu.thread_proc_files_in_images(tmp_path) == ["/proc/180/task/192/status", "/proc/180/task/193"]
    assert criu.thread_proc_files_in_images(tmp_path / "none") == []


@pytest.mark.parametrize("limit", ["timeout", "log"])
def test_a_restore_stopped_midway_leaves_no_process_behind(snapshot, monkeypatch, limit):
    """A restore that times out, or whose log runs away (CRIU looping on a damaged image filled 14 GB of disk
    here once), is killed whole: CRIU's forked tasks too, in whatever namespaces they had entered."""
    from forkcore import criu, paths

    before = {p for p in os.listdir("/proc") if p.isdigit()}
    dirs_before = set((paths.STATE_DIR / "ws").iterdir())
    if limit == "timeout":
        monkeypatch.setattr(snapshot, "restore_timeout_s", 0.25)
    else:
        monkeypatch.setattr(criu, "RESTORE_LOG_LIMIT", 20_000)
    with pytest.raises(RestoreFailed, match="timed out" if limit == "timeout" else "restore log passed"):
        snapshot.fork(1, backend="private")
    time.sleep(0.2)
    left = []
    for pid in {p for p in os.listdir("/proc") if p.isdigit()} - before:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "criu" in cmd or "forkcore" in cmd:
            left.append(cmd[:120])
    assert not left, left
    assert set((paths.STATE_DIR / "ws").iterdir()) == dirs_before, "the clone's state dir is removed"


_FREEZE_AND_VANISH = """
import os, sys
from forkcore import Workspace
from forkcore.probe import probe_spec
ws = Workspace.start(probe_spec("gcorphan"))
ws.freeze()
print(ws.id, ws.init_pid, flush=True)
os._exit(0)  # as a killed process or a worker ending with os._exit: nothing destroys the frozen workspace
"""


def test_gc_kills_a_frozen_workspace_whose_owner_is_gone():
    """A frozen standby clone ignores SIGKILL until thawed: gc thaws its cgroup, kills it and removes it."""
    import subprocess
    import sys

    from forkcore.cgroups import WorkspaceCgroups
    from forkcore.gc import collect

    out = subprocess.run([sys.executable, "-c", _FREEZE_AND_VANISH], capture_output=True, text=True, timeout=300,
                         check=True).stdout.split()
    ws_id, init_pid = out[0], int(out[1])
    assert os.path.exists(f"/proc/{init_pid}") and WorkspaceCgroups(ws_id, create=False).pids()
    log = collect()
    assert any(ws_id in line for line in log), log
    gone = WorkspaceCgroups(ws_id, create=False)
    assert not gone.path.exists() and not any(p.exists() for p in gone.limit_paths.values())
    assert not [line for line in open("/proc/self/mountinfo") if ws_id in line]  # its upper's tmpfs too
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{init_pid}") and time.monotonic() < deadline:
        stat = proc_stat(init_pid)
        if stat is None or stat[1][0] == "Z":
            break  # dead; reaped by whichever process adopted it
        time.sleep(0.05)
    else:
        assert not os.path.exists(f"/proc/{init_pid}"), "the orphaned workspace still runs"


def test_a_dump_that_raced_a_changing_tree_is_recognised_for_a_retry(tmp_path):
    from forkcore import criu

    log = tmp_path / "dump.log"
    for line, raced in (("(00.186831) Error (criu/sk-unix.c:351): unix: Unix socket 11481842 not found", True),
                        ("(00.1) Error (criu/seize.c:1): Unseizable non-zombie 42 found, state D", True),
                        ("(00.1) Error (criu/mount.c:1): mnt: Can't dump ns with unsupported mounts", False)):
        log.write_text(f"(00.0) Dumping\n{line}\n(00.2) Error (criu/cr-dump.c:2111): Dumping FAILED.\n")
        assert criu.dump_raced(log) is raced, line
