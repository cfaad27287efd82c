"""The OSWorld judge: scores an episode's end state from the env's own process, outside every workspace.

What crosses the workspace's boundary, and which way:
  in   `osworld.postconfig(steps)`: the evaluator's postconfig steps (actions such as saving a file), and
       `osworld.collect(getter)`: one state getter's config (where to read: a path, a command), for each
       result/expected value that is the desktop's state.
  out  each getter's value as JSON data; a file it copied out comes back as its bytes ({"file", "b64"}) and is
       written to a folder of the judge's.
Never in: the task's evaluator as a whole, its metrics, rules and expected values, its gold files (the project's
judge_files/ and OSWorld's `cloud_file` downloads, read here from the host's cache), or any reward. Whatever the
workspace answers is untrusted (the agent is root there): at most it stands for the state the agent left; an
answer that is not a getter's value, or no answer, is StateUnavailable, never a score.
"""
from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from forkcore.errors import ExecutorError, ForkcoreError

from .errors import EvaluatorError, StateUnavailable
from .evaluators import evaluate
from .tasks import Task, _thaw

class JudgeContext:
    """What the judge's own getters (evaluators.JUDGE_GETTERS) read: the task's downloads and a folder."""

    def __init__(self, run_dir: Path, downloads: dict[str, str]) -> None:
        self.run_dir, self.downloads = run_dir, downloads


def judge(task: Task, answer: str | None, call: Callable[..., Any], details: list | None = None) -> float:
    """The reward of the end state that `call` (the workspace's executor) reaches. Raises StateUnavailable."""
    with tempfile.TemporaryDirectory(prefix="bunshin-judge-") as tmp:
        context = JudgeContext(Path(tmp), task.downloads)
        collected = Path(tmp) / "collected"
        counter = iter(range(1 << 30))

        def collect(config) -> Any:
            answer_ = _call(call, "osworld.collect", getter=_thaw(config))
            if not isinstance(answer_, dict) or "value" not in answer_:
                raise StateUnavailable(f"the workspace answered a getter with {str(answer_)[:120]!r}, not a value")
            return _import(answer_["value"], collected / str(next(counter)))

        return evaluate(task, context, answer, details=details, collect=collect,
                        postconfig=lambda steps: _call(call, "osworld.postconfig", steps=[s.to_dict() for s in steps]))


def _call(call: Callable[..., Any], method: str, **params: Any) -> Any:
    try:
        return call(method, **params)
    except ExecutorError as e:
        if e.remote_type == "EvaluatorError":  # the task's own evaluator is wrong (unknown getter...)
            raise EvaluatorError(str(e)) from e
        raise  # a getter raised on this end state: the metric scores 0 (OSWorld's semantics)
    except ForkcoreError as e:  # killed, hung, gone: the state was not read
        raise StateUnavailable(f"{method}: the workspace did not answer ({type(e).__name__}: {e})") from e


def _import(value: Any, folder: Path) -> Any:
    """A collected value with each file it carries written under `folder` (its path in place of the file)."""
    if isinstance(value, dict) and set(value) == {"file", "b64"}:
        name = value["file"]
        if not isinstance(name, str) or not name or name != os.path.basename(name) or name in (".", ".."):
            raise StateUnavailable(f"a collected file is named {str(name)[:80]!r}")
        try:
            data = base64.b64decode(value["b64"], validate=True)
        except (TypeError, ValueError) as e:
            raise StateUnavailable(f"collected file {name!r} is not base64: {e}") from e
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_bytes(data)
        return str(path)
    if isinstance(value, dict):
        return {k: _import(v, folder) for k, v in value.items()}
    if isinstance(value, list):
        return [_import(v, folder / str(i)) for i, v in enumerate(value)]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise StateUnavailable(f"a collected value holds a {type(value).__name__}")
