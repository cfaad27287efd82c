"""OSWorld's two action spaces: validation (no desktop) and execution on a real Xvfb desktop."""
from __future__ import annotations

import json
import os
import re
import time

import pytest

from envs.osworld.actions import (COMPUTER_13_SPEC, Action, ActionError, execute, parse_action,
                                  to_pyautogui)

# ------------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize("action", ["pyautogui.click(10, 20)", "import os\nprint(os.getcwd())", "WAIT", "DONE", "FAIL"])
def test_valid_pyautogui_actions_parse(action):
    a = parse_action(action, "pyautogui")
    assert isinstance(a, Action)
    assert a.canonical.startswith("pyautogui:")


@pytest.mark.parametrize("action, fragment", [
    (42, "must be a Python code string"),
    ({"action_type": "CLICK"}, "must be a Python code string"),
    ("", "is empty"),
    ("pyautogui.click(10, ", "not valid Python"),
])
def test_malformed_pyautogui_actions_return_clear_errors(action, fragment):
    e = parse_action(action, "pyautogui")
    assert isinstance(e, ActionError) and not e
    assert fragment in e.message


@pytest.mark.parametrize("action", [
    {"action_type": "MOVE_TO", "x": 10, "y": 10},
    {"action_type": "CLICK", "parameters": {"button": "right", "x": 5, "y": 6, "num_clicks": 2}},
    {"action_type": "CLICK"},
    {"action_type": "MOUSE_DOWN", "button": "left"},
    {"action_type": "MOUSE_UP"},
    {"action_type": "RIGHT_CLICK", "x": 1, "y": 1},
    {"action_type": "DOUBLE_CLICK"},
    {"action_type": "DRAG_TO", "x": 100, "y": 100},
    {"action_type": "SCROLL", "dx": 0, "dy": -3},
    {"action_type": "TYPING", "text": "hello <world>"},
    {"action_type": "PRESS", "key": "Enter"},
    {"action_type": "KEY_DOWN", "key": "shift"},
    {"action_type": "KEY_UP", "key": "shift"},
    {"action_type": "HOTKEY", "keys": ["ctrl", "s"]},
    {"action_type": "WAIT"}, {"action_type": "FAIL"}, {"action_type": "DONE"}, "WAIT", "DONE",
])
def test_every_computer13_action_type_parses_and_translates(action):
    a = parse_action(action, "computer_13")
    assert isinstance(a, Action), a
    code = to_pyautogui(a)
    if not a.special:
        compile(code, "<action>", "exec")


def test_computer13_covers_osworlds_action_types():
    assert set(COMPUTER_13_SPEC) == {"MOVE_TO", "CLICK", "MOUSE_DOWN", "MOUSE_UP", "RIGHT_CLICK", "DOUBLE_CLICK",
                                     "DRAG_TO", "SCROLL", "TYPING", "PRESS", "KEY_DOWN", "KEY_UP", "HOTKEY",
                                     "WAIT", "FAIL", "DONE"}


@pytest.mark.parametrize("action, fragment", [
    ("pyautogui.click()", "must be a dict"),
    ([1, 2], "must be a dict"),
    ({"x": 1}, "no 'action_type'"),
    ({"action_type": "CLIK"}, "Did you mean 'CLICK'"),
    ({"action_type": "CLICK", "x": 10}, "give both x and y"),
    ({"action_type": "CLICK", "x": "10", "y": 3}, "must be int/float"),
    ({"action_type": "CLICK", "x": 99999, "y": 3}, "off screen"),
    ({"action_type": "CLICK", "button": "up"}, "expected one of"),
    ({"action_type": "CLICK", "num_clicks": 7}, "expected 1, 2 or 3"),
    ({"action_type": "CLICK", "speed": 3}, "unknown parameter"),
    ({"action_type": "TYPING"}, "missing required parameter"),
    ({"action_type": "TYPING", "text": 5}, "must be str"),
    ({"action_type": "PRESS", "key": "hyperdrive"}, "unknown key"),
    ({"action_type": "HOTKEY", "keys": []}, "non-empty list"),
    ({"action_type": "HOTKEY", "keys": "ctrl+s"}, "must be list"),
    ({"action_type": "SCROLL", "dx": 0.5, "dy": 1}, "must be int"),
    ({"action_type": "DRAG_TO", "x": True, "y": 1}, "must be int/float"),
    ({"action_type": "CLICK", "parameters": [1]}, "must be a dict"),
    ({"action_type": "CLICK", "parameters": {}, "x": 1}, "inside 'parameters'"),
])
def test_malformed_computer13_actions_return_clear_errors(action, fragment):
    e = parse_action(action, "computer_13")
    assert isinstance(e, ActionError), e
    assert fragment in e.message, e.message


def test_unknown_action_space_is_an_error_not_an_exception():
    e = parse_action("pyautogui.click()", "mouse_only")
    assert isinstance(e, ActionError) and "unknown action space" in e.message


def test_canonical_form_is_stable_across_spellings():
    a = parse_action({"action_type": "CLICK", "y": 6, "x": 5.0}, "computer_13")
    b = parse_action({"action_type": "CLICK", "parameters": {"x": 5, "y": 6}}, "computer_13")
    assert a.canonical == b.canonical == 'computer_13:{"action_type":"CLICK","parameters":{"x":5,"y":6}}'
    c = parse_action("pyautogui.press('a')   \n", "pyautogui")
    d = parse_action("pyautogui.press('a')", "pyautogui")
    assert c.canonical == d.canonical
    assert parse_action("WAIT", "computer_13").canonical == parse_action({"action_type": "WAIT"}, "computer_13").canonical


# ------------------------------------------------------------------------------------------------
# execution on the desktop


def _open_editor(d, name="actions.txt"):
    path = d.home / "Desktop" / name
    path.write_text("")
    d.launch("mousepad", str(path))
    d.wait_window(name)
    d.wait_idle(timeout=10)
    d.activate_window(name)
    return path


def _save_and_read(d, path):
    r = execute(d, "pyautogui.hotkey('ctrl', 's'); time.sleep(0.8)", "pyautogui")
    assert r.error == ""
    return path.read_text()


def _mouse(d):
    out = d.run(["xdotool", "getmouselocation", "--shell"]).stdout
    vals = dict(line.split("=", 1) for line in out.split())
    return int(vals["X"]), int(vals["Y"])


@pytest.mark.desktop
def test_pyautogui_code_types_into_the_focused_app(clean_desktop):
    d = clean_desktop
    path = _open_editor(d)
    r = execute(d, "pyautogui.typewrite('a<b>c | ~x\\n', interval=0.01)", "pyautogui")
    assert r.error == "" and r.action.kind == "code"
    assert _save_and_read(d, path) == "a<b>c | ~x\n"


@pytest.mark.desktop
def test_pyautogui_code_that_raises_returns_its_traceback(clean_desktop):
    r = execute(clean_desktop, "pyautogui.click(1, 1)\nraise ValueError('boom')", "pyautogui")
    assert "Traceback" in r.error and "ValueError: boom" in r.error
    assert not r.done


@pytest.mark.desktop
def test_special_actions_end_or_pause_without_running_code(clean_desktop):
    t0 = time.monotonic()
    r = execute(clean_desktop, "WAIT", "pyautogui", wait_seconds=0.2)
    assert r.error == "" and not r.done and time.monotonic() - t0 >= 0.2
    assert execute(clean_desktop, "DONE", "pyautogui").done
    f = execute(clean_desktop, "FAIL", "computer_13")
    assert f.done and f.failed


@pytest.mark.desktop
def test_malformed_action_is_returned_as_error_by_execute(clean_desktop):
    r = execute(clean_desktop, {"action_type": "TELEPORT"}, "computer_13")
    assert r.action is None and "unknown action_type" in r.error
    r = execute(clean_desktop, "pyautogui.click(", "pyautogui")
    assert r.action is None and "not valid Python" in r.error


@pytest.mark.desktop
def test_computer13_mouse_actions_move_the_pointer(clean_desktop):
    d = clean_desktop
    assert execute(d, {"action_type": "MOVE_TO", "x": 200, "y": 150}, "computer_13").error == ""
    assert _mouse(d) == (200, 150)
    assert execute(d, {"action_type": "CLICK", "parameters": {"x": 300, "y": 250, "button": "left"}}, "computer_13").error == ""
    assert _mouse(d) == (300, 250)
    for a in ({"action_type": "MOUSE_DOWN", "button": "left"}, {"action_type": "DRAG_TO", "x": 320, "y": 260},
              {"action_type": "MOUSE_UP"}, {"action_type": "RIGHT_CLICK", "x": 10, "y": 10},
              {"action_type": "DOUBLE_CLICK", "x": 20, "y": 20}, {"action_type": "SCROLL", "dx": 1, "dy": -2}):
        assert execute(d, a, "computer_13").error == "", a
    assert _mouse(d) == (20, 20)


@pytest.mark.desktop
def test_computer13_keyboard_actions_edit_a_file(clean_desktop):
    d = clean_desktop
    path = _open_editor(d, "c13.txt")
    actions = [
        {"action_type": "TYPING", "text": "hello world"},
        {"action_type": "KEY_DOWN", "key": "shift"}, {"action_type": "PRESS", "key": "home"},
        {"action_type": "KEY_UP", "key": "shift"},
        {"action_type": "HOTKEY", "keys": ["ctrl", "c"]},
        {"action_type": "PRESS", "key": "end"}, {"action_type": "PRESS", "key": "enter"},
        {"action_type": "HOTKEY", "keys": ["ctrl", "v"]},
        {"action_type": "HOTKEY", "keys": ["ctrl", "s"]},
    ]
    for a in actions:
        r = execute(d, a, "computer_13")
        assert r.error == "", (a, r.error)
    time.sleep(0.8)
    assert path.read_text() == "hello world\nhello world"
