"""`bunshin doctor`: forkcore's capabilities plus what the envs need (Chromium, Xvfb, desktop apps), each marked
with what needs it: the main job, only the tests, or an optional backend (`Capability.needed_for`)."""
from __future__ import annotations

import shutil

from forkcore.capabilities import MAIN, OPTIONAL, TESTS, Capability, check_all as forkcore_checks
from forkcore.backends import KMOD_DEVICE


def check_all() -> list[Capability]:
    caps = forkcore_checks()
    caps.append(Capability("kmod device", KMOD_DEVICE.exists(), str(KMOD_DEVICE) if KMOD_DEVICE.exists() else
                           "absent (this host kernel cannot load modules)",
                           "" if KMOD_DEVICE.exists() else "see kmod/README.md; `bunshin kmod test` runs it in a VM",
                           needed_for=OPTIONAL))
    for name, binary, pkg, needed_for in (("chromium", "chromium", "chromium", MAIN), ("Xvfb", "Xvfb", "xvfb", MAIN),
                                          ("openbox", "openbox", "openbox", MAIN),
                                          ("LibreOffice", "soffice", "libreoffice-calc", MAIN),
                                          ("qemu", "qemu-system-x86_64", "qemu-system-x86", TESTS)):
        path = shutil.which(binary)
        installer = "bash scripts/test.sh" if needed_for == TESTS else "bash scripts/setup.sh"
        caps.append(Capability(name, bool(path), path or "not found",
                               "" if path else f"{installer} (apt-get install {pkg})", needed_for=needed_for))
    try:
        import playwright  # noqa: F401

        caps.append(Capability("playwright", True, "importable"))
    except ImportError:
        caps.append(Capability("playwright", False, "not importable", "bash scripts/setup.sh"))
    return caps
