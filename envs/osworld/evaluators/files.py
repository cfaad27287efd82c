"""OSWorld's metrics for files of other kinds (PDF, archives, EPUB, HTML, MP3 tags, Python, SQLite) and for
VS Code's and the OS's settings.

Judge-only (envs/osworld/.workspace-exclude keeps evaluators/ out of every workspace): registers its metrics
in metrics.METRICS (imported by evaluators/__init__); the getters whose values they compare are in
getters/files.py.
OSWorld's names and signatures; a bad *result* scores 0.0, a malformed *task* raises EvaluatorError.

Metrics:
  compare_pdfs                     mean fuzzy ratio of the text of paired PDFs (pypdf, laid out as PyMuPDF does)
  compare_pdf_images               the PDFs' embedded images (pypdf) pair up by perceptual hash (distance <= 5)
  compare_archive                  two archives list the same entries (under option file_path) and each pair scores
                                   by the metric of option file_type (text, pdf, docx, ppt, image, csv, table, ...)
  compare_htmls                    two HTML files parse to the same element sequence (Beautiful Soup's view of
                                   lxml's parse: names, stripped text, attributes; option ignore_sdnum)
  check_pdf_pages                  a PDF's page count against rules {"relation": eq|ne|lt|le|gt|ge, "ref_value"}
  compare_epub                     mean line similarity of an EPUB's toc.ncx, content.opf and .html files
  check_mp3_meta                   an MP3's ID3 tags (EasyID3 names) each match a {"method", "ref"} rule
  check_line_number                the number of lines holding a time of day equals rules["expected"]
  fuzzy_place_math                 a .docx holds exactly three words, scored by their best fuzzy match
  compare_python_pure_text         two Python files equal once blank lines, trailing blanks and headers go
  run_sqlite3                      the first value of rules["sql"] run on an SQLite file
  check_python_file_by_test_suite  a test file's test function (option test_function_name) run in a subprocess
  compare_zip_files                two zips hold the same names and bytes (PDFs: text similarity >= 0.95)
  compare_result_files             a result file holds the expected number (1e-4) or the same text
  check_json_keybindings           VS Code's keybindings.json holds the entry rules["expected"]
  is_in_vm_clickboard              the clipboard text holds the expected string(s)
  check_gnome_favorite_apps        the GSettings favourite-apps list is the expected set
  is_utc_0                         `timedatectl status` shows a +0000 time zone
  check_text_enlarged              the text scaling factor is above 1
  check_moved_jpgs                 a directory listing is the expected set of names
"""

from __future__ import annotations

import ast
import difflib
import io
import json
import operator
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from typing import Any, Iterator, Mapping

from ..errors import EvaluatorError
from .metrics import METRICS, _read_text, _rule, match_value_to_rule, metric

# ----------------------------------------------------------------------------------------------------
# PDF


def _pdf_reader(path: Any):
    from pypdf import PdfReader
    if not isinstance(path, str) or not os.path.isfile(path):
        return None
    try:
        return PdfReader(path)
    except Exception:  # noqa: BLE001 - not a PDF
        return None


def _pdf_text(path: Any) -> str | None:
    """A PDF's text as PyMuPDF's page.get_text() gives it, pages run together: one line per text line, blank
    lines dropped, the whole stripped. None when the file is missing or not a PDF."""
    reader = _pdf_reader(path)
    if reader is None:
        return None
    try:
        lines = [line for page in reader.pages for line in page.extract_text().splitlines() if line.strip()]
    except Exception:  # noqa: BLE001 - a broken content stream
        return None
    return "".join(line + "\n" for line in lines).strip()


@metric
def compare_pdfs(pdf1_path: str | list[str], pdf2_path: str | list[str]) -> float:
    """Mean over the pairs (lists pair up by position) of rapidfuzz ratio / 100 of the two PDFs' text; an
    unreadable pair adds 0."""
    from rapidfuzz import fuzz
    if isinstance(pdf2_path, list):
        if not isinstance(pdf1_path, list) or not pdf2_path:
            return 0.0
        pairs, n = list(zip(pdf1_path, pdf2_path)), len(pdf2_path)
    else:
        pairs, n = [(pdf1_path, pdf2_path)], 1
    score = 0.0
    for a, b in pairs:
        ta, tb = _pdf_text(a), _pdf_text(b)
        if ta is not None and tb is not None:
            score += fuzz.ratio(ta, tb) / 100.0
    return score / n


def _pdf_images(path: str) -> list | None:
    """The images embedded in a PDF's pages, in page order, as PIL images; ones that won't decode are left out."""
    reader = _pdf_reader(path)
    if reader is None:
        return None
    out = []
    try:
        for page in reader.pages:
            images = page.images
            for name in images.keys():
                try:
                    out.append(images[name].image)
                except Exception:  # noqa: BLE001 - a filter PIL cannot read: skipped, as OSWorld does
                    continue
    except Exception:  # noqa: BLE001
        return None
    return out


def _phash(image: Any) -> Any:
    """imagehash.phash: the 8x8 low-frequency DCT block of a 32x32 grey thumbnail, thresholded at its median."""
    import numpy as np
    from PIL import Image
    from scipy.fftpack import dct
    pixels = np.asarray(image.convert("L").resize((32, 32), Image.Resampling.LANCZOS))
    low = dct(dct(pixels, axis=0), axis=1)[:8, :8]
    return (low > np.median(low)).flatten()


@metric
def compare_pdf_images(pdf1_path: str, pdf2_path: str, **kwargs: Any) -> float:
    """The two PDFs embed as many images, and the share of same-position pairs whose perceptual hashes differ in
    at most 5 bits (1.0 when neither has an image)."""
    import numpy as np
    if not pdf1_path or not pdf2_path or not (os.path.exists(pdf1_path) and os.path.exists(pdf2_path)):
        return 0.0
    images1, images2 = _pdf_images(pdf1_path), _pdf_images(pdf2_path)
    if images1 is None or images2 is None or len(images1) != len(images2):
        return 0.0
    if not images1:
        return 1.0
    close = sum(int(np.count_nonzero(_phash(a) != _phash(b)) <= 5) for a, b in zip(images1, images2))
    return close / len(images1)


@metric
def check_pdf_pages(pdf_file: str, rules: Mapping[str, Any]) -> float:
    """rules {"relation": "eq" | "ne" | "lt" | "le" | "gt" | "ge", "ref_value": int}: the page count relates so."""
    relation = _rule(rules, "relation", "check_pdf_pages")
    ref = _rule(rules, "ref_value", "check_pdf_pages")
    if relation not in ("eq", "ne", "lt", "le", "gt", "ge"):
        raise EvaluatorError(f"check_pdf_pages: relation {relation!r} unsupported; use eq, ne, lt, le, gt or ge")
    reader = _pdf_reader(pdf_file)
    if reader is None:
        return 0.0
    try:
        pages = len(reader.pages)
    except Exception:  # noqa: BLE001 - a broken page tree
        return 0.0
    return float(getattr(operator, relation)(pages, ref))


# ----------------------------------------------------------------------------------------------------
# archives

# compare_archive's file_type → the metric that compares one pair of unpacked files
_ARCHIVE_METRICS = {"text": "compare_text_file", "pdf": "compare_pdfs", "docx": "compare_docx_files",
                    "ppt": "compare_pptx_files", "image": "compare_images", "csv": "compare_csv",
                    "table": "compare_table", "audio": "compare_audios", "video": "compare_videos"}


def _unpack(archive: str, dest: str) -> bool:
    """shutil.unpack_archive (format from the name), refusing tar members that are links, devices or escape
    `dest`; False when the archive cannot be unpacked."""
    if not os.path.isfile(archive):
        return False
    try:
        if not archive.lower().endswith(".zip"):
            root = os.path.realpath(dest)
            with tarfile.open(archive) as tar:
                for m in tar.getmembers():
                    target = os.path.realpath(os.path.join(root, m.name))
                    inside = target == root or target.startswith(root + os.sep)
                    if not (m.isfile() or m.isdir()) or not inside:
                        return False
        shutil.unpack_archive(archive, dest)
        return True
    except Exception:  # noqa: BLE001 - unknown format, corrupt archive
        return False


@metric
def compare_archive(pred_path: str, gold_path: str, **kwargs: Any) -> float:
    """Both archives unpacked: the entries under option file_path have the same names, and the score is the mean
    of the file_type metric (default "text") over the same-name pairs; remaining options go to that metric."""
    options = dict(kwargs)
    sub = options.pop("file_path", "")
    kind = options.pop("file_type", "text")
    if kind not in _ARCHIVE_METRICS:
        raise EvaluatorError(f"compare_archive: file_type {kind!r} unsupported; use one of "
                             f"{', '.join(_ARCHIVE_METRICS)}")
    name = _ARCHIVE_METRICS[kind]
    if name not in METRICS:
        raise EvaluatorError(f"compare_archive: file_type {kind!r} needs metric {name}, which is not implemented here")
    if not pred_path or not gold_path:
        return 0.0
    with tempfile.TemporaryDirectory() as pred_dir, tempfile.TemporaryDirectory() as gold_dir:
        if not _unpack(pred_path, pred_dir) or not _unpack(gold_path, gold_dir):
            return 0.0
        pred_root, gold_root = os.path.join(pred_dir, sub), os.path.join(gold_dir, sub)
        if not os.path.isdir(pred_root) or not os.path.isdir(gold_root):
            return 0.0
        names = sorted(os.listdir(pred_root))
        if not names or names != sorted(os.listdir(gold_root)):
            return 0.0
        total = sum(float(METRICS[name](os.path.join(pred_root, n), os.path.join(gold_root, n), **options))
                    for n in names)
    return total / len(names)


@metric
def compare_zip_files(actual: str, expected: str, **options: Any) -> float:
    """Two zips hold the same member names and each member the same bytes; a .pdf member may differ if its text
    (pages joined) is at least 0.95 similar (difflib ratio)."""
    if not actual or not expected:
        return 0.0
    try:
        with zipfile.ZipFile(actual) as z1, zipfile.ZipFile(expected) as z2:
            names = set(z1.namelist())
            if names != set(z2.namelist()):
                return 0.0
            for name in names:
                a, b = z1.read(name), z2.read(name)
                if name.lower().endswith(".pdf"):
                    ta, tb = _pdf_bytes_text(a), _pdf_bytes_text(b)
                    if ta is None or tb is None or difflib.SequenceMatcher(None, ta, tb).ratio() < 0.95:
                        return 0.0
                elif a != b:
                    return 0.0
    except (OSError, zipfile.BadZipFile, RuntimeError):  # not a zip, encrypted member
        return 0.0
    return 1.0


def _pdf_bytes_text(data: bytes) -> str | None:
    from pypdf import PdfReader
    try:
        return "".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)
    except Exception:  # noqa: BLE001 - not a PDF
        return None


# ----------------------------------------------------------------------------------------------------
# EPUB


def _epub_parts(path: str) -> list[list[str]] | None:
    """The lines compared of an EPUB, one list per part in name order: toc.ncx without navPoint lines,
    content.opf without dc:identifier lines (both at the archive's root), each .html file re-serialised
    (line breaks removed, then lxml's pretty print). None when the file is not a zip or a part won't read."""
    import lxml.html
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            parts: dict[str, list[str]] = {}
            for special, drop in (("toc.ncx", "navPoint"), ("content.opf", "dc:identifier")):
                if special in names:
                    parts[special] = [l for l in z.read(special).decode().splitlines() if drop not in l]
            for name in names:
                if name.endswith(".html"):
                    text = z.read(name).decode().replace("\n", "").replace("\r", "")
                    tree = lxml.html.fromstring(text.encode())
                    parts[name] = lxml.html.tostring(tree, pretty_print=True, encoding="unicode").splitlines()
    except Exception:  # noqa: BLE001 - not a zip, not UTF-8, an empty .html
        return None
    return [parts[k] for k in sorted(parts)]


@metric
def compare_epub(result: str, expected: str) -> float:
    """Mean over the result's parts (toc.ncx, content.opf, .html files, in name order, paired by position) of
    the line similarity (difflib ratio) with the expected EPUB's parts."""
    if not result or not os.path.isfile(result):
        return 0.0
    ours, theirs = _epub_parts(result), _epub_parts(expected) if expected else None
    if not ours or theirs is None:
        return 0.0
    return sum(difflib.SequenceMatcher(a=a, b=b).ratio() for a, b in zip(ours, theirs)) / len(ours)


# ----------------------------------------------------------------------------------------------------
# HTML: the element sequence Beautiful Soup ("lxml" parser) builds, without bs4


# Beautiful Soup's HTML tree builder: tags whose strings get their own kind, tags keeping blank strings,
# attributes split into lists of words
_STRING_CONTAINERS = {"rt", "rp", "style", "script", "template"}
_PRESERVE_WHITESPACE = {"pre", "textarea"}
_LIST_ATTRIBUTES = {"*": {"class", "accesskey", "dropzone"}, "a": {"rel", "rev"}, "link": {"rel", "rev"},
                    "td": {"headers"}, "th": {"headers"}, "form": {"accept-charset"}, "object": {"archive"},
                    "area": {"rel"}, "icon": {"sizes"}, "iframe": {"sandbox"}, "output": {"for"}}
_ASCII_SPACES = "\x20\x0a\x09\x0c\x0d"


class _Tag:
    __slots__ = ("name", "attrs", "children")

    def __init__(self, name: str, attrs: dict[str, Any]):
        self.name, self.attrs, self.children = name, attrs, []

    def descendants(self) -> Iterator["_Tag | _String"]:
        for c in self.children:
            yield c
            if isinstance(c, _Tag):
                yield from c.descendants()

    @property
    def text(self) -> str:
        """bs4's Tag.text: the strings of the kinds this tag counts (a container tag: its own kind only)."""
        kinds = {self.name} if self.name in _STRING_CONTAINERS else {"text", "cdata"}
        return "".join(d for d in self.descendants() if isinstance(d, _String) and d.kind in kinds)


class _String(str):
    """A string node; equal to any other string node of the same text, as bs4's NavigableStrings are."""
    kind: str


class _SoupBuilder:
    """An lxml parser target that builds the tree the way bs4's BeautifulSoup does from the same events."""

    def __init__(self):
        self.root = _Tag("[document]", {})
        self.stack = [self.root]
        self.pending: list[str] = []
        self.containers: list[_Tag] = []
        self.preserving: list[_Tag] = []

    def _flush(self, kind: str | None = None) -> None:
        if not self.pending:
            return
        text = "".join(self.pending)
        self.pending = []
        if not self.preserving and all(c in _ASCII_SPACES for c in text):
            text = "\n" if "\n" in text else " "
        s = _String(text)
        s.kind = kind or (self.containers[-1].name if self.containers else "text")
        self.stack[-1].children.append(s)

    def start(self, tag: str, attrib: Mapping[str, str], nsmap: Any = None) -> None:
        self._flush()
        listed = _LIST_ATTRIBUTES["*"] | _LIST_ATTRIBUTES.get(tag.lower(), set())
        attrs = {k: (re.findall(r"\S+", v) if k in listed and isinstance(v, str) else v) for k, v in attrib.items()}
        t = _Tag(tag, attrs)
        self.stack[-1].children.append(t)
        self.stack.append(t)
        if tag in _STRING_CONTAINERS:
            self.containers.append(t)
        if tag in _PRESERVE_WHITESPACE:
            self.preserving.append(t)

    def end(self, tag: str) -> None:
        self._flush()
        for i in range(len(self.stack) - 1, 0, -1):  # pop to the most recent tag of that name
            if self.stack[i].name == tag:
                for t in self.stack[i:]:
                    if self.containers and self.containers[-1] is t:
                        self.containers.pop()
                    if self.preserving and self.preserving[-1] is t:
                        self.preserving.pop()
                del self.stack[i:]
                break

    def data(self, data: str) -> None:
        self.pending.append(data)

    def comment(self, text: str) -> None:
        self._flush()
        self.pending.append(text)
        self._flush("comment")

    def doctype(self, name: str | None, pubid: str | None, system: str | None) -> None:
        self._flush()
        value = name or ""
        if pubid is not None:
            value += f' PUBLIC "{pubid}"' + (f' "{system}"' if system is not None else "")
        elif system is not None:
            value += f' SYSTEM "{system}"'
        self.pending.append(value)
        self._flush("doctype")

    def pi(self, target: str, data: str) -> None:
        self._flush()
        self.pending.append(f"{target} {data}")
        self._flush("pi")

    def close(self) -> _Tag:
        self._flush()
        return self.root


def _soup(path: str) -> _Tag | None:
    from lxml import etree
    text = _read_text(path)
    if text is None:
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    builder = _SoupBuilder()
    parser = etree.HTMLParser(target=builder, recover=True)
    try:
        parser.feed(text)
        return parser.close()
    except (etree.ParserError, etree.XMLSyntaxError, UnicodeError, LookupError):
        return None


@metric
def compare_htmls(html_path1: str, html_path2: str, **options: Any) -> float:
    """The two documents' nodes, walked in document order side by side (up to the shorter), agree: strings by
    text; elements by name, stripped text and attributes (option ignore_sdnum: LibreOffice's sdnum attribute
    may differ)."""
    a, b = _soup(html_path1), _soup(html_path2)
    if a is None or b is None:
        return 0.0
    ignore_sdnum = options.get("ignore_sdnum")
    for x, y in zip(a.descendants(), b.descendants()):
        if not (isinstance(x, _Tag) and isinstance(y, _Tag)):
            if not (isinstance(x, _String) and isinstance(y, _String) and str(x) == str(y)):
                return 0.0
            continue
        if x.name != y.name or x.text.strip() != y.text.strip():
            return 0.0
        if x.attrs != y.attrs:
            if not ignore_sdnum:
                return 0.0
            if {k: v for k, v in x.attrs.items() if k != "sdnum"} != {k: v for k, v in y.attrs.items() if k != "sdnum"}:
                return 0.0
    return 1.0


# ----------------------------------------------------------------------------------------------------
# MP3 tags, text files, documents, databases


@metric
def check_mp3_meta(result: str, meta: Mapping[str, Mapping[str, Any]]) -> float:
    """Each meta key is an EasyID3 tag name ("title", "artist", ...) whose value (list joined with ",", "" if
    unset) matches the {"method", "ref"} rule."""
    from mutagen.easyid3 import EasyID3
    if not result or not os.path.isfile(result):
        return 0.0
    try:
        tags = EasyID3(result)
    except Exception:  # noqa: BLE001 - no ID3 tag (ID3NoHeaderError), a broken one
        return 0.0
    for key, rule in meta.items():
        try:
            value = tags[key]
        except KeyError:  # unset, or a name EasyID3 does not know
            value = ""
        if isinstance(value, list):
            value = ",".join(value)
        if not match_value_to_rule(value, rule):
            return 0.0
    return 1.0


_TIME_OF_DAY = re.compile(r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)")


@metric
def check_line_number(file_path: str, line_number: Mapping[str, Any]) -> float:
    """The file has int(line_number["expected"]) lines holding an HH:MM:SS time."""
    want = _rule(line_number, "expected", "check_line_number")
    try:
        want = int(want)
    except (TypeError, ValueError):
        raise EvaluatorError(f"check_line_number: expected must be a whole number, not {want!r}") from None
    text = _read_text(file_path) if file_path and os.path.isfile(file_path) else None
    if text is None:
        return 0.0
    return float(sum(1 for line in text.split("\n") if _TIME_OF_DAY.search(line)) == want)


@metric
def fuzzy_place_math(result_file_path: str, rules: Mapping[str, Any]) -> float:
    """The .docx's paragraphs hold exactly three words (split on whitespace); the score is the mean of each
    word's best rapidfuzz ratio / 100 against rules["expected"]."""
    from docx import Document
    from rapidfuzz import fuzz
    answers = _rule(rules, "expected", "fuzzy_place_math")
    if not result_file_path:
        return 0.0
    try:
        words = [w for p in Document(result_file_path).paragraphs for w in p.text.split()]
    except Exception:  # noqa: BLE001 - missing or not a .docx
        return 0.0
    if len(words) != 3:
        return 0.0
    return sum(max([fuzz.ratio(w, a) / 100.0 for a in answers], default=0.0) for w in words) / 3


def _python_body(text: str) -> str:
    """A Python file without its header lines (shebang, coding; among the first three), blank lines and
    trailing blanks, tabs expanded to 4."""
    lines = text.splitlines()
    i = 0
    while i < min(3, len(lines)) and lines[i].strip().startswith(("#!", "# -*- coding:", "# coding:", "# coding=")):
        i += 1
    return "\n".join(l.expandtabs(4).rstrip() for l in lines[i:] if l.strip())


@metric
def compare_python_pure_text(py_file_path: str, gold_file_path: str) -> float:
    """The two Python files are the same text once headers, blank lines and trailing blanks are dropped."""
    a, b = _read_text(py_file_path), _read_text(gold_file_path)
    if a is None or b is None:
        return 0.0
    return float(_python_body(a) == _python_body(b))


@metric
def compare_result_files(src_path: str, tgt_path: str) -> float:
    """The expected file holds a number: 1.0 if its text occurs in the result or the result's number is within
    1e-4; otherwise the two files' stripped texts are equal."""
    src, tgt = _read_text(src_path), _read_text(tgt_path)
    if src is None or tgt is None:
        return 0.0
    src, tgt = src.strip(), tgt.strip()
    try:
        expected = float(tgt)
    except ValueError:
        return float(src == tgt)
    if tgt in src:
        return 1.0
    try:
        return float(abs(float(src) - expected) < 1e-4)
    except ValueError:
        return 0.0


@metric
def run_sqlite3(result: str, rules: Mapping[str, Any]) -> float:
    """The first column of the first row of rules["sql"] run on the database (NULL or no row... 0)."""
    sql = _rule(rules, "sql", "run_sqlite3")
    if not result or not os.path.isfile(result):
        return 0.0
    try:
        con = sqlite3.connect(result)
        try:
            row = con.execute(sql).fetchone()
        finally:
            con.close()
        return float(row[0] or 0)
    except (sqlite3.Error, TypeError, ValueError):  # not a database, no such table, no row, not a number
        return 0.0


# the test file's function runs in its own interpreter: the files it imports are the agent's
_TEST_SUITE_TIMEOUT = 120.0
_TEST_SUITE_RUNNER = r"""
import importlib.util, json, os, sys
test_file, function_name, out = sys.argv[1:4]
sys.path.insert(0, os.path.dirname(test_file))
score = 0.0
try:
    spec = importlib.util.spec_from_file_location("osworld_test_suite", test_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, function_name, None)
    if callable(fn):
        r = fn()
        if isinstance(r, bool):
            score = float(r)
        elif isinstance(r, (int, float)):
            score = max(0.0, min(1.0, float(r)))
        else:
            score = float(bool(r))
except BaseException:
    score = 0.0
with open(out, "w") as f:
    json.dump(score, f)
"""


@metric
def check_python_file_by_test_suite(actual_files: Any, test_file: str, **options: Any) -> float:
    """Runs the test file's function (option test_function_name, default "test") from the test file's folder,
    where the agent's files were copied: True/False → 1/0, a number clamped to [0, 1], else its truth; any
    error, or a run longer than _TEST_SUITE_TIMEOUT seconds → 0."""
    name = options.get("test_function_name", "test")
    if not test_file or not os.path.isfile(test_file):
        return 0.0
    test_file = os.path.abspath(test_file)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "score.json")
        try:
            subprocess.run([sys.executable, "-c", _TEST_SUITE_RUNNER, test_file, name, out],
                           cwd=os.path.dirname(test_file), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=_TEST_SUITE_TIMEOUT)
            with open(out) as f:
                return float(json.load(f))
        except (subprocess.TimeoutExpired, OSError, ValueError):
            return 0.0


# ----------------------------------------------------------------------------------------------------
# VS Code and the OS's settings


@metric
def check_json_keybindings(actual: str, expected: Mapping[str, Any], **options: Any) -> float:
    """VS Code's keybindings.json (a JSON list, maybe after one comment line) has an entry equal to
    expected["expected"]."""
    want = _rule(expected, "expected", "check_json_keybindings")
    text = _read_text(actual)
    if text is None:
        return 0.0
    for candidate in (text, text.split("\n", 1)[1] if "\n" in text else ""):
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, list):
            return float(want in data)
    return 0.0


@metric
def is_in_vm_clickboard(config: Mapping[str, Any], terminal_output: str) -> float:
    """The clipboard text (second argument) holds config["expected"] (a string, or every one of a list)."""
    want = _rule(config, "expected", "is_in_vm_clickboard")
    if not isinstance(terminal_output, str):
        return 0.0
    if isinstance(want, list):
        return float(all(w in terminal_output for w in want))
    return float(want in terminal_output)


@metric
def check_gnome_favorite_apps(apps_str: str, rule: Mapping[str, Any]) -> float:
    """`gsettings get org.gnome.shell favorite-apps` ("['a.desktop', ...]") lists exactly rule["expected"]."""
    want = _rule(rule, "expected", "check_gnome_favorite_apps")
    try:
        apps = ast.literal_eval(apps_str.strip())
    except (AttributeError, ValueError, SyntaxError):  # "@as []", an error message, None
        return 0.0
    if not isinstance(apps, (list, tuple)):
        return 0.0
    return float(len(apps) == len(want) and set(apps) == set(want))


@metric
def is_utc_0(timedatectl_output: str) -> float:
    """The fourth line of `timedatectl status` (its Time zone line) ends with "+0000)"."""
    lines = timedatectl_output.split("\n") if isinstance(timedatectl_output, str) else []
    return float(len(lines) > 3 and lines[3].endswith("+0000)"))


@metric
def check_text_enlarged(scaling_factor_str: str) -> float:
    """`gsettings get org.gnome.desktop.interface text-scaling-factor` is above 1.0."""
    try:
        return float(float(scaling_factor_str) > 1.0)
    except (TypeError, ValueError):
        return 0.0


@metric
def check_moved_jpgs(directory_list: Any, rule: Mapping[str, Any]) -> float:
    """The directory's entries are exactly rule["expected"]; the listing is ours (a list of names) or OSWorld's
    tree ({"children": [{"name"}, ...]})."""
    want = _rule(rule, "expected", "check_moved_jpgs")
    if isinstance(directory_list, Mapping):
        names = [c.get("name") for c in directory_list.get("children", [])]
    elif isinstance(directory_list, (list, tuple)):
        names = list(directory_list)
    else:
        return 0.0
    return float(len(names) == len(want) and set(names) == set(want))
