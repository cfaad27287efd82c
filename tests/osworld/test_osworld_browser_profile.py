"""Chromium-profile evaluators (envs/osworld/evaluators/browser_profile.py, getters/browser_profile.py) against OSWorld's own getters and
metrics, and the chrome_close_tabs / update_browse_history config steps on a live Chromium.

OSWorld's getters read ~/.config/google-chrome through env.controller, so each runs on a fake VM root whose
/home/user/.config/google-chrome is a link to the fake HOME's .config/chromium that ours read. Besides get_file
they ask the VM to print the profile's path (execute_python_command) and, for shortcuts, for the desktop path
and its directory tree: the stand-in controller of osworld_reference_runner.py is extended here with those
(run with HOME=/home/user; answered as OSWorld's VM server does), and pydrive (imported by getters/chrome.py,
used only by Google Drive getters) is a placeholder. The live test repeats the comparison on files a real
Chromium wrote after settings were changed through its own settings pages.

Known divergences, left out of the comparison on purpose:
  * with Preferences missing or unreadable, OSWorld's data_delete_automacally, new_startup_page,
    enable_enhanced_safety_browsing, find_unpacked_extension_path and find_installed_extension_name return
    "Google" (a copied default); ours "false" / [].
  * data_delete_automacally: current Chromium keeps a boolean marker (has_migrated_local_network_access) in
    profile.default_content_setting_values of every new profile; OSWorld's presence test would read a fresh
    profile as "true", ours counts only content settings (integers).
  * find_installed_extension_name: an extension whose Preferences entry has no manifest (Chromium no longer
    stores one for unpacked extensions) makes OSWorld's getter return "Google"; ours reads its manifest.json.
  * find_unpacked_extension_path: ours gives a path under the session's HOME as the VM's /home/user/... path.
  * bookmarks with a Bookmarks file that is not JSON, shortcuts_on_desktop without ~/Desktop or with a
    directory named *.desktop: OSWorld's getter raises; ours gives [] / {} / skips the directory.
  * an unknown rule type raises TypeError in OSWorld, EvaluatorError here (checked on its own).
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from envs.osworld.errors import EvaluatorError, TaskValidationError
from envs.osworld.evaluators import GETTERS, METRICS
from envs.osworld.tasks import run_config, task_from_dict
from tests.osworld.reference import REF_PY, RUNNER, assert_agree, needs_reference

VM_HOME = "/home/user"

# The cookies and urls (History) tables as Chromium 156 creates them.
COOKIES_SCHEMA = (
    "CREATE TABLE cookies(creation_utc INTEGER NOT NULL,host_key TEXT NOT NULL,top_frame_site_key TEXT NOT NULL,"
    "name TEXT NOT NULL,value TEXT NOT NULL,encrypted_value BLOB NOT NULL,path TEXT NOT NULL,"
    "expires_utc INTEGER NOT NULL,is_secure INTEGER NOT NULL,is_httponly INTEGER NOT NULL,"
    "last_access_utc INTEGER NOT NULL,has_expires INTEGER NOT NULL,is_persistent INTEGER NOT NULL,"
    "priority INTEGER NOT NULL,samesite INTEGER NOT NULL,source_scheme INTEGER NOT NULL,"
    "source_port INTEGER NOT NULL,last_update_utc INTEGER NOT NULL,source_type INTEGER NOT NULL,"
    "has_cross_site_ancestor INTEGER NOT NULL)")

URLS_SCHEMA = ("CREATE TABLE urls(id INTEGER PRIMARY KEY AUTOINCREMENT,url LONGVARCHAR,title LONGVARCHAR,"
               "visit_count INTEGER DEFAULT 0 NOT NULL,typed_count INTEGER DEFAULT 0 NOT NULL,"
               "last_visit_time INTEGER NOT NULL,hidden INTEGER DEFAULT 0 NOT NULL)")

# OSWorld's runner, with a controller that also answers what these getters ask the VM.
_DRIVER = r'''
import functools, json, os, subprocess, sys, types
sys.path.insert(0, sys.argv[1])
import osworld_reference_runner as runner

runner.HEAVY = runner.HEAVY + ("pydrive",)
VM_HOME = "/home/user"


def execute_python_command(self, command):
    p = subprocess.run([sys.executable, "-c", command], env={**os.environ, "HOME": VM_HOME},
                       capture_output=True, text=True)
    return {"status": "success" if p.returncode == 0 else "error", "output": p.stdout, "error": p.stderr,
            "returncode": p.returncode}


def get_vm_desktop_path(self):
    return VM_HOME + "/Desktop" if (self.root / VM_HOME.lstrip("/") / "Desktop").is_dir() else None


def get_vm_directory_tree(self, path):
    def tree(d):
        return {"type": "directory", "name": d.name,
                "children": [tree(c) if c.is_dir() else {"type": "file", "name": c.name} for c in d.iterdir()]}
    return tree(self.root / str(path).lstrip("/"))


def as_json(o):
    if isinstance(o, bytes):
        return {"bytes": o.hex()}
    raise TypeError(type(o).__name__)


for f in (execute_python_command, get_vm_desktop_path, get_vm_directory_tree):
    setattr(runner._FileController, f.__name__, f)
runner.json = types.SimpleNamespace(load=json.load, dump=functools.partial(json.dump, default=as_json))
runner.main()
'''


def _as_json(o):
    if isinstance(o, bytes):
        return {"bytes": o.hex()}
    raise TypeError(type(o).__name__)


def _osworld_getters(cases: list[tuple[str, Path]]) -> list[dict]:
    """OSWorld's getter get_<type>(env, {"dest": ...}) on each fake VM root, in one reference run."""
    payload = [{"module": "getters.chrome", "func": f"get_{t}", "args": [{"dest": "Cookies"}], "kwargs": {},
                "env_dir": str(root)} for t, root in cases]
    p = subprocess.run([str(REF_PY), "-W", "ignore", "-c", _DRIVER, str(RUNNER.parent)], input=json.dumps(payload),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


class _Profile:
    """A session as the profile getters see it: HOME, the VM's name for it, the run dir (evaluation cache)."""

    vm_home = VM_HOME

    def __init__(self, home: Path):
        self.home = home
        self.run_dir = home / ".bunshin-run"

    def vm_path(self, p: str) -> str:
        return str(self.home) + p[len(VM_HOME):] if p.startswith(VM_HOME) else p


def _assert_getters_agree(cases: list[tuple[str, _Profile, Path]]) -> None:
    mismatches = []
    for (t, session, root), ref in zip(cases, _osworld_getters([(t, root) for t, _, root in cases])):
        ours = json.loads(json.dumps(GETTERS[t](session, {"type": t, "dest": "Cookies"}), default=_as_json))
        if "error" in ref or ref["value"] != ours:
            mismatches.append((t, root.name, ref, ours))
    assert not mismatches, "\n".join(map(repr, mismatches))


def _fake_vm(root: Path, *, prefs=None, local_state=None, bookmarks=None, cookies=None, history=None,
             desktop: dict | None = None) -> _Profile:
    """root/home/user with a Chromium profile (OSWorld finds it as .config/google-chrome). JSON values are
    written as JSON, strings as they are; cookies: [(host_key, name)], history: [(url, title)], or raw bytes
    for the database file."""
    home = root / "home" / "user"
    profile = home / ".config" / "chromium"
    (profile / "Default").mkdir(parents=True)
    (home / ".config" / "google-chrome").symlink_to("chromium")

    def put(path: Path, value) -> None:
        if value is not None:
            path.write_text(value if isinstance(value, str) else json.dumps(value))

    put(profile / "Default" / "Preferences", prefs)
    put(profile / "Local State", local_state)
    put(profile / "Default" / "Bookmarks", bookmarks)
    if isinstance(cookies, bytes):
        (profile / "Default" / "Cookies").write_bytes(cookies)
    elif cookies is not None:
        with sqlite3.connect(profile / "Default" / "Cookies") as db:
            db.execute(COOKIES_SCHEMA)
            db.executemany("INSERT INTO cookies VALUES (13350000000000000, ?, '', ?, '', ?, '/', 13390000000000000, "
                           "1, 0, 13350000000000000, 1, 1, 1, 0, 2, 443, 13350000000000000, 0, 0)",
                           [(host, name, b"v10" + name.encode()) for host, name in cookies])
        db.close()
    if isinstance(history, bytes):
        (profile / "Default" / "History").write_bytes(history)
    elif history is not None:
        with sqlite3.connect(profile / "Default" / "History") as db:
            db.execute(URLS_SCHEMA)
            db.executemany("INSERT INTO urls (url, title, visit_count, typed_count, last_visit_time, hidden) "
                           "VALUES (?, ?, 1, 0, 13350000000000000, 0)", history)
        db.close()
    if desktop is not None:
        (home / "Desktop").mkdir()
        for name, text in desktop.items():
            if text is None:
                (home / "Desktop" / name).mkdir()
            else:
                (home / "Desktop" / name).write_text(text)
    return _Profile(home)


def _bookmark_roots(bar: list[dict]) -> dict:
    folder = {"children": [], "date_added": "13350000000000000", "type": "folder"}
    return {"roots": {"bookmark_bar": {**folder, "children": bar, "id": "1", "name": "Bookmarks bar"},
                      "other": {**folder, "id": "2", "name": "Other bookmarks"},
                      "synced": {**folder, "id": "3", "name": "Mobile bookmarks"}}, "version": 1}


def _url(name: str, url: str) -> dict:
    return {"type": "url", "name": name, "url": url}


def _folder(name: str, children: list[dict]) -> dict:
    return {"type": "folder", "name": name, "children": children}


AUTHORS = [["https://jimfan.me/", "https://research.nvidia.com/person/linxi-jim-fan"],
           ["https://yukezhu.me/", "https://www.cs.utexas.edu/people/faculty-researchers/yuke-zhu"],
           "http://tensorlab.cms.caltech.edu/users/anima/"]
BAR = [_folder("Favorites", []),
       _folder("Liked Authors", [_url("Jim", "https://jimfan.me/"), _url("Yuke", "https://yukezhu.me/"),
                                 _url("Anima", "http://tensorlab.cms.caltech.edu/users/anima/")]),
       _url("Transformer", "https://jalammar.github.io/illustrated-transformer/")]
SHORTCUT = ("[Desktop Entry]\nVersion=1.0\nType=Application\nName=Play Puzzle Game 2048\n"
            "Exec=/usr/bin/chromium --app-id=x\n")
ALL_SET = dict(
    prefs={"default_search_provider_data": {"template_url_data": {"short_name": "Bing", "keyword": "bing.com"}},
           "profile": {"name": "Thomas", "default_content_setting_values": {"cookies": 4}},
           "webkit": {"webprefs": {"default_font_size": 24, "default_fixed_font_size": 16}},
           "session": {"restore_on_startup": 5}, "enable_do_not_track": True, "safebrowsing": {"enhanced": True},
           "extensions": {"settings": {
               "aaaabbbbccccddddeeeeffffgggghhhh": {"path": "/home/user/Desktop/helloExtension", "location": 4,
                                                    "manifest": {"name": "Hello Extension", "version": "1.0"}},
               "laookkfknpbbblfpciffpaejjkokdgca": {"path": "laookkfknpbbblfpciffpaejjkokdgca/3.0_0",
                                                    "location": 1, "manifest": {"name": "Momentum"}}}}},
    local_state={"browser": {"enabled_labs_experiments": ["chrome-refresh-2023@2", "chrome-webui-refresh-2023@2"]}},
    bookmarks=_bookmark_roots(BAR),
    cookies=[(".amazon.com", "session-id"), ("www.amazon.com", "ubid-main"), (".google.com", "NID")],
    history=[("https://www.youtube.com/watch?v=dQw4w9WgXcQ", "Rick Astley"), ("https://www.bbc.co.uk/", "BBC")],
    desktop={"2048.desktop": SHORTCUT, "notes.txt": "Name=Play Puzzle Game 2048\n", "Projects": None})
DEFAULTS = dict(
    prefs={"profile": {"avatar_index": 26},
           "session": {"restore_on_startup": 4, "startup_urls": ["http://funbrain.com/"]},
           "webkit": {"webprefs_migrated": True}, "enable_do_not_track": False, "safebrowsing": {"enhanced": False},
           "extensions": {"settings": {}}},
    local_state={"browser": {}}, bookmarks=_bookmark_roots([]), cookies=[], history=[], desktop={})
UNREADABLE = dict(prefs="{not json", local_state="", bookmarks="", cookies=b"not a database",
                  history=b"SQLite format 3\0 cut short", desktop={})
EVERY_GETTER = ("default_search_engine", "cookie_data", "history", "bookmarks", "profile_name", "enabled_experiments",
                "chrome_font_size", "data_delete_automacally", "new_startup_page", "enable_do_not_track",
                "enable_enhanced_safety_browsing", "find_unpacked_extension_path", "find_installed_extension_name",
                "shortcuts_on_desktop")
WITHOUT_PREFERENCES = ("default_search_engine", "cookie_data", "history", "bookmarks", "profile_name",
                       "enabled_experiments", "chrome_font_size", "enable_do_not_track", "shortcuts_on_desktop")


@needs_reference
def test_getters_agree_with_osworld_on_fake_profiles(tmp_path):
    profiles = {"all_set": ALL_SET, "defaults": DEFAULTS, "unreadable": UNREADABLE, "missing": {"desktop": {}}}
    made = {name: (_fake_vm(tmp_path / name, **files), tmp_path / name) for name, files in profiles.items()}
    cases = [(t, *made[name]) for name in ("all_set", "defaults") for t in EVERY_GETTER]
    cases += [(t, *made[name]) for name in ("unreadable", "missing") for t in WITHOUT_PREFERENCES]
    _assert_getters_agree(cases)

    s = made["all_set"][0]  # the values themselves, for the record
    assert GETTERS["default_search_engine"](s, {}) == "Bing"
    assert [row[1] for row in GETTERS["cookie_data"](s, {})] == [".amazon.com", "www.amazon.com", ".google.com"]
    assert GETTERS["shortcuts_on_desktop"](s, {}) == {"2048.desktop": SHORTCUT}
    assert GETTERS["find_installed_extension_name"](s, {}) == ["Hello Extension", "Momentum"]
    assert GETTERS["new_startup_page"](made["defaults"][0], {}) == "false"
    assert GETTERS["cookie_data"](made["missing"][0], {}) is None


def test_getters_where_osworld_differs(tmp_path):
    ext = tmp_path / "home" / "user" / "Desktop" / "helloExtension"
    s = _fake_vm(tmp_path, prefs={
        "profile": {"default_content_setting_values": {"has_migrated_local_network_access": True}},
        "extensions": {"settings": {
            "unpacked": {"path": str(ext), "location": 4},
            "localized": {"path": "localized/1.0_0", "location": 1},
            "component": {"location": 5, "manifest": {"name": "Chromium PDF Viewer"}}}}}, desktop={})
    ext.mkdir()
    (ext / "manifest.json").write_text(json.dumps({"manifest_version": 3, "name": "Hello Ext", "version": "1"}))
    packed = s.home / ".config/chromium/Default/Extensions/localized/1.0_0"
    (packed / "_locales" / "en").mkdir(parents=True)
    (packed / "manifest.json").write_text(json.dumps({"name": "__MSG_appName__", "default_locale": "en"}))
    (packed / "_locales" / "en" / "messages.json").write_text(json.dumps({"APPNAME": {"message": "Momentum"}}))
    assert GETTERS["data_delete_automacally"](s, {}) == "false"  # a fresh Chromium profile
    assert GETTERS["find_unpacked_extension_path"](s, {}) == ["/home/user/Desktop/helloExtension",
                                                             "localized/1.0_0"]
    assert GETTERS["find_installed_extension_name"](s, {}) == ["Hello Ext", "Momentum", "Chromium PDF Viewer"]
    missing = _Profile(tmp_path / "nowhere")
    for t, value in (("data_delete_automacally", "false"), ("new_startup_page", "false"),
                     ("enable_enhanced_safety_browsing", "false"), ("find_unpacked_extension_path", []),
                     ("find_installed_extension_name", []), ("shortcuts_on_desktop", {})):
        assert GETTERS[t](missing, {}) == value, t


def _rows(*hosts: str) -> list[list]:
    return [[13350000000000000, h, "", "name", "", "", "/"] for h in hosts]


@needs_reference
def test_metrics_agree_with_osworld():
    amazon = {"type": "domains", "domains": [".amazon.com"]}
    roots = _bookmark_roots(BAR)["roots"]
    folders = {"type": "bookmark_bar_folders_names", "names": ["Favorites", "Liked Authors"]}
    links = {"type": "bookmark_bar_websites_urls", "urls": ["https://jalammar.github.io/illustrated-transformer/"]}
    liked = {"type": "liked_authors_websites_urls", "names": ["Liked Authors"], "urls": AUTHORS}
    other_bar = {"bookmark_bar": {"children": [_folder("Favorites", []), _url("x", "https://example.org/")]}}
    extra_author = {"bookmark_bar": {"children": [_folder("Liked Authors", [
        _url(str(i), u) for i, u in enumerate(["https://jimfan.me/", "https://yukezhu.me/",
                                              "http://tensorlab.cms.caltech.edu/users/anima/", "https://a.org/"])])]}}
    webprefs = {"default_fixed_font_size": 13, "default_font_size": 24}
    cases = [("chrome", "is_cookie_deleted", [_rows(*hosts), amazon], {}) for hosts in (
        (), (".google.com", "localhost"), (".amazon.com",), ("www.amazon.com",), ("amazon.com",),
        (".www.amazon.com",), ("fls-na.amazon.com", ".google.com"), (".google.com", ".amazon.com"))]
    cases += [("chrome", "is_cookie_deleted", [_rows("localhost", "127.0.0.1"), {"type": "domains", "domains": d}], {})
              for d in (["localhost"], ["127.0.0.1"], ["example.org"])]
    youtube = {"type": "keywords", "keywords": ["youtube"]}
    bbc, tube = ["https://www.bbc.co.uk/", "BBC", 1], ["https://m.youtube.com/", "", 2]
    cases += [("chrome", "check_history_deleted", [h, youtube], {}) for h in ([], [bbc], [bbc, tube])]
    cases += [("chrome", "is_expected_bookmarks", [b, r], {}) for b in (roots, other_bar, extra_author, [], {})
              for r in (folders, links, liked)]
    cases += [("chrome", "is_expected_bookmarks", [roots, r], {}) for r in (
        {**folders, "names": ["Favorites"]}, {**links, "urls": []}, {**liked, "urls": AUTHORS[:2]},
        {**liked, "urls": [["https://yukezhu.me/"], "https://jimfan.me/", AUTHORS[2]]})]
    flags = ["chrome-refresh-2023@2", "chrome-webui-refresh-2023@2"]
    refresh = ["chrome-refresh-2023", "chrome-webui-refresh-2023"]
    cases += [("chrome", "check_enabled_experiments", [e, {"type": "names", "names": n}], {}) for e, n in (
        (flags, refresh), (flags[::-1], refresh), (flags[:1], refresh), ([], []),
        (["smooth-scrolling@1"], ["smooth-scrolling"]))]
    cases += [("chrome", "check_font_size", [f, r], {}) for f in (webprefs, {**webprefs, "default_font_size": 16})
              for r in ({"type": "range", "min": 16, "max": 99999}, {"type": "value", "value": 24},
                        {"type": "range", "min": 8, "max": 16})]
    installed = ["Zoom Chrome Extension", "Momentum", "Google Translate", "React Developer Tools"]
    cases += [("chrome", "is_expected_installed_extensions", [i, {"expected": e}], {}) for i, e in (
        (installed, ["Momentum", "Google Translate"]), (installed, ["Momentum", "Speechify Text to Speech"]),
        ([], ["Momentum"]), (installed, []))]
    shortcuts = {"2048.desktop": SHORTCUT, "other.desktop": "[Desktop Entry]\nName=Play Puzzle Game 2048"}
    cases += [("chrome", "is_shortcut_on_desktop", [s, r], {})
              for s in (shortcuts, {"other.desktop": shortcuts["other.desktop"]}, {})
              for r in ({"type": "name", "name": "Play Puzzle Game 2048"}, {"type": "name", "name": "Play Puzzle"},
                        {"type": "exec", "exec": "/usr/bin/chromium --app-id=x"})]
    assert_agree(cases)


def test_missing_results_score_zero_and_malformed_rules_raise():
    for name, rule in (("is_cookie_deleted", {"type": "domains", "domains": [".amazon.com"]}),
                       ("check_history_deleted", {"type": "keywords", "keywords": ["youtube"]}),
                       ("is_expected_bookmarks", {"type": "bookmark_bar_folders_names", "names": ["Favorites"]}),
                       ("check_enabled_experiments", {"type": "names", "names": []}),
                       ("check_font_size", {"type": "value", "value": 16}),
                       ("is_expected_installed_extensions", {"expected": ["Momentum"]}),
                       ("is_shortcut_on_desktop", {"type": "name", "name": "x"})):
        assert METRICS[name](None, rule) == 0.0, name
    assert METRICS["check_font_size"]({"minimum_font_size": 6}, {"type": "value", "value": 16}) == 0.0
    for name, rule, fragment in (("is_cookie_deleted", {"type": "urls"}, "rule type 'urls'"),
                                 ("check_history_deleted", {"type": "keywords"}, "'keywords'"),
                                 ("is_expected_bookmarks", {"type": "folders"}, "rule type 'folders'"),
                                 ("check_font_size", {"type": "range", "min": 1}, "'max'"),
                                 ("is_shortcut_on_desktop", {"type": "url", "url": "x"}, "rule type 'url'"),
                                 ("is_expected_installed_extensions", {}, "'expected'")):
        with pytest.raises(EvaluatorError, match=fragment):
            METRICS[name]([], rule)


def test_config_steps_are_validated():
    def task(step: dict) -> dict:
        return {"id": "t", "instruction": "x", "config": [step], "evaluator": {"func": "infeasible"}}

    for t, params, fragment in (
            ("chrome_close_tabs", {"urls_to_close": "https://a.org"}, "'urls_to_close' must be a list"),
            ("update_browse_history", {"history": [{"url": "u", "title": "t"}]}, "visit_time_from_now_in_seconds"),
            ("update_browse_history", {}, r"misses parameter\(s\) \['history'\]")):
        with pytest.raises(TaskValidationError, match=fragment):
            task_from_dict(task({"type": t, "parameters": params}))
    ok = task_from_dict(task({"type": "chrome_close_tabs", "parameters": {"urls_to_close": ["https://a.org"]}}))
    assert ok.config[0].type == "chrome_close_tabs"


# ----------------------------------------------------------------------------------------------------
# live: a real Chromium on the desktop


def _wait_devtools(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/version", timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _close_chromium(browser, process) -> None:
    """Chromium's own shutdown (as `pkill chrome` in OSWorld's postconfig): it writes its files."""
    try:
        browser.new_browser_cdp_session().send("Browser.close")
    except Exception:
        pass  # the connection drops as Chromium exits
    process.wait(timeout=20)


@needs_reference
def test_live_chromium_settings_are_read_from_its_profile(clean_desktop, tmp_path):
    from playwright.sync_api import sync_playwright

    d = clean_desktop
    ext = d.home / "Desktop" / "helloExtension"
    ext.mkdir(parents=True)
    (ext / "manifest.json").write_text(json.dumps({"manifest_version": 3, "name": "Hello Ext", "version": "1.0"}))
    chromium = d.launch("chromium", f"--load-extension={ext}", "about:blank")
    _wait_devtools(d.cdp_port)
    with sync_playwright() as pw:
        browser = pw.chromium.connect_over_cdp(f"http://127.0.0.1:{d.cdp_port}")
        context = browser.contexts[0]
        page = context.new_page()
        # what the settings pages themselves call; a last request answered means the earlier ones were handled
        page.goto("chrome://settings")
        page.evaluate("""async () => {
            const {sendWithPromise} = await import('chrome://resources/js/cr.js');
            await chrome.settingsPrivate.setPref('webkit.webprefs.default_font_size', 24);
            await chrome.settingsPrivate.setPref('enable_do_not_track', true);
            await chrome.settingsPrivate.setPref('safebrowsing.enhanced', true);
            await chrome.settingsPrivate.setPref('session.restore_on_startup', 1);
            chrome.send('setDefaultValueForContentType', ['cookies', 'session_only']);
            chrome.send('setCategoryPermissionForPattern', ['[*.]google.com', '', 'cookies', 'allow', false]);
            chrome.send('setProfileName', ['Thomas']);
            await sendWithPromise('getDefaultValueForContentType', 'cookies'); }""")
        page.goto("chrome://flags")
        page.evaluate("""async () => {
            const {sendWithPromise} = await import('chrome://resources/js/cr.js');
            chrome.send('enableExperimentalFeature', ['ignore-gpu-blocklist', 'true']);
            chrome.send('enableExperimentalFeature', ['enable-benchmarking@2', 'true']);
            await sendWithPromise('requestExperimentalFeatures'); }""")
        page.goto("chrome://bookmarks")
        page.evaluate("""async () => {
            await chrome.bookmarks.create({parentId: '1', title: 'Favorites'});
            await chrome.bookmarks.create({parentId: '1', title: 'Local', url: 'http://127.0.0.1:9/page'}); }""")
        context.add_cookies([{"name": n, "value": "1", "domain": host, "path": "/", "expires": time.time() + 3600}
                             for n, host in (("session-id", ".amazon.com"), ("NID", ".google.com"))])
        _close_chromium(browser, chromium)
    d.launch("chromium", f"--load-extension={ext}")  # running again, as after OSWorld's postconfig
    _wait_devtools(d.cdp_port)

    get = {t: GETTERS[t](d, {"type": t}) for t in EVERY_GETTER}
    assert get["chrome_font_size"]["default_font_size"] == 24
    assert METRICS["check_font_size"](get["chrome_font_size"], {"type": "range", "min": 16, "max": 99999}) == 1.0
    assert (get["enable_do_not_track"], get["enable_enhanced_safety_browsing"]) == ("true", "true")
    assert (get["new_startup_page"], get["data_delete_automacally"], get["profile_name"]) == ("false", "true", "Thomas")
    assert get["default_search_engine"] == "Google"
    assert get["enabled_experiments"] == ["enable-benchmarking@2", "ignore-gpu-blocklist"]  # Chromium sorts them
    assert METRICS["check_enabled_experiments"](get["enabled_experiments"], {
        "type": "names", "names": ["enable-benchmarking", "ignore-gpu-blocklist"]}) == 1.0
    assert METRICS["is_expected_bookmarks"](get["bookmarks"], {"type": "bookmark_bar_folders_names",
                                                               "names": ["Favorites"]}) == 1.0
    assert METRICS["is_expected_bookmarks"](get["bookmarks"], {"type": "bookmark_bar_websites_urls",
                                                               "urls": ["http://127.0.0.1:9/page"]}) == 1.0
    # cleared on exit (the session_only default) but for the site allowed to keep them
    assert [row[1] for row in get["cookie_data"]] == [".google.com"]
    assert METRICS["is_cookie_deleted"](get["cookie_data"], {"type": "domains", "domains": [".amazon.com"]}) == 1.0
    assert METRICS["is_cookie_deleted"](get["cookie_data"], {"type": "domains", "domains": ["google.com"]}) == 0.0
    assert "/home/user/Desktop/helloExtension" in get["find_unpacked_extension_path"]
    assert "Hello Ext" in get["find_installed_extension_name"]

    # OSWorld's getters on the same files (copied once, so both read the same bytes)
    copy = _fake_vm(tmp_path / "vm", desktop={})
    live = d.home / ".config" / "chromium"
    for rel in ("Local State", "Default/Preferences", "Default/Bookmarks", "Default/Cookies"):
        (copy.home / ".config" / "chromium" / rel).write_bytes((live / rel).read_bytes())
    _assert_getters_agree([(t, copy, tmp_path / "vm") for t in EVERY_GETTER
                           if t not in ("find_unpacked_extension_path", "find_installed_extension_name")])
    d.kill_apps()


def test_live_update_browse_history_and_chrome_close_tabs(clean_desktop):
    from playwright.sync_api import expect, sync_playwright

    d = clean_desktop
    urls = ["http://127.0.0.1:9/lonelyplanet", "http://127.0.0.1:9/airbnb", "http://127.0.0.1:9/tripadvisor"]
    run_config(d, [
        {"type": "update_browse_history", "parameters": {"history": [
            {"url": "https://www.youtube.com/watch?v=dQw4w9WgXcQ", "title": "Rick Astley - Never Gonna Give You Up",
             "visit_time_from_now_in_seconds": 3600},
            {"url": "https://www.nytimes.com/", "title": "The New York Times",
             "visit_time_from_now_in_seconds": 300}]}},
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        {"type": "chrome_open_tabs", "parameters": {"urls_to_open": urls}},
        {"type": "chrome_close_tabs", "parameters": {"urls_to_close": [urls[2], "http://127.0.0.1:9/never-opened"]}}])
    visited = GETTERS["history"](d, {"type": "history", "dest": "history.sqlite"})  # Chromium has it open
    assert {(url, title) for url, title, _ in visited} >= {
        ("https://www.youtube.com/watch?v=dQw4w9WgXcQ", "Rick Astley - Never Gonna Give You Up"),
        ("https://www.nytimes.com/", "The New York Times")}
    assert METRICS["check_history_deleted"](visited, {"type": "keywords", "keywords": ["youtube"]}) == 0.0
    open_urls = [t["url"] for t in GETTERS["open_tabs_info"](d, {})]
    assert urls[0] in open_urls and urls[1] in open_urls and urls[2] not in open_urls
    with sync_playwright() as pw:
        page = pw.chromium.connect_over_cdp(f"http://127.0.0.1:{d.cdp_port}").contexts[0].new_page()
        page.goto("chrome://history")
        for title in ("Rick Astley - Never Gonna Give You Up", "The New York Times"):
            expect(page.get_by_text(title).first).to_be_visible(timeout=10_000)
    d.kill_apps()
