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


_LATE_INIT = """
import os, signal, subprocess, sys, time
from forkcore import gc, paths
gc.INIT_EXIT_WAIT_S = 0.3
# An orphaned workspace's init, adopted by this process, that exits only after gc's wait (as a browser's tree
# on a loaded machine does): the kill is withheld and it ends by itself after 1 s.
init = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
ws = paths.STATE_DIR / "ws" / sys.argv[1]
ws.mkdir(parents=True)
(ws / "init.pid").write_text(str(init.pid))
real_kill = os.kill
gc.os.kill = lambda pid, sig: None if pid == init.pid else real_kill(pid, sig)
gc.collect()
time.sleep(2)
try:
    print(open(f"/proc/{init.pid}/stat").read().split(")")[1].split()[0])
except FileNotFoundError:
    print("gone")
"""


def test_gc_reaps_an_adopted_init_that_exits_after_its_wait(tmp_path):
    name = f"gctest-{uuid.uuid4().hex[:8]}"
    state = _run(tmp_path, "-c", _LATE_INIT, name).strip()
    assert state == "gone", f"the late init was left as {state!r} (Z: a zombie nobody reaps)"
