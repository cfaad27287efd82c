"""The workspace's seccomp filter: which system calls a workspace's processes may make (inherited by every child).

Two filters, both built with libseccomp (Debian's python3-seccomp):

- Hardened workspaces (the default) get an allowlist: the rules of Docker's default x86_64 profile for a
  container without CAP_SYS_ADMIN (the capabilities kept are forkcore.hardening's): everything else fails
  with EPERM. So mount, umount2, unshare, setns, pivot_root, bpf, perf_event_open, keyctl, add_key,
  userfaultfd, kexec_load, init_module, reboot, clock_settime, ... are refused, clone may not create
  namespaces (`unshare -U`, which needs no capability, is stopped here), clone3 fails with ENOSYS (glibc then
  falls back to clone, whose flags the filter can read), personality takes only the harmless personas and
  socket refuses AF_VSOCK (the hypervisor's channel). Syscalls newer than that profile that need no
  capability (fchmodat2, futex_wait, ...) are allowed, so a newer glibc keeps its fast paths. Only x86_64's
  own system calls pass: 32-bit (int 0x80) and x32 calls fail with EPERM (Docker filters them by the same
  list; no workspace runs 32-bit code).
- Workspaces started with `harden=False` (the escape tests' negative controls) allow everything but what
  CRIU cannot checkpoint (below).

Both make what CRIU 4.1.1 cannot checkpoint fail the way a machine without it does:
- io_uring: CRIU cannot dump its rings, and Node's libuv (Playwright's driver) opens them unconditionally.
  io_uring_setup fails with ENOSYS (a kernel without io_uring); libuv falls back to epoll.
- memory protection keys (x86 PKU): CRIU restores neither a process's key allocation nor its VMAs' keys.
  Chromium >= 156 allocates a key in its zygote; a renderer forked from a *restored* zygote then calls
  pkey_mprotect(..., key 1), gets EINVAL (key 1 is not allocated in the restored mm) and dies on a CHECK
  ("Target crashed" for every new page of a clone). pkey_alloc fails with ENOSPC, which is what the
  kernel answers on a CPU without PKU, so Chromium, V8 and glibc take their no-PKU paths and a snapshot
  holds no key state. The same image then also restores on a host whose CPU lacks PKU.

Installed by the workspace's init (PID 1) while it is still root with CAP_SYS_ADMIN, so no_new_privs is not
set and setuid programs (sudo in desktops) keep working. CRIU dumps the filter with each process and restores
it last, after its own restorer's system calls.
"""
from __future__ import annotations

import errno
import os

#: the system calls of Docker's default profile that x86_64 allows whatever their arguments
ALLOWED = (
    # files and directories
    "access", "faccessat", "faccessat2", "chdir", "fchdir", "getcwd", "chmod", "fchmod", "fchmodat", "chown",
    "fchown", "fchownat", "lchown", "creat", "open", "openat", "openat2", "close", "close_range", "dup", "dup2",
    "dup3", "read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev",
    "pwritev2", "lseek", "readahead", "fadvise64", "fallocate", "truncate", "ftruncate", "fsync", "fdatasync",
    "sync", "syncfs", "sync_file_range", "flock", "fcntl", "ioctl", "stat", "fstat", "lstat", "newfstatat",
    "statx", "statfs", "fstatfs", "getdents", "getdents64", "mkdir", "mkdirat", "mknod", "mknodat", "rmdir",
    "link", "linkat", "symlink", "symlinkat", "readlink", "readlinkat", "unlink", "unlinkat", "rename",
    "renameat", "renameat2", "utime", "utimes", "utimensat", "futimesat", "umask", "getxattr", "lgetxattr",
    "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr", "llistxattr", "flistxattr", "removexattr",
    "lremovexattr", "fremovexattr", "name_to_handle_at", "copy_file_range", "sendfile", "splice", "tee",
    "vmsplice", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_mark",
    # asynchronous I/O (io_uring apart: see CRIU_INCOMPATIBLE)
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents", "ioprio_get",
    "ioprio_set",
    # memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock", "mlock2", "mlockall",
    "munlock", "munlockall", "remap_file_pages", "membarrier", "memfd_create", "memfd_secret",
    "process_mrelease", "pkey_free", "pkey_mprotect",
    # processes, threads and signals
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill", "tkill", "tgkill",
    "pidfd_open", "pidfd_send_signal", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
    "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
    "signalfd4", "pause", "restart_syscall", "futex", "futex_waitv", "get_robust_list", "set_robust_list",
    "set_tid_address", "rseq", "arch_prctl", "modify_ldt", "get_thread_area", "set_thread_area", "prctl",
    "seccomp", "capget", "capset", "ptrace", "process_vm_readv", "process_vm_writev",
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    # identity, limits, scheduling
    "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid", "getuid", "geteuid",
    "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid", "setgid", "setreuid", "setregid",
    "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups", "getrlimit", "setrlimit", "prlimit64",
    "getrusage", "getpriority", "setpriority", "sched_yield", "sched_getaffinity", "sched_setaffinity",
    "sched_getattr", "sched_setattr", "sched_getparam", "sched_setparam", "sched_getscheduler",
    "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
    "getcpu", "uname", "sysinfo", "getrandom", "chroot",  # chroot: CAP_SYS_CHROOT is kept
    # time and timers
    "time", "gettimeofday", "clock_gettime", "clock_getres", "clock_nanosleep", "clock_adjtime", "adjtimex",
    "nanosleep", "alarm", "getitimer", "setitimer", "times", "timer_create", "timer_delete", "timer_getoverrun",
    "timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
    # waiting on descriptors
    "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
    "epoll_wait", "epoll_wait_old", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "pipe", "pipe2",
    # sockets (socket itself: see the rules below)
    "socketpair", "bind", "listen", "accept", "accept4", "connect", "getsockname", "getpeername", "getsockopt",
    "setsockopt", "sendto", "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg", "shutdown",
    # System V and POSIX IPC
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd",
    "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
    "mq_getsetattr",
)
#: newer than that profile, need no capability, and glibc uses them when the kernel has them
ALLOWED_NEWER = ("fchmodat2", "futex_wake", "futex_wait", "futex_requeue", "cachestat", "map_shadow_stack",
                 "mseal")
#: clone's flags that create namespaces: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_NAMESPACE_FLAGS = 0x7E020000
#: personality(2) personas allowed: PER_LINUX, UNAME26, PER_LINUX32, PER_LINUX32|UNAME26, and the query
PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
AF_VSOCK = 40
#: syscall -> errno it fails with inside every workspace (what CRIU cannot checkpoint; see above)
CRIU_INCOMPATIBLE = {"io_uring_setup": errno.ENOSYS, "io_uring_enter": errno.ENOSYS,
                     "io_uring_register": errno.ENOSYS, "pkey_alloc": errno.ENOSPC}


def _libseccomp():
    try:
        import seccomp
    except ImportError:
        raise OSError(errno.ENOPKG, "the workspace seccomp filter needs libseccomp's Python binding: install "
                                    "Debian's python3-seccomp (bash scripts/setup.sh does)") from None
    return seccomp


def build_filter(allowlist: bool = True, allow_pkeys: bool = False):
    """The workspace's filter as a `seccomp.SyscallFilter`, not yet loaded.

    Args:
        allowlist: Docker's default rules (True), or allow everything but `CRIU_INCOMPATIBLE` (False).
        allow_pkeys: leave pkey_alloc working (clones of processes that use keys then break; see above).
    """
    sc = _libseccomp()
    denied = {k: v for k, v in CRIU_INCOMPATIBLE.items() if not (allow_pkeys and k == "pkey_alloc")}
    f = sc.SyscallFilter(defaction=sc.ERRNO(errno.EPERM) if allowlist else sc.ALLOW)
    f.set_attr(sc.Attr.CTL_NNP, 0)  # setuid programs must keep working (installed as root instead)
    f.set_attr(sc.Attr.ACT_BADARCH, sc.ERRNO(errno.EPERM))  # 32-bit calls of a 64-bit process: refused
    for name, err in denied.items():
        f.add_rule(sc.ERRNO(err), name)
    if not allowlist:
        return f
    names = ALLOWED + ALLOWED_NEWER + (("pkey_alloc",) if allow_pkeys else ())
    for name in names:
        if sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0:  # an older libseccomp may not know the newest ones
            f.add_rule(sc.ALLOW, name)
    f.add_rule(sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_NAMESPACE_FLAGS, 0))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # its flags sit in memory the filter cannot read
    for persona in PERSONAS:
        f.add_rule(sc.ALLOW, "personality", sc.Arg(0, sc.EQ, persona))
    f.add_rule(sc.ALLOW, "socket", sc.Arg(0, sc.NE, AF_VSOCK))
    return f


def install_workspace_filter(allowlist: bool = True, allow_pkeys: bool = False) -> None:
    """Install `build_filter(allowlist, allow_pkeys)` in the calling process (and so in everything it starts),
    unless the process already runs under a filter (inherited from the workspace's init: stacking a second
    would need no_new_privs for non-root processes, which breaks sudo for their children).

    Raises:
        OSError if libseccomp is missing, the architecture unsupported or the kernel refuses the filter.
    """
    if already_filtered():
        return
    f = build_filter(allowlist, allow_pkeys)
    if os.geteuid() != 0:  # only root may install a filter without no_new_privs
        f.set_attr(_libseccomp().Attr.CTL_NNP, 1)
    try:
        f.load()
    except (OSError, RuntimeError, ValueError) as e:
        raise OSError(errno.EPERM, f"installing the workspace seccomp filter failed: {e}") from e


def already_filtered() -> bool:
    """True when the calling process runs under a seccomp filter (e.g. inherited from the workspace's init)."""
    with open("/proc/self/status") as f:
        return any(line.split() == ["Seccomp:", "2"] for line in f)
