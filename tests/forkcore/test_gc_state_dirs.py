"""`bunshin gc` under one BUNSHIN_STATE_DIR never takes the cgroup of another state dir's workspace (cgroups are
host-wide; a local Ray cluster gives each node its own state dir), and still takes one whose state is gone."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from forkcore.cgroups import WorkspaceCgroups

pytestmark = [pytest.mark.criu]

_MAKE = """
import sys
from forkcore import paths
from forkcore.cgroups import WorkspaceCgroups
paths.register_state_dir()
(paths.STATE_DIR / "ws" / sys.argv[1]).mkdir(parents=True)
WorkspaceCgroups(sys.argv[1])
"""


def _run(state_dir, *args: str) -> str:
    env = dict(os.environ, BUNSHIN_STATE_DIR=str(state_dir), BUNSHIN_SHM_DIR=str(state_dir / "shm"))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True).stdout


def test_gc_keeps_the_cgroups_of_other_state_dirs_workspaces(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    name = f"gctest-{uuid.uuid4().hex[:8]}"
    _run(a, "-c", _MAKE, name)  # a workspace dir of state dir a, with its cgroup; no process: gc of a would take it
    cg = WorkspaceCgroups(name, create=False)
    try:
        assert cg.path.is_dir()
        _run(b, "-m", "bunshin_gym.cli", "gc")
        assert cg.path.is_dir(), "gc under state dir b took a cgroup of state dir a's workspace"
        (a / "ws" / name).rmdir()  # its state is gone everywhere: now an orphan
        out = _run(b, "-m", "bunshin_gym.cli", "gc")
        assert not cg.path.exists(), out
    finally:
        if cg.path.exists():
            cg.remove()
