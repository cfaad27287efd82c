"""OSWorld's state getters: what the judge asks a workspace for, read where the desktop is.

This package is the in-workspace half of judging: `osworld.collect(getter)` (handlers.py) runs one getter on the
workspace's desktop and hands its value out as data. It holds no metric, no expected value and no judge getter;
the comparison code lives in envs/osworld/evaluators/, which .workspace-exclude keeps out of every workspace
(tests/adversarial/test_osworld_workspace_code.py checks both).

Modules (each registers its getters in common.GETTERS on import):
    common            the registry (GETTERS, getter, get_value), JUDGE_GETTERS' names, the evaluation cache, and
                      the getters every application shares (files, commands, terminal, a11y tree, tabs)
    browser_pages     Chromium's pages: omnibox URL, DOM, page content, PDFs
    browser_profile   Chromium's profile files: settings, bookmarks, cookies, history, extensions
    files             VS Code's config, a spreadsheet's last row
    images            the wallpaper
    media             VLC's config and status, the default video player, screen and window sizes
    slides            Impress decks: a slide's audio and background picture
"""

from __future__ import annotations

from . import browser_pages, browser_profile, files, images, media, slides  # noqa: F401  (registers getters)
from .common import GETTERS, JUDGE_GETTERS, cache_dir, get_value, getter

__all__ = ["GETTERS", "JUDGE_GETTERS", "cache_dir", "get_value", "getter"]
