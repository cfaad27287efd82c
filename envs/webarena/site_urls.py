"""URLs of the site: resolving a task's URLs and telling the site's pages from everything else.

Owns: :func:`resolve_url` (``__SHOPPING__`` and site-relative URLs to absolute ones) and :func:`on_site` (what
the agent's browser may open). Used inside the workspace (browser.py) and by the judge alike.
"""
from __future__ import annotations

from urllib.parse import urljoin, urlsplit

PLACEHOLDER = "__SHOPPING__"


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in: http://h and http://h:80 are one origin."""
    u = urlsplit(url)
    try:
        port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    except ValueError:  # a malformed port: no origin of ours
        port = -1
    return u.scheme, (u.hostname or ""), port


def resolve_url(url: str, base_url: str) -> str:
    """Map ``__SHOPPING__`` and site-relative URLs (``/cart``) to absolute URLs of the site at ``base_url``."""
    base_url = base_url.rstrip("/")
    url = url.strip().replace(PLACEHOLDER, base_url)
    if not urlsplit(url).scheme:
        url = urljoin(base_url + "/", url.lstrip("/"))
    return url


def on_site(url: str, base_url: str) -> bool:
    """True for a page of the site at ``base_url`` (same scheme, host and port) and for ``about:blank``."""
    return url == "about:blank" or (urlsplit(url).scheme in ("http", "https") and origin(url) == origin(base_url))
