"""OSWorldAdapter without a desktop: workspace spec, task loading, canonical actions round-trip to step calls."""
from __future__ import annotations

import json

import pytest

from bunshin_gym import ActionError
from envs.osworld.env import HOME_READY, OSWorldAdapter
from forkcore.spec import validate_spec


def test_workspace_spec_seeds_home_first_then_the_desktop():
    a = OSWorldAdapter(screen_size=(1280, 800))
    spec = a.workspace_spec()
    validate_spec(spec)
    names = [s.name for s in spec.services]
    assert names == ["home", "xvfb", "dbus", "a11y", "wm"]
    assert spec.services[0].ready == f"file:{HOME_READY}"
    assert "1280x800x24" in spec.services[1].argv
    assert dict(spec.env)["HOME"] == "/home/user"
    assert all(dict(s.env).get("BUNSHIN_DESKTOP") == "osworld" for s in spec.services[1:])
    assert "BUNSHIN_DESKTOP" not in dict(spec.env), "the executor must not look like a desktop app (reset kills those)"
    assert spec.to_json() != OSWorldAdapter().workspace_spec().to_json()


def test_load_task_by_id_dict_and_errors():
    a = OSWorldAdapter()
    t = a.load_task("os-mkdir-nested")
    assert t.goal.startswith("Create the nested directory") and t.config["id"] == "os-mkdir-nested"
    assert a.load_task(task_config=t.config).digest == t.digest
    with pytest.raises(ValueError, match="no such OSWorld task"):
        a.load_task("nope")
    with pytest.raises(ValueError):
        a.load_task(task_config={"id": "x"})
    assert a.oracle_actions(t)[-1] == "DONE"


@pytest.mark.parametrize("space,action", [
    ("pyautogui", "pyautogui.click(10, 20)  "),
    ("pyautogui", "DONE"),
    ("pyautogui", "import time\ntime.sleep(0.1)"),
    ("computer_13", '{"action_type": "CLICK", "x": 5, "y": 6}'),
    ("computer_13", {"action_type": "TYPING", "parameters": {"text": "hi"}}),
    ("computer_13", "FAIL"),
])
def test_canonical_actions_round_trip_to_step_calls(space, action):
    a = OSWorldAdapter(action_space=space)
    sig = a.canonical_action(action)
    method, params = a.step_call(sig)
    assert method == "osworld.step" and params["action_space"] == space
    again = params["action"] if not isinstance(params["action"], dict) else json.dumps(params["action"])
    assert a.canonical_action(again) == sig


@pytest.mark.parametrize("space,bad", [("pyautogui", "pyautogui.click("), ("pyautogui", 3), ("pyautogui", ""),
                                       ("computer_13", "{not json"), ("computer_13", '{"action_type": "JUMP"}'),
                                       ("computer_13", '{"action_type": "CLICK", "x": 99999, "y": 1}')])
def test_malformed_actions_raise_action_error(space, bad):
    with pytest.raises(ActionError):
        OSWorldAdapter(action_space=space).canonical_action(bad)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="action_space"):
        OSWorldAdapter(action_space="mouse")
    with pytest.raises(ValueError, match="screen_size"):
        OSWorldAdapter(screen_size=(10, 10))
