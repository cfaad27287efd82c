"""Memory backends: how a clone's memory is obtained when a Snapshot is restored.

- private: plain CRIU restore; each clone owns a private copy (the papers' baseline). Nothing in it is mergeable
  by KSM: the images it restores have MADV_MERGEABLE cleared (ksm.prepare_unmergeable_images), where CRIU would
  otherwise re-apply the source's PR_SET_MEMORY_MERGE marks and KSM (if running) would merge the clones.
- ksm: restore under PR_SET_MEMORY_MERGE so KSM merges identical pages after the fact (CPU cost, seconds).
- memfile: the snapshot's anonymous private memory moves into files on a shared tmpfs; the images are
  rewritten so that each clone maps them MAP_PRIVATE: clones share the page cache and copy only what they
  write, and restore copies no pages (see memfile.py for the rewrite and its caveats).
- kmod: the copy-on-write kernel module (kmod/), used when /dev/bunshin_cow exists.
`get_backend("auto")` takes the best available of kmod → ksm → private; memfile is used only when asked
for by name: a memfile clone re-reads snapshot content after MADV_DONTNEED instead of zeros, and
Chromium's allocator relies on the zeros — memfile clones of a browser crashed ("Page.evaluate: Target
crashed") in our tests under load. An explicit name that cannot run raises BackendUnavailable naming
what is missing.
"""
from __future__ import annotations

import logging
import os
import platform
import re
import shutil
import sys
from pathlib import Path

from . import paths
from .memfile import lineage_dir
from .errors import BackendUnavailable

AUTO_ORDER = ("kmod", "ksm", "private")  # memfile: opt-in only (see the module docstring)
ALL_BACKENDS = ("kmod", "memfile", "ksm", "private")
KMOD_DEVICE = Path("/dev/bunshin_cow")
KSM_DIR = Path("/sys/kernel/mm/ksm")
log = logging.getLogger("forkcore.backends")
#: KSM scan rate while the ksm backend is in use (pages per wake-up; Linux's default of 100 merges ~20 MB/s).
KSM_PAGES_TO_SCAN = int(os.environ.get("BUNSHIN_KSM_PAGES_TO_SCAN", "1000"))


class Backend:
    name = "?"

    def missing(self) -> str | None:
        """None when usable here, else what is missing and how to fix it."""
        return None

    def prepare(self, snapshot) -> Path:
        """Per-snapshot preparation (once); returns the images dir to restore from."""
        return snapshot.images

    def exec_prefix(self) -> tuple[str, ...]:
        return ()


class PrivateBackend(Backend):
    name = "private"

    def prepare(self, snapshot) -> Path:
        """The snapshot's images with no VMA marked MADV_MERGEABLE (once per snapshot; hard links but for the
        rewritten mm-PID.img). Without pycriu the dumped images are used as they are, and a warning says the
        clones may be merged by KSM."""
        if "private" not in snapshot.backend_data:
            try:
                import pycriu.images  # noqa: F401
            except ImportError:
                log.warning("private backend: pycriu is not importable, so the source's MADV_MERGEABLE marks stay "
                            "in the clones of %s (KSM, if running, may merge them)", snapshot.id)
                snapshot.backend_data["private"] = snapshot.images
            else:
                from .ksm import prepare_unmergeable_images

                snapshot.backend_data["private"] = prepare_unmergeable_images(snapshot)
        return snapshot.backend_data["private"]


class KsmBackend(Backend):
    name = "ksm"

    def missing(self) -> str | None:
        if not (KSM_DIR / "run").exists():
            return "KSM: /sys/kernel/mm/ksm is absent (kernel built without CONFIG_KSM)"
        m = re.match(r"(\d+)\.(\d+)", platform.release())
        if m and (int(m.group(1)), int(m.group(2))) < (6, 4):
            return f"KSM: PR_SET_MEMORY_MERGE needs Linux >= 6.4 (running {platform.release()})"
        return None

    def prepare(self, snapshot) -> Path:
        enable_ksm()
        return snapshot.images

    def exec_prefix(self) -> tuple[str, ...]:
        code = ("import ctypes,os,sys;ctypes.CDLL(None).prctl(67,1,0,0,0);"  # PR_SET_MEMORY_MERGE
                "os.execvp(sys.argv[1],sys.argv[1:])")
        return (sys.executable if os.path.exists(sys.executable) else "/usr/bin/python3", "-c", code)


def enable_ksm() -> None:
    """Turn KSM on host-wide (documented side effect of the ksm backend) at a useful scan rate."""
    (KSM_DIR / "run").write_text("1")
    try:
        if int((KSM_DIR / "pages_to_scan").read_text()) < KSM_PAGES_TO_SCAN:
            (KSM_DIR / "pages_to_scan").write_text(str(KSM_PAGES_TO_SCAN))
    except OSError:
        pass


class MemfileBackend(Backend):
    name = "memfile"

    def missing(self) -> str | None:
        try:
            import pycriu.images  # noqa: F401
        except ImportError:
            return ("memfile: pycriu is not importable (it comes with CRIU: run `bash scripts/setup.sh`, which "
                    f"links {paths.PREFIX}/criu/python into the venv)")
        try:
            with open("/proc/mounts") as f:
                shm_ok = any(l.split()[1] == str(paths.SHM_DIR.parent) and l.split()[2] == "tmpfs" for l in f)
        except OSError:
            shm_ok = False
        if not shm_ok:
            return f"memfile: {paths.SHM_DIR.parent} is not a tmpfs (set BUNSHIN_SHM_DIR to a dir on tmpfs)"
        return None

    def prepare(self, snapshot) -> Path:
        from .memfile import prepare_memfile_images

        if "memfile" not in snapshot.backend_data:
            snapshot.backend_data["memfile"] = prepare_memfile_images(snapshot)
        return snapshot.backend_data["memfile"]


class KmodBackend(Backend):
    """Copy-on-write holders of the bunshin_cow kernel module (kmod/; forkcore/kmod_backend.py)."""

    name = "kmod"

    def missing(self) -> str | None:
        if not KMOD_DEVICE.exists():
            return (f"kmod: {KMOD_DEVICE} is absent; load the bunshin_cow module (kmod/README.md) in a kernel "
                    "that supports modules (this machine's host kernel does not)")
        if os.environ.get("BUNSHIN_KMOD_DISABLE"):
            return "kmod: disabled by BUNSHIN_KMOD_DISABLE"
        try:
            import pycriu.images  # noqa: F401
        except ImportError:
            return ("kmod: pycriu is not importable (it comes with CRIU: run `bash scripts/setup.sh`, which "
                    f"links {paths.PREFIX}/criu/python into the venv)")
        if not os.access(KMOD_DEVICE, os.R_OK | os.W_OK):
            return f"kmod: {KMOD_DEVICE} is not readable and writable by this user (root needed)"
        return None

    def prepare(self, snapshot) -> Path:
        from .kmod_backend import prepare_kmod_images

        if "kmod" not in snapshot.backend_data:
            snapshot.backend_data["kmod"] = prepare_kmod_images(snapshot, str(KMOD_DEVICE))
        return snapshot.backend_data["kmod"].images


_BACKENDS = {b.name: b for b in (KmodBackend(), MemfileBackend(), KsmBackend(), PrivateBackend())}


def backend_report() -> dict[str, str | None]:
    """{backend name: None if available else what is missing}, for every backend."""
    return {name: _BACKENDS[name].missing() for name in ALL_BACKENDS}


def get_backend(name: str = "auto") -> Backend:
    if name == "auto":
        for n in AUTO_ORDER:
            if _BACKENDS[n].missing() is None:
                return _BACKENDS[n]
        raise BackendUnavailable("no memory backend available (even 'private' failed its check)")
    if name not in _BACKENDS:
        raise ValueError(f"unknown memory backend {name!r}; choose one of {', '.join(('auto',) + ALL_BACKENDS)}")
    why = _BACKENDS[name].missing()
    if why:
        raise BackendUnavailable(why)
    return _BACKENDS[name]


def release_backend_data(snapshot) -> None:
    kmod = snapshot.backend_data.pop("kmod", None)
    if kmod is not None:
        kmod.release()  # closes the owner fd: the module releases the holders; clone mappings keep their pages
    snapshot.backend_data.pop("private", None)  # images-private lies in snapshot.dir, removed with it
    mem = snapshot.backend_data.pop("memfile", None)
    if mem is not None:
        shutil.rmtree(paths.SHM_DIR / snapshot.id, ignore_errors=True)
    shutil.rmtree(lineage_dir(snapshot.id), ignore_errors=True)
