"""OSWorld task files: loading into validated frozen dataclasses, and running their `config` steps.

A task is a JSON object in OSWorld's schema:
    {"id", "snapshot", "instruction", "source", "config": [{"type", "parameters"}], "trajectory",
     "related_apps": [...], "evaluator": {"func", "result", "expected", "options", "conj", "postconfig"}}
`func` is one metric name or a list; `result` / `expected` / `options` are then one dict or a list of the
same length; `conj` is "and" (default) or "or"; `postconfig` is a list of config steps run before judging.

Config step types (parameters as in OSWorld):
    execute / command   {"command": str | [str], "shell": bool, "stdout"?, "stderr"?}  run to completion;
                        "stdout"/"stderr" name files of the evaluation cache the output is written to
    launch              {"command": str | [str], "shell": bool}   start detached (apps get the desktop's
                        flags: chromium/google-chrome → CDP port etc., libreoffice → private profile)
    open                {"path"}                                    open with the app for its file type and
                        wait for its window
    sleep               {"seconds"}
    activate_window     {"window_name", "strict"?, "by_class"?, "timeout"?}  waits for the window first
    close_window        {"window_name", "strict"?, "by_class"?}
    download            {"files": [{"url", "path"}]}   the workspace has no network: the host downloaded
                        the file (downloads.py) and staged it in the workspace, named in the task's
                        "bunshin_downloads" {url: sha256}; URLs under downloads.SHIPPED_URL are files shipped
                        in envs/osworld/task_files/<last path segment>. Copied to `path`.
    upload_file         {"files": [{"local_path", "path"}]}   local_path relative to task_files/
    chrome_open_tabs    {"urls_to_open": [...]}        through Chromium's DevTools HTTP endpoint
    chrome_close_tabs   {"urls_to_close": [...]}       close the tab showing each URL (compared as URLs), if any
    update_browse_history {"history": [{"url", "title", "visit_time_from_now_in_seconds"}]}  Chromium's
                        History becomes these visits only (an empty History made by the installed Chromium;
                        OSWorld downloads one); run it before Chromium starts
    http_server         {"directory", "port"}          (ours) a loopback `python -m http.server`; directory
                        relative to task_files/ unless absolute
Paths and commands naming /home/user are mapped to the session's HOME (see desktop.DesktopSession.vm_path).

Owns: schema validation (small named checks, errors name the file and field) and the setup runner.
Does not own: judging (evaluators/), the desktop (desktop.py).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from .errors import TaskConfigError, TaskValidationError

__all__ = [
    "CONFIG_TYPES",
    "ConfigStep",
    "Evaluator",
    "Task",
    "load_task",
    "load_tasks",
    "task_from_dict",
    "run_config",
    "TASKS_DIR",
    "ORACLES_DIR",
    "TASK_FILES_DIR",
    "load_oracle",
]

_HERE = Path(__file__).resolve().parent
TASKS_DIR = _HERE / "tasks"
ORACLES_DIR = _HERE / "oracles"
TASK_FILES_DIR = _HERE / "task_files"
#: files only the judge reads (expected files): excluded from the code layer (.workspace-exclude)
JUDGE_FILES_DIR = _HERE / "judge_files"

CONFIG_TYPES = ("execute", "command", "launch", "open", "sleep", "activate_window", "close_window", "download",
                "upload_file", "chrome_open_tabs", "chrome_close_tabs", "update_browse_history", "http_server")


def _freeze(x: Any) -> Any:
    """Deep-freeze JSON: dicts → MappingProxyType, lists → tuples."""
    if isinstance(x, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


def _thaw(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _thaw(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return [_thaw(v) for v in x]
    return x


@dataclass(frozen=True)
class ConfigStep:
    """One setup step. Fields: type (one of CONFIG_TYPES), parameters (read-only mapping)."""

    type: str
    parameters: Mapping[str, Any]

    def to_dict(self) -> dict:
        return {"type": self.type, "parameters": _thaw(self.parameters)}


@dataclass(frozen=True)
class Evaluator:
    """How a task is judged.

    Fields:
        funcs: metric names (a 1-tuple when the JSON gives a single string).
        results: getter configs, one per func (read-only mappings).
        expected: getter configs or None, one per func.
        options: metric keyword options, one per func.
        conj: "and" or "or" (how several metric scores combine).
        postconfig: steps run before the getters.
        single: the JSON gave `func` as a string (not a list).
    """

    funcs: tuple[str, ...]
    results: tuple[Mapping[str, Any] | None, ...]
    expected: tuple[Mapping[str, Any] | None, ...]
    options: tuple[Mapping[str, Any], ...]
    conj: str = "and"
    postconfig: tuple[ConfigStep, ...] = ()
    single: bool = True


@dataclass(frozen=True)
class Task:
    """A validated OSWorld task (read-only). Fields mirror the JSON; `path` is the file it came from."""

    id: str
    snapshot: str
    instruction: str
    source: str
    config: tuple[ConfigStep, ...]
    trajectory: str
    related_apps: tuple[str, ...]
    evaluator: Evaluator | None  # None in a workspace's copy (workspace_task): only the judge holds it
    path: str = ""
    raw: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def downloads(self) -> dict[str, str]:
        """{url: sha256} of the files the host downloaded for this task (its config's "bunshin_downloads")."""
        return dict(self.raw.get("bunshin_downloads") or {})

    def to_dict(self) -> dict:
        return _thaw(self.raw)


# ----------------------------------------------------------------------------------------------------
# validation: small named checks


def _fail(where: str, msg: str) -> TaskValidationError:
    return TaskValidationError(f"{where}: {msg}")


def _check_str(d: Mapping, key: str, where: str, *, required: bool = True, default: str = "") -> str:
    if key not in d:
        if required:
            raise _fail(where, f"missing required field {key!r}")
        return default
    v = d[key]
    if not isinstance(v, str):
        raise _fail(where, f"field {key!r} must be a string; found {type(v).__name__} {v!r:.60}")
    return v


def _check_step(step: Any, where: str) -> ConfigStep:
    if not isinstance(step, Mapping):
        raise _fail(where, f"a config step must be an object {{\"type\", \"parameters\"}}; found {step!r:.60}")
    t = step.get("type")
    if t not in CONFIG_TYPES:
        import difflib
        near = difflib.get_close_matches(str(t), CONFIG_TYPES, n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise _fail(where, f"unknown config type {t!r}; supported: {', '.join(CONFIG_TYPES)}.{hint}")
    params = step.get("parameters", {})
    if not isinstance(params, Mapping):
        raise _fail(where, f"'parameters' of a {t!r} step must be an object; found {type(params).__name__}")
    need = {"execute": ["command"], "command": ["command"], "launch": ["command"], "open": ["path"],
            "sleep": ["seconds"], "activate_window": ["window_name"], "close_window": ["window_name"],
            "download": ["files"], "upload_file": ["files"], "chrome_open_tabs": ["urls_to_open"],
            "chrome_close_tabs": ["urls_to_close"], "update_browse_history": ["history"],
            "http_server": ["directory", "port"]}[t]
    missing = [k for k in need if k not in params]
    if missing:
        raise _fail(where, f"{t!r} step misses parameter(s) {missing}")
    if t in ("execute", "command", "launch") and not isinstance(params["command"], (str, list)):
        raise _fail(where, f"{t!r}: 'command' must be a string or a list of strings")
    if t == "sleep" and (isinstance(params["seconds"], bool) or not isinstance(params["seconds"], (int, float))):
        raise _fail(where, "'sleep': 'seconds' must be a number")
    if t in ("download", "upload_file"):
        files = params["files"]
        key = "url" if t == "download" else "local_path"
        if not isinstance(files, list) or not all(isinstance(f, Mapping) and key in f and "path" in f for f in files):
            raise _fail(where, f"{t!r}: 'files' must be a list of {{{key!r}, 'path'}} objects")
    if t == "chrome_close_tabs" and not (isinstance(params["urls_to_close"], list)
                                         and all(isinstance(u, str) for u in params["urls_to_close"])):
        raise _fail(where, "'chrome_close_tabs': 'urls_to_close' must be a list of URL strings")
    if t == "update_browse_history":
        keys = ("url", "title", "visit_time_from_now_in_seconds")
        items = params["history"]
        if not isinstance(items, list) or not all(isinstance(h, Mapping) and all(k in h for k in keys) for h in items):
            raise _fail(where, "'update_browse_history': 'history' must be a list of "
                               "{'url', 'title', 'visit_time_from_now_in_seconds'} objects")
    return ConfigStep(t, _freeze(dict(params)))


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, list) else [v]


def raw_steps(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The config and evaluator postconfig steps of an unvalidated task dict (objects only)."""
    ev = task.get("evaluator") or {}
    return [s for s in list(task.get("config") or []) + list(ev.get("postconfig") or []) if isinstance(s, Mapping)]


def raw_getters(task: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The result and expected getters of an unvalidated task dict (objects only)."""
    ev = task.get("evaluator") or {}
    return [g for key in ("result", "expected") for g in _as_list(ev.get(key)) if isinstance(g, Mapping)]


def _check_evaluator(ev: Any, where: str) -> Evaluator:
    from .evaluators import getters as G, metrics as M  # the judge's side: tasks are validated on the host
    where = where + ".evaluator"
    if not isinstance(ev, Mapping):
        raise _fail(where, "must be an object with at least 'func'")
    if "func" not in ev:
        raise _fail(where, "missing required field 'func'")
    single = isinstance(ev["func"], str)
    funcs = _as_list(ev["func"])
    if not funcs or not all(isinstance(f, str) for f in funcs):
        raise _fail(where, "'func' must be a metric name or a non-empty list of names")
    for f in funcs:
        if f != "infeasible" and f not in M.METRICS:
            import difflib
            near = difflib.get_close_matches(f, list(M.METRICS), n=1)
            raise _fail(where, f"unknown metric {f!r}" + (f"; did you mean {near[0]!r}?" if near else "")
                        + f" Known: {', '.join(sorted(M.METRICS))}")
    n = len(funcs)

    def per_func(key: str, default):
        if key not in ev:
            return [default] * n
        v = ev[key]
        if single:
            return [v]
        if not isinstance(v, list) or len(v) != n:
            raise _fail(where, f"with {n} funcs, {key!r} must be a list of {n} entries; found {v!r:.80}")
        return v

    results = per_func("result", None)
    expected = per_func("expected", None)
    options = per_func("options", {})
    for i, (r, e) in enumerate(zip(results, expected)):
        for kind, g in (("result", r), ("expected", e)):
            if g is None:
                continue
            if not isinstance(g, Mapping) or "type" not in g:
                raise _fail(where, f"{kind}[{i}] must be a getter object with a 'type'; found {g!r:.80}")
            if g["type"] not in G.GETTERS:
                import difflib
                near = difflib.get_close_matches(str(g["type"]), list(G.GETTERS), n=1)
                raise _fail(where, f"{kind}[{i}]: unknown getter type {g['type']!r}"
                            + (f"; did you mean {near[0]!r}?" if near else "")
                            + f" Known: {', '.join(sorted(G.GETTERS))}")
    for i, o in enumerate(options):
        if o is None:
            options[i] = {}
        elif not isinstance(o, Mapping):
            raise _fail(where, f"options[{i}] must be an object; found {o!r:.60}")
    conj = ev.get("conj", "and")
    if conj not in ("and", "or"):
        raise _fail(where, f"'conj' must be 'and' or 'or'; found {conj!r}")
    post = ev.get("postconfig", [])
    if not isinstance(post, list):
        raise _fail(where, "'postconfig' must be a list of config steps")
    steps = tuple(_check_step(s, f"{where}.postconfig[{i}]") for i, s in enumerate(post))
    return Evaluator(tuple(funcs), tuple(_freeze(r) for r in results), tuple(_freeze(e) for e in expected),
                     tuple(_freeze(o) for o in options), conj, steps, single)


def task_from_dict(d: Mapping[str, Any], where: str = "<task>", judged: bool = True) -> Task:
    """Validate a task dict (OSWorld schema) into a frozen `Task`; raises TaskValidationError.

    `judged=False`: the task as a workspace gets it (`workspace_task`), without its evaluator (`.evaluator`
    None)."""
    if not isinstance(d, Mapping):
        raise _fail(where, f"a task must be a JSON object; found {type(d).__name__}")
    tid = _check_str(d, "id", where)
    if not tid:
        raise _fail(where, "'id' must not be empty")
    where = f"{where} (id {tid})"
    instruction = _check_str(d, "instruction", where)
    snapshot = _check_str(d, "snapshot", where, required=False)
    source = _check_str(d, "source", where, required=False)
    trajectory = _check_str(d, "trajectory", where, required=False, default="trajectories/")
    config = d.get("config", [])
    if not isinstance(config, list):
        raise _fail(where, "'config' must be a list of steps")
    steps = tuple(_check_step(s, f"{where}.config[{i}]") for i, s in enumerate(config))
    apps = d.get("related_apps", [])
    if not isinstance(apps, list) or not all(isinstance(a, str) for a in apps):
        raise _fail(where, "'related_apps' must be a list of strings")
    ev = _check_evaluator(d.get("evaluator"), where) if judged else None
    return Task(tid, snapshot, instruction, source, steps, trajectory, tuple(apps), ev, "", _freeze(dict(d)))


def workspace_task(d: Mapping[str, Any]) -> dict:
    """The task dict as its workspace gets it: without the evaluator (the judge keeps its rules, expected values
    and getters), and of the host's downloads only the ones its config and postconfig steps download, never a
    `cloud_file` expected file."""
    from .downloads import step_urls

    out = {k: _thaw(v) for k, v in d.items() if k not in ("evaluator", "bunshin_downloads")}
    staged = set(step_urls(d))
    downloads = {u: sha for u, sha in (d.get("bunshin_downloads") or {}).items() if u in staged}
    if downloads:
        out["bunshin_downloads"] = downloads
    return out


def load_task(path: str | os.PathLike) -> Task:
    """Load and validate one task JSON file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError as e:
        raise TaskValidationError(f"{p}: no such task file") from e
    except json.JSONDecodeError as e:
        raise TaskValidationError(f"{p}: not valid JSON: {e}") from e
    t = task_from_dict(data, str(p))
    return Task(**{**t.__dict__, "path": str(p)})


def load_tasks(directory: str | os.PathLike = TASKS_DIR) -> list[Task]:
    """All tasks of a directory (sorted by file name); ids must be unique."""
    tasks = [load_task(p) for p in sorted(Path(directory).glob("*.json"))]
    seen: dict[str, str] = {}
    for t in tasks:
        if t.id in seen:
            raise TaskValidationError(f"duplicate task id {t.id!r} in {seen[t.id]} and {t.path}")
        seen[t.id] = t.path
    return tasks


def load_oracle(task_id: str, directory: str | os.PathLike = ORACLES_DIR) -> list[Any]:
    """The oracle trajectory of a task: a list of pyautogui code strings (and WAIT/DONE)."""
    p = Path(directory) / f"{task_id}.json"
    data = json.loads(p.read_text())
    if not isinstance(data, list):
        raise TaskValidationError(f"{p}: an oracle must be a JSON list of actions")
    return data


# ----------------------------------------------------------------------------------------------------
# running config steps

_OPENERS = {
    ".xlsx": "calc", ".xls": "calc", ".ods": "calc", ".csv": "calc",
    ".docx": "writer", ".doc": "writer", ".odt": "writer", ".rtf": "writer",
    ".pptx": "impress", ".ppt": "impress", ".odp": "impress",
    ".html": "chromium", ".htm": "chromium", ".pdf": "chromium",
    ".mp4": "vlc", ".mkv": "vlc", ".webm": "vlc", ".avi": "vlc", ".mp3": "vlc", ".wav": "vlc", ".ogg": "vlc",
}


def task_file(name: str) -> Path:
    """A file shipped for tasks: envs/osworld/task_files/<name> (given to the agent), else, for the judge,
    judge_files/<name> (expected files; not in workspaces). Raises TaskConfigError if absent."""
    for folder in (TASK_FILES_DIR, JUDGE_FILES_DIR):
        if (folder / name).exists():
            return folder / name
    raise TaskConfigError(f"task file {name!r} not found under {TASK_FILES_DIR} (or, for the judge, "
                          f"{JUDGE_FILES_DIR}); tasks run without internet, so every downloaded/uploaded file must "
                          "be shipped there")


def url_to_task_file(url: str) -> Path:
    """download/cloud_file URL → the shipped file of the same name (the last path segment)."""
    name = os.path.basename(urllib.parse.urlparse(url).path) or url
    return task_file(urllib.parse.unquote(name))


def downloaded_file(url: str, downloads: Mapping[str, str]) -> Path:
    """The file a task's URL names: what the host downloaded for it (`downloads`: url → sha256, see
    downloads.py) — staged in the workspace, or in the host's cache for the judge — else the shipped file of
    that name."""
    from .downloads import STAGING_DIR, cache_dir

    sha = downloads.get(url)
    if sha is None:
        return url_to_task_file(url)
    p = Path(STAGING_DIR) / sha
    if not p.is_file() and (cache_dir() / "files" / sha).is_file():
        p = cache_dir() / "files" / sha
    if not p.is_file():
        raise TaskConfigError(f"the download of {url} (sha256 {sha[:12]}…) was not staged at {p}: the host copies "
                              "a task's downloads into its workspace before reset (EnvAdapter.host_files)")
    return p


def run_config(session, steps: Iterable[ConfigStep | Mapping[str, Any]]) -> None:
    """Run setup steps on a DesktopSession in order; raises TaskConfigError naming the failing step."""
    for i, step in enumerate(steps):
        if isinstance(step, Mapping):
            step = _check_step(step, f"step {i}")
        try:
            _run_step(session, step.type, _thaw(step.parameters))
        except TaskConfigError as e:
            raise TaskConfigError(f"config step {i} ({step.type}): {e}") from e


def _run_step(session, t: str, p: dict) -> None:
    if t in ("execute", "command"):
        r = session.run_task_command(p["command"], shell=bool(p.get("shell", False)),
                                     timeout=float(p.get("timeout", 120)))
        if r.returncode == 127 and "FileNotFoundError" in (r.stderr or ""):
            raise TaskConfigError(f"command not found: {r.args!r}")
        for stream in ("stdout", "stderr"):  # kept for the evaluator's cache_file getter, as OSWorld does
            if p.get(stream):
                from .getters.common import cache_dir

                with open(os.path.join(cache_dir(session), os.path.basename(str(p[stream]))), "w") as f:
                    f.write(getattr(r, stream) or "")
        return
    if t == "launch":
        cmd = session.map_command(p["command"])
        if isinstance(cmd, str):
            import shlex
            cmd = shlex.split(cmd)
        if not cmd:
            raise TaskConfigError("empty command")
        session.launch(cmd[0], *cmd[1:])
        time.sleep(float(p.get("wait", 0)))
        return
    if t == "open":
        path = session.vm_path(p["path"])
        if not os.path.exists(path):
            raise TaskConfigError(f"cannot open {p['path']!r}: {path} does not exist")
        ext = os.path.splitext(path)[1].lower()
        app = _OPENERS.get(ext, "pcmanfm" if os.path.isdir(path) else "mousepad")
        session.launch(app, path)
        session.wait_window(os.path.basename(path.rstrip("/")) if app != "chromium" else "Chromium",
                            timeout=float(p.get("timeout", 30)))
        session.wait_idle(timeout=float(p.get("timeout", 30)))
        time.sleep(float(p.get("settle", 0.5)))
        return
    if t == "sleep":
        time.sleep(float(p["seconds"]))
        return
    if t in ("activate_window", "close_window"):
        kw = {"strict": bool(p.get("strict", False)), "by_class": bool(p.get("by_class", False))}
        if t == "activate_window":
            # Waits for the window (apps launched by an earlier step may still be starting).
            session.wait_window(p["window_name"], timeout=float(p.get("timeout", 20)), **kw)
            session.wait_idle(timeout=float(p.get("timeout", 20)))
            session.activate_window(p["window_name"], **kw)
            time.sleep(float(p.get("settle", 0.3)))
        else:
            session.close_window(p["window_name"], **kw)
        return
    if t == "download":
        for f in p["files"]:
            src = downloaded_file(f["url"], getattr(session, "downloads", {}))
            _copy_to(src, session.vm_path(f["path"]))
        return
    if t == "upload_file":
        for f in p["files"]:
            lp = Path(f["local_path"])
            src = lp if lp.is_absolute() else task_file(str(lp))
            _copy_to(src, session.vm_path(f["path"]))
        return
    if t == "chrome_open_tabs":
        for url in p["urls_to_open"]:
            _cdp_new_tab(session.cdp_port, url)
        return
    if t == "chrome_close_tabs":
        for url in p["urls_to_close"]:
            _cdp_close_tab(session.cdp_port, url)
        return
    if t == "update_browse_history":
        _replace_history(session, p["history"])
        return
    if t == "http_server":
        d = Path(p["directory"])
        d = d if d.is_absolute() else TASK_FILES_DIR / d
        if not d.is_dir():
            raise TaskConfigError(f"http_server directory {d} does not exist")
        port = int(p["port"])
        session.launch("python", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(d))
        _wait_http(f"http://127.0.0.1:{port}/", 10)
        return
    raise TaskConfigError(f"unsupported config type {t!r}")


def _copy_to(src: Path, dst: str) -> None:
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True)
    else:
        shutil.copy(src, dst)


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except Exception as e:
            if time.monotonic() > deadline:
                raise TaskConfigError(f"{url} did not answer within {timeout} s: {e}") from e
            time.sleep(0.1)


def _cdp_new_tab(port: int, url: str, timeout: float = 20) -> None:
    """Open a tab through Chromium's DevTools HTTP endpoint (waits for Chromium to listen)."""
    deadline = time.monotonic() + timeout
    target = f"http://127.0.0.1:{port}/json/new?{urllib.parse.quote(url, safe=':/?&=%#')}"
    while True:
        try:
            req = urllib.request.Request(target, method="PUT")
            with urllib.request.urlopen(req, timeout=5):
                return
        except Exception as e:
            if time.monotonic() > deadline:
                raise TaskConfigError(f"Chromium's DevTools on port {port} did not open {url}: {e}; "
                                      "launch chromium in an earlier config step") from e
            time.sleep(0.2)


def _cdp_pages(port: int, timeout: float) -> list[dict]:
    """Chromium's page targets from its DevTools HTTP endpoint (waits for Chromium to listen)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                return [t for t in json.load(r) if t.get("type") == "page"]
        except Exception as e:
            if time.monotonic() > deadline:
                raise TaskConfigError(f"Chromium's DevTools on port {port} did not answer: {e}; "
                                      "launch chromium in an earlier config step") from e
            time.sleep(0.2)


def _cdp_close_tab(port: int, url: str, timeout: float = 20, settle: float = 5) -> None:
    """Close a tab showing `url` (compare_urls, as OSWorld's setup); nothing if none does once every tab
    shows its URL (a tab just opened has none for a moment; OSWorld waits 5 s before looking)."""
    from .urls import compare_urls

    deadline = time.monotonic() + settle
    while True:
        pages = _cdp_pages(port, timeout)
        matches = [t for t in pages if compare_urls(t.get("url", ""), url)]
        if matches:  # /json/list puts the most recently active first; OSWorld closes the earliest opened
            _cdp_close(port, matches[-1]["id"], timeout)
            return
        if all(t.get("url") for t in pages) or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def _cdp_close(port: int, target: str, timeout: float) -> None:
    """Close a tab and wait until Chromium no longer lists it (closing is asynchronous)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/close/{target}", timeout=5):
        pass
    deadline = time.monotonic() + timeout
    while any(t.get("id") == target for t in _cdp_pages(port, timeout)):
        if time.monotonic() > deadline:
            raise TaskConfigError(f"Chromium did not close tab {target} within {timeout} s")
        time.sleep(0.1)


_CHROME_EPOCH_OFFSET_S = 11644473600  # 1601-01-01 (Chromium's time origin) to the Unix epoch
_LINK_TRANSITION = 0x30000000  # PAGE_TRANSITION_LINK | CHAIN_START | CHAIN_END, as OSWorld records each visit


def _replace_history(session, items: list[Mapping[str, Any]]) -> None:
    """Chromium's History := an empty history database holding one visit per item, its
    visit_time_from_now_in_seconds ago. The empty database is the one the installed Chromium creates for a
    new profile (made in a scratch profile), so Chromium opens it as its own."""
    import contextlib
    import sqlite3
    import tempfile

    from .desktop import CHROMIUM_FLAGS, CHROMIUM_PROFILE

    now = time.time()
    with tempfile.TemporaryDirectory(prefix="bunshin-history-") as scratch:
        r = session.run(["chromium", "--headless", *CHROMIUM_FLAGS, f"--user-data-dir={scratch}",
                         "--dump-dom", "about:blank"], timeout=60)
        db = os.path.join(scratch, "Default", "History")
        if not os.path.isfile(db):
            raise TaskConfigError(f"chromium --headless made no History to fill (exit {r.returncode}): "
                                  f"{(r.stderr or '')[-300:]}")
        with contextlib.closing(sqlite3.connect(db)) as con, con:
            for item in items:
                when = int((now - float(item["visit_time_from_now_in_seconds"]) + _CHROME_EPOCH_OFFSET_S) * 1e6)
                row = con.execute("INSERT INTO urls (url, title, visit_count, typed_count, last_visit_time, hidden) "
                                  "VALUES (?, ?, 1, 0, ?, 0)", (item["url"], item["title"], when))
                con.execute("INSERT INTO visits (url, visit_time, from_visit, transition, segment_id, visit_duration) "
                            "VALUES (?, ?, 0, ?, 0, 0)", (row.lastrowid, when, _LINK_TRANSITION))
        dst = session.vm_path(f"{session.vm_home}/{CHROMIUM_PROFILE}/Default/History")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        for stale in (dst + "-journal", dst + "-wal"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(stale)
        shutil.copyfile(db, dst)
