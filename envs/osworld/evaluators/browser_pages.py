"""OSWorld's metrics for Chromium's pages: a page's HTML, the active tab's URL, a Speedtest export.

Judge-only (envs/osworld/.workspace-exclude keeps evaluators/ out of every workspace): registers its metrics
in metrics.METRICS (imported by evaluators/__init__); the getters whose values they compare are in
getters/browser_pages.py.

Metrics:
    is_added_to_steam_cart              every rule["items"] string is in the page's HTML (page_info's "content")
    is_expected_search_query            rules["expect"]["pattern"] is found (re.search) in the active tab's URL
    compare_time_in_speedtest_results   a Speedtest CSV export's first result is under time_diff minutes old (HH:MM)

Owns: comparing what those getters read with the task's rules; the relative-time rules are judge_getters.py's.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Mapping

from .metrics import metric
from ..getters.browser_pages import _need


# ----------------------------------------------------------------------------------------------------
# metrics


@metric
def is_added_to_steam_cart(active_tab_info: Any, rule: Mapping[str, Any]) -> float:
    """Every rule["items"] string occurs in the page's HTML (active_tab_info["content"], as page_info gives)."""
    items = _need(rule, "items", "is_added_to_steam_cart")
    content = active_tab_info.get("content") if isinstance(active_tab_info, Mapping) else None
    if not isinstance(content, str):
        return 0.0
    return float(all(item in content for item in items))


@metric
def is_expected_search_query(active_tab_info: Any, rules: Mapping[str, Any]) -> float:
    """rules["expect"]["pattern"] is found (re.search) in the active tab's URL (a dict with "url", or a string)."""
    pattern = _need(_need(rules, "expect", "is_expected_search_query"), "pattern", "is_expected_search_query")
    if not active_tab_info:
        return 0.0
    url = active_tab_info.get("url") if isinstance(active_tab_info, Mapping) else active_tab_info
    return float(isinstance(url, str) and re.search(pattern, url) is not None)


def _minutes_apart(a: dt.time, b: dt.time) -> int:
    """Minutes between two clock times, the short way round midnight."""
    d = abs((a.hour * 60 + a.minute) - (b.hour * 60 + b.minute))
    return min(d, 24 * 60 - d)


@metric
def compare_time_in_speedtest_results(speedtest_result_path: str | None, time_diff: Any) -> float:
    """The first result row of a Speedtest CSV export (its second field ends in HH:MM) is less than time_diff
    minutes from the current local time."""
    if not speedtest_result_path:
        return 0.0
    try:
        limit = int(time_diff)
        with open(speedtest_result_path, encoding="utf-8", errors="replace") as f:
            f.readline()
            when = dt.datetime.strptime(f.readline().split(",")[1][-5:], "%H:%M").time()
    except (OSError, ValueError, IndexError, TypeError):
        return 0.0
    return float(_minutes_apart(when, dt.datetime.now().time()) < limit)
