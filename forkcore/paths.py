"""Where forkcore keeps its state on the host (overridable by environment variables)."""
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
