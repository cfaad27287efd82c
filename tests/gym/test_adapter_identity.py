"""An adapter's identity (the key of its task snapshots and prefix trees) covers its package's code."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from bunshin_gym.adapter import source_digest


def test_the_source_digest_follows_every_python_file_of_the_package(tmp_path):
    pkg = tmp_path / "a"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "handlers.py").write_text("X = 1\n")
    (pkg / "sub" / "a11y.py").write_text("Y = 1\n")
    (pkg / "notes.txt").write_text("not code")
    same, edited, renamed = (shutil.copytree(pkg, tmp_path / n) for n in ("same", "edited", "renamed"))
    (edited / "sub" / "a11y.py").write_text("Y = 2\n")
    (renamed / "sub" / "a11y.py").rename(renamed / "sub" / "b11y.py")
    (same / "notes.txt").write_text("other notes")
    assert source_digest(Path(same)) == source_digest(pkg)
    assert len({source_digest(pkg), source_digest(Path(edited)), source_digest(Path(renamed))}) == 3


def test_the_env_adapters_identity_holds_their_packages_code_digest():
    from envs.osworld.env import OSWorldAdapter
    from envs.webarena.env import WebArenaAdapter

    for cls in (OSWorldAdapter, WebArenaAdapter):
        ident = json.loads(cls().identity())
        package = Path(__import__(cls.__module__, fromlist=["_"]).__file__).parent
        assert ident["code"] == source_digest(package) and len(ident["code"]) == 16
    assert json.loads(OSWorldAdapter().identity())["code"] != json.loads(WebArenaAdapter().identity())["code"]
