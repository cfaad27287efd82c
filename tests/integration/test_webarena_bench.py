"""benchmarks/webarena_bench.py at CI scale (--quick): it runs end to end and writes a complete report.

Quick scale: 1 cold start, 2 fork resets, task 40's oracle + one round of the scripted sequence, PSS at 1 env;
the BrowserGym baseline (tuned only) runs when scripts/install_browsergym.sh has installed it. < 2 min.
"""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.criu, pytest.mark.browser]


def test_quick_run_writes_json_and_png_with_every_measurement(tmp_path):
    from benchmarks.webarena_bench import STEP_KINDS, Args, browsergym_problem, effective, run

    args = Args(out=str(tmp_path), quick=True)
    result = run(args)

    on_disk = json.loads((tmp_path / "webarena.json").read_text())
    assert on_disk["table"] == result["table"]
    assert (tmp_path / "webarena.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bun = result["bunshin"]
    assert len(bun["fresh_reset_s"]) == 1 and len(bun["fork_reset_s"]) == 2
    assert all(t > 0 for t in bun["fresh_reset_s"] + bun["fork_reset_s"])
    for kind in STEP_KINDS:  # every scripted action type was executed and timed
        assert bun["step_s"].get(kind), f"no {kind} step timed"
    assert bun["errors"] == [], "scripted and oracle actions run without action errors"
    assert bun["rewards"] == {"40": 1.0}, "the oracle trajectory still solves its task"
    assert [p["envs"] for p in bun["pss"]] == [1] and bun["pss"][0]["pss_mb_per_env"] > 10

    if browsergym_problem(effective(args)) is None:
        bg = result["browsergym"]
        tuned = bg["configs"]["tuned"]
        assert len(tuned["reset_s"]) == 2 and tuned["errors"] == []
        assert set(STEP_KINDS) <= set(tuned["step_s"])
        assert bg["pss"][0]["envs"] == 1 and bg["pss"][0]["pss_mb_per_env"] > 10
    else:
        assert "skipped" in result["browsergym"]
