"""OSWorld's state getters for Chromium's profile: settings, bookmarks, cookies, extensions (OSWorld's Chrome
getters that read profile files).

Runs where the desktop is (inside the workspace, through osworld.collect): registers its getters in
getters.common.GETTERS and compares nothing; its metrics are in evaluators/browser_profile.py, which no workspace holds.

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
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from typing import Any, Mapping

from ..desktop import CHROMIUM_PROFILE
from .common import get_vm_file, getter

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
