"""The in-workspace RPC surface: handlers registered on an executor, JSON in/out, and the site service argv."""
from __future__ import annotations

import base64
import io
import json
import socket
import subprocess
import urllib.request

import pytest
from PIL import Image

from envs.webarena.handlers import register, site_service_argv
from envs.webarena.judge import WorkspaceState, judge
from envs.webarena.tasks import load_oracle, load_task, workspace_task

from .conftest import REPO


class JsonExecutor:
    """The executor contract forkcore provides: ``register(name, fn)``; calls carry JSON keyword arguments."""

    def __init__(self) -> None:
        self.handlers: dict = {}

    def register(self, name: str, fn) -> None:
        if name in self.handlers:
            raise ValueError(f"handler {name!r} registered twice")
        self.handlers[name] = fn

    def call(self, name: str, **kwargs):
        result = self.handlers[name](**json.loads(json.dumps(kwargs)))
        return json.loads(json.dumps(result))  # must be JSON-serialisable


@pytest.mark.browser
def test_reset_step_and_a_judge_outside_round_trip(site):
    site.reset_db()
    ex = JsonExecutor()
    register(ex, base_url=site.base_url)
    assert {"webarena.reset", "webarena.step", "webarena.active_url", "webarena.page_text", "webarena.observe",
            "webarena.close"} <= set(ex.handlers)
    assert "webarena.evaluate" not in ex.handlers, "nothing judges inside a workspace"
    task = load_task(16)
    try:
        obs = ex.call("webarena.reset", task=workspace_task(task), viewport=[1024, 600], headless=True)
        img = Image.open(io.BytesIO(base64.b64decode(obs["screenshot_png"])))
        assert img.size == (1024, 600)
        assert obs["url"] == site.base_url + "/" and obs["open_pages_urls"] == [site.base_url + "/"]
        assert "searchbox 'Search'" in obs["axtree"] and obs["last_action_error"] == ""
        bad = ex.call("webarena.step", action="click [424242]")
        assert "no element" in bad["last_action_error"] and bad["done"] is False
        for action in load_oracle(16):
            res = ex.call("webarena.step", action=action)
            assert res["last_action_error"] == ""
        assert res["done"] is True and res["answer"] == task.eval.reference_answers.exact_match
        state = WorkspaceState(ex.call)
        assert judge(task, res["answer"], state, site.base_url) == 1.0
        assert judge(task, "0", state, site.base_url) == 0.0
        assert ex.call("webarena.active_url") == {"url": ex.call("webarena.observe")["url"]}
        assert "<html" in ex.call("webarena.page_text", url=site.base_url + "/")["text"]
        with pytest.raises(Exception, match="not a page of the site"):
            ex.call("webarena.page_text", url="file:///etc/passwd")
        after = ex.call("webarena.step", action="click [1]")
        assert "episode is over" in after["last_action_error"]
    finally:
        ex.call("webarena.close")


def test_reset_refuses_a_task_with_its_evaluator():
    ex = JsonExecutor()
    register(ex, base_url="http://127.0.0.1:1")
    with pytest.raises(Exception, match="expected what tasks.workspace_task gives"):
        ex.call("webarena.reset", task=load_task(16).to_dict())


def test_step_before_reset_is_a_clear_error():
    ex = JsonExecutor()
    register(ex, base_url="http://127.0.0.1:1")
    with pytest.raises(Exception, match="call webarena.reset"):
        ex.call("webarena.step", action="noop()")


def test_site_service_argv_serves_the_site(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = site_service_argv(tmp_path / "shop.db", port)
    assert argv[1:4] == ["-m", "envs.webarena.site", "--db"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == f"serving http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/") as r:
            assert r.status == 200 and b"One Stop Shop" in r.read()
        assert (tmp_path / "shop.db").exists()
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
