"""`bunshin bench docker`: an image as containers vs as forkable workspaces, in the same run.

For the stand-in shopping image (nginx + PHP-FPM + MariaDB: envs/webarena/standin_image.py; built and imported
into a private dockerd started here if absent): the time until the site answers after `docker run`
(`--network none`; polled from inside the container's network namespace), after `Workspace.start` of the
image (forkcore.images) and after a fork of a snapshot of a started workspace (repeated, medians); then the
memory of 8 running containers vs 8 forks of one snapshot (PSS summed over their processes, and the host's
MemAvailable drop), after the same settling time.

Writes OUT/docker.json = {"image", "start_s": {"docker_run", "workspace_start", "fork"} (medians),
"start_samples_s", "memory_mb": {"containers", "forks"} ({"pss", "host"}), "ratios", "args"} + OUT/docker.png.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

_POLL = """
import socket, sys, time
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        with socket.create_connection(("127.0.0.1", 80), timeout=1) as s:
            s.sendall(b"GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")  # the product list: PHP + MariaDB
            if s.recv(12).startswith(b"HTTP/1.1 200"):
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.02)
sys.exit(1)
"""


@dataclass
class Args:
    repeats: int = 5
    """starts of each kind (medians reported)"""
    count: int = 8
    """containers and forks kept running for the memory comparison"""
    settle_s: float = 10.0
    """wait before measuring memory (KSM, the ksm backend's merger, works meanwhile)"""
    out: str = "bench-out/docker"


def _wait_in_netns(pid: int) -> None:
    """Until the site at 127.0.0.1:80 of the network namespace of `pid` answers a page."""
    subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-c", _POLL], check=True, timeout=150)


def _container_pid(container) -> int:
    container.reload()
    return int(container.attrs["State"]["Pid"])


def run(a: Args, progress: bool = True) -> dict:
    from envs.webarena.standin_image import ensure_image
    from forkcore import Workspace, accounting
    from forkcore.dockerd import PrivateDockerd
    from forkcore.images import image_spec

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    samples: dict[str, list[float]] = {"docker_run": [], "workspace_start": [], "fork": []}
    memory: dict[str, dict] = {}
    with PrivateDockerd(Path("/var/tmp/bunshin-dockerd-bench")) as d:
        image = ensure_image(d.client, progress)
        spec = image_spec(image, client=d.client)
        bar = tqdm(total=3 * a.repeats + 2 * a.count, desc="bench docker", disable=not progress)
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            c = d.client.containers.run(image, detach=True, network_mode="none")
            try:
                _wait_in_netns(_container_pid(c))
                samples["docker_run"].append(time.perf_counter() - t0)
            finally:
                c.remove(force=True)
            bar.update()
        source = None
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            ws = Workspace.start(spec, timeout=300)
            samples["workspace_start"].append(time.perf_counter() - t0)
            if source is None:
                source = ws
            else:
                ws.destroy()
            bar.update()
        snap = source.snapshot()
        source.destroy()
        try:
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                (clone,) = snap.fork(1)
                _wait_in_netns(clone.init_pid)
                samples["fork"].append(time.perf_counter() - t0)
                clone.destroy()
                bar.update()

            before = accounting.host_memory_used()
            containers = []
            try:
                for _ in range(a.count):
                    containers.append(d.client.containers.run(image, detach=True, network_mode="none"))
                    _wait_in_netns(_container_pid(containers[-1]))
                    bar.update()
                time.sleep(a.settle_s)
                memory["containers"] = {
                    "pss": sum(accounting.tree_memory(_container_pid(c)).pss for c in containers) / 2**20,
                    "host": (accounting.host_memory_used() - before) / 2**20}
            finally:
                for c in containers:
                    c.remove(force=True)
            time.sleep(2)
            before = accounting.host_memory_used()
            clones = []
            try:
                for _ in range(a.count):
                    clones.extend(snap.fork(1))
                    _wait_in_netns(clones[-1].init_pid)
                    bar.update()
                time.sleep(a.settle_s)
                memory["forks"] = {"pss": sum(accounting.tree_memory(c.init_pid).pss for c in clones) / 2**20,
                                   "host": (accounting.host_memory_used() - before) / 2**20,
                                   "backend": clones[0].backend}
            finally:
                for c in clones:
                    c.destroy()
        finally:
            snap.release()
        bar.close()
    start = {k: statistics.median(v) for k, v in samples.items()}
    result = {
        "image": image, "start_s": {k: round(v, 3) for k, v in start.items()},
        "start_samples_s": {k: [round(x, 3) for x in v] for k, v in samples.items()},
        "memory_mb": {k: {m: round(x, 1) if isinstance(x, float) else x for m, x in v.items()}
                      for k, v in memory.items()},
        "ratios": {"docker_run_over_fork": round(start["docker_run"] / start["fork"], 2),
                   "workspace_start_over_fork": round(start["workspace_start"] / start["fork"], 2),
                   "containers_over_forks_pss": round(memory["containers"]["pss"] / memory["forks"]["pss"], 2)},
        "args": asdict(a)}
    (out / "docker.json").write_text(json.dumps(result, indent=1))
    _plot(result, out / "docker.png")
    return result


def _plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names = ["docker_run", "workspace_start", "fork"]
    ax1.bar(["docker run", "workspace start", "fork"], [result["start_s"][n] for n in names],
            color=["tab:gray", "tab:orange", "tab:blue"])
    for i, n in enumerate(names):
        ax1.scatter([i] * len(result["start_samples_s"][n]), result["start_samples_s"][n], color="k", s=8, zorder=3)
    ax1.set_ylabel("seconds until the site answers (median, dots: runs)")
    ax1.set_title("start")
    n = result["args"]["count"]
    kinds = ["containers", "forks"]
    x = range(len(kinds))
    ax2.bar([i - 0.2 for i in x], [result["memory_mb"][k]["pss"] for k in kinds], width=0.4, label="PSS summed")
    ax2.bar([i + 0.2 for i in x], [result["memory_mb"][k]["host"] for k in kinds], width=0.4,
            label="host MemAvailable drop")
    ax2.set_xticks(list(x), [f"{n} containers", f"{n} forks"])
    ax2.set_ylabel("MB")
    ax2.set_title("memory")
    ax2.legend(fontsize=8)
    fig.suptitle(f"{result['image']} (stand-in shop: nginx + PHP-FPM + MariaDB)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
