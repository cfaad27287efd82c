"""Smoke run of benchmarks/lookup_bench.py at tiny scale (benchmarks are scripts, not timed tests)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "lookup_bench.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("lookup_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["lookup_bench"] = mod  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(mod)
    return mod


def test_lookup_bench_writes_json_and_png(tmp_path):
    bench = load_bench()
    args = bench.parse_args(["--nodes", "50,300", "--lookups", "200", "--out", str(tmp_path)])
    assert args.nodes == (50, 300) and args.lookups == 200
    rows = bench.main(args)
    data = json.loads((tmp_path / "lookup.json").read_text())
    assert data == rows and [r["nodes"] for r in rows] == [50, 300]
    assert all(0 < r["p50_us"] <= r["p99_us"] for r in rows)
    assert (tmp_path / "lookup.png").stat().st_size > 1000
