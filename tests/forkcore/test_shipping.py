"""Snapshots shipped to another machine (forkcore.shipping): the receiver, a separate process with its own state
dir and shared memory dir as a cluster node has, restores a clone that continues from the sender's state; a
damaged or mismatched parcel never restores."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from forkcore import SnapshotError
from forkcore.shipping import pack_snapshots, unpack_snapshots

pytestmark = [pytest.mark.criu]

# The receiving node: builds its own base layers, unpacks the parcel (the base snapshot and the top above it) on
# them, restores a clone of the top and reports what the clone holds.
_RECEIVER = """
import json, pickle, sys
from forkcore import layers
from forkcore.probe import probe_spec
from forkcore.shipping import unpack_snapshots
parcel = pickle.load(sys.stdin.buffer)
spec = probe_spec("fctest", hold_mb=32)
base, top = unpack_snapshots(parcel, spec, layers.stack(spec.layers))
assert top.parent is base and top.lowers[1:] == base.lowers
base.release()  # the top holds it
ws = top.fork(1, backend="private")[0]
top.release()
try:
    out = {"counter": ws.call("probe.counter"), "x": ws.call("probe.browser_eval", expression="window.x"),
           "text": ws.call("probe.browser_eval", expression="document.getElementById('d').textContent"),
           "file": ws.exec(["cat", "/root/shipped.txt"])["stdout"], "echo": ws.call("probe.tcp_roundtrip", message="hi"),
           "state_dir": str(ws.dir.parents[1])}
    ws.call("probe.counter", inc=True)
    ws.exec(["sh", "-c", "echo receiver > /root/shipped.txt"])
finally:
    ws.destroy()
print(json.dumps(out))
"""


def _receiver_env(tmp_path) -> dict:
    return dict(os.environ, BUNSHIN_STATE_DIR=str(tmp_path / "node-b"), BUNSHIN_SHM_DIR=str(tmp_path / "node-b-shm"))


def test_shipped_snapshot_restores_on_another_node_in_the_senders_state(snapshot, tmp_path):
    clone = snapshot.fork(1, backend="private")[0]
    try:
        clone.call("probe.counter", inc=True)  # 3, in the counter service's memory
        clone.exec(["sh", "-c", "echo sender > /root/shipped.txt"])
        top = clone.snapshot()
    finally:
        clone.destroy()
    try:
        parcel = pack_snapshots([snapshot, top])
        assert [e["below"] for e in parcel.entries] == [None, 0] and parcel.entries[1]["layers"] == []
        assert parcel.nbytes < parcel.raw_bytes / 2  # the two share most pages
        r = subprocess.run([sys.executable, "-c", _RECEIVER], input=pickle.dumps(parcel), capture_output=True,
                           env=_receiver_env(tmp_path), timeout=300)
        assert r.returncode == 0, r.stderr.decode()[-3000:]
        got = json.loads(r.stdout.decode().splitlines()[-1])
        assert got["state_dir"] == str(tmp_path / "node-b")
        assert got["counter"] == 3 and got["x"] == 42 and got["text"] == "changed"
        assert got["file"] == "sender\n" and got["echo"] == "hi"
        # what the receiver's clone did stays there
        check = top.fork(1, backend="private")[0]
        try:
            assert check.call("probe.counter") == 3
            assert check.exec(["cat", "/root/shipped.txt"])["stdout"] == "sender\n"
        finally:
            check.destroy()
    finally:
        top.release()
    assert not any((tmp_path / "node-b" / "snapshots").iterdir()), "the receiver left snapshot files behind"


def test_a_lineage_ships_with_its_ancestors_layers_and_siblings_share_them():
    """[base, a, b] where a and b both descend from a state r that is not shipped: r's layer goes once and each
    unpacked snapshot owns a copy; b restores with r's and its own changes. (A browser-less probe: three dumps
    in a row of the session's Chromium once caught an open /proc/PID/task/TID/status, which CRIU restores
    before that thread exists.)"""
    from forkcore import Workspace, layers
    from forkcore.probe import probe_spec

    src = Workspace.start(probe_spec("fctest", hold_mb=32))
    try:
        src.call("probe.counter", inc=True)
        snapshot = src.snapshot()
    finally:
        src.destroy()

    def child(parent, cmd):
        ws = parent.fork(1, backend="private")[0]
        try:
            ws.exec(["sh", "-c", cmd])
            return ws.snapshot()
        finally:
            ws.destroy()

    r = child(snapshot, "echo r > /root/r.txt")
    a, b = child(r, "echo a > /root/ab.txt"), child(r, "echo b > /root/ab.txt")
    try:
        alone = pack_snapshots([b])  # on the base layers: r's and the session snapshot's layers travel with it
        assert len(alone.entries[0]["layers"]) == 2 and alone.base_layers == tuple(p.name for p in snapshot.lowers[1:])
        with pytest.raises(SnapshotError, match="does not descend"):
            pack_snapshots([a, snapshot])
        parcel = pack_snapshots([snapshot, a, b])
        assert [e["below"] for e in parcel.entries] == [None, 0, 0]
        spec = probe_spec("fctest", hold_mb=32)
        got = unpack_snapshots(parcel, spec, layers.stack(spec.layers))
        try:
            assert got[2].lowers[1] != got[1].lowers[1] and got[2].lowers[1].name == "layer-1"
            ws = got[2].fork(1, backend="private")[0]
            assert ws.exec(["cat", "/root/r.txt", "/root/ab.txt"])["stdout"] == "r\nb\n"
            assert ws.call("probe.counter") == 1
            ws.destroy()
        finally:
            for s in got:
                s.release()
    finally:
        for s in (a, b, r, snapshot):
            s.release()


def test_damaged_or_mismatched_parcels_never_restore(snapshot):
    from forkcore import layers
    from forkcore.probe import probe_spec

    spec = probe_spec("fctest", hold_mb=32)
    base = layers.stack(spec.layers)
    parcel = pack_snapshots([snapshot])
    before = set(os.listdir(snapshot.dir.parent))
    damaged = pickle.loads(pickle.dumps(parcel))
    damaged.data = damaged.data[:-1] + bytes([damaged.data[-1] ^ 1])
    with pytest.raises(SnapshotError, match="damaged"):
        unpack_snapshots(damaged, spec, base)
    with pytest.raises(SnapshotError, match="another workspace spec"):
        unpack_snapshots(parcel, probe_spec("fctest", hold_mb=64), base)
    with pytest.raises(SnapshotError, match="stacks on layers"):
        unpack_snapshots(parcel, spec, base[:1])
    other = pickle.loads(pickle.dumps(parcel))
    other.data = _with_other_host_versions(parcel)
    other.sha256 = __import__("hashlib").sha256(other.data).hexdigest()
    with pytest.raises(SnapshotError, match="other versions"):
        unpack_snapshots(other, spec, base)
    assert set(os.listdir(snapshot.dir.parent)) == before, "a refused parcel left files in the state dir"
    # and a good one still unpacks and restores after them
    (got,) = unpack_snapshots(parcel, spec, base)
    try:
        ws = got.fork(1, backend="private")[0]
        assert ws.call("probe.counter") == 2
        ws.destroy()
    finally:
        got.release()


def _with_other_host_versions(parcel) -> bytes:
    """The parcel's tar with its manifest saying another kernel/CRIU/package set dumped it."""
    import io
    import tarfile

    raw = subprocess.run(["zstd", "-d", "--long=30", "-q", "-c"], input=parcel.data, capture_output=True, check=True)
    src = tarfile.open(fileobj=io.BytesIO(raw.stdout))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in src.getmembers():
            f = src.extractfile(m) if m.isfile() else None
            if m.name.endswith("/manifest.json"):
                d = json.loads(f.read())
                d["host_versions"] = "0" * len(d["host_versions"])
                data = json.dumps(d).encode()
                m.size = len(data)
                f = io.BytesIO(data)
            dst.addfile(m, f)
    return subprocess.run(["zstd", "-1", "--long=30", "-q", "-c"], input=out.getvalue(), capture_output=True,
                          check=True).stdout
