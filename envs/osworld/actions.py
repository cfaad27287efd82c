"""OSWorld's two action spaces: parsing, validation, canonical form and execution on a desktop.

Owns:
  * `pyautogui` space — an action is a Python code string run as OSWorld's VM server runs it:
    `python -c "import pyautogui; import time; pyautogui.FAILSAFE = False; <code>"` with the desktop's
    DISPLAY; or one of the special strings WAIT / FAIL / DONE.
  * `computer_13` space — an action is a dict {"action_type": NAME, "parameters": {...}} (the parameters may
    also sit at the top level, as OSWorld accepts both). Names and parameters as in OSWorld's
    desktop_env/envs/actions.py: MOVE_TO {x, y}, CLICK {button, x, y, num_clicks}, MOUSE_DOWN {button},
    MOUSE_UP {button}, RIGHT_CLICK {x, y}, DOUBLE_CLICK {x, y}, DRAG_TO {x, y}, SCROLL {dx, dy},
    TYPING {text}, PRESS {key}, KEY_DOWN {key}, KEY_UP {key}, HOTKEY {keys}, WAIT, FAIL, DONE.
    It is executed by translating it to the equivalent pyautogui code (as OSWorld's controller does).

Agent mistakes never raise: `parse_action` returns an `ActionError` (message says what was expected and what
was found), `execute` returns an `ActionResult` whose `error` holds the message or the traceback of code
that raised. `Action.canonical` is a stable string per action (cache keys of the prefix tree).

Does not own: the step loop (bunshin_gym) or the desktop processes (desktop.py).

Examples:
    >>> parse_action("pyautogui.click(10, 20)", "pyautogui").canonical
    'pyautogui:pyautogui.click(10, 20)'
    >>> parse_action({"action_type": "CLICK", "x": 5, "y": 6}, "computer_13").canonical
    'computer_13:{"action_type":"CLICK","parameters":{"x":5,"y":6}}'
    >>> parse_action({"action_type": "JUMP"}, "computer_13").message[:40]
    "unknown action_type 'JUMP'; expected one"
"""

from __future__ import annotations

import ast
import functools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "ACTION_SPACES",
    "SPECIAL_ACTIONS",
    "COMPUTER_13_SPEC",
    "Action",
    "ActionError",
    "ActionResult",
    "parse_action",
    "to_pyautogui",
    "execute",
    "keyboard_keys",
]

ACTION_SPACES = ("pyautogui", "computer_13")
SPECIAL_ACTIONS = ("WAIT", "FAIL", "DONE")
WAIT_SECONDS = 1.0
"""How long WAIT pauses (OSWorld's agents sleep between steps; the env itself just pauses)."""
EXEC_TIMEOUT = 60.0

_NUM = (int, float)
_BUTTONS = ("left", "right", "middle")

# name -> {param: (types, required)}; an action's params must be a subset, required ones present.
COMPUTER_13_SPEC: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "MOVE_TO": {"x": (_NUM, False), "y": (_NUM, False)},
    "CLICK": {"button": ((str,), False), "x": (_NUM, False), "y": (_NUM, False), "num_clicks": ((int,), False)},
    "MOUSE_DOWN": {"button": ((str,), False)},
    "MOUSE_UP": {"button": ((str,), False)},
    "RIGHT_CLICK": {"x": (_NUM, False), "y": (_NUM, False)},
    "DOUBLE_CLICK": {"x": (_NUM, False), "y": (_NUM, False)},
    "DRAG_TO": {"x": (_NUM, True), "y": (_NUM, True)},
    "SCROLL": {"dx": ((int,), True), "dy": ((int,), True)},
    "TYPING": {"text": ((str,), True)},
    "PRESS": {"key": ((str,), True)},
    "KEY_DOWN": {"key": ((str,), True)},
    "KEY_UP": {"key": ((str,), True)},
    "HOTKEY": {"keys": ((list,), True)},
    "WAIT": {},
    "FAIL": {},
    "DONE": {},
}
"""computer_13's action types and their parameters: {name: {param: (accepted types, required)}}."""


@dataclass(frozen=True)
class Action:
    """A validated action.

    Fields:
        space: "pyautogui" or "computer_13".
        kind: "code" (pyautogui code), one of WAIT/FAIL/DONE, or a computer_13 action_type.
        payload: the code string (pyautogui) or the normalised parameter dict (computer_13).
        canonical: stable string form, "<space>:<normalised action>" (for cache keys).
    """

    space: str
    kind: str
    payload: Any
    canonical: str

    @property
    def special(self) -> bool:
        """True for WAIT / FAIL / DONE (nothing is executed)."""
        return self.kind in SPECIAL_ACTIONS


@dataclass(frozen=True)
class ActionError:
    """A malformed action: `message` says what was expected and what was found (goes to the agent)."""

    message: str
    raw: Any = None

    def __bool__(self) -> bool:  # so `if not parse_action(...)` reads naturally
        return False


@dataclass(frozen=True)
class ActionResult:
    """What executing one action produced.

    Fields:
        action: the parsed action (None if it did not parse).
        error: "" on success; the validation message or the traceback otherwise.
        done: the action was DONE or FAIL (the episode ends).
        failed: the action was FAIL (the agent declares the task infeasible).
        stdout: what the code printed.
        seconds: wall time of the execution.
    """

    action: Action | None
    error: str = ""
    done: bool = False
    failed: bool = False
    stdout: str = ""
    seconds: float = 0.0
    info: dict = field(default_factory=dict)


@functools.lru_cache(maxsize=1)
def keyboard_keys() -> frozenset[str]:
    """pyautogui's key names, read from its source (importing pyautogui needs a DISPLAY)."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("pyautogui")
        src = Path(spec.origin).read_text()
        tree = ast.parse(src)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "KEY_NAMES" for t in node.targets):
                return frozenset(ast.literal_eval(node.value))
    except Exception:
        pass
    # Fallback: the common subset (pyautogui missing is caught when executing).
    base = [chr(c) for c in range(32, 127)] + ["\t", "\n", "\r"]
    named = ("enter return tab space backspace delete del esc escape up down left right home end pageup "
             "pagedown pgup pgdn insert shift shiftleft shiftright ctrl ctrlleft ctrlright alt altleft altright "
             "win winleft winright super command option capslock numlock printscreen prtsc").split()
    return frozenset(base + named + [f"f{i}" for i in range(1, 25)])


# ----------------------------------------------------------------------------------------------------
# parsing


def parse_action(action: Any, space: str, screen_size: tuple[int, int] = (1920, 1080)) -> Action | ActionError:
    """Validate one action of `space`; never raises on bad input.

    Args:
        action: a code string / "WAIT" / "FAIL" / "DONE" (pyautogui) or a dict / special string (computer_13).
        space: "pyautogui" or "computer_13".
        screen_size: (width, height); computer_13 coordinates must lie inside it.

    Returns:
        Action, or ActionError whose message names the problem and the expected form.
    """
    if space not in ACTION_SPACES:
        return ActionError(f"unknown action space {space!r}; expected one of {ACTION_SPACES}", action)
    if isinstance(action, str) and action.strip() in SPECIAL_ACTIONS:
        k = action.strip()
        return Action(space, k, None, f"{space}:{k}")
    if space == "pyautogui":
        return _parse_pyautogui(action)
    return _parse_computer13(action, screen_size)


def _parse_pyautogui(action: Any) -> Action | ActionError:
    if not isinstance(action, str):
        return ActionError(f"pyautogui action must be a Python code string or one of {SPECIAL_ACTIONS}; "
                           f"got {type(action).__name__}: {_short(action)}", action)
    code = action.strip()
    if not code:
        return ActionError("pyautogui action is empty; expected Python code such as "
                           "\"pyautogui.click(100, 200)\" or one of WAIT/FAIL/DONE", action)
    try:
        ast.parse(code)
    except SyntaxError as e:
        return ActionError(f"pyautogui action is not valid Python: {e.msg} (line {e.lineno}, column {e.offset}): "
                           f"{_short(code)}", action)
    canonical_code = "\n".join(line.rstrip() for line in code.splitlines())
    return Action("pyautogui", "code", code, f"pyautogui:{canonical_code}")


def _parse_computer13(action: Any, screen_size: tuple[int, int]) -> Action | ActionError:
    if not isinstance(action, Mapping):
        return ActionError("computer_13 action must be a dict like {\"action_type\": \"CLICK\", \"parameters\": "
                           f"{{\"x\": 10, \"y\": 20}}}} or one of {SPECIAL_ACTIONS}; got {type(action).__name__}: "
                           f"{_short(action)}", action)
    if "action_type" not in action:
        return ActionError(f"computer_13 action has no 'action_type'; got keys {sorted(map(str, action))}", action)
    kind = action["action_type"]
    if not isinstance(kind, str) or kind not in COMPUTER_13_SPEC:
        import difflib
        near = difflib.get_close_matches(str(kind).upper(), list(COMPUTER_13_SPEC), n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        return ActionError(f"unknown action_type {kind!r}; expected one of {sorted(COMPUTER_13_SPEC)}.{hint}", action)
    if "parameters" in action:
        params = action["parameters"]
        extra_top = [k for k in action if k not in ("action_type", "parameters")]
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            return ActionError(f"{kind}: 'parameters' must be a dict; got {type(params).__name__}", action)
        if extra_top:
            return ActionError(f"{kind}: put all parameters inside 'parameters'; found also {extra_top} at the "
                               "top level", action)
    else:
        params = {k: v for k, v in action.items() if k != "action_type"}
    spec = COMPUTER_13_SPEC[kind]
    unknown = [k for k in params if k not in spec]
    if unknown:
        return ActionError(f"{kind}: unknown parameter(s) {unknown}; {kind} takes {sorted(spec) or 'none'}", action)
    missing = [k for k, (_, req) in spec.items() if req and k not in params]
    if missing:
        return ActionError(f"{kind}: missing required parameter(s) {missing}", action)
    norm: dict[str, Any] = {}
    w, h = screen_size
    for k, v in params.items():
        types, _ = spec[k]
        if isinstance(v, bool) or not isinstance(v, types):
            return ActionError(f"{kind}: parameter {k!r} must be {'/'.join(t.__name__ for t in types)}; "
                               f"got {type(v).__name__} {_short(v)}", action)
        if k == "x" and not (0 <= v <= w):
            return ActionError(f"{kind}: x={v} is off screen; expected 0 <= x <= {w}", action)
        if k == "y" and not (0 <= v <= h):
            return ActionError(f"{kind}: y={v} is off screen; expected 0 <= y <= {h}", action)
        if k == "button" and v not in _BUTTONS:
            return ActionError(f"{kind}: button={v!r}; expected one of {_BUTTONS}", action)
        if k == "num_clicks" and v not in (1, 2, 3):
            return ActionError(f"{kind}: num_clicks={v}; expected 1, 2 or 3", action)
        if k == "key":
            if v.lower() not in keyboard_keys():
                return ActionError(f"{kind}: unknown key {v!r}; expected a pyautogui key name such as 'enter', "
                                   "'ctrl', 'a', 'f5'", action)
            v = v.lower() if len(v) > 1 else v
        if k == "keys":
            if not v or not all(isinstance(x, str) for x in v):
                return ActionError(f"{kind}: keys must be a non-empty list of key names; got {_short(v)}", action)
            bad = [x for x in v if x.lower() not in keyboard_keys()]
            if bad:
                return ActionError(f"{kind}: unknown key(s) {bad}; expected pyautogui key names", action)
            v = [x.lower() if len(x) > 1 else x for x in v]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        norm[k] = v
    if kind in ("MOVE_TO", "RIGHT_CLICK", "DOUBLE_CLICK", "CLICK") and (("x" in norm) != ("y" in norm)):
        return ActionError(f"{kind}: give both x and y or neither; got only {'x' if 'x' in norm else 'y'}", action)
    if kind in SPECIAL_ACTIONS:  # {"action_type": "DONE"} and "DONE" are the same action
        return Action("computer_13", kind, None, f"computer_13:{kind}")
    canonical = json.dumps({"action_type": kind, "parameters": norm}, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return Action("computer_13", kind, norm, f"computer_13:{canonical}")


def to_pyautogui(action: Action) -> str:
    """The pyautogui code a computer_13 action runs as ("" for WAIT/FAIL/DONE)."""
    if action.special:
        return ""
    if action.space == "pyautogui":
        return action.payload
    p = action.payload
    k = action.kind
    xy = f"{p['x']!r}, {p['y']!r}" if "x" in p else None
    if k == "MOVE_TO":
        return f"pyautogui.moveTo({xy}, duration=0.1)" if xy else "pyautogui.moveTo(pyautogui.position())"
    if k == "CLICK":
        args = []
        if xy:
            args.append(f"x={p['x']!r}, y={p['y']!r}")
        if "button" in p:
            args.append(f"button={p['button']!r}")
        if "num_clicks" in p:
            args.append(f"clicks={p['num_clicks']!r}, interval=0.05")
        return f"pyautogui.click({', '.join(args)})"
    if k == "MOUSE_DOWN":
        return f"pyautogui.mouseDown(button={p.get('button', 'left')!r})"
    if k == "MOUSE_UP":
        return f"pyautogui.mouseUp(button={p.get('button', 'left')!r})"
    if k == "RIGHT_CLICK":
        return f"pyautogui.rightClick({xy})" if xy else "pyautogui.rightClick()"
    if k == "DOUBLE_CLICK":
        return f"pyautogui.doubleClick({xy})" if xy else "pyautogui.doubleClick()"
    if k == "DRAG_TO":
        return f"pyautogui.dragTo({xy}, duration=0.5, button='left')"
    if k == "SCROLL":
        code = []
        if p["dy"]:
            code.append(f"pyautogui.scroll({p['dy']!r})")
        if p["dx"]:
            code.append(f"pyautogui.hscroll({p['dx']!r})")
        return "; ".join(code) or "pass"
    if k == "TYPING":
        return f"pyautogui.typewrite({p['text']!r}, interval=0.01)"
    if k == "PRESS":
        return f"pyautogui.press({p['key']!r})"
    if k == "KEY_DOWN":
        return f"pyautogui.keyDown({p['key']!r})"
    if k == "KEY_UP":
        return f"pyautogui.keyUp({p['key']!r})"
    if k == "HOTKEY":
        return f"pyautogui.hotkey({', '.join(repr(x) for x in p['keys'])})"
    return ""


def execute(session, action: Any, space: str, *, timeout: float = EXEC_TIMEOUT,
            wait_seconds: float = WAIT_SECONDS) -> ActionResult:
    """Parse and run one action on a DesktopSession; errors come back in `ActionResult.error`.

    Args:
        session: a started envs.osworld.desktop.DesktopSession (anything with `run_python` and `size`).
        action: the raw action of `space`, or an already parsed `Action`.
        space: "pyautogui" or "computer_13".
        timeout: seconds the code may run before it is killed (then error says so).
        wait_seconds: how long WAIT pauses.

    Returns:
        ActionResult (never raises for agent mistakes).
    """
    t0 = time.monotonic()
    parsed = action if isinstance(action, Action) else parse_action(action, space, tuple(session.size))
    if isinstance(parsed, ActionError):
        return ActionResult(None, error=parsed.message, seconds=time.monotonic() - t0)
    if parsed.special:
        if parsed.kind == "WAIT":
            time.sleep(wait_seconds)
        return ActionResult(parsed, done=parsed.kind in ("DONE", "FAIL"), failed=parsed.kind == "FAIL",
                            seconds=time.monotonic() - t0)
    code = to_pyautogui(parsed)
    r = session.run_python(code, timeout=timeout)
    err = ""
    if r.returncode != 0:
        err = (r.stderr or "").strip() or f"action exited with status {r.returncode}"
        if r.returncode == 124:
            err = f"action did not finish within {timeout} s and was stopped\n" + err
    return ActionResult(parsed, error=err, stdout=r.stdout, seconds=time.monotonic() - t0,
                        info={"returncode": r.returncode})


def _short(x: Any, n: int = 80) -> str:
    s = repr(x)
    return s if len(s) <= n else s[: n - 3] + "..."
