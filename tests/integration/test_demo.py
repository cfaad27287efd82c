"""The main job, at CI scale: `bash scripts/demo.sh --quick` (the README's first command: set-up, doctor, then
`bunshin demo`), through the same code path as the full demo; it exits 0 and prints both tables."""
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.criu, pytest.mark.browser, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_demo_runs_the_main_command_and_prints_both_tables(tmp_path):
    r = subprocess.run(["bash", "scripts/demo.sh", "--quick", "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=900)
    out = r.stdout
    assert r.returncode == 0, f"exit {r.returncode}\n{out[-4000:]}\n{r.stderr[-4000:]}"
    assert "main job: everything it needs is here" in out and "MISSING" not in out, out
    epoch = out[out.index("== GRPO epoch"):out.index("== fork latency")]
    assert re.search(r"^base\s+\d+\.\d\s+\d+", epoch, re.M) and re.search(r"^cache_spec\s+\d+\.\d\s+\d+", epoch, re.M), epoch
    assert "rewards identical across configurations: True" in epoch, epoch
    fork = out[out.index("== fork latency"):]
    for backend in ("private", "ksm"):
        assert re.search(rf"^{backend}\s+1\s+\d+\.\d+", fork, re.M), fork
        assert re.search(rf"^{backend}\s+1 \(standby thaw\)\s+\d+\.\d+", fork, re.M), fork
    assert (tmp_path / "epoch" / "epoch.json").is_file() and (tmp_path / "fork" / "fork.json").is_file()
