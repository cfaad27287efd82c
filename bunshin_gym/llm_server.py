"""A real local LLM behind an OpenAI-compatible endpoint, for `ChatPolicy` (tests, `bunshin run --policy chat`).

Owns: starting llama-cpp-python's server (`python -m llama_cpp.server`) from its own venv on a free loopback
port with the model that `scripts/install_llm.sh` installs (Gemma 3 270M, Q4_K_M GGUF), waiting until it
answers, and stopping exactly that process (by its PID) on exit. Does not own: installing the server or the
model (`scripts/install_llm.sh`), or the requests (`rollout.ChatPolicy`).

Example:
    >>> with LocalLLMServer() as server:                     # doctest: +SKIP
    ...     policy = ChatPolicy(base_url=server.base_url, temperature=1.0)
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import gymnasium as gym

PREFIX = Path(os.environ.get("BUNSHIN_PREFIX", "/opt/bunshin"))
#: llama-cpp-python[server]'s venv (scripts/install_llm.sh; BUNSHIN_LLM_VENV overrides it there and here)
DEFAULT_VENV = Path(os.environ.get("BUNSHIN_LLM_VENV", PREFIX / "llm-venv"))
#: the GGUF model (scripts/install_llm.sh; BUNSHIN_LLM_MODEL overrides it there and here)
DEFAULT_MODEL = Path(os.environ.get("BUNSHIN_LLM_MODEL", PREFIX / "models" / "gemma-3-270m-q4_k_m.gguf"))
INSTALL_HINT = "run scripts/install_llm.sh (as root; scripts/setup.sh --test calls it)"


class LLMServerError(RuntimeError):
    """The server process exited or did not answer in time; the message carries the tail of its log."""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class LocalLLMServer:
    """llama-cpp-python's OpenAI-compatible server as a context manager.

    Args:
        model: the .gguf file (default: the one scripts/install_llm.sh joins under /opt/bunshin/models).
        venv: the venv holding llama-cpp-python[server] (default /opt/bunshin/llm-venv).
        chat_format: llama-cpp-python's chat template name (`gemma` for the default model).
        n_ctx: context window in tokens (prompt + completion must fit).
        n_threads: CPU threads for generation and prompt processing (default: the CPUs this process may use).
        host: address to listen on (loopback by default); the port is a free one chosen at start.
        startup_timeout_s: seconds to wait for `/v1/models` to answer.

    Attributes (set by `start()` / `__enter__`):
        base_url: ``http://HOST:PORT/v1``, what `ChatPolicy(base_url=...)` takes.
        pid: the server's process id (the only process `stop()` terminates).
        load_s: seconds from spawn until `/v1/models` answered.
        log_path: the server's stdout and stderr (a temporary file, removed by `stop()`).

    Raises:
        gymnasium.error.DependencyNotInstalled: the venv, llama-cpp-python or the model is missing.
        LLMServerError: the server exited during start-up or did not answer within `startup_timeout_s`.
    """

    def __init__(self, model: str | os.PathLike | None = None, venv: str | os.PathLike | None = None, *,
                 chat_format: str = "gemma", n_ctx: int = 4096, n_threads: int | None = None,
                 host: str = "127.0.0.1", startup_timeout_s: float = 120.0) -> None:
        self.model = Path(model) if model is not None else DEFAULT_MODEL
        self.venv = Path(venv) if venv is not None else DEFAULT_VENV
        self.chat_format, self.n_ctx, self.host = chat_format, n_ctx, host
        self.n_threads = n_threads or _cpu_count()
        self.startup_timeout_s = startup_timeout_s
        self.port: int | None = None
        self.base_url: str | None = None
        self.pid: int | None = None
        self.load_s: float | None = None
        self.log_path: Path | None = None
        self._proc: subprocess.Popen | None = None

    # --- checks -----------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise `DependencyNotInstalled` naming what is missing and the install command."""
        python = self.venv / "bin" / "python"
        if not python.is_file():
            raise gym.error.DependencyNotInstalled(
                f"llama-cpp-python's venv is missing: expected {python}, found nothing; {INSTALL_HINT}")
        if not (self.venv / ".bunshin-llama-build").is_file():
            raise gym.error.DependencyNotInstalled(
                f"llama-cpp-python[server] is not (completely) installed in {self.venv}: no build marker; {INSTALL_HINT}")
        if not self.model.is_file():
            raise gym.error.DependencyNotInstalled(f"the model is missing: expected {self.model}; {INSTALL_HINT}")
        with open(self.model, "rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            raise gym.error.DependencyNotInstalled(
                f"{self.model} is not a GGUF file: it starts with {magic!r}, expected b'GGUF'; {INSTALL_HINT}")

    # --- lifecycle --------------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The server's command line (port chosen by `start()`)."""
        return [str(self.venv / "bin" / "python"), "-m", "llama_cpp.server", "--model", str(self.model),
                "--chat_format", self.chat_format, "--host", self.host, "--port", str(self.port),
                "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
                "--n_threads_batch", str(self.n_threads)]

    def start(self) -> "LocalLLMServer":
        """Spawn the server and wait until `/v1/models` answers. Returns self."""
        if self._proc is not None:
            raise LLMServerError(f"already started (pid {self.pid}); stop() it first")
        self.check()
        self.port = _free_port(self.host)
        self.base_url = f"http://{self.host}:{self.port}/v1"
        fd, log = tempfile.mkstemp(prefix="bunshin-llm-", suffix=".log")
        self.log_path = Path(log)
        t0 = time.monotonic()
        with os.fdopen(fd, "wb") as logf:
            self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=logf,
                                          stderr=subprocess.STDOUT)
        self.pid = self._proc.pid
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.load_s = time.monotonic() - t0
        return self

    def _wait_ready(self, t0: float) -> None:
        url = f"{self.base_url}/models"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise LLMServerError(f"llama_cpp.server exited with code {code} during start-up "
                                     f"(command: {' '.join(self.command())}); its log ends:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() - t0 > self.startup_timeout_s:
                raise LLMServerError(f"llama_cpp.server (pid {self.pid}) did not answer {url} within "
                                     f"{self.startup_timeout_s:.0f} s; its log ends:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the process `start()` spawned (SIGTERM, then SIGKILL after `timeout_s`), reap it and
        remove its log (a failed start has already put the log's tail into its error)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def log_tail(self, chars: int = 4000) -> str:
        """The last `chars` characters of the server's log."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-chars:].decode("utf-8", "replace")

    def __enter__(self) -> "LocalLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
