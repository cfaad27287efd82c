"""OSWorld evaluators for Chromium's profile: settings, bookmarks, cookies, extensions (OSWorld's Chrome getters that read profile files).

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).

OSWorld reads Google Chrome's ~/.config/google-chrome; the desktop runs Chromium with
--user-data-dir=~/.config/chromium (desktop.app_command), so the same files are read from there. SQLite
databases are copied first (Chromium holds them open while it runs); JSON files are read from a copy too.

Getters (config → value):
    default_search_engine            {} → Preferences' default search provider short_name, "Google" if unset
    cookie_data                      {"dest"?} → every row of Cookies' `cookies` table (tuples), None if unreadable
    history                          {"dest"?} → (url, title, last_visit_time) of every History `urls` row, None
                                        if unreadable
    bookmarks                        {} → the Bookmarks file's "roots" dict, [] if there is none
    profile_name                     {} → Preferences profile.name, None if unset
    enabled_experiments              {} → Local State's chrome://flags entries ("name@option"), [] if none
    chrome_font_size                 {} → Preferences webkit.webprefs (Chrome's default sizes if unset)
    data_delete_automacally          {} → "true" iff a default content setting is stored (e.g. cookies
                                        cleared on exit), else "false"
    new_startup_page                 {} → "true" iff startup opens the New Tab page (no session prefs, or
                                        session.restore_on_startup == 5), else "false"
    enable_do_not_track              {} → "true" / "false"
    enable_enhanced_safety_browsing  {} → "true" iff safebrowsing.enhanced, else "false"
    find_unpacked_extension_path     {} → the directory of every installed extension (VM paths), [] if unreadable
    find_installed_extension_name    {} → the name of every installed extension, [] if unreadable
    shortcuts_on_desktop             {} → {file name: text} of every ~/Desktop/*.desktop file

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

import contextlib
import itertools
import json
import os
import shutil
import sqlite3
from typing import Any, Mapping

from ..desktop import CHROMIUM_PROFILE
from ..errors import EvaluatorError
from .getters import get_vm_file, getter
from .metrics import _rule, compare_urls, metric

_DEFAULT_WEBPREFS = {"default_fixed_font_size": 13, "default_font_size": 16, "minimum_font_size": 13}
_UNREADABLE_WEBPREFS = {"default_fixed_font_size": 13, "default_font_size": 16}  # OSWorld's value then
_NEW_TAB_PAGE = 5  # session.restore_on_startup: 1 continue where you left off, 4 open specific pages, 5 NTP


# ----------------------------------------------------------------------------------------------------
# reading the profile


def _profile_copy(session, rel: str) -> str | None:
    """A copy (in the evaluation cache) of the profile's file `rel`, None if absent."""
    return get_vm_file(session, {"path": f"{session.vm_home}/{CHROMIUM_PROFILE}/{rel}",
                                 "dest": "chromium-" + rel.replace("/", "-")})


def _profile_json(session, rel: str) -> dict | None:
    path = _profile_copy(session, rel)
    return _json_file(path) if path else None


def _json_file(path: str) -> dict | None:
    """A JSON object file's data, None if it is absent, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _prefs(session) -> dict | None:
    return _profile_json(session, "Default/Preferences")


def _dig(data: Any, *keys: str, default: Any = None) -> Any:
    for k in keys:
        if not isinstance(data, Mapping) or k not in data:
            return default
        data = data[k]
    return data


def _profile_rows(session, rel: str, query: str) -> list[tuple] | None:
    """The rows of `query` on a copy of the profile's SQLite database `rel`, None if absent or unreadable."""
    local = _profile_copy(session, rel)
    if local is None:
        return None
    src = session.vm_path(f"{session.vm_home}/{CHROMIUM_PROFILE}/{rel}")
    for suffix in ("-journal", "-wal"):  # rolls back a half-written transaction / holds committed pages
        with contextlib.suppress(FileNotFoundError):
            os.remove(local + suffix)
        if os.path.isfile(src + suffix):
            shutil.copyfile(src + suffix, local + suffix)
    try:
        with contextlib.closing(sqlite3.connect(local)) as db:
            return db.execute(query).fetchall()
    except sqlite3.Error:
        return None


def _as_vm_path(session, path: str) -> str:
    """A path Chromium recorded on this machine, as the VM names it (HOME → /home/user)."""
    home = str(session.home)
    if path == home or path.startswith(home + "/"):
        return session.vm_home + path[len(home):]
    return path


def _true_false(flag: Any) -> str:
    return "true" if flag else "false"


# ----------------------------------------------------------------------------------------------------
# getters


@getter("default_search_engine")
def get_default_search_engine(session, config: Mapping[str, Any]) -> Any:
    return _dig(_prefs(session), "default_search_provider_data", "template_url_data", "short_name",
                default="Google")


@getter("cookie_data")
def get_cookie_data(session, config: Mapping[str, Any]) -> list[tuple] | None:
    for rel in ("Default/Cookies", "Default/Network/Cookies"):  # Chrome moved it to Network/ on some platforms
        rows = _profile_rows(session, rel, "SELECT * FROM cookies")
        if rows is not None:
            return rows
    return None


@getter("history")
def get_history(session, config: Mapping[str, Any]) -> list[tuple] | None:
    return _profile_rows(session, "Default/History", "SELECT url, title, last_visit_time FROM urls")


@getter("bookmarks")
def get_bookmarks(session, config: Mapping[str, Any]) -> Any:
    data = _profile_json(session, "Default/Bookmarks")
    return [] if data is None else data.get("roots", {})


@getter("profile_name")
def get_profile_name(session, config: Mapping[str, Any]) -> Any:
    return _dig(_prefs(session), "profile", "name")


@getter("enabled_experiments")
def get_enabled_experiments(session, config: Mapping[str, Any]) -> Any:
    return _dig(_profile_json(session, "Local State"), "browser", "enabled_labs_experiments", default=[])


@getter("chrome_font_size")
def get_chrome_font_size(session, config: Mapping[str, Any]) -> Any:
    prefs = _prefs(session)
    if prefs is None:
        return dict(_UNREADABLE_WEBPREFS)
    return _dig(prefs, "webkit", "webprefs", default=dict(_DEFAULT_WEBPREFS))


@getter("data_delete_automacally")
def get_data_delete_automacally(session, config: Mapping[str, Any]) -> str:
    # Content settings are integers; newer Chromium also keeps boolean migration markers in this dict,
    # which a fresh profile has and OSWorld's Chrome did not.
    values = _dig(_prefs(session), "profile", "default_content_setting_values")
    return _true_false(isinstance(values, Mapping) and any(not isinstance(v, bool) for v in values.values()))


@getter("new_startup_page")
def get_new_startup_page(session, config: Mapping[str, Any]) -> str:
    prefs = _prefs(session)
    if prefs is None:
        return "false"
    return _true_false("session" not in prefs or _dig(prefs, "session", "restore_on_startup") == _NEW_TAB_PAGE)


@getter("enable_do_not_track")
def get_enable_do_not_track(session, config: Mapping[str, Any]) -> str:
    return _true_false(_dig(_prefs(session), "enable_do_not_track"))


@getter("enable_enhanced_safety_browsing")
def get_enable_enhanced_safety_browsing(session, config: Mapping[str, Any]) -> str:
    return _true_false(_dig(_prefs(session), "safebrowsing", "enhanced"))


def _extensions(session) -> list[Mapping[str, Any]]:
    settings = _dig(_prefs(session), "extensions", "settings", default={})
    return [s for s in settings.values() if isinstance(s, Mapping)] if isinstance(settings, Mapping) else []


@getter("find_unpacked_extension_path")
def get_find_unpacked_extension_path(session, config: Mapping[str, Any]) -> list[str]:
    return [_as_vm_path(session, s["path"]) for s in _extensions(session) if isinstance(s.get("path"), str)]


def _manifest_name(session, ext: Mapping[str, Any]) -> str | None:
    """The extension's name: from the manifest Chromium stored in Preferences, else (newer Chromium stores
    none for unpacked extensions) from its manifest.json."""
    name = _dig(ext, "manifest", "name")
    if isinstance(name, str):
        return name
    path = ext.get("path")
    if not isinstance(path, str):
        return None
    if not os.path.isabs(path):  # packed extensions: relative to the profile's Extensions/
        path = session.vm_path(f"{session.vm_home}/{CHROMIUM_PROFILE}/Default/Extensions/{path}")
    manifest = _json_file(os.path.join(path, "manifest.json"))
    name = manifest.get("name") if manifest else None
    if isinstance(name, str) and name.startswith("__MSG_") and name.endswith("__"):
        return _message(path, name[6:-2], manifest.get("default_locale"))
    return name if isinstance(name, str) else None


def _message(extension_dir: str, key: str, default_locale: Any) -> str | None:
    """An extension's localized string (_locales/<locale>/messages.json; keys are case-insensitive)."""
    for locale in ("en_US", "en", default_locale):
        messages = _json_file(os.path.join(extension_dir, "_locales", str(locale), "messages.json")) or {}
        found = {k.lower(): v for k, v in messages.items()}.get(key.lower())
        if isinstance(found, Mapping) and isinstance(found.get("message"), str):
            return found["message"]
    return None


@getter("find_installed_extension_name")
def get_find_installed_extension_name(session, config: Mapping[str, Any]) -> list[str]:
    names = (_manifest_name(session, s) for s in _extensions(session))
    return [n for n in names if n is not None]


@getter("shortcuts_on_desktop")
def get_shortcuts_on_desktop(session, config: Mapping[str, Any]) -> dict[str, str]:
    desktop = session.vm_path(f"{session.vm_home}/Desktop")
    if not os.path.isdir(desktop):
        return {}
    shortcuts = {}
    for name in sorted(os.listdir(desktop)):
        path = os.path.join(desktop, name)
        if name.endswith(".desktop") and os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                shortcuts[name] = f.read()
    return shortcuts


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
