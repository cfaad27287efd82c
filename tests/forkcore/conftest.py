"""One probe workspace per test session, snapshotted once; tests fork clones from the snapshot."""
from __future__ import annotations

import pytest

PAGE_HTML = "<div id=d>hello</div><script>window.x = 41</script>"


@pytest.fixture(scope="session")
def source():
    from forkcore import Workspace
    from forkcore.probe import probe_spec

    ws = Workspace.start(probe_spec("fctest", hold_mb=32))
    ws.call("probe.tcp_open")
    ws.call("probe.counter", inc=True)
    ws.call("probe.counter", inc=True)
    ws.call("probe.browser_start", html=PAGE_HTML)
    ws.call("probe.browser_eval", expression="window.x += 1; document.getElementById('d').textContent = 'changed'")
    ws.call("probe.region_fill", mb=2, byte=0xAB)
    yield ws
    ws.destroy()


@pytest.fixture(scope="session")
def snapshot(source):
    snap = source.snapshot()
    yield snap
    snap.release()


@pytest.fixture
def clone(snapshot):
    c = snapshot.fork(1, backend="private")[0]
    yield c
    c.destroy()
