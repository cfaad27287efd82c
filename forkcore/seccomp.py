"""A seccomp filter that makes io_uring_setup fail with ENOSYS (inherited by every child).

CRIU cannot dump io_uring instances, and Node's libuv (Playwright's driver) opens them unconditionally;
with io_uring_setup failing it falls back to epoll. Standard library only (runs in the workspace's init).
"""
import ctypes
import os
import platform
import struct

_NR_IO_URING_SETUP = 425  # x86_64 and aarch64 share it (asm-generic numbering since 5.1)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO, _ENOSYS = 0x7FFF0000, 0x00050000, 38


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def block_io_uring() -> None:
    """Install the filter in the calling process; raises OSError if the kernel refuses it."""
    if os.geteuid() != 0 and _already_filtered():
        return  # inherited from init; adding one would need no_new_privs, which breaks sudo for children
    arch = _AUDIT_ARCH.get(platform.machine())
    if arch is None:
        raise OSError(f"block_io_uring: unsupported architecture {platform.machine()}")
    ins = lambda code, jt, jf, k: struct.pack("HBBI", code, jt, jf, k)  # noqa: E731
    prog = b"".join([
        ins(_BPF_LD_W_ABS, 0, 0, 4),                      # seccomp_data.arch
        ins(_BPF_JEQ_K, 1, 0, arch),
        ins(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),         # foreign arch: leave alone
        ins(_BPF_LD_W_ABS, 0, 0, 0),                      # seccomp_data.nr
        ins(_BPF_JEQ_K, 0, 1, _NR_IO_URING_SETUP),
        ins(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS),
        ins(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
    ])
    buf = ctypes.create_string_buffer(prog)
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    # Root may install filters without no_new_privs; keeping setuid working matters (sudo in desktops).
    if os.geteuid() != 0 and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"installing the io_uring seccomp filter failed: errno {e}")


def _already_filtered() -> bool:
    with open("/proc/self/status") as f:
        return any(line.split() == ["Seccomp:", "2"] for line in f)
