"""Docker images as workspaces: an image's filesystem becomes a read-only layer, its configuration the
workspace's service.

`image_spec(image)` asks a Docker daemon (the `docker` SDK) for the image, exports its filesystem once into
STATE_DIR/layers/image-DIGEST/image (named by the digest of its filesystem layers, as every layer is named by
its content: a tag moved to other content gets another layer, the same tar imported again or under another
config the same one; built in a temporary dir and renamed by `layers._publish`, so a present one is whole), and
returns a WorkspaceSpec whose one service runs the image's Entrypoint + Cmd chrooted into /image
(`ServiceSpec.root`) with its Env, WorkingDir and User, ready when its first exposed TCP port accepts. The workspace's own root (forkcore's init, the executor, the
handlers and e.g. Chromium) stays the project's: the image's /usr is never shadowed, and the image sees the
workspace's /dev and its own /proc and /sys, as a container does. Everything else is an ordinary workspace: it
snapshots, forks and is hardened like any other (its services run in the workspace's user namespace, where
CRIU may dump processes of any uid). Nothing of the daemon is needed after the export.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import paths
from .errors import ForkcoreError
from .layers import _publish
from .spec import ServiceSpec, WorkspaceSpec

__all__ = ["IMAGE_ROOT", "ImageConfig", "ImageError", "image_config", "image_layer", "image_spec"]

#: where an image's root filesystem appears inside its workspace
IMAGE_ROOT = "/image"
#: entrypoints that need a privileged container (an init system as PID 1 wants the host's cgroups)
_PRIVILEGED_ENTRYPOINTS = {"init", "systemd", "/sbin/init", "/lib/systemd/systemd", "/usr/lib/systemd/systemd"}


class ImageError(ForkcoreError):
    """A Docker image cannot become a workspace (no daemon, no such image, or one a workspace cannot run)."""


@dataclass(frozen=True)
class ImageConfig:
    """What an image says about running it (Docker's image config)."""

    id: str
    tags: tuple[str, ...]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    workdir: str
    user: str
    exposed_tcp_ports: tuple[int, ...]
    filesystem: str  #: digest of its filesystem layers' content (RootFS diff ids): names its exported layer


def _client(client: Any = None):
    if client is not None:
        return client
    import docker

    try:
        c = docker.from_env()
        c.ping()
        return c
    except docker.errors.DockerException as e:
        raise ImageError(f"no Docker daemon answers at {os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')} "
                         f"({e}); start one (Debian: apt-get install docker.io; then dockerd, see README) or set "
                         "DOCKER_HOST, or pass client=docker.DockerClient(base_url=...)") from e


def image_config(image: str, client: Any = None) -> ImageConfig:
    """The image's configuration. Raises ImageError: no daemon, or the daemon lacks the image."""
    import docker

    c = _client(client)
    try:
        img = c.images.get(image)
    except docker.errors.ImageNotFound as e:
        raise ImageError(f"image {image!r} is not in the Docker daemon at {c.api.base_url}; load it first "
                         f"(docker load -i FILE.tar, or docker import / docker pull)") from e
    except docker.errors.DockerException as e:
        raise ImageError(f"asking the Docker daemon at {c.api.base_url} for image {image!r} failed: {e}") from e
    cfg = img.attrs.get("Config") or {}
    env = tuple(tuple(kv.split("=", 1)) if "=" in kv else (kv, "") for kv in cfg.get("Env") or ())
    ports = tuple(sorted(int(p.split("/")[0]) for p in (cfg.get("ExposedPorts") or {}) if p.endswith("/tcp")
                         or "/" not in p))
    diff_ids = (img.attrs.get("RootFS") or {}).get("Layers") or [img.id]
    return ImageConfig(img.id, tuple(img.tags), tuple(cfg.get("Entrypoint") or ()), tuple(cfg.get("Cmd") or ()),
                       env, cfg.get("WorkingDir") or "/", cfg.get("User") or "", ports,
                       hashlib.sha256("|".join(diff_ids).encode()).hexdigest()[:16])


def _fix_root(root: Path) -> None:
    """What a container runtime provides at run time and an exported filesystem lacks."""
    for d, mode in (("proc", 0o555), ("sys", 0o555), ("dev", 0o755), ("tmp", 0o1777), ("run", 0o755)):
        (root / d).mkdir(mode=mode, exist_ok=True)
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    hosts = etc / "hosts"
    if not hosts.is_symlink() and (not hosts.exists() or hosts.stat().st_size == 0):
        hosts.write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")


def image_layer(image: str, client: Any = None) -> Path:
    """The layer holding the image's filesystem at IMAGE_ROOT (exported on first use, then reused by content)."""
    c = _client(client)
    return _export_layer(image, image_config(image, c), c)


def _export_layer(image: str, cfg: ImageConfig, c) -> Path:
    import docker

    def build(tmp: Path) -> None:
        target = tmp / IMAGE_ROOT.lstrip("/")
        target.mkdir()
        # `docker create` runs nothing; its export is the image's filesystem as a container would see it
        container = c.containers.create(cfg.id, command=["/bin/true"], network_mode="none")
        try:
            sha, size = hashlib.sha256(), 0
            tar = subprocess.Popen(["tar", "-x", "--numeric-owner", "--same-owner", "--same-permissions", "--xattrs",
                                    "--xattrs-include=*", "-C", str(target)], stdin=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
            for chunk in container.export():
                sha.update(chunk)
                size += len(chunk)
                tar.stdin.write(chunk)
            tar.stdin.close()
            err = tar.stderr.read().decode(errors="replace")
            if tar.wait() != 0:
                raise ImageError(f"unpacking the filesystem of image {image!r} failed (tar exit {tar.returncode}): "
                                 f"{err[-500:]}")
        finally:
            container.remove(force=True)
        _fix_root(target)
        (tmp / ".bunshin-image.json").write_text(json.dumps(
            {"id": cfg.id, "tags": list(cfg.tags), "export_sha256": sha.hexdigest(), "export_bytes": size}))

    try:
        return _publish(build, f"image-{cfg.filesystem}")
    except docker.errors.DockerException as e:
        raise ImageError(f"exporting the filesystem of image {image!r} failed: {e}") from e
    except OSError as e:
        raise ImageError(f"exporting the filesystem of image {image!r} into {paths.STATE_DIR / 'layers'} "
                         f"failed: {e}") from e


def image_spec(image: str, *, client: Any = None, name: str | None = None,
               services: Sequence[ServiceSpec] | None = None, argv: Sequence[str] | None = None,
               ready: str | None = "auto", user: str | None = None, env: dict[str, str] | None = None,
               layers: Sequence[str] = (), **spec_kwargs: Any) -> WorkspaceSpec:
    """A WorkspaceSpec running `image` (see the module doc).

    Args:
        image: a name:tag or id the daemon knows.
        client: a docker.DockerClient (default: docker.from_env()).
        name: the workspace's name (default: from the image's name).
        services: replace the image's service entirely (give each `root=IMAGE_ROOT` to run it in the image).
        argv: replace Entrypoint + Cmd.
        ready: "tcp:PORT" / "unix:PATH" / "file:PATH", None (at once), or "auto": the first exposed TCP port.
        user: replace the image's User (e.g. "root" where its services must run as root to be dumped: see
            `bunshin doctor`; a hardened workspace, the default, needs no such change).
        env: added to the image's Env.
        layers: more layers above the image's (e.g. task files), as WorkspaceSpec.layers.
        spec_kwargs: the other WorkspaceSpec fields (handlers, executor, harden, memory_max_mb, ...).
    Raises ImageError: no daemon, image missing, no command, or an image needing a privileged container.
    """
    c = _client(client)
    cfg = image_config(image, c)
    layer = _export_layer(image, cfg, c)
    if services is None:
        command = tuple(argv) if argv is not None else cfg.entrypoint + cfg.cmd
        if not command:
            raise ImageError(f"image {image!r} has neither Entrypoint nor Cmd: pass argv= or services=")
        if command[0] in _PRIVILEGED_ENTRYPOINTS:
            raise ImageError(f"image {image!r} starts {command[0]} as PID 1, which needs a privileged container "
                             "(the host's cgroups, mounts): a workspace cannot give that; pass argv= or services= "
                             "with the image's services started directly")
        if ready == "auto":
            ready = f"tcp:{cfg.exposed_tcp_ports[0]}" if cfg.exposed_tcp_ports else None
        services = (ServiceSpec("image", command, tuple(sorted({**dict(cfg.env), **(env or {})}.items())),
                                cfg.workdir, ready, 180.0, user if user is not None else (cfg.user or None),
                                IMAGE_ROOT),)
    base = (cfg.tags[0] if cfg.tags else cfg.id.split(":")[-1][:12]).split("/")[-1]
    return WorkspaceSpec(name=name or re.sub(r"[^A-Za-z0-9_.-]", "-", base)[:64], services=tuple(services),
                         layers=(*layers, str(layer)), **spec_kwargs)
