"""The restore gate: at most `limit` CRIU restores at once, a waiting caller's before a background refill's."""
from __future__ import annotations

import threading
import time

import pytest

from forkcore.workspace import RestoreGate, _restore_limit


def _enter(gate: RestoreGate, priority: int, order: list, name: str, hold: threading.Event) -> threading.Thread:
    def run():
        with gate.slot(priority):
            order.append(name)
            hold.wait(5)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _until(cond, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_no_more_than_the_limit_run_at_once():
    gate, order, hold = RestoreGate(2), [], threading.Event()
    threads = [_enter(gate, RestoreGate.FOREGROUND, order, str(i), hold) for i in range(5)]
    _until(lambda: len(order) == 2)
    time.sleep(0.1)
    assert len(order) == 2 and gate.running == 2
    hold.set()
    for t in threads:
        t.join(5)
    assert sorted(order) == ["0", "1", "2", "3", "4"] and gate.running == 0


def test_a_waiting_callers_restore_goes_before_queued_refills_and_arrivals_keep_their_order():
    gate, order, hold, release = RestoreGate(1), [], threading.Event(), threading.Event()
    first = _enter(gate, RestoreGate.FOREGROUND, order, "holder", release)
    _until(lambda: order == ["holder"])
    threads = []
    for name, prio in (("refill-1", RestoreGate.BACKGROUND), ("refill-2", RestoreGate.BACKGROUND),
                       ("reset-1", RestoreGate.FOREGROUND), ("reset-2", RestoreGate.FOREGROUND)):
        threads.append(_enter(gate, prio, order, name, hold))
        _until(lambda n=len(threads): len(gate._waiting) == n)
    hold.set()
    release.set()
    for t in [first, *threads]:
        t.join(5)
    assert order == ["holder", "reset-1", "reset-2", "refill-1", "refill-2"]


def test_a_slot_is_given_back_when_the_restore_raises():
    gate = RestoreGate(1)
    with pytest.raises(RuntimeError):
        with gate.slot():
            raise RuntimeError("criu failed")
    assert gate.running == 0
    with gate.slot():
        assert gate.running == 1


def test_the_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("BUNSHIN_RESTORE_CONCURRENCY", raising=False)
    assert _restore_limit() >= 1
    monkeypatch.setenv("BUNSHIN_RESTORE_CONCURRENCY", "3")
    assert _restore_limit() == 3
    monkeypatch.setenv("BUNSHIN_RESTORE_CONCURRENCY", "0")
    assert _restore_limit() > 1000, "0: no limit"
    monkeypatch.setenv("BUNSHIN_RESTORE_CONCURRENCY", "two")
    with pytest.raises(ValueError, match="BUNSHIN_RESTORE_CONCURRENCY='two'"):
        _restore_limit()
    with pytest.raises(ValueError, match="limit=0"):
        RestoreGate(0)


def test_a_waiter_that_gives_up_does_not_hold_up_those_behind_it(monkeypatch):
    gate = RestoreGate(1)
    waits = []

    def interrupted_wait(self, timeout=None):  # the first waiter is interrupted (e.g. KeyboardInterrupt)
        waits.append(1)
        raise KeyboardInterrupt

    with gate.slot():
        monkeypatch.setattr(threading.Condition, "wait", interrupted_wait)
        with pytest.raises(KeyboardInterrupt):
            with gate.slot():
                pass
        monkeypatch.undo()
    assert waits and gate._waiting == [] and gate.running == 0
    with gate.slot():
        assert gate.running == 1
