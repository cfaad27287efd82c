"""Differential test of the Writer evaluators (envs/osworld/evaluators/documents.py) against OSWorld's own
metrics/docs.py and metrics/table.py, on real .docx/.odt/.xlsx/.xcu files built here with python-docx, odfpy,
openpyxl and Pillow.

Known divergences, left out of the differential and checked on our side only:
  * contains_page_break called without rules (as OSWorld's task ecc2413d does, having no "expected"): OSWorld
    raises TypeError (rules is a required argument); ours treats the rules as optional.
  * check_tabstops with no non-blank paragraph in either document: OSWorld divides by zero; ours scores 0.0.
    Tab stops offset by more than the text width: OSWorld's score goes negative; ours is clamped to 0.0.
  * evaluate_colored_words_in_tables with an uncoloured table run: OSWorld raises (None colour); ours 0.0.
  * compare_references with the heading last in both documents (no entries): OSWorld divides by zero; ours 1.0.
  * is_first_line_centered / evaluate_strike_through_last_paragraph on a document without paragraphs:
    OSWorld raises IndexError; ours 0.0.
  * compare_docx_images compares the decoded size too (OSWorld only the pixel bytes, so a 2x3 and a 3x2 image
    of one colour are "equal" there), and an undecodable image (OSWorld raises) counts as different unless its
    bytes are identical.
  * compare_conference_city_in_order on a missing file (None): OSWorld raises; ours 0.0.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tests.osworld.reference import assert_agree, needs_reference

DOCS = "docs"


# ----------------------------------------------------------------------------------------------------
# input files


def _png(path: Path, color, size=(4, 3), fmt="PNG") -> str:
    from PIL import Image
    Image.new("RGB", size, color).save(path, fmt)
    return str(path)


def _page_field(paragraph, shown: str = "1") -> None:
    """A PAGE field as LibreOffice writes it: begin, instruction, separate, shown number, end."""
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    def run_with(tag, **attrs):
        r = paragraph.add_run()
        el = OxmlElement(tag)
        for k, v in attrs.items():
            el.set(qn(k), v)
        r._r.append(el)
        return el

    run_with("w:fldChar", **{"w:fldCharType": "begin"})
    run_with("w:instrText").text = " PAGE "
    run_with("w:fldChar", **{"w:fldCharType": "separate"})
    paragraph.add_run(shown)
    run_with("w:fldChar", **{"w:fldCharType": "end"})


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    from docx import Document
    from docx.enum.section import WD_SECTION
    from docx.enum.text import WD_ALIGN_PARAGRAPH, WD_BREAK, WD_TAB_ALIGNMENT
    from docx.shared import Inches, Pt, RGBColor

    d = tmp_path_factory.mktemp("documents")
    f: dict[str, str] = {}

    def save(name, doc):
        doc.save(d / name)
        f[name] = str(d / name)

    # line spacing: a title and two body paragraphs
    def spacing(name, values, texts=("Novels", "The first novel.", "The second novel.")):
        doc = Document()
        for text, value in zip(texts, values):
            p = doc.add_paragraph(text)
            if value is not None:
                p.paragraph_format.line_spacing = value
        save(name, doc)

    spacing("ls_gold.docx", [None, 2.0, 2.0])
    spacing("ls_same.docx", [None, 2.0, 2.0])
    spacing("ls_single.docx", [None, 1.0, 2.0])
    spacing("ls_points.docx", [None, Pt(24), 2.0])
    spacing("ls_text.docx", [None, 2.0, 2.0], ("Novels", "The first novel.", "Another novel."))
    spacing("ls_split.docx", [None, 2.0, 2.0, 2.0], ("Novels", "The first", "novel.", "The second novel."))

    # tab stops: "three word title<TAB>page" lines with a right-aligned stop, plus ignored stops
    def tabs(name, stops, lines=("Ebook purchase info\t1", "How to order\t2")):
        doc = Document()
        for line in lines:
            p = doc.add_paragraph(line)
            for pos, align in stops:
                p.paragraph_format.tab_stops.add_tab_stop(pos, align)
            doc.add_paragraph("")
        save(name, doc)

    R, L, C = WD_TAB_ALIGNMENT.RIGHT, WD_TAB_ALIGNMENT.LEFT, WD_TAB_ALIGNMENT.CENTER
    tabs("tab_gold.docx", [(Inches(6), R)], ("Ebook purchase info\t1", "Order your copy\t2"))
    tabs("tab_same.docx", [(Inches(6), R), (Inches(0), L), (Inches(2), WD_TAB_ALIGNMENT.CLEAR)],
         ("Ebook purchase info\t1", "Order your copy\t2"))
    tabs("tab_near.docx", [(Inches(5.5), R)], ("Ebook purchase info\t1", "Order your copy\t2"))
    tabs("tab_align.docx", [(Inches(6), C)], ("Ebook purchase info\t1", "Order your copy\t2"))
    tabs("tab_count.docx", [(Inches(6), R), (Inches(3), L)], ("Ebook purchase info\t1", "Order your copy\t2"))
    tabs("tab_words.docx", [(Inches(6), R)])  # other text
    tabs("tab_two.docx", [(Inches(6), R)], ("Ebook purchase\t1", "Order your copy\t2"))
    tabs("tab_lines.docx", [(Inches(6), R)], ("Ebook purchase info\t1",))

    # subscript: H2O with the 2 as its own run
    def h2o(name, sub_run):
        doc = Document()
        doc.add_paragraph("Water facts")
        p = doc.add_paragraph()
        for i, t in enumerate(("H", "2", "O", " is water")):
            p.add_run(t).font.subscript = True if i == sub_run else None
        save(name, doc)

    h2o("sub_gold.docx", 1)
    h2o("sub_same.docx", 1)
    h2o("sub_none.docx", None)
    h2o("sub_moved.docx", 2)

    # footers: page-number fields, plain text, none, two sections
    def footers(name, kinds):
        doc = Document()
        doc.add_paragraph("Open source word processing")
        for i, kind in enumerate(kinds):
            if i:
                doc.add_section(WD_SECTION.NEW_PAGE)
                doc.add_paragraph(f"Section {i + 1}")
            footer = doc.sections[i].footer
            if kind == "linked":
                continue
            footer.is_linked_to_previous = False
            p = footer.paragraphs[0]
            if kind == "page":
                p.add_run("Page ")
                _page_field(p, str(i + 1))
            elif kind == "text":
                p.add_run("Confidential")
            elif kind == "second":
                p.add_run("Confidential")
                _page_field(footer.add_paragraph(), "1")
        save(name, doc)

    footers("ft_page.docx", ["page"])
    footers("ft_text.docx", ["text"])
    footers("ft_none.docx", ["linked"])
    footers("ft_two.docx", ["page", "page"])
    footers("ft_two_linked.docx", ["page", "linked"])
    footers("ft_two_text.docx", ["page", "text"])
    footers("ft_second_para.docx", ["second"])

    # fonts, alignment, strike-through, italics, page breaks
    def runs(name, paragraphs, align=None):
        """paragraphs: lists of (text, {font attribute: value}) runs."""
        doc = Document()
        for i, spec in enumerate(paragraphs):
            p = doc.add_paragraph()
            if align and i in align:
                p.alignment = align[i]
            for text, attrs in spec:
                r = p.add_run(text)
                for k, v in attrs.items():
                    if k == "break":
                        r.add_break(WD_BREAK.PAGE)
                    else:
                        setattr(r.font, k, v)
        save(name, doc)

    tnr = {"name": "Times New Roman"}
    runs("font_all.docx", [[("Dublin Zoo", tnr)], [("opened in ", tnr), ("1831", tnr)]])
    runs("font_mixed.docx", [[("Dublin Zoo", tnr)], [("opened in ", tnr), ("1831", {"name": "Arial"})]])
    runs("font_unset.docx", [[("Dublin Zoo", tnr)], [("opened in 1831", {})]])
    runs("font_empty.docx", [])

    title = [[("Constitution", {})], [("Article 1", {})]]
    runs("center_first.docx", title, {0: WD_ALIGN_PARAGRAPH.CENTER})
    runs("center_left.docx", title, {0: WD_ALIGN_PARAGRAPH.LEFT})
    runs("center_second.docx", title, {1: WD_ALIGN_PARAGRAPH.CENTER})

    outline = [("Course outline", {})], [("Week 1: maps", {})]
    runs("strike_gold.docx", [*outline, [("Cancelled ", {}), ("field trip", {})]])
    runs("strike_all.docx", [*outline, [("Cancelled ", {"strike": True}), ("field trip", {"strike": True})]])
    runs("strike_part.docx", [*outline, [("Cancelled ", {"strike": True}), ("field trip", {})]])
    runs("strike_first.docx", [[("Course outline", {"strike": True})], outline[1],
                               [("Cancelled ", {}), ("field trip", {})]])
    runs("strike_text.docx", [*outline, [("Postponed ", {"strike": True}), ("field trip", {"strike": True})]])

    essay = [[("Assignment 4", {})], [("Read ", {}), ("Hamlet", {}), (" by Friday.", {})]]
    runs("it_gold.docx", essay)
    runs("it_14.docx", [essay[0], [("Read ", {}), ("Hamlet", {"italic": True, "size": Pt(14)}), (" by Friday.", {})]])
    runs("it_12.docx", [essay[0], [("Read ", {}), ("Hamlet", {"italic": True, "size": Pt(12)}), (" by Friday.", {})]])
    runs("it_nosize.docx", [essay[0], [("Read ", {}), ("Hamlet", {"italic": True}), (" by Friday.", {})]])
    runs("it_bold12.docx", [essay[0], [("Read ", {"bold": True, "size": Pt(12)}), ("Hamlet", {}), (" by Friday.", {})]])
    runs("it_text.docx", [essay[0], [("Read ", {}), ("Macbeth", {"italic": True, "size": Pt(14)})]])

    decl = [("Statutory declaration", {})], [("I declare that", {})]
    runs("pb_one.docx", [[("Statutory declaration", {"break": True})], decl[1]])
    runs("pb_two.docx", [[("Statutory declaration", {"break": True})], [("I declare that", {"break": True})]])
    runs("pb_none.docx", list(decl))

    # images in runs, and image parts
    red, blue = _png(d / "red.png", (255, 0, 0)), _png(d / "blue.png", (0, 0, 255))
    red_bmp = _png(d / "red.bmp", (255, 0, 0), fmt="BMP")

    def pictures(name, items):
        doc = Document()
        for item in items:
            if item is None:
                doc.add_paragraph()
            elif item.endswith((".png", ".bmp")):
                doc.add_picture(item, width=Inches(1))
            else:
                doc.add_paragraph(item)
        save(name, doc)

    pictures("img_gold.docx", ["Class schedule", red, "Textbooks"])
    pictures("img_same.docx", ["Class schedule", blue, "Textbooks"])
    pictures("img_missing.docx", ["Class schedule", "Click here", "Textbooks"])
    pictures("img_empty_para.docx", ["Class schedule", None, "Textbooks"])
    pictures("img_red_bmp.docx", ["Class schedule", red_bmp, "Textbooks"])
    pictures("img_two.docx", ["Class schedule", red, blue, "Textbooks"])
    pictures("img_two_same.docx", ["Class schedule", red, blue, "Textbooks"])
    pictures("img_two_swapped.docx", ["Class schedule", blue, red, "Textbooks"])

    # plain text documents for the line / new-line / reference comparisons
    def paras(name, texts):
        doc = Document()
        for t in texts:
            doc.add_paragraph(t)
        save(name, doc)

    train = ["08:00:00, T101, S1, 2", "08:05:00, T102, S2, 1", "08:09:00, T103, S1, 3"]
    paras("lines_gold.docx", train)
    paras("lines_shuffled.docx", ["", "  " + train[2], train[0], "", train[1], train[0]])
    paras("lines_missing.docx", train[:2])
    paras("nl_gold.docx", ["Gemini results", "Model A: 81.2", "Model B: 79.9"])
    paras("nl_blank.docx", ["", "Gemini results", "", "Model A: 81.2", "", "Model B: 79.9", ""])
    paras("nl_spaces.docx", ["Gemini results", " ", "Model A:  81.2", "Model B: 79.9"])
    paras("nl_joined.docx", ["Gemini results", "Model A: 81.2 Model B: 79.9"])
    paras("nl_other.docx", ["Gemini results", "Model A: 81.2", "Model B: 80.0"])

    refs = ["Smith, J. (2020). Open science. Journal of Data, 4(2), 1-10.",
            "Lee, K. (2019). Reproducible research. Science Press."]
    body = ["Case study", "The findings are discussed below.", "References"]
    paras("ref_gold.docx", body + refs)
    paras("ref_same.docx", body + ["", refs[0], "", refs[1]])
    paras("ref_close.docx", body + [refs[0].replace("2020", "2021"), refs[1].replace("Press", "press")])
    paras("ref_far.docx", body + ["Unrelated entry one.", "Another unrelated."])
    paras("ref_short.docx", body + refs[:1])
    paras("ref_noheading.docx", body[:2] + refs)
    paras("ref_noheading2.docx", body[:2])
    paras("ref_bibliography.docx", body[:2] + ["Bibliography"] + refs)

    # coloured words in a table: vowel-initial red, others blue
    def colored(name, words, text_after=""):
        doc = Document()
        doc.add_paragraph("Dolch sight words")
        table = doc.add_table(rows=1, cols=len(words))
        for cell, (word, rgb) in zip(table.rows[0].cells, words):
            run = cell.paragraphs[0].add_run(word)
            if rgb is not None:
                run.font.color.rgb = RGBColor(*rgb)
        if text_after:
            doc.add_paragraph(text_after)
        save(name, doc)

    RED, BLUE = (255, 0, 0), (0, 0, 255)
    colored("col_gold.docx", [("and", None), ("big", None), ("is", None)])
    colored("col_right.docx", [("and", RED), ("big", BLUE), ("is", RED)])
    colored("col_near.docx", [("and", (250, 4, 4)), ("big", (2, 2, 250)), ("is", RED)])
    colored("col_orange.docx", [("and", (255, 90, 0)), ("big", BLUE), ("is", RED)])
    colored("col_swapped.docx", [("and", BLUE), ("big", RED), ("is", RED)])
    colored("col_text.docx", [("and", RED), ("big", BLUE), ("is", RED)], "Extra line")
    colored("col_uncolored.docx", [("and", RED), ("big", None), ("is", RED)])

    # .odt with highlighted spans
    def odt(name, spans, bg="#ffff00"):
        from odf.opendocument import OpenDocumentText
        from odf.style import Style, TextProperties
        from odf.text import P, Span
        doc = OpenDocumentText()
        mark = Style(name="T1", family="text")
        mark.addElement(TextProperties(backgroundcolor=bg))
        bold = Style(name="T2", family="text")
        bold.addElement(TextProperties(fontweight="bold"))
        doc.automaticstyles.addElement(mark)
        doc.automaticstyles.addElement(bold)
        for line in spans:
            p = P()
            for text, style in line:
                if style:
                    p.addElement(Span(stylename={"mark": mark, "bold": bold}[style], text=text))
                else:
                    p.addText(text)
            doc.text.addElement(p)
        doc.save(str(d / name))
        f[name] = str(d / name)

    script = [[("Hello, this is ", None), ("Dr. Lee", "mark"), (" calling.", None)], [("Thank you.", None)]]
    odt("hl_gold.odt", [[("Hello, this is Dr. Lee calling.", None)], [("Thank you.", None)]])
    odt("hl_marked.odt", script)
    odt("hl_bold.odt", [[("Hello, this is ", None), ("Dr. Lee", "bold"), (" calling.", None)],
                        [("Thank you.", None)]])
    odt("hl_other_color.odt", script, bg="#00ff00")
    odt("hl_text.odt", [[("Hello, this is Dr. Kim calling.", None)], [("Thank you.", None)]])

    # LibreOffice's registrymodifications.xcu
    def xcu(name, fonts, broken=False):
        items = "".join(
            '<item oor:path="/org.openoffice.Office.Writer/DefaultFont">'
            f'<prop oor:name="Standard" oor:op="fuse"><value>{font}</value></prop></item>' for font in fonts)
        other = ('<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="FirstRun" oor:op="fuse">'
                 '<value>false</value></prop></item>'
                 '<item oor:path="/org.openoffice.Office.Writer/DefaultFont"><prop oor:name="Heading" '
                 'oor:op="fuse"><value>Arial</value></prop></item>')
        text = ('<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
                'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
                f'{other}{items}' + ("" if broken else "</oor:items>\n"))
        (d / name).write_text(text)
        f[name] = str(d / name)

    xcu("font_tnr.xcu", ["Times New Roman"])
    xcu("font_liberation.xcu", ["Liberation Serif"])
    xcu("font_changed.xcu", ["Liberation Serif", "Times New Roman"])
    xcu("font_unset.xcu", [])
    xcu("font_broken.xcu", ["Times New Roman"], broken=True)

    # conference cities in C2:C22
    import openpyxl

    def cities(name, column):
        wb = openpyxl.Workbook()
        ws = wb.active
        ws.append(["Year", "Conference", "City"])
        for i, city in enumerate(column):
            ws.append([2003 + i, "ICML", city])
        wb.save(d / name)
        f[name] = str(d / name)

    city_list = [("Scottsdale, AZ" if i == 0 else c if isinstance(c, str) else c[-1]) for i, c in enumerate(CITIES)]
    cities("city_right.xlsx", city_list)
    cities("city_spellings.xlsx", ["New York City, NY" if c == "NYC" else "Montreal" if c == "Montréal" else c
                                   for c in city_list])
    cities("city_wrong.xlsx", city_list[:3] + ["Reno"] + city_list[4:])
    cities("city_short.xlsx", city_list[:-1])
    cities("city_number.xlsx", city_list[:5] + [2008] + city_list[6:])
    (d / "not_a_document.docx").write_text("plain text, not a zip")
    f["not_a_document.docx"] = str(d / "not_a_document.docx")
    return f


CITIES = ["Scottsdale", "Atlanta", "Lake Tahoe", "Banff", "Beijing", ["Montreal", "Montréal"], "San Diego",
          "Lille", ["Montreal", "Montréal"], "San Juan", ["New York", "New York City", "NYC"], "Barcelona",
          "Toulon", "Sydney", "Long Beach", "Vancouver", "Stockholm", ["Montreal", "Montréal"], "New Orleans",
          "Long Beach", "Vancouver"]


# ----------------------------------------------------------------------------------------------------
# cases


def _cases(f: dict[str, str]) -> list[tuple[str, str, list, dict]]:
    C: list[tuple[str, str, list, dict]] = []

    def pairs(func, gold, results, module=DOCS, **kw):
        for r in results:
            C.append((module, func, [f[r] if r else None, f[gold]], kw))

    bad = "not_a_document.docx"
    pairs("compare_line_spacing", "ls_gold.docx",
          ["ls_same.docx", "ls_single.docx", "ls_points.docx", "ls_text.docx", "ls_split.docx", bad, None])
    tab_results = ["tab_same.docx", "tab_near.docx", "tab_align.docx", "tab_count.docx", "tab_words.docx",
                   "tab_two.docx", "tab_lines.docx", bad, None]
    pairs("check_tabstops", "tab_gold.docx", tab_results)
    pairs("check_tabstops", "tab_gold.docx", tab_results, word_number_split_by_tabstop=3, index=0)
    pairs("check_tabstops", "tab_gold.docx", ["tab_same.docx", "tab_near.docx"],
          word_number_split_by_tabstop=1, index=-1)
    pairs("compare_subscript_contains", "sub_gold.docx",
          ["sub_same.docx", "sub_none.docx", "sub_moved.docx", bad, None])
    for r in ("ft_page.docx", "ft_text.docx", "ft_none.docx", "ft_two.docx", "ft_two_linked.docx",
              "ft_two_text.docx", "ft_second_para.docx", "font_empty.docx", bad):
        C.append((DOCS, "has_page_numbers_in_footers", [f[r]], {}))
    C.append((DOCS, "has_page_numbers_in_footers", [None], {}))
    for r in ("font_all.docx", "font_mixed.docx", "font_unset.docx", "font_empty.docx", bad, None):
        C.append((DOCS, "compare_font_names", [f.get(r), {"font_name": "Times New Roman"}], {}))
    C.append((DOCS, "compare_font_names", [f["font_all.docx"], {"font_name": "Arial"}], {}))
    for r in ("center_first.docx", "center_left.docx", "center_second.docx", bad, None):
        C.append((DOCS, "is_first_line_centered", [f.get(r)], {}))
    pairs("check_highlighted_words", "hl_gold.odt",
          ["hl_gold.odt", "hl_marked.odt", "hl_bold.odt", "hl_other_color.odt", "hl_text.odt", None])
    C.append((DOCS, "check_highlighted_words", [f["hl_marked.odt"], f["ls_gold.docx"]], {}))
    pairs("compare_contains_image", "img_gold.docx",
          ["img_same.docx", "img_missing.docx", "img_empty_para.docx", "ls_gold.docx", bad, None])
    pairs("compare_docx_lines", "lines_gold.docx", ["lines_shuffled.docx", "lines_missing.docx", bad, None])
    pairs("evaluate_strike_through_last_paragraph", "strike_gold.docx",
          ["strike_all.docx", "strike_part.docx", "strike_first.docx", "strike_gold.docx", "strike_text.docx",
           bad, None])
    pairs("evaluate_colored_words_in_tables", "col_gold.docx",
          ["col_right.docx", "col_near.docx", "col_orange.docx", "col_swapped.docx", "col_text.docx", bad, None])
    pairs("evaluate_colored_words_in_tables", "col_gold.docx", ["col_near.docx", "col_orange.docx"], threshold=1.0)
    pairs("evaluate_colored_words_in_tables", "col_gold.docx", ["col_orange.docx"], threshold=40)
    pairs("check_italic_font_size_14", "it_gold.docx",
          ["it_14.docx", "it_12.docx", "it_nosize.docx", "it_bold12.docx", "it_gold.docx", "it_text.docx",
           bad, None])
    for r, rules in (("pb_one.docx", {}), ("pb_two.docx", {}), ("pb_none.docx", {}), ("pb_one.docx", None),
                     ("pb_one.docx", {"page_break_count": 1}), ("pb_two.docx", {"page_break_count": 1}),
                     ("pb_two.docx", {"page_break_count": 2}), ("pb_none.docx", {"page_break_count": 0}),
                     (bad, {}), (None, {})):
        C.append((DOCS, "contains_page_break", [f.get(r), rules], {}))
    for r in ("font_tnr.xcu", "font_liberation.xcu", "font_changed.xcu", "font_unset.xcu", "font_broken.xcu",
              None):
        C.append((DOCS, "find_default_font", [f.get(r), {"font_name": "Times New Roman"}], {}))
    C.append((DOCS, "find_default_font", [f["font_liberation.xcu"], {"font_name": "Liberation Serif"}], {}))
    ref_results = ["ref_same.docx", "ref_close.docx", "ref_far.docx", "ref_short.docx", "ref_noheading.docx",
                   bad, None]
    pairs("compare_references", "ref_gold.docx", ref_results)
    pairs("compare_references", "ref_gold.docx", ref_results, content_only=True, reference_base_result=0.92)
    pairs("compare_references", "ref_noheading2.docx", ["ref_noheading.docx", "ref_gold.docx"])
    pairs("compare_references", "ref_bibliography.docx", ["ref_bibliography.docx", "ref_gold.docx"],
          reference_indicator="Bibliography")
    C.append((DOCS, "compare_references", [f["ref_gold.docx"], f["hl_gold.odt"]], {}))
    nl_results = ["nl_gold.docx", "nl_blank.docx", "nl_spaces.docx", "nl_joined.docx", "nl_other.docx", bad, None]
    pairs("compare_docx_files_and_ignore_new_lines", "nl_gold.docx", nl_results)
    pairs("compare_docx_files_and_ignore_new_lines", "nl_gold.docx", nl_results, ignore_blanks=False)
    C.append((DOCS, "compare_docx_files_and_ignore_new_lines", [f["hl_gold.odt"], f["hl_gold.odt"]], {}))
    pairs("compare_docx_images", "img_gold.docx",
          ["img_gold.docx", "img_red_bmp.docx", "img_same.docx", "img_missing.docx", "img_two.docx", bad, None])
    pairs("compare_docx_images", "img_two.docx", ["img_two_same.docx", "img_two_swapped.docx"])
    for r, expected in (("city_right.xlsx", CITIES), ("city_spellings.xlsx", CITIES), ("city_wrong.xlsx", CITIES),
                        ("city_short.xlsx", CITIES), ("city_number.xlsx", CITIES),
                        ("city_right.xlsx", CITIES[:-1]), ("city_right.xlsx", CITIES + ["Paris"]),
                        ("city_right.xlsx", ["Montréal" if c == ["Montreal", "Montréal"] else c for c in CITIES])):
        C.append(("table", "compare_conference_city_in_order", [f[r], {"expected": expected}], {}))
    return C


# ----------------------------------------------------------------------------------------------------
# tests


def _ours(case):
    from envs.osworld.evaluators import METRICS
    _, fn, args, kwargs = case
    return float(METRICS[fn](*args, **kwargs))


def test_each_function_scores_one_and_zero(files):
    """The inputs exercise every metric both ways (and check_tabstops / compare_references partially)."""
    seen: dict[str, set[float]] = defaultdict(set)
    for case in _cases(files):
        score = _ours(case)
        assert 0.0 <= score <= 1.0, case
        seen[case[1]].add(round(score, 6))
    assert len(seen) == 18
    for fn, scores in seen.items():
        assert {0.0, 1.0} <= scores, (fn, scores)
    for fn in ("check_tabstops", "compare_references"):
        assert any(0.0 < s < 1.0 for s in seen[fn]), (fn, seen[fn])


@needs_reference
def test_documents_agree_with_osworld(files):
    assert_agree(_cases(files))


def test_divergences_and_task_errors(files, tmp_path):
    """Inputs on which OSWorld raises (see the module docstring), and malformed tasks."""
    from docx import Document
    from docx.enum.text import WD_TAB_ALIGNMENT
    from docx.shared import Inches

    from envs.osworld.errors import EvaluatorError
    from envs.osworld.evaluators import METRICS as M

    f = files
    assert M["contains_page_break"](f["pb_one.docx"]) == 1.0
    assert M["contains_page_break"](f["pb_none.docx"]) == 0.0
    empty = tmp_path / "empty.docx"
    Document().save(empty)  # python-docx's template has no paragraph
    assert M["check_tabstops"](str(empty), str(empty)) == 0.0
    assert M["is_first_line_centered"](str(empty)) == 0.0
    assert M["evaluate_strike_through_last_paragraph"](str(empty), str(empty)) == 0.0
    far = tmp_path / "far.docx"
    doc = Document()
    doc.add_paragraph("a\tb").paragraph_format.tab_stops.add_tab_stop(Inches(20), WD_TAB_ALIGNMENT.RIGHT)
    doc.save(far)
    near = tmp_path / "near.docx"
    doc = Document()
    doc.add_paragraph("a\tb").paragraph_format.tab_stops.add_tab_stop(Inches(0.5), WD_TAB_ALIGNMENT.RIGHT)
    doc.save(near)
    assert M["check_tabstops"](str(far), str(near)) == 0.0
    assert M["evaluate_colored_words_in_tables"](f["col_uncolored.docx"], f["col_gold.docx"]) == 0.0
    heading_last = tmp_path / "heading_last.docx"
    doc = Document()
    doc.add_paragraph("Essay")
    doc.add_paragraph("References")
    doc.save(heading_last)
    assert M["compare_references"](str(heading_last), str(heading_last)) == 1.0
    assert M["compare_conference_city_in_order"](None, {"expected": CITIES}) == 0.0
    assert M["compare_conference_city_in_order"](f["not_a_document.docx"],
                                                 {"expected": CITIES}) == 0.0
    for fn, args in (("compare_font_names", [f["font_all.docx"], {}]),
                     ("find_default_font", [f["font_tnr.xcu"], {"font": "x"}]),
                     ("compare_conference_city_in_order", [f["city_right.xlsx"], {}]),
                     ("compare_conference_city_in_order", [f["city_right.xlsx"], {"expected": [1, 2]}])):
        with pytest.raises(EvaluatorError):
            M[fn](*args)


def test_docx_images_compare_size_not_only_pixel_bytes(tmp_path):
    from docx import Document
    from docx.shared import Inches
    paths = []
    for size in ((2, 3), (3, 2)):
        doc = Document()
        doc.add_picture(_png(tmp_path / f"{size}.png", (9, 9, 9), size=size), width=Inches(1))
        paths.append(str(tmp_path / f"{size}.docx"))
        doc.save(paths[-1])
    from envs.osworld.evaluators import METRICS
    assert METRICS["compare_docx_images"](*paths) == 0.0
    assert METRICS["compare_docx_images"](paths[0], paths[0]) == 1.0
