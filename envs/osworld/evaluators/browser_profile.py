"""OSWorld's metrics for Chromium's profile: settings, bookmarks, cookies, extensions (what the getters of
getters/browser_profile.py read from the profile files).

Judge-only (envs/osworld/.workspace-exclude keeps evaluators/ out of every workspace): registers its metrics
in metrics.METRICS (imported by evaluators/__init__); the getters whose values they compare are in
getters/browser_profile.py.

OSWorld reads Google Chrome's ~/.config/google-chrome; the desktop runs Chromium with
--user-data-dir=~/.config/chromium (desktop.app_command), so the same files are read from there. SQLite
databases are copied first (Chromium holds them open while it runs); JSON files are read from a copy too.

Metrics:
    is_cookie_deleted                rule {"type": "domains", "domains"}: no cookie of those domains is left
    check_history_deleted            rule {"type": "keywords", "keywords"}: no history URL contains one
    is_expected_bookmarks            rule type bookmark_bar_folders_names {"names"} | bookmark_bar_websites_urls
                                     {"urls"} | liked_authors_websites_urls {"urls": [url | [alternatives]]}
    check_enabled_experiments        rule {"type": "names", "names"}: the enabled flags, in order
    check_font_size                  rule {"type": "value", "value"} | {"type": "range", "min", "max"} (exclusive)
    is_expected_installed_extensions expected {"expected": [names]}: all of them are installed
    is_shortcut_on_desktop           rule {"type": "name", "name"} | {"type": "exec", "exec"}: a desktop file
                                     has that Name= / Exec= line
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping

from ..errors import EvaluatorError
from .metrics import _rule, compare_urls, metric
from ..getters.browser_profile import _dig


# ----------------------------------------------------------------------------------------------------
# metrics


def _rule_type(rule: Any, metric_name: str, known: tuple[str, ...]) -> str:
    kind = _rule(rule, "type", metric_name)
    if kind not in known:
        raise EvaluatorError(f"{metric_name}: rule type {kind!r} unsupported; use {' or '.join(map(repr, known))}")
    return kind


def _cookie_host(host: str) -> str:
    # A cookie domain ".amazon.com" means amazon.com; OSWorld's compare_urls (tldextract) reads it so, ours
    # would keep the empty label. A longer one (".www.amazon.com") keeps it in both.
    bare = host[1:] if host.startswith(".") else host
    return bare if bare.count(".") <= 1 else host


@metric
def is_cookie_deleted(cookie_data: Any, rule: Mapping[str, Any]) -> float:
    """No cookie's host (column 1 of the cookies table) is one of rule["domains"] (compared as URLs)."""
    _rule_type(rule, "is_cookie_deleted", ("domains",))
    domains = _rule(rule, "domains", "is_cookie_deleted")
    if not isinstance(cookie_data, (list, tuple)):
        return 0.0
    hosts = [_cookie_host(str(row[1])) for row in cookie_data if isinstance(row, (list, tuple)) and len(row) > 1]
    return float(not any(compare_urls(_cookie_host(d), h) for d in domains for h in hosts))


@metric
def check_history_deleted(history_data: Any, rule: Mapping[str, Any]) -> float:
    """No history URL (column 0 of the history getter's rows) contains one of rule["keywords"]."""
    _rule_type(rule, "check_history_deleted", ("keywords",))
    keywords = _rule(rule, "keywords", "check_history_deleted")
    if not isinstance(history_data, (list, tuple)):
        return 0.0
    urls = [str(row[0]) for row in history_data if isinstance(row, (list, tuple)) and row]
    return float(not any(k in url for k in keywords for url in urls))


def _bar_children(bookmarks: Any) -> list[Mapping[str, Any]] | None:
    children = _dig(bookmarks, "bookmark_bar", "children")
    return [c for c in children if isinstance(c, Mapping)] if isinstance(children, list) else None


@metric
def is_expected_bookmarks(bookmarks: Any, rule: Mapping[str, Any]) -> float:
    """The bookmarks bar (the bookmarks getter's roots) has exactly the folders rule["names"]
    (bookmark_bar_folders_names), exactly the links rule["urls"] (bookmark_bar_websites_urls), or a folder
    "Liked Authors" whose links are one choice from each entry of rule["urls"] (liked_authors_websites_urls)."""
    kind = _rule_type(rule, "is_expected_bookmarks",
                      ("bookmark_bar_folders_names", "bookmark_bar_websites_urls", "liked_authors_websites_urls"))
    children = _bar_children(bookmarks) if bookmarks else None
    if children is None:
        return 0.0
    if kind == "bookmark_bar_folders_names":
        names = {c.get("name") for c in children if c.get("type") == "folder"}
        return float(names == set(_rule(rule, "names", "is_expected_bookmarks")))
    if kind == "bookmark_bar_websites_urls":
        urls = {c.get("url") for c in children if c.get("type") == "url"}
        return float(urls == set(_rule(rule, "urls", "is_expected_bookmarks")))
    folder = next((c for c in children if c.get("type") == "folder" and c.get("name") == "Liked Authors"), None)
    if folder is None:
        return 0.0
    liked = {c.get("url") for c in folder.get("children", []) if isinstance(c, Mapping) and c.get("type") == "url"}
    choices = [[u] if isinstance(u, str) else list(u) for u in _rule(rule, "urls", "is_expected_bookmarks")]
    return float(any(set(pick) == liked for pick in itertools.product(*choices)))


@metric
def check_enabled_experiments(enabled_experiments: Any, rule: Mapping[str, Any]) -> float:
    """The enabled chrome://flags entries, without their "@option", are rule["names"] in that order."""
    _rule_type(rule, "check_enabled_experiments", ("names",))
    names = _rule(rule, "names", "check_enabled_experiments")
    if not isinstance(enabled_experiments, (list, tuple)):
        return 0.0
    return float([str(e).split("@")[0] for e in enabled_experiments] == list(names))


@metric
def check_font_size(font_size: Any, rule: Mapping[str, Any]) -> float:
    """webprefs' default_font_size equals rule["value"] ("value") or lies strictly between rule["min"] and
    rule["max"] ("range")."""
    kind = _rule_type(rule, "check_font_size", ("value", "range"))
    bounds = ((_rule(rule, "value", "check_font_size"),) if kind == "value"
              else (_rule(rule, "min", "check_font_size"), _rule(rule, "max", "check_font_size")))
    size = _dig(font_size, "default_font_size")
    try:
        return float(size == bounds[0] if kind == "value" else bounds[0] < size < bounds[1])
    except TypeError:
        return 0.0


@metric
def is_expected_installed_extensions(installed_extensions: Any, expected: Mapping[str, Any]) -> float:
    """Every name of expected["expected"] is among the installed extensions' names."""
    want = _rule(expected, "expected", "is_expected_installed_extensions")
    if not installed_extensions or not isinstance(installed_extensions, (list, tuple)):
        return 0.0
    return float(set(want) <= set(installed_extensions))


@metric
def is_shortcut_on_desktop(shortcuts: Any, rule: Mapping[str, Any]) -> float:
    """Some desktop file (the shortcuts_on_desktop getter's {name: text}) has the line Name=<rule["name"]>
    ("name") or Exec=<rule["exec"]> ("exec")."""
    kind = _rule_type(rule, "is_shortcut_on_desktop", ("name", "exec"))
    line = ("Name=" if kind == "name" else "Exec=") + str(_rule(rule, kind, "is_shortcut_on_desktop")) + "\n"
    if not isinstance(shortcuts, Mapping):
        return 0.0
    return float(any(isinstance(text, str) and line in text for text in shortcuts.values()))
