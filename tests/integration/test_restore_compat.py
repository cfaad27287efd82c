"""Restore-compatibility checks (`bunshin doctor --deep`): every application of every env keeps working in a
restored clone, and Chromium launched as before the protection-key fix fails the check on a PKU CPU."""
from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from bunshin_gym import ENV_IDS, adapter_for
from bunshin_gym.compat import CheckResult, run_checks, run_suite
from forkcore.capabilities import cpu_has_pkeys


@pytest.mark.criu
@pytest.mark.browser
@pytest.mark.desktop
@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_application_of_the_env_works_in_a_restored_clone(env_id):
    results = run_checks([env_id])
    report = "\n".join(f"{'OK' if r.ok else 'FAIL'} {r.app} [{r.versions}]: {r.detail}" for r in results)
    assert len(results) >= 2, report
    assert all(r.ok for r in results), report
    assert all("not installed" not in r.versions for r in results), report


@pytest.mark.criu
@pytest.mark.browser
def test_chromium_launched_as_before_the_fix_fails_the_check_on_a_pku_cpu():
    if not cpu_has_pkeys():
        pytest.skip("this CPU has no memory protection keys, so Chromium never allocates one here; the FAIL path "
                    "runs in a PKU qemu guest instead (tests/forkcore/test_pkeys_guest.py)")
    suite = adapter_for("BunshinWebArena-v0").restore_checks()
    before_fix = dataclasses.replace(suite, spec=dataclasses.replace(suite.spec, allow_pkeys=True))
    chromium = run_suite(before_fix)[0]
    assert not chromium.ok and "crashed" in chromium.detail.lower(), chromium


def test_doctor_deep_prints_each_check_and_exits_nonzero_only_on_a_failed_one(monkeypatch):
    import bunshin_gym.compat as compat
    from bunshin_gym.cli import app

    results = [CheckResult("webarena", "Chromium (headless, Playwright)", "chromium 1.0", True, "new page", 1.0)]
    monkeypatch.setattr(compat, "run_checks", lambda *a, **kw: list(results))
    ok = CliRunner().invoke(app, ["doctor", "--deep"])
    assert ok.exit_code == 0 and "OK" in ok.output and "Chromium (headless, Playwright) [chromium 1.0]" in ok.output
    results.append(CheckResult("osworld", "LibreOffice Calc", "libreoffice-calc 7.4", False, "did not save", 60.0))
    bad = CliRunner().invoke(app, ["doctor", "--deep"])
    assert bad.exit_code == 1 and "FAIL" in bad.output and "did not save" in bad.output
