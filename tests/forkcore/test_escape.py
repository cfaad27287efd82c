"""Escape attempts from inside a workspace, as an agent's code would make them (forkcore/hardening.py).

Each attempt runs in a clone restored from the session's hardened snapshot (the hardening must survive CRIU)
and fails there; its negative control runs the same code in a workspace started with `harden=False`, where it
succeeds, so no case passes because the attempt could never work on this machine. Nothing here changes the
host: writable opens are not written to, a remount is undone, a device node is only opened for reading.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import stat

import pytest

from forkcore.errors import ServiceDied
from forkcore.hardening import KEPT_CAPABILITIES

#: a block device of the host (the workspace's /dev has none: the attempt makes its own node of it)
HOST_DISK = next((p for p in ("/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/loop0") if os.path.exists(p)), None)
HOST_DISK_RDEV = os.stat(HOST_DISK).st_rdev if HOST_DISK else 0

# Each attempt prints one JSON line: {"ok": true, ...} when it got through, {"ok": false, "error": ...} if not.
_PRELUDE = "import ctypes, json, os, socket, stat, subprocess\n"
ATTEMPTS = {
    "remount the host's /usr read-write": (
        "r = subprocess.run(['mount', '-o', 'remount,bind,rw', '/usr'], capture_output=True, text=True)\n"
        "if r.returncode == 0: subprocess.run(['mount', '-o', 'remount,bind,ro', '/usr'], check=True)\n"
        "print(json.dumps({'ok': r.returncode == 0, 'error': r.stderr.strip()}))"),
    "mount a tmpfs": (
        "os.makedirs('/tmp/m', exist_ok=True)\n"
        "r = subprocess.run(['mount', '-t', 'tmpfs', 'none', '/tmp/m'], capture_output=True, text=True)\n"
        "if r.returncode == 0: subprocess.run(['umount', '/tmp/m'], check=True)\n"
        "print(json.dumps({'ok': r.returncode == 0, 'error': r.stderr.strip()}))"),
    "make a device node of the host's disk": (  # opening it is the escape; the node is what MKNOD gives
        "try:\n"
        f"    os.mknod('/dev/escape-disk', 0o600 | stat.S_IFBLK, {HOST_DISK_RDEV}); os.unlink('/dev/escape-disk')\n"
        "    print(json.dumps({'ok': True}))\n"
        "except OSError as e: print(json.dumps({'ok': False, 'error': str(e)}))"),
    "open a host sysctl for writing": (
        "try: os.close(os.open('/proc/sys/vm/drop_caches', os.O_WRONLY)); print(json.dumps({'ok': True}))\n"
        "except OSError as e: print(json.dumps({'ok': False, 'error': str(e)}))"),
    "read the host's timer list": (
        "try: data = open('/proc/timer_list').read(4096); print(json.dumps({'ok': bool(data), 'error': 'empty'}))\n"
        "except OSError as e: print(json.dumps({'ok': False, 'error': str(e)}))"),
    "open a raw socket": (
        "try: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close(); print(json.dumps({'ok': True}))\n"
        "except OSError as e: print(json.dumps({'ok': False, 'error': str(e)}))"),
    "unshare a user namespace and mount in it": (  # needs no capability: only the seccomp filter stops it
        "r = subprocess.run(['unshare', '--user', '--map-root-user', '--mount', 'mount', '-t', 'tmpfs', 'none',\n"
        "                    '/tmp'], capture_output=True, text=True)\n"
        "print(json.dumps({'ok': r.returncode == 0, 'error': r.stderr.strip()}))"),
    "clone into a new user namespace": (  # the raw syscall: clone(CLONE_NEWUSER | SIGCHLD), the child exits at once
        "pid = ctypes.CDLL(None, use_errno=True).syscall(56, 0x10000000 | 17, 0, 0, 0, 0)\n"
        "if pid == 0: os._exit(0)\n"
        "if pid > 0: os.waitpid(pid, 0)\n"
        "print(json.dumps({'ok': pid > 0, 'error': os.strerror(ctypes.get_errno())}))"),
    "load a kernel module": (  # init_module(NULL, 0, ""): the kernel itself refuses it later (EFAULT or ENOSYS)
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.syscall(175, None, 0, b''); err = ctypes.get_errno()\n"
        "print(json.dumps({'ok': r == 0 or err != 1, 'error': os.strerror(err)}))"),
    "set the host's clock": (  # an invalid time: the kernel answers EINVAL before it changes anything
        "ts = (ctypes.c_long * 2)(0, -1)\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.syscall(227, 0, ts); err = ctypes.get_errno()\n"
        "print(json.dumps({'ok': err == 22, 'error': os.strerror(err)}))"),
    "open a socket to the hypervisor (AF_VSOCK)": (
        "try: socket.socket(40, socket.SOCK_STREAM).close(); print(json.dumps({'ok': True}))\n"
        "except OSError as e: print(json.dumps({'ok': e.errno != 1, 'error': str(e)}))"),
}
#: where the host (the kernel) lacks what an attempt needs: it could never succeed, so it says so and skips
HOST_NEEDS = {"make a device node of the host's disk": (HOST_DISK or "/dev/vda",),
              "read the host's timer list": ("/proc/timer_list",)}


def _attempt(ws, name_or_code: str) -> dict:
    r = ws.exec(["python3", "-c", _PRELUDE + ATTEMPTS.get(name_or_code, name_or_code)], timeout=30)
    assert r["returncode"] == 0, r
    return json.loads(r["stdout"].strip().splitlines()[-1])


@pytest.fixture(scope="module")
def unhardened():
    from forkcore import Workspace
    from forkcore.probe import probe_spec

    ws = Workspace.start(probe_spec("fcopen", harden=False))
    yield ws
    ws.destroy()


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_an_escape_attempt_fails_in_a_restored_clone_and_works_without_hardening(name, clone, unhardened):
    if name in HOST_NEEDS and not any(os.path.exists(p) for p in HOST_NEEDS[name]):
        pytest.skip(f"this host has none of {HOST_NEEDS[name]}: the attempt could not work here either way")
    blocked = _attempt(clone, name)
    assert not blocked["ok"], f"{name}: got through a hardened workspace"
    assert clone.call("ping") is not None  # the workspace stays usable
    assert _attempt(unhardened, name)["ok"], f"{name}: the negative control failed, so the test proves nothing"


_OPEN_KMSG = ("try: os.close(os.open('/dev/escape-kmsg', os.O_RDONLY)); print(json.dumps({'ok': True}))\n"
              "except OSError as e: print(json.dumps({'ok': False, 'error': str(e)}))")


def test_a_device_node_outside_the_workspaces_own_dev_cannot_be_opened(clone, unhardened):
    """A node that got into the workspace (made here by the host, as an image could bring one) of a device its
    /dev lacks (/dev/kmsg, the host's kernel log) cannot be opened, for two reasons each enough: /dev is a
    tmpfs mounted inside the workspace's user namespace, and the kernel opens no device node on such a mount
    (EACCES); and the devices cgroup allows only the workspace's own nodes and ptys (EPERM), which the host
    checks in its rules. The workspace's own devices, binds of the host's, still open."""
    from forkcore.cgroups import WorkspaceCgroups, device_rules

    kmsg = os.stat("/dev/kmsg").st_rdev if os.path.exists("/dev/kmsg") else os.makedev(1, 11)
    for ws in (clone, unhardened):
        os.mknod(ws.host_path("/dev/escape-kmsg"), 0o600 | stat.S_IFCHR, kmsg)
    blocked = _attempt(clone, _OPEN_KMSG)
    assert not blocked["ok"] and "Permission denied" in blocked["error"], blocked
    devices = WorkspaceCgroups(clone.id, create=False).limit_paths.get("devices")
    if devices is not None:
        assert sorted((devices / "devices.list").read_text().split("\n")[:-1]) == sorted(device_rules(clone.dev_nodes))
        assert f"c {os.major(kmsg)}:{os.minor(kmsg)} rwm" not in device_rules(clone.dev_nodes)
    assert clone.exec(["sh", "-c", "head -c 4 /dev/urandom | wc -c; echo x > /dev/null; : < /dev/zero"]
                      )["stdout"].split() == ["4"]
    assert _attempt(unhardened, _OPEN_KMSG)["ok"], "the negative control failed, so the test proves nothing"


def test_a_hardened_workspace_and_its_clones_have_their_own_user_namespace(source, clone, unhardened):
    """Ids map one to one (files keep their owners), but the namespace is the clone's own: what root inside
    holds counts only there. Without hardening the workspace shares the host's user namespace."""
    host = os.readlink("/proc/self/ns/user")
    inside = clone.exec(["sh", "-c", "readlink /proc/self/ns/user; cat /proc/self/uid_map /proc/self/gid_map"])
    ns, *maps = inside["stdout"].splitlines()
    assert ns != host and ns == os.readlink(f"/proc/{clone.init_pid}/ns/user")
    assert [m.split() for m in maps] == [["0", "0", "4294967295"]] * 2
    assert os.readlink(f"/proc/{source.init_pid}/ns/user") not in (host, ns)
    assert unhardened.exec(["readlink", "/proc/self/ns/user"])["stdout"].strip() == host


def _caps(ws) -> dict:
    status = ws.exec(["cat", "/proc/self/status"])["stdout"]
    return {k: int(v, 16) for k, v in (line.split(":\t") for line in status.splitlines())
            if k in ("CapEff", "CapBnd", "CapPrm", "CapInh", "CapAmb")}


def test_workspace_processes_hold_only_the_kept_capabilities(clone, unhardened):
    with open("/proc/self/status") as f:  # what this host's root holds: a kept capability it lacks stays lacking
        host = next(int(line.split()[1], 16) for line in f if line.startswith("CapBnd:"))
    kept = sum(1 << c for c in KEPT_CAPABILITIES.values()) & host
    caps = _caps(clone)
    assert caps["CapBnd"] == caps["CapEff"] == caps["CapPrm"] == kept
    assert caps["CapInh"] == caps["CapAmb"] == 0
    assert not caps["CapEff"] & (1 << 21), "CAP_SYS_ADMIN"
    assert _caps(unhardened)["CapEff"] & (1 << 21)  # control: root without hardening holds it


@contextlib.contextmanager
def _clone_of(spec, backend: str = "private"):
    """A clone restored from a snapshot of a workspace started from `spec` (limits are set again at restore,
    so a clone's are its own); everything is destroyed after."""
    from forkcore import Workspace

    with Workspace.start(spec) as ws:
        snap = ws.snapshot()
        try:
            with snap.fork(1, backend=backend)[0] as clone:
                yield clone
        finally:
            snap.release()


def _require_memfile():
    from forkcore.backends import backend_report

    if backend_report()["memfile"] is not None:
        pytest.skip(f"the memfile backend is unavailable here: {backend_report()['memfile']}")


def _listing(ws, path: str = "/opt/bunshin/mem") -> list[str]:
    return sorted(ws.exec(["ls", path])["stdout"].split())


def test_a_clone_sees_only_its_own_lineages_memfiles_read_only(snapshot, unhardened):
    """Memfiles hold snapshots' memory: a memfile clone of one workspace cannot read another lineage's (the
    session snapshot's, mapped by a memfile clone running beside it) and cannot write its own."""
    from forkcore import paths
    from forkcore.probe import probe_spec

    _require_memfile()
    with snapshot.fork(1, backend="memfile")[0]:
        other = next((paths.SHM_DIR / snapshot.id).iterdir())  # exists on the host while that clone lives
        steal = ("try: print(json.dumps({'ok': len(open(PATH, 'rb').read(4096)) > 0}))\n"
                 "except OSError as e: print(json.dumps({'ok': False, 'error': str(e)}))"
                 ).replace("PATH", repr(f"/opt/bunshin/mem/{snapshot.id}/{other.name}"))
        with _clone_of(probe_spec("fcmemview"), backend="memfile") as mine:
            own = mine.parent_snapshot.id
            assert _listing(mine) == [own]
            blocked = _attempt(mine, steal)
            assert not blocked["ok"] and "No such file" in blocked["error"], blocked
            own_file = _listing(mine, f"/opt/bunshin/mem/{own}")[0]
            write = _attempt(mine, "try: os.close(os.open(PATH, os.O_WRONLY)); print(json.dumps({'ok': True}))\n"
                                   "except OSError as e: print(json.dumps({'ok': False, 'error': str(e)}))"
                             .replace("PATH", repr(f"/opt/bunshin/mem/{own}/{own_file}")))
            assert not write["ok"] and "Read-only file system" in write["error"], write
            assert mine.call("ping") is not None
        assert _attempt(unhardened, steal)["ok"], "the negative control failed, so the test proves nothing"


def test_a_snapshot_of_a_memfile_clone_restores_with_its_ancestors_memfiles_and_no_others():
    """A snapshot of a memfile clone maps its ancestor's memfiles: its clones see exactly those (pinned at the
    dump), plus their own snapshot's with the memfile backend, and continue from the clone's state."""
    from forkcore import Workspace
    from forkcore.probe import probe_spec

    _require_memfile()
    with Workspace.start(probe_spec("fclineage", hold_mb=8)) as ws:
        ws.call("probe.counter", inc=True)
        first = ws.snapshot()
        try:
            with first.fork(1, backend="memfile")[0] as child:
                assert _listing(child) == [first.id]
                child.call("probe.counter", inc=True)
                second = child.snapshot()
            try:
                for backend, seen in (("private", [first.id]), ("memfile", sorted([first.id, second.id]))):
                    with second.fork(1, backend=backend)[0] as grandchild:
                        assert _listing(grandchild) == seen, backend
                        assert grandchild.call("probe.counter") == 2
                        assert grandchild.call("probe.hold_digest") == ws.call("probe.hold_digest")
            finally:
                second.release()
        finally:
            first.release()


# A bounded fork bomb: it starts sleepers until fork fails (or 300 run), reports how many, and ends them.
_SPAWN = ("import subprocess\nprocs, error = [], None\n"
          "try:\n"
          "    for _ in range(300): procs.append(subprocess.Popen(['sleep', '60']))\n"
          "except OSError as e: error = type(e).__name__\n"
          "for p in procs: p.kill(); p.wait()\n"
          "print(json.dumps({'started': len(procs), 'error': error}))")


def test_a_fork_bomb_stops_at_the_clones_task_limit_and_the_clone_stays_usable():
    from forkcore import Workspace
    from forkcore.probe import probe_spec

    with _clone_of(probe_spec("fcpids", pids_max=96)) as clone:
        r = json.loads(clone.exec(["python3", "-c", _PRELUDE + _SPAWN], timeout=60)["stdout"].strip())
        assert r["error"] == "BlockingIOError" and 0 < r["started"] < 96, r
        assert clone.call("ping") is not None
        again = json.loads(clone.exec(["python3", "-c", _PRELUDE + _SPAWN.replace("300", "5")])["stdout"])
        assert again == {"started": 5, "error": None}  # the sleepers are gone: room again
    with Workspace.start(probe_spec("fcnopids", pids_max=None)) as unlimited:  # control: the bomb gets through
        r = json.loads(unlimited.exec(["python3", "-c", _PRELUDE + _SPAWN], timeout=60)["stdout"].strip())
        assert r == {"started": 300, "error": None}


# A bounded memory bomb: it fills 64 MB blocks (touched) up to 640 MB, then reports what it got.
_FILL = ("blocks = []\n"
         "for _ in range(10): blocks.append(bytearray(64 << 20))\n"
         "print(json.dumps({'mb': 64 * len(blocks)}))")


def test_a_memory_bomb_is_killed_inside_its_clone_and_the_clone_stays_usable():
    from forkcore import Workspace
    from forkcore.probe import probe_spec

    with _clone_of(probe_spec("fcmem", memory_max_mb=320)) as clone:
        r = clone.exec(["python3", "-c", _PRELUDE + _FILL], timeout=60)
        assert r["returncode"] == -9 and not r["stdout"], r  # the kernel's OOM killer, in this cgroup
        assert clone.call("ping") is not None
        with pytest.raises(ServiceDied, match="OOM killer ended 1 process"):  # what a step then reports
            clone.check_services()
        clone.check_services()  # once
        small = clone.exec(["python3", "-c", _PRELUDE + _FILL.replace("10", "1")])
        assert json.loads(small["stdout"]) == {"mb": 64}
    with Workspace.start(probe_spec("fcnomem", memory_max_mb=None)) as unlimited:  # control: the bomb gets through
        assert json.loads(unlimited.exec(["python3", "-c", _PRELUDE + _FILL], timeout=60)["stdout"]) == {"mb": 640}


# Fills a directory with 1 MB writes up to MB and reports how many MB it wrote.
_FILL_DIR = ("n, error = 0, None\n"
             "try:\n"
             "    with open(DIR + '/fill', 'wb') as f:\n"
             "        for n in range(1, MB + 1): f.write(b'x' * (1 << 20)); f.flush(); os.fsync(f.fileno())\n"
             "except OSError as e: error, n = e.errno, n - 1  # the last write failed\n"
             "os.unlink(DIR + '/fill')\n"
             "print(json.dumps({'mb': n, 'error': error}))")


def _fill(ws, directory: str, mb: int = 96) -> dict:
    r = ws.exec(["python3", "-c", _PRELUDE + f"DIR, MB = {directory!r}, {mb}\n" + _FILL_DIR], timeout=60)
    assert r["returncode"] == 0, r
    return json.loads(r["stdout"])


def test_a_full_root_filesystem_or_tmp_fills_only_its_clone():
    """The upper dir lies on a tmpfs of disk_mb (the quota), /tmp on one of tmpfs_mb: filling either ends
    with ENOSPC inside the clone, which stays usable; the host's state dir gets none of it."""
    from forkcore import Workspace, paths
    from forkcore.probe import probe_spec

    with _clone_of(probe_spec("fcdisk", disk_mb=48, tmpfs_mb=32)) as clone:
        host_free = os.statvfs(paths.STATE_DIR).f_bavail * os.statvfs(paths.STATE_DIR).f_frsize
        full = _fill(clone, "/var")
        assert full["error"] == errno.ENOSPC and 40 <= full["mb"] <= 48, full  # 48 MB less what is there
        full = _fill(clone, "/tmp")
        assert full["error"] == errno.ENOSPC and 24 <= full["mb"] <= 32, full
        assert clone.call("ping") is not None
        assert _fill(clone, "/var", 16) == {"mb": 16, "error": None}  # room again after the unlink
        free_after = os.statvfs(paths.STATE_DIR).f_bavail * os.statvfs(paths.STATE_DIR).f_frsize
        assert abs(free_after - host_free) < 32 << 20
    with Workspace.start(probe_spec("fcnodisk", disk_mb=None)) as unlimited:  # control: the state dir takes it all
        assert _fill(unlimited, "/var") == {"mb": 96, "error": None}
