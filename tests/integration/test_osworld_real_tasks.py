"""Real OSWorld task files, unmodified, on BunshinOSWorld-v0 (issue 5: they "load and run unchanged").

The files are OSWorld's (evaluation_examples/examples/os/<id>.json in its public repository) and are not
part of this repository: point BUNSHIN_OSWORLD_EXAMPLES at that directory of a checkout to run these tests.
Chosen: the `os` tasks that need neither the internet (no `download` steps) nor GNOME-only settings.
Each gets an oracle written here (pyautogui code, as an agent would send) and a wrong ending.
"""
from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import pytest

import bunshin_gym  # noqa: F401 - registers the envs

pytestmark = [pytest.mark.criu, pytest.mark.desktop]
#: OSWorld's os-domain task files: $BUNSHIN_OSWORLD_EXAMPLES, else those of ../shared/osworld beside the checkout
SHARED_OS = Path(__file__).resolve().parents[3] / "shared/osworld/evaluation_examples/examples/os"
EXAMPLES = os.environ.get("BUNSHIN_OSWORLD_EXAMPLES", "") or (str(SHARED_OS) if SHARED_OS.is_dir() else "")


def _sh(cmd: str) -> str:
    return f"import subprocess; subprocess.run({cmd!r}, shell=True, check=True)"


_TERMINAL = ("pyautogui.hotkey('ctrl', 'alt', 't'); time.sleep(2); pyautogui.write({cmd!r}, interval=0.02); "
             "pyautogui.press('enter'); time.sleep(2)")
#: OSWorld task id → (oracle actions, a wrong ending). Ids are OSWorld's.
CASES = {
    # create /test in the root directory (needs sudo as `user`): typed into a terminal, as an agent would
    "43c2d64c-bab5-4dcb-a30c-b888321c319a": (
        [_TERMINAL.format(cmd="echo password | sudo -S mkdir /test"), "DONE"], ["DONE"]),
    # move ~/Desktop/todo.txt into ~/Desktop/done/ (files made by sudo in the config)
    "7688b85f-87a4-4e4a-b2f8-f3d6c3f29b82": (
        [_sh("mv ~/Desktop/todo.txt ~/Desktop/done/"), "DONE"], [_sh("rm ~/Desktop/todo.txt"), "DONE"]),
    # rename the directory todo_list_Jan_1 → todo_list_Jan_2
    "e0df059f-28a6-4169-924f-b9623e7184cc": (
        [_sh("mv ~/Desktop/todo_list_Jan_1 ~/Desktop/todo_list_Jan_2"), "DONE"],
        [_sh("mkdir ~/Desktop/todo_list_Jan_3"), "DONE"]),
    # end the running my_process.sh (started by the config with nohup)
    "cc9d4f34-1ca0-4a1b-8ff2-09302696acb9": ([_sh("pkill -f 'my_process[.]sh'"), "DONE"], ["DONE"]),
    # infeasible tasks: FAIL is the right answer
    "4783cc41-c03c-4e1b-89b4-50658f642bd5": (["FAIL"], ["DONE"]),
    "a462a795-fdc7-4b23-b689-e8b6df786b78": (["FAIL"], ["DONE"]),
}


def _task_file(task_id: str) -> Path:
    if not EXAMPLES:
        pytest.skip(f"OSWorld's task files are not at {SHARED_OS}: set BUNSHIN_OSWORLD_EXAMPLES to OSWorld's "
                    "evaluation_examples/examples/os directory (they are not committed here)")
    path = Path(EXAMPLES) / f"{task_id}.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: BUNSHIN_OSWORLD_EXAMPLES must hold OSWorld's os-domain task files")
    return path


def _play(task_id: str, actions: list[str]) -> tuple[float, list[str]]:
    env = gym.make("BunshinOSWorld-v0", task_config=str(_task_file(task_id)), action_space="pyautogui",
                   a11y=False)
    try:
        env.reset()
        reward, errors = 0.0, []
        for a in actions:
            _, reward, term, trunc, info = env.step(a)
            errors.append(info["last_action_error"])
            if term or trunc:
                break
        assert term, f"{task_id}: episode did not end after {actions}"
        return reward, errors
    finally:
        env.close()


@pytest.mark.parametrize("task_id", sorted(CASES))
def test_unmodified_osworld_task_oracle_scores_one_and_wrong_ending_zero(task_id):
    oracle, wrong = CASES[task_id]
    reward, errors = _play(task_id, oracle)
    assert reward == 1.0 and not any(errors), (reward, errors)
    reward, errors = _play(task_id, wrong)
    assert reward == 0.0, (reward, errors)
