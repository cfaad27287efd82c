"""Where forkcore keeps its state on the host (overridable by environment variables)."""
import functools
import hashlib
import os
from pathlib import Path

#: Installed tools: CRIU, the getsockopt shim, the Python venv (scripts/setup.sh writes it).
PREFIX = Path(os.environ.get("BUNSHIN_PREFIX", "/opt/bunshin"))
#: Workspaces, layers and snapshot images. Must be on a local filesystem (overlay upper dirs live here).
STATE_DIR = Path(os.environ.get("BUNSHIN_STATE_DIR", "/var/lib/bunshin"))
#: Shared memory files of the memfile backend; must be on tmpfs so clones share the page cache.
SHM_DIR = Path(os.environ.get("BUNSHIN_SHM_DIR", "/dev/shm/bunshin"))

VENV = PREFIX / "venv"
CRIU_BIN = PREFIX / "criu" / "bin" / "criu"
SOCKSHIM = PREFIX / "lib" / "sockshim.so"
#: Paths inside every workspace.
WS_CODE_DIR = "/opt/bunshin/code"
WS_RUN_DIR = "/run/bunshin"
WS_EXECUTOR_SOCKET = "/run/bunshin/executor.sock"
WS_READY_FILE = "/run/bunshin/ready"

#: Every state dir workspaces were made under on this host since boot (one file each, holding its path): the
#: cgroups are host-wide, so gc must know every state dir's workspaces before it takes a cgroup for an orphan.
STATE_DIRS_REGISTRY = Path("/run/bunshin/state-dirs")


@functools.cache
def register_state_dir() -> None:
    """Record STATE_DIR in the registry (once per process: every workspace start and restore calls it)."""
    entry = STATE_DIRS_REGISTRY / hashlib.sha256(str(STATE_DIR.resolve()).encode()).hexdigest()[:16]
    if not entry.exists():
        STATE_DIRS_REGISTRY.mkdir(parents=True, exist_ok=True)
        entry.write_text(str(STATE_DIR.resolve()))


def state_dirs() -> list[Path]:
    """Every registered state dir that still exists, this process's own included."""
    out = {STATE_DIR.resolve()}
    if STATE_DIRS_REGISTRY.is_dir():
        for entry in STATE_DIRS_REGISTRY.iterdir():
            try:
                path = Path(entry.read_text())
            except OSError:
                continue
            if path.is_dir():
                out.add(path)
            else:
                entry.unlink(missing_ok=True)
    return sorted(out)
