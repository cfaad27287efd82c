"""Snapshots moved between machines: packed into one byte string on the sender, unpacked into the receiver's
state dir as Snapshots the receiver owns.

A parcel holds one or more snapshots of one lineage, each with its CRIU images and its own filesystem layer.
The first stacks on the content-named base layers (system, code, user layers), which the receiver must have
built itself: they are named, never shipped; the layers of its snapshot ancestors travel with it. Each later
one stacks on an earlier one of the parcel (its nearest ancestor there), with the layers in between. A restore
takes every host path (overlay lowers, external mounts, root) from the receiving Snapshot, never from the
images, so the images restore unchanged in another state dir.

GNU tar moves the files: Python's tarfile drops the extended attributes overlayfs keeps in an upper dir
(`trusted.overlay.opaque`) and refuses its whiteouts (character devices 0:0). zstd with long-distance matching
compresses the stream: memory pages repeat across the snapshots of one lineage (a task snapshot and a state
dumped a few steps later share most pages), measured on a WebArena task snapshot + live state: 874 MB → 61 MB.
The receiver checks the parcel's sha256, the spec, the host versions (Snapshot.verify: a parcel from a machine
with other builds of what the workspace runs never restores) and that it has the parcel's device nodes.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from . import memfile, paths
from .errors import SnapshotError
from .init import device_nodes
from .spec import WorkspaceSpec
from .workspace import Snapshot

__all__ = ["SnapshotParcel", "pack_snapshots", "unpack_snapshots"]

#: the files of a snapshot dir a restore needs (not prepared backend images, nor owner.pid)
_SNAPSHOT_FILES = ("images", "layer", "manifest.json", "host_versions.json")
_TAR = ("tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "--acls")
#: a 1 GiB window: a lineage's repeated pages are found across a whole parcel of that size
_ZSTD_LONG = "--long=30"


@dataclass
class SnapshotParcel:
    """Packed snapshots (picklable: it travels as a Ray object, or over any byte channel)."""

    data: bytes  #: zstd-compressed GNU tar of the snapshot dirs and their ancestors' layers
    sha256: str
    entries: list[dict]  #: per snapshot: source_id, layers (shipped below its own), below, dev_nodes, dump_s
    base_layers: tuple[str, ...]  #: names of the receiver's layers the first snapshot stacks on
    spec: dict  #: the workspace spec with its layers as names (the receiver's spec must match)
    raw_bytes: int  #: the tar's size before compression (0: tar did not say)

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


def _entry(snap: Snapshot, earlier: Sequence[Snapshot]) -> tuple[dict, tuple[str, ...]]:
    """What `snap` ships (its layers above its nearest ancestor in `earlier`, else above the base layers) and
    the base layer names it stacks on."""
    if snap.released:
        raise SnapshotError(f"snapshot {snap.id} was released; it cannot be shipped")
    lineage = memfile.lineage_dir(snap.id)
    if lineage.is_dir() and any(lineage.iterdir()):
        raise SnapshotError(f"snapshot {snap.id} maps memfile pages of its ancestors ({lineage}), which stay in this "
                            "machine's shared memory; ship a snapshot of a workspace restored with another backend")
    lowers = list(snap.lowers)
    below = next((i for i in range(len(earlier) - 1, -1, -1) if len(earlier[i].lowers) < len(lowers)
                  and lowers[len(lowers) - len(earlier[i].lowers):] == list(earlier[i].lowers)), None)
    if below is not None:
        own, base = lowers[:len(lowers) - len(earlier[below].lowers)], ()
    else:
        k = next((i for i, p in enumerate(lowers) if _snapshot_layer(p) is None), len(lowers))
        own, base = lowers[:k], tuple(p.name for p in lowers[k:])
        if any(_snapshot_layer(p) for p in lowers[k:]):
            raise SnapshotError(f"snapshot {snap.id}: its snapshot layers are not all above its base layers")
    if own[0] != snap.dir / "layer" or any(_snapshot_layer(p) is None for p in own):
        raise SnapshotError(f"snapshot {snap.id}: its layers {own} are not snapshot layers in {paths.STATE_DIR}")
    return ({"source_id": snap.id, "layers": [_snapshot_layer(p) for p in own[1:]], "below": below,
             "dev_nodes": list(snap.dev_nodes), "dump_s": snap.dump_s}, base)


def pack_snapshots(snaps: Sequence[Snapshot]) -> SnapshotParcel:
    """Pack snapshots of one lineage for another machine, ancestors first: the first on the base layers, each
    later one above its nearest ancestor among the earlier ones (see the module doc).

    Raises SnapshotError: a released snapshot, a later one not descending from an earlier one or of another
    workspace spec, memfile pages in a lineage (they live in this machine's shared memory: restore such a workspace
    with another backend before shipping it), tar or zstd failing.
    """
    if not snaps:
        raise ValueError("pack_snapshots(): no snapshot given")
    entries, base_layers = [], None
    for i, snap in enumerate(snaps):
        entry, base = _entry(snap, snaps[:i])
        if i == 0:
            base_layers = base
        elif entry["below"] is None:
            raise SnapshotError(f"snapshot {snap.id} does not descend from an earlier snapshot of the parcel")
        if _portable_spec(snap.spec) != _portable_spec(snaps[0].spec):
            raise SnapshotError(f"snapshot {snap.id} is of another workspace spec than snapshot {snaps[0].id}")
        entries.append(entry)
    members = list(dict.fromkeys(
        [f"{e['source_id']}/{f}" for e in entries for f in _SNAPSHOT_FILES] + [m for e in entries for m in e["layers"]]))
    for s in snaps:
        s.retain()  # their files stay while tar reads them
    try:  # tar | zstd, side by side; tar's messages to a file (a full pipe would stall it)
        with tempfile.TemporaryFile() as t_log:
            t = subprocess.Popen([*_TAR, "--totals", "-C", str(paths.STATE_DIR / "snapshots"), "-cf", "-", *members],
                                 stdout=subprocess.PIPE, stderr=t_log)
            z = subprocess.Popen(["zstd", "-1", "-T0", _ZSTD_LONG, "-q", "-c"], stdin=t.stdout,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            t.stdout.close()
            data, z_err = z.communicate(timeout=600)
            t.wait(timeout=60)
            t_log.seek(0)
            t_err = t_log.read()
    finally:
        for s in snaps:
            s.release()
    if t.returncode or z.returncode:
        raise SnapshotError(f"packing snapshots {[s.id for s in snaps]} failed: tar exit {t.returncode}, zstd exit "
                            f"{z.returncode}: {(t_err + z_err).decode(errors='replace')[-500:]}")
    raw = re.search(rb"Total bytes written: (\d+)", t_err)
    return SnapshotParcel(data, hashlib.sha256(data).hexdigest(), entries, base_layers, _portable_spec(snaps[0].spec),
                          int(raw.group(1)) if raw else 0)


def unpack_snapshots(parcel: SnapshotParcel, spec: WorkspaceSpec, base_lowers: Sequence[Path]) -> list[Snapshot]:
    """The parcel's snapshots as Snapshots of this machine (new ids in STATE_DIR/snapshots; the caller holds one
    reference to each), the first stacked on `base_lowers` (this machine's base layers, in the order a
    workspace of `spec` stacks them: `forkcore.layers.stack`).

    Raises SnapshotError: damaged in transit, another workspace spec or other base layers, device nodes this
    machine lacks, other host versions, or this state dir is full. Nothing of a refused parcel stays.
    """
    name = f"parcel of snapshots {[e['source_id'] for e in parcel.entries]}"
    if hashlib.sha256(parcel.data).hexdigest() != parcel.sha256:
        raise SnapshotError(f"{name} is damaged (sha256 differs); ship it again")
    if _portable_spec(spec) != parcel.spec:
        raise SnapshotError(f"{name} is of another workspace spec than {spec.name!r} here (a different version "
                            "of the env's code or settings)")
    missing = sorted({d for e in parcel.entries for d in e["dev_nodes"]} - set(device_nodes()))
    if missing:
        raise SnapshotError(f"{name} needs /dev/{', /dev/'.join(missing)}, which this machine's workspaces do not get")
    if tuple(p.name for p in base_lowers) != tuple(parcel.base_layers):
        raise SnapshotError(f"{name} stacks on layers {list(parcel.base_layers)}, this machine has "
                            f"{[p.name for p in base_lowers]}: build the same env version here")
    root = paths.STATE_DIR / "snapshots"
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".recv-", dir=root))
    placed: list[tuple[str, Path, list[Path]]] = []  # (new id, dir, own layers)
    out: list[Snapshot] = []
    try:
        z = subprocess.Popen(["zstd", "-d", _ZSTD_LONG, "-q", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        t = subprocess.Popen([*_TAR, "--same-permissions", "--same-owner", "-C", str(tmp), "-xf", "-"],
                             stdin=z.stdout, stderr=subprocess.PIPE)
        z.stdout.close()
        _, z_err = z.communicate(parcel.data, timeout=600)
        _, t_err = t.communicate(timeout=600)
        if z.returncode or t.returncode:
            raise SnapshotError(f"unpacking {name} into {root} failed: zstd exit {z.returncode}, tar exit "
                                f"{t.returncode}: {(z_err + t_err).decode(errors='replace')[-500:]}")
        for e in parcel.entries:
            snap_id = uuid.uuid4().hex[:12]
            final = root / snap_id
            os.rename(tmp / e["source_id"], final)
            placed.append((snap_id, final, [final / "layer"]))
            (final / "owner.pid").write_text(str(os.getpid()))
        moved: dict[str, Path] = {}
        for (snap_id, final, own), e in zip(placed, parcel.entries):
            for i, rel in enumerate(e["layers"], 1):
                dst = final / f"layer-{i}"
                if rel in moved:  # an ancestor two snapshots of the parcel share: each dir owns its copy
                    subprocess.run(["cp", "-a", "--reflink=auto", str(moved[rel]), str(dst)], check=True,
                                   capture_output=True)
                else:
                    os.rename(tmp / rel, dst)
                    moved[rel] = dst
                own.append(dst)
        for (snap_id, final, own), e in zip(placed, parcel.entries):
            below = out[e["below"]] if e["below"] is not None else None
            snap = Snapshot(snap_id, final, spec, own + (list(below.lowers) if below else list(base_lowers)),
                            parent=below, dump_s=e["dump_s"], dev_nodes=e["dev_nodes"])
            out.append(snap)
            snap.verify()
    except BaseException as e:
        for s in out:
            s.release()
        for _, final, _ in placed:
            shutil.rmtree(final, ignore_errors=True)
        if isinstance(e, OSError):
            raise SnapshotError(f"unpacking {name} into {root} failed: {e}") from e
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
