"""forkcore's kmod memory backend end to end, inside a qemu guest (kmod.harness.run_forkcore_guest_test).

The guest boots Debian's 6.1 kernel with bunshin_cow loaded and the host's / read-only over 9p, starts
forkcore's probe workspace holding 200 MiB, snapshots it with CRIU and forks 4 clones with the kmod
backend: the clones must serve the source's snapshot-time state (hold digest, counter, echo over a
restored TCP connection, files) and cost less than one copy of the held memory in total.
Skips, with the reason, when not root or qemu / the kernel / CRIU are missing. Takes ~10-20 min (TCG).
"""
from __future__ import annotations

import os

import pytest

from kmod import harness

pytestmark = [pytest.mark.qemu, pytest.mark.slow, pytest.mark.timeout(3600)]

HOLD_MB = int(os.environ.get("BUNSHIN_KMOD_E2E_HOLD_MB", "200"))
CLONES = int(os.environ.get("BUNSHIN_KMOD_E2E_CLONES", "4"))


def _missing(missing_guest_prereqs) -> str | None:
    why = missing_guest_prereqs(root=True)
    if why:
        return why
    if not os.path.exists("/opt/bunshin/criu/bin/criu") or not os.path.exists("/opt/bunshin/venv/bin/python"):
        return "requires CRIU and the venv from `bash scripts/setup.sh`"
    return None


@pytest.fixture(scope="module")
def guest(tmp_path_factory, guest_prereqs):
    why = _missing(guest_prereqs)
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("kmod_forkcore_vm")
    build = os.environ.get("BUNSHIN_KMOD_BUILD_DIR") or str(out / "build")
    try:
        return harness.run_forkcore_guest_test(out_dir=out, hold_mb=HOLD_MB, clones=CLONES, build_dir=build)
    except harness.HarnessError as e:
        pytest.fail(f"kmod harness could not run: {e}")


def test_clones_restored_with_kmod_are_correct(guest):
    names = {n for n, st, _ in guest.checks if st == "PASS"}
    for i in range(CLONES):
        for check in ("hold_digest_equals_source", "counter_is_snapshot_time", "counter_inc_private",
                      "echo_over_restored_tcp", "files"):
            assert f"clone{i}_{check}" in names, guest.report()
    assert {"clones_use_kmod", "clones_map_holders", "source_digest_unaffected",
            "source_counter_unaffected"} <= names, guest.report()


def test_clones_cost_less_than_one_copy(guest):
    names = {n for n, st, _ in guest.checks if st == "PASS"}
    assert "memory_one_copy" in names, guest.report()


def test_holders_released_and_no_kernel_problems(guest):
    assert not [c for c in guest.checks if c[1] != "PASS"], guest.report()
    assert not guest.problems, guest.report()
