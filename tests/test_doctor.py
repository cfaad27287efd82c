"""`bunshin doctor` tells what the main job needs from what only the tests or an optional backend use: a machine
that can run the main job shows no MISSING line, whatever the tests' extras."""
import json

from typer.testing import CliRunner

from bunshin_gym import doctor as doctor_module
from bunshin_gym.cli import app
from forkcore.capabilities import MAIN, OPTIONAL, TESTS, Capability


def _doctor(monkeypatch, caps):
    monkeypatch.setattr(doctor_module, "check_all", lambda: caps)
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    return result.output


def test_what_only_the_tests_or_an_optional_backend_use_is_absent_not_missing(monkeypatch):
    caps = [Capability("root", True, "running as root"),
            Capability("qemu", False, "not found", "bash scripts/test.sh (apt-get install qemu-system-x86)", TESTS),
            Capability("kmod device", False, "absent", "see kmod/README.md", OPTIONAL)]
    out = _doctor(monkeypatch, caps)
    assert "MISSING" not in out, out
    assert "absent  qemu" in out and "absent  kmod device" in out, out
    assert out.index("only the tests") < out.index("qemu") < out.index("optional") < out.index("kmod device"), out
    assert "main job: everything it needs is here" in out, out
    # negative control: the same machine without something the main job needs
    out = _doctor(monkeypatch, [Capability("chromium", False, "not found", "bash scripts/setup.sh", MAIN)] + caps)
    assert "MISSING chromium" in out and "main job: missing chromium" in out, out


def test_this_machine_runs_the_main_job_and_doctor_says_so():
    """After the set-up CI runs, the real checks find everything the main job needs; what is absent here (the
    kmod device: this kernel cannot load modules) is marked optional."""
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "MISSING" not in result.output and "main job: everything it needs is here" in result.output, result.output
    caps = {c["name"]: c for c in json.loads(CliRunner().invoke(app, ["doctor", "--json"]).output)}
    assert caps["qemu"]["needed_for"] == TESTS
    assert caps["kmod device"]["needed_for"] == caps["backend kmod"]["needed_for"] == OPTIONAL
    assert {c["needed_for"] for n, c in caps.items() if n.startswith(("criu", "chromium", "backend private"))} == {MAIN}
