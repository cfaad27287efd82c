"""KSM for honest baselines: read KSM's sysfs state, switch it off for a leg, put it back afterwards, and keep
private-backend clones out of it.

Why: `WorkspaceSpec.ksm_mergeable` (default True) makes a workspace's init call PR_SET_MEMORY_MERGE, so every
VMA of the source is VM_MERGEABLE ("mg" in /proc/PID/smaps VmFlags); CRIU records that per VMA (`madv` bit
MADV_MERGEABLE in mm-PID.img) and madvise()s it again on restore. A "private" clone restored from those images is
mergeable too, and once any ksm use set /sys/kernel/mm/ksm/run to 1 it stays 1: private clones were being merged,
and every baseline understated what private costs.

- `prepare_unmergeable_images(snapshot)`: the private backend's images: a copy of the snapshot's images (hard
  links) whose mm-PID.img have MADV_MERGEABLE cleared, so a private clone has no mergeable VMA (and, unlike the ksm
  backend, CRIU runs without PR_SET_MEMORY_MERGE, so none it maps is mergeable either).
- `ksm_state()`: KSM's sysfs counters and settings as a dict (empty where the kernel has no KSM).
- `ksm_off()` / `ksm_restored()`: context managers for a benchmark's legs; both put back run, pages_to_scan and
  sleep_millisecs as they were on entry, exceptions included. `ksm_off` first writes run=2 (unmerge every merged
  page), waits for it, then run=0, and samples `pages_sharing` whenever asked (`KsmLeg.sample`), so a leg can
  prove KSM shared nothing during it.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Iterator

KSM_DIR = Path("/sys/kernel/mm/ksm")
#: what ksm_state() reads; the last three are settings that ksm_off()/ksm_restored() put back
STATE_FILES = ("run", "pages_sharing", "pages_shared", "pages_unshared", "full_scans", "pages_to_scan",
               "sleep_millisecs")
SETTINGS = ("pages_to_scan", "sleep_millisecs", "run")  # run last: restoring it starts ksmd with the old rate
MADV_MERGEABLE = 12
log = logging.getLogger("forkcore.ksm")


def ksm_state(ksm_dir: Path | None = None) -> dict[str, int]:
    """{name: int} for each file of STATE_FILES that this kernel has ({} without CONFIG_KSM)."""
    d = ksm_dir or KSM_DIR
    out = {}
    for name in STATE_FILES:
        try:
            out[name] = int((d / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


class KsmLeg:
    """What one leg saw of KSM: `sample()` at the leg's memory samples; `record()` is the JSON's `ksm` entry."""

    def __init__(self, mode: str, ksm_dir: Path) -> None:
        self.mode, self.dir = mode, ksm_dir
        self.before = ksm_state(ksm_dir)
        self.samples: list[int] = []
        self.restored_to: dict[str, int] | None = None
        self.error: str | None = None

    def sample(self) -> int | None:
        """Read pages_sharing now (None without KSM) and keep it."""
        v = ksm_state(self.dir).get("pages_sharing")
        if v is not None:
            self.samples.append(v)
        return v

    def record(self) -> dict:
        return {"mode": self.mode, "available": bool(self.before),
                "run_before": self.before.get("run"), "pages_sharing_before": self.before.get("pages_sharing"),
                "pages_sharing_max": max(self.samples) if self.samples else None,
                "pages_sharing_last": self.samples[-1] if self.samples else None, "samples": len(self.samples),
                "ksm_restored_to": self.restored_to, **({"error": self.error} if self.error else {})}


def _write(d: Path, name: str, value: int) -> None:
    (d / name).write_text(str(value))


def _restore(leg: KsmLeg) -> None:
    for name in SETTINGS:
        if name in leg.before:
            try:
                _write(leg.dir, name, leg.before[name])
            except OSError as e:
                log.warning("ksm: could not put %s back to %s: %s", name, leg.before[name], e)
    now = ksm_state(leg.dir)
    leg.restored_to = {k: now[k] for k in SETTINGS if k in now}


def _unmerge_all(d: Path, timeout_s: float) -> None:
    """run=2 (ksmd unmerges every merged page; the write returns when it is done, or fails with EINTR/ENOMEM),
    then run=0. Waits up to timeout_s for pages_sharing to read 0."""
    try:
        _write(d, "run", 2)
    except OSError as e:
        log.warning("ksm: run=2 failed (%s); switching off without unmerging everything", e)
    deadline = time.monotonic() + timeout_s
    while ksm_state(d).get("pages_sharing", 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    _write(d, "run", 0)


@contextlib.contextmanager
def ksm_off(ksm_dir: Path | None = None, unmerge_timeout_s: float = 60.0) -> Iterator[KsmLeg]:
    """KSM off for a private leg: run=2 (unmerge everything), then run=0; the previous settings come back on exit
    (exceptions too). Where KSM is absent or not writable the leg runs as it is and `record()` says why."""
    leg = KsmLeg("off", ksm_dir or KSM_DIR)
    if not leg.before:
        leg.error = "no KSM on this kernel"
        yield leg
        return
    try:
        _unmerge_all(leg.dir, unmerge_timeout_s)
    except OSError as e:
        leg.error = f"could not switch KSM off: {e}"
        log.warning("ksm: %s", leg.error)
    try:
        leg.sample()
        yield leg
    finally:
        _restore(leg)


@contextlib.contextmanager
def ksm_restored(ksm_dir: Path | None = None) -> Iterator[KsmLeg]:
    """For a sharing leg (the ksm backend turns KSM on, backends.enable_ksm): samples as ksm_off's leg does and
    puts run, pages_to_scan and sleep_millisecs back as they were on entry (exceptions too)."""
    leg = KsmLeg("as-is", ksm_dir or KSM_DIR)
    try:
        yield leg
    finally:
        if leg.before:
            _restore(leg)


def mergeable_vmas(pid: int) -> tuple[int, int]:
    """(VMAs with "mg" in their VmFlags, all VMAs) of a process, from /proc/PID/smaps."""
    n = total = 0
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if line.startswith("VmFlags:"):
                total += 1
                n += "mg" in line.split()[1:]
    return n, total


def prepare_unmergeable_images(snapshot) -> Path:
    """snapshot.dir/images-private: the snapshot's images (hard links) with MADV_MERGEABLE cleared in every VMA of
    every mm-PID.img; returns snapshot.images itself when no VMA is mergeable. Idempotent per snapshot."""
    from .memfile import _load, _store

    src, dst = snapshot.images, snapshot.dir / "images-private"
    if dst.is_dir():
        return dst
    bit = 1 << MADV_MERGEABLE
    rewritten = {}
    for mm_path in sorted(src.glob("mm-*.img")):
        img = _load(mm_path)
        hits = 0
        for entry in img["entries"]:
            for vma in entry.get("vmas", ()):
                if vma.get("madv", 0) & bit:
                    vma["madv"] &= ~bit
                    hits += 1
        if hits:
            rewritten[mm_path.name] = img
    if not rewritten:
        return src
    tmp = snapshot.dir / "images-private.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for f in src.iterdir():
        os.link(f, tmp / f.name)
    for name, img in rewritten.items():
        _store(tmp / name, img)  # unlinks the hard link first: the dumped image stays as it was
    os.replace(tmp, dst)
    return dst
