"""Workspace specifications: what runs inside a workspace and which layers form its root filesystem.

Data only; `validate_spec` holds the checks. Envs build a `WorkspaceSpec`; forkcore never reads an env's
own configuration.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class ServiceSpec:
    """A long-running process that the workspace's init starts, in order, and reaps.

    Attributes:
        name: short identifier; the service's log is /run/bunshin/log/<name>.log inside the workspace.
        argv: the command, resolved inside the workspace (host paths are not visible there).
        env: extra environment variables on top of the workspace's.
        cwd: working directory inside the workspace.
        ready: when the service counts as started: "tcp:PORT" (accepts on 127.0.0.1), "unix:PATH"
            (socket accepts), "file:PATH" (exists), or None (immediately).
        ready_timeout_s: how long init waits for `ready` before it reports the workspace as failed.
        user: run as this account of the workspace's /etc/passwd (its uid, gid and groups; see
            `forkcore.layers.user_layer`) instead of root. `env` still decides HOME and USER.
        root: run chrooted into this directory of the workspace (an image's root filesystem: forkcore.images),
            which gets the workspace's /dev and its own /proc and /sys. `argv`, `cwd` and `user` are then the
            image's: `user` as Docker takes it ("name", "uid", "name:group", "uid:gid", from the image's
            /etc/passwd and /etc/group), and `env` is the whole environment (not added to the workspace's).
    """

    name: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = "/"
    ready: str | None = None
    ready_timeout_s: float = 60.0
    user: str | None = None
    root: str | None = None

    @staticmethod
    def make(name: str, argv, env: Mapping[str, str] | None = None, **kw) -> "ServiceSpec":
        return ServiceSpec(name, tuple(argv), tuple(sorted((env or {}).items())), **kw)


@dataclass(frozen=True)
class WorkspaceSpec:
    """Everything needed to start a workspace.

    Attributes:
        name: label used in ids and logs.
        services: started in order by the workspace's init (PID 1); each waits for the previous to be ready.
        handlers: Python modules (importable inside the workspace) whose `register(executor)` adds RPC
            methods to the executor; the executor runs as the last service when `executor` is True.
        layers: host directories stacked read-only above the project code and the system layer, top first
            (e.g. site data, task files). Their content appears at the same paths inside the workspace.
        env: environment variables for every service and the executor.
        hostname: the workspace's UTS hostname.
        tmpfs_mb: size limit of each tmpfs (/tmp, /run, /dev/shm, /root, /home).
        ksm_mergeable: mark the workspace's memory mergeable by KSM (PR_SET_MEMORY_MERGE); only costs CPU
            while KSM runs (/sys/kernel/mm/ksm/run = 1), which the ksm backend turns on.
        executor: start forkcore's executor (the host's RPC endpoint in the workspace).
        executor_user: run the executor (and so every handler and what it starts) as this account of the
            workspace's /etc/passwd instead of root, e.g. a desktop user whose session bus admits only it.
        allow_pkeys: let processes allocate x86 memory protection keys. Off by default: CRIU 4.1.1 restores
            no key state, so a clone of a process that uses keys crashes when it next applies one (Chromium
            >= 156 on a PKU CPU: every new page of a clone). See forkcore/seccomp.py.
        harden: drop capabilities, hide the host's kernel interfaces (forkcore/hardening.py), allow only
            Docker's default system calls (forkcore/seccomp.py) and open only the devices of the workspace's
            own /dev (forkcore/cgroups.py). False only for the escape tests' negative controls: an agent's code
            could then change the host.
        pids_max: most tasks (processes and threads) the workspace may hold, a clone's own count; beyond it
            fork and clone fail with EAGAIN inside the workspace only (a fork bomb). None: no limit (also, with a
            warning, on a host without a pids cgroup controller).
        memory_max_mb: most memory (resident, page cache and tmpfs together) the workspace may charge, a clone's
            own; beyond it the kernel's OOM killer ends a process of that workspace only. None: no limit.
        disk_mb: most data the workspace may write to its root filesystem (its overlay's upper dir lives on a
            tmpfs of this size, a clone's own; writes beyond it fail with ENOSPC inside the workspace only; its
            pages count toward memory_max_mb). /tmp, /run, /root and /home are tmpfs_mb tmpfs of their own.
            None: the upper dir lies on the state dir's filesystem, unlimited.
    """

    name: str
    services: tuple[ServiceSpec, ...] = ()
    handlers: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    hostname: str = "workspace"
    tmpfs_mb: int = 2048
    ksm_mergeable: bool = True
    executor: bool = True
    executor_user: str | None = None
    allow_pkeys: bool = False
    harden: bool = True
    pids_max: int | None = 8192
    memory_max_mb: int | None = 4096
    disk_mb: int | None = 2048

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @staticmethod
    def from_dict(d: dict) -> "WorkspaceSpec":
        d = dict(d)
        d["services"] = tuple(
            ServiceSpec(**{**s, "argv": tuple(s["argv"]), "env": tuple(tuple(p) for p in s.get("env", ()))})
            for s in d.get("services", ())
        )
        for key in ("handlers", "layers"):
            d[key] = tuple(d.get(key, ()))
        d["env"] = tuple(tuple(p) for p in d.get("env", ()))
        return WorkspaceSpec(**d)


_IMAGE_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_READY = re.compile(r"^(tcp:\d{1,5}|unix:/.+|file:/.+)$")


def validate_spec(spec: WorkspaceSpec) -> None:
    """Raise ValueError naming the first problem in `spec` and how to fix it."""
    if not _NAME.match(spec.name):
        raise ValueError(f"WorkspaceSpec.name {spec.name!r}: use 1-64 letters, digits, '_', '.', '-'")
    if not _NAME.match(spec.hostname):
        raise ValueError(f"WorkspaceSpec.hostname {spec.hostname!r}: use 1-64 letters, digits, '_', '.', '-'")
    if spec.pids_max is not None and (not isinstance(spec.pids_max, int) or spec.pids_max < 64):
        raise ValueError(f"WorkspaceSpec.pids_max={spec.pids_max!r}: expected an int >= 64 (a desktop alone runs "
                         f"hundreds of threads) or None for no limit")
    if spec.memory_max_mb is not None and (not isinstance(spec.memory_max_mb, int) or spec.memory_max_mb < 256):
        raise ValueError(f"WorkspaceSpec.memory_max_mb={spec.memory_max_mb!r}: expected an int >= 256 (a browser "
                         f"alone takes hundreds of MB) or None for no limit")
    if spec.disk_mb is not None and (not isinstance(spec.disk_mb, int) or spec.disk_mb < 16):
        raise ValueError(f"WorkspaceSpec.disk_mb={spec.disk_mb!r}: expected an int >= 16 or None for no limit")
    if spec.tmpfs_mb < 16:
        raise ValueError(f"WorkspaceSpec.tmpfs_mb={spec.tmpfs_mb}: expected at least 16")
    _USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
    if spec.executor_user is not None and not _USER.match(spec.executor_user):
        raise ValueError(f"WorkspaceSpec.executor_user {spec.executor_user!r}: expected a POSIX user name")
    seen = set()
    for s in spec.services:
        if s.root is not None and not (s.root.startswith("/") and s.root != "/" and ".." not in s.root.split("/")):
            raise ValueError(f"service {s.name!r}: root={s.root!r}; expected an absolute directory of the workspace")
        if s.user is not None and not (_IMAGE_USER if s.root else _USER).match(s.user):
            raise ValueError(f"service {s.name!r}: user={s.user!r}; expected "
                             + ("'name', 'uid', 'name:group' or 'uid:gid'" if s.root else "a POSIX user name"))
        if not _NAME.match(s.name) or s.name == "executor":
            raise ValueError(f"service name {s.name!r}: use letters, digits, '_', '.', '-' (not 'executor')")
        if s.name in seen:
            raise ValueError(f"service name {s.name!r} appears twice in WorkspaceSpec {spec.name!r}")
        seen.add(s.name)
        if not s.argv or not all(isinstance(a, str) for a in s.argv):
            raise ValueError(f"service {s.name!r}: argv must be a non-empty sequence of strings")
        if s.ready is not None and not _READY.match(s.ready):
            raise ValueError(f"service {s.name!r}: ready={s.ready!r}; expected 'tcp:PORT', 'unix:/path' or 'file:/path'")
    for layer in spec.layers:
        p = Path(layer)
        if not p.is_absolute() or not p.is_dir():
            raise ValueError(f"layer {layer!r}: expected an existing absolute directory on the host")
    for mod in spec.handlers:
        if not re.match(r"^[A-Za-z_][\w.]*$", mod):
            raise ValueError(f"handler module {mod!r}: expected a dotted Python module name")
