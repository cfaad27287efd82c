"""Browser mechanism for the WebArena env: one Chromium context driven through Playwright's sync API.

Owns: starting Debian's Chromium, logging the task customer in, tabs, executing parsed actions
(:meth:`BrowserSession.execute`) and observations (:meth:`BrowserSession.observe`: screenshot, accessibility
tree, URL, open tabs), and reading a page's text for the judge (:meth:`BrowserSession.page_text`). Does not own:
action parsing (``actions.py``), task configs (``tasks.py``) or judging (``judge.py``, outside the workspace).

Element ids. Before an observation every element of the page gets a ``data-bid`` attribute numbered in DOM
(tree) order, 0 for ``<html>``. Ids are therefore a pure function of the DOM: stable while the page does not
change and identical in a fresh browser on a freshly seeded site, so recorded trajectories (oracles) replay.
The accessibility tree comes from CDP ``Accessibility.getFullAXTree``; an AX node backed by an element shows that
element's id (``[12] link 'Shoes'``); text nodes (``StaticText``) and the root are printed without an id and
cannot be targeted (click their parent instead). Actions find their element with the selector
``[data-bid="12"]``; if the page navigated since the observation, the new page is numbered the same way first.

Determinism. Screenshots are taken of the viewport with a style that hides the caret and turns off
animations and transitions, so identical states give identical pixels.

Reach. The agent's browser reaches the site and nothing else: requests to any other origin are aborted (the
workspace has loopback only anyway), ``goto`` opens only the site's pages or ``about:blank`` (no ``file:``,
``data:``, ``javascript:``, ``view-source:``, ``chrome:``, ``devtools:``, nor another port), and a tab that
reaches any other URL by another way is sent back to ``about:blank`` with an error.
"""
from __future__ import annotations

import base64
import io
import json
import threading
import time

import numpy as np

from .actions import Action, parse_action
from .errors import ActionParseError, BrowserError
from .site_urls import on_site, origin, resolve_url

CHROMIUM_PATH = "/usr/bin/chromium"
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-breakpad")
#: CSS applied while taking screenshots (never injected into the DOM, so ids do not move).
SCREENSHOT_CSS = "*{caret-color:transparent!important;animation:none!important;transition:none!important}"
ACTION_TIMEOUT_MS = 3000
NAVIGATION_TIMEOUT_MS = 15000
#: After a click or key press, how long to watch for a navigation it may have started (seconds).
NAVIGATION_GRACE_S = 0.1
#: AX properties left out of the tree text (as in WebArena's IGNORED_ACTREE_PROPERTIES).
IGNORED_PROPERTIES = ("focusable", "editable", "readonly", "level", "settable", "multiline", "invalid",
                      "hiddenRoot", "hidden")
#: Roles dropped when they have neither a name nor properties (WebArena's pruning rule).
EMPTY_ROLES_DROPPED = ("generic", "img", "list", "strong", "paragraph", "banner", "navigation", "Section",
                       "LabelText", "Legend", "listitem", "none", "group", "LineBreak", "emphasis", "rowgroup",
                       "DescriptionList", "time", "superscript", "subscript", "code")

_MARK_JS = """() => {
  let i = 0;
  for (const el of document.querySelectorAll('*')) el.setAttribute('data-bid', String(i++));
  return i;
}"""
_IS_MARKED_JS = "() => !!document.documentElement && document.documentElement.getAttribute('data-bid') === '0'"
#: Before a screenshot: once fonts are ready, adds SCREENSHOT_CSS as a constructed (adopted) style sheet, which
#: puts no node in the DOM, and resolves to that sheet (_UNSTYLE_FN removes it after the shot); resolves to null
#: when the style could not change a pixel (no running animation or transition, no focused element to show a
#: caret) and to "frames" when the page has frames (Playwright then styles each one).
_STYLE_EXPR = """(async () => { await document.fonts.ready; if (window.frames.length) return "frames";
  const a = document.activeElement;
  if (!document.getAnimations().length && (!a || a === document.body || a === document.documentElement)) return null;
  const s = new CSSStyleSheet(); s.replaceSync(%s);
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, s]; return s; })()"""
_UNSTYLE_FN = "function () { document.adoptedStyleSheets = document.adoptedStyleSheets.filter(s => s !== this); }"
_SCROLL_JS = """(dy) => { const s = document.scrollingElement || document.body;
  s.scrollTop = s.scrollTop + dy * window.innerHeight; }"""


#: where Chromium shows a navigation that failed (e.g. aborted as off-site): a tab may rest there
_ERROR_PAGE = "chrome-error://"


class BrowserSession:
    """A Chromium browser with one context whose tabs an agent drives with WebArena/BrowserGym actions.

    Typical use::

        s = BrowserSession()
        s.start("http://127.0.0.1:7770", login=("emma.lopez@example.com", "Password.123"))
        s.goto("http://127.0.0.1:7770/")
        obs = s.observe()      # {"screenshot": uint8 (720, 1280, 3), "axtree": str, "url": str,
                               #  "open_pages_urls": [str, ...]}
        err = s.execute("click [42]")   # "" on success, an explanation otherwise; never raises
        s.close()

    One browser can serve many tasks: :meth:`new_context` closes the current context (cookies, tabs) and opens
    a clean one, which is much cheaper than relaunching Chromium. Several sessions may live in one thread (each
    with its own Chromium); they share that thread's Playwright driver. Not thread-safe: use a session from the
    thread that started it.
    """

    def __init__(self, png_screenshots: bool = False) -> None:
        self.png_screenshots = png_screenshots  # observe() gives "screenshot_png" bytes: no decode where unneeded
        self._pw = None
        self._browser = None
        self._context = None
        self._tabs: list = []
        self._active = 0
        self._internal_pages = 0
        self._cdp: dict = {}  # page -> CDP session for screenshots (Runtime/Page calls only: no events)
        self.base_url = ""
        self.viewport = (1280, 720)
        self.login_form = "shop"  #: see login()

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self, base_url: str, viewport: tuple[int, int] = (1280, 720), headless: bool = True,
              login: tuple[str, str] | None = None) -> None:
        """Launch Chromium (once) and open a fresh context on ``base_url``.

        Args:
            base_url: the site's root, e.g. ``http://127.0.0.1:7770`` (no trailing slash needed).
            viewport: (width, height) in CSS pixels; screenshots have shape (height, width, 3).
            headless: False shows the window (needs an X display).
            login: (email, password) to sign in before the first page, as WebArena's storage state does.

        Raises:
            BrowserError: Chromium is missing or fails to start; the message names the fix.
        """
        if self._browser is None:
            try:
                from playwright.sync_api import sync_playwright
            except ImportError as e:  # pragma: no cover - dependency is in pyproject
                raise BrowserError("playwright is not installed; run: pip install playwright "
                                   "(do not run `playwright install`; Debian's /usr/bin/chromium is used)") from e
            self._pw = _acquire_playwright(sync_playwright)
            try:
                self._browser = self._pw.chromium.launch(executable_path=CHROMIUM_PATH, headless=headless,
                                                         args=list(CHROMIUM_ARGS))
            except Exception as e:
                _release_playwright()
                self._pw = None
                raise BrowserError(f"could not launch Chromium at {CHROMIUM_PATH}: {str(e).splitlines()[0]}; "
                                   "install it with: apt-get install chromium") from e
        self.new_context(base_url, viewport, login)

    def new_context(self, base_url: str, viewport: tuple[int, int] = (1280, 720),
                    login: tuple[str, str] | None = None) -> None:
        """Replace the current context (tabs, cookies) by a fresh one with one blank tab."""
        if self._browser is None:
            raise BrowserError("call start() before new_context()")
        if self._context is not None:
            self._context.close()
        self._cdp = {}
        self.base_url = base_url.rstrip("/")
        self.viewport = (int(viewport[0]), int(viewport[1]))
        ctx = self._browser.new_context(viewport={"width": self.viewport[0], "height": self.viewport[1]},
                                        device_scale_factor=1, locale="en-US", timezone_id="UTC",
                                        reduced_motion="reduce", java_script_enabled=True)
        ctx.set_default_timeout(ACTION_TIMEOUT_MS)
        ctx.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        site = origin(self.base_url)

        def _route(route):
            url = route.request.url
            if url.startswith(("data:", "about:", "blob:")) or origin(url) == site:
                route.continue_()
            else:
                route.abort()

        ctx.route("**/*", _route)
        ctx.on("page", self._on_page)
        self._context = ctx
        self._tabs = []
        self._active = 0
        if login is not None:
            self.login(*login)
        ctx.new_page()

    def _on_page(self, page) -> None:
        if self._internal_pages:
            return
        self._tabs.append(page)
        self._active = len(self._tabs) - 1
        page.on("close", lambda p: self._forget(p))

    def _forget(self, page) -> None:
        self._cdp.pop(page, None)
        if page in self._tabs:
            idx = self._tabs.index(page)
            self._tabs.remove(page)
            if self._active >= idx:
                self._active = max(0, self._active - 1)

    def login(self, email: str, password: str) -> None:
        """Sign the context in (cookies land in the context's jar) by the site's login form: ``login_form``
        "shop" posts this project's site's form, "magento" fills Magento 2's customer form (WebArena's
        shopping site) in a page of its own, as a user would."""
        if self.login_form == "magento":
            self._login_magento(email, password)
            return
        resp = self._context.request.post(self.base_url + "/customer/login",
                                          form={"email": email, "password": password, "next": "/"},
                                          max_redirects=0, fail_on_status_code=False)
        if resp.status != 302:
            raise BrowserError(f"login as {email} failed: expected a redirect from /customer/login, got HTTP "
                               f"{resp.status}; check the site is running at {self.base_url} and the password")

    def _login_magento(self, email: str, password: str) -> None:
        page = self.open_internal_page()
        try:
            page.goto(self.base_url + "/customer/account/login/", wait_until="load")
            try:
                page.fill("#email", email)
                page.fill("#pass", password)
                with page.expect_navigation(wait_until="load"):
                    page.click("#send2")
            except Exception as e:  # noqa: BLE001 - Playwright's timeouts and missing elements alike
                raise BrowserError(f"login as {email} failed: {self.base_url}/customer/account/login/ has no "
                                   f"Magento login form (#email, #pass, #send2) that answers: "
                                   f"{str(e).splitlines()[0]}") from e
            if "/customer/account/login" in page.url:
                raise BrowserError(f"login as {email} failed: the site sent the browser back to the login "
                                   f"form ({page.url}); check the e-mail and password (site_credentials)")
        finally:
            page.close()

    def close(self) -> None:
        """Close the context and browser and stop Playwright; safe to call twice."""
        for obj in (self._context, self._browser):
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001 - best-effort shutdown
                    pass
        if self._pw is not None:
            _release_playwright()
        self._context = self._browser = self._pw = None
        self._tabs = []
        self._cdp = {}

    def __enter__(self) -> "BrowserSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- pages -------------------------------------------------------------------------------------------
    @property
    def page(self):
        """The active tab (a Playwright Page)."""
        if not self._tabs:
            raise BrowserError("no open tab; start() the session first")
        return self._tabs[self._active]

    @property
    def context(self):
        """The Playwright BrowserContext (evaluators open their own pages in it)."""
        return self._context

    def open_internal_page(self):
        """Open a page in the context that is not one of the agent's tabs (for evaluators); caller closes it."""
        self._internal_pages += 1
        try:
            return self._context.new_page()
        finally:
            self._internal_pages -= 1

    def resolve_url(self, url: str) -> str:
        """Map ``__SHOPPING__`` and site-relative URLs (``/cart``) to absolute URLs of this site."""
        return resolve_url(url, self.base_url)

    def goto(self, url: str) -> None:
        """Navigate the active tab to ``url`` (absolute, site-relative or with ``__SHOPPING__``)."""
        self.page.goto(self.resolve_url(url), wait_until="load")

    def on_site(self, url: str) -> bool:
        """True for a page of the site and for ``about:blank``."""
        return on_site(url, self.base_url)

    def page_text(self, url: str, locator: str = "") -> str:
        """What WebArena's program_html reads: open a site ``url`` in a page of the context that is none of the
        agent's tabs (same cookies), evaluate the JS ``locator`` there (empty: the page's HTML) and close it.
        A locator that raises or finds nothing reads as ""."""
        if not self.on_site(url):
            raise BrowserError(f"page_text: {url!r} is not a page of the site {self.base_url}")
        page = self.open_internal_page()
        try:
            page.goto(url, wait_until="load")
            if not locator.strip():
                return page.content()
            try:
                content = page.evaluate(f"() => {locator}")
            except Exception:  # noqa: BLE001 - a missing element means the check fails
                return ""
            return "" if content is None else str(content)
        finally:
            page.close()

    # --- observation -------------------------------------------------------------------------------------
    def _settle(self, page) -> None:
        try:
            page.wait_for_load_state("load", timeout=NAVIGATION_TIMEOUT_MS)
        except Exception:  # noqa: BLE001 - an unfinished load is still observable
            pass

    def _mark(self, page, force: bool) -> None:
        for attempt in range(3):
            try:
                if force or not page.evaluate(_IS_MARKED_JS):
                    page.evaluate(_MARK_JS)
                return
            except Exception as e:  # noqa: BLE001 - Playwright's Error: the document changed under us
                # A navigation committed meanwhile (e.g. the error page of a blocked goto): number the new one.
                if "Execution context was destroyed" not in str(e) or attempt == 2:
                    raise
                self._settle(page)

    def observe(self) -> dict:
        """Observe the active tab.

        Returns:
            dict with
              - ``screenshot``: np.ndarray uint8, shape (height, width, 3), RGB, the viewport (or
                ``screenshot_png``: its PNG bytes, with ``png_screenshots``);
              - ``axtree``: str, one node per line, ``\\t`` indentation, ``[id] role 'name' prop: value``;
              - ``url``: str, the active tab's URL;
              - ``open_pages_urls``: list[str], URL of every tab in order;
              - ``active_page_index``: int.
        """
        page = self.page
        self._settle(page)
        self._mark(page, force=True)
        shot = {"screenshot_png": self.screenshot_png()} if self.png_screenshots else {"screenshot": self.screenshot()}
        return {**shot, "axtree": self.axtree(), "url": page.url,
                "open_pages_urls": [p.url for p in self._tabs], "active_page_index": self._active}

    def screenshot(self) -> np.ndarray:
        """Viewport screenshot of the active tab as uint8 RGB (height, width, 3)."""
        from PIL import Image

        png = self.screenshot_png()
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.uint8)

    def screenshot_png(self) -> bytes:
        """Viewport screenshot of the active tab as PNG bytes (same pixels as :meth:`screenshot`)."""
        # CDP directly, PNG encoded for speed (lossless: same pixels, ~25% larger), the style only where it can
        # matter: ~10-35 ms a step less than Playwright's page.screenshot(style=SCREENSHOT_CSS), which injects a
        # <style> element into every frame and repaints the page around the shot
        page = self.page
        cdp = self._cdp_session(page)
        try:
            styled = cdp.send("Runtime.evaluate", {"expression": _STYLE_EXPR % json.dumps(SCREENSHOT_CSS),
                                                   "awaitPromise": True})
        except Exception:  # noqa: BLE001 - e.g. a navigation replaced the document: Playwright copes
            styled = {"exceptionDetails": True}
        if "exceptionDetails" in styled or styled["result"].get("value") == "frames":
            return page.screenshot(type="png", style=SCREENSHOT_CSS)
        sheet = styled["result"].get("objectId")
        try:
            shot = cdp.send("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True})
        finally:
            if sheet is not None:
                try:
                    cdp.send("Runtime.callFunctionOn", {"objectId": sheet, "functionDeclaration": _UNSTYLE_FN})
                    cdp.send("Runtime.releaseObject", {"objectId": sheet})
                except Exception:  # noqa: BLE001 - the document (and the sheet with it) is gone
                    pass
        return base64.b64decode(shot["data"])

    def _cdp_session(self, page):
        cdp = self._cdp.get(page)
        if cdp is None:
            cdp = self._cdp[page] = self._context.new_cdp_session(page)
        return cdp

    def axtree(self) -> str:
        """The active tab's accessibility tree as WebArena-style text (ids as described in the module doc)."""
        page = self.page
        self._mark(page, force=False)
        # a session of its own, detached after: a DOM agent left attached would report every later mutation
        cdp = self._context.new_cdp_session(page)
        try:
            doc = cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})
            ax = cdp.send("Accessibility.getFullAXTree")
        finally:
            cdp.detach()
        bids: dict[int, str] = {}
        stack = [doc["root"]]
        while stack:
            n = stack.pop()
            attrs = n.get("attributes") or []
            for k in range(0, len(attrs) - 1, 2):
                if attrs[k] == "data-bid":
                    bids[n["backendNodeId"]] = attrs[k + 1]
                    break
            stack.extend(n.get("children") or [])
            stack.extend(n.get("shadowRoots") or [])
            if n.get("contentDocument"):
                stack.append(n["contentDocument"])
        return format_axtree(ax["nodes"], bids)

    # --- actions -----------------------------------------------------------------------------------------
    def execute(self, action: Action | str) -> str:
        """Carry out one action on the active tab.

        Args:
            action: an :class:`Action` or action text in either syntax.

        Returns:
            "" on success, otherwise a one-line error for the agent (``last_action_error``): a parse error,
            an unknown id, an element that cannot take the action, a navigation failure. Never raises for agent
            mistakes; state is unchanged when the action could not start. ``stop``/``send_msg_to_user`` are
            no-ops here (the env layer records the answer).
        """
        try:
            act = action if isinstance(action, Action) else parse_action(action)
        except ActionParseError as e:
            return f"invalid action: {e}"
        try:
            self._execute(act)
        except _AgentError as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - Playwright errors become observations
            msg = str(e).strip().splitlines()
            return f"{act.canonical()} failed: {msg[0] if msg else type(e).__name__}"
        return self._leave_off_site_pages()

    def _leave_off_site_pages(self) -> str:
        """Send every tab that is not on the site back to ``about:blank`` (no action should get there; this is
        the guard for any way we did not think of). Returns the agent's error, "" when all tabs are on the site."""
        off = [(p, p.url) for p in self._tabs if not (self.on_site(p.url) or p.url.startswith(_ERROR_PAGE))]
        for page, _ in off:
            page.goto("about:blank")
        return (f"{', '.join(url for _, url in off)}: not a page of the site; the tab was sent to about:blank"
                if off else "")

    def _element(self, page, bid: str):
        self._mark(page, force=False)
        loc = page.locator(f'[data-bid="{bid}"]')
        if loc.count() != 1:
            raise _AgentError(f"no element with id [{bid}] on the current page; use an id from the latest "
                              "accessibility tree")
        return loc

    def _execute(self, act: Action) -> None:  # noqa: C901 - one dispatch table
        n, a = act.name, act.args
        if n in ("noop", "stop", "send_msg_to_user"):
            return
        if n == "new_tab":
            self._context.new_page()  # _on_page makes it active
            return
        if n == "tab_focus":
            if not 0 <= a[0] < len(self._tabs):
                raise _AgentError(f"tab_focus [{a[0]}]: there are {len(self._tabs)} tabs (indices 0-"
                                  f"{len(self._tabs) - 1})")
            self._active = a[0]
            self.page.bring_to_front()
            return
        if n == "close_tab":
            page = self.page
            if len(self._tabs) == 1:
                page.goto("about:blank")  # keep one tab open, as WebArena does
                return
            page.close()
            self._active = min(self._active, len(self._tabs) - 1)
            self.page.bring_to_front()
            return
        page = self.page
        if n == "goto":
            url = self.resolve_url(a[0])
            if not self.on_site(url):
                raise _AgentError(f"goto [{a[0]}]: only the site's pages ({self.base_url}/...) and about:blank can "
                                  "be opened")
            resp = page.goto(url, wait_until="load")
            if resp is None and not page.url.startswith("about:"):
                raise _AgentError(f"goto [{a[0]}]: navigation failed")
        elif n == "go_back":
            page.go_back(wait_until="load")
        elif n == "go_forward":
            page.go_forward(wait_until="load")
        elif n == "scroll":
            page.evaluate(_SCROLL_JS, 1 if a[0] == "down" else -1)
        elif n == "scroll_by":
            page.evaluate("([dx, dy]) => window.scrollBy(dx, dy)", [a[0], a[1]])
        elif n == "press":
            self._with_navigation(page, lambda: page.keyboard.press(a[0]))
        elif n == "click":
            loc = self._element(page, a[0])
            self._with_navigation(page, loc.click)
        elif n == "hover":
            self._element(page, a[0]).hover()
        elif n == "press_on":
            loc = self._element(page, a[0])
            self._with_navigation(page, lambda: loc.press(a[1]))
        elif n == "select_option":
            self._select(self._element(page, a[0]), a[1])
        elif n == "type":
            loc = self._element(page, a[0])
            tag = loc.evaluate("e => e.tagName.toLowerCase()")
            if tag == "select":
                self._select(loc, a[1])
            else:
                loc.fill(a[1])
            if a[2]:
                self._with_navigation(page, lambda: loc.press("Enter"))
        else:  # pragma: no cover - parse_action only produces known names
            raise _AgentError(f"action {n!r} is not supported by the browser")
        self._settle(self.page)

    @staticmethod
    def _with_navigation(page, fn) -> None:
        """Run ``fn`` (a click or key press); if it starts a main-frame navigation within NAVIGATION_GRACE_S
        (e.g. Enter submitting a form), wait until the new document has committed and loaded."""
        seen = {"request": False, "committed": False}

        def on_request(req):
            if req.is_navigation_request() and req.frame == page.main_frame:
                seen["request"] = True

        def on_nav(frame):
            if frame == page.main_frame:
                seen["committed"] = True

        page.on("request", on_request)
        page.on("framenavigated", on_nav)
        try:
            fn()
            deadline = time.monotonic() + NAVIGATION_GRACE_S
            while not seen["request"] and time.monotonic() < deadline:
                page.wait_for_timeout(15)
            if seen["request"]:
                deadline = time.monotonic() + NAVIGATION_TIMEOUT_MS / 1000
                while not seen["committed"] and time.monotonic() < deadline:
                    page.wait_for_timeout(15)
                page.wait_for_load_state("load")
        finally:
            page.remove_listener("request", on_request)
            page.remove_listener("framenavigated", on_nav)

    @staticmethod
    def _select(loc, value: str) -> None:
        tag = loc.evaluate("e => e.tagName.toLowerCase()")
        if tag != "select":
            raise _AgentError(f"element is a <{tag}>, not a <select>; use click or type instead")
        options = loc.evaluate("e => [...e.options].map(o => [o.value, o.label])")
        for val, label in options:
            if value in (val, label) or value.strip().lower() == label.strip().lower():
                loc.select_option(value=val)
                return
        raise _AgentError(f"no option {value!r} in this select; options are: " +
                          ", ".join(repr(lab) for _, lab in options))


# Playwright's sync API allows one driver per thread, so sessions of a thread share it (reference counted).
_PW_LOCAL = threading.local()


def _acquire_playwright(sync_playwright):
    if getattr(_PW_LOCAL, "count", 0) == 0:
        _PW_LOCAL.pw = sync_playwright().start()
        _PW_LOCAL.count = 0
    _PW_LOCAL.count += 1
    return _PW_LOCAL.pw


def _release_playwright() -> None:
    _PW_LOCAL.count -= 1
    if _PW_LOCAL.count == 0:
        try:
            _PW_LOCAL.pw.stop()
        finally:
            _PW_LOCAL.pw = None


class _AgentError(Exception):
    """An agent mistake reported back as ``last_action_error`` (never escapes ``execute``)."""


def _prop_value(p: dict):
    v = p.get("value", {})
    return v.get("value") if isinstance(v, dict) else v


def format_axtree(nodes: list[dict], bids: dict[int, str]) -> str:
    """Render CDP ``Accessibility.getFullAXTree`` nodes as WebArena-style text.

    Args:
        nodes: the ``nodes`` list of the CDP answer.
        bids: backendDOMNodeId -> element id (``data-bid``); nodes not in it are printed without an id.

    Returns:
        Lines ``<tabs>[id] role 'name' prop: value``; ignored nodes are skipped (their children are lifted);
        unnamed structural nodes without properties are dropped (WebArena's rule); a StaticText equal to its
        parent's name is dropped as a duplicate.
    """
    by_id = {n["nodeId"]: n for n in nodes}
    if not nodes:
        return ""
    root = nodes[0]
    lines: list[str] = []

    def visit(node: dict, depth: int, parent_name: str) -> None:
        role = (node.get("role") or {}).get("value", "")
        name = str((node.get("name") or {}).get("value", "") or "").strip()
        keep = not node.get("ignored", False) and role not in ("InlineTextBox", "")
        props = []
        if keep:
            for p in node.get("properties", []) or []:
                if p.get("name") in IGNORED_PROPERTIES:
                    continue
                val = _prop_value(p)
                if val in (None, "", False) and p.get("name") not in ("checked", "expanded", "selected"):
                    continue
                props.append(f"{p['name']}: {val}")
            value = node.get("value")
            if isinstance(value, dict) and value.get("value") not in (None, "") and role in (
                    "textbox", "searchbox", "combobox", "spinbutton", "slider"):
                props.insert(0, f"value: {value['value']!r}")
            if not name and not props and role in EMPTY_ROLES_DROPPED:
                keep = False
            if role == "StaticText" and (not name or name == parent_name):
                keep = False
        child_depth = depth
        if keep:
            bid = bids.get(node.get("backendDOMNodeId"))
            head = f"[{bid}] " if bid is not None and role not in ("StaticText", "RootWebArea", "ListMarker") else ""
            lines.append("\t" * depth + f"{head}{role} {name!r}" + (" " + " ".join(props) if props else ""))
            child_depth = depth + 1
        for cid in node.get("childIds", []) or []:
            child = by_id.get(cid)
            if child is not None:
                visit(child, child_depth, name if keep else parent_name)

    visit(root, 0, "")
    return "\n".join(lines)
