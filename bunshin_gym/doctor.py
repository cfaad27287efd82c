"""`bunshin doctor`: forkcore's capabilities plus what the envs need (Chromium, Xvfb, desktop apps)."""
from __future__ import annotations

import shutil

from forkcore.capabilities import Capability, check_all as forkcore_checks
from forkcore.backends import KMOD_DEVICE


def check_all() -> list[Capability]:
    caps = forkcore_checks()
    caps.append(Capability("kmod device", KMOD_DEVICE.exists(), str(KMOD_DEVICE) if KMOD_DEVICE.exists() else
                           "absent (this host kernel cannot load modules)",
                           "" if KMOD_DEVICE.exists() else "see kmod/README.md; `bunshin kmod test` runs it in a VM"))
    for name, binary, pkg in (("chromium", "chromium", "chromium"), ("Xvfb", "Xvfb", "xvfb"),
                              ("openbox", "openbox", "openbox"), ("LibreOffice", "soffice", "libreoffice-calc"),
                              ("qemu", "qemu-system-x86_64", "qemu-system-x86")):
        path = shutil.which(binary)
        caps.append(Capability(name, bool(path), path or "not found",
                               "" if path else f"bash scripts/setup.sh (apt-get install {pkg})"))
    try:
        import playwright  # noqa: F401

        caps.append(Capability("playwright", True, "importable"))
    except ImportError:
        caps.append(Capability("playwright", False, "not importable", "bash scripts/setup.sh"))
    return caps
