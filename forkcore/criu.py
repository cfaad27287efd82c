"""Running CRIU: locating it, checking its version, and the dump/restore invocations forkcore uses."""
from __future__ import annotations

import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import paths
from .accounting import proc_stat
from .errors import CriuUnavailable

log = logging.getLogger("forkcore")

MIN_VERSION = (4, 1)


def criu_binary() -> str:
    """Path of CRIU >= 4.1: $BUNSHIN_CRIU, the project's install, or `criu` on PATH."""
    for cand in (os.environ.get("BUNSHIN_CRIU"), str(paths.CRIU_BIN), shutil.which("criu")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise CriuUnavailable("CRIU not found: run `bash scripts/setup.sh` as root (installs CRIU >= 4.1 into "
                          f"{paths.PREFIX}/criu), or set BUNSHIN_CRIU to a criu >= 4.1 binary.")


def criu_version(binary: str | None = None) -> tuple[int, int, int]:
    binary = binary or criu_binary()
    st = os.stat(binary)
    key = (binary, st.st_ino, st.st_mtime_ns)
    if key not in _VERSIONS:
        _VERSIONS[key] = _ask_version(binary)
    return _VERSIONS[key]


_VERSIONS: dict[tuple, tuple[int, int, int]] = {}  # (binary, inode, mtime) -> version


def _ask_version(binary: str) -> tuple[int, int, int]:
    # through the registry of this process's CRIU runs, so that reap_orphaned_helpers never takes it
    p = _start([binary, "--version"], criu_env(), action="version")
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise CriuUnavailable(f"`{binary} --version` did not answer in 60 s; reinstall with scripts/setup.sh") from None
    finally:
        _finished(p)
    m = re.search(r"Version:\s*(\d+)\.(\d+)(?:\.(\d+))?", out)
    if not m:
        raise CriuUnavailable(f"`{binary} --version` printed no version ({out.strip()!r}); reinstall with scripts/setup.sh")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def require_criu() -> str:
    binary = criu_binary()
    v = criu_version(binary)
    if v[:2] < MIN_VERSION:
        raise CriuUnavailable(f"CRIU {'.'.join(map(str, v))} at {binary} is too old: forkcore needs >= 4.1 "
                              "(older ones fail on this kernel's vdso). Run `bash scripts/setup.sh`.")
    return binary


def kernel_needs_sockshim() -> bool:
    """Linux >= 6.16 answers getsockopt(SO_PASSCRED) on inet sockets with EOPNOTSUPP; CRIU 4.1.1 then fails."""
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (6, 16)


def criu_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "PYTHON"))}
    # CRIU saves a workspace's tmpfs mounts (/tmp, /home, /root, ...) with `tar`; GNU tar's default format
    # keeps whole-second mtimes, so every restored file looked modified to apps that remember the exact
    # mtime (Mousepad/GIO etags: "document externally modified" on save). POSIX (pax) keeps nanoseconds.
    env["TAR_OPTIONS"] = "--format=posix"
    if kernel_needs_sockshim():
        if not paths.SOCKSHIM.exists():
            raise CriuUnavailable(f"this kernel ({platform.release()}) needs the getsockopt shim for CRIU 4.1.1, "
                                  f"but {paths.SOCKSHIM} is missing: run `bash scripts/setup.sh`.")
        env["LD_PRELOAD"] = str(paths.SOCKSHIM)
    return env


@dataclass(frozen=True)
class DumpOptions:
    """A `criu dump --leave-running` of one workspace tree."""

    pid: int  #: the workspace's init (PID 1 of its namespaces), as seen from the host
    images_dir: Path  #: empty directory for the images
    external_mounts: tuple[tuple[str, str], ...] = ()  #: (mount point inside, key) pairs
    action_script: str | None = None  #: run by CRIU at its action points; post-dump runs while frozen
    action_env: tuple[tuple[str, str], ...] = ()
    ghost_limit: str = "64M"  #: largest unlinked-but-open file CRIU copies into the image
    log_file: str = "dump.log"  #: relative to images_dir
    verbosity: int = 4  #: CRIU's log level (-vN): 1 errors, 2 + warnings, 3 + info, 4 + debug


@dataclass(frozen=True)
class RestoreOptions:
    """A detached `criu restore` of images into fresh namespaces rooted at `root`."""

    images_dir: Path
    root: Path  #: the clone's merged overlay (becomes its /)
    pidfile: Path
    external_mounts: tuple[tuple[str, str], ...] = ()  #: (key, host path) pairs
    log_file: Path = field(default=Path("restore.log"))
    exec_prefix: tuple[str, ...] = ()  #: e.g. joining the clone's cgroups, a helper setting PR_SET_MEMORY_MERGE


#: CRIU's log level for a snapshot's dump: 3 (errors, warnings, info; no debug lines: a Chromium workspace's log is a
#: fraction of -v4's 6.3 MB, written line by line while the tree is frozen). What reads the log needs no more: a
#: dump's errors (`dump_raced`) and the kmod backend's "Dumping task (pid: ...)" info lines (kmod_backend
#: `_source_pids`; at -v2 it found no process and captured nothing); thread /proc files are read from the files
#: image (`thread_proc_files_in_images`). A dump that fails is taken again at FULL_VERBOSITY, so a failure that
#: recurs keeps the whole log.
DUMP_VERBOSITY = 3
FULL_VERBOSITY = 4
# Workspaces have loopback only, so CRIU need not lock the network with iptables.
_COMMON = ["--file-locks", "--tcp-established", "--manage-cgroups=ignore", "--network-lock", "skip"]


#: Where CRIU looks for an inotify watch's path when the watched inode's file handle cannot be opened (a /usr on
#: 9p or NFS): Chromium watches the time zone's directory.
IRMAP_SCAN_PATHS = ("/usr/share/zoneinfo",)


def dump(opts: DumpOptions, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [require_criu(), "dump", "-t", str(opts.pid), "-D", str(opts.images_dir), "--leave-running",
           "--ghost-limit", opts.ghost_limit, "-o", opts.log_file, f"-v{opts.verbosity}", *_COMMON]
    for path in IRMAP_SCAN_PATHS:
        cmd += ["--irmap-scan-path", path]
    for mnt, key in opts.external_mounts:
        cmd += ["--external", f"mnt[{mnt}]:{key}"]
    if opts.action_script:
        cmd += ["--action-script", opts.action_script]
    env = {**criu_env(), **dict(opts.action_env)}
    p = _start(cmd, env, action="dump")
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    finally:
        _finished(p)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


#: CRIU processes this process started and has not waited for yet: pid -> action (never taken for orphaned
#: helpers)
_RUNNING: dict[int, str] = {}
_RUNNING_LOCK = threading.Lock()


def running(action: str) -> list[int]:
    """Pids of this process's CRIU runs of `action` ("dump" or "restore") in flight (fault injection)."""
    with _RUNNING_LOCK:
        return [pid for pid, a in _RUNNING.items() if a == action]


def _start(cmd: list[str], env: dict, *, action: str) -> subprocess.Popen:
    with _RUNNING_LOCK:
        # Its own process group, which the tools it runs share (every CRIU runs `sh -c "iptables -w -L"`), so
        # that those of a CRIU that died are found and killed with it.
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             stdin=subprocess.DEVNULL, process_group=0)
        _RUNNING[p.pid] = action
    return p


def _finished(p: subprocess.Popen) -> None:
    with _RUNNING_LOCK:
        _RUNNING.pop(p.pid, None)
    if p.returncode != 0:
        _kill_group(p.pid)
        reap_orphaned_helpers()


def _kill_group(pgid: int, wait_s: float = 2.0) -> None:
    """Kill what is left of a dead CRIU's process group, the tools it was running, and reap them: orphaned,
    they are this process's (a child subreaper) to reap, and a zombie left unreaped is a leaked process."""
    with _RUNNING_LOCK:
        if pgid in _RUNNING:  # its pid went to a new run: the group was already empty
            return
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
    me, deadline = str(os.getpid()), time.monotonic() + wait_s
    while time.monotonic() < deadline:
        members = [(int(d.name), stat[1][1]) for d in Path("/proc").iterdir()
                   if d.name.isdigit() and (stat := proc_stat(d.name)) and stat[1][2] == str(pgid)]
        if not members:
            return
        for pid, ppid in members:
            if ppid == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        time.sleep(0.01)
    log.warning("tools of a dead CRIU (process group %d) outlived SIGKILL for %.0f s", pgid, wait_s)


def reap_orphaned_helpers() -> list[int]:
    """CRIU's helper processes outlive a CRIU that died (killed, OOM) and are adopted by this process, a child
    subreaper: kill and reap them, so no zombie or stopped helper stays. Returns their pids."""
    me, reaped = os.getpid(), []
    with _RUNNING_LOCK:
        for proc in Path("/proc").iterdir():
            stat = proc_stat(proc.name) if proc.name.isdigit() else None
            if stat is None:
                continue
            (comm, fields), pid = stat, int(proc.name)
            # CRIU's own helpers: criu, its loader, and the tar that saves or restores a tmpfs
            helper = comm in ("criu", "tar") or comm.startswith("ld-linux")
            if int(fields[1]) != me or pid in _RUNNING or not helper:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                reaped.append(pid)
            except (ProcessLookupError, ChildProcessError):
                pass
    if reaped:
        log.info("reaped %d helper processes of a CRIU that died: %s", len(reaped), reaped)
    return reaped


#: A restore whose log grows past this is stopped: CRIU looping on a damaged image wrote ~40 MB/s here.
RESTORE_LOG_LIMIT = 256 << 20


def restore(opts: RestoreOptions, timeout: float = 300,
            log_limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """Run the restore (`opts.exec_prefix` may first move CRIU into a cgroup that every restored task then
    inherits). A restore that outlives `timeout` raises TimeoutExpired; one whose log
    passes `log_limit_bytes` (default RESTORE_LOG_LIMIT) is killed and returns exit -9. Either way CRIU's own
    process is gone but tasks it forked may not be: the caller kills them (forkcore: the clone's cgroup)."""
    cmd = [*opts.exec_prefix, require_criu(), "restore", "-D", str(opts.images_dir), "-d", "--root", str(opts.root),
           "--pidfile", str(opts.pidfile), "-o", str(opts.log_file), "-v4", *_COMMON]
    for key, host_path in opts.external_mounts:
        cmd += ["--external", f"mnt[{key}]:{host_path}"]
    p = _start(cmd, criu_env(), action="restore")
    try:
        limit = RESTORE_LOG_LIMIT if log_limit_bytes is None else log_limit_bytes
        return _wait_restore(p, cmd, opts, timeout, limit)
    finally:
        _finished(p)


def _wait_restore(p: subprocess.Popen, cmd: list[str], opts: RestoreOptions, timeout: float,
                  limit: int) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = p.communicate(timeout=0.01)
            return subprocess.CompletedProcess(cmd, p.returncode, out, err)
        except subprocess.TimeoutExpired:
            pass
        try:
            too_long = Path(opts.log_file).stat().st_size > limit
        except OSError:
            too_long = False
        if too_long or time.monotonic() > deadline:
            p.kill()
            p.wait()
            for pipe in (p.stdout, p.stderr):  # CRIU's forked tasks hold them open: never wait for their EOF
                pipe.close()
            if not too_long:
                raise subprocess.TimeoutExpired(cmd, timeout)
            return subprocess.CompletedProcess(cmd, -9, "", f"restore log passed {limit} bytes: CRIU stopped "
                                                            "(looping on a damaged image?)")


def keep_log(src: Path, dst: Path, max_bytes: int = 8 << 20, max_dir_bytes: int = 128 << 20) -> Path | None:
    """Copy a CRIU log for later reading: whole when small, else its first MiB and its last `max_bytes` - 1 MiB.
    The oldest logs beside it are deleted while the folder holds more than `max_dir_bytes` (failures recur on a
    long-running host; the newest say most). Returns `dst`, or None when there was no log or no room for it (a
    full disk must not hide the error that is being reported)."""
    if not src.exists():
        return None
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        size = src.stat().st_size
        with open(src, "rb") as f, open(dst, "wb") as out:
            if size <= max_bytes:
                shutil.copyfileobj(f, out)
            else:
                out.write(f.read(1 << 20))
                out.write(f"\n[... {size - max_bytes} bytes left out ...]\n".encode())
                f.seek(size - (max_bytes - (1 << 20)))
                shutil.copyfileobj(f, out)
    except OSError as e:
        dst.unlink(missing_ok=True)
        log.warning("CRIU log %s not kept at %s: %s", src, dst, e)
        return None
    _prune_oldest(dst.parent, max_dir_bytes, keep=dst)
    return dst


def _prune_oldest(folder: Path, max_bytes: int, keep: Path) -> None:
    """Delete the oldest files of `folder` (never `keep`) until it holds at most `max_bytes`."""
    files = []
    for p in folder.iterdir():
        try:
            st = p.stat()
        except OSError:  # deleted meanwhile by another process's prune
            continue
        files.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in files)
    for _, size, p in sorted(files):
        if total <= max_bytes:
            break
        if p != keep:
            p.unlink(missing_ok=True)
            total -= size


#: CRIU errors of a dump that met the tree changing while it was seized — a process in the middle of its exit, or
#: a unix socket closed between CRIU's socket listing and its walk of the processes' files (Chromium opens and
#: closes them all the time): nothing is wrong with the tree, and a new dump succeeds (CRIU leaves a
#: --leave-running tree running on failure).
_RACED_DUMP_ERRORS = (re.compile(r"Unseizable non-zombie|Zombies with threads are not supported"),
                      re.compile(r"unix: Unix socket \d+ not found"))


def _log_end(path: Path, max_bytes: int = 4 << 20) -> list[str] | None:
    """The lines of a log's last `max_bytes` (where CRIU writes its errors); None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - max_bytes))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return None


def stats(images_dir: Path, action: str = "dump") -> dict:
    """CRIU's own account of a dump or restore in `images_dir` (its stats-dump / stats-restore image), e.g.
    dump: freezing_time, frozen_time (how long the tree stood frozen), memdump_time, memwrite_time (µs),
    pages_written; restore: restore_time (µs), pages_restored. {} when CRIU wrote none."""
    path = Path(images_dir) / f"stats-{action}"
    if not path.exists():
        return {}
    import pycriu.images  # comes with CRIU (scripts/setup.sh)

    with open(path, "rb") as f:
        entries = pycriu.images.load(f)["entries"]
    return dict(entries[0].get(action, {})) if entries else {}


def dump_raced(log_path: Path) -> bool:
    """True if the dump in `log_path` failed only because the tree changed while it was seized (a retry works)."""
    return any(e.search(line) for line in _log_end(log_path) or () for e in _RACED_DUMP_ERRORS)


#: A file a dump recorded on a thread's /proc entry, e.g. "[/proc/180/task/192/status]" (Chromium's browser reads
#: its children's threads' status). CRIU restores a process's files before it creates its threads, so such a file
#: (other than the leader's own, task/<pid>) cannot be opened again and the whole restore fails.
_THREAD_PROC_FILE = re.compile(rb"Dumping path for \d+ fd via self \d+ \[(/proc/(\d+)/task/(\d+)(?:/[^\]]*)?)\]")


def thread_proc_files_in_images(images_dir: Path) -> list[str]:
    """What `thread_proc_files` finds in a -v3/-v4 log, read from the dump's files image instead (at any log level):
    the regular files it recorded whose path is a non-leader thread's /proc/<pid>/task/<tid> entry."""
    path = Path(images_dir) / "files.img"
    if not path.exists():
        return []
    import pycriu.images  # comes with CRIU (scripts/setup.sh)

    with open(path, "rb") as f:
        entries = pycriu.images.load(f)["entries"]
    out = set()
    for e in entries:
        name = (e.get("reg") or {}).get("name", "")
        m = _THREAD_PROC_NAME.match(name)
        if m and m[2] != m[3]:
            out.add(name)
    return sorted(out)


_THREAD_PROC_NAME = re.compile(r"(/proc/(\d+)/task/(\d+)(?:/.*)?)$")


def thread_proc_files(log_path: Path) -> list[str]:
    """The open files of a successful dump in `log_path` that its restore could not reopen: a non-leader thread's
    /proc/<pid>/task/<tid> entries. Usually held for a moment (a dump taken again misses them)."""
    try:
        text = Path(log_path).read_bytes()
    except OSError:
        return []
    return sorted({m[1].decode(errors="replace") for m in _THREAD_PROC_FILE.finditer(text) if m[2] != m[3]})


def log_tail(path: Path, lines: int = 25) -> str:
    """The last error lines of a CRIU log (errors first, then the tail)."""
    text = _log_end(path)
    if text is None:
        return f"(no log at {path})"
    errors = [l for l in text if "Error (" in l][-10:]  # CRIU's own: not a path such as libgpg-error.so
    return "\n".join(errors + ["..."] + text[-lines:])
