"""Failed dumps' and restores' CRIU logs are kept for reading, within a bound on their folder."""
from __future__ import annotations

import os

from forkcore import criu


def test_a_kept_log_is_cut_in_the_middle_when_large(tmp_path):
    src = tmp_path / "dump.log"
    src.write_bytes(b"h" * (1 << 20) + b"m" * (4 << 20) + b"t" * (1 << 20))
    kept = criu.keep_log(src, tmp_path / "failed" / "dump-1.log", max_bytes=2 << 20)
    text = kept.read_bytes()
    assert text.startswith(b"h" * (1 << 20)) and text.endswith(b"t" * (1 << 20))
    assert b"bytes left out" in text and b"m" not in text


def test_keeping_a_log_deletes_the_oldest_ones_beyond_the_folders_bound(tmp_path):
    failed = tmp_path / "failed"
    failed.mkdir()
    for i in range(5):
        old = failed / f"restore-{i}.log"
        old.write_bytes(b"x" * 1000)
        os.utime(old, (1000 + i, 1000 + i))
    src = tmp_path / "dump.log"
    src.write_bytes(b"y" * 1500)
    kept = criu.keep_log(src, failed / "dump-new.log", max_dir_bytes=3500)
    assert kept.read_bytes() == b"y" * 1500
    assert sorted(p.name for p in failed.iterdir()) == ["dump-new.log", "restore-3.log", "restore-4.log"]


def test_the_log_just_kept_stays_even_when_alone_over_the_bound(tmp_path):
    src = tmp_path / "dump.log"
    src.write_bytes(b"z" * 5000)
    kept = criu.keep_log(src, tmp_path / "failed" / "dump-1.log", max_dir_bytes=100)
    assert kept.exists() and kept.stat().st_size == 5000
