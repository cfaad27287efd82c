"""Task configs in WebArena's JSON schema: loading, validation and placeholder mapping.

Owns: the frozen dataclasses :class:`TaskConfig`, :class:`EvalConfig`, :class:`ReferenceAnswers` and
:class:`ProgramHtmlCheck`; :func:`load_task` / :func:`task_from_dict` (parse + validate) and
:func:`validate_task` (small named checks); :func:`load_suite` for ``envs/webarena/tasks/*.json``.
:func:`workspace_task`, the part of a task its workspace gets. Does not own: judging (``judge.py``) or running
a browser. Host side only: neither this module nor the task files enter a workspace (``.workspace-exclude``).

Accepted input is a WebArena ``config_files/<id>.json`` object (fields ``sites``, ``task_id``, ``require_login``,
``storage_state``, ``start_url``, ``geolocation``, ``intent_template``, ``instantiation_dict``, ``intent``,
``require_reset``, ``eval``, ``intent_template_id``). What this env can honour, and what raises
:class:`TaskConfigError` instead:

- ``sites`` must be ``["shopping"]``; other sites (``reddit``, ``gitlab``, ``shopping_admin``, ``map``,
  ``wikipedia``) and their placeholders (``__REDDIT__``, ``__GITLAB__``, ``__SHOPPING_ADMIN__``, ``__MAP__``,
  ``__WIKIPEDIA__``, ``__HOMEPAGE__``) are rejected.
- ``start_url`` may hold several URLs joined by `` |AND| `` (one tab each), as in WebArena.
- ``storage_state`` (WebArena: ``./.auth/shopping_state.json``) is honoured by a scripted login of the task
  customer; the file itself is not read.
- ``geolocation`` must be null.
- ``eval_types`` must be among ``string_match``, ``url_match``, ``program_html``. ``fuzzy_match`` is judged
  without an LLM (see ``judge.py``), including WebArena's ``"N/A"`` form.
- ``program_html`` entries whose ``url`` or ``locator`` start with ``func:`` (WebArena evaluates Python there)
  are rejected: this env never evaluates code from a task file. ``prep_actions`` are likewise rejected.

A real WebArena shopping config loads (its answers refer to WebArena's Magento data, not to this site's seed).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import TaskConfigError
from .site_urls import PLACEHOLDER

SITE = "shopping"
OTHER_PLACEHOLDERS = ("__REDDIT__", "__GITLAB__", "__SHOPPING_ADMIN__", "__MAP__", "__WIKIPEDIA__",
                      "__HOMEPAGE__")
EVAL_TYPES = ("string_match", "url_match", "program_html")
REQUIRED_FIELDS = ("sites", "task_id", "require_login", "start_url", "intent", "eval")
TASKS_DIR = Path(__file__).with_name("tasks")
ORACLES_DIR = Path(__file__).with_name("oracles")


@dataclass(frozen=True)
class ReferenceAnswers:
    """``eval.reference_answers``: any of the three keys may be present; all present ones must pass."""

    exact_match: str | None = None          #: the answer, compared after strip/lower/unquote
    must_include: tuple[str, ...] | None = None  #: each must be a substring of the answer (``a |OR| b`` allowed)
    fuzzy_match: tuple[str, ...] | str | None = None  #: list of references, or ``"N/A"`` (task infeasible)


@dataclass(frozen=True)
class ProgramHtmlCheck:
    """One ``eval.program_html`` entry: open ``url`` (``last`` = the agent's current URL), evaluate ``locator``
    (a JS expression such as ``document.querySelector('#wishlist').outerText``; empty = the page HTML), and
    check ``required_contents``."""

    url: str
    locator: str
    exact_match: str | None = None
    must_include: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EvalConfig:
    """``eval``: which evaluators run and their references. The task reward is the product of all."""

    eval_types: tuple[str, ...]
    reference_answers: ReferenceAnswers | None = None
    reference_url: str = ""
    url_note: str = "GOLD in PRED"
    program_html: tuple[ProgramHtmlCheck, ...] = ()
    string_note: str = ""
    reference_answer_raw_annotation: str = ""


@dataclass(frozen=True)
class TaskConfig:
    """A validated WebArena task. URLs keep the ``__SHOPPING__`` placeholder; :meth:`resolve` maps them."""

    task_id: int
    intent: str
    start_urls: tuple[str, ...]
    eval: EvalConfig
    sites: tuple[str, ...] = (SITE,)
    require_login: bool = True
    storage_state: str | None = None
    geolocation: None = None
    intent_template: str = ""
    instantiation_dict: tuple[tuple[str, str], ...] = ()
    require_reset: bool = False
    intent_template_id: int | None = None
    source: str = ""  #: file the task was loaded from ("" when built from a dict)

    @property
    def start_url(self) -> str:
        """The WebArena ``start_url`` string (tabs joined by `` |AND| ``)."""
        return " |AND| ".join(self.start_urls)

    @property
    def mutates_state(self) -> bool:
        """True when the task is judged by the site's state (``program_html``): it needs a fresh database."""
        return "program_html" in self.eval.eval_types

    @staticmethod
    def resolve(url: str, base_url: str) -> str:
        """Replace ``__SHOPPING__`` by ``base_url`` (no trailing slash)."""
        return url.replace(PLACEHOLDER, base_url.rstrip("/"))

    def to_dict(self) -> dict:
        """The task as a WebArena config dict (round-trips through :func:`task_from_dict`)."""
        ev = self.eval
        ref = None
        if ev.reference_answers is not None:
            ref = {}
            ra = ev.reference_answers
            if ra.exact_match is not None:
                ref["exact_match"] = ra.exact_match
            if ra.must_include is not None:
                ref["must_include"] = list(ra.must_include)
            if ra.fuzzy_match is not None:
                ref["fuzzy_match"] = ra.fuzzy_match if isinstance(ra.fuzzy_match, str) else list(ra.fuzzy_match)
        prog = []
        for c in ev.program_html:
            rc = {"exact_match": c.exact_match} if c.exact_match is not None else {"must_include": list(c.must_include or ())}
            prog.append({"url": c.url, "locator": c.locator, "required_contents": rc})
        return {
            "sites": list(self.sites), "task_id": self.task_id, "require_login": self.require_login,
            "storage_state": self.storage_state, "start_url": self.start_url, "geolocation": self.geolocation,
            "intent_template": self.intent_template, "instantiation_dict": dict(self.instantiation_dict),
            "intent": self.intent, "require_reset": self.require_reset,
            "eval": {"eval_types": list(ev.eval_types), "reference_answers": ref,
                     "reference_url": ev.reference_url, "program_html": prog, "string_note": ev.string_note,
                     "reference_answer_raw_annotation": ev.reference_answer_raw_annotation,
                     **({"url_note": ev.url_note} if ev.reference_url else {})},
            "intent_template_id": self.intent_template_id,
        }


def workspace_task(task: TaskConfig) -> dict:
    """What a task's workspace gets: where its tabs start and whether to sign in. Its intent stays with the
    env (the observation's ``goal``), its ``eval`` with the judge."""
    return {"start_urls": list(task.start_urls), "require_login": task.require_login}


# --- validation: small named checks ------------------------------------------------------------------------
def _where(raw: dict) -> str:
    return f"task {raw.get('task_id', '?')}"


def check_required_fields(raw: dict) -> None:
    missing = [f for f in REQUIRED_FIELDS if f not in raw]
    if missing:
        raise TaskConfigError(f"{_where(raw)}: missing field(s) {missing}; a WebArena config needs "
                              f"{list(REQUIRED_FIELDS)}")


def check_sites(raw: dict) -> None:
    sites = raw.get("sites")
    if not isinstance(sites, list) or sites != [SITE]:
        raise TaskConfigError(f"{_where(raw)}: sites={sites!r}, but this env serves only the shopping site "
                              f"(expected [\"{SITE}\"]); tasks for reddit/gitlab/shopping_admin/map/wikipedia need "
                              "WebArena's own servers")


def check_placeholders(raw: dict) -> None:
    blob = json.dumps(raw)
    found = sorted({p for p in OTHER_PLACEHOLDERS if p in blob})
    if found:
        raise TaskConfigError(f"{_where(raw)}: uses {', '.join(found)}, which this env cannot serve; only "
                              f"{PLACEHOLDER} is mapped (to the local shopping site)")


def check_geolocation(raw: dict) -> None:
    if raw.get("geolocation") is not None:
        raise TaskConfigError(f"{_where(raw)}: geolocation={raw['geolocation']!r} is not supported; set it to null")


def check_eval_types(raw: dict) -> None:
    ev = raw.get("eval")
    if not isinstance(ev, dict) or not isinstance(ev.get("eval_types"), list) or not ev["eval_types"]:
        raise TaskConfigError(f"{_where(raw)}: eval.eval_types must be a non-empty list of {list(EVAL_TYPES)}")
    bad = [t for t in ev["eval_types"] if t not in EVAL_TYPES]
    if bad:
        raise TaskConfigError(f"{_where(raw)}: unsupported eval type(s) {bad}; supported: {list(EVAL_TYPES)}")


def check_no_code(raw: dict) -> None:
    for i, tgt in enumerate(raw["eval"].get("program_html") or []):
        for key in ("url", "locator"):
            if str(tgt.get(key, "")).startswith("func:"):
                raise TaskConfigError(f"{_where(raw)}: program_html[{i}].{key} is {tgt[key]!r}; 'func:' entries "
                                      "run Python in WebArena and are not supported here; use a URL and a "
                                      "document.* JS locator")
        if tgt.get("prep_actions"):
            raise TaskConfigError(f"{_where(raw)}: program_html[{i}].prep_actions are not supported")
        loc = str(tgt.get("locator", ""))
        if loc.strip() and not (loc.startswith("document.") or loc.startswith("[...document.")):
            raise TaskConfigError(f"{_where(raw)}: program_html[{i}].locator must be empty or start with "
                                  f"'document.' / '[...document.' (WebArena's rule); found {loc[:60]!r}")


#: field path -> the JSON types it may have (None: may be null/absent)
FIELD_TYPES: dict[tuple[str, ...], tuple[type, ...]] = {
    ("intent",): (str,), ("start_url",): (str,), ("require_login",): (bool,), ("require_reset",): (bool, type(None)),
    ("storage_state",): (str, type(None)), ("intent_template",): (str, type(None)),
    ("instantiation_dict",): (dict, type(None)), ("eval",): (dict,),
    ("eval", "reference_answers"): (dict, type(None)), ("eval", "reference_url"): (str, type(None)),
    ("eval", "program_html"): (list, type(None)), ("eval", "url_note"): (str, type(None)),
    ("eval", "string_note"): (str, type(None)),
    ("eval", "reference_answers", "exact_match"): (str, int, float, type(None)),
    ("eval", "reference_answers", "must_include"): (list, str, type(None)),
    ("eval", "reference_answers", "fuzzy_match"): (list, str, type(None)),
}


def check_field_types(raw: dict) -> None:
    """Each field has its JSON type (a number where a list or object belongs fails here, naming the field)."""
    for path, types in FIELD_TYPES.items():
        value, present = raw, True
        for key in path:
            if not isinstance(value, dict) or key not in value:
                present = False
                break
            value = value[key]
        if present and not isinstance(value, types):
            names = " or ".join("null" if t is type(None) else {"str": "string", "dict": "object", "list": "list",
                                                                  "bool": "boolean", "int": "number",
                                                                  "float": "number"}[t.__name__] for t in types)
            raise TaskConfigError(f"{_where(raw)}: field {'.'.join(path)!r} must be {names}; found "
                                  f"{type(value).__name__} {value!r}"[:300])
    for i, tgt in enumerate((raw.get("eval") or {}).get("program_html") or []):
        if not isinstance(tgt, dict) or not isinstance(tgt.get("required_contents", {}), dict):
            raise TaskConfigError(f"{_where(raw)}: field 'eval.program_html[{i}]' must be an object with an "
                                  f"object 'required_contents'; found {tgt!r}"[:300])


VALIDATORS = (check_required_fields, check_field_types, check_sites, check_placeholders, check_geolocation,
              check_eval_types, check_no_code)


def validate_task(raw: dict) -> None:
    """Run every check in :data:`VALIDATORS`; raises :class:`TaskConfigError` at the first failure."""
    if not isinstance(raw, dict):
        raise TaskConfigError(f"a task config must be a JSON object; found {type(raw).__name__}")
    for check in VALIDATORS:
        check(raw)


def _str_tuple(value, what: str, raw: dict) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise TaskConfigError(f"{_where(raw)}: {what} must be a list of strings; found {value!r}")
    return tuple(str(v) for v in value)


def task_from_dict(raw: dict, source: str = "") -> TaskConfig:
    """Validate a WebArena config dict and build a :class:`TaskConfig`.

    Raises:
        TaskConfigError: a check of :func:`validate_task` fails or a field has the wrong type.
    """
    validate_task(raw)
    ev = raw["eval"]
    ref = None
    ra = ev.get("reference_answers")
    if ra:
        unknown = set(ra) - {"exact_match", "must_include", "fuzzy_match"}
        if unknown:
            raise TaskConfigError(f"{_where(raw)}: unknown reference_answers key(s) {sorted(unknown)}")
        fm = ra.get("fuzzy_match")
        ref = ReferenceAnswers(
            exact_match=None if ra.get("exact_match") is None else str(ra["exact_match"]),
            must_include=None if ra.get("must_include") is None else _str_tuple(ra["must_include"],
                                                                                "must_include", raw),
            fuzzy_match=None if fm is None else (fm if isinstance(fm, str) else _str_tuple(fm, "fuzzy_match", raw)))
    if "string_match" in ev["eval_types"] and ref is None:
        raise TaskConfigError(f"{_where(raw)}: string_match needs eval.reference_answers")
    if "url_match" in ev["eval_types"] and not ev.get("reference_url"):
        raise TaskConfigError(f"{_where(raw)}: url_match needs eval.reference_url")
    checks = []
    for i, tgt in enumerate(ev.get("program_html") or []):
        rc = tgt.get("required_contents") or {}
        if not ("exact_match" in rc or "must_include" in rc):
            raise TaskConfigError(f"{_where(raw)}: program_html[{i}].required_contents needs exact_match or "
                                  "must_include")
        checks.append(ProgramHtmlCheck(
            url=str(tgt.get("url", "last")), locator=str(tgt.get("locator", "")),
            exact_match=None if rc.get("exact_match") is None else str(rc["exact_match"]),
            must_include=None if rc.get("must_include") is None else _str_tuple(rc["must_include"],
                                                                                "must_include", raw)))
    if "program_html" in ev["eval_types"] and not checks:
        raise TaskConfigError(f"{_where(raw)}: program_html evaluation needs eval.program_html entries")
    start = str(raw["start_url"])
    try:
        task_id = int(raw["task_id"])
    except (TypeError, ValueError) as e:
        raise TaskConfigError(f"{_where(raw)}: task_id must be an integer") from e
    inst = raw.get("instantiation_dict") or {}
    return TaskConfig(
        task_id=task_id, intent=str(raw["intent"]),
        start_urls=tuple(u.strip() for u in start.split(" |AND| ")),
        eval=EvalConfig(eval_types=tuple(ev["eval_types"]), reference_answers=ref,
                        reference_url=str(ev.get("reference_url") or ""),
                        url_note=str(ev.get("url_note") or "GOLD in PRED"), program_html=tuple(checks),
                        string_note=str(ev.get("string_note") or ""),
                        reference_answer_raw_annotation=str(ev.get("reference_answer_raw_annotation") or "")),
        sites=tuple(raw["sites"]), require_login=bool(raw["require_login"]),
        storage_state=raw.get("storage_state"), geolocation=None,
        intent_template=str(raw.get("intent_template") or ""),
        instantiation_dict=tuple((str(k), json.dumps(v) if not isinstance(v, str) else v) for k, v in inst.items()),
        require_reset=bool(raw.get("require_reset", False)),
        intent_template_id=raw.get("intent_template_id"), source=source)


def load_task(path_or_id: str | Path | int) -> TaskConfig:
    """Load a task from a JSON file, or by id from this package's ``tasks/`` folder."""
    path = TASKS_DIR / f"{path_or_id}.json" if isinstance(path_or_id, int) else Path(path_or_id)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise TaskConfigError(f"no task file at {path}; task ids available: "
                              f"{', '.join(str(i) for i in task_ids()[:10])}...") from e
    except json.JSONDecodeError as e:
        raise TaskConfigError(f"{path}: not valid JSON ({e})") from e
    return task_from_dict(raw, source=str(path))


def load_task_file(path: str | Path) -> list[TaskConfig]:
    """Load every task of a WebArena file: one config object (``config_files/21.json``) or a list of them
    (``config_files/test.raw.json``). Raises TaskConfigError naming the first task that cannot be honoured."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TaskConfigError(f"cannot read task file {path}: {e}") from e
    items = raw if isinstance(raw, list) else [raw]
    return [task_from_dict(item, source=str(path)) for item in items]


def task_ids() -> list[int]:
    """Ids of the tasks shipped in ``envs/webarena/tasks/``, sorted."""
    return sorted(int(p.stem) for p in TASKS_DIR.glob("*.json") if re.fullmatch(r"\d+", p.stem))


def shopping_task_ids(task_dir: str | Path) -> list[int]:
    """Ids of the shopping-only tasks among the ``<id>.json`` files of ``task_dir`` (e.g. WebArena's
    ``config_files``, where the other sites' tasks are skipped), sorted."""
    out = []
    for p in Path(task_dir).glob("*.json"):
        if re.fullmatch(r"\d+", p.stem):
            try:
                raw = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise TaskConfigError(f"cannot read task file {p}: {e}") from e
            if isinstance(raw, dict) and raw.get("sites") == [SITE]:
                out.append(int(p.stem))
    return sorted(out)


def load_suite() -> list[TaskConfig]:
    """Every shipped task, sorted by id."""
    return [load_task(i) for i in task_ids()]


def load_oracle(task_id: int) -> list[str]:
    """The recorded action trajectory that solves shipped task ``task_id`` (ends with ``stop [...]``)."""
    path = ORACLES_DIR / f"{task_id}.json"
    try:
        actions = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise TaskConfigError(f"no oracle for task {task_id} at {path}; regenerate with "
                              "python -m envs.webarena.make_tasks --oracles") from e
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise TaskConfigError(f"{path}: an oracle must be a JSON list of action strings")
    return actions
