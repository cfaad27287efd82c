"""OSWorld downloads on the host (envs/osworld/downloads.py) from a loopback HTTP server the test runs: the cache
by content, retries, limits, offline mode, damaged entries, `bunshin osworld fetch`, and the task identity."""
from __future__ import annotations

import hashlib
import json

import pytest

from envs.osworld import downloads
from envs.osworld.downloads import DownloadError, fetch, resolve_task, task_urls
from tests.loopback import LoopbackFiles


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("BUNSHIN_OSWORLD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BUNSHIN_OSWORLD_OFFLINE", raising=False)
    monkeypatch.setattr(downloads.time, "sleep", lambda s: None)  # retries' backoff
    f = LoopbackFiles()
    yield f
    f.close()


def task(*urls, expected=None) -> dict:
    return {"id": "t", "instruction": "x", "config": [
        {"type": "download", "parameters": {"files": [{"url": u, "path": f"/home/user/{i}"} for i, u in enumerate(urls)]}},
        {"type": "download", "parameters": {"files": [{"url": downloads.SHIPPED_URL + "greeting.txt", "path": "/tmp/g"}]}}],
        "evaluator": {"func": ["compare_text_file", "infeasible"],
                      "result": [{"type": "vm_file", "path": "/home/user/0", "dest": "0"}, None],
                      "expected": [{"type": "cloud_file", "path": expected, "dest": "e"} if expected else None, None],
                      "postconfig": [{"type": "download", "parameters": {"files": [{"url": urls[0], "path": "/p"}]}}]}}


def test_a_download_lands_in_the_cache_by_content_and_is_served_from_it_after(files):
    files.files["/a.xlsx"] = b"spreadsheet bytes"
    d = fetch(files.base + "/a.xlsx")
    assert d.sha256 == hashlib.sha256(b"spreadsheet bytes").hexdigest() and d.path.read_bytes() == b"spreadsheet bytes"
    assert d.path.name == d.sha256 and d.size == 17
    files.close()  # the server is gone: the cache answers
    assert fetch(files.base + "/a.xlsx") == d


def test_transient_failures_are_retried_and_permanent_ones_say_what_to_do(files):
    files.files["/flaky"] = b"ok"
    files.fail["/flaky"] = 2
    assert fetch(files.base + "/flaky").path.read_bytes() == b"ok" and files.hits["/flaky"] == 3
    files.fail["/down"] = 10
    with pytest.raises(DownloadError, match=r"after 2 attempts \(HTTP 503\).*bunshin osworld fetch"):
        fetch(files.base + "/down", retries=1)
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch(files.base + "/missing")
    assert not list((downloads.cache_dir() / "files").glob(".partial-*")), "a failed download left a partial file"


def test_a_file_over_the_size_limit_is_refused(files, monkeypatch):
    files.files["/big"] = b"x" * 3 * 2**20
    monkeypatch.setenv("BUNSHIN_OSWORLD_MAX_MB", "1")
    with pytest.raises(DownloadError, match="exceeds the limit of 1 MB"):
        fetch(files.base + "/big")
    assert downloads.cached(files.base + "/big") is None


def test_offline_mode_reads_only_the_cache(files, monkeypatch):
    files.files["/here"] = b"cached before"
    fetch(files.base + "/here")
    files.files["/new"] = b"never fetched"
    monkeypatch.setenv("BUNSHIN_OSWORLD_OFFLINE", "1")
    assert fetch(files.base + "/here").path.read_bytes() == b"cached before"
    with pytest.raises(DownloadError, match=r"/new is not in the download cache .* and BUNSHIN_OSWORLD_OFFLINE is set"):
        fetch(files.base + "/new")
    assert "/new" not in files.hits


def test_a_damaged_cache_entry_is_never_served(files, monkeypatch):
    files.files["/doc"] = b"the real bytes"
    d = fetch(files.base + "/doc")
    d.path.chmod(0o644)
    d.path.write_bytes(b"the damaged ones")  # same URL record, other bytes
    monkeypatch.setenv("BUNSHIN_OSWORLD_OFFLINE", "1")
    with pytest.raises(DownloadError, match="not in the download cache"):
        fetch(files.base + "/doc")
    monkeypatch.delenv("BUNSHIN_OSWORLD_OFFLINE")
    assert fetch(files.base + "/doc").path.read_bytes() == b"the real bytes"  # fetched again


def test_a_tasks_urls_are_its_downloads_and_url_getters_and_not_the_shipped_files(files):
    t = task(files.base + "/a", files.base + "/b", expected=files.base + "/e")
    assert task_urls(t) == [files.base + "/a", files.base + "/b", files.base + "/e"]
    files.files.update({"/a": b"A", "/b": b"B", "/e": b"E"})
    assert {u: d.path.read_bytes() for u, d in resolve_task(t).items()} == {
        files.base + "/a": b"A", files.base + "/b": b"B", files.base + "/e": b"E"}


def test_the_downloaded_bytes_are_part_of_the_tasks_identity(files, tmp_path, monkeypatch):
    from envs.osworld.env import OSWorldAdapter

    files.files.update({"/in.txt": b"one", "/exp.txt": b"expected"})
    adapter = OSWorldAdapter()
    cfg = task(files.base + "/in.txt", expected=files.base + "/exp.txt")
    first = adapter.load_task(task_config=cfg)
    assert set(first.config["bunshin_downloads"]) == {files.base + "/in.txt", files.base + "/exp.txt"}
    staged = adapter.host_files(first)
    # only what the task gives the agent enters its workspace; the expected file stays with the judge
    assert sorted(p.read_bytes() for p in staged.values()) == [b"one"]
    assert all(k.startswith(downloads.STAGING_DIR + "/") for k in staged)
    from envs.osworld.tasks import downloaded_file
    assert downloaded_file(files.base + "/exp.txt", first.config["bunshin_downloads"]).read_bytes() == b"expected"
    # the same URL with other bytes (a new cache): another task digest, so no snapshot or cached step is shared
    monkeypatch.setenv("BUNSHIN_OSWORLD_CACHE", str(tmp_path / "other-cache"))
    files.files["/in.txt"] = b"two"
    assert adapter.load_task(task_config=cfg).digest != first.digest
    # a task whose file is neither reachable nor cached fails to load, naming the URL
    with pytest.raises(ValueError, match=r"cannot download http://127\.0\.0\.1:\d+/gone: HTTP 404"):
        adapter.load_task(task_config=task(files.base + "/gone"))


def test_bunshin_osworld_fetch_fills_the_cache_for_a_folder_of_tasks(files, tmp_path):
    from typer.testing import CliRunner

    from envs.osworld.cli import app

    ex = tmp_path / "examples" / "os"
    ex.mkdir(parents=True)
    files.files.update({"/a": b"A", "/e": b"E"})
    (ex / "1.json").write_text(json.dumps(task(files.base + "/a", expected=files.base + "/e")))
    (ex / "2.json").write_text(json.dumps(task(files.base + "/gone")))
    (tmp_path / "examples" / "test_all.json").write_text(json.dumps({"os": ["1", "2"]}))  # not a task
    r = CliRunner().invoke(app, ["fetch", "--examples", str(tmp_path / "examples")])
    assert r.exit_code == 1, r.output
    assert "3 URLs" in r.output and "2 fetched, 1 failed" in r.output and "/gone" in r.output
    assert downloads.cached(files.base + "/a").path.read_bytes() == b"A"
    files.files["/gone"] = b"back"
    r = CliRunner().invoke(app, ["fetch", "--examples", str(tmp_path / "examples")])
    assert r.exit_code == 0 and "2 already cached, 1 fetched, 0 failed" in r.output, r.output
