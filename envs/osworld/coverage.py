"""How much of OSWorld's own task set this env can run: `coverage(examples)` checks each task, stage by stage,
and says why the first stage that fails does.

Stages, in order (a task counts for a stage only if it passed every earlier one):
    loads      a JSON object with OSWorld's fields (id, instruction, config list, evaluator with func)
    config     every config and postconfig step type is one this env runs (tasks.CONFIG_TYPES)
    evaluator  every metric (or "infeasible") and getter type is implemented (evaluators/, getters/)
    apps       the applications of its related_apps are installed here (Debian packages)
    files      every file it downloads is in the download cache (downloads.py) or shipped
    runs       (with run=True) it resets in a BunshinOSWorld-v0 env and a do-nothing episode scores as it
               must: 0, except 1 where the task is infeasible and the agent says FAIL

The tasks are those named by the folder's test_all.json (domain -> ids, as OSWorld ships it), else every task
JSON under it. OSWorld's files stay outside this repository (BUNSHIN_OSWORLD_EXAMPLES); nothing of them is
copied here.
"""
from __future__ import annotations

import json
import subprocess
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["STAGES", "TaskCoverage", "coverage", "plot", "summary_table"]

STAGES = ("loads", "config", "evaluator", "apps", "files", "runs")
#: OSWorld's related_apps name -> the Debian package that provides it here (None: nothing to install)
#: (keys lower-case: the tasks spell them "Chrome", "Writer", "OS" too)
APP_PACKAGES = {"chrome": "chromium", "browser": "chromium", "libreoffice_calc": "libreoffice-calc",
                "libreoffice calc": "libreoffice-calc", "calc": "libreoffice-calc",
                "libreoffice_writer": "libreoffice-writer", "writer": "libreoffice-writer",
                "libreoffice_impress": "libreoffice-impress", "libreoffice": "libreoffice-core", "gimp": "gimp",
                "vlc": "vlc", "thunderbird": "thunderbird", "vs_code": "code", "vscode": "code", "os": None,
                "terminal": "xterm", "picard": "picard", "ubuntu_media_player": "totem",
                "image": None, "pdf": None}  # file kinds some tasks list, not applications


@dataclass
class TaskCoverage:
    domain: str
    id: str
    passed: list[str] = field(default_factory=list)  #: the stages it passed, in order
    reason: str = ""  #: why the next stage failed ("" if all passed)
    missing: dict[str, list[str]] = field(default_factory=dict)  #: what is missing, by kind


def _task_list(examples: Path) -> list[tuple[str, Path]]:
    index = examples / "test_all.json"
    if index.is_file():
        out = []
        for domain, ids in json.loads(index.read_text()).items():
            out += [(domain, examples / "examples" / domain / f"{i}.json") for i in ids]
        return out
    return [(p.parent.name, p) for p in sorted(examples.rglob("*.json"))
            if p.name not in ("test_all.json", "test_small.json", "template.json")]


def _installed_packages() -> set[str]:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n"], capture_output=True,
                         text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.endswith(" installed")}


def _check_loads(raw: Any) -> str:
    if not isinstance(raw, dict):
        return "not a JSON object"
    for key, typ in (("id", str), ("instruction", str), ("evaluator", dict)):
        if not isinstance(raw.get(key), typ):
            return f"field {key!r} missing or not a {typ.__name__}"
    if not isinstance(raw.get("config", []), list):
        return "field 'config' is not a list"
    if "func" not in raw["evaluator"]:
        return "evaluator has no 'func'"
    return ""


def _pieces(raw: dict) -> tuple[list[str], list[str], list[str]]:
    """(config step types, metric names, getter types) of a task."""
    from .tasks import raw_getters, raw_steps

    funcs = raw["evaluator"]["func"]
    funcs = funcs if isinstance(funcs, list) else [funcs]
    return ([str(s.get("type")) for s in raw_steps(raw)], [str(f) for f in funcs],
            [str(g.get("type")) for g in raw_getters(raw)])


def coverage(examples: Path, run: bool = False, progress: Callable[[str], None] | None = None,
             run_task: Callable[[dict], str] | None = None) -> list[TaskCoverage]:
    """Check every task of `examples` (see the module doc). `run_task(task) -> ""` or why it did not run as it
    must (default: a real BunshinOSWorld-v0 episode, `run_episode`)."""
    from .downloads import cached, task_urls
    from .evaluators import GETTERS, METRICS
    from .tasks import CONFIG_TYPES

    packages = _installed_packages()
    out = []
    for domain, path in _task_list(examples):
        tc = TaskCoverage(domain, path.stem)
        out.append(tc)
        if progress:
            progress(f"{domain}/{path.stem}")
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            tc.reason = f"cannot read {path.name}: {e}"
            continue
        if (why := _check_loads(raw)):
            tc.reason = why
            continue
        tc.passed.append("loads")
        steps, funcs, getters = _pieces(raw)
        if (bad := sorted({s for s in steps if s not in CONFIG_TYPES})):
            tc.missing["config_types"] = bad
            tc.reason = f"config step type(s) not supported: {', '.join(bad)}"
            continue
        tc.passed.append("config")
        bad_m = sorted({f for f in funcs if f != "infeasible" and f not in METRICS})
        bad_g = sorted({g for g in getters if g not in GETTERS})
        if bad_m or bad_g:
            tc.missing.update({k: v for k, v in (("metrics", bad_m), ("getters", bad_g)) if v})
            tc.reason = "not implemented: " + ", ".join([f"metric {m}" for m in bad_m] + [f"getter {g}" for g in bad_g])
            continue
        tc.passed.append("evaluator")
        apps = [a for a in raw.get("related_apps") or [] if isinstance(a, str)]
        needed = {a: APP_PACKAGES.get(a.lower(), a) for a in apps}
        bad_a = sorted(a for a, pkg in needed.items() if pkg is not None and pkg not in packages)
        if bad_a:
            tc.missing["apps"] = bad_a
            tc.reason = "applications not installed: " + ", ".join(f"{a} ({needed[a]})" for a in bad_a)
            continue
        tc.passed.append("apps")
        absent = [u for u in task_urls(raw) if cached(u) is None]
        if absent:
            tc.missing["files"] = absent
            tc.reason = f"{len(absent)} file(s) not downloaded (bunshin osworld fetch): {absent[0]}"
            continue
        tc.passed.append("files")
        if run:
            tc.reason = (run_task or run_episode)(raw)
            if not tc.reason:
                tc.passed.append("runs")
    return out


def run_episode(raw: dict) -> str:
    """Reset a BunshinOSWorld-v0 env on the task and end at once: DONE must score 0; FAIL must score 1 exactly
    when the task is infeasible. Returns "" or what went wrong."""
    import gymnasium as gym

    import bunshin_gym  # noqa: F401 - registers the envs

    infeasible = raw["evaluator"]["func"] == "infeasible"
    env = None
    try:
        env = gym.make("BunshinOSWorld-v0", task_config=raw, action_space="pyautogui")
        env.reset()
        *_, reward, _, _, _ = env.step("FAIL" if infeasible else "DONE")
        want = 1.0 if infeasible else 0.0
        return "" if reward == want else f"a do-nothing episode scored {reward}, not {want}"
    except Exception as e:  # noqa: BLE001 - the reason is the report
        return f"{type(e).__name__}: {_gist(str(e))}"
    finally:
        if env is not None:
            env.close()


def _gist(message: str) -> str:
    """An error's first line, and the first line naming an error below it (a CRIU failure's cause comes after
    its headline)."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    cause = next((ln for ln in lines[1:] if "error" in ln.lower()), "")
    return "; ".join(ln[:300] for ln in lines[:1] + ([cause] if cause else []))


def by_domain(results: list[TaskCoverage], run: bool) -> dict[str, dict[str, int]]:
    stages = STAGES if run else STAGES[:-1]
    table: dict[str, dict[str, int]] = {}
    for r in results:
        row = table.setdefault(r.domain, {"tasks": 0, **{s: 0 for s in stages}})
        row["tasks"] += 1
        for s in r.passed:
            row[s] += 1
    table["all"] = {k: sum(row[k] for row in list(table.values())) for k in ("tasks", *stages)}
    return table


def report(results: list[TaskCoverage], examples: Path, run: bool) -> dict:
    missing: dict[str, Counter] = {}
    for r in results:
        for kind, names in r.missing.items():
            missing.setdefault(kind, Counter()).update(names if kind != "files" else [r.domain])
    return {"examples": str(examples), "run": run, "stages": list(STAGES if run else STAGES[:-1]),
            "domains": by_domain(results, run),
            "missing": {k: dict(c.most_common()) for k, c in missing.items()},
            "tasks": [asdict(r) for r in results]}


def summary_table(rep: dict) -> str:
    stages = rep["stages"]
    lines = [f"{'domain':<20} {'tasks':>5} " + " ".join(f"{s:>9}" for s in stages)]
    for domain, row in rep["domains"].items():
        lines.append(f"{domain:<20} {row['tasks']:>5} " + " ".join(f"{row[s]:>9}" for s in stages))
    return "\n".join(lines)


def plot(rep: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = [d for d in rep["domains"] if d != "all"]
    stages = rep["stages"]
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(domains)), 4.5))
    width = 0.8 / (len(stages) + 1)
    for i, key in enumerate(["tasks", *stages]):
        ax.bar([d + (i - len(stages) / 2) * width for d in range(len(domains))],
               [rep["domains"][dom][key] for dom in domains], width, label=key)
    ax.set_xticks(range(len(domains)), domains, rotation=30, ha="right")
    ax.set_ylabel("tasks")
    total = rep["domains"]["all"]
    ax.set_title(f"OSWorld coverage: {total[stages[2]]}/{total['tasks']} tasks with every config step and "
                 f"evaluator piece supported")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
