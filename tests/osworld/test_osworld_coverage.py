"""`bunshin osworld coverage` on a folder of OSWorld-format tasks the test writes: each task stops at the stage
it must, with the reason; the per-domain table, JSON and PNG. (The real OSWorld set lives outside the repo.)"""
from __future__ import annotations

import json

from typer.testing import CliRunner

from envs.osworld.cli import app
from envs.osworld.coverage import coverage

OK_EVAL = {"func": "exact_match", "result": {"type": "vm_command_line", "command": "echo hi", "shell": True},
           "expected": {"type": "rule", "rules": {"expected": "hi\n"}}}


def write(tmp_path, domain: str, tid: str, **fields) -> None:
    d = tmp_path / "evaluation_examples" / "examples" / domain
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{tid}.json").write_text(json.dumps({"id": tid, "instruction": "x", "config": [], "evaluator": OK_EVAL,
                                               **fields}))


def examples(tmp_path, monkeypatch):
    monkeypatch.setenv("BUNSHIN_OSWORLD_CACHE", str(tmp_path / "cache"))
    write(tmp_path, "os", "ready")
    write(tmp_path, "os", "infeasible", evaluator={"func": "infeasible"})
    write(tmp_path, "os", "no-config-field")
    (tmp_path / "evaluation_examples/examples/os/no-config-field.json").write_text(json.dumps({"id": "n", "instruction": "x",
                                                                        "evaluator": OK_EVAL}))
    write(tmp_path, "os", "broken", evaluator="nope")
    write(tmp_path, "chrome", "login", config=[{"type": "login", "parameters": {}}])
    write(tmp_path, "chrome", "metric", evaluator={**OK_EVAL, "func": "no_such_metric"})
    write(tmp_path, "vlc", "app", related_apps=["no-such-app"])
    write(tmp_path, "os", "file", config=[{"type": "download", "parameters": {"files": [
        {"url": "http://127.0.0.1:9/never.txt", "path": "/home/user/x"}]}}])
    (tmp_path / "evaluation_examples" / "test_all.json").write_text(json.dumps(
        {"os": ["ready", "infeasible", "no-config-field", "broken", "file"], "chrome": ["login", "metric"],
         "vlc": ["app"]}))
    return tmp_path / "evaluation_examples"


def test_each_task_stops_at_its_first_missing_piece_with_the_reason(tmp_path, monkeypatch):
    ran = []
    results = {r.id: r for r in coverage(examples(tmp_path, monkeypatch), run=True,
                                         run_task=lambda raw: ran.append(raw["id"]) or "")}
    assert results["ready"].passed == ["loads", "config", "evaluator", "apps", "files", "runs"]
    assert results["infeasible"].passed[-1] == "runs" and results["no-config-field"].passed[-1] == "runs"
    assert sorted(ran) == ["infeasible", "n", "ready"]
    assert results["broken"].passed == [] and "evaluator" in results["broken"].reason
    assert results["login"].passed == ["loads"] and results["login"].missing == {"config_types": ["login"]}
    assert results["metric"].passed == ["loads", "config"] and "metric no_such_metric" in results["metric"].reason
    assert results["app"].passed[-1] == "evaluator" and results["app"].missing == {"apps": ["no-such-app"]}
    assert results["file"].passed[-1] == "apps" and "http://127.0.0.1:9/never.txt" in results["file"].reason


def test_the_command_writes_the_table_json_and_png(tmp_path, monkeypatch):
    ex = examples(tmp_path, monkeypatch)
    r = CliRunner().invoke(app, ["coverage", "--examples", str(ex), "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "out/coverage.json").read_text())
    assert rep["domains"]["os"] == {"tasks": 5, "loads": 4, "config": 4, "evaluator": 4, "apps": 4, "files": 3}
    assert rep["domains"]["all"]["tasks"] == 8 and rep["missing"]["metrics"] == {"no_such_metric": 1}
    assert (tmp_path / "out/coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "os                       5" in r.output and "missing config_types: login (1)" in r.output


def test_a_run_that_raises_reports_the_headline_and_the_cause_below_it(monkeypatch):
    import gymnasium

    from envs.osworld.coverage import run_episode

    def broken_make(*a, **kw):
        raise RuntimeError("criu dump of workspace osworld-1 failed (exit 1):\n(00.2) Error (criu/cr-dump.c:9): "
                           "task 42 exited while seized\n...\n(00.3) tail")

    monkeypatch.setattr(gymnasium, "make", broken_make)
    reason = run_episode({"evaluator": {"func": "exact_match"}})
    assert reason.startswith("RuntimeError: criu dump of workspace osworld-1 failed")
    assert "task 42 exited while seized" in reason and "tail" not in reason
