"""What a qemu guest test of kmod/ needs on the host (fixture `guest_prereqs`); modules add their own checks."""
from __future__ import annotations

import os
import shutil

import pytest

from kmod import harness


def missing_guest_prereqs(*, root: bool = False) -> str | None:
    """None when a guest can boot here, else the reason to skip (with the fix)."""
    if root and os.geteuid() != 0:
        return "requires root (the guest mounts the host's / over 9p and runs CRIU)"
    if not shutil.which("qemu-system-x86_64"):
        return "requires qemu-system-x86 (apt-get install qemu-system-x86)"
    try:
        harness.find_kernel()
        harness._busybox()
    except harness.HarnessError as e:
        return str(e)
    return None


@pytest.fixture(scope="module")
def guest_prereqs():
    return missing_guest_prereqs
