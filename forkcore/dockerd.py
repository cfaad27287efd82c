"""A private Docker daemon for tests and benchmarks: its own data root, exec root and socket, no bridge, no
iptables, no IP forwarding, so it changes nothing of the host's network and shares nothing with another
daemon. Started and stopped by its own PID (never a service manager); `remove=True` deletes its files after.

    with PrivateDockerd(Path("/var/tmp/bunshin-dockerd")) as d:
        d.client.images.list()
"""
from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .errors import ForkcoreError

__all__ = ["DockerdError", "PrivateDockerd"]


class DockerdError(ForkcoreError):
    """The private daemon could not start (its log's tail is in the message)."""


class PrivateDockerd:
    """Args:
        root: its data root, socket, config and log live here.
        remove: delete `root` when stopped.
    """

    def __init__(self, root: Path, remove: bool = True) -> None:
        self.root, self.remove = Path(root), remove
        self.socket = self.root / "docker.sock"
        # containerd's sockets live under the exec root: a unix socket path must stay short
        self.exec_root = Path("/run/bunshin/dockerd") / hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:12]
        self.log_path = self.root / "dockerd.log"
        self.proc: subprocess.Popen | None = None
        self._client = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def client(self):
        if self._client is None:
            import docker

            self._client = docker.DockerClient(base_url=self.url, timeout=300)
        return self._client

    def start(self, timeout: float = 90.0) -> "PrivateDockerd":
        exe = shutil.which("dockerd")
        if exe is None:
            raise DockerdError("dockerd is not installed; run scripts/setup.sh (it installs Debian's docker.io)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.exec_root.mkdir(parents=True, exist_ok=True)
        config = self.root / "daemon.json"  # not /etc/docker/daemon.json: nothing of a host daemon's settings
        config.write_text(json.dumps({}))
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [exe, "--data-root", str(self.root / "data"), "--exec-root", str(self.exec_root),
                 "--pidfile", str(self.root / "dockerd.pid"), "-H", self.url, "--config-file", str(config),
                 "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
                 "--userland-proxy=false"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise DockerdError(f"dockerd exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.socket.exists():
                try:
                    self.client.ping()
                    return self
                except Exception:  # noqa: BLE001 - not answering yet
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise DockerdError(f"dockerd did not answer on {self.socket} within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM the daemon (it stops its containers and its containerd), SIGKILL after 30 s; remove its files."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        subprocess.run(["umount", "-R", "-l", str(self.root / "data")], capture_output=True)  # overlay mounts, if any
        shutil.rmtree(self.exec_root, ignore_errors=True)
        if self.remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PrivateDockerd":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
