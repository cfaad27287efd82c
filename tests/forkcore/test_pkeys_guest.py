"""Memory protection keys across a CRIU fork, shown on a CPU that has them: a qemu guest (qemu's `max` CPU
model has PKU), whatever this host's CPU is. Guest side: pkeys_guest.py.

Before the fix (allow_pkeys=True) a process that allocated a key before the snapshot loses it in the clone
(CRIU 4.1.1 restores no key state: every VMA comes back with key 0) and a child forked after the restore
that applies the key fails with EINVAL — the path by which every new Chromium 156 page of a clone crashed.
With the workspace's filter pkey_alloc fails with ENOSPC, so nothing holds a key and the clone works.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.qemu, pytest.mark.criu, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
ENOSPC, EINVAL = 28, 22


def _run_guest(chromium: bool, timeout: float) -> tuple[dict, str]:
    from kmod.harness import DEFAULT_BUILD_DIR, HarnessError, run_hostroot_guest

    build = Path(DEFAULT_BUILD_DIR)
    build.mkdir(parents=True, exist_ok=True)
    binary = build / "pkey_zygote"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(Path(__file__).parent / "data/pkey_zygote.c")], check=True)
    command = ["/opt/bunshin/venv/bin/python", "-u", "tests/forkcore/pkeys_guest.py",
               str(binary.relative_to(REPO)), *(["--chromium"] if chromium else [])]
    try:
        run = run_hostroot_guest(command, mem_mb=4096 if chromium else 2048, timeout=timeout)
    except HarnessError as e:
        pytest.skip(f"cannot boot the guest: {e}")
    results = {}
    for line in run.console.splitlines():
        if line.startswith("RESULT "):
            fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
            results[(fields.get("app", "error"), fields.get("allow_pkeys"))] = fields
    return results, run.console[-6000:]


def test_criu_drops_protection_keys_and_workspaces_hide_them_on_a_pku_cpu():
    results, console = _run_guest(chromium=False, timeout=900)
    assert "ospke" in console, "the guest CPU must have PKU for this test to mean anything\n" + console
    before, after = results.get(("zygote", "True")), results.get(("zygote", "False"))
    assert before and after, console
    key = re.fullmatch(r"key_(\d+)", before["ready"])
    assert key and int(key.group(1)) >= 1, before
    assert before["source"] == f"ok_key_{key.group(1)}" and int(before["source_keyed_vmas"]) >= 1, before
    # as before the fix: the restored zygote's child cannot apply the key the zygote allocated
    assert before["clone"] == f"fail_key_{key.group(1)}_errno_{EINVAL}", before
    assert before["clone_keyed_vmas"] == "0", "CRIU restores every VMA with key 0"
    assert after["ready"] == f"no-pkeys_{ENOSPC}", after
    assert after["source"] == after["clone"] == f"ok_no-pkeys_{ENOSPC}", after
    assert after["source_keyed_vmas"] == after["clone_keyed_vmas"] == "0", after


@pytest.mark.skipif(os.environ.get("BUNSHIN_TEST_PKU_CHROMIUM") != "1",
                    reason="Chromium under qemu's TCG takes ~8 min; set BUNSHIN_TEST_PKU_CHROMIUM=1 to run it "
                           "(on a PKU host tests/integration/test_restore_compat.py shows the same in seconds)")
def test_chromium_new_page_in_a_clone_crashes_as_before_the_fix_and_works_with_it():
    results, console = _run_guest(chromium=True, timeout=2700)
    before, after = results.get(("chromium", "True")), results.get(("chromium", "False"))
    assert before and after, console
    assert int(before["source_keyed_vmas"]) >= 1 and before["source"] == "source-page", before
    assert before["clone"].startswith("FAIL:") and "crashed" in before["clone"].lower(), before
    assert after["source_keyed_vmas"] == "0" and after["clone"] == "clone-page", after
