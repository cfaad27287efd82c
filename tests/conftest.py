"""Shared pytest set-up: markers that skip with a stated reason when the machine lacks something."""
from __future__ import annotations

import os
import shutil

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
