"""The system layer's identity: which host /etc changes give a new layer (and so new snapshot identities)."""
from __future__ import annotations

from forkcore.layers import _etc_digest


def test_etc_identity_follows_copied_files_but_not_excluded_ones(tmp_path):
    (tmp_path / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    before = _etc_digest(str(tmp_path))
    # dockerd's first start writes its key here, mid-session on a fresh machine: snapshots taken earlier
    # must keep matching this machine's layers
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "key.json").write_text("{}")
    (tmp_path / "apt" / "sources.list.d").mkdir(parents=True)
    (tmp_path / "apt" / "sources.list.d" / "x.list").write_text("deb x")
    assert _etc_digest(str(tmp_path)) == before
    (tmp_path / "profile.d").mkdir()
    (tmp_path / "profile.d" / "x.sh").write_text("export X=1\n")
    assert _etc_digest(str(tmp_path)) != before
