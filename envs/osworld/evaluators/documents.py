"""OSWorld evaluators for Writer documents (.docx/.odt) beyond the text and table comparisons in metrics.py.

Registers its metrics in metrics.METRICS and its getters in getters.GETTERS (imported by evaluators/__init__).
Own implementations with python-docx, odfpy, openpyxl, rapidfuzz and scikit-image; OSWorld's metrics/docs.py and
metrics/table.py define the behaviour (tests/osworld/test_osworld_documents.py compares the two).

Registered in METRICS:
  compare_line_spacing                    same text, and every paragraph has the expected line spacing
  check_tabstops                          same tab stops per non-blank paragraph; 1 - mean offset / text width
  compare_subscript_contains              some aligned run is subscript in both documents
  has_page_numbers_in_footers             every section's footer starts with a paragraph holding a digit
  compare_font_names                      every run of the body uses rules["font_name"]
  is_first_line_centered                  the first paragraph is centred
  check_highlighted_words                 same text (.odt) and no span has a yellow (#ffff00) background
  compare_contains_image                  aligned runs agree on holding a drawing
  compare_docx_lines                      the same set of non-blank (stripped) paragraphs
  evaluate_strike_through_last_paragraph  same text, and every run of the last paragraph is struck through
  evaluate_colored_words_in_tables        same text; in tables, vowel-initial words red and the others blue
  check_italic_font_size_14               same text, and every italic run is 14 pt
  contains_page_break                     the body has a page break (or exactly rules["page_break_count"])
  find_default_font                       Writer's default font in registrymodifications.xcu is the expected one
  compare_references                      fuzzy similarity of the reference lists after the heading, rescaled
  compare_docx_files_and_ignore_new_lines text equality with empty paragraphs dropped
  compare_docx_images                     the same images (decoded pixels), in the same order
  compare_conference_city_in_order        cells C2:C22 of the active sheet contain the expected cities in order
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

from ..errors import EvaluatorError
from .metrics import _rule, compare_docx_files, metric

_XCU_NS = "http://openoffice.org/2001/registry"


def _docx(path: str | None):
    """The python-docx Document at path, or None when it is missing or unreadable."""
    if not path:
        return None
    from docx import Document
    try:
        return Document(path)
    except Exception:  # noqa: BLE001 - an unreadable result scores 0
        return None


def _docx_pair(path1: str | None, path2: str | None):
    d1, d2 = _docx(path1), _docx(path2)
    return (d1, d2) if d1 is not None and d2 is not None else None


def _same_text(path1: str | None, path2: str | None) -> bool:
    """compare_docx_files with its default options (whitespace-collapsed text)."""
    return bool(path1 and path2 and compare_docx_files(path1, path2))


def _table_runs(doc) -> Iterator[Any]:
    for table in doc.tables:
        for row in table.rows:
            for cell in row.cells:
                for paragraph in cell.paragraphs:
                    yield from paragraph.runs


# ----------------------------------------------------------------------------------------------------
# paragraph formatting


@metric
def compare_line_spacing(docx_file1: str, docx_file2: str) -> float:
    """Same text, same paragraph count, and equal line spacing (python-docx's value) paragraph by paragraph."""
    if not _same_text(docx_file1, docx_file2):
        return 0.0
    docs = _docx_pair(docx_file1, docx_file2)
    if docs is None:
        return 0.0
    p1, p2 = docs[0].paragraphs, docs[1].paragraphs
    return float(len(p1) == len(p2) and all(
        a.paragraph_format.line_spacing == b.paragraph_format.line_spacing for a, b in zip(p1, p2)))


@metric
def check_tabstops(docx_file1: str, docx_file2: str, **kwargs: Any) -> float:
    """Tab stops of the non-blank paragraphs against the expected document's.

    The paragraphs must pair up, with the same number of tab stops (clear stops and a left stop at 0 ignored)
    and the same alignments; the score is 1 - the mean, over paragraphs, of the summed position offsets as a
    fraction of the expected document's text width. Options: word_number_split_by_tabstop (every result
    paragraph's tab-separated field number `index`, default 0, holds exactly that many words).
    """
    from docx.enum.text import WD_TAB_ALIGNMENT
    docs = _docx_pair(docx_file1, docx_file2)
    if docs is None:
        return 0.0
    para1 = [p for p in docs[0].paragraphs if p.text.strip()]
    para2 = [p for p in docs[1].paragraphs if p.text.strip()]
    if len(para1) != len(para2) or not para1:
        return 0.0
    words_wanted = kwargs.get("word_number_split_by_tabstop")
    if words_wanted is not None:
        index = kwargs.get("index", 0)
        for p in para1:
            fields = p.text.split("\t")
            if not -len(fields) <= index < len(fields) or len(fields[index].split()) != words_wanted:
                return 0.0
    try:
        section = docs[1].sections[0]
        width = section.page_width - section.left_margin - section.right_margin
    except (IndexError, TypeError):  # no page geometry to scale by
        return 0.0

    def stops(paragraph) -> list:
        return [t for t in paragraph.paragraph_format.tab_stops
                if t.alignment != WD_TAB_ALIGNMENT.CLEAR
                and not (t.alignment == WD_TAB_ALIGNMENT.LEFT and t.position == 0)]

    offset = 0.0
    for a, b in zip(para1, para2):
        s1, s2 = stops(a), stops(b)
        if len(s1) != len(s2) or any(t1.alignment != t2.alignment for t1, t2 in zip(s1, s2)):
            return 0.0
        offset += sum(abs(t1.position - t2.position) for t1, t2 in zip(s1, s2)) / width
    return max(0.0, 1.0 - offset / len(para1))


@metric
def is_first_line_centered(docx_file: str) -> float:
    """1.0 iff the document's first paragraph is centre-aligned."""
    from docx.enum.text import WD_PARAGRAPH_ALIGNMENT
    doc = _docx(docx_file)
    if doc is None or not doc.paragraphs:
        return 0.0
    return float(doc.paragraphs[0].paragraph_format.alignment == WD_PARAGRAPH_ALIGNMENT.CENTER)


@metric
def contains_page_break(docx_file: str, rules: Mapping[str, Any] | None = None) -> float:
    """Page breaks (w:br type="page") in the runs of the body's paragraphs: at least one, and exactly
    rules["page_break_count"] when the rules give it."""
    doc = _docx(docx_file)
    if doc is None:
        return 0.0
    wanted = rules.get("page_break_count") if isinstance(rules, Mapping) else None
    count = sum(len(run.element.xpath('.//w:br[@w:type="page"]'))
                for paragraph in doc.paragraphs for run in paragraph.runs)
    if wanted is not None and count != wanted:
        return 0.0
    return float(count > 0)


@metric
def has_page_numbers_in_footers(docx_file: str) -> float:
    """1.0 iff the first paragraph of every section's footer shows a digit (the page number field's text)."""
    doc = _docx(docx_file)
    if doc is None:
        return 0.0
    for section in doc.sections:
        paragraphs = section.footer.paragraphs
        if not any(ch.isdigit() for ch in (paragraphs[0].text if paragraphs else "")):
            return 0.0
    return 1.0


# ----------------------------------------------------------------------------------------------------
# character formatting


@metric
def compare_font_names(docx_file: str, rules: Mapping[str, Any]) -> float:
    """1.0 iff every run of the body's paragraphs sets the font rules["font_name"]."""
    expected = _rule(rules, "font_name", "compare_font_names")
    doc = _docx(docx_file)
    if doc is None:
        return 0.0
    return float(all(run.font.name == expected for paragraph in doc.paragraphs for run in paragraph.runs))


@metric
def compare_subscript_contains(docx_file1: str, docx_file2: str) -> float:
    """1.0 iff some run is subscript in both documents at the same paragraph and run position."""
    docs = _docx_pair(docx_file1, docx_file2)
    if docs is None:
        return 0.0
    return float(any(r1.font.subscript and r2.font.subscript
                     for p1, p2 in zip(docs[0].paragraphs, docs[1].paragraphs)
                     for r1, r2 in zip(p1.runs, p2.runs)))


@metric
def check_italic_font_size_14(path1: str, path2: str) -> float:
    """Same text, and every italic run of the result is 14 pt."""
    if not _same_text(path1, path2):
        return 0.0
    doc = _docx(path1)
    if doc is None:
        return 0.0
    return float(all(run.font.size is not None and run.font.size.pt == 14
                     for paragraph in doc.paragraphs for run in paragraph.runs if run.italic))


@metric
def evaluate_strike_through_last_paragraph(file_path1: str, file_path2: str) -> float:
    """Same text, and every run of the result's last paragraph is struck through."""
    if not _same_text(file_path1, file_path2):
        return 0.0
    doc = _docx(file_path1)
    if doc is None or not doc.paragraphs:
        return 0.0
    return float(all(run.font.strike for run in doc.paragraphs[-1].runs))


@metric
def evaluate_colored_words_in_tables(file_path1: str, file_path2: str, **kwargs: Any) -> float:
    """Same text; in the result's tables every run starting with a vowel is red and every other run blue,
    within CIEDE2000 distance `threshold` (default 3.5). An uncoloured run counts as wrong."""
    import numpy as np
    from skimage.color import deltaE_ciede2000, rgb2lab
    if not _same_text(file_path1, file_path2):
        return 0.0
    doc = _docx(file_path1)
    if doc is None:
        return 0.0
    threshold = kwargs.get("threshold", 3.5)
    red, blue = (rgb2lab(np.array(c, dtype=float) / 255.0) for c in ((255, 0, 0), (0, 0, 255)))
    for run in _table_runs(doc):
        if not run.text:
            continue
        rgb = run.font.color.rgb
        if rgb is None:
            return 0.0
        target = red if run.text[0].lower() in "aeiou" else blue
        if deltaE_ciede2000(rgb2lab(np.array(tuple(rgb), dtype=float) / 255.0), target) > threshold:
            return 0.0
    return 1.0


@metric
def check_highlighted_words(file_path1: str, file_path2: str) -> float:
    """Same text (.odt), and no text span of the result uses an automatic style with a #ffff00 background."""
    if not _same_text(file_path1, file_path2):
        return 0.0
    try:
        from odf.namespaces import FONS, STYLENS, TEXTNS
        from odf.opendocument import load
        from odf.text import Span
        doc = load(file_path1)
    except Exception:  # noqa: BLE001 - an unreadable result scores 0
        return 0.0
    yellow_styles = {
        style.getAttrNS(STYLENS, "name")
        for style in doc.automaticstyles.childNodes
        if style.nodeType == style.ELEMENT_NODE and any(
            prop.nodeType == prop.ELEMENT_NODE and prop.getAttrNS(FONS, "background-color") == "#ffff00"
            for prop in style.childNodes)}
    return float(not any(span.getAttrNS(TEXTNS, "style-name") in yellow_styles
                         for span in doc.getElementsByType(Span) if span.getAttrNS(TEXTNS, "style-name")))


# ----------------------------------------------------------------------------------------------------
# text and images


@metric
def compare_docx_lines(file1: str, file2: str) -> float:
    """1.0 iff both documents have the same set of non-blank paragraphs (stripped; order and repeats ignored)."""
    docs = _docx_pair(file1, file2)
    if docs is None:
        return 0.0
    lines = [{p.text.strip() for p in d.paragraphs if p.text.strip()} for d in docs]
    return float(lines[0] == lines[1])


@metric
def compare_docx_files_and_ignore_new_lines(file1: str, file2: str, **options: Any) -> float:
    """Text of two .docx files with empty paragraphs dropped: whitespace-collapsed equality (ignore_blanks,
    default True) or paragraph-by-paragraph equality."""
    if not (file1 and file2 and file1.endswith(".docx") and file2.endswith(".docx")):
        return 0.0
    docs = _docx_pair(file1, file2)
    if docs is None:
        return 0.0
    p1, p2 = ([p.text for p in d.paragraphs if p.text != ""] for d in docs)
    if options.get("ignore_blanks", True):
        return float(re.sub(r"\s+", " ", "\n".join(p1)).strip() == re.sub(r"\s+", " ", "\n".join(p2)).strip())
    return float(p1 == p2)


@metric
def compare_references(file1: str, file2: str, **options: Any) -> float:
    """The reference lists: the non-blank paragraphs after the first paragraph equal to `reference_indicator`
    (default "References").

    Neither document has the heading → 1.0, only one → 0.0, lists of different length → 0.0. Otherwise the mean
    rapidfuzz ratio r of paired entries is rescaled: (r - base) / (1 - base) when r >= base + 0.01, else 0.0,
    base = `reference_base_result` (default 0.5). Both lists empty → 1.0.
    """
    from rapidfuzz import fuzz
    if not (file1 and file2 and file1.endswith(".docx") and file2.endswith(".docx")):
        return 0.0
    docs = _docx_pair(file1, file2)
    if docs is None:
        return 0.0
    heading = options.get("reference_indicator", "References")
    base = options.get("reference_base_result", 0.5)
    texts = [[p.text for p in d.paragraphs] for d in docs]
    found = [heading in t for t in texts]
    if not any(found):
        return 1.0
    if not all(found):
        return 0.0
    refs1, refs2 = ([p for p in t[t.index(heading) + 1:] if p.strip()] for t in texts)
    if len(refs1) != len(refs2):
        return 0.0
    if not refs1:
        return 1.0
    similarity = sum(fuzz.ratio(a, b) / 100.0 for a, b in zip(refs1, refs2)) / len(refs1)
    return (similarity - base) / (1 - base) if similarity >= base + 0.01 else 0.0


@metric
def compare_contains_image(docx_file1: str, docx_file2: str) -> float:
    """0.0 iff some pair of runs at the same paragraph and run position differ in holding a drawing."""
    docs = _docx_pair(docx_file1, docx_file2)
    if docs is None:
        return 0.0

    def has_drawing(run) -> bool:
        return "graphicData" in run.element.xml

    return float(all(has_drawing(r1) == has_drawing(r2)
                     for p1, p2 in zip(docs[0].paragraphs, docs[1].paragraphs)
                     for r1, r2 in zip(p1.runs, p2.runs)))


@metric
def compare_docx_images(docx_file1: str, docx_file2: str) -> float:
    """1.0 iff the main documents relate the same number of images, pairwise equal once decoded (size and
    pixels), in relationship order."""
    from io import BytesIO

    from PIL import Image
    docs = _docx_pair(docx_file1, docx_file2)
    if docs is None:
        return 0.0
    # a linked (external) image has no part: it is compared by its address
    blobs1, blobs2 = ([rel.target_ref if rel.is_external else rel.target_part.blob
                       for rel in d.part.rels.values() if "image" in rel.reltype] for d in docs)
    if len(blobs1) != len(blobs2):
        return 0.0
    for b1, b2 in zip(blobs1, blobs2):
        if b1 == b2:
            continue
        if isinstance(b1, str) or isinstance(b2, str):
            return 0.0
        try:
            i1, i2 = Image.open(BytesIO(b1)), Image.open(BytesIO(b2))
            if i1.size != i2.size or i1.tobytes() != i2.tobytes():
                return 0.0
        except Exception:  # noqa: BLE001 - an image PIL cannot decode, differing in bytes
            return 0.0
    return 1.0


# ----------------------------------------------------------------------------------------------------
# settings and spreadsheets


@metric
def find_default_font(config_file_path: str, rules: Mapping[str, Any]) -> float:
    """1.0 iff registrymodifications.xcu sets Writer's DefaultFont/Standard to rules["font_name"]
    (the last such value counts)."""
    import xml.etree.ElementTree as ET
    expected = _rule(rules, "font_name", "find_default_font")
    if not config_file_path:
        return 0.0
    font = None
    try:
        root = ET.parse(config_file_path).getroot()
    except (OSError, ET.ParseError):
        root = None
    if root is not None:
        ns = {"oor": _XCU_NS}
        for item in root.iterfind('.//item[@oor:path="/org.openoffice.Office.Writer/DefaultFont"]', ns):
            for prop in item.iterfind('.//prop[@oor:name="Standard"]', ns):
                for value in prop.iterfind("value"):
                    font = value.text
    return float(font == expected)


@metric
def compare_conference_city_in_order(actual_city_list_path: str, expected_city: Mapping[str, Any]) -> float:
    """Cells C2:C22 of the workbook's active sheet, in order, each contain expected_city["expected"][i]
    (a city, or a list of accepted spellings); a missing or non-text cell, or a shorter list, scores 0.0."""
    import openpyxl
    expected = _rule(expected_city, "expected", "compare_conference_city_in_order")
    if not isinstance(expected, list) or not all(
            isinstance(e, str) or (isinstance(e, list) and all(isinstance(s, str) for s in e)) for e in expected):
        raise EvaluatorError("compare_conference_city_in_order: expected must list cities (strings or lists of "
                             f"strings); got {expected!r:.100}")
    if not actual_city_list_path:
        return 0.0
    try:
        sheet = openpyxl.load_workbook(actual_city_list_path).active
    except Exception:  # noqa: BLE001 - an unreadable result scores 0
        return 0.0
    cells = [row[0].value for row in sheet["C2:C22"]]
    if len(expected) < len(cells):
        return 0.0
    for value, accepted in zip(cells, expected):
        names = [accepted] if isinstance(accepted, str) else accepted
        if not isinstance(value, str) or not any(name in value for name in names):
            return 0.0
    return 1.0
