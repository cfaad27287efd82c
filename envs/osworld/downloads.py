"""Downloads of OSWorld tasks, done on the host (a workspace has no network) into a content-addressed cache.

OSWorld's tasks fetch files from the internet: `download` config steps and the `cloud_file` getters of their
evaluators. `resolve_task(task)` fetches every such URL once with
httpx into BUNSHIN_OSWORLD_CACHE (default /var/cache/bunshin/osworld):

    files/<sha256>            the bytes (read-only once written)
    urls/<sha256 of the URL>.json   {"url", "sha256", "size", "content_type"}

and returns {url: Download}; the adapter puts {url: sha256} into the task's config (so the files are part of the
task's snapshot and cache identity: other bytes, another task) and copies each file into the task's workspace
(`STAGING_DIR/<sha256>`) before its reset, where the config steps and getters read it. Retries with backoff on
connection errors and HTTP 429/5xx; a size limit (BUNSHIN_OSWORLD_MAX_MB, 4096); a cached file is checked
against its sha256 before use (a damaged one is fetched again, or refused offline). BUNSHIN_OSWORLD_OFFLINE=1
reads only the cache: fill it with `bunshin osworld fetch --examples DIR` on a machine with internet and copy it.

URLs under SHIPPED_URL are this project's own task files (envs/osworld/task_files), never fetched.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import TaskConfigError

__all__ = ["DownloadError", "Download", "SHIPPED_URL", "STAGING_DIR", "cache_dir", "fetch", "resolve_task",
           "task_urls"]

#: the project's own tasks name their shipped files by URLs under this (a reserved .example host)
SHIPPED_URL = "https://files.bunshin.example/osworld/"
#: where, inside a task's workspace, the host puts its downloaded files (by sha256)
STAGING_DIR = "/var/lib/bunshin-osworld/downloads"
#: getter types whose `path` is a URL the evaluator compares against
URL_GETTERS = ("cloud_file",)
_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


class DownloadError(TaskConfigError):
    """A task's file could not be fetched or is not in the cache (offline); the message says what to do."""


@dataclass(frozen=True)
class Download:
    url: str
    sha256: str
    size: int
    path: Path  #: the cached bytes


def cache_dir() -> Path:
    return Path(os.environ.get("BUNSHIN_OSWORLD_CACHE", "/var/cache/bunshin/osworld"))


def offline() -> bool:
    return os.environ.get("BUNSHIN_OSWORLD_OFFLINE", "") not in ("", "0", "false", "no")


def _max_bytes() -> int:
    return int(float(os.environ.get("BUNSHIN_OSWORLD_MAX_MB", "4096")) * 2**20)


def _url_record(url: str) -> Path:
    return cache_dir() / "urls" / (hashlib.sha256(url.encode()).hexdigest() + ".json")


_verified: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, per process


def cached(url: str) -> Download | None:
    """The cached download of `url` if present and intact (its bytes match the recorded sha256)."""
    try:
        rec = json.loads(_url_record(url).read_text())
        path = cache_dir() / "files" / rec["sha256"]
        st = path.stat()
    except (OSError, ValueError, KeyError):
        return None
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _verified:
        with open(path, "rb") as f:
            _verified[key] = hashlib.file_digest(f, "sha256").hexdigest()
    if _verified[key] != rec["sha256"] or st.st_size != rec.get("size"):
        return None  # damaged: never served
    return Download(url, rec["sha256"], st.st_size, path)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def fetch(url: str, *, retries: int = 3, timeout_s: float = 60.0, progress: bool = False) -> Download:
    """`url`'s bytes, from the cache or fetched into it. Raises DownloadError saying why and what to do."""
    hit = cached(url)
    if hit is not None:
        return hit
    if offline():
        raise DownloadError(f"{url} is not in the download cache {cache_dir()} and BUNSHIN_OSWORLD_OFFLINE is set; "
                            "on a machine with internet run `bunshin osworld fetch --examples DIR` and copy its "
                            "cache here (or unset BUNSHIN_OSWORLD_OFFLINE)")
    limit, delay, last = _max_bytes(), 1.0, ""
    files = cache_dir() / "files"
    files.mkdir(parents=True, exist_ok=True)
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(delay)
            delay *= 2
        fd, tmp = tempfile.mkstemp(dir=files, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as out:
                sha, size, content_type = _fetch_once(url, out, limit, timeout_s, progress)
        except _Retry as e:
            last = str(e)
            os.unlink(tmp)
            continue
        except OSError as e:  # e.g. a full disk: nothing half-written stays
            os.unlink(tmp)
            raise DownloadError(f"cannot store {url} in the download cache {cache_dir()}: {e}") from e
        except BaseException:
            os.unlink(tmp)
            raise
        os.chmod(tmp, 0o444)
        os.replace(tmp, files / sha)
        _atomic_write(_url_record(url), json.dumps({"url": url, "sha256": sha, "size": size,
                                                    "content_type": content_type}).encode())
        return Download(url, sha, size, files / sha)
    raise DownloadError(f"cannot download {url} after {retries + 1} attempts ({last}); check this machine's "
                        f"internet access, or fill the cache {cache_dir()} on one that has it "
                        "(`bunshin osworld fetch --examples DIR`)")


class _Retry(Exception):
    """A transient failure: worth another attempt."""


def _fetch_once(url: str, out, limit: int, timeout_s: float, progress: bool) -> tuple[str, int, str]:
    import httpx

    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=httpx.Timeout(timeout_s, connect=20.0),
                          headers={"User-Agent": "bunshin-gym (OSWorld task files)"}) as r:
            if r.status_code in _RETRY_STATUS:
                raise _Retry(f"HTTP {r.status_code}")
            if r.status_code != 200:
                raise DownloadError(f"cannot download {url}: HTTP {r.status_code} {r.reason_phrase}; the file has "
                                    "moved or needs a login: put it in the cache yourself (`bunshin osworld fetch "
                                    "--examples DIR` reports each URL)")
            declared = int(r.headers.get("content-length") or 0)
            if declared > limit:
                raise DownloadError(f"cannot download {url}: {declared / 2**20:.0f} MB exceeds the limit of "
                                    f"{limit / 2**20:.0f} MB (BUNSHIN_OSWORLD_MAX_MB)")
            h, size = hashlib.sha256(), 0
            bar = _bar(url, declared) if progress else None
            try:
                for chunk in r.iter_bytes(1 << 20):
                    size += len(chunk)
                    if size > limit:
                        raise DownloadError(f"cannot download {url}: more than the limit of {limit / 2**20:.0f} "
                                            "MB (BUNSHIN_OSWORLD_MAX_MB)")
                    h.update(chunk)
                    out.write(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
            finally:
                if bar is not None:
                    bar.close()
            if declared and size != declared:
                raise _Retry(f"the connection ended after {size} of {declared} bytes")
            return h.hexdigest(), size, r.headers.get("content-type", "")
    except httpx.HTTPError as e:
        raise _Retry(f"{type(e).__name__}: {e}") from e


def _bar(url: str, total: int):
    from tqdm import tqdm

    return tqdm(total=total or None, unit="B", unit_scale=True, desc=url.rsplit("/", 1)[-1][:40], leave=False,
                disable=None)  # None: shown on a terminal only


def step_urls(task: Mapping[str, Any]) -> list[str]:
    """The URLs of `task`'s config and postconfig `download` steps (files its workspace gets; shipped ones left
    out)."""
    from .tasks import raw_steps

    return _unshipped([f.get("url") for s in raw_steps(task) if s.get("type") == "download"
                       for f in (s.get("parameters") or {}).get("files") or [] if isinstance(f, Mapping)])


def task_urls(task: Mapping[str, Any]) -> list[str]:
    """Every URL `task` (an OSWorld task dict) downloads: its steps' (step_urls), and the `cloud_file` getters
    of its evaluator (expected files: only the judge reads them); shipped files (SHIPPED_URL) left out."""
    from .tasks import raw_getters

    urls = step_urls(task)
    for g in raw_getters(task):
        if g.get("type") in URL_GETTERS:
            urls += g["path"] if isinstance(g.get("path"), list) else [g.get("path")]
    return _unshipped(urls)


def _unshipped(urls: list) -> list[str]:
    out = []
    for u in urls:
        if isinstance(u, str) and u and not u.startswith(SHIPPED_URL) and u not in out:
            out.append(u)
    return out


def resolve_task(task: Mapping[str, Any], progress: bool = False) -> dict[str, Download]:
    """{url: Download} for every URL of `task`, fetched into the cache where missing."""
    return {u: fetch(u, progress=progress) for u in task_urls(task)}
