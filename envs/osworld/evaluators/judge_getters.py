"""The judge's own getters: values that come from the task's config and the host, never from a workspace.

Judge-only (envs/osworld/.workspace-exclude keeps evaluators/ out of every workspace); their names are
getters.common.JUDGE_GETTERS, which a workspace's osworld.collect refuses. Importing this module registers them
in getters.common.GETTERS of the judge's process.

Getters (session or judge.JudgeContext, config):
    cloud_file          {"path": url | [url], "dest", "multi"?, "gives"?} → a copy of the file the host downloaded
                        for the URL (tasks.downloaded_file; shipped gold files by name)
    rule                {"rules": any} → rules, unchanged
    rule_relativeTime   the rules with expected date formats ({DoW}, {Month}, ...) filled for relativeTime
    time_diff_range     config["diff_range_in_minutes"], unchanged

Owns: expected values (gold files, rules, relative dates). Does not own: comparing them (the metric modules).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from typing import Any, Callable, Mapping

from ..errors import EvaluatorError
from ..getters.browser_pages import _need
from ..getters.common import _multi, cache_dir, getter
from ..tasks import _thaw  # task configs arrive frozen (mapping proxies, tuples)

__all__ = ["fill_date_format", "resolve_relative_time"]


@getter("cloud_file")
def get_cloud_file(session, config: Mapping[str, Any]) -> Any:
    from ..tasks import downloaded_file

    def one(url: str, dest: str) -> str | None:
        src = downloaded_file(url, getattr(session, "downloads", {}))
        local = os.path.join(cache_dir(session), "expected-" + os.path.basename(dest))
        shutil.copyfile(src, local)
        return local
    return _multi(session, config, one)


@getter("rule")
def get_rule(session, config: Mapping[str, Any]) -> Any:
    if "rules" not in config:
        raise EvaluatorError("getter 'rule' needs a 'rules' field")
    return config["rules"]


# ----------------------------------------------------------------------------------------------------
# relative dates (pure: the rules and today's date)

# explicit English names: strftime's %a / %B follow the process locale
_DAY_ABBR = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
                "October", "November", "December")


def fill_date_format(fmt: str, day: dt.date) -> str:
    """OSWorld's date placeholders, each filled once (its first occurrence): {DoW} Mon, {Month} Jan,
    {MonthFull} January, {month} january, {MonthD} 1, {Month0D} 01, {DayD} 5, {Day0D} 05, {Year} 2026."""
    name = _MONTH_NAMES[day.month - 1]
    for token, value in (("{DoW}", _DAY_ABBR[day.weekday()]), ("{Month}", name[:3]), ("{DayD}", str(day.day)),
                         ("{Year}", str(day.year)), ("{Month0D}", f"{day.month:02d}"), ("{month}", name.lower()),
                         ("{MonthFull}", name), ("{Day0D}", f"{day.day:02d}"), ("{MonthD}", str(day.month))):
        fmt = fmt.replace(token, value, 1)
    return fmt


def _add_months(day: dt.date, months: int, day_of_month: int) -> dt.date:
    index = day.year * 12 + day.month - 1 + months
    return dt.date(index // 12, index % 12 + 1, day_of_month)


def _first_monday(day: dt.date, months_later: int) -> dt.date:
    first = _add_months(day, months_later, 1)
    return first + dt.timedelta(days=-first.weekday() % 7)


def _ahead(weekday: int, *, week_after: bool = False) -> Callable[[dt.date], dt.date]:
    """The next `weekday` after today (a week on when today is that day), or that weekday of next week."""
    def day(today: dt.date) -> dt.date:
        if week_after:
            return today + dt.timedelta(days=7 - today.weekday() + weekday)
        return today + dt.timedelta(days=(weekday - today.weekday() - 1) % 7 + 1)
    return day


def _this_week(weekday: int) -> Callable[[dt.date], dt.date]:
    return lambda today: today + dt.timedelta(days=weekday - today.weekday())


# Each expression as OSWorld's getter computes it from today; "next X" is the coming X (a week on when today
# is X), "this X" is X of the current Monday-based week (even when it has passed), "next week X" is X of the
# following week.
_RELATIVE_DAYS: dict[str, Callable[[dt.date], dt.date]] = {
    "tomorrow": lambda today: today + dt.timedelta(days=1),
    "this month": lambda today: today,
    "5th next month": lambda today: _add_months(today, 1, 5),
    "10th next month": lambda today: _add_months(today, 1, 10),
    "11th next month": lambda today: _add_months(today, 1, 11),
    "this Saturday": _this_week(5),
    "this Sunday": _this_week(6),
    "next Monday": _ahead(0),
    "next Monday split": _ahead(0),
    "next Friday": _ahead(4),
    "next Friday split": _ahead(4),
    "next Saturday": _ahead(5),
    "next Sunday": _ahead(6),
    "next week Friday": _ahead(4, week_after=True),
    "next week Saturday": _ahead(5, week_after=True),
    "next week Sunday": _ahead(6, week_after=True),
    "first monday four months later": lambda today: _first_monday(today, 4),
    "first monday eight months later": lambda today: _first_monday(today, 8),
}
# end → the starts after which it means that Friday / Sunday of the start day's own week
_SAME_WEEK_ENDS = {
    "next Friday": ("next Monday", "next Monday split"),
    "next Friday split": ("next Monday", "next Monday split"),
    "next Sunday": ("next Friday", "next Saturday"),
    "next week Sunday": ("next week Friday", "next week Saturday"),
}
_SPLIT_KEYS = {"next Monday split": ("puDay", "puMonth", "puYear"), "next Friday split": ("doDay", "doMonth", "doYear")}


def _relative_day(expr: Any, today: dt.date) -> dt.date:
    if expr not in _RELATIVE_DAYS:
        raise EvaluatorError(f"rule_relativeTime: relative time {expr!r} unknown; known: {', '.join(_RELATIVE_DAYS)}")
    return _RELATIVE_DAYS[expr](today)


def resolve_relative_time(rules: Mapping[str, Any], today: dt.date) -> dict:
    """A copy of `rules` whose rules["expected"] date formats are filled for the days rules["relativeTime"] names:
    "time" for a lone "from"; "from" and "to" for a range (a "... split" end fills its Day/Month/Year keys)."""
    relative = _need(rules, "relativeTime", "rule_relativeTime")
    start = _need(relative, "from", "rule_relativeTime relativeTime")
    out = _thaw(rules)
    expected = _need(out, "expected", "rule_relativeTime")

    def fill(key: str, day: dt.date) -> None:
        expected[key] = fill_date_format(_need(expected, key, "rule_relativeTime expected"), day)

    start_day = _relative_day(start, today)
    if "to" not in relative:
        fill("time", start_day)
        return out
    end = relative["to"]
    if end in _SAME_WEEK_ENDS and start in _SAME_WEEK_ENDS[end]:
        end_day = start_day + dt.timedelta(days=(4 if end.startswith("next Friday") else 6) - start_day.weekday())
    else:
        end_day = _relative_day(end, today)
    for expr, day, key in ((start, start_day, "from"), (end, end_day, "to")):
        for k in _SPLIT_KEYS.get(expr, (key,)):
            fill(k, day)
    return out


def _today(rules: Mapping[str, Any]) -> dt.date:
    """Today in rules["timezone"] (UTC if unknown, as OSWorld); without one, the desktop's own time zone (OSWorld
    asks an IP-geolocation service for the VM's)."""
    name = rules.get("timezone") if isinstance(rules, Mapping) else None
    if name is None:
        return dt.datetime.now().astimezone().date()
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    try:
        zone = ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        zone = dt.timezone.utc
    return dt.datetime.now(zone).date()


@getter("rule_relativeTime")
def get_rule_relativeTime(session, config: Mapping[str, Any]) -> dict:
    rules = _need(config, "rules", "rule_relativeTime")
    return resolve_relative_time(rules, _today(rules))


@getter("time_diff_range")
def get_time_diff_range(session, config: Mapping[str, Any]) -> Any:
    return _need(config, "diff_range_in_minutes", "time_diff_range")
