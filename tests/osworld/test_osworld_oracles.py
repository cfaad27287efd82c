"""Every shipped task: its initial state scores 0.0 and its oracle trajectory scores 1.0; per app, a wrong
end state scores 0.0. Runs on the one shared host desktop (reset between tasks)."""
from __future__ import annotations

import pytest

from envs.osworld.evaluators import evaluate
from envs.osworld.harness import run_trajectory, setup_task
from envs.osworld.tasks import load_oracle, load_task, load_tasks, TASKS_DIR

TASKS = load_tasks()


def _param(t):
    # LibreOffice / Chromium tasks take ~8-11 s each on 2 busy cores; the whole file ~4 min, so not `slow`.
    return pytest.param(t, id=t.id, marks=[pytest.mark.desktop])


def _score(desktop, task, actions, space="pyautogui"):
    details: list = []
    last, errors = run_trajectory(desktop, actions, space)
    assert not any(errors), errors
    return evaluate(task, desktop, last, details=details), details


@pytest.mark.parametrize("task", [_param(t) for t in TASKS])
def test_initial_state_scores_zero_and_oracle_scores_one(desktop, task):
    setup_task(desktop, task)
    details: list = []
    assert evaluate(task, desktop, None, details=details) == 0.0, details
    score, details = _score(desktop, task, load_oracle(task.id))
    assert score == 1.0, details


WRONG = [
    ("os-mkdir-nested", ["pyautogui.typewrite('mkdir -p ~/Desktop/projects/alpha\\n', interval=0.01); time.sleep(0.6)", "DONE"]),
    ("edit-append-line", ["pyautogui.hotkey('ctrl', 'End'); pyautogui.typewrite('buy bread\\n', interval=0.01)",
                          "pyautogui.hotkey('ctrl', 's'); time.sleep(1)", "DONE"]),
    ("calc-sum-total", ["pyautogui.hotkey('ctrl', 'Home'); pyautogui.press('down', presses=5, interval=0.05); "
                        "pyautogui.typewrite('Total\\t99\\n', interval=0.01); time.sleep(0.5)",
                        "pyautogui.hotkey('ctrl', 's'); time.sleep(2)", "DONE"]),
    ("writer-append-paragraph", ["pyautogui.hotkey('ctrl', 'End'); pyautogui.press('enter'); "
                                 "pyautogui.typewrite('Thanks!', interval=0.01); time.sleep(0.3)",
                                 "pyautogui.hotkey('ctrl', 's'); time.sleep(2)", "DONE"]),
    ("files-new-folder", ["pyautogui.hotkey('ctrl', 'shift', 'n'); time.sleep(1.5)",
                          "pyautogui.hotkey('ctrl', 'a'); pyautogui.typewrite('Archiv\\n', interval=0.01); time.sleep(1)", "DONE"]),
    ("chrome-open-about", ["pyautogui.hotkey('ctrl', 'l'); time.sleep(0.3); "
                           "pyautogui.typewrite('127.0.0.1:18765/contact.html\\n', interval=0.01); time.sleep(1.5)", "DONE"]),
]


@pytest.mark.desktop
@pytest.mark.parametrize("task_id, actions", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_end_state_scores_zero(desktop, task_id, actions):
    task = load_task(TASKS_DIR / f"{task_id}.json")
    setup_task(desktop, task)
    score, details = _score(desktop, task, actions)
    assert score == 0.0, details


@pytest.mark.desktop
def test_computer13_trajectory_solves_a_task(desktop):
    task = load_task(TASKS_DIR / "os-symlink.json")
    setup_task(desktop, task)
    actions = [{"action_type": "TYPING", "text": "ln -s ~/Documents/report-v3.txt ~/Desktop/latest"},
               {"action_type": "PRESS", "key": "enter"}, {"action_type": "WAIT"}, {"action_type": "DONE"}]
    score, details = _score(desktop, task, actions, "computer_13")
    assert score == 1.0, details


@pytest.mark.desktop
def test_fail_on_a_feasible_task_scores_zero(desktop):
    task = load_task(TASKS_DIR / "os-mkdir-nested.json")
    setup_task(desktop, task)
    score, _ = _score(desktop, task, load_oracle(task.id)[:-1] + ["FAIL"])
    assert score == 0.0
