"""Action parsing: both syntaxes, canonical forms, malformed input, read-only classification."""
from __future__ import annotations

import pytest

from envs.webarena.actions import Action, is_read_only, is_server_safe, parse_action
from envs.webarena.errors import ActionParseError


@pytest.mark.parametrize("text,name,args,canonical", [
    ("click [12]", "click", ("12",), "click [12]"),
    ("  click [12]\n", "click", ("12",), "click [12]"),
    ("type [42] [wireless mouse] [1]", "type", ("42", "wireless mouse", True), "type [42] [wireless mouse] [1]"),
    ("type [42] [wireless mouse] [0]", "type", ("42", "wireless mouse", False), "type [42] [wireless mouse] [0]"),
    ("type [42] [wireless mouse]", "type", ("42", "wireless mouse", True), "type [42] [wireless mouse] [1]"),
    ("type [7] [a [b] c] [0]", "type", ("7", "a [b] c", False), "type [7] [a [b] c] [0]"),
    ("hover [3]", "hover", ("3",), "hover [3]"),
    ("press [ctrl+a]", "press", ("Control+a",), "press [Control+a]"),
    ("press [Enter]", "press", ("Enter",), "press [Enter]"),
    ("scroll [Down]", "scroll", ("down",), "scroll [down]"),
    ("scroll [up]", "scroll", ("up",), "scroll [up]"),
    ("new_tab", "new_tab", (), "new_tab"),
    ("tab_focus [1]", "tab_focus", (1,), "tab_focus [1]"),
    ("close_tab", "close_tab", (), "close_tab"),
    ("goto [http://127.0.0.1:7770/cart]", "goto", ("http://127.0.0.1:7770/cart",), "goto [http://127.0.0.1:7770/cart]"),
    ("go_back", "go_back", (), "go_back"),
    ("go_forward", "go_forward", (), "go_forward"),
    ("stop [$1,234.56]", "stop", ("$1,234.56",), "stop [$1,234.56]"),
    ("stop []", "stop", ("",), "stop []"),
    ("stop", "stop", ("",), "stop []"),
    ("```click [5]```", "click", ("5",), "click [5]"),
])
def test_webarena_syntax_parses_to_typed_action(text, name, args, canonical):
    a = parse_action(text)
    assert (a.name, a.args) == (name, args)
    assert a.canonical() == canonical
    assert parse_action(a.canonical()) == a


@pytest.mark.parametrize("text,name,args", [
    ("click('12')", "click", ("12",)),
    ("click(12)", "click", ("12",)),
    ("fill('42', 'wireless mouse')", "type", ("42", "wireless mouse", False)),
    ("select_option('9', 'Blue')", "select_option", ("9", "Blue")),
    ("hover('3')", "hover", ("3",)),
    ("press('4', 'enter')", "press_on", ("4", "Enter")),
    ("keyboard_press('Enter')", "press", ("Enter",)),
    ("scroll(0, 300)", "scroll_by", (0, 300)),
    ("scroll(0, -200.4)", "scroll_by", (0, -200)),
    ("goto('http://x/y')", "goto", ("http://x/y",)),
    ("go_back()", "go_back", ()),
    ("go_forward()", "go_forward", ()),
    ("new_tab()", "new_tab", ()),
    ("tab_close()", "close_tab", ()),
    ("tab_focus(2)", "tab_focus", (2,)),
    ("send_msg_to_user('It is $5')", "send_msg_to_user", ("It is $5",)),
    ("noop()", "noop", ()),
    ("noop(500)", "noop", ()),
])
def test_browsergym_syntax_parses_to_typed_action(text, name, args):
    a = parse_action(text)
    assert (a.name, a.args) == (name, args)
    assert parse_action(a.canonical()) == a


def test_equivalent_actions_share_canonical_form_and_hash():
    assert parse_action("click('7')") == parse_action("click [7]")
    assert hash(parse_action("click('7')")) == hash(parse_action("click [7]"))
    assert parse_action("fill('3', 'x')").canonical() == parse_action("type [3] [x] [0]").canonical()
    assert parse_action("keyboard_press('ctrl+A')").canonical() == "press [Control+A]"


def test_action_is_frozen():
    a = parse_action("click [1]")
    with pytest.raises(AttributeError):
        a.name = "hover"  # type: ignore[misc]


@pytest.mark.parametrize("text,fragment", [
    ("", "empty action"),
    ("   ", "empty action"),
    ("clik [3]", "unknown action 'clik'"),
    ("click", "exactly one id"),
    ("click [3] [4]", "exactly one id"),
    ("click [a b]", "element id"),
    ("click 3", "square brackets"),
    ("type [3]", "type [id] [content]"),
    ("scroll [left]", "scroll [up]"),
    ("tab_focus [x]", "0-based tab index"),
    ("goto []", "goto [url]"),
    ("new_tab [1]", "takes no arguments"),
    ("press []", "key combination"),
    ("click(__import__('os').system('id'))", "literals"),
    ("fill('1')", "takes 2 argument"),
    ("fill('1', 2)", "string argument"),
    ("scroll('a', 'b')", "numbers"),
    ("tab_focus(-1)", "tab index"),
    ("click(bid='1')", "keyword arguments"),
    ("evil('1')", "unknown function 'evil'"),
    ("os.system('id')", "unknown action 'os'"),
    ("click('1'", "not a valid function call"),
])
def test_malformed_actions_raise_helpful_errors(text, fragment):
    with pytest.raises(ActionParseError) as e:
        parse_action(text)
    assert fragment in str(e.value)


def test_non_string_action_is_rejected():
    with pytest.raises(ActionParseError):
        parse_action(None)  # type: ignore[arg-type]


def test_only_noop_is_read_only():
    for text in ("click [1]", "hover [1]", "scroll [down]", "scroll(0, 10)", "tab_focus [0]", "new_tab",
                 "close_tab", "goto [http://x]", "go_back", "press [Enter]", "stop [x]", "send_msg_to_user('x')"):
        assert not is_read_only(parse_action(text)), text
    assert is_read_only(parse_action("noop()"))
    assert is_read_only(Action("noop"))


def test_server_safe_covers_page_only_actions():
    for text in ("scroll [down]", "hover [1]", "tab_focus [0]", "new_tab", "stop [x]", "noop()"):
        assert is_server_safe(parse_action(text)), text
    for text in ("click [1]", "type [1] [x] [1]", "press [Enter]", "goto [http://x]", "go_back"):
        assert not is_server_safe(parse_action(text)), text


def test_cost_class_of_an_element_action_is_the_elements_role_on_the_page():
    """Speculation's cost estimate: a click on an <option> or a hidden element waits out the action timeout
    whatever its id, a click on a link costs a page load; page-level actions have no class."""
    from envs.webarena.env import WebArenaAdapter

    page = {"axtree": "RootWebArea 'Shop'\n\t[1] link 'Home'\n\t\t[52] option 'Ascending' selected: True"}
    adapter = WebArenaAdapter()
    assert adapter.cost_class("click [52]", page) == "click option"
    assert adapter.cost_class("click [1]", page) == "click link"
    assert adapter.cost_class("click [5]", page) == "click unlisted", "[5] is not [52]"
    assert adapter.cost_class("type [69] [450 Pine Rd] [0]", page) == "type unlisted"
    assert adapter.cost_class("scroll [down]", page) is None and adapter.cost_class("stop []", page) is None
