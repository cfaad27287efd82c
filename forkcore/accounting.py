"""Memory accounting: per-workspace RSS/PSS/USS (from smaps_rollup) and host memory in use."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class TreeMemory:
    """Memory of all processes of one workspace, in bytes."""

    processes: int
    rss: int
    pss: int
    uss: int  #: Private_Clean + Private_Dirty

    @property
    def pss_mb(self) -> float:
        return self.pss / 2**20


def proc_stat(pid: int | str) -> tuple[str, list[str]] | None:
    """A process's command name and the fields of /proc/PID/stat after it (state, ppid, ...: field N of
    proc(5) is ``fields[N - 3]``); None once it is gone. The name may hold spaces and parentheses."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()


def namespace_pids(init_pid: int) -> list[int]:
    """Every host pid in the pid namespace whose PID 1 is `init_pid` (init included)."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return []
    return pids_in_namespace(ns)


def pids_in_namespace(ns: str) -> list[int]:
    """Every host pid whose /proc/PID/ns/pid link reads `ns` (works after the namespace's init died)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                    pids.append(int(entry))
            except OSError:
                continue
    return sorted(pids)


def smaps_rollup(pid: int) -> dict[str, int] | None:
    """A process's /proc/PID/smaps_rollup in bytes (Rss, Pss, Private_Dirty, ...); None once it is gone (or for
    a kernel thread)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = {}
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":"):
                    fields[parts[0][:-1]] = int(parts[1]) * 1024
            return fields
    except (OSError, ValueError):
        return None


def tree_memory(init_pid: int) -> TreeMemory:
    rss = pss = uss = n = 0
    for pid in namespace_pids(init_pid):
        fields = smaps_rollup(pid)
        if fields is None:
            continue  # exited meanwhile, or a kernel thread
        n += 1
        rss += fields.get("Rss", 0)
        pss += fields.get("Pss", 0)
        uss += fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return TreeMemory(n, rss, pss, uss)


def meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            out[key] = int(rest.split()[0]) * 1024
    return out


def host_memory_used(m: dict[str, int] | None = None) -> int:
    """Bytes in use on the host as free(1) counts them: total - free - buffers - reclaimable cache (of `m`, a
    `meminfo()` reading, else now).

    tmpfs/shared memory (Shmem) stays counted as used, so memfile-backed snapshots are not hidden.
    """
    m = m if m is not None else meminfo()
    cache = m.get("Cached", 0) + m.get("SReclaimable", 0) - m.get("Shmem", 0)
    return m["MemTotal"] - m["MemFree"] - m.get("Buffers", 0) - cache
