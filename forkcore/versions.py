"""Versions of what a workspace takes from the host: its kernel, CRIU, Debian's packages and the venv's.

A workspace runs the host's /usr and the project venv through read-only binds, so a snapshot is only
meaningful for the exact builds it was dumped with: restoring Chromium 156.0.8078.73's memory over
156.0.8078.114's files maps the wrong code, and a step result recorded under one browser build need not hold
under another. `host_versions()` reads them all (every installed Debian package, not a list of apps:
forkcore knows none, and a library update can change an application as much as its own); snapshots record
it and refuse to restore on a host that differs (`Snapshot.fork`), and the prefix cache's identity includes
its digest. Cached on the mtimes of its sources, so calling it on every fork costs a few stat calls.
"""
from __future__ import annotations

import hashlib
import json
import platform
import re
import threading
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Mapping

from . import criu, paths

DPKG_STATUS = Path("/var/lib/dpkg/status")


@dataclass(frozen=True)
class HostVersions:
    """Attributes:
        kernel: `uname -r`.
        criu: CRIU's version ("" where CRIU is missing).
        debian: installed Debian package -> version (from /var/lib/dpkg/status).
        python: distribution -> version installed in the project venv (`forkcore.paths.VENV`).
    """

    kernel: str
    criu: str
    debian: Mapping[str, str] = field(default_factory=dict)
    python: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "criu": self.criu, "debian": dict(sorted(self.debian.items())),
                "python": dict(sorted(self.python.items()))}

    @staticmethod
    def from_dict(d: Mapping) -> "HostVersions":
        return HostVersions(str(d["kernel"]), str(d["criu"]), dict(d.get("debian", {})), dict(d.get("python", {})))

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    def version_of(self, name: str) -> str | None:
        """A Debian package's or a Python distribution's version (Debian first), None if neither has it."""
        if name in self.debian:
            return self.debian[name]
        key = _norm(name)
        return next((v for k, v in self.python.items() if _norm(k) == key), None)

    def differences(self, other: "HostVersions") -> list[str]:
        """What changed from `self` to `other`, one line each ("chromium 156.0.8078.73 -> 156.0.8078.114")."""
        out = [f"{k} {getattr(self, k)} -> {getattr(other, k)}" for k in ("kernel", "criu")
               if getattr(self, k) != getattr(other, k)]
        for label, a, b in (("", self.debian, other.debian), ("python ", self.python, other.python)):
            for name in sorted(set(a) | set(b)):
                if a.get(name) != b.get(name):
                    out.append(f"{label}{name} {a.get(name, '(absent)')} -> {b.get(name, '(absent)')}")
        return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def debian_packages(status: Path = DPKG_STATUS) -> dict[str, str]:
    """Installed package -> version, with the architecture added for multi-arch duplicates."""
    out: dict[str, str] = {}
    try:
        text = status.read_text(errors="replace")
    except OSError:
        return out
    for para in text.split("\n\n"):
        fields = dict(re.findall(r"^(Package|Status|Version|Architecture): (.*)$", para, re.M))
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            name = fields["Package"]
            if name in out:
                name = f"{name}:{fields.get('Architecture', '')}"
            out[name] = fields.get("Version", "")
    return out


def _venv_site_packages() -> list[Path]:
    return sorted(paths.VENV.glob("lib/python3*/site-packages"))


def venv_distributions() -> dict[str, str]:
    """Distribution -> version installed in the project venv (empty if there is none)."""
    out: dict[str, str] = {}
    for d in metadata.distributions(path=[str(p) for p in _venv_site_packages()]):
        name = d.metadata["Name"]
        if name:
            out[name] = d.version
    return out


def _criu_version() -> str:
    try:
        return ".".join(map(str, criu.criu_version()))
    except Exception:  # noqa: BLE001 - no CRIU: recorded as absent
        return ""


def _stamp() -> tuple:
    """Changes whenever one of the sources may have: mtimes of dpkg's status, site-packages, CRIU."""
    files = [DPKG_STATUS, *_venv_site_packages()]
    try:
        files.append(Path(criu.criu_binary()).resolve())
    except Exception:  # noqa: BLE001
        pass
    out = [platform.release()]
    for f in files:
        try:
            out.append((str(f), f.stat().st_mtime_ns))
        except OSError:
            out.append((str(f), None))
    return tuple(out)


_cache: tuple[tuple, HostVersions] | None = None
_lock = threading.Lock()


def host_versions() -> HostVersions:
    """This host's versions now (recomputed only when a source changed since the last call)."""
    global _cache
    stamp = _stamp()
    with _lock:
        if _cache is None or _cache[0] != stamp:
            _cache = (stamp, HostVersions(platform.release(), _criu_version(), debian_packages(),
                                          venv_distributions()))
        return _cache[1]
