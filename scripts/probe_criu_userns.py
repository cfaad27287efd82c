"""Probe: can this machine's CRIU dump and restore a process tree that lives in its own user namespace?

Issue 12 asks whether a workspace could run in a user namespace (root inside mapped to an unprivileged host
uid). This builds the smallest tree shaped like a workspace: user + pid + mnt + net + ipc + uts namespaces; a
root filesystem that is an overlay the host mounted (as forkcore mounts its clones'), with /usr and /etc bound
read-only from the host; a /dev tmpfs whose null, zero, urandom and tty are binds of the host's nodes (mknod
is not allowed in a user namespace), a devpts of its own, sysfs read-only, proc; an init re-executed from the
new root; and a service running as a non-root uid inside that reads /dev/urandom and writes /dev/null (CRIU cannot dump non-root processes on a host without
CAP_SYS_RESOURCE, see `bunshin doctor`). It dumps the tree with `--leave-running`, restores two clones and
checks that each clone's counter goes on and its uid map is the source's. Prints one JSON line; exits 1 if
any part failed. Everything it starts is killed by pid, and its dirs are removed.

    sudo /opt/bunshin/venv/bin/python scripts/probe_criu_userns.py [--map "0 100000 65536"] [--uid 1000]
    sudo /opt/bunshin/venv/bin/python scripts/probe_criu_userns.py --no-userns   # the control
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

_libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNS = 0x10000000, 0x20000000, 0x20000
CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWNET = 0x8000000, 0x4000000, 0x40000000
PR_SET_DUMPABLE, SYS_PIVOT_ROOT = 4, 155
BINDS = ("/usr", "/etc")  # /bin, /lib, ... are symlinks into /usr on Debian
DEVICES = ("null", "zero", "urandom", "tty")  # bound from the host's /dev, one external mount each
MS_NOEXEC = 8
CRIU = os.environ.get("BUNSHIN_CRIU", "/opt/bunshin/criu/bin/criu")
COMMON = ["--network-lock", "skip", "--manage-cgroups=ignore", "-v4"]
# the init, re-executed inside the new root (nothing of the host's root may stay mapped): it starts the
# service as UID and reaps forever; the service counts in /tmp/count
_INIT = """import os, time
if os.fork() == 0:
    os.setresgid(UID, UID, UID); os.setresuid(UID, UID, UID)
    i = 0
    while True:
        i += 1; open('/tmp/count', 'w').write(str(i)); time.sleep(0.1)
        open('/dev/null', 'w').write(open('/dev/urandom', 'rb').read(4).hex())
while True:
    try: os.wait()
    except ChildProcessError: time.sleep(1)
"""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _mount(src: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(src.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                       data.encode() if data else None), f"mount {target}")


def _launch(root: str, id_map: str | None, uid: int) -> int:
    """Start the tree; returns the host pid of its init (pid 1 of its pid namespace)."""
    to_child, from_child = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if id_map is not None:
                _check(_libc.unshare(CLONE_NEWUSER), "unshare(user)")
            os.write(from_child[1], b"u")
            os.read(to_child[0], 1)  # the parent wrote the id maps
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # changed creds clear it; CRIU must open /proc/PID/ns/*
            _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET), "unshare")
            init = os.fork()
            if init == 0:
                os.setsid()  # CRIU needs the session leader inside the pid namespace
                _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
                _mount("none", "/", None, MS_REC | MS_PRIVATE)
                _mount(root, root, None, MS_BIND)
                for b in BINDS:
                    _mount(b, root + b, None, MS_BIND | MS_REC)
                    _mount("none", root + b, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
                _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                _mount("sysfs", root + "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
                _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=1m")
                _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID, "mode=755,size=64k")
                for dev in DEVICES:
                    open(f"{root}/dev/{dev}", "w").close()
                    _mount(f"/dev/{dev}", f"{root}/dev/{dev}", None, MS_BIND)
                os.mkdir(f"{root}/dev/pts")
                _mount("devpts", f"{root}/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
                os.symlink("pts/ptmx", f"{root}/dev/ptmx")
                os.chdir(root)
                _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b".old"), "pivot_root")
                os.chdir("/")
                _check(_libc.umount2(b"/.old", 2), "umount /.old")
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.closerange(3, 1024)
                os.execv("/usr/bin/python3", ["python3", "-c", _INIT.replace("UID", str(uid))])
            os.write(from_child[1], str(init).encode())
        finally:
            os._exit(0)
    os.read(from_child[0], 1)
    for name, value in (("uid_map", id_map), ("setgroups", "deny"), ("gid_map", id_map)) if id_map else ():
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(value + "\n")
    os.write(to_child[1], b"m")
    init = int(os.read(from_child[0], 32))
    os.waitpid(pid, 0)
    return init


def _count(pid: int) -> int:
    with open(f"/proc/{pid}/root/tmp/count") as f:
        return int(f.read() or 0)


def _errors(log: str) -> list[str]:
    try:
        with open(log) as f:
            return [line.strip() for line in f if "Error" in line and "RLIMIT" not in line][:6]
    except OSError:
        return []


def probe(id_map: str | None, uid: int) -> dict:
    work = tempfile.mkdtemp(prefix="bunshin-userns-")
    lower, root, images = f"{work}/lower", f"{work}/root", f"{work}/images"
    for d in (*BINDS, "/proc", "/sys", "/tmp", "/dev", "/.old"):
        os.makedirs(lower + d)
    for link in ("bin", "lib", "lib64", "sbin"):
        os.symlink(f"usr/{link}", f"{lower}/{link}")
    for d in (root, images, f"{work}/upper", f"{work}/ovlwork"):
        os.makedirs(d)
    os.chmod(work, 0o755)
    _mount("overlay", root, "overlay", MS_NODEV,
           f"lowerdir={lower},upperdir={work}/upper,workdir={work}/ovlwork")
    pids: list[int] = []
    out: dict = {"map": id_map, "service_uid_inside": uid}
    try:
        init = _launch(root, id_map, uid)
        pids.append(init)
        time.sleep(0.5)
        service = int(open(f"/proc/{init}/task/{init}/children").read().split()[0])
        out["service_uid_on_host"] = int(next(line.split()[1] for line in open(f"/proc/{service}/status")
                                              if line.startswith("Uid:")))
        ext = [a for b in (*BINDS, *(f"/dev/{d}" for d in DEVICES))
               for a in ("--external", f"mnt[{b}]:bind{b.replace('/', '_')}")]
        t0 = time.monotonic()
        r = subprocess.run([CRIU, "dump", "-t", str(init), "-D", images, "-o", "dump.log", "--leave-running",
                            *COMMON, *ext], capture_output=True, text=True)
        out["dump"] = {"rc": r.returncode, "s": round(time.monotonic() - t0, 3),
                       "errors": _errors(f"{images}/dump.log") if r.returncode else []}
        if r.returncode:
            return out
        ext = [a for b in (*BINDS, *(f"/dev/{d}" for d in DEVICES))
               for a in ("--external", f"mnt[bind{b.replace('/', '_')}]:{b}")]
        out["clones"] = []
        for i in range(2):
            pidfile = f"{images}/clone{i}.pid"
            t0 = time.monotonic()
            r = subprocess.run([CRIU, "restore", "-D", images, "-d", "--root", root, "--pidfile", pidfile,
                                "-o", f"restore{i}.log", *COMMON, *ext], capture_output=True, text=True)
            clone = {"rc": r.returncode, "s": round(time.monotonic() - t0, 3)}
            out["clones"].append(clone)
            if r.returncode:
                clone["errors"] = _errors(f"{images}/restore{i}.log")
                break
            pid = int(open(pidfile).read())
            pids.append(pid)
            before = _count(pid)
            time.sleep(0.5)
            clone.update(counts=[before, _count(pid)], uid_map=" ".join(open(f"/proc/{pid}/uid_map").read().split()),
                         own_user_namespace=os.readlink(f"/proc/{pid}/ns/user") != os.readlink(f"/proc/{init}/ns/user"))
        return out
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)  # PID 1 of its namespace: the kernel ends the rest
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        _libc.umount2(root.encode(), 2)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--map", default="0 100000 65536", help="uid/gid map line: inside outside count")
    ap.add_argument("--uid", type=int, default=1000, help="uid (inside) of the service")
    ap.add_argument("--no-userns", action="store_true", help="the control: the same tree without a user namespace")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (it makes namespaces and runs CRIU)")
    if a.no_userns:
        a.map = None
    out = probe(a.map, a.uid)
    clones = out.get("clones", [])
    out["ok"] = (out.get("dump", {}).get("rc") == 0 and len(clones) == 2
                 and all(c["rc"] == 0 and c["counts"][1] > c["counts"][0] for c in clones))
    print(json.dumps(out))
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
