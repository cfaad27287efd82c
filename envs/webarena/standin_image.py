"""The stand-in shopping image: nginx + PHP-FPM + MariaDB from Debian's packages serving a small PHP shop
(`standin/`). It stands in for WebArena's real shopping image (Magento + MySQL + Elasticsearch, shipped as
`shopping_final_0712`), which cannot be fetched here; a user with the real image loads that instead (README).

`rootfs_tar()` builds the image's root filesystem with mmdebstrap from the Debian mirror this machine's apt is
configured with, cached under BUNSHIN_IMAGE_CACHE (default /var/cache/bunshin/images) by the versions of
the packages apt would install today; `ensure_image(client)` `docker import`s it with Entrypoint, Cmd, Env,
WorkingDir, User and ExposedPorts set by `--change`, unless the daemon has it already.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["PACKAGES", "STANDIN_REPO", "ensure_image", "rootfs_tar"]

STANDIN_REPO = "bunshin/shopping-standin"
PACKAGES = ("nginx-light", "php-fpm", "php-mysql", "mariadb-server", "mariadb-client")
CHANGES = ['ENTRYPOINT ["/opt/standin/start.sh"]', "CMD []", "ENV SHOP_NAME=stand-in", "WORKDIR /var/www/shop",
           "USER root", "EXPOSE 80/tcp"]
_FILES = Path(__file__).parent / "standin"
_BUILD_VERSION = "2"  # bump when the hooks below change


def _cache_dir() -> Path:
    return Path(os.environ.get("BUNSHIN_IMAGE_CACHE", "/var/cache/bunshin/images"))


def _codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    raise RuntimeError("/etc/os-release names no VERSION_CODENAME: cannot tell which Debian suite to build")


def _sources(suite: str) -> list[str]:
    """The one-line apt sources of `suite` (and its -updates, -security) this machine is configured with."""
    lines = []
    files = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for f in files:  # deb822 stanzas
        for stanza in re.split(r"\n\s*\n", f.read_text()):
            fields = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.strip()
            if "deb" not in fields.get("types", "").split():
                continue
            key = f" [signed-by={fields['signed-by']}]" if fields.get("signed-by", "").startswith("/") else ""
            for s in fields.get("suites", "").split():
                if s == suite or s.startswith(suite + "-") or s.startswith(suite + "/"):
                    lines += [f"deb{key} {uri} {s} {fields.get('components', 'main')}"
                              for uri in fields.get("uris", "").split()]
    legacy = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for f in legacy:
        if f.is_file():
            lines += [ln.strip() for ln in f.read_text().splitlines()
                      if ln.strip().startswith("deb ") and any(p == suite or p.startswith(suite + "-")
                                                              for p in ln.split()[2:3])]
    if not lines:
        raise RuntimeError(f"no apt source for Debian {suite} in /etc/apt: mmdebstrap has no mirror to build from")
    return lines


def _candidates() -> str:
    """`package=version` of what apt would install today (the cache key: an update rebuilds the image)."""
    out = subprocess.run(["apt-cache", "policy", *PACKAGES], capture_output=True, text=True, check=True).stdout
    return " ".join(f"{p}={v}" for p, v in re.findall(r"^(\S+):\n\s+Installed: .*\n\s+Candidate: (\S+)", out, re.M))


def rootfs_tar(progress: bool = True) -> Path:
    """The image's root filesystem as a tar (built on first use: minutes, downloads ~100 MB of packages)."""
    suite = _codename()
    files = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(_FILES.rglob("*")) if p.is_file())).hexdigest()
    key = hashlib.sha256(f"{_BUILD_VERSION}|{suite}|{_candidates()}|{files}".encode()).hexdigest()[:16]
    out = _cache_dir() / f"shopping-standin-{key}.tar"
    if out.is_file():
        return out
    if shutil.which("mmdebstrap") is None:
        raise RuntimeError("mmdebstrap is not installed; run scripts/setup.sh (it installs it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.partial.tar")  # mmdebstrap writes a tar because of the suffix
    hooks = [
        f'tar -C {_FILES} -c site | tar -C "$1/var/www" -x && mv "$1/var/www/site" "$1/var/www/shop"',
        f'mkdir -p "$1/opt/standin" && cp {_FILES}/start.sh {_FILES}/seed.sql "$1/opt/standin/"',
        f'cp {_FILES}/etc/nginx-site.conf "$1/etc/nginx/sites-available/default"',
        f'for d in "$1"/etc/php/*/fpm/pool.d; do rm -f "$d/www.conf"; cp {_FILES}/etc/php-fpm-pool.conf "$d/shop.conf"; done',
        'rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*',
    ]
    # MariaDB's settings before its postinst creates the data directory (the redo log's size is fixed there)
    cnf = (f'mkdir -p "$1/etc/mysql/mariadb.conf.d" && '
           f'cp {_FILES}/etc/mariadb-standin.cnf "$1/etc/mysql/mariadb.conf.d/90-standin.cnf"')
    cmd = ["mmdebstrap", "--variant=minbase", "--mode=root", f"--include={','.join(PACKAGES)}",
           f"--essential-hook={cnf}", *[f"--customize-hook={h}" for h in hooks], suite, str(tmp), *_sources(suite)]
    if progress:
        print(f"building the stand-in shopping image's root filesystem ({suite}, {', '.join(PACKAGES)}) with "
              f"mmdebstrap: a few minutes", file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL if not progress else None, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"mmdebstrap failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    os.replace(tmp, out)
    for old in out.parent.glob("shopping-standin-*.tar"):  # earlier package versions' builds
        if old != out:
            old.unlink(missing_ok=True)
    return out


def ensure_image(client, progress: bool = True) -> str:
    """The stand-in image in the daemon of `client` (a docker.DockerClient), imported if absent; returns its
    tag, STANDIN_REPO:KEY (KEY names the build: packages, files)."""
    import docker

    tar = rootfs_tar(progress)
    tag = f"{STANDIN_REPO}:{tar.stem.rsplit('-', 1)[-1]}"
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        repo, _, version = tag.partition(":")
        with open(tar, "rb") as f:  # streamed as the request body
            client.api.import_image_from_data(f, repository=repo, tag=version, changes=CHANGES)
        client.images.get(tag)  # raises if the import did not make it
    return tag
