"""Shared fixtures for the WebArena env tests: one seeded site process and one Chromium per test session.

The site runs as a real subprocess on a free loopback port (``python -m envs.webarena.site``) serving a copy of
a pristine seeded database; :meth:`Site.reset_db` copies the pristine file over it so a state-changing task
starts from the seed (the app opens one SQLite connection per request, so the swap is safe between requests).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"


class Site:
    def __init__(self, base_url: str, pristine: Path, live: Path, proc: subprocess.Popen) -> None:
        self.base_url, self.pristine, self.live, self.proc = base_url, pristine, live, proc

    def reset_db(self) -> None:
        shutil.copyfile(self.pristine, self.live)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Site:
    from envs.webarena.site import create_database

    tmp = tmp_path_factory.mktemp("webarena_site")
    pristine, live = tmp / "pristine.db", tmp / "live.db"
    create_database(pristine)
    shutil.copyfile(pristine, live)
    proc = subprocess.Popen([sys.executable, "-m", "envs.webarena.site", "--db", str(live), "--port", "0",
                             "--host", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.kill()
        raise RuntimeError(f"site did not start: {line!r} {proc.stderr.read()}")
    s = Site(line.split()[-1], pristine, live, proc)
    yield s
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def browser(site):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    from envs.webarena.browser import BrowserSession

    session = BrowserSession()
    session.start(site.base_url)
    yield session
    session.close()
