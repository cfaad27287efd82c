"""The kmod backend's snapshot preparation: anonymous private memory → copy-on-write holders of bunshin_cow.

Where /dev/bunshin_cow exists (the kernel module of kmod/, design (b) "snapshot holder"), a snapshot's
anonymous private memory is not copied into the clones at all. For each process of the snapshot, every
anonymous private VMA that has dumped pages (the same VMAs the memfile backend converts, see memfile.py)
is captured from the still-running source process with BUNSHIN_COW_CAPTURE: the module write-protects the
source's pages and keeps a reference to them in a *holder*. The CRIU images are rewritten so that the VMA
becomes a MAP_PRIVATE mapping of /dev/bunshin_cow at the holder's offset (mm: status/flags/shmid/pgoff;
files: one REG entry per VMA naming the device node in the workspace's /dev; pagemap + pages: only the
pages that differ, see below). CRIU then restores each clone by mapping the device: clones share the
source's pages, and a write in a clone (or in the source) copies only the touched page.

Capture-time vs. dump-time: the snapshot was taken with `criu dump --leave-running`, and `prepare()` runs
after the dump, so the source may have written to memory in between. The clones must see the memory as
it was at the dump, consistent with the registers and file state in the images. Therefore, after the
capture, every page of each holder is compared with what the dump recorded (the dumped page, or zeros for
a page that was not dumped); the pages that differ stay in the rewritten pagemap/pages images with their
dump-time content, and CRIU writes them over the device mapping at restore (a private copy of just those
pages in each clone). Clones thus see exactly the dump-time memory whatever the source did after the dump;
sharing is lost only for pages the source changed in between. A VMA whose capture fails (the source
unmapped or remapped it after the dump, or the process exited) stays ordinary anonymous memory restored
from the images. (Capturing in CRIU's post-dump action, while the tree is still frozen, would make the
comparison find nothing; it needs a hook in Workspace.snapshot and is an optimisation, not a correctness
requirement.)

The snapshot owns the holders through one open fd of the device (closing it releases them all;
release_backend_data does that when the snapshot is released). Clone mappings keep the pages they map
alive after the release, so clones outlive their snapshot.

Limits (design (b), kmod/README.md): never-written pages of a clone are special PTEs — GUP on them fails
(process_vm_readv, vmsplice, O_DIRECT from them); CRIU therefore cannot dump a clone restored this way
(its dump refuses non-regular file mappings): snapshot the source, not a kmod clone. /proc/PID/maps of a
clone shows /dev/bunshin_cow; a clone's RSS does not count the shared pages. MADV_DONTNEED on a
converted range refaults the holder's (snapshot-time) content instead of zeros, as with memfile.
"""
from __future__ import annotations

import bisect
import errno
import fcntl
import logging
import mmap
import os
import re
import shutil
import stat
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from .memfile import PAGE, PE_PARENT, PE_PRESENT, VMA_ANON_PRIVATE, VMA_FILE_PRIVATE, MAP_ANONYMOUS, convertible, \
    _load, _store

log = logging.getLogger("forkcore")
DEVICE = "/dev/bunshin_cow"
HOLDER_SHIFT = 40  # BUNSHIN_COW_HOLDER_SHIFT: mmap offset of holder id = id << 40
_CAPTURE_FMT = "<iIQQIIQQQ"  # struct bunshin_cow_capture
_STATS_FMT = "<QQQQ"  # struct bunshin_cow_stats


def _ioc(direction: int, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (0xB5 << 8) | nr


BUNSHIN_COW_CAPTURE = _ioc(3, 1, struct.calcsize(_CAPTURE_FMT))
BUNSHIN_COW_RELEASE = _ioc(1, 2, 4)
BUNSHIN_COW_STATS = _ioc(2, 3, struct.calcsize(_STATS_FMT))


def mmap_offset(holder: int) -> int:
    return holder << HOLDER_SHIFT


def device_stats(path: str = DEVICE) -> dict[str, int]:
    """The module's global counters: holders, pages_held, mappings, captures."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        buf = bytearray(struct.calcsize(_STATS_FMT))
        fcntl.ioctl(fd, BUNSHIN_COW_STATS, buf)
    finally:
        os.close(fd)
    return dict(zip(("holders", "pages_held", "mappings", "captures"), struct.unpack(_STATS_FMT, buf)))


@dataclass
class Capture:
    holder: int
    pages_shared: int
    pages_copied: int
    pages_zero: int


class HolderSet:
    """Holders owned by one fd of the device; close() releases them all (clone mappings stay valid)."""

    def __init__(self, path: str = DEVICE) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self.holders: list[int] = []

    def capture(self, pid: int, start: int, length: int) -> Capture:
        buf = bytearray(struct.pack(_CAPTURE_FMT, pid, 0, start, length, 0, 0, 0, 0, 0))
        fcntl.ioctl(self.fd, BUNSHIN_COW_CAPTURE, buf)
        _, _, _, _, holder, _, shared, copied, zero = struct.unpack(_CAPTURE_FMT, buf)
        self.holders.append(holder)
        return Capture(holder, shared, copied, zero)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            self.holders.clear()

    def __del__(self) -> None:  # a forgotten snapshot must not pin memory forever
        try:
            self.close()
        except OSError:
            pass


@dataclass
class KmodPrepared:
    """What prepare() leaves in snapshot.backend_data["kmod"]."""

    images: Path
    holders: HolderSet
    stats: dict = field(default_factory=dict)

    def release(self) -> None:
        self.holders.close()


# ---------------------------------------------------------------------------------------------------------------
def _source_pids(images: Path) -> dict[int, int]:
    """{pid inside the workspace (pstree.img): host pid} of the dumped tree, from CRIU's dump.log.

    CRIU logs "Dumping task (pid: HOST comm: ...)" for every task, the tree's root first. A host pid is
    accepted only if it still lives in the root's pid namespace; its namespace pid comes from NSpid.
    """
    try:
        text = (images / "dump.log").read_text(errors="replace")
    except OSError as e:
        raise RuntimeError(f"kmod: cannot read {images / 'dump.log'} to find the source processes: {e}") from e
    hosts = [int(m) for m in re.findall(r"Dumping task \(pid: (\d+) comm:", text)]
    out: dict[int, int] = {}
    if not hosts:
        return out
    try:
        ns = os.readlink(f"/proc/{hosts[0]}/ns/pid")
    except OSError:
        return out  # the source is gone: nothing to capture
    for h in hosts:
        try:
            if os.readlink(f"/proc/{h}/ns/pid") != ns:
                continue
            with open(f"/proc/{h}/status") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        out[int(line.split()[-1])] = h
                        break
        except OSError:
            continue
    return out


def _device_mnt_id(images: Path, device: str = DEVICE) -> int:
    """The mount the clones open the device on: its bind from the host (init.device_nodes)."""
    for mp in images.glob("mountpoints-*.img"):
        for m in _load(mp)["entries"]:
            if m["mountpoint"] == device:
                return m["mnt_id"]
    raise RuntimeError(f"kmod: the snapshot has no {device} mount (its source started before bunshin_cow was "
                       "loaded?): start the workspace again with the module loaded")


def _converted_vmas(vmas: list[dict], entries: list[dict]) -> list[dict]:
    """The convertible VMAs (memfile.convertible) that hold at least one dumped page, by start."""
    cand = sorted((v for v in vmas if convertible(v)), key=lambda v: v["start"])
    starts = [v["start"] for v in cand]
    chosen = {}
    for e in entries:
        if not e.get("flags", 0) & PE_PRESENT:
            continue
        a, end = e["vaddr"], e["vaddr"] + e["nr_pages"] * PAGE
        i = max(bisect.bisect_right(starts, a) - 1, 0)
        while i < len(cand) and cand[i]["start"] < end:
            if cand[i]["end"] > a:
                chosen[cand[i]["start"]] = cand[i]
            i += 1
    return sorted(chosen.values(), key=lambda v: v["start"])


def _diff_pages(view: mmap.mmap, expect: dict[int, bytes], length: int) -> list[int]:
    """Page offsets where the holder (view) differs from the dump (expect: offset → page data; absent = zeros)."""
    diff = []
    zero = bytes(PAGE * 256)
    off = 0
    keys = sorted(expect)
    k = 0
    while off < length:
        if k < len(keys) and keys[k] == off:  # a run of dumped pages
            run = off
            chunks = []
            while k < len(keys) and keys[k] == run:
                chunks.append(expect[run])
                run += PAGE
                k += 1
            data = b"".join(chunks)
            if view[off:run] != data:
                for p in range(off, run, PAGE):
                    if view[p:p + PAGE] != data[p - off:p - off + PAGE]:
                        diff.append(p)
            off = run
        else:  # a run of holes: must read as zeros
            nxt = keys[k] if k < len(keys) else length
            while off < nxt:
                b = min(nxt, off + len(zero))
                if view[off:b] != zero[:b - off]:
                    for p in range(off, b, PAGE):
                        if view[p:p + PAGE].count(0) != PAGE:
                            diff.append(p)
                off = b
    return diff


def prepare_kmod_images(snapshot, device: str = DEVICE) -> KmodPrepared:
    """Capture the snapshot's anonymous memory into holders and write snapshot.dir/images-kmod."""
    src, dst = snapshot.images, snapshot.dir / "images-kmod"
    t0 = time.monotonic()
    tmp = snapshot.dir / "images-kmod.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.mkdir()
    for f in src.iterdir():
        os.link(f, tmp / f.name)

    st = os.stat(device)
    if not stat.S_ISCHR(st.st_mode):
        raise RuntimeError(f"kmod: {device} is not a character device")
    files = _load(src / "files.img")
    next_id = max((e["id"] for e in files["entries"]), default=0) + 1
    mnt_id = _device_mnt_id(src)
    host_pids = _source_pids(src)
    holders = HolderSet(device)
    stats = {"vmas": 0, "vmas_failed": 0, "bytes": 0, "pages_shared": 0, "pages_zero": 0, "pages_copied": 0,
             "pages_differ": 0, "capture_s": 0.0, "compare_s": 0.0, "processes": 0, "failures": []}
    ro = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for proc in _load(src / "pstree.img")["entries"]:
            pid = proc["pid"]
            mm_path, pm_path = src / f"mm-{pid}.img", src / f"pagemap-{pid}.img"
            if not mm_path.exists() or not pm_path.exists() or pid not in host_pids:
                continue
            mm_img, pm_img = _load(mm_path), _load(pm_path)
            vmas = mm_img["entries"][0]["vmas"]
            head, entries = pm_img["entries"][0], pm_img["entries"][1:]
            if any(e.get("flags", 0) & PE_PARENT for e in entries):
                raise RuntimeError(f"kmod: pid {pid} has pagemap entries in a parent image (pre-dump); not supported")
            conv = _converted_vmas(vmas, entries)
            if not conv:
                continue

            # read this process's pages: {vaddr: (flags, data or None)} per page, in pagemap order
            pages_id = head["pages_id"]
            segs = []  # (vaddr, nr_pages, flags, data | None)
            with open(src / f"pages-{pages_id}.img", "rb") as pin:
                for e in entries:
                    flags = e.get("flags", 0)
                    n = e["nr_pages"] * PAGE
                    segs.append((e["vaddr"], e["nr_pages"], flags, pin.read(n) if flags & PE_PRESENT else None))

            # capture each VMA from the live source; compare with the dump
            done: dict[int, tuple[dict, list[int]]] = {}  # vma start -> (vma, differing page offsets)
            for v in conv:
                length = v["end"] - v["start"]
                t1 = time.monotonic()
                try:
                    c = holders.capture(host_pids[pid], v["start"], length)
                except OSError as e:
                    stats["vmas_failed"] += 1
                    stats["failures"].append(f"pid {pid} {v['start']:#x}+{length:#x}: {errno.errorcode.get(e.errno, e.errno)}")
                    continue
                stats["capture_s"] += time.monotonic() - t1
                t1 = time.monotonic()
                expect = {}
                for vaddr, nr, flags, data in segs:
                    if data is None:
                        continue
                    lo, hi = max(vaddr, v["start"]), min(vaddr + nr * PAGE, v["end"])
                    for a in range(lo, hi, PAGE):
                        expect[a - v["start"]] = data[a - vaddr:a - vaddr + PAGE]
                view = mmap.mmap(ro, length, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ, offset=mmap_offset(c.holder))
                try:
                    diff = _diff_pages(view, expect, length)
                finally:
                    view.close()
                stats["compare_s"] += time.monotonic() - t1
                done[v["start"]] = (v, diff)
                stats["vmas"] += 1
                stats["bytes"] += length
                stats["pages_shared"] += c.pages_shared
                stats["pages_zero"] += c.pages_zero
                stats["pages_copied"] += c.pages_copied
                stats["pages_differ"] += len(diff)
                file_id = next_id
                next_id += 1
                files["entries"].append({"type": "REG", "id": file_id, "reg": {
                    "id": file_id, "flags": os.O_RDONLY, "pos": 0,
                    "fown": {"uid": 0, "euid": 0, "signum": 0, "pid_type": 0, "pid": 0},
                    "name": DEVICE, "mnt_id": mnt_id, "mode": stat.S_IFCHR | 0o600}})  # init.py's bind
                v["status"] = (v["status"] & ~VMA_ANON_PRIVATE) | VMA_FILE_PRIVATE
                v["flags"] &= ~MAP_ANONYMOUS
                v["shmid"], v["pgoff"], v["fdflags"], v["fd"] = file_id, mmap_offset(c.holder), os.O_RDONLY, -1
            if not done:
                continue
            stats["processes"] += 1

            # pagemap/pages: everything outside converted VMAs as before; inside, only the differing pages
            cstarts = sorted(done)

            def conv_at(addr):
                i = bisect.bisect_right(cstarts, addr) - 1
                if i >= 0 and done[cstarts[i]][0]["end"] > addr:
                    return done[cstarts[i]][0]
                return None

            out = []  # (vaddr, nr_pages, flags, data | None)
            for vaddr, nr, flags, data in segs:
                end = vaddr + nr * PAGE
                a = vaddr
                while a < end:
                    v = conv_at(a)
                    if v is not None:
                        a = min(end, v["end"])  # dropped here; differing pages are added below
                        continue
                    i = bisect.bisect_right(cstarts, a)
                    b = min(end, cstarts[i]) if i < len(cstarts) else end
                    out.append((a, (b - a) // PAGE, flags, data[a - vaddr:b - vaddr] if data is not None else None))
                    a = b
            for v, diff in done.values():
                base = v["start"]
                for off in diff:
                    a = base + off
                    page = None
                    for vaddr, nr, flags, data in segs:  # few pages differ: a linear scan is fine
                        if data is not None and vaddr <= a < vaddr + nr * PAGE:
                            page = data[a - vaddr:a - vaddr + PAGE]
                            break
                    out.append((a, 1, PE_PRESENT, page if page is not None else bytes(PAGE)))
            out.sort(key=lambda s: s[0])
            pages_tmp = tmp / f"pages-{pages_id}.img.new"
            with open(pages_tmp, "wb") as pout:
                for _, _, _, data in out:
                    if data is not None:
                        pout.write(data)
            (tmp / f"pages-{pages_id}.img").unlink()
            os.rename(pages_tmp, tmp / f"pages-{pages_id}.img")
            pm_img["entries"] = [head] + [{"vaddr": a, "nr_pages": n, "flags": f} for a, n, f, _ in out]
            _store(tmp / f"pagemap-{pid}.img", pm_img)
            _store(tmp / f"mm-{pid}.img", mm_img)
        _store(tmp / "files.img", files)
        os.rename(tmp, dst)
    except BaseException:
        holders.close()
        raise
    finally:
        os.close(ro)
    stats["prepare_s"] = time.monotonic() - t0
    if not stats["vmas"]:
        log.warning("kmod: snapshot %s: no VMA captured (source processes gone or not found in dump.log; "
                    "failures: %s): clones get private copies", snapshot.id, stats["failures"][:5])
    return KmodPrepared(dst, holders, stats)
