"""The small interface through which an env package plugs into BunshinEnv (no env keys known here).

An env package (envs/webarena, envs/osworld) implements `EnvAdapter`: the workspace to run, how a task
is loaded, which executor calls reset/step/observe, how its judge reads an end state from outside, how a raw
executor answer becomes the observation dict, the canonical form of an action (the prefix-cache key) and prompt
rendering for policies.
"""
from __future__ import annotations

import abc
import functools
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gymnasium import spaces

from forkcore import WorkspaceSpec

if TYPE_CHECKING:
    from .compat import CompatSuite


class EvaluationUnavailable(RuntimeError):
    """The evaluator could not run (executor unreachable, timed out, its answer unreadable): no reward may be
    recorded for it."""


class ActionError(ValueError):
    """A malformed action; the env reports its message as `last_action_error` and stays usable."""


@dataclass(frozen=True)
class Task:
    """A task as the env layer sees it: an id, the raw config the env's executor understands, a digest."""

    id: str
    config: dict = field(hash=False, compare=False)
    goal: str = ""

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.config, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class StepResult:
    """A decoded executor answer."""

    observation: dict
    last_action_error: str
    done: bool  # the agent ended the episode (stop / DONE / FAIL)
    answer: str | None


@functools.cache
def source_digest(package_dir: Path) -> str:
    """sha256 (16 hex) of the .py files under `package_dir` (their relative paths and bytes), read once per
    process: a process runs the code it imported."""
    h = hashlib.sha256()
    for f in sorted(package_dir.rglob("*.py")):
        h.update(f.relative_to(package_dir).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


class EnvAdapter(abc.ABC):
    """What an env package supplies. One instance per env object; cheap to construct (starts nothing)."""

    #: short name, e.g. "webarena"
    name: str = ""

    @abc.abstractmethod
    def workspace_spec(self) -> WorkspaceSpec:
        """The workspace every task of this env starts from (services, layers, handlers)."""

    def identity(self) -> str:
        """Everything about this adapter that can change an observation (viewport, screen size, a11y, action
        space, ...): part of the task snapshots' and the prefix tree's identity, so envs made with other
        settings never share a snapshot or a cached step. By default the adapter's own attributes, which are
        its constructor settings (adapters hold no other state but caches named ``_*``, left out), and the
        digest of its package's source (its handlers run inside the snapshots and shape every observation:
        edited code must neither restore an old snapshot nor be served an old recording from a cache_dir);
        override if that stops being true."""
        settings = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        source = getattr(sys.modules.get(type(self).__module__), "__file__", None)  # None: defined in a REPL
        code = source_digest(Path(source).parent) if source else None
        return json.dumps({"adapter": type(self).__qualname__, "code": code, **settings}, sort_keys=True,
                          default=str)

    def warmup_call(self) -> tuple[str, dict] | None:
        """An executor call run once on the fresh base workspace before its snapshot (e.g. start a browser)."""
        return None

    @abc.abstractmethod
    def task_ids(self) -> list[str]:
        ...

    @abc.abstractmethod
    def load_task(self, task_id: str | None = None, task_config: dict | str | None = None) -> Task:
        """Load and validate a task by id, or from a config dict / file path; raise ValueError if invalid."""

    def host_files(self, task: Task) -> dict[str, Path]:
        """{path inside the workspace: host file} copied into the task's workspace before its reset call, e.g.
        what the host downloaded for it (a workspace has no network). Part of the task's identity through
        its config (name them there by content)."""
        return {}

    @abc.abstractmethod
    def reset_call(self, task: Task) -> tuple[str, dict]:
        """The executor call that brings a fork of the base workspace to the task's initial state."""

    @abc.abstractmethod
    def step_call(self, action: str, observe: bool = True) -> tuple[str, dict]:
        """The executor call that executes a canonical action. With ``observe=False`` (asked only when
        ``replay_observes_every_call`` is False) the call executes the action and waits as a step does, but
        answers only ``last_action_error``: replayed calls, whose observations nobody reads."""

    @abc.abstractmethod
    def evaluate(self, task: Task, answer: str | None, call) -> float:
        """The reward of the end state the episode's workspace holds, computed in this (the env's) process: the
        judge, its gold and the task's evaluator never enter a workspace (its agent may be root in there).

        `call(method, **params)` calls the workspace's executor to read the state (what it answers is untrusted
        data). Raise EvaluationUnavailable when the state cannot be read (never recorded); an ExecutorError
        from `call` means the state broke the evaluator: reward 0, recorded."""

    def observe_call(self) -> tuple[str, dict]:
        """The executor call that observes the current state without acting (answers like a step, with
        ``last_action_error`` ""). Needed where ``replay_observes_every_call`` is False."""
        raise NotImplementedError(f"{type(self).__name__} has no observe call")

    @abc.abstractmethod
    def decode(self, raw: Any, task: Task) -> StepResult:
        """Turn an executor answer (from reset or step) into the observation dict."""

    def decode_error(self, raw: Any) -> str:
        """The ``last_action_error`` of an executor answer, as `decode` puts it into the observation."""
        return str(raw.get("last_action_error", "") or "")

    def observation_seconds(self, raw: Any) -> float:
        """Seconds a step's executor answer spent observing, which a replay saves where
        ``replay_observes_every_call`` is False (0 otherwise: a replay costs what the call did). The snapshot
        policy and the restore planner price a replay by it."""
        return 0.0

    @abc.abstractmethod
    def observation_space(self) -> spaces.Dict:
        ...

    @abc.abstractmethod
    def action_space(self) -> spaces.Space:
        ...

    @abc.abstractmethod
    def canonical_action(self, action: Any) -> str:
        """The action's canonical signature (tool name + normalised args); raise ActionError if malformed."""

    #: Observation keys that must be identical between a fresh, cached, forked and speculated execution of
    #: the same actions (None: every key). Replaying recorded calls to materialise a state compares them
    #: with the recording; a difference means the app is timing-dependent there and that subtree is dropped.
    exact_fields: tuple[str, ...] | None = None
    #: False where observing has no effect on the workspace and costs much (OSWorld: the accessibility tree
    #: takes seconds of CPU): a replay then checks its calls by their ``last_action_error`` only and observes
    #: the state it reached (``observe_call``) just before that state is used, so a background sync after
    #: cache hits observes nothing. True where observing changes what later actions meet (WebArena numbers
    #: the page's elements when it observes).
    replay_observes_every_call: bool = True

    def is_read_only(self, action: str) -> bool:
        """True if the action changes neither the workspace nor the observation (may be skipped in cache keys)."""
        return False

    def cost_class(self, action: str, observation: dict) -> str | None:
        """The kind of call `action` is in the state `observation` shows, as far as its execution time goes:
        calls of one kind are expected to cost alike (e.g. a WebArena click on an `<option>` waits out its
        timeout whatever the element's id). None: a call is expected to cost what the same call cost in other
        states. Speculation weighs a call's expected cost against what a misprediction costs."""
        return None

    def render_prompt(self, observation: dict) -> str:
        """The observation as prompt text for a language-model policy."""
        return json.dumps({k: v for k, v in observation.items() if isinstance(v, str)}, indent=1)

    def candidate_actions(self, observation: dict) -> list[str]:
        """Actions that make sense in this observation (for discrete-action wrappers and random policies)."""
        return []

    def oracle_actions(self, task: Task) -> list:
        """The recorded action trajectory that solves `task` (for `--policy oracle` and tests)."""
        raise NotImplementedError(f"env {self.name!r} ships no oracle trajectories")

    def action_grammar(self) -> str | None:
        """A GBNF grammar of the action syntax, for constrained decoding, if the env has one."""
        return None

    def restore_checks(self) -> "CompatSuite | None":
        """This env's restore-compatibility checks (`bunshin doctor --deep`, see compat.py): which workspace to
        start, how to start its applications, and the executor methods that exercise each one in a clone."""
        return None
