"""What an agent could find in its workspace: a search of the workspace's files and of its processes' environment,
command line and readable memory for given bytes (the adversarial tests' needles), read from the host as root."""
from __future__ import annotations

import os
from pathlib import Path

#: what an agent's search skips: the kernel's views and the host's read-only binds (system packages)
NOT_SEARCHED = ("proc", "sys", "dev", "usr", "opt/bunshin/venv")


def scan(ws, needles: dict[bytes, str], files: bool = True) -> dict[str, str]:
    """{where: which needle} found in the workspace: its files (seen from its own root; `files`), its processes'
    environ, cmdline and readable memory. Read from the host as root, which sees what root in the workspace
    sees."""
    found: dict[str, str] = {}

    def check(data: bytes, where: str) -> None:
        for needle, what in needles.items():
            if needle in data:
                found[where] = what

    pids = ws.pids()
    root = f"/proc/{pids[0]}/root"
    for dirpath, dirnames, filenames in os.walk(root) if files else ():
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if os.path.normpath(os.path.join(rel, d)) not in NOT_SEARCHED]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                if os.path.stat.S_ISREG(os.fstat(fd).st_mode) and os.fstat(fd).st_size <= 64 * 2**20:
                    with os.fdopen(fd, "rb", closefd=False) as f:
                        check(f.read(), os.path.join("/", rel, name))
            finally:
                os.close(fd)
    for pid in pids:
        for kind in ("environ", "cmdline"):
            try:
                check(Path(f"/proc/{pid}/{kind}").read_bytes(), f"pid {pid} {kind}")
            except OSError:
                pass
        try:
            maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
            with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
                for line in maps:
                    span, perms = line.split()[:2]
                    start, end = (int(x, 16) for x in span.split("-"))
                    if perms[0] != "r" or end - start > 512 * 2**20:
                        continue
                    try:
                        mem.seek(start)
                        check(mem.read(end - start), f"pid {pid} memory {line.split()[-1]}")
                    except (OSError, ValueError, OverflowError):
                        continue
        except OSError:
            pass
    return found
