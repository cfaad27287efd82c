"""What closes a workspace off from its host: the capabilities its processes may hold and the kernel
interfaces under /proc and /sys they may not write or read. Applied by the workspace's init (stage 2) while it
is still privileged, before any service starts, so every process of the workspace inherits it.

- Capabilities: the bounding set (and init's own sets) are cut to Docker's default set minus NET_RAW and MKNOD
  (`KEPT_CAPABILITIES`): no CAP_SYS_ADMIN (mount, remount the read-only binds), SYS_MODULE, SYS_RAWIO,
  SYS_PTRACE, SYS_BOOT, SYS_TIME, NET_ADMIN, MKNOD (device nodes of the host's disks), … Root inside stays
  root of its files; setuid programs (sudo) work within the kept set.
- /proc and /sys: the paths Docker masks are hidden (/dev/null or an empty read-only tmpfs over them) and the
  paths it makes read-only (/proc/sys, /proc/sysrq-trigger, …) are bound read-only: the workspace has its own
  pid namespace but /proc/sys and sysrq are the host's kernel.

CRIU dumps and restores all of it (the masks are ordinary bind and tmpfs mounts of the workspace's mount
namespace; capability sets are part of each process's image). Standard library only: init imports it
(and it uses init's mount helper).
"""
from __future__ import annotations

import ctypes
import os

from forkcore.init import MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REC, MS_REMOUNT, _check, _mount

#: Docker's default capability set without NET_RAW and MKNOD (numbers: linux/capability.h)
KEPT_CAPABILITIES = {
    "CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4, "CAP_KILL": 5, "CAP_SETGID": 6,
    "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_NET_BIND_SERVICE": 10, "CAP_SYS_CHROOT": 18, "CAP_AUDIT_WRITE": 29,
    "CAP_SETFCAP": 31,
}
#: hidden: files get /dev/null bound over them, directories an empty read-only tmpfs
MASKED_PATHS = ("/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
                "/sys/devices/virtual/powercap")
#: bound read-only over themselves (/sys is mounted read-only as a whole already)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def last_capability() -> int:
    with open("/proc/sys/kernel/cap_last_cap") as f:
        return int(f.read())


def mask_kernel_interfaces(root: str = "") -> None:
    """Hide `MASKED_PATHS` and make `READONLY_PATHS` read-only (those that exist on this kernel), in the
    /proc and /sys under `root` (an image's root filesystem inside the workspace; default: the workspace's)."""
    for path in (root + p for p in MASKED_PATHS):
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=555")
        elif os.path.exists(path):
            _mount("/dev/null", path, None, MS_BIND)
    for path in (root + p for p in READONLY_PATHS):
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def drop_capabilities(kept: set[int] | None = None) -> None:
    """Cut the bounding set to `kept` (default `KEPT_CAPABILITIES`), clear the ambient and inheritable sets, and
    reduce the calling process's own effective and permitted sets to it: every later exec, setuid or not, gets
    at most these."""
    kept = set(KEPT_CAPABILITIES.values()) if kept is None else kept
    with open("/proc/self/status") as f:  # a kept capability this process lacks cannot be kept (capset: EPERM)
        held = next(int(line.split()[1], 16) for line in f if line.startswith("CapPrm:"))
    kept = {c for c in kept if held >> c & 1}
    for cap in range(last_capability() + 1):
        if cap not in kept:
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0),
                   f"workspace hardening: dropping capability {cap} from the bounding set")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0),
           "workspace hardening: clearing the ambient set")
    masks = [sum(1 << (c - 32 * i) for c in kept if 32 * i <= c < 32 * (i + 1)) for i in (0, 1)]
    data = (_CapData * 2)(*[_CapData(m, m, 0) for m in masks])  # inheritable empty, as Docker since 20.10
    _check(_libc.capset(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data), "workspace hardening: capset")

