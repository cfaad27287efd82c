"""Persistent on-disk store of prefix trees and their step results.

Owns: the directory format, content-addressed compressed blobs, the record journal and its compaction,
crash safety, corruption detection and the cross-process writer lock. Does not own: when to save (the env /
rollout driver calls `save_tree` e.g. at the end of an iteration) or snapshots (the tree's `SnapshotPool`
holds them as `SnapshotHandle`s; nothing here stores or restores one).

Layout of a store directory::

    FORMAT            {"format": "bunshin-cache-store", "version": 1}
    lock              flock(2) target: writers hold LOCK_EX, readers LOCK_SH while reading the journal
    blobs/ab/<sha256> one blob: b"BSB1" + codec byte + payload (0 raw, 1 zlib, 2 zstd). The name is the
                      sha256 of the *uncompressed* bytes, so identical content (the same observation
                      reached by many paths) is stored once.
    manifest.jsonl    compacted records (rewritten atomically by `compact`)
    journal.jsonl     records appended since the last compaction

A record line is ``<first 16 hex of sha256(json)> <json>\\n``. Records: ``tree`` (task_id, digest),
``node`` (tree, key, parent key, signature, result blob, cost_s, side = read-only entry) and ``root``
(reset observation). Stores written by older versions may also hold ``snap`` records (snapshot deltas, no
longer kept): they are skipped, and `compact` leaves them out, so blobs only they named become garbage.

Crash safety. Every blob is written to a temp file, fsynced and ``os.replace``d into place, and blobs are
fsynced before the journal lines that reference them are appended (and the journal is fsynced after).
A crash (even SIGKILL) can leave: a temp file (ignored; removed by `compact`), a blob nothing references
(harmless), or a torn last journal line (its checksum fails; it is skipped, and the next writer first
terminates it with a newline so it can't corrupt the next record). Compaction writes the new manifest
atomically *before* replacing the journal, so a crash in between only leaves duplicate records, which
are idempotent (records are keyed by content-derived node keys).

Corruption. Every blob read re-hashes the decompressed bytes; a mismatch, a truncated or undecodable blob
or a missing blob raises `CorruptEntryError` internally and the blob is deleted. A step result that doesn't
unpickle (e.g. an upgrade renamed a class it names) raises it too, but keeps its blob (the bytes are
intact). Either way the entry is dropped: `load_tree` logs it, counts it in `LoadReport.dropped` and leaves
that node (and so its subtree, which can't be reached without it) out of the tree; it never raises for it,
and nothing corrupt is ever served. A later `save_tree` of a tree that has the node writes it again. Step
results are pickled (trusted local data only: never open a store you didn't write).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import pickle
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CorruptEntryError, StoreError, StoreFormatError, StoreLockTimeout
from .tree import PrefixTree, CachedStep

try:  # optional, faster and smaller than zlib
    import zstandard as _zstd  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the environment
    _zstd = None

log = logging.getLogger(__name__)

STORE_FORMAT = "bunshin-cache-store"
STORE_VERSION = 1
_MAGIC = b"BSB1"
_RAW, _ZLIB, _ZSTD = 0, 1, 2


@dataclass(frozen=True)
class StoreConfig:
    """Configuration of a `CacheStore`."""

    codec: str = "auto"
    """Blob compression: ``"auto"`` (zstd if the ``zstandard`` package is installed, else zlib), ``"zlib"``,
    ``"zstd"`` or ``"none"``. A blob that doesn't shrink is stored raw. Reading handles every codec."""
    level: int = 3
    """Compression level (zlib 1-9, zstd 1-22)."""
    fsync: bool = True
    """fsync blobs, journal and directories (turn off only for throwaway stores: crash safety needs it)."""
    lock_timeout_s: float = 60.0
    """How long to wait for another process's writer lock before `StoreLockTimeout`."""


def validate_store_config(cfg: StoreConfig) -> None:
    if cfg.codec not in ("auto", "zlib", "zstd", "none"):
        raise ValueError(f"StoreConfig.codec={cfg.codec!r} is invalid: expected 'auto', 'zlib', 'zstd' or 'none'")
    if cfg.codec == "zstd" and _zstd is None:
        raise StoreError("StoreConfig.codec='zstd' needs the zstandard package: "
                         "/opt/bunshin/venv/bin/pip install zstandard (or use codec='auto')")
    if cfg.lock_timeout_s < 0:
        raise ValueError(f"StoreConfig.lock_timeout_s={cfg.lock_timeout_s} is invalid: expected >= 0")


@dataclass(frozen=True)
class LoadReport:
    """What `CacheStore.load_tree` loaded and what it dropped."""

    nodes: int
    side_entries: int
    dropped: int
    """Entries dropped: corrupt/missing blob, a result that doesn't unpickle, a malformed record, orphaned
    (parent dropped) or a read-only annotation that disagrees with the loading tree's predicate."""


def _line(rec: Mapping[str, Any]) -> bytes:
    body = json.dumps(rec, sort_keys=True, separators=(",", ":"))
    return f"{hashlib.sha256(body.encode()).hexdigest()[:16]} {body}\n".encode()


def _parse_line(raw: bytes) -> dict[str, Any] | None:
    try:
        text = raw.decode()
        check, body = text.rstrip("\n").split(" ", 1)
        if hashlib.sha256(body.encode()).hexdigest()[:16] != check:
            return None
        rec = json.loads(body)
        return rec if isinstance(rec, dict) and "op" in rec else None
    except (UnicodeDecodeError, ValueError):
        return None


def encode_result(result: CachedStep) -> bytes:
    return pickle.dumps((result.observation, result.reward, result.terminated, result.truncated,
                         dict(result.info)), protocol=5)


def decode_result(data: bytes) -> CachedStep:
    """Unpickle a step result; `CorruptEntryError` if it doesn't decode."""
    try:
        obs, reward, terminated, truncated, info = pickle.loads(data)  # noqa: S301 - trusted local store
        return CachedStep(obs, reward, terminated, truncated, info)
    except Exception as e:  # noqa: BLE001 - unpickling runs arbitrary reducers: ImportError after an
        # upgrade renamed a module, AttributeError for a renamed class, or whatever a __setstate__ raises
        raise CorruptEntryError(f"step result does not unpickle ({type(e).__name__}: {e})") from e


class CacheStore:
    """A store directory (created if missing). Safe for many reader processes and concurrent writers
    (writes serialise on an flock); thread-safe within a process.

    Args:
        root: the directory.
        config: `StoreConfig`.
    """

    def __init__(self, root: str | os.PathLike[str], config: StoreConfig | None = None):
        self.config = config or StoreConfig()
        validate_store_config(self.config)
        self.root = Path(root)
        self._codec = {"auto": _ZSTD if _zstd is not None else _ZLIB, "zlib": _ZLIB, "zstd": _ZSTD,
                       "none": _RAW}[self.config.codec]
        self._tlock = threading.RLock()
        self._init_dir()
        self._lock_fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        self._held = 0  # re-entrant depth of our flock
        # index built from manifest + journal
        self._trees: dict[str, dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, dict[str, Any]]] = {}
        # (tree, key) of entries `load_tree` dropped: `save_tree` writes them again. Not popped from _nodes,
        # which would move a rewritten record behind its children (dropping them as orphans on the next
        # load here) and let `compact(gc=True)` delete a blob that is intact but didn't unpickle here.
        self._redo: set[tuple[str, str]] = set()
        self._seen: tuple[int, int, int] | None = None  # (manifest ino, journal ino, journal offset)
        self.bad_lines = 0
        self._present: set[str] = set()  # digests known to exist (saves a stat per known node on save)
        with self._locked(fcntl.LOCK_SH):
            self._refresh_locked()

    # -- directory & locking ---------------------------------------------------------------------------
    def _init_dir(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fmt = self.root / "FORMAT"
        if fmt.exists():
            try:
                meta = json.loads(fmt.read_text())
            except (OSError, ValueError) as e:
                raise StoreFormatError(f"{fmt} is unreadable ({e}); not a Bunshin cache store, or damaged: "
                                       f"move it away and let a new store be created") from e
            if meta.get("format") != STORE_FORMAT or meta.get("version") != STORE_VERSION:
                raise StoreFormatError(f"{self.root} holds {meta!r}; this code reads format {STORE_FORMAT!r} "
                                       f"version {STORE_VERSION}. Use a new directory or a matching bunshin-gym.")
        else:
            others = [p.name for p in self.root.iterdir() if p.name not in ("lock", "blobs")
                      and not p.name.startswith(".tmp-")]
            if others:
                raise StoreFormatError(f"{self.root} is not empty ({others[:5]}) and has no FORMAT file: "
                                       f"point CacheStore at an empty or existing store directory")
            (self.root / "blobs").mkdir(exist_ok=True)
            self._atomic_write(fmt, json.dumps({"format": STORE_FORMAT, "version": STORE_VERSION}).encode())

    @contextmanager
    def _locked(self, kind: int) -> Iterator[None]:
        """Thread lock + flock. Re-entrant; a shared lock taken inside an exclusive one stays exclusive."""
        with self._tlock:
            if self._held:
                self._held += 1
                try:
                    yield
                finally:
                    self._held -= 1
                return
            deadline = time.monotonic() + self.config.lock_timeout_s
            while True:
                try:
                    fcntl.flock(self._lock_fd, kind | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise StoreError(f"flock({self.root / 'lock'}) failed: {e}") from e
                    if time.monotonic() > deadline:
                        raise StoreLockTimeout(
                            f"another process held {self.root / 'lock'} for over {self.config.lock_timeout_s}s; "
                            f"find it with `fuser {self.root / 'lock'}` or raise StoreConfig.lock_timeout_s") from e
                    time.sleep(0.005)
            self._held = 1
            try:
                yield
            finally:
                self._held = 0
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _fsync_dir(self, d: Path) -> None:
        if not self.config.fsync:
            return
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _atomic_write(self, path: Path, data: bytes) -> None:
        tmp = path.parent / f".tmp-{os.getpid()}-{secrets.token_hex(6)}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                if self.config.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    # -- blobs -----------------------------------------------------------------------------------------
    def _blob_path(self, digest: str) -> Path:
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"not a sha256 hex digest: {digest!r}")
        return self.root / "blobs" / digest[:2] / digest[2:]

    def _compress(self, data: bytes) -> bytes:
        if self._codec == _ZSTD:
            comp = _zstd.ZstdCompressor(level=self.config.level).compress(data)  # type: ignore[union-attr]
        elif self._codec == _ZLIB:
            comp = zlib.compress(data, self.config.level)
        else:
            comp = data
        if self._codec != _RAW and len(comp) < len(data):
            return _MAGIC + bytes([self._codec]) + comp
        return _MAGIC + bytes([_RAW]) + data

    def _blob_ok(self, digest: str) -> bool:
        """Whether blob ``digest`` exists (cheap; content is verified on every read)."""
        if self._blob_path(digest).exists():
            self._present.add(digest)
            return True
        return False

    def _put_blob_locked(self, data: bytes, dirs: set[Path]) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self._blob_path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            self._atomic_write(path, self._compress(data))
            dirs.add(path.parent)
        self._present.add(digest)
        return digest

    def put_blob(self, data: bytes) -> str:
        """Store ``data`` (bytes-like); return its sha256 hex digest. Durable when this returns."""
        dirs: set[Path] = set()
        with self._locked(fcntl.LOCK_EX):
            digest = self._put_blob_locked(bytes(data), dirs)
            for d in dirs:
                self._fsync_dir(d)
        return digest

    def get_blob(self, digest: str) -> bytes:
        """The verified bytes of blob ``digest``.

        Raises:
            CorruptEntryError: missing, truncated, undecodable or hash mismatch (the bad file is deleted).
        """
        path = self._blob_path(digest)
        try:
            raw = path.read_bytes()
        except FileNotFoundError as e:
            raise CorruptEntryError(f"blob {digest} is missing from {self.root}") from e
        try:
            if raw[:4] != _MAGIC or len(raw) < 5:
                raise ValueError("bad header")
            codec, payload = raw[4], raw[5:]
            if codec == _RAW:
                data = payload
            elif codec == _ZLIB:
                data = zlib.decompress(payload)
            elif codec == _ZSTD:
                if _zstd is None:
                    raise StoreError(f"blob {digest} is zstd-compressed; install zstandard to read it: "
                                     f"/opt/bunshin/venv/bin/pip install zstandard")
                data = _zstd.ZstdDecompressor().decompress(payload)
            else:
                raise ValueError(f"unknown codec {codec}")
        except StoreError:
            raise
        except Exception as e:  # noqa: BLE001 - zlib.error, zstd errors, header errors
            self._quarantine(path)
            raise CorruptEntryError(f"blob {digest} in {self.root} is truncated or undecodable ({e}); dropped") from e
        if hashlib.sha256(data).hexdigest() != digest:
            self._quarantine(path)
            raise CorruptEntryError(f"blob {digest} in {self.root} fails its sha256 check; dropped")
        return data

    def _quarantine(self, path: Path) -> None:
        self._present.discard(path.parent.name + path.name)
        log.warning("cache store: dropping corrupt blob %s", path)
        try:
            path.unlink()
        except OSError:
            pass

    # -- journal & index -------------------------------------------------------------------------------
    def _apply(self, rec: dict[str, Any]) -> None:
        op = rec.get("op")
        try:
            if op == "tree":
                self._trees.setdefault(rec["tree"], rec)
                self._nodes.setdefault(rec["tree"], {})
            elif op in ("node", "root"):
                self._nodes.setdefault(rec["tree"], {})[rec["key"]] = rec
            elif op == "snap":
                pass  # a snapshot delta of an older version: no longer kept, its blobs are garbage
            else:
                self.bad_lines += 1
        except KeyError:
            self.bad_lines += 1

    def _read_lines(self, path: Path, offset: int) -> tuple[int, int]:
        """Apply the complete lines of ``path`` from ``offset``; return (inode, new offset)."""
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return 0, 0
        with f:
            ino = os.fstat(f.fileno()).st_ino
            f.seek(offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a torn last line (no newline yet) is left for later
        for raw in data[:end].splitlines(keepends=False):
            if not raw:
                continue
            rec = _parse_line(raw)
            if rec is None:
                self.bad_lines += 1
            else:
                self._apply(rec)
        return ino, offset + end

    def _refresh_locked(self) -> None:
        man, jour = self.root / "manifest.jsonl", self.root / "journal.jsonl"
        man_ino = man.stat().st_ino if man.exists() else 0
        jour_ino = jour.stat().st_ino if jour.exists() else 0
        if self._seen is not None and self._seen[0] == man_ino and self._seen[1] == jour_ino:
            _, off = self._read_lines(jour, self._seen[2])
            self._seen = (man_ino, jour_ino, off)
            return
        self._trees, self._nodes, self.bad_lines = {}, {}, 0
        self._read_lines(man, 0)
        ino, off = self._read_lines(jour, 0)
        self._seen = (man_ino, ino or jour_ino, off)

    def refresh(self) -> None:
        """Pick up records other processes appended since this store was opened."""
        with self._locked(fcntl.LOCK_SH):
            self._refresh_locked()

    def _append_locked(self, recs: list[dict[str, Any]]) -> None:
        if not recs:
            return
        jour = self.root / "journal.jsonl"
        fd = os.open(jour, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            payload = b"".join(_line(r) for r in recs)
            if size:
                with open(jour, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":  # a writer died mid-line: terminate the torn line first
                        payload = b"\n" + payload
            os.write(fd, payload)
            if self.config.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._refresh_locked()  # applies exactly the lines just appended (and any others' before them)

    # -- trees -----------------------------------------------------------------------------------------
    def tree_ids(self) -> list[tuple[str, str]]:
        """``(task_id, initial_digest)`` of every stored tree."""
        with self._tlock:
            return [(r["task_id"], r["digest"]) for r in self._trees.values()]

    def save_tree(self, tree: PrefixTree) -> int:
        """Persist every node, side entry and root result of ``tree`` that the store lacks.

        Returns:
            the number of records written. Durable when this returns (with ``fsync=True``).
        """
        nodes = list(tree.iter_nodes())
        with self._locked(fcntl.LOCK_EX):
            self._refresh_locked()
            known = self._nodes.get(tree.key, {})
            recs: list[dict[str, Any]] = []
            dirs: set[Path] = set()
            if tree.key not in self._trees:
                recs.append({"op": "tree", "tree": tree.key, "task_id": tree.task_id, "digest": tree.initial_digest})
            def need(key: str) -> bool:
                # new, dropped by our load_tree, or its blob was dropped as corrupt (by any process): write it
                rec = known.get(key)
                return (rec is None or (tree.key, key) in self._redo
                        or (rec["result"] not in self._present and not self._blob_ok(rec["result"])))

            root = tree.root
            if root.result is not None and need(root.key):
                recs.append({"op": "root", "tree": tree.key, "key": root.key,
                             "result": self._put_blob_locked(encode_result(root.result), dirs)})

            for n in nodes:
                if n.parent is not None and need(n.key):
                    recs.append({"op": "node", "tree": tree.key, "key": n.key, "parent": n.parent.key,
                                 "sig": n.signature, "cost_s": n.cost_s, "replay_s": n.replay_s, "side": False,
                                 "result": self._put_blob_locked(encode_result(n.result), dirs)})  # type: ignore[arg-type]
                for s in list(n.side.values()):
                    if need(s.key):
                        recs.append({"op": "node", "tree": tree.key, "key": s.key, "parent": n.key,
                                     "sig": s.signature, "cost_s": s.cost_s, "side": True,
                                     "result": self._put_blob_locked(encode_result(s.result), dirs)})
            for d in dirs:  # blobs are durable before the records that name them
                self._fsync_dir(d)
            self._append_locked(recs)
            self._redo.difference_update((tree.key, r["key"]) for r in recs if "key" in r)
        return len(recs)

    def load_tree(self, task_id: str, initial_digest: str, *, readonly: Callable[[str], bool] | None = None,
                  tree_factory: Callable[..., PrefixTree] | None = None) -> tuple[PrefixTree, LoadReport]:
        """Rebuild the stored tree of ``(task_id, initial_digest)`` (empty if none), verifying every result.

        Args:
            readonly: the env's read-only predicate; stored entries whose kind disagrees are dropped.
            tree_factory: ``(task_id, initial_digest, readonly=...) -> PrefixTree``, e.g.
                ``PrefixCache.new_tree`` so the tree shares the cache's pool; default `PrefixTree`.

        Returns:
            ``(tree, LoadReport)``. Nodes whose results are corrupt or don't unpickle are left out with their
            subtrees (logged, counted in ``dropped``); this never raises for a bad entry.
        """
        factory = tree_factory or PrefixTree
        tree = factory(task_id, initial_digest, readonly=readonly)
        with self._locked(fcntl.LOCK_SH):
            self._refresh_locked()
            recs = list(self._nodes.get(tree.key, {}).values())
        by_key = {tree.key: tree.root}
        loaded = sides = dropped = 0
        bad: list[str] = []
        for rec in recs:
            try:
                if rec["op"] == "root":
                    tree.set_root_result(decode_result(self.get_blob(rec["result"])))
                    continue
                parent = by_key.get(rec["parent"])
                if parent is None or tree.is_readonly(rec["sig"]) != bool(rec["side"]):
                    dropped += 1
                    continue
                result = decode_result(self.get_blob(rec["result"]))
                node = tree.record(parent, rec["sig"], result, float(rec["cost_s"]), rec.get("replay_s"))
            except (CorruptEntryError, KeyError, TypeError, ValueError, AttributeError) as e:
                # a corrupt blob or a result that doesn't unpickle (CorruptEntryError), or a malformed record
                log.warning("cache store: dropping entry %s %r of task %r (and its subtree): %s",
                            str(rec.get("key"))[:12], rec.get("sig", "<root>"), task_id, e)
                dropped += 1
                bad.append(rec.get("key", ""))
                continue
            if rec["side"]:
                sides += 1
            else:
                by_key[rec["key"]] = node
                loaded += 1
        if bad:
            with self._tlock:
                self._redo.update((tree.key, k) for k in bad)  # a later save_tree rewrites them
        return tree, LoadReport(loaded, sides, dropped)

    # -- maintenance -----------------------------------------------------------------------------------
    def compact(self, *, gc: bool = False) -> int:
        """Fold the journal into the manifest (atomically) and remove stale temp files.

        Args:
            gc: also delete blobs no record references (orphans of crashed writers; blobs stored only
                with `put_blob` are orphans too, so leave this off if you keep such blobs).

        Returns:
            the number of blobs deleted.
        """
        removed = 0
        with self._locked(fcntl.LOCK_EX):
            self._refresh_locked()
            recs: list[dict[str, Any]] = list(self._trees.values())
            for nodes in self._nodes.values():
                recs.extend(nodes.values())
            self._atomic_write(self.root / "manifest.jsonl", b"".join(_line(r) for r in recs))
            self._atomic_write(self.root / "journal.jsonl", b"")
            self._fsync_dir(self.root)
            for d in [self.root, *(self.root / "blobs").glob("*")]:
                for tmp in d.glob(".tmp-*"):
                    tmp.unlink(missing_ok=True)
            if gc:
                live: set[str] = set()
                for r in recs:
                    if "result" in r:
                        live.add(r["result"])
                for d in (self.root / "blobs").glob("*"):
                    for b in d.iterdir():
                        if d.name + b.name not in live and not b.name.startswith(".tmp-"):
                            b.unlink(missing_ok=True)
                            self._present.discard(d.name + b.name)
                            removed += 1
            self._seen = None
            self._refresh_locked()
        return removed

    def close(self) -> None:
        with self._tlock:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    def __enter__(self) -> CacheStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
