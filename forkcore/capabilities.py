"""What this machine can do for forkcore, each with the exact fix when it is missing (`bunshin doctor`)."""
from __future__ import annotations

import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from . import criu, paths
from .backends import backend_report


#: what a capability is needed for (`Capability.needed_for`)
MAIN, TESTS, OPTIONAL = "main", "tests", "optional"


@dataclass(frozen=True)
class Capability:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    needed_for: str = MAIN
    """MAIN: the envs and the main job (`bash scripts/demo.sh`); TESTS: only the test suite and its side-by-side
    baselines (`bash scripts/test.sh` installs it); OPTIONAL: a backend Bunshin uses when present"""

    def to_dict(self) -> dict:
        return asdict(self)


def _filesystems() -> set[str]:
    try:
        return {line.split()[-1] for line in Path("/proc/filesystems").read_text().splitlines()}
    except OSError:
        return set()


_CAP_SYS_RESOURCE = 24


def can_snapshot_non_root_processes() -> bool:
    """True if CRIU (run by this process) may dump processes of other users: it reads every task's
    rlimits with prlimit(2), which the kernel allows across uids only with CAP_SYS_RESOURCE."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    return False


def non_root_services_snapshot(harden: bool = True) -> bool:
    """True if a workspace with this `harden` setting may run services as non-root users and still be
    snapshotted: a hardened one has its own user namespace (CRIU owns it), others need CAP_SYS_RESOURCE."""
    return (harden and user_namespace_missing() is None) or can_snapshot_non_root_processes()


def user_namespace_missing() -> str | None:
    """Why a hardened workspace cannot have its own user namespace here (None: it can)."""
    if not Path("/proc/self/ns/user").exists():
        return "this kernel has no user namespaces (CONFIG_USER_NS)"
    try:
        if int(Path("/proc/sys/user/max_user_namespaces").read_text()) == 0:
            return "user.max_user_namespaces is 0: sysctl -w user.max_user_namespaces=15000"
    except (OSError, ValueError):
        pass
    return None


def cpu_has_pkeys() -> bool:
    """True if the CPU and kernel offer memory protection keys to user space (`ospke` in /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " ospke" in line for line in f)
    except OSError:
        return False


def check_all() -> list[Capability]:
    caps = []
    root = os.geteuid() == 0
    caps.append(Capability("root", root, "running as root" if root else f"running as uid {os.geteuid()}",
                           "" if root else "run as root (namespaces, mounts and CRIU need it)"))
    missing_ns = [ns for ns in ("pid", "mnt", "net", "ipc", "uts") if not Path(f"/proc/self/ns/{ns}").exists()]
    caps.append(Capability("namespaces", not missing_ns,
                           "pid mnt net ipc uts" if not missing_ns else f"missing: {' '.join(missing_ns)}",
                           "" if not missing_ns else "use a kernel with CONFIG_{PID,NET,IPC,UTS}_NS"))
    ovl = "overlay" in _filesystems()
    caps.append(Capability("overlayfs", ovl, "overlay in /proc/filesystems" if ovl else "not available",
                           "" if ovl else "modprobe overlay (or a kernel with CONFIG_OVERLAY_FS)"))
    userns = user_namespace_missing()
    caps.append(Capability("user namespaces", userns is None,
                           "hardened workspaces run in their own (ids mapped one to one)" if userns is None else userns,
                           "" if userns is None else userns.split(": ", 1)[-1]))
    try:
        binary = criu.criu_binary()
        v = criu.criu_version(binary)
        ok = v[:2] >= criu.MIN_VERSION
        caps.append(Capability("criu", ok, f"{'.'.join(map(str, v))} at {binary}",
                               "" if ok else "bash scripts/setup.sh (installs CRIU >= 4.1)"))
        if ok and root:
            r = subprocess.run([binary, "check"], capture_output=True, text=True, env=criu.criu_env(), timeout=60)
            msg = (r.stdout + r.stderr).strip().splitlines()
            caps.append(Capability("criu check", r.returncode == 0, msg[-1] if msg else f"exit {r.returncode}",
                                   "" if r.returncode == 0 else "see `criu check` output; kernel lacks a feature"))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        caps.append(Capability("criu", False, str(e), "bash scripts/setup.sh"))
    if criu.kernel_needs_sockshim():
        ok = paths.SOCKSHIM.exists()
        caps.append(Capability("criu getsockopt shim", ok, str(paths.SOCKSHIM) if ok else "missing",
                               "" if ok else "bash scripts/setup.sh (compiles forkcore/native/sockshim.c)"))
    res = can_snapshot_non_root_processes()
    caps.append(Capability(
        "snapshot non-root processes", res or userns is None, "CAP_SYS_RESOURCE held" if res else
        "no CAP_SYS_RESOURCE: CRIU's prlimit on other users' processes fails (EPERM) outside a user namespace; "
        + ("hardened workspaces have their own, where CRIU holds it" if userns is None else
           "so workspaces run their services as root"),
        "" if res or userns is None else "run on a host or container that grants CAP_SYS_RESOURCE"))
    pku = cpu_has_pkeys()
    caps.append(Capability(
        "memory protection keys", True,
        ("this CPU has PKU: " if pku else "this CPU has no PKU: ") +
        "workspaces answer pkey_alloc with ENOSPC (CRIU 4.1.1 restores no key state; forkcore/seccomp.py)"))
    ksm = Path("/sys/kernel/mm/ksm/run")
    caps.append(Capability("ksm", ksm.exists(), f"run={ksm.read_text().strip()}" if ksm.exists() else "absent",
                           "" if ksm.exists() else "kernel with CONFIG_KSM"))
    for name, why in backend_report().items():
        caps.append(Capability(f"backend {name}", why is None, "available" if why is None else why,
                               "" if why is None else why.split(": ", 1)[-1],
                               needed_for=OPTIONAL if name == "kmod" else MAIN))
    return caps
