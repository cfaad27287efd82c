"""Shared pytest set-up: markers that skip with a stated reason when the machine lacks something; the
session's private Docker daemon and stand-in image."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def _criu_problem() -> str | None:
    if os.geteuid() != 0:
        return "requires root (namespaces, overlay mounts, CRIU)"
    try:
        from forkcore.criu import require_criu

        require_criu()
    except Exception as e:  # noqa: BLE001
        return f"requires CRIU >= 4.1: {e}"
    return None


def pytest_collection_modifyitems(config, items):
    problems = {"criu": _criu_problem(),
                "browser": None if shutil.which("chromium") else "requires Debian's chromium (scripts/setup.sh)",
                "desktop": None if shutil.which("Xvfb") else "requires Xvfb and the desktop packages (scripts/setup.sh)",
                "qemu": None if shutil.which("qemu-system-x86_64") else "requires qemu-system-x86 (scripts/setup.sh --test)",
                "docker": None if shutil.which("dockerd") and shutil.which("mmdebstrap")
                else "requires dockerd and mmdebstrap (scripts/setup.sh installs docker.io and mmdebstrap)"}
    for item in items:
        for marker, why in problems.items():
            if why and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory):
    """A private Docker daemon for the session (its own data root and socket); stopped, files removed, after."""
    from forkcore.dockerd import PrivateDockerd

    d = PrivateDockerd(Path("/var/tmp") / f"bunshin-dockerd-{tmp_path_factory.getbasetemp().name}").start()
    yield d
    d.stop()
    assert not d.root.exists() and d.proc is None


@pytest.fixture(scope="session")
def standin(dockerd):
    """The stand-in shopping image (envs/webarena/standin_image.py) in `dockerd`: its tag."""
    from envs.webarena.standin_image import ensure_image

    return ensure_image(dockerd.client)
