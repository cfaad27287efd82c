"""On-disk store: round trip across processes, crash safety (SIGKILL mid-write), corruption detection."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from bunshin_gym.cache import CacheStore, PrefixCache, PrefixTree, CachedStep, StoreConfig, StoreFormatError

REPO = Path(__file__).resolve().parents[2]


def readonly(sig: str) -> bool:
    return sig.startswith("read(")


def obs_for(path: tuple[str, ...]) -> dict:
    """Deterministic observation of a path, so any process can check what it loaded."""
    seed = abs(hash("/".join(path))) % (2**32)
    return {"path": "/".join(path), "pixels": np.random.default_rng(seed).integers(0, 255, (16, 16, 3), dtype=np.uint8)}


def build_tree(t: PrefixTree, n_paths: int = 20, depth: int = 6) -> None:
    for i in range(n_paths):
        node = t.root
        for d in range(depth):
            sig = f"click(id={(i >> d) & 1}, d={d})"
            path = node.path() + (sig,)
            node = t.record(node, sig, CachedStep({"path": "/".join(path)}, reward=float(d), info={"d": d}), 0.1 * d,
                         replay_s=0.05 * d)
            if d % 2 == 0:
                t.record(node, "read(page)", CachedStep({"read": "/".join(path)}), 0.01)


def as_dict(t: PrefixTree) -> dict:
    out = {}
    for n in t.iter_nodes():
        if n.parent is not None:
            out[n.path()] = (n.result.observation["path"], n.result.reward, dict(n.result.info), n.cost_s,
                             n.replay_s)
        for s in n.side.values():
            out[n.path() + (s.signature,)] = (s.result.observation["read"], s.cost_s)
    return out


def test_round_trip_in_process(tmp_path):
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t)
    t.set_root_result(CachedStep({"reset": True}))
    with CacheStore(tmp_path / "store") as st:
        n = st.save_tree(t)
        assert n > 0 and st.save_tree(t) == 0, "second save writes nothing new"
    with CacheStore(tmp_path / "store") as st:
        t2, rep = st.load_tree("task", "d0", readonly=readonly)
    assert as_dict(t2) == as_dict(t) and rep.dropped == 0
    assert t2.root.result.observation == {"reset": True}
    assert t2.lookup(["click(id=1, d=0)", "read(page)"]).hit
    # another (task, digest) is a different, empty tree
    with CacheStore(tmp_path / "store") as st:
        t3, _ = st.load_tree("task", "other-digest", readonly=readonly)
    assert len(t3) == 1


def test_loaded_tree_can_share_a_cache_pool(tmp_path):
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t, 3, 3)
    cache = PrefixCache(readonly=readonly)
    with CacheStore(tmp_path / "s") as st:
        st.save_tree(t)
        t2, _ = st.load_tree("task", "d0", tree_factory=cache.new_tree)
    assert cache.adopt(t2) is cache.tree("task", "d0") and t2.pool is cache.pool


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from bunshin_gym.cache import CacheStore, PrefixTree, CachedStep
    store = CacheStore({root!r})
    t = PrefixTree("task", "d0", readonly=lambda s: s.startswith("read("))
    node, i = t.root, 0
    while True:
        sig = f"type(text={{i}})"
        path = node.path() + (sig,)
        # a big-ish observation so a kill often lands inside a blob write
        node = t.record(node, sig, CachedStep({{"path": "/".join(path), "pad": bytes(200_000) + path[-1].encode()}}), 0.01)
        store.save_tree(t)
        print(i, flush=True)
        i += 1
        if i % 25 == 0:
            node = t.root  # branch again from the root
""")


def spawn_writer(root: Path, extra_code: str = "") -> subprocess.Popen:
    code = WRITER.format(repo=str(REPO), root=str(root))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def check_everything_served_is_correct(root: Path) -> int:
    with CacheStore(root) as st:
        t, rep = st.load_tree("task", "d0", readonly=readonly)
        for n in t.iter_nodes():
            if n.parent is None:
                continue
            obs = n.result.observation
            assert obs["path"] == "/".join(n.path())
            assert obs["pad"] == bytes(200_000) + n.signature.encode()
        return len(t) - 1


@pytest.mark.parametrize("kill_after_lines", [3, 11, 40])
def test_sigkill_mid_write_leaves_a_store_that_opens_and_serves_only_valid_entries(tmp_path, kill_after_lines):
    root = tmp_path / "store"
    p = spawn_writer(root)
    try:
        for _ in range(kill_after_lines):
            assert p.stdout.readline(), "writer died early"
        time.sleep(0.013 * kill_after_lines % 0.05)  # land somewhere inside the next write
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait(10)
    assert p.returncode == -signal.SIGKILL
    n = check_everything_served_is_correct(root)
    assert n >= kill_after_lines
    # a new writer can append after the crash (torn line repaired) and everything still verifies
    with CacheStore(root) as st:
        t, _ = st.load_tree("task", "d0", readonly=readonly)
        t.record(t.root, "after-crash()", CachedStep({"path": "after-crash()", "pad": bytes(200_000) + b"after-crash()"}), 0.0)
        st.save_tree(t)
    with CacheStore(root) as st:
        t2, _ = st.load_tree("task", "d0", readonly=readonly)
    assert t2.lookup(["after-crash()"]).hit
    check_everything_served_is_correct(root)


def test_torn_journal_line_is_skipped_and_next_append_is_intact(tmp_path):
    root = tmp_path / "s"
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t, 2, 3)
    with CacheStore(root) as st:
        st.save_tree(t)
    with open(root / "journal.jsonl", "ab") as f:
        f.write(b'0123456789abcdef {"op":"node","tree":"x"')  # torn: no newline, bad checksum
    with CacheStore(root) as st:
        t2, rep = st.load_tree("task", "d0", readonly=readonly)
        assert as_dict(t2) == as_dict(t) and rep.dropped == 0
        t2.record(t2.root, "new()", CachedStep({"path": "new()"}), 0.0)
        st.save_tree(t2)
    with CacheStore(root) as st:
        t3, _ = st.load_tree("task", "d0", readonly=readonly)
        assert st.bad_lines == 1 and t3.lookup(["new()"]).hit


def _blob_of(root: Path, digest: str) -> Path:
    return root / "blobs" / digest[:2] / digest[2:]


def test_corrupt_blob_is_detected_dropped_and_never_served(tmp_path):
    root = tmp_path / "s"
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t, 4, 4)
    with CacheStore(root, StoreConfig(codec="none")) as st:
        st.save_tree(t)
        victim = t.lookup(["click(id=0, d=0)", "click(id=0, d=1)"]).node
        rec = st._nodes[t.key][victim.key]
    p = _blob_of(root, rec["result"])
    raw = bytearray(p.read_bytes())
    raw[-3] ^= 0xFF  # flip a byte in the payload: same length, wrong content
    p.write_bytes(bytes(raw))
    with CacheStore(root) as st:
        t2, rep = st.load_tree("task", "d0", readonly=readonly)
    # the node and its subtree are gone; everything else is intact and correct
    assert not t2.lookup(["click(id=0, d=0)", "click(id=0, d=1)"]).hit
    assert t2.lookup(["click(id=0, d=0)"]).hit and t2.lookup(["click(id=1, d=0)", "click(id=0, d=1)"]).hit
    assert rep.dropped >= 1 and not p.exists(), "the corrupt blob was removed"
    for path, val in as_dict(t2).items():
        assert as_dict(t)[path] == val
    # saving the original tree again repairs the store
    with CacheStore(root) as st:
        st.save_tree(t)
        t3, rep3 = st.load_tree("task", "d0", readonly=readonly)
    assert as_dict(t3) == as_dict(t) and rep3.dropped == 0


def test_truncated_blob_is_refused(tmp_path):
    root = tmp_path / "s"
    t = PrefixTree("task", "d0")
    n = t.record(t.root, "a", CachedStep("x" * 10000), 1.0)
    with CacheStore(root) as st:
        st.save_tree(t)
        node_blob = _blob_of(root, st._nodes[t.key][n.key]["result"])
    node_blob.write_bytes(node_blob.read_bytes()[:10])
    with CacheStore(root) as st:
        t2, rep = st.load_tree("task", "d0")
    assert len(t2) == 1 and rep.dropped == 1


GONE_MODULE = "bunshin_test_gone_module"


def test_result_that_no_longer_unpickles_drops_its_node_and_subtree(tmp_path, monkeypatch, caplog):
    """An upgrade that renames a class must not break loading: the entry is dropped like a corrupt one."""
    mod_dir = tmp_path / "mods"
    mod_dir.mkdir()
    (mod_dir / f"{GONE_MODULE}.py").write_text("class Widget:\n    pass\n")
    monkeypatch.syspath_prepend(str(mod_dir))
    widget = __import__(GONE_MODULE).Widget()
    root = tmp_path / "s"
    t = PrefixTree("task", "d0")
    t.set_root_result(CachedStep({"reset": True}))
    a = t.record(t.root, "a()", CachedStep({"widget": widget}), 1.0)
    t.record(a, "b()", CachedStep({"path": "a()/b()"}), 1.0)
    t.record(t.root, "c()", CachedStep({"path": "c()"}), 1.0)
    with CacheStore(root) as st:
        st.save_tree(t)
        a_blob = _blob_of(root, st._nodes[t.key][a.key]["result"])
    # the module is gone, as after an upgrade that renamed it: unpickling raises ModuleNotFoundError
    sys.modules.pop(GONE_MODULE)
    sys.path.remove(str(mod_dir))  # (monkeypatch restores sys.path afterwards)
    (mod_dir / f"{GONE_MODULE}.py").unlink()
    importlib.invalidate_caches()
    with pytest.raises(ModuleNotFoundError):
        __import__(GONE_MODULE)
    with CacheStore(root) as st, caplog.at_level("WARNING", logger="bunshin_gym.cache.store"):
        t2, rep = st.load_tree("task", "d0")
    assert rep.dropped == 2 and rep.nodes == 1, "a() and, with it, its child b()"
    assert not t2.lookup(["a()"]).hit and not t2.lookup(["a()", "b()"]).hit
    assert t2.lookup(["c()"]).hit and t2.root.result.observation == {"reset": True}
    assert a_blob.exists(), "the blob is intact: only the entry is skipped"
    assert any(a.key[:12] in r.getMessage() and "ModuleNotFoundError" in r.getMessage() for r in caplog.records)
    # a later save of a tree holding the node (re-executed with today's classes) writes it again
    with CacheStore(root) as st:
        t3, _ = st.load_tree("task", "d0")
        a3 = t3.record(t3.root, "a()", CachedStep({"widget": "re-executed"}), 1.0)
        t3.record(a3, "b()", CachedStep({"path": "a()/b()"}), 1.0)
        assert st.save_tree(t3) >= 1
        t4, rep4 = st.load_tree("task", "d0")  # same process: the rewritten record keeps its place
    assert rep4.dropped == 0 and t4.lookup(["a()", "b()"]).hit
    assert t4.lookup(["a()"]).node.result.observation == {"widget": "re-executed"}
    with CacheStore(root) as st:
        t5, rep5 = st.load_tree("task", "d0")
    assert rep5.dropped == 0 and len(t5) == 4


def test_old_snapshot_records_are_skipped_and_their_blobs_collected(tmp_path):
    """Stores written while the store also kept snapshot deltas (``snap`` records) still load."""
    from bunshin_gym.cache.store import _line
    root = tmp_path / "s"
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t, 2, 3)
    with CacheStore(root) as st:
        st.save_tree(t)
        n = t.lookup(["click(id=0, d=0)"]).node
        chunk = st.put_blob(b"page chunk of an old snapshot delta")
    with open(root / "journal.jsonl", "ab") as f:
        f.write(_line({"op": "snap", "tree": t.key, "node": n.key, "meta": {"backend": "memfile"},
                       "files": {"pages.img": {"size": 35, "chunks": [chunk]}}}))
    with CacheStore(root) as st:
        t2, rep = st.load_tree("task", "d0", readonly=readonly)
        assert as_dict(t2) == as_dict(t) and rep.dropped == 0 and st.bad_lines == 0
        assert st.compact(gc=True) == 1 and not _blob_of(root, chunk).exists()
    assert b'"snap"' not in (root / "manifest.jsonl").read_bytes()
    with CacheStore(root) as st:
        t3, rep3 = st.load_tree("task", "d0", readonly=readonly)
    assert as_dict(t3) == as_dict(t) and rep3.dropped == 0


READER = textwrap.dedent("""
    import sys, json
    sys.path.insert(0, {repo!r})
    from bunshin_gym.cache import CacheStore
    st = CacheStore({root!r})
    t, rep = st.load_tree("task", "d0", readonly=lambda s: s.startswith("read("))
    hits = sum(t.lookup(list(n.path())).hit for n in t.iter_nodes() if n.parent is not None)
    st2 = CacheStore({root!r})
    print(json.dumps({{"nodes": len(t) - 1, "hits": hits, "dropped": rep.dropped}}))
""")


def test_other_processes_read_and_extend_the_store(tmp_path):
    import json
    root = tmp_path / "s"
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t, 8, 5)
    with CacheStore(root) as st:
        st.save_tree(t)
    code = READER.format(repo=str(REPO), root=str(root))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    expected = len(t) - 1
    assert all(o == {"nodes": expected, "hits": expected, "dropped": 0} for o in outs)
    # concurrent writers from two processes: both trees' nodes end up in the store
    writer = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from bunshin_gym.cache import CacheStore, PrefixTree, CachedStep
        st = CacheStore({str(root)!r})
        t = PrefixTree("task", "d0")
        w = sys.argv[1]
        for i in range(30):
            n = t.record(t.root, f"w{{w}}({{i}})", CachedStep({{"path": f"w{{w}}({{i}})"}}), 0.0)
            st.save_tree(t)
    """)
    ws = [subprocess.Popen([sys.executable, "-c", writer, str(k)]) for k in range(2)]
    for w in ws:
        assert w.wait(60) == 0
    with CacheStore(root) as st:
        st.compact()
        t2, rep = st.load_tree("task", "d0", readonly=readonly)
    assert rep.dropped == 0 and len(t2) - 1 == expected + 60


def test_compaction_preserves_records_and_refresh_sees_other_writers(tmp_path):
    root = tmp_path / "s"
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t, 5, 4)
    a, b = CacheStore(root), CacheStore(root)
    a.save_tree(t)
    b.refresh()
    assert b.tree_ids() == [("task", "d0")]
    a.compact()
    assert (root / "journal.jsonl").stat().st_size == 0
    t.record(t.root, "late()", CachedStep({"path": "late()"}), 0.0)
    a.save_tree(t)
    t2, _ = b.load_tree("task", "d0", readonly=readonly)
    assert as_dict(t2) == as_dict(t)
    a.close(); b.close()


def test_refuses_foreign_directories(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "something.txt").write_text("hi")
    with pytest.raises(StoreFormatError, match="not empty"):
        CacheStore(tmp_path / "d")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "FORMAT").write_text('{"format": "bunshin-cache-store", "version": 99}')
    with pytest.raises(StoreFormatError, match="version"):
        CacheStore(tmp_path / "e")


def test_entries_whose_readonly_annotation_changed_are_dropped(tmp_path):
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t, 2, 2)
    with CacheStore(tmp_path / "s") as st:
        st.save_tree(t)
        t2, rep = st.load_tree("task", "d0", readonly=None)  # now nothing is read-only
    assert rep.side_entries == 0 and rep.dropped == 2
    assert all(not n.side for n in t2.iter_nodes()) and len(t2) == len(t)


def test_compact_gc_removes_orphan_blobs_only(tmp_path):
    t = PrefixTree("task", "d0", readonly=readonly)
    build_tree(t, 3, 3)
    with CacheStore(tmp_path / "s") as st:
        st.save_tree(t)
        orphan = st.put_blob(b"orphan from a crashed writer")
        assert st.compact(gc=True) == 1
        assert not _blob_of(tmp_path / "s", orphan).exists()
        t2, rep = st.load_tree("task", "d0", readonly=readonly)
    assert as_dict(t2) == as_dict(t) and rep.dropped == 0
