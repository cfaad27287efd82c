"""PID 1 of a workspace: builds its root filesystem, starts its services and reaps every process.

Stage 0 runs in the host's namespaces, in the workspace's cgroup: it creates the workspace's namespaces —
first a user namespace whose id maps a helper writes from outside (`ID_MAP`; hardened workspaces only, see
below), then pid/mnt/net/ipc/uts ones owned by it — and forks PID 1, then waits for it like `unshare --fork`.
Stage 1 runs as that PID 1 with the host's filesystem view: over the overlay root the host mounted, it binds the
host's system paths read-only, /dev's few nodes from the host (no mknod: not allowed in a user namespace),
proc/sys and the tmpfs dirs, pivots into the new root and re-executes itself from there, so that no file of the
host's root stays open or mapped (CRIU could not dump it). Stage 2 brings loopback up, hides the host's kernel
interfaces, installs the seccomp filter (Docker's default rules and what CRIU cannot checkpoint: seccomp.py),
drops capabilities (hardening.py), starts the services of the spec one after another, writes
/run/bunshin/ready and reaps children forever.

The user namespace maps ids one to one (`ID_MAP`): every file of the layers keeps its owner, and root inside
is uid 0 for file access, but its capabilities count only inside the workspace's own namespaces — whatever it
holds, the kernel refuses it what needs a capability of the host (modules, raw I/O, the host's mounts,
devices, sysctls outside its net namespace). CRIU, which runs as host root and so owns that namespace, may
then dump processes of any uid in it (on hosts without CAP_SYS_RESOURCE it cannot otherwise: `bunshin doctor`).
Standard library only, but for libseccomp's binding (Debian's python3-seccomp) in stage 2: it runs before
anything else exists.
"""
from __future__ import annotations

import ctypes
import json
import os
import pwd
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
SYS_PIVOT_ROOT = 155
#: uid and gid map of a hardened workspace's user namespace: every id is itself (module doc)
ID_MAP = "0 0 4294967295"
PR_SET_MEMORY_MERGE = 67
RUN_DIR = "/run/bunshin"
#: PATH of an image's process whose image sets none (Docker's default)
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(src: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(src.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount({src!r}, {target!r}, {fstype!r}, {flags:#x}, {data!r}): {os.strerror(e)}")


#: the character devices of a workspace's /dev, bound from the host's (its devices cgroup allows these, ptmx and
#: the ptys: cgroups.py)
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
KMOD_DEVICE = "bunshin_cow"  # the kmod memory backend maps /dev/bunshin_cow in clones (kmod_backend.py)


def device_nodes() -> list[str]:
    """The names under /dev a workspace started now gets: DEVICE_NODES, and the kmod device where it is loaded.
    Each is a bind of the host's node, so a CRIU external mount: dumps and restores name the same list."""
    kmod = os.path.exists(f"/dev/{KMOD_DEVICE}") and os.stat(f"/dev/{KMOD_DEVICE}").st_mode & 0o170000 == 0o020000
    return [*DEVICE_NODES, *([KMOD_DEVICE] if kmod else [])]


def _make_dev(root: str, nodes: list[str]) -> None:
    dev = root + "/dev"
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=128k")
    for name in nodes:
        open(f"{dev}/{name}", "w").close()
        _mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/pts")
    os.mkdir(f"{dev}/shm")
    _mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _write_id_maps(pid: int) -> None:
    """From the host's user namespace: map `pid`'s new user namespace one to one. setgroups stays allowed
    (services started with supplementary groups, sudo)."""
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as f:
            f.write(ID_MAP + "\n")


def _run_or_exit(stage, cfg: dict) -> None:
    """Run a stage that never returns (it execs or exits); if it raises, its traceback goes to stage1.log."""
    try:
        stage(cfg)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(1)


def stage0(cfg: dict) -> None:
    """Host namespaces → the workspace's; forks PID 1 (stage 1) and exits with its status."""
    if cfg["userns"]:
        unshared, mapped = os.pipe(), os.pipe()
        helper = os.fork()
        if helper == 0:  # stays in the host's user namespace, where writing the maps is allowed
            try:
                os.close(unshared[1])
                os.close(mapped[0])
                if os.read(unshared[0], 1) == b"u":
                    _write_id_maps(os.getppid())
                    os.write(mapped[1], b"m")
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(0)
        os.close(unshared[0])
        os.close(mapped[1])
        _check(_libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
        os.write(unshared[1], b"u")
        if os.read(mapped[0], 1) != b"m":
            raise RuntimeError("the helper could not write the user namespace's id maps (its error is above)")
        os.waitpid(helper, 0)
        os.close(unshared[1])
        os.close(mapped[0])
    _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    init = os.fork()
    if init == 0:
        _run_or_exit(stage1, cfg)
    status = os.waitpid(init, 0)[1]
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def stage1(cfg: dict) -> None:
    """Host view → the workspace's own root (the overlay the host mounted at `cfg["merged"]`: one mounted inside
    a user namespace would keep its whiteouts in user.* xattrs, unlike its clones'). `cfg`: Workspace.start."""
    root = cfg["merged"]
    os.setsid()  # CRIU needs the session leader inside the pid namespace
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _mount(root, root, None, MS_BIND)  # pivot_root refuses a mount a user namespace inherited locked
    for inside, src in cfg["binds"]:
        _mount(src, root + inside, None, MS_BIND)
        # setuid programs of /usr (sudo) must work for a workspace's non-root users
        _mount("none", root + inside, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NODEV)
    if cfg.get("mem_dir"):
        _mount(cfg["mem_dir"], root + "/opt/bunshin/mem", None, MS_BIND)
        _mount("none", root + "/opt/bunshin/mem", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount("sysfs", root + "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _make_dev(root, cfg["dev_nodes"])
    size = f"size={cfg['tmpfs_mb']}m"
    for d, mode in (("/dev/shm", "1777"), ("/tmp", "1777"), ("/run", "755"), ("/root", "700"), ("/home", "755"),
                    ("/var/tmp", "1777")):
        _mount("tmpfs", root + d, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},{size}")
    for image_root in cfg.get("image_roots", ()):  # what a container runtime gives an image's processes
        path = root + image_root
        _mount("proc", path + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _mount("sysfs", path + "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _mount(root + "/dev", path + "/dev", None, MS_BIND | MS_REC)
        # CRIU binds a restored unix socket's path from the mount namespace's root, not from its chrooted
        # owner's (/run/mysqld/mysqld.sock): where sockets live, the image's paths are the workspace's
        for d in ("/run", "/tmp"):
            _mount(root + d, path + d, None, MS_BIND)
    os.chdir(root)
    if _libc.syscall(SYS_PIVOT_ROOT, b".", b".oldroot") != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"pivot_root({root}): {os.strerror(e)}")
    os.chdir("/")
    if _libc.umount2(b"/.oldroot", MNT_DETACH) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"umount2(/.oldroot): {os.strerror(e)}")
    if cfg.get("ksm_mergeable"):
        _libc.prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0)  # best effort: kernels < 6.4 lack it
    os.makedirs(RUN_DIR + "/log", exist_ok=True)
    # Nothing of the host may stay open: reopen stdio inside the new root, close everything else.
    log = os.open(RUN_DIR + "/log/init.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, 65536)
    python = cfg["python"]
    os.execve(python, [python, "-m", "forkcore.init", "--stage2"], cfg["env"])


def _loopback_up() -> None:
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | IFF_UP))


def _is_ready(kind: str, arg: str) -> bool:
    try:
        if kind == "file":
            return os.path.exists(arg)
        if kind == "tcp":
            with socket.create_connection(("127.0.0.1", int(arg)), timeout=0.5):
                return True
        if kind == "unix":
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(0.5)
                s.connect(arg)
                return True
    except OSError:
        pass
    return False


def _wait_ready(ready: str | None, proc: subprocess.Popen, timeout: float, name: str) -> None:
    """Wait until `ready` holds. The condition is checked before the exit status, so a one-shot service
    (e.g. one that seeds a directory, then writes its ready file and exits 0) counts as started; a service
    that exits before its condition holds fails the workspace."""
    if not ready:
        return
    kind, _, arg = ready.partition(":")
    deadline = time.monotonic() + timeout
    while True:
        exited = proc.poll() is not None  # read first: a service that exits right after becoming ready is fine
        if _is_ready(kind, arg):
            return
        if exited:
            raise RuntimeError(f"service {name!r} exited with {proc.returncode} before it was ready "
                               f"(log: {RUN_DIR}/log/{name}.log)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"service {name!r} not ready ({ready}) after {timeout:.0f}s "
                               f"(log: {RUN_DIR}/log/{name}.log)")
        time.sleep(0.02)


def _credentials(user: str | None) -> dict:
    """Popen keywords that run a child as `user` of the workspace's /etc/passwd (uid, gid, its groups)."""
    if not user:
        return {}
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise RuntimeError(f"user {user!r} is not in the workspace's /etc/passwd; add a layer that defines it "
                           f"(forkcore.layers.user_layer)") from None
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": os.getgrouplist(user, pw.pw_gid)}


def _image_credentials(root: str, user: str | None) -> tuple[int, int, list[int]]:
    """(uid, gid, groups) of a Docker-style `user` in the image at `root` (its /etc/passwd and /etc/group)."""
    if not user:
        return 0, 0, []

    def table(name: str) -> list[list[str]]:
        try:
            with open(f"{root}/etc/{name}") as f:
                return [line.rstrip("\n").split(":") for line in f if line.count(":") >= 2]
        except OSError:
            return []

    name, _, group = user.partition(":")
    entry = next((e for e in table("passwd") if len(e) >= 4 and name in (e[0], e[2])), None)
    if entry is not None:
        uid, gid, name = int(entry[2]), int(entry[3]), entry[0]
    elif name.isdigit():
        uid, gid = int(name), 0  # as Docker: a uid the image does not list runs with gid 0
    else:
        raise RuntimeError(f"user {name!r} is not in the image's /etc/passwd ({root})")
    groups = table("group")
    if group:
        g = next((e for e in groups if len(e) >= 3 and group in (e[0], e[2])), None)
        if g is None and not group.isdigit():
            raise RuntimeError(f"group {group!r} is not in the image's /etc/group ({root})")
        gid = int(g[2]) if g is not None else int(group)
    extra = sorted({int(e[2]) for e in groups if len(e) >= 4 and name in e[3].split(",")} | {gid})
    return uid, gid, extra


def _chrooted(root: str, user: str | None, cwd: str):
    """A preexec_fn entering the image at `root` as `user` (Popen applies its own user= before preexec_fn,
    which would leave no right to chroot: this does all of it, in order)."""
    uid, gid, groups = _image_credentials(root, user)

    def enter() -> None:
        os.chroot(root)
        os.chdir(cwd)
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)

    return enter


def stage2() -> None:
    """PID 1 inside the new root: start services, then reap forever."""
    from forkcore import hardening
    from forkcore.seccomp import install_workspace_filter

    spec = json.load(open("/etc/bunshin/spec.json"))
    _loopback_up()
    socket.sethostname(spec["hostname"])
    harden = spec.get("harden", True)
    if harden:
        hardening.mask_kernel_interfaces()
        for image_root in sorted({s["root"] for s in spec["services"] if s.get("root")}):
            hardening.mask_kernel_interfaces(image_root)
    # as root: needs CAP_SYS_ADMIN, so before the drop; harden=False keeps only the CRIU rules
    install_workspace_filter(allowlist=harden, allow_pkeys=spec.get("allow_pkeys", False))
    if harden:
        hardening.drop_capabilities()
    children: list[subprocess.Popen] = []

    def terminate(signum, frame):
        for p in children:
            try:
                p.kill()
            except OSError:
                pass
        os._exit(0)

    signal.signal(signal.SIGTERM, terminate)
    services = [dict(s) for s in spec["services"]]
    if spec.get("executor", True):
        services.append({"name": "executor", "env": [], "cwd": "/", "ready_timeout_s": 60,
                         "argv": [sys.executable, "-m", "forkcore.executor", "--socket", f"{RUN_DIR}/executor.sock",
                                  *[a for m in spec["handlers"] for a in ("--handlers", m)]],
                         "ready": f"unix:{RUN_DIR}/executor.sock", "user": spec.get("executor_user")})
    try:
        if spec.get("executor_user"):  # it creates its socket in RUN_DIR
            creds = _credentials(spec["executor_user"])
            os.chown(RUN_DIR, creds["user"], creds["group"])
        pids = {}
        for s in services:
            if s.get("root"):  # an image's process: its environment only, inside its root
                env = {"PATH": IMAGE_PATH, "HOSTNAME": spec["hostname"], "HOME": "/root", **dict(s.get("env", ()))}
                how = {"preexec_fn": _chrooted(s["root"], s.get("user"), s.get("cwd", "/"))}
            else:
                env = {**os.environ, **dict(s.get("env", ()))}
                how = {"cwd": s.get("cwd", "/"), **_credentials(s.get("user"))}
            out = open(f"{RUN_DIR}/log/{s['name']}.log", "ab")
            p = subprocess.Popen(s["argv"], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 close_fds=True, **how)
            out.close()
            children.append(p)
            _wait_ready(s.get("ready"), p, float(s.get("ready_timeout_s", 60)), s["name"])
            pids[s["name"]] = p.pid
        with open(RUN_DIR + "/ready.tmp", "w") as f:
            json.dump({"services": pids}, f)
        os.rename(RUN_DIR + "/ready.tmp", RUN_DIR + "/ready")
    except Exception:
        with open(RUN_DIR + "/failed.tmp", "w") as f:  # renamed whole: the host reads it as soon as it exists
            f.write(traceback.format_exc())
        os.rename(RUN_DIR + "/failed.tmp", RUN_DIR + "/failed")
    while True:  # reap every orphan of the workspace
        try:
            pid, status = os.wait()
            print(f"init: reaped {pid} status {status}", flush=True)
        except ChildProcessError:
            time.sleep(1)
        except InterruptedError:
            pass


if __name__ == "__main__":
    if sys.argv[1:] == ["--stage2"]:
        stage2()
    else:
        _run_or_exit(stage0, json.loads(os.environ.pop("BUNSHIN_INIT_CONFIG")))
