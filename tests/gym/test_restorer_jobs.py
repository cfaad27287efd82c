"""The restorer's background thread: what a caller waiting for it is told it waited for, and which queued jobs
a drop cancels (the jobs here are stand-ins; restores and snapshots themselves are tested with real workspaces in
tests/integration/test_webarena_runtime.py)."""
from __future__ import annotations

import threading

from bunshin_gym.restorer import Restorer


def _restorer() -> Restorer:
    return Restorer(runtime=None, tree=None, task=None, task_snapshot=None, adapter=None, backend="criu",
                    call_timeout_s=1.0)


def test_waiting_for_the_background_names_the_jobs_running_and_queued():
    r, gate, ran = _restorer(), threading.Event(), []
    assert r.wait_background() == ()  # nothing in the background: nothing waited for
    r._submit("reset", lambda: (gate.wait(5), ran.append("reset")))
    r._submit("snapshot", lambda: ran.append("snapshot"))
    r._submit("sync", lambda: ran.append("sync"))
    threading.Timer(0.2, gate.set).start()
    assert r.wait_background() == ("reset", "snapshot", "sync")
    assert ran == ["reset", "snapshot", "sync"] and r.wait_background() == ()


def test_a_drop_cancels_queued_syncs_but_still_runs_queued_snapshots():
    r, gate, ran = _restorer(), threading.Event(), []
    r._submit("snapshot", lambda: (gate.wait(5), ran.append("first snapshot")))
    r._submit("sync", lambda: ran.append("sync"))
    r._submit("reset", lambda: ran.append("reset"))
    r._submit("snapshot", lambda: ran.append("second snapshot"))
    threading.Timer(0.2, gate.set).start()
    r.drop()
    assert ran == ["first snapshot", "second snapshot"]
