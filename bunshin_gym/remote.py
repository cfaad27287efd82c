"""RemoteEnv: a `gym.Env` over a `bunshin serve` server (registered as "BunshinRemote-v0").

It speaks the server's OpenEnv WebSocket protocol through openenv-core's own client (one session per env) and
asks the server for its spaces (`/schema`) and settings (`/bunshin`), so `gym.make_vec`, `BunshinVectorEnv`'s
peers and the SB3 adapter work against a server as against a local env. `fork(n)` forks the server session
and returns n RemoteEnvs continuing the new sessions. `.adapter` is the env's adapter built locally from the
server's settings (candidate actions, prompts, oracles) when the env's package is installed here.
"""
from __future__ import annotations

import base64
import copy
import functools
import io
import urllib.parse
from typing import Any

import gymnasium as gym
import httpx
import numpy as np
from gymnasium import spaces
from PIL import Image

from .env import _mark_reset
from .spaces import any_text, text_list

__all__ = ["RemoteEnv", "RemoteError"]


class RemoteError(gym.error.ResetNeeded):
    """The server refused or failed a request (its message is included); reset() to go on."""


def spaces_from_schema(schema: dict) -> spaces.Dict:
    """The gym observation space described by the server's observation schema (see server.observation_model)."""
    out = {}
    for key, prop in schema["properties"].items():
        if key in ("done", "reward", "metadata", "info"):
            continue
        if "x-shape" in prop:
            out[key] = spaces.Box(0, 255, tuple(prop["x-shape"]), np.uint8)
        elif prop.get("type") == "string":
            out[key] = any_text(prop["maxLength"], prop.get("minLength", 0))
        elif prop.get("type") == "array":
            out[key] = text_list(prop["maxItems"], prop["x-itemMaxLength"])
        else:
            raise ValueError(f"observation key {key!r}: unknown schema {prop}")
    return spaces.Dict(out)


@functools.lru_cache(maxsize=8)
def _decoded_png(encoded: str) -> np.ndarray:
    image = np.asarray(Image.open(io.BytesIO(base64.b64decode(encoded))).convert("RGB"), dtype=np.uint8)
    image.flags.writeable = False  # shared by every observation with this screenshot: callers get copies
    return image


def decode_observation(data: dict, space: spaces.Dict) -> dict:
    obs = {}
    for key, sub in space.spaces.items():
        value = data[key]
        if isinstance(sub, spaces.Box):
            obs[key] = _decoded_png(value).copy()  # the same screenshot again (a cache hit): not decoded again
        elif isinstance(sub, spaces.Sequence):
            obs[key] = tuple(value)
        else:
            obs[key] = value
    return obs


class RemoteEnv(gym.Env):
    """A Bunshin env served by `bunshin serve` at `url`.

    Args:
        url: the server, e.g. "http://127.0.0.1:8000".
        token: its bearer token (default: none, for a loopback server started with --no-auth).
        task_id / task_config: the task of every reset (overridden by reset's options); none: the server's.
        timeout_s: the longest wait for one answer (a reset builds the task's snapshot the first time).
        session: continue this existing server session (a fork's) instead of starting a new one.

    The env's settings (max_steps, backend, cache, ...) are the server's (`bunshin serve --env-arg`).
    Observations, rewards and info are the served env's; info also has `terminated`, `truncated`.
    """

    metadata = {"render_modes": []}

    def __init__(self, url: str, token: str | None = None, task_id: str | int | None = None,
                 task_config: dict | None = None, timeout_s: float = 600.0, session: str | None = None) -> None:
        from openenv.core.generic_client import GenericEnvClient

        self.url, self.token, self.timeout_s = url.rstrip("/"), token, float(timeout_s)
        self._defaults = {k: v for k, v in (("task_id", task_id), ("task_config", task_config)) if v is not None}
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout_s)
        try:
            about = self._get("/bunshin")
            schema = self._get("/schema")
        except BaseException:
            self._http.close()
            raise
        self.env_id, self.adapter_kwargs = about["env_id"], about["adapter_kwargs"]
        self.observation_space = spaces_from_schema(schema["observation"])
        action = schema["action"]["properties"]["action"]
        self.action_space = any_text(action["maxLength"], action.get("minLength", 0))
        ws_base = self.url if session is None else f"{self.url}/sessions/{session}"
        if token:  # OpenEnv's client sends no headers; websockets turns URL credentials into Basic auth
            parts = urllib.parse.urlsplit(ws_base)
            ws_base = parts._replace(netloc=f"bunshin:{urllib.parse.quote(token, safe='')}@{parts.netloc}").geturl()
        self._client = GenericEnvClient(base_url=ws_base, message_timeout_s=self.timeout_s).sync()
        self.session_id = session
        self._last_obs: dict | None = None
        self._adapter = None

    # ---- Gymnasium API -------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        args = {**self._defaults, **{k: v for k, v in (options or {}).items() if k in ("task_id", "task_config")}}
        unknown = set(options or {}) - {"task_id", "task_config"}
        if unknown:
            raise ValueError(f"reset options {sorted(unknown)}: a RemoteEnv takes task_id and task_config")
        if seed is not None:
            args["seed"] = seed
        obs, _, _, _, info = self._result(self._call(self._client.reset, **args))
        if self.session_id is None:
            self.session_id = self._call(self._client.state)["session_id"]
        return obs, info

    def step(self, action: Any):
        if not isinstance(action, str):  # malformed, as in-process: the env says so in last_action_error
            action = None
        return self._result(self._call(self._client.step, {"action": action}))

    def fork(self, n: int = 1) -> list[gym.Env]:
        """n envs continuing new server sessions at this episode's live state; this one goes on unchanged."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"fork(n={n!r}): n must be an int >= 1")
        if self.session_id is None or self._last_obs is None:
            raise gym.error.ResetNeeded("call reset() before fork()")
        r = self._http.post(f"/sessions/{self.session_id}/fork", json={"n": n})
        if r.status_code != 200:
            raise RemoteError(f"fork of session {self.session_id}: HTTP {r.status_code}: {r.text}")
        envs = []
        for sid in r.json()["sessions"]:
            kwargs = dict(url=self.url, token=self.token, timeout_s=self.timeout_s, session=sid, **self._defaults)
            env = gym.make(self.spec, **kwargs) if self.spec is not None else RemoteEnv(**kwargs)
            env.unwrapped._last_obs = copy.deepcopy(self._last_obs)
            _mark_reset(env)
            envs.append(env)
        return envs

    def diagnostics(self) -> dict:
        """The server's cache, restore, standby and speculation counters for this session."""
        return self._get(f"/sessions/{self.session_id}/diagnostics")

    def render(self):
        return None

    def close(self) -> None:
        client, self._client = getattr(self, "_client", None), None
        if client is not None:
            client.close()
        self._http.close()

    @property
    def adapter(self):
        """The env's adapter, built here with the server's settings (needs the env's package installed)."""
        if self._adapter is None:
            from . import adapter_for

            self._adapter = type(adapter_for(self.env_id))(**self.adapter_kwargs)
        return self._adapter

    # ---- helpers ------------------------------------------------------------------------------------
    def _get(self, path: str) -> dict:
        try:
            r = self._http.get(path)
        except httpx.HTTPError as e:
            raise RemoteError(f"{self.url}{path}: {type(e).__name__}: {e} (is `bunshin serve` running there?)") from e
        if r.status_code != 200:
            raise RemoteError(f"{self.url}{path}: HTTP {r.status_code}: {r.text}")
        return r.json()

    def _call(self, fn, *args, **kwargs):
        if self._client is None:
            raise gym.error.ClosedEnvironmentError("the env is closed")
        from websockets.exceptions import ConnectionClosed

        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ConnectionError, TimeoutError, ConnectionClosed) as e:  # "Server error: ...", or
            # the server closed the connection with its reason (capacity, a reaped session)
            raise RemoteError(f"{self.url} session {self.session_id}: {e}") from e

    def _result(self, result):
        data = dict(result.observation)
        info = data.pop("info", {})
        obs = decode_observation(data, self.observation_space)
        self._last_obs = obs
        reward = 0.0 if result.reward is None else float(result.reward)
        return copy.deepcopy(obs), reward, bool(info.get("terminated")), bool(info.get("truncated")), info
