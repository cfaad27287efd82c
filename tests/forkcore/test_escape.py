"""Escape attempts from inside a workspace, as an agent's code would make them (forkcore/hardening.py).

Each attempt runs in a clone restored from the session's hardened snapshot (the hardening must survive CRIU)
and fails there; its negative control runs the same code in a workspace started with `harden=False`, where it
succeeds, so no case passes because the attempt could never work on this machine. Nothing here changes the
host: writable opens are not written to, a remount is undone, a device node is only opened for reading.
"""
from __future__ import annotations

import json
import os

import pytest

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
}
#: where the host (the kernel) lacks what an attempt needs: it could never succeed, so it says so and skips
HOST_NEEDS = {"make a device node of the host's disk": (HOST_DISK or "/dev/vda",),
              "read the host's timer list": ("/proc/timer_list",)}


def _attempt(ws, name: str) -> dict:
    r = ws.exec(["python3", "-c", _PRELUDE + ATTEMPTS[name]], timeout=30)
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

    ws = Workspace.start(probe_spec("fcpids", pids_max=96))
    try:
        snap = ws.snapshot()
        try:
            clone = snap.fork(1, backend="private")[0]  # the limit is the clone's own, set again at restore
            try:
                r = json.loads(clone.exec(["python3", "-c", _PRELUDE + _SPAWN], timeout=60)["stdout"].strip())
                assert r["error"] == "BlockingIOError" and 0 < r["started"] < 96, r
                assert clone.call("ping") is not None
                again = json.loads(clone.exec(["python3", "-c", _PRELUDE + _SPAWN.replace("300", "5")])["stdout"])
                assert again == {"started": 5, "error": None}  # the sleepers are gone: room again
            finally:
                clone.destroy()
        finally:
            snap.release()
    finally:
        ws.destroy()
    unlimited = Workspace.start(probe_spec("fcnopids", pids_max=None))  # control: the same bomb gets through
    try:
        r = json.loads(unlimited.exec(["python3", "-c", _PRELUDE + _SPAWN], timeout=60)["stdout"].strip())
        assert r == {"started": 300, "error": None}
    finally:
        unlimited.destroy()
