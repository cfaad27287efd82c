"""forkcore: live workspaces (namespaces + overlay layers + init + executor RPC) and their snapshot/fork.

Mechanism only: it knows no RL and imports neither Gymnasium nor any env.
"""
from .accounting import TreeMemory, host_memory_used, tree_memory
from .backends import ALL_BACKENDS, AUTO_ORDER, backend_report, get_backend
from .errors import (BackendUnavailable, CriuUnavailable, ExecutorError, ExecutorUnreachable, ForkcoreError,
                     KernelFeatureMissing, NotRoot, RestoreFailed, ServiceDied, SnapshotError, SnapshotReleased,
                     WorkspaceDestroyed, WorkspaceError)
from .spec import ServiceSpec, WorkspaceSpec, validate_spec
from .versions import HostVersions, host_versions
from .workspace import Snapshot, Workspace, live_workspaces

__all__ = [
    "ALL_BACKENDS", "AUTO_ORDER", "BackendUnavailable", "CriuUnavailable", "ExecutorError", "ExecutorUnreachable",
    "ForkcoreError", "HostVersions", "KernelFeatureMissing", "NotRoot", "RestoreFailed", "ServiceDied", "ServiceSpec", "Snapshot",
    "SnapshotError", "SnapshotReleased", "TreeMemory", "Workspace", "WorkspaceDestroyed", "WorkspaceError",
    "WorkspaceSpec", "backend_report", "get_backend", "host_memory_used", "host_versions", "tree_memory",
    "live_workspaces", "validate_spec",
]
