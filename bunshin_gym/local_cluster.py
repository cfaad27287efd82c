"""A contained multi-node Ray cluster on this machine, for tests and `bunshin bench scale`.

Ray's head, even with usage statistics off, probes the cloud-metadata address and a DNS address and posts a
report to a usage-stats host (measured: ../shared/platform/README.md, "Ray"): traffic that must not leave the
machine. So every node runs inside one network namespace made here (only loopback exists in it), with usage
stats off, the report URL pointed at loopback, a HOME holding an empty `ray_bootstrap_config.yaml` and a private
temp dir. Each node is one `ray start --block` process (the head, then workers) with its own ports and its own
BUNSHIN_STATE_DIR / BUNSHIN_SHM_DIR, as separate machines would have. A driver runs inside the namespace too
(`python(...)`, `popen(...)`). `stop()` ends every node by its PID (never `ray stop`, which kills every Ray process on the
machine), kills what is left in the namespace (all of it started here), removes the namespace and runs
`bunshin gc` on each node's state dir.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forkcore.accounting import proc_stat

__all__ = ["LocalCluster"]

HEAD_PORT = 6379


class LocalCluster:
    """`nodes` Ray nodes (a head and nodes-1 workers) in a private network namespace.

    Args:
        nodes: number of nodes (>= 1).
        cpus_per_node: Ray CPUs each node advertises (default: this machine's cores; on one machine the nodes
            share them).
        state_root: where each node's BUNSHIN_STATE_DIR goes (default: $BUNSHIN_STATE_DIR/cluster-PID; must be
            a local disk with overlayfs, like the default state dir).
    """

    def __init__(self, nodes: int = 3, cpus_per_node: int | None = None, state_root: str | None = None,
                 start_timeout_s: float = 120.0) -> None:
        if os.geteuid() != 0:
            raise PermissionError("LocalCluster needs root (it creates a network namespace)")
        for tool in ("ip", "nsenter"):
            if shutil.which(tool) is None:
                raise FileNotFoundError(f"`{tool}` (iproute2, util-linux) is needed for the cluster's network namespace")
        if nodes < 1:
            raise ValueError(f"nodes={nodes}: expected >= 1")
        self.netns = f"bunshin-ray-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        # nsenter, not `ip netns exec`: that also remounts /sys, hiding the cgroup mounts workspaces need
        self._enter = ["nsenter", f"--net=/run/netns/{self.netns}", "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="bunshin-ray-"))
        base_state = Path(state_root or os.environ.get("BUNSHIN_STATE_DIR", "/var/lib/bunshin")) / \
            f"cluster-{os.getpid()}-{self.dir.name[-6:]}"
        self.nodes: list[subprocess.Popen] = []
        self.state_dirs = [base_state / f"node{i}" for i in range(nodes)]
        self.shm_dirs = [Path(os.environ.get("BUNSHIN_SHM_DIR", "/dev/shm/bunshin")) / f"{base_state.name}-node{i}"
                         for i in range(nodes)]
        self.address = f"127.0.0.1:{HEAD_PORT}"
        self.cpus = cpus_per_node or os.cpu_count() or 1
        (self.dir / "home").mkdir()
        (self.dir / "home" / "ray_bootstrap_config.yaml").write_text("")
        (self.dir / "tmp").mkdir()
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        try:
            subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True)
            for i in range(nodes):
                self.nodes.append(self._start_node(i, start_timeout_s))
        except BaseException:
            self.stop()
            raise

    # ---- processes ----------------------------------------------------------------------------------
    def env(self, node: int | None = None) -> dict:
        """The environment of a process in the cluster (a node's, or a driver's with node=None)."""
        env = dict(os.environ, HOME=str(self.dir / "home"), RAY_TMPDIR=str(self.dir / "tmp"),
                   RAY_USAGE_STATS_ENABLED="0", RAY_USAGE_STATS_REPORT_URL="http://127.0.0.1:9/",
                   RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1", RAY_DEDUP_LOGS="0", PYTHONUNBUFFERED="1",
                   BUNSHIN_RAY_NODE_IP="127.0.0.1")  # a driver's address in the cluster (Ray's guess is the host's)
        if node is not None:
            self.state_dirs[node].mkdir(parents=True, exist_ok=True)
            env.update(BUNSHIN_STATE_DIR=str(self.state_dirs[node]), BUNSHIN_SHM_DIR=str(self.shm_dirs[node]))
        return env

    def _start_node(self, i: int, timeout_s: float) -> subprocess.Popen:
        ray = str(Path(sys.executable).with_name("ray"))
        base = 20000 + 1000 * i  # each node its own ports: they share the namespace's one loopback address
        args = [ray, "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", str(self.cpus),
                "--disable-usage-stats", "--node-manager-port", str(base), "--object-manager-port", str(base + 1),
                "--min-worker-port", str(base + 100), "--max-worker-port", str(base + 999),
                "--dashboard-agent-listen-port", str(base + 2), "--dashboard-agent-grpc-port", str(base + 3),
                "--metrics-export-port", str(base + 4), "--runtime-env-agent-port", str(base + 5),
                "--resources", f'{{"bunshin_node_{i}": 1}}']
        if i == 0:
            args += ["--head", "--port", str(HEAD_PORT), "--include-dashboard", "false",
                     "--temp-dir", str(self.dir / "tmp")]
        else:
            args += ["--address", self.address]
        log = open(self.dir / f"node{i}.log", "w")
        proc = subprocess.Popen([*self._enter, *args], env=self.env(i), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"ray node {i} exited ({proc.returncode}):\n{self.log(i)}")
            if "Ray runtime started." in self.log(i):  # printed once the node's raylet has joined
                return proc
            time.sleep(0.3)
        raise TimeoutError(f"ray node {i} did not join within {timeout_s:.0f} s:\n{self.log(i)}")

    def log(self, i: int) -> str:
        return (self.dir / f"node{i}.log").read_text()[-4000:]

    def python(self, args: list[str], timeout: float | None = None, check: bool = True,
               env: dict | None = None) -> subprocess.CompletedProcess:
        """Run this interpreter inside the cluster's namespace (a driver); returns its output."""
        return subprocess.run([*self._enter, sys.executable, *args], env={**self.env(), **(env or {})},
                              capture_output=True, text=True, timeout=timeout, check=check)

    def popen(self, args: list[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
        """Start this interpreter inside the cluster's namespace (a driver) without waiting for it."""
        return subprocess.Popen([*self._enter, sys.executable, *args], env={**self.env(), **(env or {})}, **kwargs)

    def node_pids(self, i: int) -> list[int]:
        """Every process of node i: its `ray start` and all descendants (gcs, raylet, workers, actors)."""
        root = self.nodes[i].pid
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except OSError:
                continue
        return out

    def kill_node(self, i: int) -> None:
        """The node dies: SIGKILL to every process of it (as when a machine goes down)."""
        _kill_all(lambda: self.node_pids(i))

    def _netns_pids(self) -> list[int]:
        """Every process in the cluster's network namespace (all started by this cluster)."""
        try:
            target = os.stat(f"/run/netns/{self.netns}").st_ino
        except OSError:
            return []
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}/ns/net").st_ino == target:
                        out.append(int(entry))
                except OSError:
                    continue
        return out

    def stop(self, grace_s: float = 10.0) -> None:
        """End the nodes by their PIDs, then clean the namespace and state dirs.

        SIGTERM first (`ray start --block` drains its node for up to 30 s, then stops it); whatever of the
        nodes' process trees (workspaces included) is left after `grace_s` gets SIGKILL, as does anything
        left in the namespace: all of it was started here."""
        started = {pid for i in range(len(self.nodes)) for pid in self.node_pids(i)}
        for proc in reversed(self.nodes):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in self.nodes):
            time.sleep(0.2)
        _kill_all(lambda: [p for i in range(len(self.nodes)) for p in self.node_pids(i)]
                  + [p for p in started if os.path.exists(f"/proc/{p}")] + self._netns_pids())
        for proc in self.nodes:
            proc.wait()
        subprocess.run(["ip", "netns", "del", self.netns], check=False, capture_output=True)
        # `bunshin gc` per node: the workspaces of a killed node are gone with their processes, their state is
        # not; a frozen clone resumes only when gc thaws it (to kill it), so sweep until nothing is mounted
        root = self.state_dirs[0].parent if self.state_dirs else None
        for _ in range(5):
            for i, state in enumerate(self.state_dirs):
                if state.exists():
                    subprocess.run([sys.executable, "-m", "bunshin_gym.cli", "gc"], env=self.env(i), check=False,
                                   capture_output=True, timeout=300)
                    shutil.rmtree(state, ignore_errors=True)
                shutil.rmtree(self.shm_dirs[i], ignore_errors=True)
            if root is None or f" {root}/" not in Path("/proc/self/mountinfo").read_text():
                break
            time.sleep(1)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _kill_all(list_pids) -> None:
    """SIGSTOP what `list_pids()` names until the set stops growing (a stopped process cannot fork a child
    that would escape), then SIGKILL all of it."""
    stopped: set[int] = set()
    for _ in range(50):
        new = set(list_pids()) - stopped - {os.getpid()}
        if not new:
            break
        for pid in new:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        stopped |= new
        time.sleep(0.05)
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any((st := proc_stat(p)) and st[1][0] != "Z" for p in stopped):
        time.sleep(0.05)
