"""What a snapshot's identity takes from the host: parsed from dpkg's status and the venv, compared by digest."""
from __future__ import annotations

import dataclasses

from forkcore.versions import HostVersions, debian_packages, host_versions

STATUS = """Package: chromium
Status: install ok installed
Architecture: amd64
Version: 156.0.8078.114-1~deb12u1

Package: removed-thing
Status: deinstall ok config-files
Version: 1.0

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u13

Package: libc6
Status: install ok installed
Architecture: i386
Version: 2.36-9+deb12u13
"""


def test_dpkg_status_gives_installed_packages_only(tmp_path):
    p = tmp_path / "status"
    p.write_text(STATUS)
    assert debian_packages(p) == {"chromium": "156.0.8078.114-1~deb12u1", "libc6": "2.36-9+deb12u13",
                                  "libc6:i386": "2.36-9+deb12u13"}


def test_one_changed_version_changes_the_digest_and_is_named():
    a = HostVersions("6.18.0", "4.1.1", {"chromium": "156.0.8078.73-1"}, {"Playwright": "1.56.0"})
    b = dataclasses.replace(a, debian={"chromium": "156.0.8078.114-1"})
    assert a.digest() != b.digest()
    assert a.differences(b) == ["chromium 156.0.8078.73-1 -> 156.0.8078.114-1"]
    assert HostVersions.from_dict(a.to_dict()) == a and HostVersions.from_dict(a.to_dict()).digest() == a.digest()
    assert a.version_of("playwright") == "1.56.0" and a.version_of("chromium") == "156.0.8078.73-1"
    assert a.version_of("firefox") is None


def test_this_host_reports_its_kernel_criu_and_packages():
    hv = host_versions()
    assert hv.kernel and hv.debian.get("libc6"), "a Debian host"
    assert host_versions() is hv, "cached while nothing changed"
