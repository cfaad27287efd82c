"""Errors of the WebArena env package (one module per layer, see STYLE.md rule 6).

Owns: the typed exceptions raised by ``envs.webarena``. Each message says what failed, what was expected,
what was found and how to fix it.
"""
from __future__ import annotations


class WebArenaError(Exception):
    """Base class of every error raised by ``envs.webarena``."""


class ActionParseError(WebArenaError, ValueError):
    """An action string is not valid WebArena (``click [12]``) or BrowserGym (``click('12')``) syntax."""


class TaskConfigError(WebArenaError, ValueError):
    """A task config file cannot be loaded or asks for something this env cannot honour."""


class BrowserError(WebArenaError, RuntimeError):
    """The browser could not be started or used (e.g. Chromium missing at the expected path)."""


class StateUnavailable(WebArenaError, RuntimeError):
    """The judge could not read an episode's end state (the workspace did not answer, or answered something
    that is not state): an evaluation error, never a score."""
