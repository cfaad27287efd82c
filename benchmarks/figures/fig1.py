"""BunshinRL Fig 1: the share of each environment's memory that is identical in another environment, split into
file cache, heap and shared memory, for envs of different tasks vs envs of one GRPO group at step 0 and 10.

Envs are live BunshinWebArena-v0 envs (Chromium, the shop, its database), restored with the `private` backend
so that no page is shared physically beforehand: what is measured is content. For every process of a
workspace, every resident page (/proc/PID/pagemap) is read (/proc/PID/mem) and hashed; a physical page mapped
by several processes of one env counts once. A page is "file cache" in a file mapping, "shared memory" in a
shared or /dev/shm mapping, "heap" otherwise (anonymous: heap, stacks, JIT). All-zero pages are skipped (the
kernel's zero page, or pages KSM would merge into it).
An env's shareable bytes are its pages whose content some other env of the same set also holds.
"""
from __future__ import annotations

import hashlib
import os
import random
import struct
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
from tqdm import tqdm

import bunshin_gym  # noqa: F401 - registers the envs
from envs.webarena.tasks import task_ids
from forkcore.accounting import namespace_pids

KINDS = ("file cache", "heap", "shared memory")
PAGE = os.sysconf("SC_PAGE_SIZE")
#: read from the paper's bar chart (its text extraction is garbled: these are the totals it shows, approximate)
PAPER = {"across_tasks_pct": 38, "group_step0_pct": 60, "group_step10_pct": 46,
         "source": "BunshinRL §2.2, Figure 1 (totals as extracted from the figure; components not recoverable)"}


@dataclass
class Args:
    envs: int = 4
    """envs per setting (different tasks; one GRPO group)"""
    group_task: str = "0"
    """the GRPO group's task"""
    steps: int = 10
    """steps each group member takes (actions drawn from the adapter's candidates, one seed per member)"""

    @classmethod
    def quick(cls) -> "Args":
        return cls(envs=2, steps=3)


def scale(a: Args) -> str:
    return f"{a.envs} WebArena envs per setting; the group steps {a.steps} times (paper: step 10)"


def _kind(line: str) -> str | None:
    parts = line.split(maxsplit=5)
    perms, path = parts[1], parts[5].strip() if len(parts) > 5 else ""
    if path in ("[vvar]", "[vdso]", "[vsyscall]", "[vvar_vclock]"):
        return None
    if "s" in perms or path.startswith(("/dev/shm", "/memfd:", "/SYSV")):
        return "shared memory"
    if path.startswith("/"):
        return "file cache"
    return "heap"


def env_pages(ws) -> dict[int, tuple[str, bytes]]:
    """{physical frame: (kind, content hash)} of every resident page of the workspace's processes."""
    pages: dict[int, tuple[str, bytes]] = {}
    for pid in namespace_pids(ws.init_pid):
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            pagemap = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
            mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        except OSError:
            continue  # exited meanwhile
        try:
            for line in maps:
                kind = _kind(line)
                if kind is None or "r" not in line.split()[1]:
                    continue
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                n = (end - start) // PAGE
                raw = os.pread(pagemap, 8 * n, 8 * (start // PAGE))
                for i, (entry,) in enumerate(struct.iter_unpack("<Q", raw)):
                    if not entry >> 63 & 1:  # not resident (never touched, or swapped)
                        continue
                    pfn = entry & ((1 << 55) - 1)
                    if pfn in pages:
                        continue
                    try:
                        data = os.pread(mem, PAGE, start + i * PAGE)
                    except OSError:
                        continue  # e.g. a guard page
                    if data.count(0) == PAGE:  # the kernel's zero page, or one KSM would merge into it
                        continue
                    pages[pfn] = (kind, hashlib.blake2b(data, digest_size=16).digest())
        finally:
            os.close(pagemap)
            os.close(mem)
    return pages


def shareable(envs_pages: list[dict[int, tuple[str, bytes]]]) -> dict:
    """Mean over envs of the share of an env's bytes whose content another env holds, by kind."""
    holders: dict[bytes, set[int]] = defaultdict(set)
    for i, pages in enumerate(envs_pages):
        for _, h in pages.values():
            holders[h].add(i)
    per_env = []
    for i, pages in enumerate(envs_pages):
        total, shared = len(pages), defaultdict(int)
        for kind, h in pages.values():
            if len(holders[h] - {i}) > 0:
                shared[kind] += 1
        per_env.append({k: 100 * shared[k] / max(1, total) for k in KINDS} | {"mb": total * PAGE / 2**20})
    mean = {k: round(sum(e[k] for e in per_env) / len(per_env), 1) for k in KINDS}
    return {"pct_by_kind": mean, "total_pct": round(sum(mean.values()), 1),
            "mb_per_env": round(sum(e["mb"] for e in per_env) / len(per_env))}


def _envs(task_ids_: list[str]):
    return [gym.make("BunshinWebArena-v0", task_id=t, cache=False, backend="private") for t in task_ids_]


def run(a: Args, out: Path) -> dict:
    others = [str(t) for t in task_ids() if str(t) != a.group_task]
    tasks = [a.group_task] + random.Random(0).sample(others, a.envs - 1)
    ours = {}
    bar = tqdm(total=3, desc="fig1 settings", unit="setting")
    across = _envs(tasks)
    try:
        for e in across:
            e.reset(seed=0)
        ours["across_tasks"] = shareable([env_pages(e.unwrapped.live_workspace()) for e in across])
    finally:
        for e in across:
            e.close()
    bar.update(1)
    group = _envs([a.group_task] * a.envs)
    try:
        obs = [e.reset(seed=0)[0] for e in group]
        ours["group_step0"] = shareable([env_pages(e.unwrapped.live_workspace()) for e in group])
        bar.update(1)
        for member, e in enumerate(group):
            rng = random.Random(member)
            u = e.unwrapped
            for _ in range(a.steps):
                obs[member], _, term, trunc, _ = e.step(rng.choice(u.adapter.candidate_actions(obs[member])
                                                                   or ["scroll [down]"]))
                if term or trunc:
                    break
        ours[f"group_step{a.steps}"] = shareable([env_pages(e.unwrapped.live_workspace()) for e in group])
    finally:
        for e in group:
            e.close()
    bar.update(1)
    bar.close()
    ours["tasks"] = tasks
    return ours


def vs_paper(ours: dict, paper: dict) -> list[tuple]:
    late = next(k for k in ours if k.startswith("group_step") and k != "group_step0")
    return [("identical across tasks (%)", paper["across_tasks_pct"], ours["across_tasks"]["total_pct"]),
            ("identical in one group at step 0 (%)", paper["group_step0_pct"], ours["group_step0"]["total_pct"]),
            (f"identical in one group at step {late[10:]} (%; paper: step 10)", paper["group_step10_pct"],
             ours[late]["total_pct"])]


def plot(r: dict, plt):
    ours, paper = r["ours"], r["paper"]
    settings = [k for k in ours if k == "across_tasks" or k.startswith("group_step")]
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    bottom = [0.0] * len(settings)
    for kind, color in zip(KINDS, ("tab:green", "tab:orange", "tab:purple")):
        vals = [ours[s]["pct_by_kind"][kind] for s in settings]
        ax.bar(range(len(settings)), vals, bottom=bottom, color=color, label=f"ours: {kind}")
        bottom = [b + v for b, v in zip(bottom, vals)]
    paper_vals = [paper["across_tasks_pct"], paper["group_step0_pct"], paper["group_step10_pct"]]
    ax.scatter(range(len(settings)), paper_vals[:len(settings)], marker="_", s=900, color="tab:red", zorder=3,
               label="paper (total, approximate)")
    ax.set_xticks(range(len(settings)), [s.replace("_", " ") for s in settings])
    ax.set_ylabel("share of an env's memory identical in another env (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Fig 1: shareable memory ({ours[settings[0]]['mb_per_env']} MB per env here)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
