"""The in-workspace RPC surface of the WebArena env (thin adapters; all logic lives in the other modules).

Owns: :func:`register`, which adds ``webarena.*`` handlers to forkcore's in-workspace executor, the JSON
shapes of their answers, and :func:`site_service_argv`, the command forkcore runs as the site service.

Handlers (keyword arguments in, JSON-serialisable dicts out):

- ``webarena.reset(task: dict, viewport: list = [1280, 720], headless: bool = True, base_url: str | None)``
  (``task``: ``tasks.workspace_task``'s ``{"start_urls": [...], "require_login": bool}``; never its evaluator)
  -> observation: ``screenshot_png`` (base64 PNG, viewport size), ``axtree`` (str), ``url`` (str),
  ``open_pages_urls`` (list[str]), ``active_page_index`` (int), ``last_action_error`` ("").
  Starts Chromium on first use (reused afterwards); opens a fresh logged-in context on the task's start URL.
  ``login`` = ``{"form": "shop" | "magento", "email": ..., "password": ...}`` says how the site signs in
  (default: this project's site and its seeded customer).
- ``webarena.warmup(site_setup: list[str] = [], image_root: str = "", **reset_kwargs)``: runs a site image's
  set-up shell commands (``{base_url}`` replaced, chrooted into ``image_root``), then ``reset``.
- ``webarena.step(action: str)`` -> observation + ``last_action_error`` (str), ``done`` (bool), ``answer``
  (str | None), ``elapsed_s`` (float).
- ``webarena.observe()`` -> observation of the current state (no action).
- ``webarena.active_url()`` -> ``{"url": str}``, ``webarena.page_text(url: str, locator: str = "")`` ->
  ``{"text": str}``: the end state, read for the judge (``judge.py``), which scores it outside the workspace.
- ``webarena.close()`` -> ``{"closed": true}``; stops the browser.
- ``webarena.check_chromium()``, ``webarena.check_site(db_path)`` -> ``{"ok": bool, "detail": str}``: the
  restore checks of compat.py (`bunshin doctor --deep`).

The site's URL defaults to ``http://127.0.0.1:7770`` (``DEFAULT_PORT``), overridable with the environment
variable ``BUNSHIN_WEBARENA_URL``, the ``base_url`` argument of :func:`register` or of ``reset``.
"""
from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

from . import compat
from .browser import BrowserSession
from .episode import Episode
from .errors import WebArenaError

DEFAULT_PORT = 7770


def site_service_argv(db_path: str | Path, port: int = DEFAULT_PORT) -> list[str]:
    """argv that serves the shopping site on 127.0.0.1:``port`` from ``db_path`` (seeded first if missing).

    Run it from the repository root (or with the package importable); it prints ``serving http://...`` once
    listening and exits cleanly on SIGTERM.
    """
    return [sys.executable, "-m", "envs.webarena.site", "--db", str(db_path), "--port", str(int(port)),
            "--host", "127.0.0.1"]


class _Runtime:
    """The executor-wide state: one browser, the current episode."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.session: BrowserSession | None = None
        self.episode: Episode | None = None
        self.headless = True

    @staticmethod
    def _obs(res: dict) -> dict:
        out = dict(res)
        if "screenshot_png" in out:
            out["screenshot_png"] = base64.b64encode(out["screenshot_png"]).decode("ascii")
        return out

    def reset(self, task: dict, viewport: list | None = None, headless: bool = True,
              base_url: str | None = None, login: dict | None = None) -> dict:
        if not isinstance(task, dict) or set(task) != {"start_urls", "require_login"}:
            raise WebArenaError(f"webarena.reset: task={str(task)[:200]!r}; expected what tasks.workspace_task "
                                "gives a workspace: {'start_urls': [...], 'require_login': bool}")
        vp = tuple(viewport or (1280, 720))
        if base_url:
            self.base_url = base_url.rstrip("/")
        if self.session is not None and headless != self.headless:
            self.close()
        if self.session is None:
            self.session = BrowserSession(png_screenshots=True)
            self.session.start(self.base_url, viewport=vp, headless=headless)
            self.headless = headless
        self.session.base_url = self.base_url
        self.session.login_form = (login or {}).get("form", "shop")
        creds = {"credentials": (login["email"], login["password"])} if login and "email" in login else {}
        self.episode = Episode(self.session, task["start_urls"], task["require_login"], **creds)
        return self._obs(self.episode.reset(viewport=vp))

    def warmup(self, site_setup: list[str] = (), image_root: str = "", **reset_kwargs) -> dict:
        """Run the site's set-up commands (``{base_url}`` replaced; in the image's root when ``image_root``),
        then reset on the given task: what a workspace does once before its base snapshot."""
        base_url = (reset_kwargs.get("base_url") or self.base_url).rstrip("/")
        for cmd in site_setup:
            argv = ["/bin/sh", "-c", cmd.replace("{base_url}", base_url)]
            r = subprocess.run(["chroot", image_root, *argv] if image_root else argv, capture_output=True,
                               text=True, timeout=600)
            if r.returncode != 0:
                raise WebArenaError(f"site set-up command {cmd!r} exited with {r.returncode}: "
                                    f"{(r.stderr or r.stdout)[-2000:]}")
        return self.reset(**reset_kwargs)

    def _need_episode(self) -> Episode:
        if self.episode is None:
            raise WebArenaError("no episode: call webarena.reset(task=...) first")
        return self.episode

    def step(self, action: str) -> dict:
        return self._obs(self._need_episode().step(action))

    def observe(self) -> dict:
        self._need_episode()
        return self._obs({**self.session.observe(), "last_action_error": ""})

    def active_url(self) -> dict:
        self._need_episode()
        return {"url": self.session.page.url}

    def page_text(self, url: str, locator: str = "") -> dict:
        self._need_episode()
        return {"text": self.session.page_text(url, locator)}

    def close(self) -> dict:
        if self.session is not None:
            self.session.close()
        self.session, self.episode = None, None
        return {"closed": True}


def register(executor, base_url: str | None = None) -> None:
    """Register the ``webarena.*`` handlers on ``executor`` (anything with ``register(name, fn)``)."""
    rt = _Runtime(base_url or os.environ.get("BUNSHIN_WEBARENA_URL", f"http://127.0.0.1:{DEFAULT_PORT}"))
    executor.register("webarena.reset", rt.reset)
    executor.register("webarena.warmup", rt.warmup)
    executor.register("webarena.step", rt.step)
    executor.register("webarena.observe", rt.observe)
    executor.register("webarena.active_url", rt.active_url)
    executor.register("webarena.page_text", rt.page_text)
    executor.register("webarena.close", rt.close)
    executor.register("webarena.check_chromium", lambda: compat.check_chromium(rt.session))
    executor.register("webarena.check_site", lambda db_path: compat.check_site(rt.base_url, db_path))
