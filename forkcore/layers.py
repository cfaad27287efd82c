"""Read-only filesystem layers of a workspace's root: the system skeleton, the project code, snapshot layers.

Layers are directories under STATE_DIR/layers, named by a digest of their content, built once and never
modified afterwards (overlayfs requires lower layers not to change while mounted).
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from . import paths

#: Host paths bound read-only into every workspace at the same path (CRIU sees them as external mounts).
HOST_BINDS = ("/usr", str(paths.VENV))
#: Where each of HOST_BINDS is bound once, without what is mounted below it on the host: in a workspace's user
#: namespace such mounts are locked, and CRIU's restore of a bind whose source has locked mounts below it fails
#: (open_tree: EINVAL). Workspaces bind these, and restores name them.
BIND_SOURCES = Path("/run/bunshin/binds")
#: Mount points created in the skeleton so that nothing is written to a workspace's upper at start.
SKELETON_DIRS = (
    "proc", "sys", "dev", "run", "tmp", "root", "home", "usr", "mnt", "srv", "var/tmp", "var/log",
    "opt/bunshin/venv", "opt/bunshin/code", "opt/bunshin/mem", ".oldroot",
)
SKELETON_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
#: Host /etc entries never copied into a workspace (secrets, host identity, package-manager state). docker:
#: dockerd's private key, which its first start writes (on a fresh machine, mid-session: the system layer's
#: identity must not change under snapshots already taken).
ETC_EXCLUDE = {"shadow", "shadow-", "gshadow", "gshadow-", "ssh", "apt", "machine-id", "resolv.conf",
               "hosts", "hostname", "mtab", "subuid", "subgid", "security", "sudoers.d", "cron.d", "docker"}
_LAYOUT_VERSION = "3"
#: Python packages of this project copied into the code layer (they run inside workspaces).
CODE_PACKAGES = ("forkcore", "bunshin_gym", "envs")


def bind_source(host_path: str) -> str:
    """The mount of `host_path` alone (no submounts) under BIND_SOURCES, read-only; made on first use."""
    import fcntl

    from .init import MS_BIND, MS_NODEV, MS_RDONLY, MS_REMOUNT, _mount

    target = BIND_SOURCES / host_path.strip("/").replace("/", "_")
    if _is_mount_point(target):
        return str(target)
    BIND_SOURCES.mkdir(parents=True, exist_ok=True)
    with open(BIND_SOURCES / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent first uses (threads, processes) mount it once
        if not _is_mount_point(target):
            target.mkdir(exist_ok=True)
            _mount(host_path, str(target), None, MS_BIND)
            _mount("none", str(target), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NODEV)
    return str(target)


def _is_mount_point(path: Path) -> bool:
    # not os.path.ismount: a bind from the same filesystem has its parent's st_dev
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


def stack(spec_layers) -> list[Path]:
    """The read-only layers a workspace with these spec layers starts on, top first (built if absent)."""
    return [Path(p) for p in spec_layers] + [code_layer(), system_layer()]


def _layers_root() -> Path:
    root = paths.STATE_DIR / "layers"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _publish(build_fn, name: str) -> Path:
    """Build a layer in a temporary directory and rename it into place (atomic; concurrent builders OK)."""
    final = _layers_root() / name
    if final.is_dir():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=_layers_root()))
    try:
        build_fn(tmp)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _etc_digest(etc: str = "/etc") -> str:
    h = hashlib.sha256(_LAYOUT_VERSION.encode())
    for dirpath, dirnames, filenames in os.walk(etc):
        rel = os.path.relpath(dirpath, etc)
        if rel.split(os.sep)[0] in ETC_EXCLUDE:
            dirnames[:] = []
            continue
        dirnames.sort()
        for f in sorted(filenames):
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except OSError:
                continue
            h.update(f"{rel}/{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def system_layer() -> Path:
    """The bottom layer: mount points, merged-/usr symlinks and a curated copy of the host's /etc."""

    def build(d: Path) -> None:
        for sub in SKELETON_DIRS:
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "tmp", 0o1777)
        os.chmod(d / "var/tmp", 0o1777)
        for name, target in SKELETON_LINKS.items():
            os.symlink(target, d / name)

        def ignore(src, names):
            return [n for n in names if src == "/etc" and n in ETC_EXCLUDE]

        shutil.copytree("/etc", d / "etc", symlinks=True, ignore=ignore, ignore_dangling_symlinks=True)
        (d / "etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
        (d / "etc/resolv.conf").write_text("# workspaces have loopback only\nnameserver 127.0.0.1\n")
        (d / "etc/hostname").write_text("workspace\n")
        (d / "etc/machine-id").write_text("b0b5b1e0000000000000000000000000\n")
        os.symlink("/proc/self/mounts", d / "etc/mtab")

    return _publish(build, f"system-{_etc_digest()}")


#: a file naming, one glob a line relative to its folder ("name/" for a folder), what of that folder never
#: enters the code layer: what only the host runs or reads (an env's judge, its expected files, task sources)
WORKSPACE_EXCLUDE = ".workspace-exclude"


def _excluded(folder: str) -> tuple[list[str], list[str]]:
    """The (folder, file) globs `folder`'s WORKSPACE_EXCLUDE names."""
    try:
        lines = Path(folder, WORKSPACE_EXCLUDE).read_text().splitlines()
    except FileNotFoundError:
        return [], []
    globs = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    return [g.rstrip("/") for g in globs if g.endswith("/")], [g for g in globs if not g.endswith("/")]


def _code_files(repo_root: Path):
    for pkg in CODE_PACKAGES:
        for dirpath, dirnames, filenames in os.walk(repo_root / pkg):
            no_dirs, no_files = _excluded(dirpath)
            dirnames[:] = sorted(n for n in dirnames if n not in ("__pycache__", "build", ".pytest_cache")
                                 and not any(fnmatch.fnmatch(n, g) for g in no_dirs))
            for f in sorted(filenames):
                if (not f.endswith((".pyc", ".pyo")) and f != WORKSPACE_EXCLUDE
                        and not any(fnmatch.fnmatch(f, g) for g in no_files)):
                    yield Path(dirpath, f)


def code_layer(repo_root: Path | None = None) -> Path:
    """The project's Python packages at /opt/bunshin/code inside workspaces (PYTHONPATH points there)."""
    repo_root = repo_root or Path(__file__).resolve().parent.parent
    files = list(_code_files(repo_root))
    h = hashlib.sha256(_LAYOUT_VERSION.encode())
    for f in files:
        h.update(str(f.relative_to(repo_root)).encode() + b"\0")
        h.update(f.read_bytes())

    def build(d: Path) -> None:
        base = d / paths.WS_CODE_DIR.lstrip("/")
        for f in files:
            dst = base / f.relative_to(repo_root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)

    return _publish(build, f"code-{h.hexdigest()[:16]}")


def copy_tree(src: Path, dst: Path) -> None:
    """Copy an overlay upper dir into a new layer, keeping whiteouts and xattrs (reflink where possible)."""
    import subprocess

    dst.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dst)], capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError(f"copying layer {src} -> {dst} failed: {r.stderr.strip()}")


def user_layer(name: str, uid: int = 1000, password: str | None = None, *, sudo: bool = False,
               hostname: str | None = None) -> Path:
    """A layer that adds a login account to the workspace's /etc (stack it above the system layer).

    The system layer's passwd/group (copied from the host) are rewritten without any entry that uses
    `name` or `uid`, then the account is appended (home /home/<name>, shell /bin/bash, its own group).
    shadow holds a SHA-512 crypt hash of `password` (every other account locked); `sudo=True` adds it to the
    `sudo` group (Debian's /etc/sudoers allows that group everything after a password) and ships the
    /etc/security/limits.conf sudo's PAM stack reads (the system layer omits /etc/security). `hostname` is
    added to /etc/hosts so sudo resolves it.
    """
    import subprocess

    if not re.match(r"^[a-z_][a-z0-9_-]{0,31}$", name) or not 1 <= uid < 65534:
        raise ValueError(f"user_layer: invalid account name={name!r} / uid={uid}")
    system = system_layer()
    digest = hashlib.sha256(f"{system.name}:{name}:{uid}:{password}:{sudo}:{hostname}".encode()).hexdigest()[:16]

    def keep(line: str) -> bool:
        f = line.split(":")
        return len(f) > 2 and f[0] != name and f[2] != str(uid)

    def build(d: Path) -> None:
        etc = d / "etc"
        (etc / "security").mkdir(parents=True)
        passwd = [ln for ln in (system / "etc/passwd").read_text().splitlines() if keep(ln)]
        groups = [ln for ln in (system / "etc/group").read_text().splitlines() if keep(ln)]
        if sudo:
            groups = [ln + ("," if not ln.endswith(":") else "") + name if ln.startswith("sudo:") else ln
                      for ln in groups]
        passwd.append(f"{name}:x:{uid}:{uid}::/home/{name}:/bin/bash")
        groups.append(f"{name}:x:{uid}:")
        if password is None:
            hashed = "!"
        else:  # a fixed salt keeps the layer's content (and so its name) reproducible
            hashed = subprocess.run(["openssl", "passwd", "-6", "-salt", "bunshin" + str(uid), "-stdin"],
                                    input=password, capture_output=True, text=True, check=True).stdout.strip()
        shadow = [f"{ln.split(':')[0]}:*:19000:0:99999:7:::" for ln in passwd[:-1]]
        shadow.append(f"{name}:{hashed}:19000:0:99999:7:::")
        gshadow = [f"{ln.split(':')[0]}:*::{ln.split(':')[3]}" for ln in groups]
        for fname, lines, mode in (("passwd", passwd, 0o644), ("group", groups, 0o644),
                                   ("shadow", shadow, 0o640), ("gshadow", gshadow, 0o640)):
            (etc / fname).write_text("\n".join(lines) + "\n")
            os.chmod(etc / fname, mode)
        shadow_gid = next((int(ln.split(":")[2]) for ln in groups if ln.startswith("shadow:")), 0)
        for fname in ("shadow", "gshadow"):
            os.chown(etc / fname, 0, shadow_gid)
        (etc / "security/limits.conf").write_text("# no limits beyond the workspace's cgroup\n")
        if hostname:
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {hostname}\n::1 localhost\n")

    return _publish(build, f"user-{name}-{digest}")
