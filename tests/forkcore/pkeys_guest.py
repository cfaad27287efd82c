"""Guest side of tests/forkcore/test_pkeys_guest.py: protection keys across a CRIU fork, on a CPU that has them.

Run inside a host-root qemu guest (kmod.harness.run_hostroot_guest; qemu's `max` CPU has PKU) as
``python tests/forkcore/pkeys_guest.py ZYGOTE_BINARY [--chromium]``. For a workspace as forkcore starts it
and one with ``allow_pkeys=True`` (as before the fix), it starts data/pkey_zygote.c's zygote, has it fork a
"renderer" in the source, snapshots, restores one clone and has the restored zygote fork another; with
``--chromium`` it does the same with Playwright-launched Chromium (forkcore.probe: a new page in the source,
then in the clone). Prints one ``RESULT key=value ...`` line per workspace for the host to judge.
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import os
import sys
import time

os.environ.setdefault("BUNSHIN_RESTORE_TIMEOUT_S", "1200")

from forkcore import ServiceSpec, Workspace, WorkspaceSpec  # noqa: E402
from forkcore.probe import probe_spec  # noqa: E402

ZYGOTE = "/tmp/pkey_zygote"


def keyed_vmas(ws: Workspace) -> int:
    """VMAs of the workspace's processes whose protection key is not 0 (read on the host side)."""
    n = 0
    for pid in ws.pids():
        try:
            with open(f"/proc/{pid}/smaps") as f:
                n += sum(1 for line in f if line.startswith("ProtectionKey:") and line.split()[1] != "0")
        except OSError:
            continue
    return n


def zygote_fork(ws: Workspace, n: int) -> str:
    """Ask the workspace's zygote for renderer `n`; return what it wrote."""
    ws.exec(["sh", "-c", f"kill -USR1 $(cat {ZYGOTE}.pid)"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r = ws.exec(["cat", f"/tmp/pkey-zygote.{n}"])
        if r["returncode"] == 0 and r["stdout"].strip():
            return r["stdout"].strip().replace(" ", "_")
        time.sleep(0.5)
    return "no_answer"


def zygote_scenario(binary: bytes, allow: bool) -> str:
    spec = WorkspaceSpec("pkz", services=(ServiceSpec.make("idle", ["sleep", "100000"]),), allow_pkeys=allow)
    with Workspace.start(spec, timeout=900) as ws:
        ws.call("write_file", path=ZYGOTE, data_b64=base64.b64encode(binary).decode(), mode=0o755)
        ws.exec(["sh", "-c", f"{ZYGOTE} >/dev/null 2>&1 & echo $! > {ZYGOTE}.pid; sleep 0.5"])
        ready = ws.exec(["cat", "/tmp/pkey-zygote.ready"])["stdout"].strip().replace(" ", "_")
        source, source_keyed = zygote_fork(ws, 1), keyed_vmas(ws)
        snap = ws.snapshot()
        try:
            with snap.fork(1, backend="private")[0] as clone:
                result, clone_keyed = zygote_fork(clone, 2), keyed_vmas(clone)
        finally:
            snap.release()
    return (f"RESULT app=zygote allow_pkeys={allow} ready={ready} source={source} clone={result} "
            f"source_keyed_vmas={source_keyed} clone_keyed_vmas={clone_keyed}")


def chromium_scenario(allow: bool) -> str:
    t0 = time.monotonic()
    with Workspace.start(dataclasses.replace(probe_spec("pkc"), allow_pkeys=allow), timeout=900) as ws:
        ws.call("probe.browser_start", html="<p>source</p>", timeout=900)
        source = ws.call("probe.browser_new_page", html="<p>source-page</p>", timeout=900)
        source_keyed, started, pss = keyed_vmas(ws), time.monotonic() - t0, ws.memory().pss >> 20
        snap = ws.snapshot()
        try:
            t1 = time.monotonic()
            with snap.fork(1, backend="private")[0] as clone:
                restore_s = time.monotonic() - t1
                try:
                    clone_page = clone.call("probe.browser_new_page", html="<p>clone-page</p>", timeout=900)
                except Exception as e:  # noqa: BLE001 - "Target crashed" is the failure looked for
                    clone_page = "FAIL:" + "_".join(str(e).split())[:160]
                clone_keyed = keyed_vmas(clone)
        finally:
            snap.release()
    return (f"RESULT app=chromium allow_pkeys={allow} source={source} clone={clone_page} "
            f"source_keyed_vmas={source_keyed} clone_keyed_vmas={clone_keyed} source_pss_mb={pss} "
            f"started_s={started:.0f} dump_s={snap.dump_s:.0f} restore_s={restore_s:.0f} "
            f"total_s={time.monotonic() - t0:.0f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("zygote")
    ap.add_argument("--chromium", action="store_true")
    args = ap.parse_args()
    binary = open(args.zygote, "rb").read()
    for allow in (True, False):
        for scenario in ([lambda a: zygote_scenario(binary, a)] +
                         ([chromium_scenario] if args.chromium else [])):
            try:
                print(scenario(allow), flush=True)
            except Exception as e:  # noqa: BLE001 - reported to the host's judge
                print(f"RESULT error allow_pkeys={allow} {type(e).__name__}: {' '.join(str(e).split())[:400]}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
