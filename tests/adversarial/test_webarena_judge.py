"""A WebArena agent attacks its reward as a policy would, through the only thing it drives: its browser. It tries
every URL scheme and port that could show it a task file, the judge or the browser's insides, and a site path
that could be made to serve them; then the whole workspace (files, every process's environment, command line and
readable memory) is searched for any task's reference answers. Every attempt is on an episode that does not do
the task and scores 0, and each has a negative control: the same `goto` with the browser's guard off reads a
task's reference answer from a task file, and the same search finds the task files in a leaky code layer (the
judge's files put back, as every workspace had them before the judge moved out) and in a process's memory.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
import pytest

import bunshin_gym  # noqa: F401 - registers the envs
from envs.webarena import browser as browser_module
from envs.webarena.env import SITE_URL
from envs.webarena.tasks import TASKS_DIR, load_task
from forkcore import layers
from forkcore.paths import WS_CODE_DIR
from workspace_scan import scan

pytestmark = [pytest.mark.criu, pytest.mark.browser]
TASK = "16"  # string_match: judged only by the answer, so a do-nothing episode's state cannot score
#: where the task file would lie inside a workspace whose code layer held it (the code layer's root)
TASK_FILE_IN_WORKSPACE = f"file://{WS_CODE_DIR}/envs/webarena/tasks/{TASK}.json"
OFF_SITE_URLS = [
    TASK_FILE_IN_WORKSPACE, "file:///etc/passwd", "file:///proc/self/environ",
    f"view-source:{SITE_URL}/", "chrome://version", "chrome://inspect", "chrome://settings",
    "devtools://devtools/bundled/inspector.html", "about:version",
    "data:text/html,<a href='file:///etc/passwd'>open</a>", "javascript:document.title='owned'",
    "http://127.0.0.1:9222/json", "http://localhost:7770/", "http://127.0.0.1:7771/", "ftp://127.0.0.1/",
]
#: site paths an agent could try to make the site serve a file from outside its own folder
TRAVERSALS = ["/static/../../tasks/16.json", "/static/..%2f..%2ftasks%2f16.json",
              "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/opt/bunshin/code/envs/webarena/tasks/16.json",
              f"/..%2f..%2f..%2f..%2f..%2f..%2f{WS_CODE_DIR.strip('/')}/envs/webarena/judge.py"]
#: bytes only a task config, an oracle or the judge holds (the site's own data holds many answers: they are state)
NEEDLES = {b'"reference_answers"': "a task's eval", b'"required_contents"': "a task's program_html",
           b'"reference_answer_raw_annotation"': "a task's eval", b"_INFEASIBLE_PHRASES": "judge.py"}


@pytest.fixture(scope="module")
def env():
    e = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    e.reset()
    yield e
    e.close()


def _on_site(url: str) -> bool:
    return url == "about:blank" or url.startswith(SITE_URL + "/") or url == SITE_URL


@pytest.mark.parametrize("url", OFF_SITE_URLS)
def test_the_agents_browser_opens_nothing_but_the_site(env, url):
    obs, _, _, _, info = env.step(f"goto [{url}]")
    assert info["last_action_error"], f"goto [{url}] was not refused"
    assert all(_on_site(u) for u in obs["open_pages_urls"]), obs["open_pages_urls"]
    assert "reference_answers" not in obs["axtree"]


@pytest.mark.parametrize("keys", ["Control+u", "F12", "Control+Shift+i", "Control+o", "Control+Shift+j"])
def test_browser_shortcuts_open_no_source_devtools_or_file_tab(env, keys):
    obs, _, _, _, _ = env.step(f"press [{keys}]")
    assert all(_on_site(u) for u in obs["open_pages_urls"]), obs["open_pages_urls"]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_the_site_serves_no_task_file_or_judge(env, path):
    obs, _, _, _, _ = env.step(f"goto [{path}]")
    assert "reference_answers" not in obs["axtree"] and "_INFEASIBLE_PHRASES" not in obs["axtree"]


def test_after_every_attempt_the_episode_still_scores_0_and_nothing_in_the_workspace_holds_a_tasks_gold(env):
    """Runs after the attempts above (same module env): the workspace that tried them is searched whole, then a
    wrong answer is judged."""
    found = scan(env.unwrapped.live_workspace(), NEEDLES)
    assert found == {}, found
    _, reward, terminated, _, _ = env.step("stop [0]")
    assert terminated and reward == 0.0


def test_negative_control_with_the_guard_off_a_file_url_reads_a_tasks_reference_answer(monkeypatch):
    """The same goto, in a browser of this process (where the task files are) with the site checks switched off,
    shows the agent the task's reference answer: the guards are what stop it."""
    session = browser_module.BrowserSession()
    session.start("http://127.0.0.1:9")  # no site is needed to open a file
    try:
        task_file = (TASKS_DIR / f"{TASK}.json").resolve().as_uri()
        assert "only the site's pages" in session.execute(f"goto [{task_file}]")
        # both guards off: the goto check and the context's route (which aborts what is not the site's origin)
        monkeypatch.setattr(browser_module, "on_site", lambda url, base_url: True)
        monkeypatch.setattr(browser_module, "origin", lambda url: ("any", "", None))
        session.new_context(session.base_url)
        assert session.execute(f"goto [{task_file}]") == ""
        reference = load_task(int(TASK)).eval.reference_answers.exact_match
        assert f'"exact_match": "{reference}"' in session.axtree()
    finally:
        session.close()


@pytest.fixture
def leaky_code_layer(monkeypatch):
    """Every workspace's code layer as it was before the judge moved out: nothing excluded (under an adapter
    identity of its own, so this process builds its snapshots afresh with that layer)."""
    from envs.webarena.env import WebArenaAdapter

    identity = WebArenaAdapter.identity
    monkeypatch.setattr(layers, "_excluded", lambda folder: ([], []))
    monkeypatch.setattr(WebArenaAdapter, "identity", lambda self: identity(self) + "|leaky code layer")


def test_negative_control_the_search_finds_task_files_in_a_leaky_workspace_and_a_needle_in_a_process(
        leaky_code_layer):
    e = gym.make("BunshinWebArena-v0", task_id=TASK, cache=False)
    try:
        e.reset()
        ws = e.unwrapped.live_workspace()
        found = scan(ws, NEEDLES)
        assert any(re.search(r"envs/webarena/tasks/\d+\.json$", w) for w in found), found
        assert any(w.endswith("envs/webarena/judge.py") for w in found), found
        proc = ws.exec(["sh", "-c", 'python3 -c "import time; x = \'\\"required_\' + \'contents\\"\'; '
                                    'y = x * 2; time.sleep(60)" >/dev/null 2>&1 & echo started'])
        assert "started" in proc["stdout"]
        found = scan(ws, {b'"required_contents""required_contents"': "built in memory"}, files=False)
        assert any("memory" in w for w in found), found
    finally:
        e.close()


def test_every_task_file_holds_a_needle():
    """So that the search above would find any task's config or oracle-free gold wherever it lay."""
    for f in sorted(TASKS_DIR.glob("*.json")):
        assert b'"reference_answers"' in f.read_bytes() or b'"required_contents"' in f.read_bytes(), f
        assert json.loads(f.read_text())["eval"]
    assert all(n in Path(browser_module.__file__).with_name("judge.py").read_bytes() for n in [b"_INFEASIBLE_PHRASES"])
