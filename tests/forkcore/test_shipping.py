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
from forkcore.shipping import pack_snapshot, unpack_snapshot

pytestmark = [pytest.mark.criu]

# The receiving node: builds its own base layers, unpacks the base parcel on them and the top parcel above it,
# restores a clone of the top and reports what the clone holds.
_RECEIVER = """
import json, pickle, sys
from forkcore import layers
from forkcore.probe import probe_spec
from forkcore.shipping import unpack_snapshot
base_parcel, top_parcel = pickle.load(sys.stdin.buffer)
spec = probe_spec("fctest", hold_mb=32)
base = unpack_snapshot(base_parcel, spec, base_lowers=layers.stack(spec.layers))
top = unpack_snapshot(top_parcel, spec, below=base)
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
        parcels = (pack_snapshot(snapshot), pack_snapshot(top, below=snapshot))
        assert parcels[1].ancestors == () and parcels[0].base_layers is not None
        r = subprocess.run([sys.executable, "-c", _RECEIVER], input=pickle.dumps(parcels), capture_output=True,
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


def test_a_whole_lineage_ships_without_an_ancestor_on_the_receiver(snapshot):
    clone = snapshot.fork(1, backend="private")[0]
    try:
        top = clone.snapshot()
    finally:
        clone.destroy()
    try:
        parcel = pack_snapshot(top)
        assert len(parcel.ancestors) == 1 and parcel.base_layers == tuple(p.name for p in snapshot.lowers[1:])
    finally:
        top.release()


def test_damaged_or_mismatched_parcels_never_restore(snapshot):
    from forkcore import layers
    from forkcore.probe import probe_spec

    spec = probe_spec("fctest", hold_mb=32)
    base = layers.stack(spec.layers)
    parcel = pack_snapshot(snapshot)
    before = set(os.listdir(snapshot.dir.parent))
    damaged = pickle.loads(pickle.dumps(parcel))
    damaged.data = damaged.data[:-1] + bytes([damaged.data[-1] ^ 1])
    with pytest.raises(SnapshotError, match="damaged"):
        unpack_snapshot(damaged, spec, base_lowers=base)
    with pytest.raises(SnapshotError, match="another workspace spec"):
        unpack_snapshot(parcel, probe_spec("fctest", hold_mb=64), base_lowers=base)
    with pytest.raises(SnapshotError, match="stacks on layers"):
        unpack_snapshot(parcel, spec, base_lowers=base[:1])
    with pytest.raises(SnapshotError, match="unpack it with base_lowers"):
        unpack_snapshot(parcel, spec, below=snapshot)
    other = pickle.loads(pickle.dumps(parcel))
    other.data = _with_other_host_versions(parcel)
    other.sha256 = __import__("hashlib").sha256(other.data).hexdigest()
    with pytest.raises(SnapshotError, match="other versions"):
        unpack_snapshot(other, spec, base_lowers=base)
    assert set(os.listdir(snapshot.dir.parent)) == before, "a refused parcel left files in the state dir"
    # and a good one still unpacks and restores after them
    got = unpack_snapshot(parcel, spec, base_lowers=base)
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

    src = tarfile.open(fileobj=io.BytesIO(parcel.data))
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
    return out.getvalue()
