"""Restore-compatibility checks: does each application an env runs keep working in a restored clone?

A new build of an application can hold state CRIU does not carry (Chromium 156's memory protection keys
did: every clone's new page crashed while the source and cold starts were fine). These checks catch that on
the day the build arrives: for each env, start its applications in a workspace, snapshot it, restore one
clone (private backend, no prefix cache: a cache hit never starts a process) and, in the clone, make every
application do what creates new processes or state, checking the result.

Owns the contract (`AppCheck`, `CompatSuite`, `CheckResult`) and the runner (`run_suite`). Envs contribute a
suite through `EnvAdapter.restore_checks()` and the executor methods that carry the checks out in the
workspace; this module imports no env (`bunshin doctor --deep` and the tests find them through the registered
env ids).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Mapping

from forkcore import Workspace, WorkspaceSpec, host_versions


@dataclass(frozen=True)
class AppCheck:
    """One application's check.

    Attributes:
        app: what is checked, as a person names it ("Chromium (headless, Playwright)").
        packages: Debian packages / Python distributions that make up the application; their versions are
            printed beside the result (the first one found names the version).
        method: executor method run in the clone; it returns {"ok": bool, "detail": str} (or raises: FAIL).
        params: its keyword arguments.
        timeout_s: how long the clone may take.
    """

    app: str
    packages: tuple[str, ...]
    method: str
    params: Mapping = field(default_factory=dict)
    timeout_s: float = 120.0


@dataclass(frozen=True)
class CompatSuite:
    """An env's checks: the workspace to start, the executor calls that start its applications in the source
    (run in order before the snapshot), and the checks run in the clone (in order, in the one clone)."""

    env: str
    spec: WorkspaceSpec
    prepare: tuple[tuple[str, Mapping], ...]
    checks: tuple[AppCheck, ...]
    prepare_timeout_s: float = 300.0


@dataclass(frozen=True)
class CheckResult:
    env: str
    app: str
    versions: str  #: "chromium 156.0.8078.114-1~deb12u1, playwright 1.56.0"
    ok: bool
    detail: str
    seconds: float

    def to_dict(self) -> dict:
        return {"env": self.env, "app": self.app, "versions": self.versions, "ok": self.ok, "detail": self.detail,
                "seconds": round(self.seconds, 2)}


def package_versions(packages: tuple[str, ...]) -> str:
    """ "name version" of each package installed on the host (Debian's or the venv's), comma-separated."""
    hv = host_versions()
    found = [(p, hv.version_of(p)) for p in packages]
    return ", ".join(f"{p} {v}" for p, v in found if v) or "not installed"


def _all_failed(suite: CompatSuite, detail: str) -> list[CheckResult]:
    return [CheckResult(suite.env, c.app, package_versions(c.packages), False, detail, 0.0) for c in suite.checks]


def run_suite(suite: CompatSuite, backend: str = "private") -> list[CheckResult]:
    """Run one env's checks: start → prepare → snapshot → one clone → each check in the clone.

    Never raises for what it checks: a workspace that does not start, a failed dump or restore, a check that
    raises or times out become FAIL results carrying the reason (a dump or restore failure fails every app).
    """
    source = snap = clone = None
    try:
        try:
            source = Workspace.start(suite.spec)
            for method, params in suite.prepare:
                source.call(method, timeout=suite.prepare_timeout_s, **dict(params))
        except Exception as e:  # noqa: BLE001 - reported as the result
            return _all_failed(suite, f"could not start the applications in the source: {_first(e)}")
        try:
            snap = source.snapshot()
            clone = snap.fork(1, backend=backend)[0]
        except Exception as e:  # noqa: BLE001
            return _all_failed(suite, f"snapshot/restore failed: {_first(e)}")
        out = []
        for c in suite.checks:
            t0 = time.monotonic()
            try:
                r = clone.call(c.method, timeout=c.timeout_s, **dict(c.params))
                ok, detail = bool(r["ok"]), str(r.get("detail", ""))
            except Exception as e:  # noqa: BLE001 - a crashed app is the failure we look for
                ok, detail = False, _first(e)
            out.append(CheckResult(suite.env, c.app, package_versions(c.packages), ok, detail, time.monotonic() - t0))
        return out
    finally:
        for ws in (clone, source):
            if ws is not None:
                ws.destroy()
        if snap is not None:
            snap.release()


def run_checks(env_ids: list[str] | None = None, backend: str = "private", allow_pkeys: bool = False,
               progress: bool = False) -> list[CheckResult]:
    """Every registered Bunshin env's suite (or those of `env_ids`), one after another.

    allow_pkeys=True runs the workspaces as they ran before forkcore hid memory protection keys (see
    forkcore/seccomp.py): on a PKU CPU it shows whether the CRIU in use restores key state."""
    from . import ENV_IDS, adapter_for

    out = []
    for env_id in env_ids or ENV_IDS:
        suite = adapter_for(env_id).restore_checks()
        if suite is None:
            continue
        if allow_pkeys:
            suite = dataclasses.replace(suite, spec=dataclasses.replace(suite.spec, allow_pkeys=True))
        if progress:
            print(f"[doctor] {env_id}: starting {len(suite.checks)} restore checks ...", flush=True)
        out += run_suite(suite, backend=backend)
    return out


def _first(e: Exception, limit: int = 400) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    text = " | ".join(lines[:4]) if lines else type(e).__name__
    return text[:limit]
