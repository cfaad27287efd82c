"""The getter registry and the getters every application shares: a task's `result` / `expected` config → the value
of the desktop's state that a metric (evaluators/, judge-only) compares.

Each getter is `fn(session, config) -> value` under OSWorld's getter `type` name (registered in GETTERS):
    vm_file             {"path": str | [str], "dest": str | [str], "multi"?, "gives"?} → local copy path(s),
                        None where the file does not exist (a copy, so later desktop changes don't leak in)
    gimp_config_file    {"file_name", "dest"} → a copy of ~/.config/GIMP/2.10/<file_name>, None if absent
    cache_file          {"path"} → the evaluation cache's file of that name (an execute step's "stdout"
                        or "stderr" wrote it), None if absent
    vm_command_line     {"command": str | [str], "shell"?} → stdout (str)
    vm_command_error    {"command", "shell"?} → stderr (str)
    vm_terminal_output  {} → the newest terminal's text (str | None)
    accessibility_tree  {} → the OSWorld-style a11y XML (str)
    active_tab_info     {} → {"title", "url"} of Chromium's active tab (DevTools HTTP endpoint), or None
    open_tabs_info      {} → [{"title", "url"}] of every open page tab
    active_url          {} → the active tab's URL (str | None)
    list_directory      {"path"} → sorted entry names (list) or None
    file_exists         {"path"} → bool (ours; OSWorld tasks use vm_command_line for this)

Runs where the desktop is (inside the workspace, through osworld.collect; in-process for a host desktop).
Owns: reading state out of a desktop, the GETTERS registry, the evaluation cache (cache_dir), and JUDGE_GETTERS
(the names of the getters that read the task's own data: only the judge runs them, evaluators/judge_getters.py).
Does not own: judging (evaluators/), setup (tasks.py).
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Callable, Mapping

from ..errors import EvaluatorError, TaskConfigError

__all__ = ["GETTERS", "JUDGE_GETTERS", "getter", "get_value", "cache_dir"]

GETTERS: dict[str, Callable[[Any, Mapping[str, Any]], Any]] = {}

#: getters that read only the task's own config (and the host's download cache): the judge runs them itself
#: (evaluators/judge_getters.py registers them in the judge's process) and a workspace refuses them
JUDGE_GETTERS = frozenset({"rule", "cloud_file", "rule_relativeTime", "time_diff_range"})


def getter(name: str):
    def deco(fn):
        if name in GETTERS:
            raise EvaluatorError(f"getter {name!r} registered twice")
        GETTERS[name] = fn
        return fn
    return deco


def get_value(session, config: Mapping[str, Any] | None) -> Any:
    """Run the getter named by config["type"]; None config → None."""
    if config is None:
        return None
    t = config.get("type")
    if t not in GETTERS:
        raise EvaluatorError(f"unknown getter type {t!r}; known: {', '.join(sorted(GETTERS))}")
    return GETTERS[t](session, config)


def cache_dir(session) -> str:
    """The session's evaluation cache: getters' copies and the files execute steps write."""
    d = os.path.join(str(session.run_dir), "eval_cache")
    os.makedirs(d, exist_ok=True)
    return d


def _multi(session, config: Mapping[str, Any], one: Callable[[str, str], str | None]) -> Any:
    paths = config["path"]
    dests = config.get("dest")
    if config.get("multi", False) or isinstance(paths, list):
        paths = list(paths)
        if dests is None:
            dests = [os.path.basename(str(p)) for p in paths]
        if not isinstance(dests, list) or len(dests) != len(paths):
            raise EvaluatorError("multi-file getter: 'dest' must be a list as long as 'path'")
        out = [one(p, d) for p, d in zip(paths, dests)]
        gives = config.get("gives", [0])
        picked = [out[i] for i in gives]
        return picked[0] if len(picked) == 1 else picked
    return one(str(paths), str(dests or os.path.basename(str(paths))))


@getter("vm_file")
def get_vm_file(session, config: Mapping[str, Any]) -> Any:
    def one(path: str, dest: str) -> str | None:
        src = session.vm_path(path)
        if not os.path.isfile(src):
            return None
        local = os.path.join(cache_dir(session), os.path.basename(dest))
        shutil.copyfile(src, local)
        return local
    return _multi(session, config, one)


@getter("gimp_config_file")
def get_gimp_config_file(session, config: Mapping[str, Any]) -> str | None:
    """A copy of GIMP 2.10's config file config["file_name"] (~/.config/GIMP/2.10/), None if absent."""
    return get_vm_file(session, {"path": f"{session.vm_home}/.config/GIMP/2.10/{config['file_name']}",
                                 "dest": config.get("dest", config["file_name"])})


@getter("cache_file")
def get_cache_file(session, config: Mapping[str, Any]) -> str | None:
    """A file the task's own steps wrote into the evaluation cache (an execute step's "stdout"/"stderr")."""
    path = os.path.join(cache_dir(session), str(config["path"]))
    return path if os.path.isfile(path) else None


def _command(session, config: Mapping[str, Any]):
    return session.run_task_command(config["command"], shell=bool(config.get("shell", False)),
                                    timeout=float(config.get("timeout", 60)))


@getter("vm_command_line")
def get_vm_command_line(session, config: Mapping[str, Any]) -> str:
    return _command(session, config).stdout


@getter("vm_command_error")
def get_vm_command_error(session, config: Mapping[str, Any]) -> str:
    return _command(session, config).stderr


@getter("vm_terminal_output")
def get_vm_terminal_output(session, config: Mapping[str, Any]) -> str | None:
    return session.terminal_output()


@getter("accessibility_tree")
def get_accessibility_tree(session, config: Mapping[str, Any]) -> str:
    return session.accessibility_tree(int(config.get("max_nodes", 4000)))


def _tabs(session) -> list[dict] | None:
    from ..tasks import _cdp_pages

    try:
        pages = _cdp_pages(session.cdp_port, timeout=0)  # one try: no Chromium is None, not a wait
    except TaskConfigError:
        return None
    # Chromium lists page targets most recently activated first.
    return [{"title": t.get("title", ""), "url": t.get("url", "")} for t in pages]


@getter("active_tab_info")
def get_active_tab_info(session, config: Mapping[str, Any]) -> dict | None:
    tabs = _tabs(session)
    return tabs[0] if tabs else None


@getter("open_tabs_info")
def get_open_tabs_info(session, config: Mapping[str, Any]) -> list[dict] | None:
    return _tabs(session)


@getter("active_url")
def get_active_url(session, config: Mapping[str, Any]) -> str | None:
    tabs = _tabs(session)
    return tabs[0]["url"] if tabs else None


@getter("list_directory")
def get_list_directory(session, config: Mapping[str, Any]) -> list[str] | None:
    p = session.vm_path(config["path"])
    return sorted(os.listdir(p)) if os.path.isdir(p) else None


@getter("file_exists")
def get_file_exists(session, config: Mapping[str, Any]) -> bool:
    return os.path.exists(session.vm_path(config["path"]))
