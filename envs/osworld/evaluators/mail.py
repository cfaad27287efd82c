"""OSWorld evaluators for Thunderbird's profile (prefs.js, message filters).

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).

Metrics:
  check_thunderbird_prefs   prefs.js: every rule["expect"] pref is set and matches its {"method", "ref"};
                            no rule["unexpect"] pref matches
  check_thunderbird_filter  msgFilterRules.dat: every rule["expect"] record ({"name", "enabled", "type",
                            "action", "actionValue", "condition": [terms]}, any subset) is one filter's;
                            no rule["unexpect"] record is
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from .metrics import match_value_to_rule, metric

_PREF = re.compile(r'user_pref\("((?:[^"\\]|\\.)+)", (.+)\);')


def _read_lines(path: str | None) -> list[str] | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None


def _prefs(path: str | None) -> dict[str, Any] | None:
    """prefs.js as {name: value}; None if unreadable or a value is not a JSON literal."""
    lines = _read_lines(path)
    if lines is None:
        return None
    prefs = {}
    for line in lines:
        m = _PREF.fullmatch(line.strip())
        if m is None:
            continue
        try:
            # Thunderbird writes names and values as JSON literals; raw tabs/newlines may stay in strings
            prefs[json.loads(f'"{m[1]}"', strict=False)] = json.loads(m[2], strict=False)
        except ValueError:
            return None
    return prefs


@metric
def check_thunderbird_prefs(result: str, rule: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> float:
    """rule {"expect": {pref: {"method", "ref"}}, "unexpect": {...}} on the prefs.js at `result`."""
    prefs = _prefs(result)
    if prefs is None:
        return 0.0
    expect, unexpect = rule.get("expect", {}), rule.get("unexpect", {})
    if not all(name in prefs and match_value_to_rule(prefs[name], r) for name, r in expect.items()):
        return 0.0
    return float(not any(name in prefs and match_value_to_rule(prefs[name], r) for name, r in unexpect.items()))


_ATTR = re.compile(r'(\w+)="(.*)"')
# one search term: `AND|OR (attribute,relation,value)`, the value possibly quoted with \-escapes; or ALL
_TERM = re.compile(r'\b(?:AND|OR) \([^,()]*,[^,()]*,(?:"(?:[^"\\]|\\.)*"|[^)]*)\)|\bALL\b')


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def _filter_records(path: str | None) -> list[dict[str, Any]] | None:
    """msgFilterRules.dat as records, one per (filter, action): name, enabled, type, action, actionValue
    (if that action has one) and condition (its search terms as written)."""
    lines = _read_lines(path)
    if lines is None:
        return None
    filters: list[dict[str, Any]] = []
    for line in lines:
        m = _ATTR.fullmatch(line.strip())
        if m is None:
            continue
        key, value = m[1], _unescape(m[2])
        if key == "name":
            filters.append({"name": value, "actions": []})
        elif not filters:
            continue  # the file's header (version, logging)
        elif key == "action":
            filters[-1]["actions"].append({"action": value})
        elif key == "actionValue" and filters[-1]["actions"]:
            filters[-1]["actions"][-1]["actionValue"] = value
        elif key == "condition":
            filters[-1]["condition"] = _TERM.findall(value)
        elif key in ("enabled", "type"):
            filters[-1][key] = value
    records = []
    for flt in filters:
        shared = {k: v for k, v in flt.items() if k != "actions"}
        records.extend({**shared, **action} for action in flt["actions"] or [{}])
    return records


def _is_record(pattern: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    return all(k in record and record[k] == v for k, v in pattern.items())


@metric
def check_thunderbird_filter(result: str, rules: Mapping[str, list[Mapping[str, Any]]]) -> float:
    """rules {"expect": [record], "unexpect": [record]} on the msgFilterRules.dat at `result`; a filter with
    several actions matches a record through any one of them."""
    records = _filter_records(result)
    if records is None:
        return 0.0
    if not all(any(_is_record(p, r) for r in records) for p in rules.get("expect", [])):
        return 0.0
    return float(not any(_is_record(p, r) for p in rules.get("unexpect", []) for r in records))
