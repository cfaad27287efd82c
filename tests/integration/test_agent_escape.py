"""Escape attempts made the way an agent makes them: through the envs' own actions (OSWorld's pyautogui
Python, run as root in the desktop; WebArena's `goto`), each checked from the host afterwards.

tests/forkcore/test_escape.py proves each mechanism with a negative control (the same code gets through an
unhardened workspace); here every target of an attempt is first shown to exist and work from the host (the
host's control), so no attempt passes because its target was never there. Nothing here changes the host.
"""
from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import gymnasium as gym
import pytest

import bunshin_gym  # noqa: F401 - registers the envs

pytestmark = [pytest.mark.criu]
REPO = Path(__file__).resolve().parents[2]

#: attempt -> Python run by the agent's action; it writes {"ok": got through, "error": ...} to RESULT
ATTEMPTS = {
    "write the host's /usr": "open('/usr/bunshin-escape', 'w').close()",
    "write the host's venv": f"open({os.path.realpath('/opt/bunshin/venv') + '/bunshin-escape'!r}, 'w').close()",
    "remount /usr read-write with sudo": (
        "r = subprocess.run('echo password | sudo -S -p \"\" mount -o remount,rw /usr', shell=True, capture_output=True, "
        "text=True)\nassert r.returncode == 0, r.stderr"),
    "unshare a user namespace and mount in it": (
        "r = subprocess.run(['unshare', '-Urm', 'mount', '-t', 'tmpfs', 'none', '/mnt'], capture_output=True, "
        "text=True)\nassert r.returncode == 0, r.stderr"),
    "read the project checkout": f"open({str(REPO / 'README.md')!r}).read()",
    "read the host's state dir (other clones' upper dirs)": "os.listdir('/var/lib/bunshin/ws')",
    "signal the host's test process": "os.kill(HOST_PID, 0)",
    "connect to a service on the host's loopback": (
        "socket.create_connection(('127.0.0.1', HOST_PORT), timeout=3).close()"),
}


def _agent_code(name: str, result: str, host_pid: int, host_port: int) -> str:
    body = "\n".join("    " + line for line in ATTEMPTS[name].splitlines())
    return (f"import json, os, socket, subprocess\nHOST_PID, HOST_PORT = {host_pid}, {host_port}\n"
            f"try:\n{body}\n    out = {{'ok': True}}\n"
            f"except BaseException as e:\n    out = {{'ok': False, 'error': f'{{type(e).__name__}}: {{e}}'}}\n"
            f"open({result!r}, 'w').write(json.dumps(out))")


def _oracle_reward(env) -> float:
    env.reset()
    u = env.unwrapped
    reward = 0.0
    for a in u.adapter.oracle_actions(u.task):
        _, reward, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    return reward


@pytest.fixture(scope="module")
def host_service():
    """A TCP server on the host's loopback that counts the connections it accepts (the LLM server's kind)."""
    srv = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def serve():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1], accepted
    srv.close()


def test_the_targets_exist_on_the_host(host_service):
    """The host's control: every target an attempt aims at is there and works from the host."""
    port, accepted = host_service
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    assert "Bunshin Gym" in (REPO / "README.md").read_text() and os.path.isdir("/var/lib/bunshin/ws")
    os.kill(os.getpid(), 0)
    for _ in range(100):
        if accepted:
            break
        threading.Event().wait(0.01)
    assert accepted == [1]
    accepted.clear()


def test_an_agents_python_cannot_escape_its_osworld_desktop(host_service):
    port, accepted = host_service
    env = gym.make("BunshinOSWorld-v0", task_id="os-mkdir-nested", action_space="pyautogui", cache=False)
    try:
        env.reset()
        for i, name in enumerate(ATTEMPTS):
            result = f"/tmp/escape-{i}.json"
            _, _, _, _, info = env.step(_agent_code(name, result, os.getpid(), port))
            assert info["last_action_error"] == "", (name, info["last_action_error"])
            got = json.loads(env.unwrapped.live_workspace().exec(["cat", result])["stdout"])
            assert not got["ok"], f"{name}: got through the workspace"
        ws = env.unwrapped.live_workspace()
        assert ws.exec(["test", "-d", "/proc/1"])["returncode"] == 0  # still usable after every attempt
        # what the host sees afterwards
        assert not os.path.exists("/usr/bunshin-escape")
        assert not os.path.exists(os.path.realpath("/opt/bunshin/venv") + "/bunshin-escape")
        assert accepted == []
        assert _oracle_reward(env) == 1.0  # and the env goes on: the oracle still solves the task
    finally:
        env.close()


def test_a_browsing_agent_cannot_read_host_files_or_reach_host_services(host_service):
    port, accepted = host_service
    env = gym.make("BunshinWebArena-v0", task_id="0", cache=False)
    try:
        env.reset()
        obs, _, _, _, info = env.step(f"goto [file://{REPO / 'README.md'}]")  # no checkout there; file: refused
        assert "only the site's pages" in info["last_action_error"] and "Bunshin Gym" not in obs["axtree"]
        obs, _, _, _, info = env.step(f"goto [http://127.0.0.1:{port}/]")
        assert "only the site's pages" in info["last_action_error"]  # refused before any request
        assert accepted == []  # and its 127.0.0.1 is its own loopback anyway (tests/adversarial: every scheme)
        obs, _, _, _, info = env.step("goto [http://127.0.0.1:7770/]")
        assert info["last_action_error"] == "" and "127.0.0.1:7770" in obs["url"]  # its own site still answers
    finally:
        env.close()


_THREAD_BOMB = """
import json, threading
threading.stack_size(256 << 10)
release, started, error = threading.Event(), [], None
try:
    for _ in range(20000):
        t = threading.Thread(target=release.wait, daemon=True)
        t.start()
        started.append(t)
except RuntimeError as e:
    error = str(e)
release.set()
for t in started:
    t.join()
open('/tmp/bomb.json', 'w').write(json.dumps({'threads': len(started), 'error': error}))
"""

_FILL_ROOT_FS = """
import json, os
mb, error = 0, None
try:
    with open('/srv/fill', 'wb') as f:
        while mb < 4096:
            f.write(b'x' * (16 << 20)); f.flush(); os.fsync(f.fileno()); mb += 16
except OSError as e:
    error = e.errno
os.unlink('/srv/fill')
open('/tmp/fill.json', 'w').write(json.dumps({'mb': mb, 'errno': error}))
"""
# The desktop's user may not write the root filesystem's /srv, but it has sudo (OSWorld's password): so has
# the agent.
_DISK_FILL = f"""
import os, subprocess
open('/tmp/fill.py', 'w').write({_FILL_ROOT_FS!r})
argv = ['python3', '/tmp/fill.py'] if os.geteuid() == 0 else ['sudo', '-S', '-p', '', 'python3', '/tmp/fill.py']
subprocess.run(argv, input='password\\n', text=True, check=True)
"""


def test_an_agents_thread_bomb_and_disk_fill_stop_at_its_desktops_limits():
    """Through the pyautogui action: threads until the workspace's task limit (pids_max) says no, and the
    root filesystem written until its quota (disk_mb, a tmpfs) is full; the host's disk gets none of it (the
    write stopped at the quota of a tmpfs the host mounted; the host's free space is not compared: other
    programs write to that disk) and the env goes on."""
    import errno

    from forkcore import WorkspaceSpec

    limits = WorkspaceSpec(name="defaults")
    env = gym.make("BunshinOSWorld-v0", task_id="os-mkdir-nested", action_space="pyautogui", cache=False)
    try:
        env.reset()
        for code in (_THREAD_BOMB, _DISK_FILL):
            _, _, _, _, info = env.step(code)
            assert info["last_action_error"] == "", info["last_action_error"]
        ws = env.unwrapped.live_workspace()
        bomb = json.loads(ws.exec(["cat", "/tmp/bomb.json"])["stdout"])
        assert bomb["error"] and 0 < bomb["threads"] < limits.pids_max, bomb
        fill = json.loads(ws.exec(["cat", "/tmp/fill.json"])["stdout"])
        assert fill["errno"] == errno.ENOSPC and limits.disk_mb - 512 < fill["mb"] <= limits.disk_mb, fill
        upper = str(ws.dir / "rw")
        mounts = [line.split() for line in open("/proc/self/mountinfo")]
        assert [m[m.index("-") + 1] for m in mounts if m[4] == upper] == ["tmpfs"], upper
        fs = os.statvfs(upper)
        assert fs.f_blocks * fs.f_frsize == limits.disk_mb << 20
        assert _oracle_reward(env) == 1.0
    finally:
        env.close()
