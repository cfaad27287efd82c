"""Typed errors of forkcore. Every message says what failed, what was expected, and how to fix it."""


class ForkcoreError(Exception):
    """Base class of every error forkcore raises."""


class NotRoot(ForkcoreError):
    def __init__(self, what: str = "workspaces"):
        super().__init__(f"{what} need root (namespaces, overlay mounts, CRIU): run as root, e.g. `sudo`.")


class CriuUnavailable(ForkcoreError):
    """CRIU is missing, too old, or fails its self-check."""


class KernelFeatureMissing(ForkcoreError):
    """The running kernel lacks something a workspace needs (a namespace type, overlayfs, ...)."""


class BackendUnavailable(ForkcoreError):
    """An explicitly requested memory backend cannot run here; the message names what is missing."""


class WorkspaceError(ForkcoreError):
    """A workspace failed to start, or an operation on it failed."""


class ServiceDied(WorkspaceError):
    """A service of the workspace (its site, X server, ...) is no longer running: the workspace is damaged and
    what it answers may be wrong (an error page where the page was); discard it."""


class WorkspaceDestroyed(WorkspaceError):
    def __init__(self, ws_id: str, op: str):
        super().__init__(f"workspace {ws_id} is destroyed; cannot {op}. Fork a live workspace or a Snapshot instead.")


class SnapshotError(ForkcoreError):
    """A snapshot (CRIU dump) failed; the CRIU log tail is in the message and at `.log_path`."""

    def __init__(self, message: str, log_path: str | None = None):
        super().__init__(message)
        self.log_path = log_path


class SnapshotReleased(SnapshotError):
    def __init__(self, snap_id: str):
        super().__init__(f"snapshot {snap_id} was released; keep a reference (snapshot.retain()) while forking from it.")


class RestoreFailed(ForkcoreError):
    """A clone failed to restore; the CRIU log tail is in the message and at `.log_path`."""

    def __init__(self, message: str, log_path: str | None = None):
        super().__init__(message)
        self.log_path = log_path


class ExecutorError(ForkcoreError):
    """A handler in the workspace's executor raised; `.remote_type` and `.remote_traceback` say what."""

    def __init__(self, method: str, remote_type: str, message: str, remote_traceback: str = ""):
        super().__init__(f"{method}: {remote_type}: {message}")
        self.method = method
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


class ExecutorUnreachable(ForkcoreError):
    """The host cannot talk to the workspace's executor (it died, or never came up)."""
