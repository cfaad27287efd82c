"""One host desktop (Xvfb + openbox + AT-SPI) for the whole osworld test session; tests reset it.

forkcore will later fork a snapshot per test instead; until then `desktop.reset()` (kill apps, restore
HOME) isolates tests. The desktop runs at 1280x800 to keep LibreOffice/Chromium rendering cheap on 2 cores.
"""
from __future__ import annotations

import shutil

import pytest

TEST_SIZE = (1280, 800)


@pytest.fixture(scope="session")
def desktop(tmp_path_factory):
    if not shutil.which("Xvfb"):
        pytest.skip("requires Xvfb and the desktop packages (scripts/setup.sh)")
    from envs.osworld.desktop import DesktopSession

    session = DesktopSession(tmp_path_factory.mktemp("osworld-home"), size=TEST_SIZE)
    session.start()
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def clean_desktop(desktop):
    """The shared desktop with no apps and HOME as after start."""
    desktop.reset()
    yield desktop


@pytest.fixture(scope="session")
def osworld_examples():
    """OSWorld's task JSONs by domain (`<dir>/chrome/<id>.json`, ...): BUNSHIN_OSWORLD_EXAMPLES names OSWorld's
    evaluation_examples folder (or its examples/ folder), else those of ../shared/osworld beside the checkout;
    they are not part of this repository."""
    import os
    from pathlib import Path

    shared = Path(__file__).resolve().parents[3] / "shared/osworld/evaluation_examples"
    root = Path(os.environ.get("BUNSHIN_OSWORLD_EXAMPLES", "") or shared)
    for d in (root / "examples", root):
        if (d / "chrome").is_dir():
            return d
    pytest.skip(f"OSWorld's task files are not at {shared}: set BUNSHIN_OSWORLD_EXAMPLES to OSWorld's "
                "evaluation_examples folder (they are not committed here)")
