"""Errors of the OSWorld-style desktop env (envs/osworld): one place, each message says what failed,
what was expected, what was found and how to fix it.

Agent mistakes (malformed actions, code that raises) are *not* raised: envs/osworld/actions.py returns
them as error strings for the observation's `last_action_error`. These exceptions are for task authors
and for the machine (missing packages, an X server that does not start).
"""

from __future__ import annotations

__all__ = [
    "OSWorldError",
    "DependencyNotInstalled",
    "DesktopStartError",
    "TaskValidationError",
    "TaskConfigError",
    "EvaluatorError",
    "StateUnavailable",
]


class OSWorldError(Exception):
    """Base class of every error raised by envs/osworld."""


class DependencyNotInstalled(OSWorldError):
    """A program or Python package the desktop needs is missing (the message names the install line)."""


class DesktopStartError(OSWorldError):
    """A desktop service (Xvfb, dbus-daemon, openbox, AT-SPI) did not come up; the message has its log tail."""


class TaskValidationError(OSWorldError):
    """A task JSON does not follow OSWorld's schema; the message names the task file and the field."""


class TaskConfigError(OSWorldError):
    """A task's `config` / `postconfig` step failed while running (missing file, command failed, no window)."""


class EvaluatorError(OSWorldError):
    """An evaluator names an unknown getter or metric, or a getter could not produce its value."""


class StateUnavailable(OSWorldError):
    """The judge could not read the desktop's end state: the workspace's getter did not answer, or answered
    with something that is not a getter's value (the workspace is untrusted: its agent is root there). Not a
    score: the evaluation is retried on a fresh copy of the state, never recorded as 0 or 1."""
