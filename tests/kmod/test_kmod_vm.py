"""The bunshin_cow kernel module, tested inside a qemu guest (kmod/harness.py).

One guest boot runs every check of kmod/tests/cowtest.c (basic, multi, leak); these
tests assert on the parsed result.  Skips, with the reason, when qemu, the Debian
kernel image, its headers, gcc or busybox-static are missing.
"""
from __future__ import annotations

import os
import shutil

import pytest

from kmod import harness

pytestmark = [pytest.mark.qemu, pytest.mark.slow]


def _missing(missing_guest_prereqs) -> str | None:
    why = missing_guest_prereqs()
    if why:
        return why
    if not shutil.which("gcc") or not shutil.which("make"):
        return "requires gcc and make (apt-get install gcc make libc6-dev)"
    return None


@pytest.fixture(scope="module")
def guest_result(tmp_path_factory, guest_prereqs):
    why = _missing(guest_prereqs)
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("kmod_vm")
    build = os.environ.get("BUNSHIN_KMOD_BUILD_DIR") or str(out / "build")
    try:
        return harness.run_tests(out_dir=out, timeout=420, build_dir=build)
    except harness.HarnessError as e:
        pytest.fail(f"kmod harness could not run: {e}")


def test_guest_checks_all_pass(guest_result):
    failed = [c for c in guest_result.checks if c[1] != "PASS"]
    assert guest_result.checks, "the guest printed no checks:\n" + guest_result.console[-4000:]
    assert not failed, guest_result.report()


def test_guest_finishes_without_kernel_bug_warn_or_rss_counter(guest_result):
    assert not guest_result.problems, guest_result.report()


def test_clones_see_capture_time_data_and_stay_isolated(guest_result):
    names = {name for name, status, _ in guest_result.checks if status == "PASS"}
    for needed in ("clone1_reads_capture_time_data", "clone2_reads_capture_time_data",
                   "source_writes_invisible_to_clone1", "clone1_writes_private",
                   "clone_writes_invisible_to_source", "views_correct_after_swap",
                   "views_correct_after_thp_split",
                   "clones_correct_after_source_exit_and_release", "everything_freed",
                   "multi_clones_cost_one_copy", "rmmod"):
        assert needed in names, guest_result.report()


def test_negative_control_detects_leak_without_clear_exclusive(guest_result):
    assert guest_result.negative_control == "detected", guest_result.report()
