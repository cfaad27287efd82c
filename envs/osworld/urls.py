"""URL equality as OSWorld compares URLs, shared by setup (tasks.py's chrome_close_tabs step, inside the workspace)
and the judge's URL metrics (evaluators/). Owns: normalising a URL. Compares no state with any expected value.
"""

from __future__ import annotations

import re
from urllib.parse import urlparse, urlunparse

__all__ = ["compare_urls"]


def _normalize_url(url: str, full: bool = True) -> str:
    if not re.match(r"^[a-zA-Z][a-zA-Z0-9+\-.]*://", url):
        url = "http://" + url
    u = urlparse(url)
    host = (u.hostname or "").lower()
    if re.fullmatch(r"[0-9.]+", host) or ":" in host or "." not in host:
        net = host  # IPs and single-label hosts: no public suffix to drop
    else:
        labels = host.split(".")
        labels = labels[:-1]  # drop the public suffix (approximation: the last label)
        if labels and labels[0] == "www" and len(labels) == 2:
            labels = labels[1:]
        net = ".".join(labels)
    path = u.path if u.path != "/" else ""
    return urlunparse((u.scheme.lower(), net, path, u.params if full else "", u.query if full else "",
                       u.fragment if full else ""))


def compare_urls(url1: str | None, url2: str | None, full: bool = True) -> bool:
    """URLs equal after normalising: scheme case, 'www.', the public suffix, the port, a lone '/' path."""
    if url1 is None or url2 is None:
        return url1 == url2
    return _normalize_url(url1, full) == _normalize_url(url2, full)
