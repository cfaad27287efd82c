"""Text actions of WebArena and BrowserGym: parsing into typed values, canonical strings, read-only classes.

Owns: the action vocabulary (``ACTION_SPECS``), :func:`parse_action` for both syntaxes, the frozen
:class:`Action` value with its :meth:`Action.canonical` string (the prefix cache's key) and the classification
:func:`is_read_only`. Does not own: executing an action (``browser.py``).

Two syntaxes are accepted and map onto one set of names:

===========================  ==================================  ======================================
WebArena (id-based)          BrowserGym (function call)          Action.name, args
===========================  ==================================  ======================================
``click [12]``               ``click('12')``                     click, (id,)
``type [12] [text] [1]``     ``fill('12', 'text')``              type, (id, text, press_enter)
``hover [12]``               ``hover('12')``                     hover, (id,)
``press [Control+a]``        ``keyboard_press('Control+a')``     press, (key_comb,)
                             ``press('12', 'Enter')``            press_on, (id, key_comb)
                             ``select_option('12', 'Blue')``     select_option, (id, value)
``scroll [down]``            ``scroll(0, 720)``                  scroll, (direction,) / scroll_by, (dx, dy)
``new_tab``                  ``new_tab()``                       new_tab, ()
``tab_focus [1]``            ``tab_focus(1)``                    tab_focus, (index,)
``close_tab``                ``tab_close()``                     close_tab, ()
``goto [http://...]``        ``goto('http://...')``              goto, (url,)
``go_back`` / ``go_forward``  ``go_back()`` / ``go_forward()``   go_back, () / go_forward, ()
``stop [answer]``            ``send_msg_to_user('answer')``      stop, (answer,) / send_msg_to_user, (text,)
                             ``noop()``                          noop, ()
===========================  ==================================  ======================================

``type [id] [content] [0|1]``: the last bracket is optional; 1 (the default, as in WebArena) presses Enter after
typing. A literal ``]`` inside content is fine as long as the content bracket is not the last one on the line
(the parser splits on the outermost brackets). ``fill`` never presses Enter. Parsing never evaluates code:
BrowserGym arguments go through ``ast.parse`` and ``ast.literal_eval`` of each argument node only.

Examples:
    >>> parse_action("type [42] [wireless mouse] [1]").canonical()
    "type [42] [wireless mouse] [1]"
    >>> parse_action("fill('42', 'wireless mouse')").canonical()
    "type [42] [wireless mouse] [0]"
    >>> parse_action("click('7')") == parse_action("click [7]")
    True
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .errors import ActionParseError

#: name -> (WebArena usage, one-line meaning). The action set for prompts is derived from this table.
ACTION_SPECS: dict[str, tuple[str, str]] = {
    "click": ("click [id]", "click the element with this id"),
    "type": ("type [id] [content] [press_enter_after=0|1]", "replace the field's content, optionally press Enter"),
    "hover": ("hover [id]", "move the mouse over the element"),
    "press": ("press [key_comb]", "press a key combination on the focused element, e.g. Control+a, Enter"),
    "press_on": ("press('id', 'key_comb')", "focus the element, then press a key combination"),
    "select_option": ("select_option('id', 'value')", "choose an option of a <select> by label or value"),
    "scroll": ("scroll [up|down]", "scroll the page by one viewport height"),
    "scroll_by": ("scroll(dx, dy)", "scroll the page by dx, dy pixels"),
    "new_tab": ("new_tab", "open a new, empty tab and focus it"),
    "tab_focus": ("tab_focus [index]", "focus the tab at this 0-based index"),
    "close_tab": ("close_tab", "close the current tab"),
    "goto": ("goto [url]", "navigate the current tab to the url"),
    "go_back": ("go_back", "navigate back in history"),
    "go_forward": ("go_forward", "navigate forward in history"),
    "stop": ("stop [answer]", "end the episode with this answer (empty if none is needed)"),
    "send_msg_to_user": ("send_msg_to_user('text')", "end the episode with this answer (BrowserGym)"),
    "noop": ("noop()", "do nothing"),
}

_KEY_ALIASES = {"ctrl": "Control", "control": "Control", "alt": "Alt", "shift": "Shift", "meta": "Meta",
                "cmd": "Meta", "command": "Meta", "enter": "Enter", "return": "Enter", "tab": "Tab",
                "esc": "Escape", "escape": "Escape", "backspace": "Backspace", "delete": "Delete",
                "space": "Space", "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
                "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
                "pageup": "PageUp", "pagedown": "PageDown", "home": "Home", "end": "End"}


@dataclass(frozen=True)
class Action:
    """One parsed action.

    Attributes:
        name: a key of :data:`ACTION_SPECS`.
        args: the typed arguments (see the module table); ids are strings, ``press_enter`` a bool, tab index
            and scroll deltas ints.
        raw: the text it was parsed from (not part of equality or the canonical form).
    """

    name: str
    args: tuple = ()
    raw: str = ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Action) and (self.name, self.args) == (other.name, other.args)

    def __hash__(self) -> int:
        return hash((self.name, self.args))

    @property
    def element_id(self) -> str | None:
        """The element id the action targets, or None for page/tab level actions."""
        if self.name in ("click", "type", "hover", "press_on", "select_option"):
            return self.args[0]
        return None

    def canonical(self) -> str:
        """Canonical string: WebArena syntax where one exists, normalised arguments; equal actions give equal
        strings whichever syntax they were written in (e.g. ``fill('3','x')`` -> ``type [3] [x] [0]``)."""
        n, a = self.name, self.args
        if n in ("click", "hover", "tab_focus", "goto", "stop", "press"):
            return f"{n} [{a[0]}]"
        if n == "type":
            return f"type [{a[0]}] [{a[1]}] [{int(a[2])}]"
        if n == "scroll":
            return f"scroll [{a[0]}]"
        if n in ("new_tab", "close_tab", "go_back", "go_forward"):
            return n
        if n == "noop":
            return "noop()"
        fname = {"press_on": "press", "scroll_by": "scroll"}.get(n, n)
        return f"{fname}({', '.join(repr(x) for x in a)})"


def is_read_only(action: Action) -> bool:
    """True only if executing ``action`` can change neither the server, nor any page, nor the episode.

    That holds for ``noop`` alone. Reasons the others are not read-only:
    ``scroll``/``scroll_by`` change the scroll offset (screenshot, lazy-loading pages); ``hover`` changes
    ``:hover`` styles and may fire mouse events that run page code; ``tab_focus``/``new_tab``/``close_tab``
    change which page is observed; ``press`` may submit a form; ``stop``/``send_msg_to_user`` leave page and
    server untouched but end the episode and carry the answer the evaluator reads, so a cache must not drop
    them. Use :func:`is_server_safe` for the weaker "cannot change server state" property.
    """
    return action.name == "noop"


def is_server_safe(action: Action) -> bool:
    """True if ``action`` cannot send a request that changes server state *on this site*.

    The shopping site has no JavaScript, so only navigation and form submission reach the server; scrolling,
    hovering, focusing/opening/closing tabs and ending the episode cannot. Page state may still change.
    ``goto``/``go_back``/``go_forward`` issue GET requests, which this site never lets mutate state, but they are
    reported as unsafe to stay correct for sites where a GET link performs an action (e.g. Magento's logout).
    """
    return action.name in ("noop", "scroll", "scroll_by", "hover", "tab_focus", "new_tab", "close_tab", "stop",
                           "send_msg_to_user")


def normalise_key_comb(key_comb: str) -> str:
    """Normalise ``ctrl+A``/``Control+a`` style combinations to Playwright's names (``Control+a``)."""
    parts = [p.strip() for p in key_comb.split("+")]
    if not key_comb.strip() or any(not p for p in parts):
        raise ActionParseError(f"empty key in key combination {key_comb!r}; expected e.g. 'Enter' or 'Control+a'")
    out = []
    for p in parts:
        alias = _KEY_ALIASES.get(p.lower())
        if alias:
            out.append(alias)
        elif len(p) == 1:
            out.append(p)
        elif re.fullmatch(r"[Ff]\d{1,2}", p):
            out.append(p.upper())
        else:
            out.append(p[0].upper() + p[1:])
    return "+".join(out)


_WA_NAMES = {"click", "type", "hover", "press", "scroll", "new_tab", "tab_focus", "close_tab", "goto", "go_back",
             "go_forward", "stop", "noop"}
_WA_RE = re.compile(r"^(?P<name>[a-z_]+)\s*(?P<rest>.*)$", re.S)
_BG_RE = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*\s*\(", re.S)


def _brackets(rest: str, what: str) -> list[str]:
    """Split ``[a] [b c] [d]`` into ['a', 'b c', 'd']. Content may contain brackets except the last one."""
    rest = rest.strip()
    if not rest:
        return []
    if not (rest.startswith("[") and rest.endswith("]")):
        raise ActionParseError(f"{what}: arguments must be in square brackets, e.g. 'click [12]'; found {rest!r}")
    parts = re.split(r"\]\s+\[", rest[1:-1])
    return parts


def _check_id(value: object, action: str) -> str:
    s = str(value).strip()
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", s):
        raise ActionParseError(f"{action}: element id must be a number from the observation, e.g. [12]; found {s!r}")
    return s


def _parse_webarena(text: str) -> Action:
    m = _WA_RE.match(text)
    if not m:
        raise ActionParseError(f"cannot parse action {text!r}")
    name, rest = m.group("name"), m.group("rest")
    if name not in _WA_NAMES:
        raise ActionParseError(f"unknown action {name!r} in {text!r}; known WebArena actions: " +
                               ", ".join(u for u in (s[0] for s in ACTION_SPECS.values()) if "(" not in u) +
                               "; or BrowserGym calls such as click('12')")
    if name in ("new_tab", "close_tab", "go_back", "go_forward"):
        if rest.strip():
            raise ActionParseError(f"{name} takes no arguments; found {rest.strip()!r}")
        return Action(name, (), text)
    if name == "noop":
        return Action("noop", (), text)
    if name == "stop":
        rest = rest.strip()
        if not rest:
            return Action("stop", ("",), text)
        if not (rest.startswith("[") and rest.endswith("]")):
            raise ActionParseError(f"stop: the answer must be in square brackets, e.g. 'stop [42]'; found {rest!r}")
        return Action("stop", (rest[1:-1].strip(),), text)
    if name == "goto":
        rest = rest.strip()
        if not (rest.startswith("[") and rest.endswith("]")) or not rest[1:-1].strip():
            raise ActionParseError(f"goto: expected 'goto [url]'; found {text!r}")
        return Action("goto", (rest[1:-1].strip(),), text)
    if name == "type":
        rest = rest.strip()
        if not (rest.startswith("[") and rest.endswith("]")):
            raise ActionParseError(f"type: expected 'type [id] [content] [0|1]'; found {text!r}")
        inner = rest[1:-1]
        m2 = re.match(r"^\s*([^\]\s]+)\s*\]\s*\[(.*)$", inner, re.S)
        if not m2:
            raise ActionParseError(f"type: expected 'type [id] [content] [0|1]'; found {text!r}")
        elem, body = m2.group(1), m2.group(2)
        enter = True
        m3 = re.match(r"^(.*)\]\s*\[\s*([01])\s*$", body, re.S)
        if m3:
            body, enter = m3.group(1), m3.group(2) == "1"
        return Action("type", (_check_id(elem, "type"), body, enter), text)
    args = _brackets(rest, name)
    if name in ("click", "hover"):
        if len(args) != 1:
            raise ActionParseError(f"{name}: expected exactly one id, e.g. '{name} [12]'; found {text!r}")
        return Action(name, (_check_id(args[0], name),), text)
    if name == "press":
        if len(args) != 1:
            raise ActionParseError(f"press: expected 'press [key_comb]', e.g. 'press [Control+a]'; found {text!r}")
        return Action("press", (normalise_key_comb(args[0]),), text)
    if name == "scroll":
        if len(args) != 1 or args[0].strip().lower() not in ("up", "down"):
            raise ActionParseError(f"scroll: expected 'scroll [up]' or 'scroll [down]'; found {text!r}")
        return Action("scroll", (args[0].strip().lower(),), text)
    if name == "tab_focus":
        if len(args) != 1 or not args[0].strip().isdigit():
            raise ActionParseError(f"tab_focus: expected a 0-based tab index, e.g. 'tab_focus [0]'; found {text!r}")
        return Action("tab_focus", (int(args[0]),), text)
    raise ActionParseError(f"unknown action {name!r}; known WebArena actions: " +
                           ", ".join(u for u in (s[0] for s in ACTION_SPECS.values()) if "(" not in u))


# BrowserGym function name -> (Action.name, argument kinds)
_BG_FUNCS: dict[str, tuple[str, tuple[str, ...]]] = {
    "click": ("click", ("id",)),
    "dblclick": ("click", ("id",)),
    "fill": ("type", ("id", "str")),
    "select_option": ("select_option", ("id", "str")),
    "hover": ("hover", ("id",)),
    "press": ("press_on", ("id", "key")),
    "keyboard_press": ("press", ("key",)),
    "scroll": ("scroll_by", ("num", "num")),
    "goto": ("goto", ("str",)),
    "go_back": ("go_back", ()),
    "go_forward": ("go_forward", ()),
    "new_tab": ("new_tab", ()),
    "tab_close": ("close_tab", ()),
    "tab_focus": ("tab_focus", ("int",)),
    "send_msg_to_user": ("send_msg_to_user", ("str",)),
    "report_infeasible": ("stop", ("str",)),
    "noop": ("noop", ()),
}


def _parse_browsergym(text: str) -> Action:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ActionParseError(f"not a valid function call: {text!r} ({e.msg}); expected e.g. click('12')") from e
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ActionParseError(f"expected one function call such as click('12'); found {text!r}")
    fname = call.func.id
    if fname not in _BG_FUNCS:
        raise ActionParseError(f"unknown function {fname!r}; known: {', '.join(sorted(_BG_FUNCS))}")
    name, kinds = _BG_FUNCS[fname]
    if call.keywords:
        raise ActionParseError(f"{fname}: keyword arguments are not supported, pass them positionally: {text!r}")
    if fname == "noop" and len(call.args) <= 1:
        # BrowserGym's noop(wait_ms) waits; here the wait is dropped from the key and from execution alike:
        # the site has no JavaScript, timers or clock-dependent pages, so waiting changes nothing observable.
        return Action("noop", (), text)
    if len(call.args) != len(kinds):
        raise ActionParseError(f"{fname} takes {len(kinds)} argument(s), got {len(call.args)}: {text!r}")
    values = []
    for node, kind in zip(call.args, kinds):
        try:
            v = ast.literal_eval(node)
        except ValueError as e:
            raise ActionParseError(f"{fname}: arguments must be literals (strings/numbers); found "
                                   f"{ast.unparse(node)!r}") from e
        if kind == "id":
            if not isinstance(v, (str, int)) or isinstance(v, bool):
                raise ActionParseError(f"{fname}: element id must be a string such as '12'; found {v!r}")
            v = _check_id(v, fname)
        elif kind in ("str", "key"):
            if not isinstance(v, str):
                raise ActionParseError(f"{fname}: expected a string argument; found {v!r}")
            if kind == "key":
                v = normalise_key_comb(v)
        elif kind == "num":
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ActionParseError(f"{fname}: expected numbers, e.g. scroll(0, 300); found {v!r}")
            v = int(round(v))
        elif kind == "int":
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ActionParseError(f"{fname}: expected a 0-based tab index; found {v!r}")
        values.append(v)
    if name == "type":
        values.append(False)
    if name == "stop" and fname == "report_infeasible":
        values = ["N/A"]
    return Action(name, tuple(values), text)


def parse_action(text: str) -> Action:
    """Parse one action in WebArena or BrowserGym syntax.

    Args:
        text: e.g. ``"click [12]"``, ``"type [5] [shoes] [1]"``, ``"fill('5', 'shoes')"``, ``"stop [42]"``.
            Surrounding whitespace and a trailing newline are ignored; a WebArena-style prefix such as
            ``"In summary, the next action I will perform is ```click [3]```"`` is not: extract the action first.

    Returns:
        The :class:`Action`.

    Raises:
        ActionParseError: the text is empty, names an unknown action, or has malformed arguments; the
            message shows the expected form.
    """
    if not isinstance(text, str):
        raise ActionParseError(f"an action must be a string; found {type(text).__name__}")
    s = text.strip()
    if s.startswith("```") and s.endswith("```") and len(s) >= 6:
        s = s[3:-3].strip()
    if not s:
        raise ActionParseError("empty action; expected e.g. 'click [12]' or \"click('12')\"")
    if _BG_RE.match(s):
        return _parse_browsergym(s)
    return _parse_webarena(s)
