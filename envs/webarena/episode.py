"""One WebArena episode on a live :class:`~envs.webarena.browser.BrowserSession`: reset and step.

Owns: the step loop's bookkeeping (opening a task's start URLs in a fresh, logged-in context; turning action
text into browser calls; recording the final answer; ``done``). Knows of a task only what its workspace gets
(``tasks.workspace_task``: start URLs, sign-in), never how it is judged (``judge.py``, outside the workspace).
Does not own: the browser mechanism or parsing (their modules), nor the site process or its database (the
caller starts the site; a task that mutates state needs a fresh database per episode).
"""
from __future__ import annotations

import time

from collections.abc import Sequence

from .actions import parse_action
from .errors import ActionParseError
from .site.seed import CUSTOMER_EMAIL, CUSTOMER_PASSWORD


class Episode:
    """Drive one task.

    Args:
        session: a started BrowserSession (its ``base_url`` is the site).
        start_urls: the task's start URLs, one tab each (``__SHOPPING__`` or site-relative allowed).
        require_login: sign the task customer in first.
        credentials: (email, password) used when ``require_login``.
    """

    def __init__(self, session, start_urls: Sequence[str], require_login: bool,
                 credentials: tuple[str, str] = (CUSTOMER_EMAIL, CUSTOMER_PASSWORD)) -> None:
        if isinstance(start_urls, str) or not start_urls or not all(isinstance(u, str) for u in start_urls):
            raise ValueError(f"start_urls={start_urls!r}: expected a non-empty list of URLs")
        self.session = session
        self.start_urls, self.require_login = tuple(start_urls), bool(require_login)
        self.credentials = credentials
        self.answer: str | None = None
        self.done = False
        self.history: list[str] = []

    def reset(self, viewport: tuple[int, int] | None = None, observe: bool = True) -> dict:
        """Open a fresh context (logged in if required), load the start URL(s); returns the observation
        (``{}`` when ``observe`` is False) plus ``last_action_error`` = ""."""
        s = self.session
        s.new_context(s.base_url, viewport or s.viewport, self.credentials if self.require_login else None)
        for i, url in enumerate(self.start_urls):
            if i:
                s.execute("new_tab")
            s.goto(url)
        if len(self.start_urls) > 1:
            s.execute("tab_focus [0]")
        self.answer, self.done, self.history = None, False, []
        return self._obs(observe, "")

    def step(self, action: str, observe: bool = True) -> dict:
        """Execute one action.

        Returns:
            the observation keys (when ``observe``) plus ``last_action_error`` (str, "" if fine), ``done``
            (bool: a ``stop``/``send_msg_to_user`` was executed), ``answer`` (str or None) and
            ``elapsed_s`` (float, time spent executing).
        """
        t0 = time.perf_counter()
        if self.done:
            return {**self._obs(observe, "the episode is over (stop was called); reset to start again"),
                    "done": True, "answer": self.answer, "elapsed_s": 0.0}
        self.history.append(action)
        try:
            act = parse_action(action)
        except ActionParseError as e:
            err = f"invalid action: {e}"
        else:
            err = self.session.execute(act)
            if act.name in ("stop", "send_msg_to_user"):
                self.answer, self.done = act.args[0], True
        elapsed = time.perf_counter() - t0
        return {**self._obs(observe, err), "done": self.done, "answer": self.answer, "elapsed_s": elapsed}

    def _obs(self, observe: bool, err: str) -> dict:
        obs = self.session.observe() if observe else {}
        return {**obs, "last_action_error": err}
