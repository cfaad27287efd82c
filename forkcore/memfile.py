"""The memfile backend's image rewrite: anonymous private memory → private mappings of shared tmpfs files.

For each process of a snapshot, every anonymous private VMA that has dumped pages (and is none of the
special kinds below) becomes a MAP_PRIVATE mapping of one file under SHM_DIR/<snapshot id>/, which every
workspace sees read-only at /opt/bunshin/mem. The file holds the dumped pages at (vaddr - vma start);
holes read as zero. The CRIU images are rewritten accordingly (mm: the VMA's status/flags/shmid; files:
a REG entry per file; pagemap + pages: the converted ranges removed). CRIU then restores each clone by
mapping the files instead of copying pages: the clones share the page cache, and a clone's write copies
only the touched page.

Caveats (tested in tests/forkcore): after MADV_DONTNEED a private file page refaults with the file's
content instead of zeros; MADV_FREE/MADV_WIPEONFORK are rejected on file mappings. Code relying on
zero-after-DONTNEED (some allocators' calloc) may read stale data — use the ksm or private backend
for such workloads. The rewritten images live beside the originals; the memfiles are deleted with the
snapshot.

Lineage views. A hardened workspace does not see SHM_DIR: /opt/bunshin/mem is bound from its own view,
SHM_DIR/.views/<workspace id>, which holds hard links (the same inodes: the page cache stays shared) to the
memfiles its lineage may map and nothing else. A snapshot pins the view of the workspace it was dumped from
(SHM_DIR/.lineage/<snapshot id>), so its clones' views are that pin plus, for a memfile clone, the snapshot's
own memfiles; an ancestor released meanwhile keeps its files alive through the links.
"""
from __future__ import annotations

import bisect
import os
import shutil
from pathlib import Path

from . import paths

PAGE = 4096
PE_PARENT, PE_LAZY, PE_PRESENT = 1, 2, 4
VMA_AREA_REGULAR, VMA_FILE_PRIVATE, VMA_ANON_PRIVATE = 1, 1 << 6, 1 << 9
_SPECIAL = ((1 << 1) | (1 << 2) | (1 << 3) | (1 << 10) | (1 << 11) | (1 << 12) | (1 << 13) | (1 << 14) | (1 << 15)
            | (1 << 31))  # STACK VSYSCALL VDSO SYSVIPC SOCKET VVAR AIORING MEMFD SHSTK UNSUPP
MAP_ANONYMOUS, MAP_GROWSDOWN, MADV_WIPEONFORK = 0x20, 0x100, 18
MEM_MOUNT = "/opt/bunshin/mem"


def view_dir(ws_id: str) -> Path:
    """Where the view of workspace `ws_id` lives (what it sees at MEM_MOUNT)."""
    return paths.SHM_DIR / ".views" / ws_id


def lineage_dir(snap_id: str) -> Path:
    """The memfiles snapshot `snap_id`'s images may map from its ancestors (the source's view, pinned)."""
    return paths.SHM_DIR / ".lineage" / snap_id


def _link_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        try:
            os.link(f, dst / f.name)
        except FileExistsError:
            pass


def _link_tree(src: Path, dst: Path) -> None:
    """Link every SNAPSHOT_ID/FILE of `src` into `dst` (missing `src`: nothing)."""
    if src.is_dir():
        for d in src.iterdir():
            _link_files(d, dst / d.name)


def new_view(ws_id: str, snapshot_id: str | None = None, own: bool = False) -> Path:
    """Make the view of a new workspace: empty for a fresh one, else what `snapshot_id` pinned and, with
    `own` (a memfile restore), the snapshot's own memfiles."""
    view = view_dir(ws_id)
    shutil.rmtree(view, ignore_errors=True)
    view.mkdir(parents=True)
    if snapshot_id is not None:
        _link_tree(lineage_dir(snapshot_id), view)
        if own:
            _link_files(paths.SHM_DIR / snapshot_id, view / snapshot_id)
    return view


def entries() -> list[tuple[Path, Path]]:
    """Every snapshot's memfile dir, lineage pin and workspace view, each with the state dir that owns it."""
    snaps, spaces = paths.STATE_DIR / "snapshots", paths.STATE_DIR / "ws"
    out = []
    for root, owners in ((paths.SHM_DIR, snaps), (paths.SHM_DIR / ".lineage", snaps),
                         (paths.SHM_DIR / ".views", spaces)):
        if root.is_dir():
            out += [(d, owners / d.name) for d in root.iterdir() if not d.name.startswith(".")]
    return out


def pin_lineage(view: Path, snap_id: str) -> None:
    """Snapshot `snap_id` of the workspace seeing `view` keeps what that view holds."""
    _link_tree(view, lineage_dir(snap_id))


def convertible(vma: dict) -> bool:
    status = vma["status"]
    return (status & VMA_AREA_REGULAR and status & VMA_ANON_PRIVATE and not status & _SPECIAL
            and not vma["flags"] & MAP_GROWSDOWN and vma["prot"] != 0
            and not vma.get("madv", 0) & (1 << MADV_WIPEONFORK))


def _load(path: Path) -> dict:
    import pycriu.images

    with open(path, "rb") as f:
        return pycriu.images.load(f)


def _store(path: Path, img: dict) -> None:
    import pycriu.images

    path.unlink(missing_ok=True)  # never write through a hard link to the original image
    with open(path, "wb") as f:
        pycriu.images.dump(img, f)


def prepare_memfile_images(snapshot) -> Path:
    """Write snapshot.dir/images-memfile and the memfiles; returns the images dir. Idempotent per snapshot."""
    src, dst = snapshot.images, snapshot.dir / "images-memfile"
    if dst.is_dir():
        return dst
    tmp = snapshot.dir / "images-memfile.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    mem_host = paths.SHM_DIR / snapshot.id
    shutil.rmtree(mem_host, ignore_errors=True)
    mem_host.mkdir(parents=True)
    for f in src.iterdir():
        os.link(f, tmp / f.name)

    files = _load(src / "files.img")
    next_id = max((e["id"] for e in files["entries"]), default=0) + 1
    mnt_id = None
    for mp in src.glob("mountpoints-*.img"):
        for m in _load(mp)["entries"]:
            if m["mountpoint"] == MEM_MOUNT:
                mnt_id = m["mnt_id"]
    if mnt_id is None:
        raise RuntimeError(f"memfile: the snapshot has no {MEM_MOUNT} mount (workspace started by an old forkcore?)")

    for proc in _load(src / "pstree.img")["entries"]:
        pid = proc["pid"]
        mm_path, pm_path = src / f"mm-{pid}.img", src / f"pagemap-{pid}.img"
        if not mm_path.exists() or not pm_path.exists():
            continue  # zombie or kernel-less entry
        mm_img, pm_img = _load(mm_path), _load(pm_path)
        vmas = mm_img["entries"][0]["vmas"]
        head, entries = pm_img["entries"][0], pm_img["entries"][1:]
        present_in = {}
        for e in entries:
            if e.get("flags", 0) & PE_PARENT:  # PE_LAZY only marks pages lazy-pages *could* serve
                raise RuntimeError(f"memfile: pid {pid} has pagemap entries in a parent image (pre-dump); "
                                   "not supported")
        cand = sorted((v for v in vmas if convertible(v)), key=lambda v: v["start"])
        starts = [v["start"] for v in cand]

        def vma_at(addr):
            i = bisect.bisect_right(starts, addr) - 1
            return cand[i] if i >= 0 and cand[i]["start"] <= addr < cand[i]["end"] else None

        for e in entries:  # which candidate VMAs actually hold dumped pages
            if e.get("flags", 0) & PE_PRESENT:
                a, end = e["vaddr"], e["vaddr"] + e["nr_pages"] * PAGE
                while a < end:
                    v = vma_at(a)
                    nxt = min(end, v["end"]) if v else end
                    if v is None:
                        i = bisect.bisect_right(starts, a)
                        nxt = min(end, starts[i]) if i < len(starts) else end
                    else:
                        present_in[v["start"]] = v
                    a = nxt
        if not present_in:
            continue
        conv = sorted(present_in.values(), key=lambda v: v["start"])
        cstarts = [v["start"] for v in conv]

        def conv_at(addr):
            i = bisect.bisect_right(cstarts, addr) - 1
            return conv[i] if i >= 0 and conv[i]["start"] <= addr < conv[i]["end"] else None

        fds = {}
        for v in conv:
            name = f"{pid}-{v['start']:x}.mem"
            fd = os.open(mem_host / name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o400)
            os.ftruncate(fd, v["end"] - v["start"])
            fds[v["start"]] = fd
            file_id = next_id
            next_id += 1
            files["entries"].append({"type": "REG", "id": file_id, "reg": {
                "id": file_id, "flags": 0, "pos": 0,
                "fown": {"uid": 0, "euid": 0, "signum": 0, "pid_type": 0, "pid": 0},
                "name": f"{MEM_MOUNT}/{snapshot.id}/{name}", "mnt_id": mnt_id,
                "size": v["end"] - v["start"], "mode": 0o100400}})
            v["status"] = (v["status"] & ~VMA_ANON_PRIVATE) | VMA_FILE_PRIVATE
            v["flags"] &= ~MAP_ANONYMOUS
            v["shmid"], v["pgoff"], v["fdflags"], v["fd"] = file_id, 0, os.O_RDONLY, -1

        pages_id = head["pages_id"]
        new_entries = []
        pages_tmp = tmp / f"pages-{pages_id}.img.new"
        with open(src / f"pages-{pages_id}.img", "rb") as pin, open(pages_tmp, "wb") as pout:
            for e in entries:
                flags = e.get("flags", 0)
                a0, end = e["vaddr"], e["vaddr"] + e["nr_pages"] * PAGE
                data = pin.read(end - a0) if flags & PE_PRESENT else None
                a = a0
                while a < end:
                    v = conv_at(a)
                    if v is not None:
                        b = min(end, v["end"])
                        if data is not None:
                            os.pwrite(fds[v["start"]], data[a - a0:b - a0], a - v["start"])
                    else:
                        i = bisect.bisect_right(cstarts, a)
                        b = min(end, cstarts[i]) if i < len(cstarts) else end
                        new_entries.append({"vaddr": a, "nr_pages": (b - a) // PAGE, "flags": flags})
                        if data is not None:
                            pout.write(data[a - a0:b - a0])
                    a = b
        for fd in fds.values():
            os.close(fd)
        (tmp / f"pages-{pages_id}.img").unlink()
        os.rename(pages_tmp, tmp / f"pages-{pages_id}.img")
        pm_img["entries"] = [head] + new_entries
        _store(tmp / f"pagemap-{pid}.img", pm_img)
        _store(tmp / f"mm-{pid}.img", mm_img)

    _store(tmp / "files.img", files)
    os.rename(tmp, dst)
    return dst
