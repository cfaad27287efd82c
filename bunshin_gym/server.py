"""`bunshin serve`: a Bunshin env behind OpenEnv's wire protocol, with fork.

Built on openenv-core's `HTTPEnvServer`: its WebSocket sessions (`/ws`: one env per connection, the session
limit, the idle-session reaper, the reset/step/state/close messages and their error codes) and its `/health`,
`/schema`, `/metadata` and `/mcp` routes, so an unmodified OpenEnv client (`GenericEnvClient(url).sync()`)
drives a Bunshin env. Actions are `{"action": "<the env's action string>"}`; an observation carries the env's
observation keys (screenshots as base64 PNG, text as text) plus `info` (the env's info dict with
`terminated` and `truncated`); `reset` takes `task_id`, `task_config` (a dict), `seed` and `observation`,
this session's observation options (`ObservationOptions`: leave the screenshot out or downscale it, bound each
text), kept until a later reset changes them.

Added on the same FastAPI app (OpenEnv has no fork, and its sessions are not addressable):
    POST   /sessions/{id}/fork         {"n": N} -> {"sessions": [N new session ids]} at the live state
    WS     /sessions/{id}/ws           OpenEnv's session protocol on that (forked) session:
                                       `GenericEnvClient(f"{url}/sessions/{id}")` continues it
    GET    /sessions                   capacity and every session's activity
    GET    /sessions/{id}/diagnostics  prefix-cache, restore, standby and speculation counters
    DELETE /sessions/{id}              end a session
    GET    /bunshin                    env id and settings (`RemoteEnv` builds its adapter from them)
A client learns its own session id from `state()` (`session_id`).

Failures stay in their session: a workspace that crashes mid-step gives the step's error (in `info` or as
an EXECUTION_ERROR answer, as in-process), the session can reset and go on, and other sessions and the server
never notice. Closing a connection ends its session and destroys its workspace; so does idling past
`--idle-timeout`. An ended session refuses any further message with the reason it ended (a reaped session's
connection is closed with that reason too), so nothing can start a workspace outside the session table.

Refusals carry their reason to OpenEnv's client: a connection past `--max-sessions` is accepted and closed at
once with code 1013 (try again later) and the reason (`ConnectionClosed` names it), instead of openenv's
bare 1000; an unknown or busy session at `/sessions/{id}/ws` is refused at the handshake (HTTP 404 / 409 with
the reason in the body).

Why OpenEnv's production mode: its HTTP `/reset`, `/step` and `/state` are stateless (an env is made and
closed per request), which for a workspace would cold-start a browser or desktop per call and lose it; the
stateful protocol is the WebSocket one, which both modes serve.

Auth: every route but `/health` needs `Authorization: Bearer TOKEN` (or HTTP Basic with the token as the
password: OpenEnv's client sends no headers, but the `websockets` library turns `http://user:TOKEN@host`
into Basic auth), unless the server is bound to loopback and started with `--no-auth`.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextvars
import dataclasses
import functools
import hashlib
import hmac
import io
import ipaddress
import json
import threading
from typing import Any

import gymnasium as gym
import numpy as np
from fastapi import FastAPI, HTTPException, WebSocket, WebSocketDisconnect
from gymnasium import spaces
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import (Action, ConcurrencyConfig, EnvironmentMetadata, Observation,
                                           ServerMode, State)
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, SimpleUser
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse

__all__ = ["BunshinAction", "BunshinServer", "ObservationOptions", "ServerProcess", "SessionEnded", "create_app",
           "observation_model", "serve"]

#: the session a `/sessions/{id}/ws` connection continues (None: `/ws` makes a new one)
_ATTACH: contextvars.ContextVar[str | None] = contextvars.ContextVar("bunshin_attach", default=None)
#: the WebSocket a session being created belongs to (its connection is closed with the reason if it is reaped)
_SOCKET: contextvars.ContextVar[WebSocket | None] = contextvars.ContextVar("bunshin_socket", default=None)
MAX_FORK = 64
#: a WebSocket close reason is at most 123 bytes (RFC 6455: 125 minus the code)
_REASON_BYTES = 123


@dataclasses.dataclass(frozen=True)
class ObservationOptions:
    """What one session's observations carry (reset's `observation` argument; the default: everything).

    Attributes:
        screenshot: "png" (base64 PNG, the env's size) or "none" (the key is sent as "": ~190 KB less per
            WebArena step).
        screenshot_scale: with "png", the factor the image is downscaled by first (0 < s <= 1).
        max_text_chars: each text (and each item of a text list) cut to this many characters, saying so at the
            end (`clip_text`); None: as the env gives them.
    """

    screenshot: str = "png"
    screenshot_scale: float = 1.0
    max_text_chars: int | None = None

    @classmethod
    def parse(cls, value: Any) -> ObservationOptions:
        if value is None:
            return cls()
        if not isinstance(value, dict) or set(value) - {"screenshot", "screenshot_scale", "max_text_chars"}:
            raise ValueError(f"reset: observation={value!r}: expected an object with screenshot (\"png\" or "
                             "\"none\"), screenshot_scale (0 < s <= 1), max_text_chars (int >= 64 or null)")
        opts = cls(**value)
        if opts.screenshot not in ("png", "none"):
            raise ValueError(f"reset: observation.screenshot={opts.screenshot!r}: expected \"png\" or \"none\"")
        if not isinstance(opts.screenshot_scale, (int, float)) or not 0 < opts.screenshot_scale <= 1:
            raise ValueError(f"reset: observation.screenshot_scale={opts.screenshot_scale!r}: expected 0 < s <= 1")
        if opts.max_text_chars is not None and (not isinstance(opts.max_text_chars, int)
                                                or opts.max_text_chars < 64):
            raise ValueError(f"reset: observation.max_text_chars={opts.max_text_chars!r}: expected an int >= 64 "
                             "or null")
        return opts

    def apply(self, obs: dict) -> dict:
        """`obs` (a gym observation) shaped by these options, before encoding."""
        from .spaces import clip_text

        out: dict[str, Any] = {}
        for key, value in obs.items():
            if isinstance(value, np.ndarray):
                if self.screenshot == "none":
                    out[key] = None
                elif self.screenshot_scale < 1:
                    h, w = value.shape[:2]
                    size = (max(1, round(w * self.screenshot_scale)), max(1, round(h * self.screenshot_scale)))
                    out[key] = np.asarray(Image.fromarray(value).resize(size, Image.BILINEAR))
                else:
                    out[key] = value
            elif self.max_text_chars is not None and isinstance(value, str):
                out[key] = clip_text(value, self.max_text_chars)
            elif self.max_text_chars is not None and isinstance(value, (tuple, list)):
                out[key] = [clip_text(v, self.max_text_chars) if isinstance(v, str) else v for v in value]
            else:
                out[key] = value
        return out


class BunshinAction(Action):
    """One action of the env, in its own syntax (e.g. `click [12]` on WebArena, pyautogui code on OSWorld)."""

    action: str | None = Field(description="the env's action string; null or text the env cannot parse is a "
                               "malformed action: the step counts, changes nothing and says why in "
                               "last_action_error (the env checks, not the schema: as in-process)",
                               json_schema_extra={"maxLength": 8192, "minLength": 1})


def observation_model(space: spaces.Dict, name: str) -> type[Observation]:
    """The pydantic model of one observation of `space`: image boxes as base64 PNG strings (their shape in the
    schema's `x-shape`), texts with their maximum length, text lists with their maximum count, plus `info`."""
    fields: dict[str, Any] = {}
    for key, sub in space.spaces.items():
        if isinstance(sub, spaces.Box) and sub.dtype == np.uint8 and len(sub.shape) == 3:
            fields[key] = (str, Field(description="PNG, base64", json_schema_extra={
                "contentEncoding": "base64", "contentMediaType": "image/png", "x-shape": list(sub.shape)}))
        elif isinstance(sub, spaces.Text):
            fields[key] = (str, Field(description="text", json_schema_extra={
                "maxLength": sub.max_length, "minLength": sub.min_length}))
        elif isinstance(sub, spaces.Sequence) and isinstance(sub.feature_space, spaces.Text):
            fields[key] = (list[str], Field(description="texts", json_schema_extra={
                "maxItems": getattr(sub, "max_items", None), "x-itemMaxLength": sub.feature_space.max_length}))
        else:
            raise TypeError(f"observation key {key!r}: no wire format for {sub}")
    fields["info"] = (dict[str, Any], Field(default_factory=dict, description="the env's info dict"))
    return create_model(name, __base__=Observation, **fields)


_PNGS: collections.OrderedDict[bytes, str] = collections.OrderedDict()
_PNGS_LOCK = threading.Lock()
_PNGS_KEPT = 64


def png_base64(image: np.ndarray) -> str:
    """An image as base64 PNG; the last 64 are kept by content hash, so a cache hit (the same screenshot
    again) costs a hash (~3 ms for 1280x720) instead of an encode (~40 ms)."""
    image = np.ascontiguousarray(image)
    key = hashlib.blake2b(memoryview(image).cast("B"), digest_size=16).digest() + repr(image.shape).encode()
    with _PNGS_LOCK:
        if key in _PNGS:
            _PNGS.move_to_end(key)
            return _PNGS[key]
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG", compress_level=1)  # level 1: ~5x faster, ~1.3x bigger
    encoded = base64.b64encode(buf.getvalue()).decode("ascii")
    with _PNGS_LOCK:
        _PNGS[key] = encoded
        while len(_PNGS) > _PNGS_KEPT:
            _PNGS.popitem(last=False)
    return encoded


def encode_observation(obs: dict) -> dict:
    """A gym observation as JSON values: uint8 images as base64 PNG, sequences as lists."""
    out: dict[str, Any] = {}
    for key, value in obs.items():
        if value is None:  # left out by the session's ObservationOptions
            out[key] = ""
        elif isinstance(value, np.ndarray):
            out[key] = png_base64(value)
        elif isinstance(value, (tuple, list)):
            out[key] = list(value)
        else:
            out[key] = value
    return out


class SessionEnded(RuntimeError):
    """A message reached a session that has ended (closed, deleted or reaped); the message says which."""


class BunshinSession(Environment):
    """One OpenEnv session: a Bunshin env made at the first reset (or handed over by a fork).

    Once ended (`close()`: the connection closed, `DELETE /sessions/{id}`, the idle reaper, shutdown) it refuses
    every message with `SessionEnded` and never makes an env again: before, a reset on a reaped session's
    still-open connection made a new env outside the session table, never counted, listed or destroyed.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, server: BunshinServer) -> None:
        super().__init__()
        self.server = server
        self.session_id: str | None = None
        self.env: gym.Env | None = None
        self.episode_id: str | None = None
        self.observe = ObservationOptions()
        self.websocket: WebSocket | None = _SOCKET.get()
        self.ended: str | None = None  # why, once ended
        self._lock = threading.Lock()  # ending vs making the env: one of them wins, never both

    def end(self, reason: str) -> None:
        """Refuse every later message with `reason` (the env itself is closed by `close()`)."""
        with self._lock:
            self.ended = self.ended or reason

    def _live_env(self, make: bool) -> gym.Env:
        with self._lock:
            if self.ended:
                raise SessionEnded(self.ended)
            if self.env is None:
                if not make:
                    raise RuntimeError("step before reset: send reset first")
                self.env = gym.make(self.server.env_id, **self.server.env_kwargs)
            return self.env

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | int | None = None,
              task_config: dict | None = None, observation: dict | None = None, **unknown: Any) -> Observation:
        if unknown:
            raise ValueError(f"reset: unknown argument(s) {sorted(unknown)}; reset takes seed, episode_id, "
                             f"task_id, task_config and observation")
        if task_config is not None and not isinstance(task_config, dict):
            raise ValueError("reset: task_config must be a task as a JSON object (a path would read the server's "
                             "files)")
        observe = ObservationOptions.parse(observation) if observation is not None else self.observe
        env = self._live_env(make=True)
        options = {k: v for k, v in (("task_id", task_id), ("task_config", task_config)) if v is not None}
        obs, info = env.reset(seed=seed, options=options or None)
        self.episode_id, self.observe = episode_id, observe
        return self._observation(obs, info, 0.0, False, False)

    def step(self, action: BunshinAction, timeout_s: float | None = None, **_: Any) -> Observation:
        env = self._live_env(make=False)
        if env.unwrapped.episode is not None and env.unwrapped.episode.done:
            raise gym.error.ResetNeeded("the episode has ended (terminated or truncated): send reset first")
        obs, reward, terminated, truncated, info = env.step(action.action)
        return self._observation(obs, info, float(reward), terminated, truncated)

    def _observation(self, obs: dict, info: dict, reward: float | None, terminated: bool,
                     truncated: bool) -> Observation:
        info = {**info, "terminated": bool(terminated), "truncated": bool(truncated)}
        return self.server.observation_cls(**encode_observation(self.observe.apply(obs)), info=_jsonable(info),
                                           reward=reward, done=bool(terminated or truncated))

    @property
    def state(self) -> State:
        base = self.env.unwrapped if self.env is not None else None
        task = base.task if base is not None else None
        return State(episode_id=self.episode_id, step_count=base.elapsed_steps if base is not None else 0,
                     session_id=self.session_id, env_id=self.server.env_id, task_id=task.id if task else None)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self.server.env_id, version="0",
                                   description=f"{self.server.env_id} (Bunshin Gym): forkable web/desktop tasks")

    def close(self) -> None:
        with self._lock:
            self.ended = self.ended or f"session {self.session_id!r} has ended: open a new connection"
            env, self.env = self.env, None
        if env is not None:
            env.close()


def _clip_reason(reason: str) -> str:
    data = reason.encode()
    return reason if len(data) <= _REASON_BYTES else data[:_REASON_BYTES - 3].decode(errors="ignore") + "..."


def _jsonable(value: Any) -> Any:
    """Info values as JSON (numpy scalars and arrays, tuples); anything else as its repr."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else repr(v)))


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int = Field(ge=1, le=MAX_FORK, description="number of new sessions")


class BunshinServer(HTTPEnvServer):
    """openenv's HTTPEnvServer over `BunshinSession`s, with addressable sessions and fork."""

    def __init__(self, env_id: str, env_kwargs: dict, max_sessions: int, idle_timeout_s: float | None) -> None:
        import bunshin_gym  # noqa: F401 - registers the envs

        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        probe = gym.make(env_id, **self.env_kwargs)  # checks the settings now; builds nothing (lazy workspaces)
        try:
            base = probe.unwrapped
            self.adapter_kwargs = dict(base.config.adapter_kwargs)
            self.observation_cls = observation_model(base.observation_space, f"{type(base).__name__}Observation")
        finally:
            probe.close()
        self._attached: set[str] = set()
        super().__init__(functools.partial(BunshinSession, self), BunshinAction, self.observation_cls,
                         concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                              session_timeout=idle_timeout_s))

    def capacity_reason(self) -> str:
        return (f"server at capacity: {self.active_sessions} of {self.max_concurrent_envs} sessions in use "
                f"(close a session, wait, or restart with a larger --max-sessions)")

    async def _create_session(self) -> tuple[str, Environment]:
        sid = _ATTACH.get()
        if sid is None:
            sid, env = await super()._create_session()
            env.session_id = sid
            return sid, env
        async with self._session_lock:  # continue an existing (forked) session
            env = self._sessions.get(sid)
            if env is None:
                raise KeyError(f"no session {sid!r} (it ended, was reaped after idling, or never existed)")
            if sid in self._attached:
                raise RuntimeError(f"session {sid!r} already has a connection")
            self._attached.add(sid)
            env.websocket = _SOCKET.get()
        return sid, env

    async def _destroy_session(self, session_id: str, reason: str | None = None) -> None:
        """End a session: it refuses every later message with the reason, its connection (if any) is closed
        with it, and its env is closed. Called by openenv's idle reaper (no reason: told from idle time)."""
        import time

        self._attached.discard(session_id)
        session = self._sessions.get(session_id)
        info = self._session_info.get(session_id)
        idle_s = time.time() - info.last_activity_at if info is not None else 0.0
        reaped = reason is None and self._session_idle_timeout_s is not None and idle_s > self._session_idle_timeout_s
        if reaped:
            reason = (f"session {session_id!r} was reaped after idling {idle_s:.0f} s (--idle-timeout "
                      f"{self._session_idle_timeout_s:g} s): open a new connection and reset")
        if isinstance(session, BunshinSession):
            session.end(reason or f"session {session_id!r} has ended: open a new connection")
            if reaped and session.websocket is not None:  # its client learns why at its next message
                try:
                    await session.websocket.close(code=4000, reason=_clip_reason(reason))
                except RuntimeError:  # already closing
                    pass
        await super()._destroy_session(session_id)

    def session(self, sid: str) -> BunshinSession:
        env = self._sessions.get(sid)
        if env is None:
            raise HTTPException(404, f"no session {sid!r}")
        return env

    async def fork(self, sid: str, n: int) -> list[str]:
        parent = self.session(sid)
        if parent.env is None or parent.env.unwrapped.episode is None:
            raise HTTPException(409, f"session {sid!r} has no episode to fork: reset it first")
        free = self.max_concurrent_envs - self.active_sessions
        if n > free:
            raise HTTPException(429, f"fork of {n}: only {free} of {self.max_concurrent_envs} sessions are free "
                                     f"(end some, or start the server with a larger --max-sessions)")
        if parent.ended:
            raise HTTPException(410, parent.ended)
        clones = await self._run_in_session_executor(sid, parent.env.fork, n)
        ids: list[str] = []
        try:
            for clone in clones:
                cid, session = await self._create_session()
                session.env = clone
                ids.append(cid)
        except BaseException:
            for clone in clones[len(ids):]:
                clone.close()
            for cid in ids:
                await self._destroy_session(cid)
            raise
        return ids

    def diagnostics(self, sid: str) -> dict:
        from .runtime import runtime

        session = self.session(sid)
        base = session.env.unwrapped if session.env is not None else None
        ep = base.episode if base is not None else None
        out: dict[str, Any] = {"session_id": sid, "env_id": self.env_id, "standby": runtime().standby.stats()}
        if ep is not None:
            ws = ep.workspace
            out.update(task_id=ep.task.id, elapsed_steps=ep.elapsed_steps, restores=dict(ep.restorer.stats),
                       speculation=base.spec_stats, tree=dataclasses.asdict(ep.tree.stats()),
                       workspace={"id": ws.id, "init_pid": ws.init_pid, "backend": ws.backend} if ws else None)
        return _jsonable(out)

    def register_bunshin_routes(self, app: FastAPI) -> None:
        self.register_routes(app, mode=ServerMode.PRODUCTION)
        route = next(r for r in app.router.routes if getattr(r, "path", None) == "/ws")
        app.router.routes.remove(route)
        openenv_ws = route.endpoint

        async def ws_endpoint(websocket: WebSocket) -> None:
            if _ATTACH.get() is None and self.active_sessions >= self.max_concurrent_envs:
                # openenv would send its error and close with 1000 at once; a client that sends first sees only
                # "ConnectionClosedOK 1000 (OK)". A close code and reason reach every client.
                await websocket.accept()
                await websocket.close(code=1013, reason=_clip_reason(self.capacity_reason()))
                return
            token = _SOCKET.set(websocket)
            try:
                await openenv_ws(websocket)
            except WebSocketDisconnect:  # openenv closes a socket its client already closed (uvicorn's
                pass                     # sans-io websockets raise there): the session has ended normally
            finally:
                _SOCKET.reset(token)

        app.add_api_websocket_route("/ws", ws_endpoint)

        async def attach(websocket: WebSocket) -> None:
            sid = websocket.path_params["session_id"]
            if sid not in self._sessions or sid in self._attached:  # refused at the handshake, with the reason
                why = (f"session {sid!r} already has a connection" if sid in self._sessions else
                       f"no session {sid!r} (it ended, was reaped after idling, or never existed)")
                await websocket.send_denial_response(
                    JSONResponse({"detail": why}, status_code=409 if sid in self._sessions else 404))
                return
            token = _ATTACH.set(sid)
            try:
                await ws_endpoint(websocket)
            finally:
                _ATTACH.reset(token)

        app.add_api_websocket_route("/sessions/{session_id}/ws", attach)

        @app.post("/sessions/{session_id}/fork", tags=["Bunshin"])
        async def fork(session_id: str, request: ForkRequest) -> dict:
            """n new sessions in this session's live state (workspace, step count, history)."""
            return {"sessions": await self.fork(session_id, request.n)}

        @app.get("/sessions", tags=["Bunshin"])
        async def sessions() -> dict:
            status = self.get_capacity_status()
            return {"active": status.active_sessions, "max": status.max_sessions,
                    "sessions": [i.model_dump() for i in self._session_info.values()]}

        @app.get("/sessions/{session_id}/diagnostics", tags=["Bunshin"])
        async def diagnostics(session_id: str) -> dict:
            return self.diagnostics(session_id)

        @app.delete("/sessions/{session_id}", tags=["Bunshin"])
        async def end(session_id: str) -> dict:
            self.session(session_id)
            await self._destroy_session(session_id, f"session {session_id!r} was ended by DELETE /sessions")
            return {"ended": session_id}

        @app.get("/bunshin", tags=["Bunshin"])
        async def about() -> dict:
            return {"env_id": self.env_id, "env_kwargs": _jsonable(self.env_kwargs),
                    "adapter_kwargs": _jsonable(self.adapter_kwargs)}


class _TokenAuth(AuthenticationBackend):
    """Bearer token, or HTTP Basic with the token as password; `/health` is open."""

    def __init__(self, token: str) -> None:
        self.token = token.encode()

    async def authenticate(self, conn: HTTPConnection):
        if conn.url.path == "/health":
            return AuthCredentials(), SimpleUser("anonymous")
        scheme, _, value = conn.headers.get("authorization", "").partition(" ")
        given = b""
        if scheme.lower() == "bearer":
            given = value.strip().encode()
        elif scheme.lower() == "basic":
            try:
                given = base64.b64decode(value.strip(), validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                given = b""
        if not given or not hmac.compare_digest(given, self.token):
            raise AuthenticationError("missing or wrong token: send 'Authorization: Bearer TOKEN' (or put the "
                                      "token in the URL as http://bunshin:TOKEN@host:port for OpenEnv's client)")
        return AuthCredentials(["authenticated"]), SimpleUser("client")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_app(env_id: str, env_kwargs: dict | None = None, *, token: str | None = None, host: str = "127.0.0.1",
               max_sessions: int = 8, idle_timeout_s: float | None = 600.0) -> FastAPI:
    """The server's FastAPI app. `token=None` (no auth) is refused unless `host` is a loopback address."""
    if token is None and not is_loopback(host):
        raise ValueError(f"no token for host {host!r}: without auth the server may only listen on loopback "
                         f"(127.0.0.1); set a token (--token-file or $BUNSHIN_SERVE_TOKEN)")
    if max_sessions < 1:
        raise ValueError(f"max_sessions={max_sessions}: expected >= 1")
    server = BunshinServer(env_id, env_kwargs or {}, max_sessions, idle_timeout_s)
    app = FastAPI(title=f"Bunshin Gym: {env_id}", description=__doc__)
    server.register_bunshin_routes(app)
    if token is not None:
        app.add_middleware(AuthenticationMiddleware, backend=_TokenAuth(token),
                           on_error=lambda _conn, exc: JSONResponse({"detail": str(exc)}, status_code=401))
    app.state.bunshin = server

    @app.exception_handler(ValueError)
    async def bad_value(_request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    return app


def serve(env_id: str, env_kwargs: dict | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          token: str | None = None, max_sessions: int = 8, idle_timeout_s: float | None = 600.0,
          announce=print) -> None:
    """Run the server until interrupted (port 0: any free port); `announce` gets the URL once it listens.
    Every session's workspace is destroyed on shutdown."""
    import socket

    import uvicorn

    app = create_app(env_id, env_kwargs, token=token, host=host, max_sessions=max_sessions,
                     idle_timeout_s=idle_timeout_s)
    server: BunshinServer = app.state.bunshin

    async def end_sessions() -> None:
        await asyncio.gather(*(server._destroy_session(s, "the server is shutting down")
                               for s in list(server._sessions)))

    app.router.on_shutdown.append(end_sessions)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))  # bound here so port 0 can be reported before uvicorn starts
    bound = sock.getsockname()[1]
    announce(f"serving {env_id} on http://{host if family == socket.AF_INET else f'[{host}]'}:{bound}")
    config = uvicorn.Config(app, log_level="warning", ws_max_size=64 * 1024 * 1024, timeout_graceful_shutdown=30)
    uvicorn.Server(config).run(sockets=[sock])


class ServerProcess:
    """`bunshin serve` in a child process on a free loopback port, stopped (by its PID) on `stop()`/exit.

    `ServerProcess("webarena", "--no-auth")`: `.url` once it answers `/health`; extra arguments as the CLI's.
    """

    def __init__(self, env: str, *args: str, start_timeout_s: float = 120.0) -> None:
        import re
        import subprocess
        import sys
        import time

        import httpx

        self.proc = subprocess.Popen([sys.executable, "-m", "bunshin_gym.cli", "serve", "--env", env, "--port", "0",
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url, lines, deadline = None, [], time.monotonic() + start_timeout_s
        while self.url is None and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"serving \S+ on (http://\S+)", line)
            self.url = m.group(1) if m else None
        while self.url is not None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"`bunshin serve --env {env}` did not start within {start_timeout_s:.0f} s:\n"
                           + "".join(lines))

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGINT (uvicorn's graceful shutdown: every session's workspace is destroyed); SIGKILL after timeout_s."""
        import signal
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
