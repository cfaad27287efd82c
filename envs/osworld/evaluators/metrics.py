"""Metric functions under OSWorld's names and signatures: (result, expected/rules, **options) -> float in [0, 1].

Own implementations (openpyxl, pandas, python-docx, odfpy, rapidfuzz, lxml); a differential test
(tests/osworld/test_metric_differential.py) checks they agree with OSWorld's `desktop-env` on the same inputs.
A metric never raises for a bad *result* (missing file, unreadable document → 0.0); a malformed *task*
(unknown rule type, missing rule key) raises EvaluatorError naming the problem.

Registered in METRICS (name → function):
  text / values: exact_match, match_in_list, is_in_list, literal_match, check_include_exclude, fuzzy_match,
                 check_direct_json_object (subset), infeasible is handled by evaluate()
  files:         compare_text_file, diff_text_file, file_contains, check_list, check_json, compare_csv,
                 check_csv
  office:        compare_table (rules sheet_name, sheet_data, sheet_print-free subset, check_cell,
                 sheet_fuzzy), compare_docx_files, compare_docx_tables
  settings:      check_json_settings, compare_config, is_extension_installed, check_config_status
  browser:       is_expected_active_tab, is_expected_tabs, is_expected_url_pattern_match
  a11y:          check_accessibility_tree
"""

from __future__ import annotations

import csv
import difflib
import json
import operator
import os
import re
from typing import Any, Callable, Iterable, Mapping

from ..errors import EvaluatorError
from ..urls import compare_urls  # noqa: F401  (metrics' public name; setup uses it too)

__all__ = ["METRICS", "metric", "compare_urls", "match_value_to_rule"]

METRICS: dict[str, Callable[..., float]] = {}


def metric(fn: Callable[..., float]) -> Callable[..., float]:
    """Register a metric under its function name (duplicates are a programming error)."""
    if fn.__name__ in METRICS:
        raise EvaluatorError(f"metric {fn.__name__!r} registered twice")
    METRICS[fn.__name__] = fn
    return fn


def _read_text(path: str) -> str | None:
    if not path or not os.path.isfile(path):
        return None
    for enc in ("utf-8", "utf-8-sig", "latin-1"):
        try:
            with open(path, encoding=enc) as f:
                return f.read()
        except UnicodeDecodeError:
            continue
    return None


def _rule(rules: Any, key: str, metric_name: str) -> Any:
    if not isinstance(rules, Mapping) or key not in rules:
        raise EvaluatorError(f"{metric_name}: the expected/rules object must have key {key!r}; got {rules!r:.100}")
    return rules[key]


# ----------------------------------------------------------------------------------------------------
# values


@metric
def exact_match(result: Any, rules: Mapping[str, Any]) -> float:
    """1.0 iff result == rules["expected"]."""
    return float(result == _rule(rules, "expected", "exact_match"))


@metric
def match_in_list(result: Any, rules: Mapping[str, Any]) -> float:
    """1.0 iff result is one of rules["expected"] (a list)."""
    return float(result in _rule(rules, "expected", "match_in_list"))


@metric
def is_in_list(result: Any, rules: Mapping[str, Any]) -> float:
    """1.0 iff rules["expected"] is contained in result (a list or a string)."""
    if result is None:
        return 0.0
    try:
        return float(_rule(rules, "expected", "is_in_list") in result)
    except TypeError:
        return 0.0


@metric
def literal_match(result: Any, expected: Any, **options: Any) -> float:
    """String (type="str", default) or list (type="list") equality, optional ignore_case."""
    kind = options.get("type", "str")
    fold = (lambda s: str(s).lower()) if options.get("ignore_case", False) else str
    if kind == "str":
        return float(fold(result) == fold(expected))
    if kind == "list":
        if not isinstance(result, (list, tuple)) or not isinstance(expected, (list, tuple)):
            return 0.0
        return float([fold(x) for x in result] == [fold(x) for x in expected])
    raise EvaluatorError(f"literal_match: option type={kind!r} unsupported; use 'str' or 'list'")


@metric
def check_include_exclude(result: Any, rules: Mapping[str, Any]) -> float:
    """1.0 iff every rules["include"] string is in result and no rules["exclude"] string is."""
    if result is None:
        return 0.0
    inc = rules.get("include", []) if isinstance(rules, Mapping) else []
    exc = rules.get("exclude", []) if isinstance(rules, Mapping) else []
    return float(all(s in result for s in inc) and not any(s in result for s in exc))


@metric
def fuzzy_match(result: Any, rules: Mapping[str, Any]) -> float:
    """rapidfuzz ratio(result, rules["expected"]) / 100."""
    from rapidfuzz import fuzz
    if result is None:
        return 0.0
    return fuzz.ratio(result, _rule(rules, "expected", "fuzzy_match")) / 100.0


def match_value_to_rule(value: Any, rule: Mapping[str, Any]) -> bool:
    """One {"method", "ref"} rule: re[.FLAG...], eq/ne/lt/le/gt/ge, approx:TOL, range.XY [lo, hi]."""
    method = _rule(rule, "method", "rule")
    ref = rule.get("ref")
    if method.startswith("re"):
        flags = 0
        for name in method.split(".")[1:]:
            flags |= getattr(re, name)
        try:
            return re.search(ref, value, flags) is not None
        except TypeError:
            return False
    if method in ("eq", "ne", "lt", "le", "gt", "ge"):
        try:
            return bool(getattr(operator, method)(value, ref))
        except TypeError:
            return False
    if method.startswith("approx"):
        try:
            tol = float(method.split(":", 1)[1])
            return abs(float(value) - float(ref)) <= tol
        except (TypeError, ValueError, IndexError):
            return False
    if method.startswith("range.") and len(method) == 8:
        lo_op = {"t": operator.lt, "e": operator.le}[method[6]]
        hi_op = {"t": operator.lt, "e": operator.le}[method[7]]
        try:
            return bool(lo_op(ref[0], value) and hi_op(value, ref[1]))
        except TypeError:
            return False
    raise EvaluatorError(f"unknown rule method {method!r}; use re, eq, ne, lt, le, gt, ge, approx:TOL or range.XY")


@metric
def check_direct_json_object(result: Any, rules: Mapping[str, Any]) -> float:
    """result (a dict) has every key of rules["expected"] with the same value (strings compared trimmed)."""
    if not isinstance(result, Mapping):
        return 0.0
    expected = _rule(rules, "expected", "check_direct_json_object")
    for k, v in expected.items():
        if k not in result:
            return 0.0
        a, b = result[k], v
        if isinstance(a, str) and isinstance(b, str):
            a, b = a.strip(), b.strip()
        if a != b:
            return 0.0
    return 1.0


# ----------------------------------------------------------------------------------------------------
# files


@metric
def compare_text_file(actual: str, expected: str, **options: Any) -> float:
    """Whole-file text equality; options ignore_blanks (collapse whitespace), ignore_case."""
    a, e = _read_text(actual), _read_text(expected)
    if a is None or e is None:
        return 0.0
    if options.get("ignore_blanks", False):
        a = re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", a).strip())
        e = re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", e).strip())
    if options.get("ignore_case", False):
        a, e = a.lower(), e.lower()
    return float(a == e)


@metric
def diff_text_file(result: str, expect: str) -> float:
    """Similarity of the two files' line lists (difflib ratio; 1.0 = identical lines)."""
    a, e = _read_text(result), _read_text(expect)
    if a is None or e is None:
        return 0.0
    return difflib.SequenceMatcher(a=a.splitlines(), b=e.splitlines()).ratio()


@metric
def file_contains(file_path: str, config: Mapping[str, Any]) -> float:
    """1.0 iff the file contains every string of config["expected"]."""
    text = _read_text(file_path)
    if text is None:
        return 0.0
    return float(all(s in text for s in _rule(config, "expected", "file_contains")))


@metric
def check_list(result: str, rules: Mapping[str, Any]) -> float:
    """Every rules["expect"] regex matches some line; no rules["unexpect"] regex matches any line."""
    text = _read_text(result)
    if text is None:
        return 0.0
    lines = text.splitlines(keepends=True)
    expect = [re.compile(p) for p in rules.get("expect", [])]
    unexpect = [re.compile(p) for p in rules.get("unexpect", [])]
    ok = all(any(p.search(l) for l in lines) for p in expect)
    return float(ok and not any(p.search(l) for p in unexpect for l in lines))


@metric
def check_json(result: str, rules: Mapping[str, Any], is_yaml: bool = False) -> float:
    """JSON (or YAML) file checks: rules {"expect": [{"key": [...], "method", "ref"}], "unexpect": [...]}."""
    text = _read_text(result)
    if text is None:
        return 0.0
    try:
        if is_yaml:
            import yaml
            data = yaml.safe_load(text)
            if data is None:
                return 0.0
        else:
            data = json.loads(text)
    except Exception:
        return 0.0

    def dig(keys: Iterable[Any]) -> tuple[bool, Any]:
        v = data
        for k in keys:
            try:
                v = v[k]
            except (KeyError, IndexError, TypeError):
                return False, None
        return True, v

    for r in rules.get("expect", []):
        found, v = dig(r["key"])
        if not found or not match_value_to_rule(v, r):
            return 0.0
    for r in rules.get("unexpect", []):
        found, v = dig(r["key"])
        if match_value_to_rule(v if found else None, r):
            return 0.0
    return 1.0


@metric
def compare_csv(result: str, expected: str | list[str], **options: Any) -> float:
    """Line-by-line CSV equality with any of the expected files; options strict (default True), ignore_case."""
    r = _read_text(result)
    if r is None:
        return 0.0
    for exp in ([expected] if isinstance(expected, str) else list(expected or [])):
        e = _read_text(exp)
        if e is None:
            continue
        a, b = r.splitlines(), e.splitlines()
        if not options.get("strict", True):
            a, b = [x.strip() for x in a], [x.strip() for x in b]
        if options.get("ignore_case", False):
            a, b = [x.lower() for x in a], [x.lower() for x in b]
        if a == b:
            return 1.0
    return 0.0


@metric
def check_csv(result: str, rules: Mapping[str, Any]) -> float:
    """Every rules["expect"] record (dict of column → value) matches some row; no "unexpect" record does."""
    text = _read_text(result)
    if text is None:
        return 0.0
    rows = list(csv.DictReader(text.splitlines()))

    def matches(row: Mapping[str, str], rec: Mapping[str, Any]) -> bool:
        return all(row.get(k) == v for k, v in rec.items())

    ok = all(any(matches(row, rec) for row in rows) for rec in rules.get("expect", []))
    return float(ok and not any(matches(row, rec) for row in rows for rec in rules.get("unexpect", [])))


# ----------------------------------------------------------------------------------------------------
# spreadsheets


class _Book:
    """A result/expected workbook opened two ways: openpyxl (cached values) and pandas (sheet frames)."""

    def __init__(self, path: str):
        import openpyxl
        import pandas as pd
        self.path = path
        self.xl = openpyxl.load_workbook(path, data_only=True)
        self.pd = pd.ExcelFile(path)
        self.names = list(self.pd.sheet_names)


def _sheet_ref(idx: Any, result: _Book, expected: _Book | None) -> tuple[_Book | None, str | None]:
    """OSWorld sheet index: int (result by position), "RI<n>", "RN<name>", "EI<n>", "EN<name>"."""
    def pos(book: _Book | None, n: int) -> str | None:
        return book.names[n] if book is not None and 0 <= n < len(book.names) else None
    if isinstance(idx, int) and not isinstance(idx, bool):
        return result, pos(result, idx)
    if isinstance(idx, str) and len(idx) > 2 and idx[:2] in ("RI", "RN", "EI", "EN"):
        book = result if idx[0] == "R" else expected
        if idx[1] == "N":
            return book, idx[2:]
        try:
            return book, pos(book, int(idx[2:]))
        except ValueError:
            return book, None
    raise EvaluatorError(f"compare_table: sheet index {idx!r} not understood; use 0, 'RI0', 'RNSheet1', "
                         "'EI0' or 'ENSheet1'")


def _frame(book: _Book | None, name: str | None):
    if book is None or name is None or name not in book.names:
        return None
    import pandas as pd
    return pd.read_excel(book.pd, name)


def _cell_value(book: _Book | None, name: str | None, coord: str) -> Any:
    if book is None or name is None or name not in book.xl.sheetnames:
        return None
    v = book.xl[name][coord].value
    if isinstance(v, float) and v.is_integer():
        return v  # keep floats as floats (OSWorld reads numbers as float)
    if isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    return v


@metric
def compare_table(result: str, expected: str | None = None, **options: Any) -> float:
    """Spreadsheet checks by OSWorld's sequential rules (all must pass).

    options["rules"]: list of
        {"type": "sheet_name"}                                    same sheet names in the same order
        {"type": "sheet_data", "sheet_idx0", "sheet_idx1", "precision"?}   equal values (rounded)
        {"type": "check_cell", "sheet_idx", "coordinate", "props": {"value": {"method", "ref"}}}
        {"type": "sheet_fuzzy", "sheet_idx0", "sheet_idx1", "rules": [{"range": [...], "type": "exact_match" |
            "includes" | "included_by" | "fuzzy_match", "threshold"?, "ignore_case"?, ...}]}
    Without rules: every sheet of result equals the same-position sheet of expected (values).
    """
    if not result or not os.path.isfile(result):
        return 0.0
    try:
        rbook = _Book(result)
    except Exception:
        return 0.0
    ebook = _Book(expected) if expected else None
    rules = options.get("rules")
    if rules is None:
        if ebook is None or rbook.names != ebook.names:
            return 0.0
        rules = [{"type": "sheet_data", "sheet_idx0": f"RI{i}", "sheet_idx1": f"EI{i}"} for i in range(len(rbook.names))]
    for r in rules:
        t = r.get("type")
        if t == "sheet_name":
            ok = ebook is not None and rbook.names == ebook.names
        elif t == "sheet_data":
            prec = r.get("precision", 4)
            a = _frame(*_sheet_ref(r["sheet_idx0"], rbook, ebook))
            if a is None:
                return 0.0
            b = _frame(*_sheet_ref(r["sheet_idx1"], rbook, ebook))
            ok = b is not None and a.round(prec).equals(b.round(prec))
        elif t == "check_cell":
            book, name = _sheet_ref(r["sheet_idx"], rbook, ebook)
            if book is None or name is None or name not in book.xl.sheetnames:
                return 0.0
            ok = True
            for prop, rule in r["props"].items():
                if prop != "value":
                    raise EvaluatorError(f"compare_table check_cell: property {prop!r} unsupported here; "
                                         "only 'value' is implemented")
                ok = ok and match_value_to_rule(_cell_value(book, name, r["coordinate"]), rule)
        elif t == "sheet_fuzzy":
            ok = _sheet_fuzzy(r, rbook, ebook)
        else:
            raise EvaluatorError(f"compare_table: rule type {t!r} unsupported; supported: sheet_name, sheet_data, "
                                 "check_cell, sheet_fuzzy")
        if not ok:
            return 0.0
    return 1.0


def _sheet_fuzzy(r: Mapping[str, Any], rbook: _Book, ebook: _Book | None) -> bool:
    from openpyxl.utils import range_boundaries, get_column_letter
    from rapidfuzz import fuzz
    s1 = _sheet_ref(r["sheet_idx0"], rbook, ebook)
    s2 = _sheet_ref(r["sheet_idx1"], rbook, ebook)
    for rl in r["rules"]:
        ranges = rl["range"] if isinstance(rl["range"], list) else str(rl["range"]).split()
        for rng in ranges:
            c0, r0, c1, r1 = range_boundaries(rng)
            for row in range(r0, r1 + 1):
                for col in range(c0, c1 + 1):
                    coord = f"{get_column_letter(col)}{row}"
                    v1, v2 = str(_fuzzy_cell(*s1, coord)), str(_fuzzy_cell(*s2, coord))
                    for a, b in rl.get("normalization", []):
                        v1, v2 = v1.replace(a, b), v2.replace(a, b)
                    if "trim_leadings" in rl:
                        v1, v2 = v1.lstrip(rl["trim_leadings"]), v2.lstrip(rl["trim_leadings"])
                    if "trim_trailings" in rl:
                        v1, v2 = v1.rstrip(rl["trim_trailings"]), v2.rstrip(rl["trim_trailings"])
                    if "ignore_chars" in rl:
                        drop = set(rl["ignore_chars"])
                        v1 = "".join(c for c in v1 if c not in drop)
                        v2 = "".join(c for c in v2 if c not in drop)
                    if rl.get("ignore_case", False):
                        v1, v2 = v1.lower(), v2.lower()
                    kind = rl["type"]
                    if kind == "includes":
                        ok = v2 in v1
                    elif kind == "included_by":
                        ok = v1 in v2
                    elif kind == "fuzzy_match":
                        ok = fuzz.ratio(v1, v2) >= rl.get("threshold", 85.0)
                    elif kind == "exact_match":
                        ok = v1 == v2
                    else:
                        raise EvaluatorError(f"sheet_fuzzy: rule type {kind!r} unsupported")
                    if not ok:
                        return False
    return True


def _fuzzy_cell(book: _Book | None, name: str | None, coord: str) -> Any:
    v = _cell_value(book, name, coord)
    if isinstance(v, float) and v.is_integer():
        return v
    return v


# ----------------------------------------------------------------------------------------------------
# documents


def _paragraphs(path: str) -> list[str] | None:
    if path.endswith(".docx"):
        from docx import Document
        try:
            return [p.text for p in Document(path).paragraphs]
        except Exception:
            return None
    if path.endswith(".odt"):
        try:
            from odf.opendocument import load
            from odf.text import P
            doc = load(path)
        except Exception:
            return None
        out = []
        for p in doc.getElementsByType(P):
            parts = []
            for node in p.childNodes:
                if node.nodeType == node.TEXT_NODE:
                    parts.append(node.data)
                elif node.nodeType == node.ELEMENT_NODE and node.tagName == "text:span":
                    parts.extend(c.data for c in node.childNodes if c.nodeType == c.TEXT_NODE)
            out.append("".join(parts))
        return out
    return None


@metric
def compare_docx_files(file1: str, file2: str, **options: Any) -> float:
    """Paragraph text of two .docx (or two .odt) files.

    Options: ignore_blanks (default True: whole text with whitespace collapsed), ignore_case, ignore_order,
    content_only (fuzzy ratio of whole texts), fuzzy_match, delete_empty_lines.
    """
    from rapidfuzz import fuzz
    if not file1 or not file2 or os.path.splitext(file1)[1] != os.path.splitext(file2)[1]:
        return 0.0
    p1, p2 = _paragraphs(file1), _paragraphs(file2)
    if p1 is None or p2 is None:
        return 0.0
    if options.get("ignore_order", False):
        p1, p2 = sorted(p1), sorted(p2)
    if options.get("delete_empty_lines", False):
        p1, p2 = [p for p in p1 if p.strip()], [p for p in p2 if p.strip()]
    case = options.get("ignore_case", False)

    def whole(ps: list[str]) -> str:
        t = re.sub(r"\s+", " ", "\n".join(ps)).strip()
        return t.lower() if case else t

    if options.get("content_only", False):
        return fuzz.ratio(whole(p1), whole(p2)) / 100.0
    if options.get("ignore_blanks", True):
        if options.get("fuzzy_match", False):
            return fuzz.ratio(whole(p1), whole(p2)) / 100.0
        return float(whole(p1) == whole(p2))
    if len(p1) != len(p2):
        return 0.0
    if case:
        p1, p2 = [p.lower() for p in p1], [p.lower() for p in p2]
    if options.get("fuzzy_match", False):
        return 1.0 if not p1 else sum(fuzz.ratio(a, b) / 100.0 for a, b in zip(p1, p2)) / len(p1)
    return float(p1 == p2)


@metric
def compare_docx_tables(file1: str, file2: str) -> float:
    """Every table of two .docx files: the same count, shape and cell texts (stripped)."""
    from docx import Document

    if not file1 or not file2:
        return 0.0
    try:
        t1, t2 = Document(file1).tables, Document(file2).tables
    except Exception:  # noqa: BLE001 - an unreadable result scores 0
        return 0.0

    def cells(table) -> list[list[str]]:
        return [[c.text.strip() for c in row.cells] for row in table.rows]

    return float(len(t1) == len(t2) and all(
        len(a.rows) == len(b.rows) and len(a.columns) == len(b.columns) and cells(a) == cells(b)
        for a, b in zip(t1, t2)))


# ----------------------------------------------------------------------------------------------------
# application settings files


def _read_text(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


@metric
def check_json_settings(actual: str, expected: Mapping[str, Any], **options: Any) -> float:
    """A JSON settings file (VS Code's settings.json) holds every key of expected["expected"] with that value."""
    text = _read_text(actual)
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return 0.0
    if not isinstance(data, dict):
        return 0.0
    want = _need(expected, "expected", "check_json_settings")
    return float(all(k in data and data[k] == v for k, v in want.items()))


@metric
def compare_config(actual: str, rules: Mapping[str, Any], **options: Any) -> float:
    """A file's whole text equals rules["expected"]."""
    text = _read_text(actual)
    return float(text is not None and text == _need(rules, "expected", "compare_config"))


@metric
def is_extension_installed(actual: str, rules: Mapping[str, Any], **options: Any) -> float:
    """rules["expected"] is ("contain") or is not ("not_contain") a substring of a listing (e.g. `code
    --list-extensions`)."""
    kind, want = _need(rules, "type", "is_extension_installed"), _need(rules, "expected", "is_extension_installed")
    if kind not in ("contain", "not_contain"):
        raise EvaluatorError(f"is_extension_installed: rules.type must be 'contain' or 'not_contain', not {kind!r}")
    if not isinstance(actual, str):
        return 0.0
    return float((want in actual) == (kind == "contain"))


@metric
def check_config_status(actual_config_path: str, rule: Mapping[str, Any]) -> float:
    """A GIMP-style config file (`(key [subkey] ... value)` lines, # comments) has a line whose key (or
    [key, subkey]) is rule["key"] and whose last item is rule["value"]."""
    text = _read_text(actual_config_path)
    if text is None:
        return 0.0
    key, value = _need(rule, "key", "check_config_status"), _need(rule, "value", "check_config_status")
    keys = [key] if isinstance(key, str) else list(key)
    if not 1 <= len(keys) <= 2:
        raise EvaluatorError(f"check_config_status: rule.key must be a string or [key, subkey], not {key!r}")
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        items = line.strip().lstrip("(").rstrip(")").split()
        if len(items) >= len(keys) and items[:len(keys)] == keys and items[-1] == value:
            return 1.0
    return 0.0


def _need(rules: Any, key: str, metric_name: str) -> Any:
    if not isinstance(rules, Mapping) or key not in rules:
        raise EvaluatorError(f"{metric_name}: the task's rules need {key!r}; found {rules!r:.80}")
    return rules[key]


# ----------------------------------------------------------------------------------------------------
# browser


@metric
def is_expected_active_tab(active_tab_info: Any, rule: Mapping[str, Any]) -> float:
    """rule {"type": "url", "url"}: the active tab's URL (dict with 'url', or a string) matches."""
    if not active_tab_info:
        return 0.0
    if rule.get("type") != "url":
        raise EvaluatorError(f"is_expected_active_tab: rule type {rule.get('type')!r} unsupported; use 'url'")
    actual = active_tab_info.get("url") if isinstance(active_tab_info, Mapping) else active_tab_info
    return float(compare_urls(rule["url"], actual))


@metric
def is_expected_tabs(open_tabs: Any, rule: Mapping[str, Any]) -> float:
    """rule {"type": "url", "urls": [...]}: the open tabs are exactly these URLs (any order)."""
    if not open_tabs:
        return 0.0
    if rule.get("type") != "url":
        raise EvaluatorError(f"is_expected_tabs: rule type {rule.get('type')!r} unsupported; use 'url'")
    expected = list(rule["urls"])
    actual = [t["url"] for t in open_tabs]
    if len(expected) != len(actual):
        return 0.0
    return float(all(any(compare_urls(e, a) for a in actual) for e in expected))


@metric
def is_expected_url_pattern_match(result: Any, rules: Mapping[str, Any]) -> float:
    """Every regex of rules["expected"] is found in the URL (result: dict with 'url' or a string)."""
    if not result:
        return 0.0
    url = result.get("url") if isinstance(result, Mapping) else result
    if not isinstance(url, str):
        return 0.0
    return float(all(re.search(p, url) for p in _rule(rules, "expected", "is_expected_url_pattern_match")))


# ----------------------------------------------------------------------------------------------------
# accessibility tree

A11Y_NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}


@metric
def check_accessibility_tree(result: str, rules: list[Mapping[str, Any]], osname: str = "ubuntu") -> float:
    """Each rule selects elements (xpath, or CSS `selectors`) and optionally compares their text
    (exact, or fuzzy ratio when exact is false); the score is the product of the rules' best matches."""
    from lxml import etree
    from rapidfuzz import fuzz
    try:
        from lxml.cssselect import CSSSelector
    except ImportError:
        CSSSelector = None
    if not result:
        return 0.0
    try:
        root = etree.fromstring(result.encode() if isinstance(result, str) else result)
    except etree.XMLSyntaxError:
        return 0.0
    score = 1.0
    for r in rules:
        if "xpath" in r:
            els = root.xpath(r["xpath"], namespaces=A11Y_NS)
        elif "selectors" in r:
            if CSSSelector is None:
                from ..errors import DependencyNotInstalled
                raise DependencyNotInstalled("check_accessibility_tree with CSS 'selectors' needs cssselect: "
                                             "pip install cssselect (or give the rule an 'xpath')")
            els = CSSSelector(", ".join(r["selectors"]), namespaces=A11Y_NS)(root)
        else:
            raise EvaluatorError("check_accessibility_tree: a rule needs 'xpath' or 'selectors'")
        if not els:
            return 0.0
        if "text" in r:
            if r.get("exact", True):
                best = max(float(e.text == r["text"]) for e in els)
            else:
                best = max(fuzz.ratio(r["text"], e.text or "") / 100.0 for e in els)
        else:
            best = 1.0
        score *= best
    return float(score)
