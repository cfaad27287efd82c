"""BunshinOSWorld-v0 through gym.make: check_env, oracles across apps, wrong end states, bad actions, fork.

Every env of the module shares the process-wide base snapshot (desktop started once) and one task snapshot
per task, so each test costs a fork plus its actions.
"""
from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

import bunshin_gym  # noqa: F401 - registers the envs

pytestmark = [pytest.mark.criu, pytest.mark.desktop]
ENV_ID = "BunshinOSWorld-v0"


def _make(task_id: str, **kw):
    return gym.make(ENV_ID, task_id=task_id, action_space="pyautogui", **kw)


def _run_oracle(env) -> tuple[float, bool, list[str]]:
    env.reset()
    u = env.unwrapped
    reward, term, errors = 0.0, False, []
    for a in u.adapter.oracle_actions(u.task):
        _, reward, term, trunc, info = env.step(a)
        errors.append(info["last_action_error"])
        if term or trunc:
            break
    return reward, term, errors


def test_check_env_passes_on_the_unwrapped_env():
    from gymnasium.utils.env_checker import check_env

    env = _make("edit-type-unsaved")
    try:
        check_env(env.unwrapped, skip_render_check=True)
        obs, _ = env.reset()
        assert obs["screenshot"].shape == (1080, 1920, 3) and obs["screenshot"].dtype == np.uint8
        assert "mousepad" in obs["accessibility_tree"].lower()
        assert obs["instruction"].startswith("In the open text editor")
        assert obs in env.observation_space
    finally:
        env.close()


@pytest.mark.parametrize("task_id", ["os-mkdir-nested", "edit-append-line", "calc-sum-total"])
def test_oracle_trajectory_earns_reward_one(task_id):
    env = _make(task_id)
    try:
        reward, term, errors = _run_oracle(env)
        assert term and reward == 1.0, errors
        assert not any(errors), errors
    finally:
        env.close()


def test_wrong_end_state_and_fail_score_zero():
    env = _make("os-mkdir-nested")
    try:
        env.reset()
        obs, r, term, _, info = env.step("pyautogui.typewrite('mkdir -p ~/Desktop/projects/beta\\n', interval=0.01); "
                                         "time.sleep(0.6)")
        assert info["last_action_error"] == "" and not term and r == 0.0
        assert "projects/beta" in obs["terminal"]
        _, r, term, _, _ = env.step("DONE")
        assert term and r == 0.0
        env.reset()
        _, r, term, _, _ = env.step("FAIL")  # the task is feasible: declaring it infeasible fails
        assert term and r == 0.0
    finally:
        env.close()


def test_malformed_action_sets_error_and_leaves_the_env_usable():
    env = _make("os-mkdir-nested")
    try:
        obs0, _ = env.reset()
        obs, r, term, trunc, info = env.step("pyautogui.click(")  # not Python
        assert "not valid Python" in info["last_action_error"] and obs["last_action_error"] == info["last_action_error"]
        assert r == 0.0 and not (term or trunc)
        assert obs["accessibility_tree"] == obs0["accessibility_tree"]
        obs, r, term, _, info = env.step("pyautogui.no_such_function()")  # runs and raises
        assert "AttributeError" in info["last_action_error"] and not term
        obs, r, term, _, info = env.step(42)  # not a string
        assert "code string" in info["last_action_error"]
        for a in env.unwrapped.adapter.oracle_actions(env.unwrapped.task):  # still usable: the oracle works
            obs, r, term, _, info = env.step(a)
        assert term and r == 1.0 and info["last_action_error"] == ""
    finally:
        env.close()


def test_fork_clones_continue_from_the_source_state_and_are_isolated():
    env = _make("edit-type-unsaved")
    try:
        env.reset()
        src_obs, *_ = env.step("pyautogui.typewrite('hello bunshin', interval=0.01); time.sleep(0.5)")
        assert "hello bunshin" in src_obs["accessibility_tree"]
        a, b = env.fork(2)
        try:
            # distinct no-ops: the clones share the task's prefix tree, equal actions would be served from it
            oa, *_ = a.step("time.sleep(0.01)")
            ob, *_ = b.step("time.sleep(0.02)")
            for o in (oa, ob):  # the unsaved text typed before the fork is in both clones
                assert "hello bunshin" in o["accessibility_tree"]
                differ = np.any(o["screenshot"] != src_obs["screenshot"], axis=2).mean()
                assert differ < 0.002, f"{differ:.4%} of the screen differs from the source (caret blink at most)"
            oa, *_ = a.step("pyautogui.typewrite(' alpha', interval=0.01); time.sleep(0.5)")
            ob, *_ = b.step("pyautogui.typewrite(' beta', interval=0.01); time.sleep(0.5)")
            assert "hello bunshin alpha" in oa["accessibility_tree"] and "beta" not in oa["accessibility_tree"]
            assert "hello bunshin beta" in ob["accessibility_tree"] and "alpha" not in ob["accessibility_tree"]
            assert np.any(oa["screenshot"] != ob["screenshot"])
            assert a.unwrapped.elapsed_steps == b.unwrapped.elapsed_steps == 3
            os_, *_ = env.step("time.sleep(0.03)")  # the source is untouched by its clones
            assert "hello bunshin" in os_["accessibility_tree"]
            assert "alpha" not in os_["accessibility_tree"] and "beta" not in os_["accessibility_tree"]
            _, r, term, *_ = a.step("DONE")
            assert term and r == 1.0
        finally:
            a.close()
            b.close()
    finally:
        env.close()


def test_computer_13_json_actions():
    env = gym.make(ENV_ID, task_id="edit-type-unsaved", action_space="computer_13")
    try:
        env.reset()
        _, r, term, _, info = env.step('{"action_type": "JUMP"}')
        assert "unknown action_type" in info["last_action_error"] and not term
        obs, r, term, _, info = env.step('{"action_type": "TYPING", "parameters": {"text": "hello bunshin"}}')
        assert info["last_action_error"] == "" and "hello bunshin" in obs["accessibility_tree"]
        _, r, term, _, _ = env.step("DONE")
        assert term and r == 1.0
    finally:
        env.close()


def test_the_desktop_has_osworlds_user_account_with_sudo():
    """OSWorld's VM conventions: `user` (home /home/user) whose password `password` unlocks sudo; an agent's
    pyautogui code can use it (`echo password | sudo -S ...`)."""
    env = _make("edit-type-unsaved")
    try:
        env.reset()
        ws = env.unwrapped.live_workspace()
        assert ws.exec(["getent", "passwd", "user"])["stdout"].startswith("user:x:1000:1000::/home/user:")
        as_user = ["sudo", "-u", "user", "sh", "-c"] if ws.exec(["id", "-u"])["stdout"] == "0\n" else ["sh", "-c"]
        ok = ws.exec(as_user + ["id -un; echo password | sudo -S -k -p '' id -un"])
        assert ok["stdout"] == "user\nroot\n", ok
        bad = ws.exec(as_user + ["echo nope | sudo -S -k -p '' id -un"])
        assert bad["returncode"] != 0 and "incorrect password" in bad["stderr"]
        _, _, _, _, info = env.step("import subprocess; subprocess.run('echo password | sudo -S -k -p \"\" "
                                    "touch /root/made-by-sudo', shell=True, check=True)")
        assert info["last_action_error"] == ""
        ws = env.unwrapped.live_workspace()
        assert os.path.exists(ws.host_path("/root/made-by-sudo"))  # from the host: /root is closed to `user`
    finally:
        env.close()


def test_a_tasks_downloads_are_fetched_on_the_host_and_reach_its_workspace(tmp_path, monkeypatch):
    """The workspace has no network (it cannot reach the host's loopback server): the bytes it gets were
    fetched by the host into the cache and staged into the task's workspace; the evaluator's cloud_file too."""
    import hashlib

    from tests.loopback import LoopbackFiles

    monkeypatch.setenv("BUNSHIN_OSWORLD_CACHE", str(tmp_path / "cache"))
    server = LoopbackFiles()
    served = server.files
    served.update({"/report.txt": b"quarterly report\n", "/expected.txt": b"quarterly report\n", "/other.txt": b"no\n"})
    base = server.base

    def task(expected: str) -> dict:
        return {"id": f"download-{expected[1:-4]}", "instruction": "Nothing to do: the report is downloaded.",
                "config": [{"type": "download", "parameters": {"files": [
                    {"url": base + "/report.txt", "path": "/home/user/Documents/report.txt"}]}}],
                "evaluator": {"func": "compare_text_file",
                              "result": {"type": "vm_file", "path": "/home/user/Documents/report.txt", "dest": "r.txt"},
                              "expected": {"type": "cloud_file", "path": base + expected, "dest": "e.txt"}}}

    env = gym.make(ENV_ID, task_config=task("/expected.txt"), action_space="pyautogui")
    try:
        env.reset()
        ws = env.unwrapped.live_workspace()
        r = ws.exec(["sha256sum", "/home/user/Documents/report.txt"])
        assert r["stdout"].split()[0] == hashlib.sha256(served["/report.txt"]).hexdigest(), r
        assert ws.exec(["python3", "-c", f"import urllib.request; urllib.request.urlopen('{base}/report.txt', "
                                         "timeout=3)"])["returncode"] != 0, "the workspace reached the host's loopback"
        *_, reward, terminated, _, _ = env.step("DONE")
        assert (reward, terminated) == (1.0, True)
        env.reset(options={"task_config": task("/other.txt")})
        *_, reward, _, _, _ = env.step("DONE")
        assert reward == 0.0
    finally:
        env.close()
        server.close()


def test_coverage_run_resets_each_ready_task_and_judges_a_do_nothing_episode(tmp_path):
    """`bunshin osworld coverage --run`'s episode: a real env per task; DONE scores 0, FAIL on an infeasible task
    1, and a task whose reset fails says why."""
    import json

    from envs.osworld.coverage import coverage
    from envs.osworld.tasks import TASKS_DIR

    ex = tmp_path / "examples" / "os"
    ex.mkdir(parents=True)
    task = json.loads((TASKS_DIR / "os-mkdir-nested.json").read_text())
    (ex / "mkdir.json").write_text(json.dumps(task))
    (ex / "infeasible.json").write_text(json.dumps({**task, "id": "infeasible", "evaluator": {"func": "infeasible"}}))
    (ex / "broken.json").write_text(json.dumps({**task, "id": "broken", "config": [
        {"type": "open", "parameters": {"path": "/home/user/no-such-file.txt"}}]}))
    results = {r.id: r for r in coverage(tmp_path / "examples", run=True)}
    assert results["mkdir"].passed[-1] == "runs" and results["infeasible"].passed[-1] == "runs", results
    assert results["broken"].passed[-1] == "files" and "no-such-file.txt" in results["broken"].reason, results


def test_an_execute_steps_stdout_reaches_the_cache_file_getter():
    """OSWorld's postconfig `execute` with "stdout": NAME, read back by the `cache_file` getter."""
    def task(pattern: str) -> dict:
        return {"id": f"cache-file-{pattern}", "instruction": "Nothing to do.", "config": [],
                "evaluator": {"postconfig": [{"type": "execute", "parameters": {
                    "command": ["sh", "-c", "echo hello from $(whoami)"], "stdout": "echo.out"}}],
                    "func": "check_list", "result": {"type": "cache_file", "path": "echo.out"},
                    "expected": {"type": "rule", "rules": {"expect": [pattern]}}}}

    env = gym.make(ENV_ID, task_config=task("^hello from user$"), action_space="pyautogui")
    try:
        env.reset()
        assert env.step("DONE")[1] == 1.0
        env.reset(options={"task_config": task("^bye$")})
        assert env.step("DONE")[1] == 0.0
    finally:
        env.close()


def test_osworlds_chrome_setup_with_its_devtools_port_and_socat_forward_resets():
    """OSWorld's Chrome tasks launch `google-chrome --remote-debugging-port=1337`, forward 9222 to it with socat,
    open tabs and activate "Google Chrome": here Chromium listens on the task's port (the forward then has 9222
    to itself), the tabs open, and the window is found by its Chromium title."""
    site = "http://127.0.0.1:18765/"
    task = {"id": "chrome-socat", "instruction": "Nothing to do.", "config": [
        {"type": "http_server", "parameters": {"directory": "site", "port": 18765}},
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337",
                                                      site + "about.html"]}},
        {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]}},
        {"type": "chrome_open_tabs", "parameters": {"urls_to_open": [site + "contact.html"]}},
        {"type": "activate_window", "parameters": {"window_name": "Google Chrome"}}],
        "evaluator": {"func": "is_expected_tabs", "result": {"type": "open_tabs_info"},
                      "expected": {"type": "rule", "rules": {"type": "url", "urls": [site + "about.html",
                                                                                       site + "contact.html"]}}}}
    env = gym.make(ENV_ID, task_config=task, action_space="pyautogui")
    try:
        env.reset()
        ws = env.unwrapped.live_workspace()
        assert ws.exec(["pgrep", "-f", "remote-debugging-port=1337"])["returncode"] == 0
        assert env.step("DONE")[1] == 1.0
    finally:
        env.close()


def test_gsettings_start_as_osworlds_vm_has_them_and_reset_with_the_episode():
    """OSWorld's "lock the screen automatically" task: off in its VM, so doing nothing scores 0; setting it
    with gsettings scores 1; the next episode starts with it off again."""
    task = {"id": "gsettings-lock", "instruction": "Lock my screen automatically when I leave.", "config": [],
            "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "shell": True,
                                                             "command": "gsettings get org.gnome.desktop.screensaver lock-enabled"},
                          "expected": {"type": "rule", "rules": {"expected": "true\n"}}}}
    turn_on = ("import subprocess; subprocess.run(['gsettings', 'set', 'org.gnome.desktop.screensaver', "
               "'lock-enabled', 'true'], check=True)")
    env = gym.make(ENV_ID, task_config=task, action_space="pyautogui", cache=False)
    try:
        env.reset()
        assert env.step("DONE")[1] == 0.0
        env.reset()
        _, _, _, _, info = env.step(turn_on)
        assert info["last_action_error"] == ""
        assert env.step("DONE")[1] == 1.0
        env.reset()
        assert env.step("DONE")[1] == 0.0
    finally:
        env.close()


def test_the_gimp_config_file_getter_reads_gimps_config_as_check_config_status_judges_it():
    """OSWorld's GIMP tasks judge ~/.config/GIMP/2.10/<file> with check_config_status (a config step writes the
    file GIMP writes when its preferences change)."""
    def task(value: str) -> dict:
        return {"id": f"gimp-config-{value}", "instruction": "Nothing to do.", "config": [
            {"type": "execute", "parameters": {"shell": True, "command":
                "mkdir -p ~/.config/GIMP/2.10 && printf '# gimprc\\n(theme \"Dark\")\\n(show-tips no)\\n' "
                "> ~/.config/GIMP/2.10/gimprc"}}],
            "evaluator": {"func": "check_config_status",
                          "result": {"type": "gimp_config_file", "file_name": "gimprc", "dest": "gimprc"},
                          "expected": {"type": "rule", "rules": {"key": "show-tips", "value": value}}}}

    env = gym.make(ENV_ID, task_config=task("no"), action_space="pyautogui")
    try:
        env.reset()
        assert env.step("DONE")[1] == 1.0
        env.reset(options={"task_config": task("yes")})
        assert env.step("DONE")[1] == 0.0
    finally:
        env.close()


def test_video_files_open_in_totem_until_the_agent_makes_vlc_the_default():
    """OSWorld's "make VLC my default video player" task: Totem is the default in its Ubuntu VM (and here), so
    doing nothing scores 0; xdg-mime making vlc.desktop the default scores 1."""
    task = {"id": "default-player", "instruction": "Make VLC the default video player.", "config": [],
            "evaluator": {"func": "check_include_exclude", "result": {"type": "default_video_player"},
                          "expected": {"type": "rule", "rules": {"include": ["vlc.desktop"]}}}}
    # every video type Totem handles becomes VLC's (what Settings' "Default Applications" does)
    make_default = ("import re, subprocess; t = open('/usr/share/applications/org.gnome.Totem.desktop').read(); "
                    "types = [m for m in re.search(r'^MimeType=(.*)$', t, re.M).group(1).split(';') "
                    "if m.startswith('video/')]; "
                    "subprocess.run(['xdg-mime', 'default', 'vlc.desktop', *types], check=True)")
    env = gym.make(ENV_ID, task_config=task, action_space="pyautogui", cache=False)
    try:
        env.reset()
        assert env.step("DONE")[1] == 0.0
        env.reset()
        assert env.step(make_default)[4]["last_action_error"] == ""
        assert env.step("DONE")[1] == 1.0
    finally:
        env.close()


def test_vlc_launched_as_osworlds_tasks_do_plays_and_keeps_playing_in_a_fork():
    """A VLC task's set-up (launch `vlc FILE`); the vlc_playing_info getter reads VLC's web interface (on in the
    seeded vlcrc, as in OSWorld's VM) and is_vlc_playing judges it, in the source and in a fork."""
    make_wav = ("import wave; w = wave.open('/home/user/Music/tone.wav', 'wb'); w.setnchannels(1); "
                "w.setsampwidth(2); w.setframerate(8000); w.writeframes(bytes(16000 * 60)); w.close()")
    task = {"id": "vlc-playing", "instruction": "Play tone.wav.", "config": [
        {"type": "execute", "parameters": {"command": ["mkdir", "-p", "/home/user/Music"]}},
        {"type": "execute", "parameters": {"command": ["python3", "-c", make_wav]}},
        {"type": "launch", "parameters": {"command": "vlc --loop /home/user/Music/tone.wav"}},
        {"type": "sleep", "parameters": {"seconds": 2}}],
        "evaluator": {"func": "is_vlc_playing", "result": {"type": "vlc_playing_info", "dest": "status.xml"},
                      "expected": {"type": "rule", "rules": {"type": "file_name", "file_name": "tone.wav"}}}}
    env = gym.make(ENV_ID, task_config=task, action_space="pyautogui", cache=False)
    clone = None
    try:
        env.reset()
        clone = env.unwrapped.fork(1)[0]
        assert clone.step("DONE")[1] == 1.0
        assert env.step("DONE")[1] == 1.0
    finally:
        if clone is not None:
            clone.close()
        env.close()
