"""`bunshin bench reset` at CI scale: the JSON has the issue's fields, every standby reset thawed a clone, the
PNG is written (the latency targets live in the full benchmark, not here)."""
import json

import pytest

pytestmark = [pytest.mark.criu, pytest.mark.browser]


def test_reset_benchmark_writes_json_and_plot(tmp_path):
    from benchmarks.reset_bench import Args, run

    r = run(Args(env="BunshinWebArena-v0", n=3, think_median_s=1.0, browsergym="off", out=str(tmp_path)),
            progress=False)
    on_disk = json.loads((tmp_path / "reset.json").read_text())
    assert {"env", "n", "standby_p50_s", "restore_p50_s", "browsergym_p50_s"} <= set(on_disk)
    assert on_disk["n"] == 3 and on_disk["browsergym_p50_s"] is None
    assert r["configs"]["standby"]["sources"] == {"standby": 3}, "spaced resets find a refilled standby clone"
    assert r["configs"]["restore"]["sources"] == {"initial": 3}
    assert r["standby_p50_s"] < r["restore_p50_s"]
    assert (tmp_path / "reset.png").stat().st_size > 1000
