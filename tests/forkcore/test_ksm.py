"""Honest baselines: a private clone is not mergeable by KSM, a ksm clone is; ksm_off/ksm_restored put KSM's
settings back (on an exception too)."""
from __future__ import annotations

import pytest

from forkcore.ksm import ksm_off, ksm_restored, ksm_state, mergeable_vmas


def _fake_ksm(tmp_path, **values):
    d = tmp_path / "ksm"
    d.mkdir()
    base = {"run": 1, "pages_sharing": 5, "pages_shared": 2, "pages_unshared": 0, "full_scans": 9,
            "pages_to_scan": 1000, "sleep_millisecs": 20, **values}
    for k, v in base.items():
        (d / k).write_text(f"{v}\n")
    return d


def test_ksm_off_switches_off_and_restores_settings_even_on_exception(tmp_path):
    d = _fake_ksm(tmp_path)
    with pytest.raises(RuntimeError):
        with ksm_off(d, unmerge_timeout_s=0.1) as leg:
            assert ksm_state(d)["run"] == 0
            (d / "pages_to_scan").write_text("5000")  # what a ksm leg's enable_ksm would change
            (d / "sleep_millisecs").write_text("1")
            raise RuntimeError("leg failed")
    st = ksm_state(d)
    assert (st["run"], st["pages_to_scan"], st["sleep_millisecs"]) == (1, 1000, 20)
    assert leg.record()["run_before"] == 1
    assert leg.record()["ksm_restored_to"] == {"pages_to_scan": 1000, "sleep_millisecs": 20, "run": 1}


def test_ksm_restored_puts_back_what_a_sharing_leg_changed(tmp_path):
    d = _fake_ksm(tmp_path, run=0)
    with ksm_restored(d) as leg:
        (d / "run").write_text("1")
        (d / "pages_to_scan").write_text("1000")
        leg.sample()
    st = ksm_state(d)
    assert (st["run"], st["pages_to_scan"]) == (0, 1000)
    assert leg.record()["pages_sharing_max"] == 5  # the sample is what the leg recorded


def test_ksm_off_without_ksm_runs_the_leg_and_says_so(tmp_path):
    with ksm_off(tmp_path / "absent") as leg:
        assert leg.sample() is None
    assert leg.record()["available"] is False and "no KSM" in leg.record()["error"]


def _mergeable(ws) -> dict[int, int]:
    return {pid: mergeable_vmas(pid)[0] for pid in ws.pids()}


@pytest.mark.criu
def test_private_clones_are_not_mergeable_and_ksm_clones_are():
    from forkcore import Workspace
    from forkcore.probe import probe_spec

    ws = Workspace.start(probe_spec("ksmtest", hold_mb=8))  # ksm_mergeable: True, the default
    try:
        ws.call("probe.region_fill", mb=2, byte=0xAB)  # an anonymous region in the executor
        src = _mergeable(ws)
        # negative control: the check flags the source, whose every process is mergeable (PR_SET_MEMORY_MERGE),
        # and so a private clone restored from its images as they are
        assert src and all(n > 0 for n in src.values()), src
        snap = ws.snapshot()
        try:
            (private,) = snap.fork(1, backend="private")
            try:
                assert private.call("probe.counter") == 0
                got = _mergeable(private)
                assert len(got) == len(src) and all(n == 0 for n in got.values()), got
            finally:
                private.destroy()
            (ksm,) = snap.fork(1, backend="ksm")
            try:
                got = _mergeable(ksm)
                assert len(got) == len(src) and all(n > 0 for n in got.values()), got
            finally:
                ksm.destroy()
            # the dumped images themselves still carry the marks: only the private backend's copy drops them
            (raw,) = _fork_from_dumped_images(snap)
            try:
                assert all(n > 0 for n in _mergeable(raw).values())
            finally:
                raw.destroy()
        finally:
            snap.release()
    finally:
        ws.destroy()


def _fork_from_dumped_images(snap):
    """A private-backend restore of the images as dumped (the behaviour before this fix): the negative control."""
    from forkcore import backends

    impl = backends.get_backend("private")
    orig = type(impl).prepare
    type(impl).prepare = backends.Backend.prepare
    try:
        return snap.fork(1, backend="private")
    finally:
        type(impl).prepare = orig
