"""The server's protocol without workspaces: auth, limits, idle sessions, bad requests (bunshin_gym.server).

A real uvicorn on loopback in this process; nothing here resets an env, so no browser or desktop starts.
"""
from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from openenv.core.generic_client import GenericEnvClient
from websockets.exceptions import ConnectionClosed

from bunshin_gym.remote import RemoteEnv, RemoteError
from bunshin_gym.server import create_app

TOKEN = "t0ken-for-tests"


class LiveServer:
    def __init__(self, **kwargs) -> None:
        self.app = create_app("BunshinWebArena-v0", {"max_steps": 3}, **kwargs)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning"))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def authed():
    s = LiveServer(token=TOKEN, max_sessions=2, idle_timeout_s=1.0)
    yield s
    s.close()


def test_every_route_but_health_needs_the_token(authed):
    url = authed.url
    assert httpx.get(f"{url}/health").status_code == 200
    for path in ("/schema", "/bunshin", "/sessions", "/metadata"):
        r = httpx.get(f"{url}{path}")
        assert r.status_code == 401 and "token" in r.json()["detail"], path
        assert httpx.get(f"{url}{path}", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    with pytest.raises(ConnectionError):  # the WebSocket is refused without the token
        GenericEnvClient(base_url=url).sync().connect()
    # OpenEnv's own client, unmodified: the token as the URL's password (Basic auth)
    client = GenericEnvClient(base_url=url.replace("http://", f"http://bunshin:{TOKEN}@")).sync()
    try:
        state = client.state()
        assert state["step_count"] == 0 and state["session_id"] and state["env_id"] == "BunshinWebArena-v0"
    finally:
        client.close()
    with pytest.raises(RemoteError, match="401"):
        RemoteEnv(url)
    env = RemoteEnv(url, token=TOKEN)  # reads spaces and settings; resets nothing
    try:
        assert env.env_id == "BunshinWebArena-v0"
        assert env.observation_space["screenshot"].shape == (720, 1280, 3)
    finally:
        env.close()


def test_session_limit_idle_timeout_and_bad_requests(authed):
    url, auth = authed.url, {"Authorization": f"Bearer {TOKEN}"}
    base = url.replace("http://", f"http://bunshin:{TOKEN}@")
    a, b = GenericEnvClient(base_url=base).sync(), GenericEnvClient(base_url=base).sync()
    a.state(), b.state()
    third = GenericEnvClient(base_url=base).sync()
    with pytest.raises(ConnectionClosed, match=r"1013.*at capacity: 2 of 2 sessions.*--max-sessions"):
        third.state()
    assert httpx.get(f"{url}/sessions", headers=auth).json()["active"] == 2
    third.close()
    sid = a.state()["session_id"]
    r = httpx.post(f"{url}/sessions/{sid}/fork", json={"n": 1}, headers=auth)
    assert r.status_code == 409 and "reset it first" in r.json()["detail"]
    assert httpx.post(f"{url}/sessions/{sid}/fork", json={"n": "many"}, headers=auth).status_code == 422
    assert httpx.post(f"{url}/sessions/{sid}/fork", content=b"{", headers=auth).status_code == 422
    with pytest.raises(RuntimeError, match="task_config must be a task as a JSON object"):
        a.reset(task_config="/etc/passwd")
    with pytest.raises(ConnectionError, match="HTTP 404"):  # continuing a session that does not exist
        GenericEnvClient(base_url=f"{base}/sessions/nope").sync().connect()
    # both sessions idle past the timeout: the reaper ends them (it looks every 5 s)
    deadline = time.monotonic() + 20
    while httpx.get(f"{url}/sessions", headers=auth).json()["active"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert httpx.get(f"{url}/sessions", headers=auth).json()["active"] == 0
    a.close(), b.close()


def test_no_auth_is_refused_off_loopback():
    with pytest.raises(ValueError, match="only listen on loopback"):
        create_app("BunshinWebArena-v0", token=None, host="0.0.0.0")
    create_app("BunshinWebArena-v0", token=None, host="127.0.0.1")


def test_capacity_refusal_names_its_reason_to_every_client(authed):
    """Past --max-sessions the client learns why, whether it sends before or after the server's close arrives
    (openenv alone closed with a bare `1000 (OK)`), and RemoteEnv says it in its RemoteError."""
    base = authed.url.replace("http://", f"http://bunshin:{TOKEN}@")
    held = [GenericEnvClient(base_url=base).sync() for _ in range(2)]
    try:
        for c in held:
            c.state()
        for pause in (0.0, 0.3):  # send at once, and after the close has arrived
            c = GenericEnvClient(base_url=base).sync()
            c.connect()
            time.sleep(pause)
            with pytest.raises(ConnectionClosed) as refused:
                c.reset(task_id="0")
            assert refused.value.rcvd is not None and refused.value.rcvd.code == 1013
            assert "at capacity: 2 of 2 sessions in use" in refused.value.rcvd.reason
            c.close()
        env = RemoteEnv(authed.url, token=TOKEN)
        try:
            with pytest.raises(RemoteError, match="at capacity"):
                env.reset(options={"task_id": "0"})
        finally:
            env.close()
    finally:
        for c in held:
            c.close()


def test_a_reaped_session_refuses_further_use_and_makes_no_env(authed):
    """The leak: the idle reaper ended a session (closed its env, dropped it from the table), but a reset on
    the same, still-open connection made a new env on the dead session, outside the table: never listed,
    never counted against --max-sessions, never destroyed. Now the session refuses, saying why."""
    from bunshin_gym.server import BunshinSession

    url, auth = authed.url, {"Authorization": f"Bearer {TOKEN}"}
    client = GenericEnvClient(base_url=url.replace("http://", f"http://bunshin:{TOKEN}@")).sync()
    try:
        client.state()
        deadline = time.monotonic() + 20  # idle_timeout_s=1; the reaper looks every 5 s
        while httpx.get(f"{url}/sessions", headers=auth).json()["active"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert httpx.get(f"{url}/sessions", headers=auth).json()["active"] == 0
        # an unknown task id: before the fix this made the env and failed only at loading the task
        with pytest.raises((RuntimeError, ConnectionClosed), match="reaped after idling"):
            client.reset(task_id="999999")
    finally:
        client.close()
    server = authed.app.state.bunshin
    orphans = [o for o in gc.get_objects() if type(o) is BunshinSession and o.server is server
               and o.env is not None and o.session_id not in server._sessions]
    assert orphans == []
