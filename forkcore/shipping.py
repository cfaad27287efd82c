"""Snapshots moved between machines: packed into one byte string on the sender, unpacked into the receiver's
state dir as a Snapshot the receiver owns.

A parcel holds the snapshot's CRIU images and its own filesystem layer, the layers of its ancestors down to
either a snapshot the receiver already holds (`below`, e.g. the task snapshot shipped before it) or the
content-named base layers (system, code, user layers) which the receiver must have built itself: they are
named, never shipped. A restore takes every host path (overlay lowers, external mounts, root) from the
receiving Snapshot, never from the images, so the images restore unchanged in another state dir.

GNU tar moves the files: Python's tarfile drops the extended attributes overlayfs keeps in an upper dir
(`trusted.overlay.opaque`) and refuses its whiteouts (character devices 0:0). The receiver checks the
parcel's sha256, the host versions (Snapshot.verify: a parcel from a machine with other builds of what the
workspace runs never restores) and that it has the parcel's device nodes.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import memfile, paths
from .errors import SnapshotError
from .init import device_nodes
from .spec import WorkspaceSpec
from .workspace import Snapshot

__all__ = ["SnapshotParcel", "pack_snapshot", "unpack_snapshot"]

#: the files of a snapshot dir a restore needs (not prepared backend images, nor owner.pid)
_SNAPSHOT_FILES = ("images", "layer", "manifest.json", "host_versions.json")
_TAR = ("tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "--acls")


@dataclass
class SnapshotParcel:
    """A packed snapshot (picklable: it travels as a Ray object, or over any byte channel)."""

    data: bytes  #: GNU tar of the snapshot dir and its ancestors' layers
    sha256: str
    source_id: str
    ancestors: tuple[str, ...]  #: the layers shipped below its own (ID/layer under snapshots/), top first
    base_layers: tuple[str, ...] | None  #: names of the receiver's layers to stack below (None: `below`'s)
    spec: dict  #: the workspace spec with its layers as names (the receiver's spec must match)
    dev_nodes: tuple[str, ...]
    dump_s: float
    meta: dict = field(default_factory=dict)  #: for the caller (e.g. what the receiving env needs)

    @property
    def nbytes(self) -> int:
        return len(self.data)


def _portable_spec(spec: WorkspaceSpec) -> dict:
    d = json.loads(spec.to_json())
    d["layers"] = [Path(p).name for p in d["layers"]]
    return d


def _snapshot_layer(layer: Path) -> str | None:
    """`layer` relative to STATE_DIR/snapshots if it is a snapshot's layer (ID/layer, or ID/layer-N of a
    received one), else None."""
    if layer.name.startswith("layer") and layer.parent.parent == paths.STATE_DIR / "snapshots":
        return f"{layer.parent.name}/{layer.name}"
    return None


def pack_snapshot(snap: Snapshot, below: Snapshot | None = None) -> SnapshotParcel:
    """Pack `snap` for another machine. With `below` (an ancestor the receiver holds), only the layers above
    `below`'s are shipped; without it, every snapshot layer is, and the base layers are named.

    Raises SnapshotError: released snapshot, `below` not an ancestor, memfile pages in its lineage (they live
    in this machine's shared memory: restore such a workspace with another backend before shipping it).
    """
    if snap.released:
        raise SnapshotError(f"snapshot {snap.id} was released; it cannot be shipped")
    lineage = memfile.lineage_dir(snap.id)
    if lineage.is_dir() and any(lineage.iterdir()):
        raise SnapshotError(f"snapshot {snap.id} maps memfile pages of its ancestors ({lineage}), which stay in this "
                            "machine's shared memory; ship a snapshot of a workspace restored with another backend")
    lowers = list(snap.lowers)
    if below is not None:
        n = len(below.lowers)
        if lowers[len(lowers) - n:] != list(below.lowers) or len(lowers) <= n:
            raise SnapshotError(f"snapshot {below.id} is not an ancestor of snapshot {snap.id}; cannot ship above it")
        own, base = lowers[:len(lowers) - n], None
    else:
        k = next((i for i, p in enumerate(lowers) if _snapshot_layer(p) is None), len(lowers))
        own, base = lowers[:k], tuple(p.name for p in lowers[k:])
        if any(_snapshot_layer(p) for p in lowers[k:]):
            raise SnapshotError(f"snapshot {snap.id}: its snapshot layers are not all above its base layers")
    if own[0] != snap.dir / "layer" or any(_snapshot_layer(p) is None for p in own):
        raise SnapshotError(f"snapshot {snap.id}: its layers {own} are not snapshot layers in {paths.STATE_DIR}")
    ancestors = tuple(_snapshot_layer(p) for p in own[1:])
    members = [f"{snap.id}/{f}" for f in _SNAPSHOT_FILES] + list(ancestors)
    snap.retain()  # its files stay while tar reads them
    try:
        r = subprocess.run([*_TAR, "-C", str(paths.STATE_DIR / "snapshots"), "-cf", "-", *members],
                           capture_output=True, timeout=600)
    finally:
        snap.release()
    if r.returncode != 0:
        raise SnapshotError(f"packing snapshot {snap.id} failed: tar exit {r.returncode}: "
                            f"{r.stderr.decode(errors='replace')[-500:]}")
    return SnapshotParcel(r.stdout, hashlib.sha256(r.stdout).hexdigest(), snap.id, ancestors, base,
                          _portable_spec(snap.spec), snap.dev_nodes, snap.dump_s)


def unpack_snapshot(parcel: SnapshotParcel, spec: WorkspaceSpec, *, base_lowers: list[Path] | None = None,
                    below: Snapshot | None = None) -> Snapshot:
    """The parcel as a Snapshot of this machine (a new id in STATE_DIR/snapshots; the caller holds its one
    reference). Stack it on `below` (the receiver's copy of the ancestor it was packed above) or on
    `base_lowers` (the receiver's base layers, in the order a workspace of `spec` stacks them).

    Raises SnapshotError: damaged in transit, another workspace spec or other base layers, device nodes this
    machine lacks, other host versions, or this state dir is full.
    """
    if hashlib.sha256(parcel.data).hexdigest() != parcel.sha256:
        raise SnapshotError(f"parcel of snapshot {parcel.source_id} is damaged (sha256 differs); ship it again")
    if _portable_spec(spec) != parcel.spec:
        raise SnapshotError(f"parcel of snapshot {parcel.source_id} is of another workspace spec than "
                            f"{spec.name!r} here (a different version of the env's code or settings)")
    missing = sorted(set(parcel.dev_nodes) - set(device_nodes()))
    if missing:
        raise SnapshotError(f"parcel of snapshot {parcel.source_id} needs /dev/{', /dev/'.join(missing)}, "
                            "which this machine's workspaces do not get")
    if (below is None) == (parcel.base_layers is None):
        raise SnapshotError(f"parcel of snapshot {parcel.source_id} was packed "
                            f"{'on base layers' if parcel.base_layers is not None else 'above an ancestor'}: "
                            f"unpack it with {'base_lowers' if parcel.base_layers is not None else 'below'}")
    if parcel.base_layers is not None:
        base = list(base_lowers or [])
        if tuple(p.name for p in base) != parcel.base_layers:
            raise SnapshotError(f"parcel of snapshot {parcel.source_id} stacks on layers {list(parcel.base_layers)}, "
                                f"this machine has {[p.name for p in base]}: build the same env version here")
    else:
        base = list(below.lowers)
    root = paths.STATE_DIR / "snapshots"
    root.mkdir(parents=True, exist_ok=True)
    snap_id = uuid.uuid4().hex[:12]
    final = root / snap_id
    tmp = Path(tempfile.mkdtemp(prefix=f".recv-{snap_id}.", dir=root))
    try:
        r = subprocess.run([*_TAR, "--same-permissions", "--same-owner", "-C", str(tmp), "-xf", "-"],
                           input=parcel.data, capture_output=True, timeout=600)
        if r.returncode != 0:
            raise SnapshotError(f"unpacking snapshot {parcel.source_id} into {root} failed: tar exit "
                                f"{r.returncode}: {r.stderr.decode(errors='replace')[-500:]}")
        os.rename(tmp / parcel.source_id, final)
        own = [final / "layer"]
        for i, anc in enumerate(parcel.ancestors, 1):
            os.rename(tmp / anc, final / f"layer-{i}")
            own.append(final / f"layer-{i}")
        (final / "owner.pid").write_text(str(os.getpid()))
    except OSError as e:
        shutil.rmtree(final, ignore_errors=True)
        raise SnapshotError(f"unpacking snapshot {parcel.source_id} into {root} failed: {e}") from e
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    snap = Snapshot(snap_id, final, spec, own + base, parent=below, dump_s=parcel.dump_s,
                    dev_nodes=parcel.dev_nodes)
    try:
        snap.verify()
    except BaseException:
        snap.release()
        raise
    return snap
