"""Calling OSWorld's own evaluator functions (PyPI desktop-env, in its separate venv) from the differential
tests: `reference(cases)` runs them through osworld_reference_runner.py, `assert_agree(cases)` compares every
case with ours (METRICS / GETTERS). A case is (module, func, args, kwargs): module is OSWorld's metric
module ("slides") or "getters.<module>"; args are JSON values (file paths made by the test)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REF_PY = Path(os.environ.get("BUNSHIN_PREFIX", "/opt/bunshin")) / "osworld-ref-venv" / "bin" / "python"
RUNNER = Path(__file__).with_name("osworld_reference_runner.py")

needs_reference = pytest.mark.skipif(
    not REF_PY.exists(), reason=f"needs OSWorld's reference metrics: bash envs/osworld/install_reference.sh "
                                f"(creates {REF_PY.parent.parent})")


def reference(cases: list[tuple[str, str, list, dict]], env_dir: str | None = None) -> list[dict]:
    """OSWorld's results, one {"score"} / {"value"} / {"error"} per case."""
    payload = [{"module": m, "func": fn, "args": a, "kwargs": k, "env_dir": env_dir} for m, fn, a, k in cases]
    p = subprocess.run([str(REF_PY), "-W", "ignore", str(RUNNER)], input=json.dumps(payload), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert len(out) == len(cases)
    return out


def assert_agree(cases: list[tuple[str, str, list, dict]]) -> None:
    """Every metric case scores the same here as in OSWorld (within 1e-6); OSWorld raising is a mismatch."""
    from envs.osworld.evaluators import METRICS

    mismatches = []
    for (m, fn, a, k), r in zip(cases, reference(cases)):
        ours = METRICS[fn](*json.loads(json.dumps(a)), **k)
        if "error" in r:
            mismatches.append((fn, a, k, f"OSWorld raised {r['error']}", ours))
        elif abs(float(ours) - r["score"]) > 1e-6:
            mismatches.append((fn, a, k, r["score"], ours))
    assert not mismatches, "\n".join(map(repr, mismatches))
