"""OSWorld's state getters for Chromium's pages: the active tab's URL, its HTML, a page's content.

Runs where the desktop is (inside the workspace, through osworld.collect): registers its getters in
getters.common.GETTERS and compares nothing; its metrics are in evaluators/browser_pages.py, which no workspace holds.

Getters (session, config):
    active_url_from_accessTree   goto_prefix ("https://") + the omnibox's text (Chromium drops the scheme), or None
    active_tab_url_parse         {parse_keys[i]: first query value or ""} of that URL; optional replace, split_list
    url_dashPart                 its "/"-separated part partIndex (needDeleteId drops "?..."), a string or {key: part}
    active_tab_html_parse        {key: text} from the DOM of the tab at that URL by class/label/xpath/input/class&url
    page_info                    {"title", "url", "content"} of config["url"] loaded in a fresh browser context
    info_from_website            inner texts / attributes read on config["url"] (after clicks), backups on failure
    pdf_from_url                 config["path"] (a URL) printed to the PDF config["dest"] in the cache, or None
    gotoRecreationPage_and_get_html_content  {"expected": {class: text}} of recreation.gov's "Diamond" campground

Owns: reading Chromium's pages (AT-SPI for the omnibox, Playwright over the DevTools port for the DOM).
"""

from __future__ import annotations

import os
import time
import urllib.request
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import parse_qs, unquote, urlparse

from ..errors import EvaluatorError
from .common import cache_dir, getter


def _need(obj: Any, key: str, what: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise EvaluatorError(f"{what}: the task's config needs {key!r}; found {obj!r:.120}")
    return obj[key]


# ----------------------------------------------------------------------------------------------------
# the omnibox (AT-SPI)

_OMNIBOX = "//application[@name='Chromium' or @name='Google Chrome']//entry[@name='Address and search bar']"


@getter("active_url_from_accessTree")
def get_active_url_from_accessTree(session, config: Mapping[str, Any]) -> str | None:
    from lxml import etree
    tree = session.accessibility_tree()
    if not tree:
        return None
    try:
        bars = etree.fromstring(tree.encode()).xpath(_OMNIBOX)
    except etree.XMLSyntaxError:
        return None
    # as OSWorld: the last address bar must have text, the first one's text is the URL
    if not bars or not bars[-1].text:
        return None
    return f"{config.get('goto_prefix', 'https://')}{bars[0].text}"


@getter("active_tab_url_parse")
def get_active_tab_url_parse(session, config: Mapping[str, Any]) -> dict | None:
    keys = list(_need(config, "parse_keys", "active_tab_url_parse"))
    replace = dict(config.get("replace", {}))
    if not set(replace) <= set(keys):
        raise EvaluatorError(f"active_tab_url_parse: 'replace' keys {sorted(set(replace) - set(keys))} are not "
                             f"in parse_keys {keys}")
    url = get_active_url_from_accessTree(session, config)
    if url is None:
        return None
    query = parse_qs(urlparse(url).query)
    params = {k: query.get(k, [""])[0] for k in keys}
    for old, new in replace.items():
        params[new] = params.pop(old)
    if config.get("split_list", False):
        params = {k: v.split(",") for k, v in params.items()}
    return params


@getter("url_dashPart")
def get_url_dashPart(session, config: Mapping[str, Any]) -> Any:
    try:
        index = int(_need(config, "partIndex", "url_dashPart"))
    except (TypeError, ValueError):
        raise EvaluatorError(f"url_dashPart: partIndex must be an integer, not {config['partIndex']!r}") from None
    kind = _need(config, "returnType", "url_dashPart")
    if kind not in ("string", "json"):
        raise EvaluatorError(f"url_dashPart: returnType must be 'string' or 'json', not {kind!r}")
    if kind == "json":
        _need(config, "key", "url_dashPart (returnType json)")
    url = get_active_url_from_accessTree(session, config)
    if url is None:
        return None
    parts = url.split("/")
    if not -len(parts) <= index < len(parts):
        return None
    part = parts[index]
    if config.get("needDeleteId", False):
        part = part.split("?")[0]
    return part if kind == "string" else {config["key"]: part}


# ----------------------------------------------------------------------------------------------------
# pages over the DevTools protocol (Playwright)

TIMEOUT_MS = 60_000  # OSWorld's navigation timeout


def _cdp_up(session) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{session.cdp_port}/json/version", timeout=2):
            return True
    except OSError:
        return False


@contextmanager
def _browser(session) -> Iterator[Any]:
    """Playwright's Browser over the desktop's DevTools port. As OSWorld, a browser the agent closed is started
    again (chromium on the session's DevTools port) and connected to."""
    from playwright.sync_api import sync_playwright

    endpoint = f"http://127.0.0.1:{session.cdp_port}"
    with sync_playwright() as p:
        if not _cdp_up(session):
            session.launch("chromium")
            deadline = time.monotonic() + 20
            while not _cdp_up(session) and time.monotonic() < deadline:
                time.sleep(0.25)
        yield p.chromium.connect_over_cdp(endpoint, timeout=30_000)


def _close(page) -> None:
    try:
        page.close()
    except Exception:  # the browser went away: nothing left to close
        pass


def _same_url(a: str, b: str) -> bool:
    # the omnibox shows some characters decoded that the page's URL has percent-encoded
    return unquote(a).rstrip("/") == unquote(b).rstrip("/")


def _texts(page, selector: str) -> list[str]:
    try:
        return [(el.text_content() or "").strip() for el in page.query_selector_all(selector)]
    except Exception:
        return []


def _own_texts(page, selector: str) -> list[str]:
    """The text nodes directly inside the first element matching selector (not its children's), stripped."""
    try:
        el = page.query_selector(selector)
        if el is None:
            return []
        return el.evaluate("n => Array.from(n.childNodes).filter(c => c.nodeType === Node.TEXT_NODE)"
                           ".map(c => c.textContent.trim()).filter(Boolean)")
    except Exception:
        return []


def _child_texts(page, selector: str, child: str, inner: bool = False) -> list[str]:
    """For each element matching selector that has a `child` descendant: the first one's text, stripped."""
    try:
        out = []
        for el in page.query_selector_all(selector):
            c = el.query_selector(child)
            if c is not None:
                out.append((c.inner_text() if inner else (c.text_content() or "")).strip())
        return out
    except Exception:
        return []


def _ranked(texts: list[str], ranks: Mapping[str, str], out: dict) -> None:
    for rank, key in ranks.items():
        i = int(rank)
        out[key] = texts[i] if -len(texts) <= i < len(texts) else ""


def _first_text(page, selectors: list[str], read: Callable[[Any], str | None]) -> str:
    """read() of the first element of the first selector that matches anything, stripped; "" otherwise."""
    try:
        for sel in selectors:
            loc = page.locator(sel)
            if loc.count():
                return (read(loc.first) or "").strip()
    except Exception:
        pass
    return ""


def _by_class(page, config: Mapping[str, Any]) -> dict:
    out: dict = {}
    for cls, ranks in config.get("class_multiObject", {}).items():
        _ranked(_texts(page, "." + cls), ranks, out)
    for cls, ranks in config.get("class_multiObject_child", {}).items():
        _ranked(_own_texts(page, "." + cls), ranks, out)
    for cls, ranks in config.get("class_multiObject_only_child", {}).items():
        _ranked(_child_texts(page, "." + cls, "h3"), ranks, out)
    for cls, names in config.get("class_multiObject_search_exist", {}).items():
        texts = _texts(page, "." + cls)
        for name in names:
            if name != "is_other_exist":
                out[name] = name in texts
        if "is_other_exist" in names:
            out["is_other_exist"] = out.get("is_other_exist", False) or any(t not in names for t in texts)
    for cls, key in config.get("class_singleObject", {}).items():
        texts = _texts(page, "." + cls)
        out[key] = texts[0] if texts else ""
    return out


def _by_class_and_url(page, config: Mapping[str, Any]) -> dict:
    """Which expected names appear (case-insensitively) among the class texts / in the page's URL; lower-cased
    keys, "is_other_exist" when some text is part of no expected name."""
    out: dict = {}
    groups = [(_texts(page, "." + c), names) for c, names in config.get("class_multiObject", {}).items()]
    groups += [(_child_texts(page, f".{c} li.catAllProducts", "span", inner=True), names)
               for c, names in config.get("class_multiObject_li", {}).items()]
    for texts, names in groups:
        found = {t.lower() for t in texts}
        for name in names:
            if name.lower() in found:
                out[name.lower()] = True
        if any(all(t.lower() not in n.lower() for n in names) for t in texts):
            out["is_other_exist"] = True
        out.setdefault("is_other_exist", False)
    url = page.url.lower()
    wanted = [(k, k) for k in config.get("url_include_expected", [])]
    wanted += list(config.get("url_include_expected_multichoice", {}).items())
    for part, name in wanted:
        out.setdefault(name.lower(), part.lower() in url)
    return out


def _parse_page(page, config: Mapping[str, Any]) -> dict:
    category = config["category"]
    if category == "class":
        return _by_class(page, config)
    if category == "class&url":
        return _by_class_and_url(page, config)
    out: dict = {}
    if category == "label":
        for label, key in config.get("labelObject", {}).items():
            out[key] = _first_text(page, [f"text={label}"], lambda el: el.text_content())
    elif category == "xpath":
        for xpath, key in config.get("xpathObject", {}).items():
            out[key] = _first_text(page, [f"xpath={xpath}", xpath], lambda el: el.text_content())
    elif category == "input":
        for xpath, key in config.get("inputObject", {}).items():
            out[key] = _first_text(page, [f"xpath={xpath}"], lambda el: el.input_value())
    return out


_HTML_CATEGORIES = ("class", "label", "xpath", "input", "class&url")


@getter("active_tab_html_parse")
def get_active_tab_html_parse(session, config: Mapping[str, Any]) -> dict | None:
    category = _need(config, "category", "active_tab_html_parse")
    if category not in _HTML_CATEGORIES:
        raise EvaluatorError(f"active_tab_html_parse: category {category!r} unknown; use one of {_HTML_CATEGORIES}")
    url = get_active_url_from_accessTree(session, config)
    if url is None:
        return None
    with _browser(session) as browser:
        for context in browser.contexts:
            for page in context.pages:
                if page.is_closed() or not _same_url(page.url, url):
                    continue
                try:
                    page.wait_for_load_state("networkidle", timeout=TIMEOUT_MS)
                except Exception:  # still busy: read what is there
                    pass
                return _parse_page(page, config)
    return {}


@getter("page_info")
def get_page_info(session, config: Mapping[str, Any]) -> dict:
    url = _need(config, "url", "page_info")
    for attempt in range(2):
        try:
            with _browser(session) as browser:
                page = browser.new_page()  # its own context: no cookies of the user's tabs, as in OSWorld
                try:
                    page.goto(url, wait_until="networkidle", timeout=TIMEOUT_MS)
                    try:
                        page.wait_for_load_state("networkidle", timeout=TIMEOUT_MS)
                        return {"title": page.title(), "url": page.url, "content": page.content()}
                    except Exception:
                        return {"title": "Error encountered", "url": page.url, "content": page.content()}
                finally:
                    _close(page)
        except Exception:
            if attempt == 0:
                time.sleep(3)
    return {"title": "Connection failed", "url": url, "content": ""}


_WEBSITE_ACTIONS = ("inner_text", "attribute", "click_and_inner_text", "click_and_attribute")


@getter("info_from_website")
def get_info_from_website(session, config: Mapping[str, Any]) -> Any:
    url = _need(config, "url", "info_from_website")
    infos = list(config.get("infos", []))
    for info in infos:
        action = info.get("action", "inner_text")
        if action not in _WEBSITE_ACTIONS:
            raise EvaluatorError(f"info_from_website: action {action!r} unknown; use one of {_WEBSITE_ACTIONS}")
        _need(info, "selector", "info_from_website infos[]")
        if action.endswith("attribute"):
            _need(info, "attribute", f"info_from_website {action}")
    try:
        with _browser(session) as browser:
            page = browser.contexts[0].new_page()
            try:
                page.goto(url)
                page.wait_for_load_state("load")
                values = []
                for info in infos:
                    if page.url != url:  # an earlier click went elsewhere
                        page.goto(url)
                        page.wait_for_load_state("load")
                    action = info.get("action", "inner_text")
                    selectors = info["selector"]
                    if action.startswith("click_and_"):
                        *clicks, selectors = selectors
                        for sel in clicks:
                            page.wait_for_selector(sel, state="attached", timeout=10_000).click()
                            page.wait_for_load_state("load")
                    el = page.wait_for_selector(selectors, state="attached", timeout=10_000)
                    values.append(el.inner_text() if action.endswith("inner_text") else
                                  el.get_attribute(info["attribute"]))
                return values
            finally:
                _close(page)
    except Exception:  # the site changed or is unreachable: the task's recorded values
        return config.get("backups")


@getter("pdf_from_url")
def get_pdf_from_url(session, config: Mapping[str, Any]) -> str | None:
    url = _need(config, "path", "pdf_from_url")
    dest = os.path.join(cache_dir(session), os.path.basename(str(_need(config, "dest", "pdf_from_url"))))
    for attempt in range(3):
        try:
            with _browser(session) as browser:
                page = browser.new_page()
                try:
                    page.goto(url, wait_until="networkidle", timeout=TIMEOUT_MS)
                    page.wait_for_load_state("networkidle", timeout=TIMEOUT_MS)
                    time.sleep(3)  # as OSWorld: late layout (fonts, images) settles before printing
                    page.pdf(path=dest)
                finally:
                    _close(page)
            if os.path.isfile(dest):
                return dest
        except Exception:
            pass
        if attempt < 2:
            time.sleep(5)
    return None


RECREATION_URLS = ("https://www.recreation.gov/", "http://www.recreation.gov/", "https://recreation.gov/")
_RECREATION_HEADERS = {
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/webp,image/apng,*/*;q=0.8",
    "Accept-Language": "en-US,en;q=0.9",
    "DNT": "1",
    "Upgrade-Insecure-Requests": "1",
}
_NEXT_AVAILABLE = ("button.next-available", "button[class*='next-available']", "button[class*='next']",
                   ".next-available", "[data-testid*='next']")
_FAILED = "__EVALUATION_FAILED__"


def _open_recreation(page) -> None:
    for url in RECREATION_URLS:
        for wait_until in ("domcontentloaded", "load", "networkidle"):
            try:
                page.goto(url, wait_until=wait_until, timeout=TIMEOUT_MS)
                return
            except Exception:
                continue
    raise RuntimeError("no recreation.gov address loaded")


def _recreation_campground(page):
    """Search recreation.gov for "Diamond", open the highlighted first result (a new tab) and ask it for the
    next available dates; returns that tab."""
    _open_recreation(page)
    try:
        page.wait_for_load_state("networkidle", timeout=30_000)
    except Exception:
        pass
    page.wait_for_selector("input#hero-search-input", state="visible", timeout=TIMEOUT_MS)
    page.fill("input#hero-search-input", "Diamond")
    page.wait_for_selector("button.nav-search-button", state="visible", timeout=TIMEOUT_MS)
    page.click("button.nav-search-button")
    page.wait_for_selector(".search-result-highlight--success", state="visible", timeout=TIMEOUT_MS)
    with page.expect_popup(timeout=TIMEOUT_MS) as popup:
        page.click(".search-result-highlight--success")
    camp = popup.value
    camp.set_default_timeout(TIMEOUT_MS)
    camp.wait_for_load_state("networkidle", timeout=TIMEOUT_MS)
    try:  # OSWorld goes on without this button
        camp.wait_for_selector(", ".join(_NEXT_AVAILABLE), state="visible", timeout=30_000)
        for sel in _NEXT_AVAILABLE:
            if camp.locator(sel).first.is_visible():
                camp.click(sel, timeout=30_000)
                camp.wait_for_load_state("networkidle", timeout=30_000)
                break
    except Exception:
        pass
    return camp


@getter("gotoRecreationPage_and_get_html_content")
def get_gotoRecreationPage_and_get_html_content(session, config: Mapping[str, Any]) -> dict:
    kind = _need(config, "selector", "gotoRecreationPage_and_get_html_content")
    if kind != "class":
        raise EvaluatorError(f"gotoRecreationPage_and_get_html_content: selector {kind!r} unsupported; use 'class'")
    cls = _need(config, "class", "gotoRecreationPage_and_get_html_content")
    try:
        rank = int(config.get("order", 0))
    except (TypeError, ValueError):
        raise EvaluatorError(f"gotoRecreationPage_and_get_html_content: order must be an integer, "
                             f"not {config['order']!r}") from None
    error = ""
    for attempt in range(3):
        try:
            with _browser(session) as browser:
                page = browser.new_page()
                try:
                    page.set_default_timeout(TIMEOUT_MS)
                    page.set_extra_http_headers(_RECREATION_HEADERS)
                    camp = _recreation_campground(page)
                    try:
                        texts = _texts(camp, "." + cls)
                        return {"expected": {cls: texts[rank] if 0 <= rank < len(texts) else _FAILED}}
                    finally:
                        _close(camp)
                finally:
                    _close(page)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            if attempt < 2:
                time.sleep(5)
    return {"expected": {"error": _FAILED, "error_message": f"Failed after 3 attempts: {error}"}}
