"""Task files: every shipped task validates, has an oracle and its shipped files; bad tasks give clear errors;
getters and metrics behave on recorded states (files made here)."""
from __future__ import annotations

import copy
import os
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from envs.osworld.errors import EvaluatorError, TaskConfigError, TaskValidationError
from envs.osworld.evaluators import METRICS, evaluate
from envs.osworld.tasks import (ORACLES_DIR, TASK_FILES_DIR, Task, load_oracle, load_task, load_tasks,
                                task_from_dict, url_to_task_file)

TASKS = load_tasks()


def test_at_least_30_tasks_across_the_five_apps():
    assert len(TASKS) >= 30
    apps = Counter(t.related_apps[0] for t in TASKS)
    assert {"os", "mousepad", "libreoffice_calc", "libreoffice_writer", "chrome"} <= set(apps)
    assert all(apps[a] >= 5 for a in ("os", "mousepad", "libreoffice_calc", "libreoffice_writer", "chrome")), apps


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_task_is_frozen_has_oracle_and_shipped_files(task):
    assert isinstance(task, Task)
    with pytest.raises(Exception):
        task.instruction = "x"  # frozen
    oracle = load_oracle(task.id)
    assert oracle and oracle[-1] == "DONE"
    assert all(isinstance(a, str) for a in oracle)
    for step in task.config:
        if step.type == "download":
            for f in step.parameters["files"]:
                assert url_to_task_file(f["url"]).is_file()
    for g in task.evaluator.expected:
        if g is not None and g["type"] == "cloud_file":
            assert url_to_task_file(g["path"]).is_file()


def test_every_oracle_belongs_to_a_task():
    ids = {t.id for t in TASKS}
    assert {p.stem for p in ORACLES_DIR.glob("*.json")} == ids


BASE = {"id": "t1", "instruction": "do it", "config": [], "evaluator": {"func": "exact_match",
        "result": {"type": "rule", "rules": "a"}, "expected": {"type": "rule", "rules": {"expected": "a"}}}}


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d.pop("id"), "missing required field 'id'"),
    (lambda d: d.update(instruction=3), "field 'instruction' must be a string"),
    (lambda d: d.update(config={"type": "sleep"}), "'config' must be a list"),
    (lambda d: d.update(config=[{"type": "slep", "parameters": {"seconds": 1}}]), "Did you mean 'sleep'"),
    (lambda d: d.update(config=[{"type": "sleep", "parameters": {}}]), "misses parameter(s) ['seconds']"),
    (lambda d: d.update(config=[{"type": "download", "parameters": {"files": [{"url": "x"}]}}]), "'files' must be a list"),
    (lambda d: d["evaluator"].update(func="exact_mach"), "did you mean 'exact_match'"),
    (lambda d: d["evaluator"].update(func=["exact_match", "fuzzy_match"]), "must be a list of 2 entries"),
    (lambda d: d["evaluator"].update(conj="xor"), "'conj' must be 'and' or 'or'"),
    (lambda d: d["evaluator"]["result"].update(type="vm_fiel"), "did you mean 'vm_file'"),
    (lambda d: d.update(related_apps="os"), "'related_apps' must be a list"),
    (lambda d: d.pop("evaluator"), "must be an object with at least 'func'"),
])
def test_invalid_task_raises_error_naming_the_field(mutate, fragment):
    d = copy.deepcopy(BASE)
    mutate(d)
    with pytest.raises(TaskValidationError) as e:
        task_from_dict(d, "bad.json")
    assert fragment in str(e.value) and "bad.json" in str(e.value)


def test_load_task_reports_bad_json_with_its_path(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{nope")
    with pytest.raises(TaskValidationError, match="broken.json: not valid JSON"):
        load_task(p)


def test_missing_shipped_file_is_a_config_error():
    with pytest.raises(TaskConfigError, match="without internet"):
        url_to_task_file("https://example.org/data/not-shipped.xlsx")


class _StateOnly:
    """A recorded end state: a directory standing in for HOME; no desktop needed for file getters."""

    def __init__(self, home: Path):
        self.home = home
        self.run_dir = home / ".bunshin-run"

    def vm_path(self, p):
        return str(self.home) + p[len("/home/user"):] if p.startswith("/home/user") else p

    def map_command(self, c):
        return c


def test_evaluate_conj_or_and_with_a_recorded_state(tmp_path):
    (tmp_path / "a.txt").write_text("hello world\n")
    s = _StateOnly(tmp_path)
    t = task_from_dict({**BASE, "evaluator": {
        "func": ["file_contains", "file_contains"], "conj": "and",
        "result": [{"type": "vm_file", "path": "/home/user/a.txt", "dest": "a.txt"}] * 2,
        "expected": [{"type": "rule", "rules": {"expected": ["hello"]}}, {"type": "rule", "rules": {"expected": ["bye"]}}]}})
    assert evaluate(t, s) == 0.0
    t_or = task_from_dict({**t.to_dict(), "evaluator": {**t.to_dict()["evaluator"], "conj": "or"}})
    assert evaluate(t_or, s) == 1.0
    details = []
    assert evaluate(t, s, "FAIL", details=details) == 0.0  # FAIL on a feasible task


def test_infeasible_task_scores_only_fail():
    t = task_from_dict({**BASE, "evaluator": {"func": "infeasible"}})
    assert evaluate(t, None, "FAIL") == 1.0
    assert evaluate(t, None, "DONE") == 0.0


def test_missing_result_file_scores_zero_not_error(tmp_path):
    s = _StateOnly(tmp_path)
    for func in ("compare_text_file", "compare_table", "compare_docx_files", "compare_csv", "check_json", "diff_text_file"):
        t = task_from_dict({**BASE, "evaluator": {"func": func,
                            "result": {"type": "vm_file", "path": "/home/user/none.bin", "dest": "none.bin"},
                            "expected": {"type": "rule", "rules": {}}}})
        assert evaluate(t, s) == 0.0, func


def test_unknown_rule_type_in_compare_table_is_a_task_error(tmp_path):
    import shutil
    shutil.copy(TASK_FILES_DIR / "budget.xlsx", tmp_path / "b.xlsx")
    with pytest.raises(EvaluatorError, match="rule type 'sparkline' unsupported"):
        METRICS["compare_table"](str(tmp_path / "b.xlsx"), None, rules=[{"type": "sparkline"}])


def test_metric_names_include_osworlds_common_ones():
    for name in ("exact_match", "check_include_exclude", "diff_text_file", "compare_table", "compare_csv",
                 "compare_docx_files", "check_json", "file_contains", "compare_text_file", "is_in_list",
                 "match_in_list", "literal_match", "fuzzy_match", "check_csv", "is_expected_active_tab",
                 "is_expected_tabs", "check_accessibility_tree"):
        assert name in METRICS


def test_check_accessibility_tree_on_a_recorded_tree():
    xml = ('<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state">'
           '<application name="mousepad"><frame name="todo.txt - Mousepad" st:active="true">'
           '<text name="">buy milk</text></frame></application></desktop-frame>')
    f = METRICS["check_accessibility_tree"]
    assert f(xml, [{"selectors": ["application[name=mousepad] text"], "text": "buy milk", "exact": True}]) == 1.0
    assert f(xml, [{"xpath": "//frame[@st:active='true']"}]) == 1.0
    assert f(xml, [{"selectors": ["application[name=gedit]"]}]) == 0.0


def test_committed_task_and_oracle_files_match_the_generator():
    from envs.osworld import make_tasks
    files = make_tasks.render()
    stale = [str(p) for p, text in files.items() if not p.exists() or p.read_text() != text]
    assert not stale, f"run `python -m envs.osworld.make_tasks`; stale: {stale}"
    assert {p.name for p in make_tasks.T.glob("*.json")} == {p.name for p in files if p.parent == make_tasks.T}


@pytest.mark.desktop
def test_config_steps_run_on_the_desktop(clean_desktop):
    from envs.osworld.tasks import run_config
    d = clean_desktop
    run_config(d, [
        {"type": "command", "parameters": {"command": "mkdir -p /home/user/Desktop/cfg && echo hi > /home/user/Desktop/cfg/a.txt", "shell": True}},
        {"type": "execute", "parameters": {"command": ["python", "-c", "open('/home/user/Desktop/cfg/b.txt', 'w').write('py')"]}},
        {"type": "download", "parameters": {"files": [{"url": "https://x.example/a/todo.txt?raw=1", "path": "/home/user/Desktop/cfg/todo.txt"}]}},
        {"type": "upload_file", "parameters": {"files": [{"local_path": "names.txt", "path": "/home/user/Desktop/cfg/names.txt"}]}},
        {"type": "launch", "parameters": {"command": "mousepad /home/user/Desktop/cfg/a.txt"}},
        {"type": "activate_window", "parameters": {"window_name": "a.txt - Mousepad"}},
        {"type": "sleep", "parameters": {"seconds": 0.1}},
        {"type": "close_window", "parameters": {"window_name": "Mousepad", "by_class": True}},
        {"type": "sleep", "parameters": {"seconds": 1}},
    ])
    cfg = d.home / "Desktop" / "cfg"
    assert (cfg / "a.txt").read_text() == "hi\n" and (cfg / "b.txt").read_text() == "py"
    assert (cfg / "todo.txt").read_text().startswith("write report")
    assert (cfg / "names.txt").read_text().startswith("Mallory")
    assert d.find_window("Mousepad", by_class=True) is None
    with pytest.raises(TaskConfigError, match=r"config step 0 \(open\).*does not exist"):
        run_config(d, [{"type": "open", "parameters": {"path": "/home/user/nope.xlsx"}}])


@pytest.mark.parametrize("writes", [True, False])
def test_an_oracle_save_that_does_not_write_the_file_fails(tmp_path, monkeypatch, writes):
    """Writer's accessibility tree is the same saved or not: the save step's error is what tells a replay
    whose save was lost from its recording. Run on a stand-in keyboard (Ctrl+S writes the file, or not)
    and a clock that does not wait; the desktop side of saving is the oracles' own tests."""
    import re
    import types

    saving = {t.id: [s for s in load_oracle(t.id) if isinstance(s, str) and "st_mtime_ns" in s] for t in TASKS}
    assert sum(map(bool, saving.values())) >= 10  # every Calc/Writer task's oracle saves its document
    saves = {s for steps in saving.values() for s in steps}
    monkeypatch.setenv("HOME", str(tmp_path))
    for code in saves:
        doc = Path(os.path.expanduser(re.search(r"expanduser\('([^']+)'\)", code).group(1)))
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_bytes(b"before")
        os.utime(doc, ns=(0, 0))

        def ctrl_s(*keys, doc=doc):
            assert keys == ("ctrl", "s")
            if writes:
                doc.write_bytes(b"after")

        scope = {"pyautogui": types.SimpleNamespace(hotkey=ctrl_s), "time": types.SimpleNamespace(sleep=lambda s: None)}
        if writes:
            exec(code, scope)
        else:
            with pytest.raises(TimeoutError, match="the file was not written"):  # within 50 s, or on a quiet host
                exec(code, scope)


def test_an_oracle_types_only_once_the_desktop_has_handled_the_keys_before():
    """Under load Calc handled arrow/Tab keys pressed just before typing after the typed text (the row landed
    in the wrong cells, the oracle scored 0). Run alone in a new pid namespace, with a keyboard whose every
    key keeps the desktop busy for 0.5 s: the oracle types only after all of it has run."""
    code = load_oracle("calc-average")[0]
    prog = ("import subprocess, sys, time, types\nbusy = []\n"
            "def key(*keys):\n"
            "    busy.append(subprocess.Popen([sys.executable, '-c', "
            "'import time\\nt = time.monotonic()\\nwhile time.monotonic() - t < 0.5: pass']))\n"
            "def typewrite(text, interval):\n"
            "    pending = sum(p.poll() is None for p in busy)\n"
            "    print('typed', repr(text), 'after', len(busy), 'keys,', pending, 'still handled', flush=True)\n"
            "pyautogui = types.SimpleNamespace(hotkey=key, press=key, typewrite=typewrite)\n" + code)
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", prog],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "typed 'Average\\t=AVERAGE(B2:B5)\\n' after 4 keys, 0 still handled", r.stdout


def test_an_oracle_save_gives_up_once_nothing_runs_in_the_desktop(tmp_path):
    """A detour that opened a menu or dialog leaves Ctrl+S unanswered and the desktop idle: the save step
    fails as soon as nothing has run for 5 s (it waited 50 s; the epoch bench's slowest step). Run alone in
    a new pid namespace, as a desktop whose app waits for a click, with a keyboard that saves nothing."""
    code = next(s for s in load_oracle("calc-add-row") if isinstance(s, str) and "st_mtime_ns" in s)
    doc = tmp_path / "Documents" / "budget.xlsx"
    doc.parent.mkdir()
    doc.write_bytes(b"before")
    prog = "import time, types\npyautogui = types.SimpleNamespace(hotkey=lambda *keys: None)\n" + code
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", prog],
                       env={**os.environ, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "nothing ran in the desktop for 5 s after Ctrl+S" in r.stderr, r.stderr[-2000:]
