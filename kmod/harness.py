"""VM test harness for the bunshin_cow kernel module (kmod/).

Owns: building kmod/bunshin_cow.ko against an installed Debian kernel's headers
(kbuild), building the static guest programs in kmod/tests/*.c, packing a cpio
(newc) initramfs with busybox-static, booting that kernel under
``qemu-system-x86_64 -accel tcg``, running the guest tests and judging the serial
console.  Does not own: the module's userspace use in forkcore (a backend that
opens /dev/bunshin_cow on a real machine) -- nothing here runs on the host kernel.

Stdlib only.  Usage::

    python -m kmod.harness                # build, boot, test; exit 0 on success
    python -m kmod.harness --out /tmp/x   # keep console log + result.json there

A run passes when every guest check printed PASS, no FAIL / BUG / WARNING /
"Bad rss-counter" / Oops / panic line appeared (console or guest dmesg), every
test program printed its SUMMARY, the guest reached the end, and the negative
control (module loaded with skip_clear_exclusive=1) detected the leak.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = [
    "HarnessError",
    "Kernel",
    "Result",
    "GuestRun",
    "find_kernel",
    "build_module",
    "build_programs",
    "write_initramfs",
    "boot_guest",
    "run_guest",
    "run_tests",
    "run_forkcore_guest_test",
    "main",
]

KMOD_DIR = Path(__file__).resolve().parent
DEFAULT_BUILD_DIR = KMOD_DIR / "build"  # git-ignored (kmod/.gitignore)

# kernel modules copied into the initramfs, in load order (zram swap for the pressure tests)
GUEST_MODULES = ("kernel/mm/zsmalloc.ko", "kernel/drivers/block/zram/zram.ko")

# console lines that fail a run wherever they appear
BAD_LINE = re.compile(
    r"^FAIL\b|\bBUG[: ]|WARNING:|Bad rss-counter|Oops|Kernel panic|general protection fault"
    r"|Call Trace:|bunshin_cow: (?!module verification).*failed:"
)


class HarnessError(RuntimeError):
    """A prerequisite is missing or a build failed; the message says how to fix it."""


@dataclasses.dataclass(frozen=True)
class Kernel:
    """An installed kernel that can be booted and built against."""

    version: str
    """e.g. ``6.1.0-57-amd64`` (a directory of /lib/modules)."""
    vmlinuz: Path
    """the bootable image, /boot/vmlinuz-<version>."""
    build_dir: Path
    """kbuild directory, /lib/modules/<version>/build."""
    modules_dir: Path
    """/lib/modules/<version>."""


@dataclasses.dataclass
class GuestRun:
    """One qemu boot: what the serial console said."""

    console: str
    """full serial console text (\\r stripped)."""
    returncode: int | None
    """qemu's exit status (None when killed on timeout)."""
    timed_out: bool
    """the guest did not power off within the timeout."""
    seconds: float
    """wall time of the boot."""


@dataclasses.dataclass
class Result:
    """Outcome of :func:`run_tests`."""

    passed: bool
    """every check passed, the guest finished cleanly and the negative control failed as expected."""
    checks: list[tuple[str, str, str]]
    """(name, "PASS" | "FAIL", detail) per guest check, in order."""
    problems: list[str]
    """why ``passed`` is False: FAIL lines, kernel BUG/WARN lines, missing summaries, timeout."""
    negative_control: str
    """"detected" (leak seen with skip_clear_exclusive=1, as expected), "missed" or "missing"."""
    summary: list[str]
    """SUMMARY / INFO / NEGCTL lines printed by the guest."""
    kernel: str
    """kernel version that was booted."""
    seconds: float
    """wall time of the whole run (build + boot)."""
    console_path: str | None = None
    """where the console log was written (when out_dir was given)."""
    console: str = dataclasses.field(default="", repr=False)
    """full console text."""

    def report(self) -> str:
        """Human-readable report: checks, summary lines, verdict."""
        lines = [f"kernel {self.kernel}, {self.seconds:.1f} s"]
        lines += [f"{st} {name} {detail}".rstrip() for name, st, detail in self.checks]
        lines += self.summary
        nc = {
            "detected": "negative control: detected leak as expected",
            "missed": "negative control: leak NOT detected (the test would miss the bug)",
            "missing": "negative control: did not run",
        }.get(self.negative_control)
        if nc:  # "n/a" for runs without a negative control (the forkcore guest test)
            lines.append(nc)
        lines += [f"PROBLEM {p}" for p in self.problems]
        lines.append("RESULT " + ("PASS" if self.passed else "FAIL"))
        return "\n".join(lines)


# ---------------------------------------------------------------- prerequisites


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise HarnessError(
            f"{tool} not found on PATH; expected it to build/boot the guest. "
            f"Fix: apt-get install {package}"
        )
    return path


def find_kernel(version: str | None = None) -> Kernel:
    """The newest installed kernel with both /boot/vmlinuz-<v> and /lib/modules/<v>/build.

    Not the host's ``uname -r``: the host kernel may have no module support; the module
    is built for and tested in the installed Debian kernel under qemu.
    """
    candidates = [version] if version else sorted(
        os.listdir("/lib/modules") if os.path.isdir("/lib/modules") else [],
        key=lambda v: [int(x) if x.isdigit() else x for x in re.split(r"[.-]", v)],
    )
    found = []
    for v in candidates:
        vmlinuz = Path(f"/boot/vmlinuz-{v}")
        build = Path(f"/lib/modules/{v}/build")
        if vmlinuz.is_file() and (build / "Makefile").is_file():
            found.append(Kernel(v, vmlinuz, build, Path(f"/lib/modules/{v}")))
    if not found:
        what = f"kernel {version}" if version else "a kernel"
        raise HarnessError(
            f"no bootable {what} with headers: need /boot/vmlinuz-<v> and "
            f"/lib/modules/<v>/build/Makefile. Found /boot: "
            f"{sorted(glob.glob('/boot/vmlinuz-*'))}. "
            "Fix: apt-get install linux-image-amd64 linux-headers-amd64"
        )
    k = found[-1]
    if not os.access(k.vmlinuz, os.R_OK):
        raise HarnessError(f"{k.vmlinuz} is not readable; run as root or chmod o+r it")
    return k


def _busybox() -> Path:
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.isfile(p):
            out = subprocess.run(["file", "-L", p], capture_output=True, text=True).stdout \
                if shutil.which("file") else "statically linked"
            if "dynamically" not in out:
                return Path(p)
    raise HarnessError(
        "a statically linked busybox is needed as the guest's shell/init tools. "
        "Fix: apt-get install busybox-static"
    )


# ----------------------------------------------------------------------- build


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise HarnessError(
            f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )


def build_module(kernel: Kernel, build_dir: Path) -> Path:
    """Build bunshin_cow.ko with kbuild in a copy of the sources under build_dir; return its path."""
    _need("make", "make")
    _need("gcc", "gcc")
    src = build_dir / "module"
    src.mkdir(parents=True, exist_ok=True)
    for name in ("bunshin_cow.c", "bunshin_cow.h", "Kbuild"):
        data = (KMOD_DIR / name).read_bytes()
        dst = src / name
        if not dst.exists() or dst.read_bytes() != data:
            dst.write_bytes(data)
    _run(["make", "-C", str(kernel.build_dir), f"M={src}", "modules"],
         f"building bunshin_cow.ko against {kernel.build_dir}")
    ko = src / "bunshin_cow.ko"
    if not ko.is_file():
        raise HarnessError(f"kbuild succeeded but {ko} is missing")
    return ko


def build_programs(build_dir: Path) -> dict[str, Path]:
    """Compile every kmod/tests/*.c statically (gcc -static); return {name: path}."""
    _need("gcc", "gcc")
    out = build_dir / "bin"
    out.mkdir(parents=True, exist_ok=True)
    progs = {}
    for c in sorted((KMOD_DIR / "tests").glob("*.c")):
        exe = out / c.stem
        if not exe.exists() or exe.stat().st_mtime < max(
            c.stat().st_mtime, (KMOD_DIR / "bunshin_cow.h").stat().st_mtime
        ):
            _run(["gcc", "-static", "-O2", "-Wall", "-o", str(exe), str(c)],
                 f"compiling {c.name} (static; needs libc6-dev)")
        progs[c.stem] = exe
    return progs


# ------------------------------------------------------------------- initramfs


def _cpio_entry(name: str, mode: int, data: bytes = b"", ino: int = 0,
                rdev: tuple[int, int] = (0, 0)) -> bytes:
    namez = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(namez), 0]
    hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
    out = hdr + namez
    out += b"\0" * (-len(out) % 4)
    out += data
    out += b"\0" * (-len(out) % 4)
    return out


def write_initramfs(path: Path, files: dict[str, Path | bytes], init_script: str) -> None:
    """Write a cpio (newc) archive: busybox as /bin/*, /dev/console, /init, and ``files``.

    ``files`` maps guest paths ("/cowtest") to host paths or bytes.
    """
    busybox = _busybox()
    entries: list[bytes] = []
    ino = 1

    def add(name, mode, data=b"", rdev=(0, 0)):
        nonlocal ino
        entries.append(_cpio_entry(name, mode, data, ino, rdev))
        ino += 1

    dirs = {"bin", "sbin", "dev", "proc", "sys", "tmp", "lib", "lib/modules", "root"}
    for g in files:
        parts = g.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    for d in sorted(dirs):
        add(d, stat.S_IFDIR | 0o755)
    add("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1))
    add("bin/busybox", stat.S_IFREG | 0o755, busybox.read_bytes())
    add("bin/sh", stat.S_IFLNK | 0o777, b"busybox")
    add("init", stat.S_IFREG | 0o755, init_script.encode())
    for g, src in sorted(files.items()):
        data = src if isinstance(src, bytes) else Path(src).read_bytes()
        add(g.strip("/"), stat.S_IFREG | 0o755, data)
    entries.append(_cpio_entry("TRAILER!!!", 0))
    path.write_bytes(b"".join(entries))


#: First lines of every guest's /init: busybox applets and the kernel's pseudo filesystems.
_INIT_PREAMBLE = """#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
"""


def _insmod_lines(modules: list[str]) -> str:
    """Shell lines loading each module from /lib/modules, printing FAIL insmod_<name> if one fails."""
    return "\n".join(f"insmod /lib/modules/{Path(m).name} || echo 'FAIL insmod_{Path(m).stem}'" for m in modules)


def _init_script(commands: list[str], guest_modules: list[str]) -> str:
    loads = _insmod_lines(guest_modules)
    body = "\n".join(commands)
    return _INIT_PREAMBLE + f"""mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tmpfs tmpfs /tmp
echo "BCOW-GUEST start kernel=$(uname -r) cpus=$(nproc) thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled)"
{loads}
if [ -e /sys/block/zram0 ]; then
  echo 768M > /sys/block/zram0/disksize && mkswap /dev/zram0 >/dev/null && swapon /dev/zram0 \\
    || echo 'INFO zram swap setup failed'
fi
{body}
echo BCOW-DMESG-BEGIN
dmesg
echo BCOW-DMESG-END
echo BCOW-GUEST done
poweroff -f
"""


# ------------------------------------------------------------------------ boot


def boot_guest(kernel: Kernel, initrd: Path, mem_mb: int = 1024, smp: int = 2,
               timeout: float = 300.0) -> GuestRun:
    """Boot ``kernel`` with ``initrd`` under qemu TCG; return the serial console text."""
    qemu = _need("qemu-system-x86_64", "qemu-system-x86")
    cmd = [
        qemu, "-accel", "tcg", "-cpu", "max", "-smp", str(smp), "-m", str(mem_mb),
        "-nic", "none", "-nographic", "-no-reboot", "-kernel", str(kernel.vmlinuz),
        "-initrd", str(initrd),
        "-append", "console=ttyS0 quiet panic=-1 oops=panic",
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        timed_out = True
    text = out.decode("utf-8", "replace").replace("\r", "")
    return GuestRun(text, None if timed_out else proc.returncode, timed_out,
                    time.monotonic() - t0)


def run_guest(commands: list[str], files: dict[str, Path | bytes] | None = None,
              mem_mb: int = 1024, timeout: float = 300.0, build_dir: Path | None = None,
              kernel: Kernel | None = None) -> GuestRun:
    """Build everything, boot a guest that runs ``commands`` (shell lines) and return its console.

    The module is at /bunshin_cow.ko and the programs of kmod/tests/ at /<name> in the guest;
    zram is loaded and used as swap.
    """
    kernel = kernel or find_kernel()
    build_dir = Path(build_dir or DEFAULT_BUILD_DIR)
    build_dir.mkdir(parents=True, exist_ok=True)
    ko = build_module(kernel, build_dir)
    progs = build_programs(build_dir)
    guest_files: dict[str, Path | bytes] = {"/bunshin_cow.ko": ko}
    guest_files.update({f"/{name}": p for name, p in progs.items()})
    mods = []
    for m in GUEST_MODULES:
        host = kernel.modules_dir / m
        for cand in (host, Path(str(host) + ".xz"), Path(str(host) + ".zst")):
            if cand.is_file() and cand.suffix == ".ko":
                guest_files[f"/lib/modules/{cand.name}"] = cand
                mods.append(m)
    guest_files.update(files or {})
    initrd = build_dir / "initramfs.cpio"
    write_initramfs(initrd, guest_files, _init_script(commands, mods))
    return boot_guest(kernel, initrd, mem_mb=mem_mb, timeout=timeout)


# ----------------------------------------------------------------------- tests

TEST_COMMANDS = [
    "insmod /bunshin_cow.ko dyndbg=+p || echo 'FAIL insmod_bunshin_cow'",
    "/cowtest basic",
    "/cowtest multi 256 8",
    "rmmod bunshin_cow && echo 'PASS rmmod' || echo 'FAIL rmmod'",
    "echo 'INFO negative control: reloading with skip_clear_exclusive=1'",
    "insmod /bunshin_cow.ko skip_clear_exclusive=1 || echo 'FAIL insmod_negative_control'",
    "/cowtest leak",
    "rmmod bunshin_cow && echo 'PASS rmmod_negative_control' || echo 'FAIL rmmod_negative_control'",
]
EXPECTED_SUMMARIES = ("basic", "multi", "leak")


def judge(run: GuestRun, kernel: str, seconds: float) -> Result:
    """Turn a guest console into a Result (see module docstring for the rules)."""
    checks: list[tuple[str, str, str]] = []
    problems: list[str] = []
    summary: list[str] = []
    negative = "missing"
    in_dmesg = False
    for line in run.console.splitlines():
        s = line.strip()
        if s == "BCOW-DMESG-BEGIN":
            in_dmesg = True
            continue
        if s == "BCOW-DMESG-END":
            in_dmesg = False
            continue
        m = re.match(r"^(PASS|FAIL) ([^\s:]+):? ?(.*)$", s)
        if m and not in_dmesg:
            checks.append((m.group(2), m.group(1), m.group(3)))
        if s.startswith(("SUMMARY", "INFO", "NEGCTL", "BCOW-GUEST start")):
            summary.append(s)
        if s.startswith("NEGCTL leak_detected"):
            negative = "detected"
        elif s.startswith("NEGCTL"):
            negative = "missed"
        if BAD_LINE.search(s):
            problems.append(("dmesg: " if in_dmesg else "console: ") + s)
    for mode in EXPECTED_SUMMARIES:
        if not any(x.startswith(f"SUMMARY cowtest {mode}:") for x in summary):
            problems.append(f"no SUMMARY from 'cowtest {mode}' (crashed or hung?)")
    if run.timed_out:
        problems.append(f"guest timed out after {run.seconds:.0f} s")
    if "BCOW-GUEST done" not in run.console:
        problems.append("guest did not reach the end of its init script")
    if negative != "detected":
        problems.append(f"negative control {negative}: skip_clear_exclusive=1 must make the "
                        "leak test see the source's post-capture writes")
    return Result(passed=not problems, checks=checks, problems=problems,
                  negative_control=negative, summary=summary, kernel=kernel,
                  seconds=seconds, console=run.console)


def run_tests(out_dir: str | os.PathLike | None = None, timeout: float = 420.0,
              mem_mb: int = 1024, build_dir: str | os.PathLike | None = None,
              kernel_version: str | None = None) -> Result:
    """Build the module and guest programs, boot the guest, run all tests, judge the console.

    out_dir: if given, console.log and result.json are written there.
    Raises HarnessError when qemu, the kernel image/headers, gcc or busybox-static are missing.
    """
    t0 = time.monotonic()
    kernel = find_kernel(kernel_version)
    _need("qemu-system-x86_64", "qemu-system-x86")
    run = run_guest(TEST_COMMANDS, mem_mb=mem_mb, timeout=timeout,
                    build_dir=Path(build_dir) if build_dir else None, kernel=kernel)
    res = judge(run, kernel.version, time.monotonic() - t0)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "console.log").write_text(run.console)
        res.console_path = str(out / "console.log")
        d = dataclasses.asdict(res)
        d.pop("console")
        (out / "result.json").write_text(json.dumps(d, indent=2))
    return res


# ------------------------------------------------- forkcore end to end (host root over 9p)

#: modules loaded in the initramfs, in dependency order, before the host root is mounted over 9p
HOSTROOT_MODULES = (
    "kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio.ko",
    "kernel/drivers/virtio/virtio_pci_modern_dev.ko", "kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
    "kernel/drivers/virtio/virtio_pci.ko", "kernel/fs/netfs/netfs.ko", "kernel/fs/fscache/fscache.ko",
    "kernel/net/9p/9pnet.ko", "kernel/net/9p/9pnet_virtio.ko", "kernel/fs/9p/9p.ko",
    "kernel/fs/overlayfs/overlay.ko",
)
GUEST_STAGE2 = KMOD_DIR / "guest" / "stage2.sh"


def _hostroot_init(stage2: str, stage2_args: list[str], mods: list[str], with_module: bool = True) -> str:
    loads = _insmod_lines(mods)
    args = " ".join(shlex.quote(a) for a in stage2_args)
    insmod = "insmod /bunshin_cow.ko || echo 'FAIL insmod_bunshin_cow'" if with_module else ""
    return _INIT_PREAMBLE + f"""echo "BCOW-GUEST start kernel=$(uname -r) cpus=$(nproc) mem=$(grep MemTotal /proc/meminfo)"
{loads}
{insmod}
mkdir -p /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /newroot \\
  || {{ echo 'FAIL mount_hostroot'; poweroff -f; }}
umount /proc /sys
umount /dev
exec switch_root /newroot /bin/sh {stage2} {args}
"""


def boot_hostroot_guest(kernel: Kernel, initrd: Path, mem_mb: int = 3072, smp: int = 2,
                        timeout: float = 1800.0, log_path: Path | None = None) -> GuestRun:
    """Boot ``kernel`` with the host's / exported read-only over virtio-9p (tag ``hostroot``)."""
    qemu = _need("qemu-system-x86_64", "qemu-system-x86")
    cmd = [
        qemu, "-accel", "tcg", "-cpu", "max", "-smp", str(smp), "-m", str(mem_mb),
        "-nic", "none", "-nographic", "-no-reboot", "-kernel", str(kernel.vmlinuz),
        "-initrd", str(initrd),
        "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-append", "console=ttyS0 quiet panic=-1 oops=panic",
    ]
    t0 = time.monotonic()
    out = open(log_path, "w+b") if log_path else tempfile.TemporaryFile()
    with out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            timed_out = True
        out.seek(0)
        text = out.read().decode("utf-8", "replace").replace("\r", "")
    return GuestRun(text, None if timed_out else proc.returncode, timed_out, time.monotonic() - t0)


FORKCORE_REQUIRED_CHECKS = ("kmod_backend_available", "capture_covers_hold", "clones_use_kmod",
                            "source_counter_unaffected", "source_digest_unaffected", "clones_map_holders",
                            "memory_one_copy", "everything_released")


def judge_forkcore(run: GuestRun, kernel: str, seconds: float, clones: int) -> Result:
    """Judge the console of the forkcore guest (kmod/guest_forkcore.py)."""
    checks: list[tuple[str, str, str]] = []
    problems: list[str] = []
    summary: list[str] = []
    in_dmesg = False
    for line in run.console.splitlines():
        s = line.strip()
        if s in ("BCOW-DMESG-BEGIN", "BCOW-DMESG-END"):
            in_dmesg = s == "BCOW-DMESG-BEGIN"
            continue
        m = re.match(r"^(PASS|FAIL) ([^\s:]+):? ?(.*)$", s)
        if m and not in_dmesg:
            checks.append((m.group(2), m.group(1), m.group(3)))
        if s.startswith(("SUMMARY", "INFO", "BCOW-GUEST start")):
            summary.append(s)
        if BAD_LINE.search(s):
            problems.append(("dmesg: " if in_dmesg else "console: ") + s)
    names = {n for n, st, _ in checks if st == "PASS"}
    needed = list(FORKCORE_REQUIRED_CHECKS)
    if any(n == "hold_not_copied" for n, _, _ in checks):
        needed.append("hold_not_copied")
    for i in range(clones):
        needed += [f"clone{i}_hold_digest_equals_source", f"clone{i}_counter_is_snapshot_time",
                   f"clone{i}_counter_inc_private", f"clone{i}_echo_over_restored_tcp", f"clone{i}_files"]
    for n in needed:
        if n not in names:
            problems.append(f"check {n} did not pass")
    if not any(x.startswith("SUMMARY forkcore-kmod:") for x in summary):
        problems.append("no SUMMARY from kmod.guest_forkcore (crashed or hung?)")
    if run.timed_out:
        problems.append(f"guest timed out after {run.seconds:.0f} s")
    if "BCOW-GUEST done" not in run.console:
        problems.append("guest did not reach the end of its init script")
    return Result(passed=not problems, checks=checks, problems=problems, negative_control="n/a",
                  summary=summary, kernel=kernel, seconds=seconds, console=run.console)


def run_hostroot_guest(command: list[str], *, with_module: bool = False, mem_mb: int = 3072,
                       timeout: float = 1800.0, build_dir: str | os.PathLike | None = None,
                       kernel_version: str | None = None, log_path: Path | None = None) -> GuestRun:
    """Run ``command`` (argv, from the checkout, PYTHONPATH = the checkout) as root in a guest whose root is
    the host's / (read-only over 9p; tmpfs for the writable dirs, kmod/guest/stage2.sh), so the project's
    venv, CRIU (/opt/bunshin/criu) and the host's applications are there. The guest CPU is qemu's ``max``
    model (it has memory protection keys, whatever the host's CPU). ``with_module`` builds and loads
    bunshin_cow first. Needs root on the host (9p export of /) and scripts/setup.sh's CRIU and venv."""
    kernel = find_kernel(kernel_version)
    _need("qemu-system-x86_64", "qemu-system-x86")
    if os.geteuid() != 0:
        raise HarnessError("a host-root guest exports the host's / over 9p and must run as root")
    if not Path("/opt/bunshin/venv/bin/python").exists():
        raise HarnessError("/opt/bunshin/venv is missing: run `bash scripts/setup.sh` first")
    build = Path(build_dir or DEFAULT_BUILD_DIR)
    build.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path | bytes] = {"/bunshin_cow.ko": build_module(kernel, build)} if with_module else {}
    mods = []
    for m in HOSTROOT_MODULES:
        host = kernel.modules_dir / m
        if not host.is_file():
            raise HarnessError(f"{host} is missing (the guest needs it to mount the host root / workspaces)")
        files[f"/lib/modules/{host.name}"] = host
        mods.append(m)
    initrd = build / f"initramfs-hostroot-{os.getpid()}.cpio"
    write_initramfs(initrd, files, _hostroot_init(str(GUEST_STAGE2), [str(KMOD_DIR.parent), *command], mods,
                                                  with_module))
    try:
        return boot_hostroot_guest(kernel, initrd, mem_mb=mem_mb, timeout=timeout, log_path=log_path)
    finally:
        initrd.unlink(missing_ok=True)


def run_forkcore_guest_test(out_dir: str | os.PathLike | None = None, hold_mb: int = 200, clones: int = 4,
                            timeout: float = 2400.0, mem_mb: int = 3072,
                            build_dir: str | os.PathLike | None = None, kernel_version: str | None = None,
                            private_reference: bool = False) -> Result:
    """forkcore's kmod backend end to end in a guest: workspace → CRIU snapshot → ``clones`` kmod clones.

    The guest boots the Debian kernel with the module and overlay loaded and runs kmod/guest_forkcore.py in a
    host-root guest (`run_hostroot_guest`). Judged by :func:`judge_forkcore`.
    """
    t0 = time.monotonic()
    kernel = find_kernel(kernel_version)
    command = ["/opt/bunshin/venv/bin/python", "-u", "-m", "kmod.guest_forkcore", "--hold-mb", str(hold_mb),
               "--clones", str(clones), *(["--private-reference"] if private_reference else [])]
    log_path = None
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        log_path = Path(out_dir) / "console-forkcore.log"
    run = run_hostroot_guest(command, with_module=True, mem_mb=mem_mb, timeout=timeout, build_dir=build_dir,
                             kernel_version=kernel_version, log_path=log_path)
    res = judge_forkcore(run, kernel.version, time.monotonic() - t0, clones)
    if out_dir:
        res.console_path = str(log_path)
        d = dataclasses.asdict(res)
        d.pop("console")
        (Path(out_dir) / "result-forkcore.json").write_text(json.dumps(d, indent=2))
    return res


def main(argv: list[str] | None = None) -> int:
    """CLI: build, boot, test; print the report; exit 0 on PASS, 1 on FAIL, 2 on missing tools."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory for console.log and result.json")
    ap.add_argument("--timeout", type=float, default=420.0, help="guest timeout in seconds")
    ap.add_argument("--mem", type=int, default=1024, help="guest memory in MiB")
    ap.add_argument("--kernel", help="kernel version (default: newest with headers)")
    ap.add_argument("--build-dir", help=f"build directory (default {DEFAULT_BUILD_DIR})")
    ap.add_argument("--forkcore", action="store_true",
                    help="run the forkcore kmod-backend end-to-end guest test instead (root; host root over 9p)")
    ap.add_argument("--hold-mb", type=int, default=200, help="--forkcore: MiB held by the probe workspace")
    ap.add_argument("--clones", type=int, default=4, help="--forkcore: number of kmod clones")
    ap.add_argument("--private-reference", action="store_true",
                    help="--forkcore: also restore one private-backend clone for comparison")
    args = ap.parse_args(argv)
    try:
        if args.forkcore:
            res = run_forkcore_guest_test(args.out, args.hold_mb, args.clones,
                                          timeout=max(args.timeout, 2400.0), mem_mb=max(args.mem, 3072),
                                          build_dir=args.build_dir, kernel_version=args.kernel,
                                          private_reference=args.private_reference)
        else:
            res = run_tests(args.out, args.timeout, args.mem, args.build_dir, args.kernel)
    except HarnessError as e:
        print(f"kmod harness: {e}", file=sys.stderr)
        return 2
    print(res.report())
    return 0 if res.passed else 1


if __name__ == "__main__":
    sys.exit(main())
