"""The workspace's seccomp filter: hides the kernel features CRIU cannot checkpoint (inherited by every child).

A workspace must hold nothing CRIU 4.1.1 cannot dump or restore. Two features an application may pick up
on its own break that, so the filter makes their entry points fail the way a machine without them does:

- io_uring: CRIU cannot dump its rings, and Node's libuv (Playwright's driver) opens them unconditionally.
  io_uring_setup fails with ENOSYS (a kernel without io_uring); libuv falls back to epoll.
- memory protection keys (x86 PKU): CRIU restores neither a process's key allocation nor its VMAs' keys.
  Chromium >= 156 allocates a key in its zygote; a renderer forked from a *restored* zygote then calls
  pkey_mprotect(..., key 1), gets EINVAL (key 1 is not allocated in the restored mm) and dies on a CHECK
  ("Target crashed" for every new page of a clone). pkey_alloc fails with ENOSPC, which is what the
  kernel answers on a CPU without PKU, so Chromium, V8 and glibc take their no-PKU paths and a snapshot
  holds no key state. The same image then also restores on a host whose CPU lacks PKU.

Installed by the workspace's init (PID 1) while it is still root, so no_new_privs is not needed and setuid
programs (sudo in desktops) keep working. Standard library only (runs in init before anything else).
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

#: syscall numbers per architecture (asm-generic numbering for io_uring_setup since 5.1)
_SYSCALLS = {
    "x86_64": {"io_uring_setup": 425, "pkey_alloc": 330},
    "aarch64": {"io_uring_setup": 425, "pkey_alloc": 289},
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000

#: syscall -> errno it fails with inside a workspace
CRIU_INCOMPATIBLE = {"io_uring_setup": errno.ENOSYS, "pkey_alloc": errno.ENOSPC}


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def filter_program(denied: dict[str, int], machine: str | None = None) -> bytes:
    """The classic-BPF program that fails each syscall of `denied` with its errno and allows the rest."""
    machine = machine or platform.machine()
    arch, numbers = _AUDIT_ARCH.get(machine), _SYSCALLS.get(machine)
    if arch is None or numbers is None:
        raise OSError(f"workspace seccomp filter: unsupported architecture {machine}")
    ins = lambda code, jt, jf, k: struct.pack("HBBI", code, jt, jf, k)  # noqa: E731
    prog = [ins(_BPF_LD_W_ABS, 0, 0, 4),                  # seccomp_data.arch
            ins(_BPF_JEQ_K, 1, 0, arch),
            ins(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),     # foreign arch: leave alone
            ins(_BPF_LD_W_ABS, 0, 0, 0)]                   # seccomp_data.nr
    for name, err in sorted(denied.items()):
        prog += [ins(_BPF_JEQ_K, 0, 1, numbers[name]), ins(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | err)]
    prog.append(ins(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW))
    return b"".join(prog)


def install_workspace_filter(allow_pkeys: bool = False) -> None:
    """Install the filter in the calling process (and so in everything it starts), unless the process already
    runs under one (inherited from the workspace's init: stacking a second would need no_new_privs for
    non-root processes, which breaks sudo for their children).

    Args:
        allow_pkeys: leave pkey_alloc working (clones of processes that use keys then break; see above).
    Raises:
        OSError if the kernel refuses the filter.
    """
    if already_filtered():
        return
    denied = {k: v for k, v in CRIU_INCOMPATIBLE.items() if not (allow_pkeys and k == "pkey_alloc")}
    prog = filter_program(denied)
    buf = ctypes.create_string_buffer(prog)
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    # Root may install filters without no_new_privs; keeping setuid working matters (sudo in desktops).
    if os.geteuid() != 0 and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"installing the workspace seccomp filter failed: {os.strerror(e)}")


def already_filtered() -> bool:
    """True when the calling process runs under a seccomp filter (e.g. inherited from the workspace's init)."""
    with open("/proc/self/status") as f:
        return any(line.split() == ["Seccomp:", "2"] for line in f)
