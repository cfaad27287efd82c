"""A task file in OSWorld's own form (tests/osworld/data/, an `os` task written from memory of OSWorld's
evaluation_examples: its id, /home/user paths, the Ctrl+Alt+T terminal opened by a `python -c` pyautogui
config step, a vm_command_line + exact_match evaluator) loads and runs here unchanged. It differs from
OSWorld's file of that id; the unmodified OSWorld files run in tests/integration/test_osworld_real_tasks.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.osworld.evaluators import evaluate
from envs.osworld.harness import run_trajectory, setup_task
from envs.osworld.tasks import load_task

DATA = Path(__file__).with_name("data")
TASK = DATA / "e0df059f-28a6-4169-924f-b9623e7184cc.json"


def test_real_osworld_task_loads_unchanged():
    t = load_task(TASK)
    assert t.to_dict() == json.loads(TASK.read_text())
    assert t.snapshot == "os" and t.evaluator.funcs == ("exact_match",)
    assert [s.type for s in t.config] == ["execute", "execute"]


@pytest.mark.desktop
def test_real_osworld_task_runs_scores_zero_before_and_one_after_renaming(desktop):
    t = load_task(TASK)
    setup_task(desktop, t)
    assert (desktop.home / "Desktop" / "todo_list_Jan_1").is_dir()
    # the config's Ctrl+Alt+T opened a terminal, as on OSWorld's Ubuntu
    desktop.wait_window("xterm", by_class=True)
    desktop.wait_idle(timeout=10)
    assert evaluate(t, desktop) == 0.0
    last, errors = run_trajectory(desktop, [
        "pyautogui.typewrite('mv ~/Desktop/todo_list_Jan_1 ~/Desktop/todo_list_Jan_2\\n', interval=0.01); time.sleep(0.6)",
        "DONE"])
    assert not any(errors)
    assert evaluate(t, desktop, last) == 1.0
