"""Differential test of envs/osworld/evaluators/files.py against OSWorld's own functions (PyPI desktop-env, through
tests/osworld/reference.py), on files made here: PDFs (matplotlib for text and soft-masked images, PIL for JPEG
images), zip and tar.gz archives, EPUBs, HTML, an MP3 (hand-made silent MPEG frames, ID3 tags by mutagen), SQLite
databases, Python files with a test suite, VS Code keybindings, an .xlsx for the content_from_vm_file getter.

OSWorld reads PDFs for compare_pdfs and compare_pdf_images with PyMuPDF (fitz), which the reference venv does not
have (the runner's placeholder makes every such score 0). Those cases join the differential when the reference
can import fitz (e.g. PYTHONPATH naming a `pip install --target DIR pymupdf`); otherwise ours is checked against
PyMuPDF's text layout written out here (one line per text line, pages run together), which is what PyMuPDF 2.1
gave on these files.

Known divergences, left out of the differential on purpose (ours is checked alone):
  * a missing result (None) where OSWorld crashes: run_sqlite3 (sqlite3.connect(None)), check_mp3_meta on an
    MP3 without an ID3 tag, compare_htmls, compare_epub on an EPUB whose .html files sit in a folder (OSWorld
    writes them to a folder it never made), content_from_vm_file on an absent file (pandas reads None), the
    vscode_config getter (OSWorld replays keys through the VM's controller, which the runner's stand-in lacks);
    ours scores 0.0 / returns None.
  * compare_pdfs with a missing result and a gold PDF without text: PyMuPDF opens None as an empty document, so
    OSWorld scores 1.0 (two empty texts); ours 0.0.
  * text extraction (pypdf, not PyMuPDF): table cells on one baseline become one line joined by spaces (PyMuPDF:
    a line per cell), ligature characters (U+FB01 ...) come out as letters; only partial scores move.
  * compare_zip_files reads PDF members with pypdf 7, OSWorld with PyPDF2 3; the same text here.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess
import tarfile
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from envs.osworld.errors import EvaluatorError
from envs.osworld.evaluators import GETTERS, METRICS
from tests.osworld.reference import REF_PY, assert_agree, needs_reference, reference


def _ref_has_fitz() -> bool:
    if not REF_PY.exists():
        return False
    return subprocess.run([str(REF_PY), "-c", "import fitz"], capture_output=True).returncode == 0


# ----------------------------------------------------------------------------------------------------
# inputs

INVOICE = [["Invoice # 243729", "Total: $1,024.50", "Due 2024-03-01"], ["Page two here"]]
INVOICE_EDIT = [["Invoice # 243729", "Total: $1,099.00", "Due 2024-04-15"], ["Page two here"]]
AGENDA = [["Meeting Agenda", "1. Welcome", "2. Budget review"]]


def _text_pdf(path: Path, pages: list[list[str]]) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages
    with PdfPages(path) as pdf:
        for lines in pages:
            fig = plt.figure(figsize=(8.5, 11))
            for i, line in enumerate(lines):
                fig.text(0.1, 0.9 - 0.05 * i, line, fontsize=12)
            pdf.savefig(fig)
            plt.close(fig)
    return str(path)


def _image_pdf(path: Path, shapes: list[str]) -> str:
    from PIL import Image, ImageDraw
    pages = []
    for shape in shapes:
        im = Image.new("RGB", (240, 160), "white")
        d = ImageDraw.Draw(im)
        if shape == "box":
            d.rectangle([20, 20, 140, 120], fill="red")
        elif shape == "box_moved":
            d.rectangle([22, 21, 142, 121], fill="red")
        elif shape == "disc":
            d.ellipse([60, 10, 230, 150], fill="blue")
        else:
            d.line([0, 0, 240, 160], fill="black", width=9)
            d.line([0, 160, 240, 0], fill="green", width=9)
        pages.append(im)
    pages[0].save(path, save_all=True, append_images=pages[1:])
    return str(path)


def _alpha_image_pdf(path: Path, seed: int, alpha: float) -> str:
    """A matplotlib PDF whose one image is RGBA: stored as RGB with a soft mask."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig = plt.figure(figsize=(4, 3))
    fig.add_axes([0, 0, 1, 1]).imshow(np.random.default_rng(seed).random((20, 30)), alpha=alpha)
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def _fitz_text(pages: list[list[str]]) -> str:
    """PyMuPDF's get_text() of a _text_pdf, pages joined and stripped (as OSWorld's compare_pdfs reads it)."""
    return "".join(line + "\n" for lines in pages for line in lines).strip()


def _zip(path: Path, members: dict[str, bytes | str]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def _tgz(path: Path, members: dict[str, bytes]) -> str:
    import io
    with tarfile.open(path, "w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return str(path)


OPF = """<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="uuid_id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:title>Pass Through</dc:title>
    <dc:identifier id="uuid_id">{uuid}</dc:identifier>
    <dc:creator>{author}</dc:creator>
  </metadata>
  <manifest><item href="ch1.html" id="c1" media-type="application/xhtml+xml"/></manifest>
  <spine toc="ncx"><itemref idref="c1"/></spine>
</package>
"""
NCX = """<?xml version="1.0" encoding="utf-8"?>
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">
  <head><meta name="dtb:depth" content="1"/></head>
  <navMap>
    <navPoint id="n1" playOrder="1"><navLabel><text>Chapter 1</text></navLabel><content src="ch1.html"/></navPoint>
  </navMap>
</ncx>
"""
CHAPTER = "<html><head><title>Chapter 1</title></head>\n<body>\n<h1>Chapter 1</h1>\n{body}\n</body></html>\n"


def _epub(path: Path, uuid: str, author: str, paragraphs: list[str], folder: str = "") -> str:
    body = "\n".join(f"<p>{p}</p>" for p in paragraphs)
    return _zip(path, {"mimetype": "application/epub+zip",
                       "META-INF/container.xml": '<?xml version="1.0"?><container version="1.0"/>',
                       folder + "content.opf": OPF.format(uuid=uuid, author=author),
                       folder + "toc.ncx": NCX.format(uuid=uuid),
                       folder + "ch1.html": CHAPTER.format(body=body),
                       folder + "ch2.html": CHAPTER.format(body="<p>The end.</p>")})


HTML = """<!DOCTYPE HTML PUBLIC "-//W3C//DTD HTML 4.01 Transitional//EN">
<html>
<head>
	<meta http-equiv="content-type" content="text/html; charset=utf-8"/>
	<title></title>
	<style type="text/css">
		body,div,table,thead,tbody,tfoot,tr,th,td,p {{ font-family:"Liberation Sans"; font-size:x-small }}
	</style>
</head>
<body>
<table cellspacing="0" border="0">
	<colgroup width="85"></colgroup>
	<tr>
		<td height="17" align="left" class="{cls}">Year</td>
		<td align="right" sdval="{year}" sdnum="{sdnum}">{year}</td>
	</tr>
</table>
<!-- ************************************************************************** -->
</body>
</html>
"""


def _mp3(path: Path, tags: dict[str, str] | None) -> str:
    # 40 frames of MPEG-1 Layer III, 128 kbit/s, 44.1 kHz, mono, all-zero side info: one second of silence
    path.write_bytes((bytes([0xFF, 0xFB, 0x90, 0xC0]) + bytes(413)) * 40)
    if tags is not None:
        from mutagen.easyid3 import EasyID3
        from mutagen.mp3 import MP3
        m = MP3(path)
        m.add_tags()
        m.save()
        t = EasyID3(path)
        for k, v in tags.items():
            t[k] = v
        t.save()
    return str(path)


def _docx(path: Path, paragraphs: list[str]) -> str:
    from docx import Document
    d = Document()
    for p in paragraphs:
        d.add_paragraph(p)
    d.save(path)
    return str(path)


def _sqlite(path: Path) -> str:
    con = sqlite3.connect(path)
    con.executescript("""
        create table messages (id integer primary key, folderID integer);
        create table messageAttributes (messageID integer, attributeID integer, value integer);
        insert into messages values (1, 13), (2, 13), (3, 7);
        insert into messageAttributes values (1, 58, 1), (3, 58, 0), (2, 12, 1);
    """)
    con.commit()
    con.close()
    return str(path)


TEST_SUITE = """import {mod}
def test():
    return {mod}.{expr}
def test_raises():
    raise RuntimeError("boom")
"""


def _suite(d: Path, mod: str, code: str, expr: str) -> str:
    d.mkdir()
    (d / f"{mod}.py").write_text(code)
    (d / "test_suite.py").write_text(TEST_SUITE.format(mod=mod, expr=expr))
    return str(d / "test_suite.py")


KEYBINDINGS = """// Place your key bindings in this file to override the defaults
[
    {
        "key": "ctrl+j",
        "command": "workbench.action.focusActiveEditorGroup",
        "when": "terminalFocus"
    }
]
"""
TIMEDATECTL = """               Local time: Thu 2024-01-25 12:56:06 {abbr}
           Universal time: Thu 2024-01-25 12:56:06 UTC
                 RTC time: Thu 2024-01-25 12:56:05
                Time zone: {zone}
System clock synchronized: yes
              NTP service: inactive
          RTC in local TZ: no
"""


@pytest.fixture(scope="module")
def f(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("files")
    out: dict[str, str] = {}

    def text(name: str, s: str) -> None:
        (d / name).write_text(s, encoding="utf-8")
        out[name] = str(d / name)

    out["inv.pdf"] = _text_pdf(d / "inv.pdf", INVOICE)
    out["inv_copy.pdf"] = _text_pdf(d / "inv_copy.pdf", INVOICE)
    out["inv_edit.pdf"] = _text_pdf(d / "inv_edit.pdf", INVOICE_EDIT)
    out["agenda.pdf"] = _text_pdf(d / "agenda.pdf", AGENDA)
    out["agenda_copy.pdf"] = _text_pdf(d / "agenda_copy.pdf", AGENDA)
    out["img_box.pdf"] = _image_pdf(d / "img_box.pdf", ["box"])
    out["img_box_moved.pdf"] = _image_pdf(d / "img_box_moved.pdf", ["box_moved"])
    out["img_disc.pdf"] = _image_pdf(d / "img_disc.pdf", ["disc"])
    out["img_two.pdf"] = _image_pdf(d / "img_two.pdf", ["box", "disc"])
    out["img_two_half.pdf"] = _image_pdf(d / "img_two_half.pdf", ["box", "cross"])
    out["img_alpha.pdf"] = _alpha_image_pdf(d / "img_alpha.pdf", 0, 0.8)
    out["img_alpha_near.pdf"] = _alpha_image_pdf(d / "img_alpha_near.pdf", 0, 0.79)
    out["img_alpha_other.pdf"] = _alpha_image_pdf(d / "img_alpha_other.pdf", 1, 0.8)
    text("not.pdf", "plain text, not a PDF")

    pdf = Path(out["inv.pdf"]).read_bytes()
    pdf_edit = Path(out["inv_edit.pdf"]).read_bytes()
    pdf_ag = Path(out["agenda.pdf"]).read_bytes()
    out["slides.zip"] = _zip(d / "slides.zip", {"lecture_slides/a.pdf": pdf, "lecture_slides/b.pdf": pdf_ag})
    for name, (a, b) in {"slides.zip": (pdf, pdf_ag), "slides_gold.zip": (pdf, pdf_ag),
                         "slides_edit.zip": (pdf_edit, pdf_ag)}.items():
        out[name] = _zip(d / name, {"lecture_slides/a.pdf": a, "lecture_slides/b.pdf": b})
    out["slides_names.zip"] = _zip(d / "slides_names.zip",
                                   {"lecture_slides/a.pdf": pdf, "lecture_slides/c.pdf": pdf_ag})
    out["notes.zip"] = _zip(d / "notes.zip", {"one.txt": "alpha\n", "two.txt": "beta\n"})
    out["notes_gold.tar.gz"] = _tgz(d / "notes_gold.tar.gz", {"one.txt": b"alpha\n", "two.txt": b"beta\n"})
    out["notes_half.tar.gz"] = _tgz(d / "notes_half.tar.gz", {"one.txt": b"ALPHA \n", "two.txt": b"beta\n"})
    out["notes_half.zip"] = _zip(d / "notes_half.zip", {"one.txt": "ALPHA \n", "two.txt": "beta\n"})
    out["evil.tar.gz"] = _tgz(d / "evil.tar.gz", {"../escape.txt": b"alpha\n", "two.txt": b"beta\n"})
    text("broken.zip", "not a zip")
    out["mixed.zip"] = _zip(d / "mixed.zip", {"report.pdf": pdf, "data/readme.txt": "hello"})
    out["mixed_same.zip"] = _zip(d / "mixed_same.zip", {"data/readme.txt": "hello", "report.pdf": pdf})
    out["mixed_pdf.zip"] = _zip(d / "mixed_pdf.zip", {"report.pdf": pdf_edit, "data/readme.txt": "hello"})
    out["mixed_txt.zip"] = _zip(d / "mixed_txt.zip", {"report.pdf": pdf, "data/readme.txt": "hello!"})
    out["mixed_names.zip"] = _zip(d / "mixed_names.zip", {"report.pdf": pdf})

    out["book.epub"] = _epub(d / "book.epub", "uuid-1", "A. Writer", ["It was a dark night.", "Rain fell."])
    out["book_gold.epub"] = _epub(d / "book_gold.epub", "uuid-2", "A. Writer", ["It was a dark night.", "Rain fell."])
    out["book_edit.epub"] = _epub(d / "book_edit.epub", "uuid-2", "B. Other",
                                  ["It was a bright morning.", "Rain fell.", "Sun rose."])
    out["book_folder.epub"] = _epub(d / "book_folder.epub", "uuid-1", "A. Writer", ["It was a dark night."], "OEBPS/")

    for name, kw in {"h.html": dict(cls="a b", year=2021, sdnum="1033;"),
                     "h_same.html": dict(cls="a  b", year=2021, sdnum="1033;"),
                     "h_sdnum.html": dict(cls="a b", year=2021, sdnum="1033;0;0.00"),
                     "h_year.html": dict(cls="a b", year=2022, sdnum="1033;")}.items():
        text(name, HTML.format(**kw))
    base = HTML.format(cls="a b", year=2021, sdnum="1033;")
    text("h_blanks.html", base.replace("\t<tr>", "    <tr>"))  # blank strings collapse to one newline
    text("h_pre.html", base.replace("</body>", "<pre>  </pre></body>"))
    text("h_pre_one.html", base.replace("</body>", "<pre> </pre></body>"))  # kept as they are inside <pre>
    text("h_script.html", HTML.format(cls="a b", year=2021, sdnum="1033;").replace("</body>",
                                                                                   "<script>x=1</script></body>"))

    out["song.mp3"] = _mp3(d / "song.mp3", {"title": "Missing You", "artist": "Cheng Xiang"})
    out["song_two.mp3"] = _mp3(d / "song_two.mp3", {"title": "Missing You", "artist": ["Cheng Xiang", "Guest"]})
    out["untagged.mp3"] = _mp3(d / "untagged.mp3", None)

    text("report.txt", "Linux 6.1 (host)\n\n10:00:01 CPU %user %nice\n10:00:02 all 1.0 0.0\n23:59:60 all 2.0 0.0\n"
                       "Average: all 1.5 0.0\n24:00:00 not a time\n")
    out["places.docx"] = _docx(d / "places.docx", ["深圳市福田区正义街1号", "", "福田区水围村龙景楼一楼  深圳市福田区香梅路2002-4号"])
    out["places_close.docx"] = _docx(d / "places_close.docx", ["深圳市福田区正义街2号", "福田区水围村龙景楼", "香梅路"])
    out["places_four.docx"] = _docx(d / "places_four.docx", ["a b c d"])
    text("colab.py", "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\nimport os\n\n\ndef f(x):\n\treturn x + 1   \n")
    text("colab_gold.py", "import os\ndef f(x):\n    return x + 1\n\n")
    text("colab_md.py", "```python\nimport os\ndef f(x):\n    return x + 1\n```\n")
    out["msgs.sqlite"] = _sqlite(d / "msgs.sqlite")

    out["suite_pass"] = _suite(d / "s1", "snake_a", "def ok():\n    return True\n", "ok()")
    out["suite_fail"] = _suite(d / "s2", "snake_b", "def ok():\n    return False\n", "ok()")
    out["suite_half"] = _suite(d / "s3", "snake_c", "VALUE = 0.5\n", "VALUE")
    out["suite_big"] = _suite(d / "s4", "snake_d", "VALUE = 7\n", "VALUE")
    out["suite_list"] = _suite(d / "s5", "snake_e", "VALUE = [0]\n", "VALUE")
    out["suite_syntax"] = _suite(d / "s6", "snake_f", "def ok(:\n", "ok()")

    for name, s in {"r.txt": "The answer is 42.5\n", "r_num.txt": "42.50001\n", "r_far.txt": "43\n",
                    "r_word.txt": "forty\n", "gold_num.txt": "42.5\n", "gold_word.txt": " forty \n"}.items():
        text(name, s)
    text("kb.json", KEYBINDINGS)
    text("kb_plain.json", KEYBINDINGS.split("\n", 1)[1])
    text("kb_other.json", KEYBINDINGS.replace("terminalFocus", "editorFocus"))
    text("kb_dict.json", '{"key": "ctrl+j"}')
    return out


# ----------------------------------------------------------------------------------------------------
# metrics: the differential


def _cases(f: dict[str, str]) -> list[tuple[str, str, list, dict]]:
    kb = {"expected": {"key": "ctrl+j", "command": "workbench.action.focusActiveEditorGroup", "when": "terminalFocus"}}
    places = {"expected": ["深圳市福田区正义街1号", "福田区水围村龙景楼一楼", "深圳市福田区香梅路2002-4号",
                           "深圳市福田区益田路5055号"]}
    sql = {"sql": "select sum(1) > 0 from messageAttributes where attributeID = 58 and value = 1 "
                  "and messageID in (select id from messages where folderID = 13);"}
    return [
        ("chrome", "compare_htmls", [f["h.html"], f["h_same.html"]], {}),
        ("chrome", "compare_htmls", [f["h.html"], f["h_sdnum.html"]], {}),
        ("chrome", "compare_htmls", [f["h.html"], f["h_sdnum.html"]], {"ignore_sdnum": True}),
        ("chrome", "compare_htmls", [f["h.html"], f["h_year.html"]], {"ignore_sdnum": True}),
        ("chrome", "compare_htmls", [f["h.html"], f["h_script.html"]], {}),
        ("chrome", "compare_htmls", [f["h.html"], f["h_blanks.html"]], {}),
        ("chrome", "compare_htmls", [f["h_pre.html"], f["h_pre_one.html"]], {}),
        ("chrome", "compare_archive", [f["notes.zip"], f["notes_gold.tar.gz"]], {}),
        ("chrome", "compare_archive", [f["notes_half.zip"], f["notes_gold.tar.gz"]], {"file_type": "text"}),
        ("chrome", "compare_archive", [f["notes_half.tar.gz"], f["notes.zip"]],
         {"ignore_case": True, "ignore_blanks": True}),
        ("chrome", "compare_archive", [f["mixed_names.zip"], f["notes.zip"]], {}),
        ("chrome", "compare_archive", [None, f["notes.zip"]], {}),
        ("pdf", "check_pdf_pages", [f["inv.pdf"], {"relation": "eq", "ref_value": 2}], {}),
        ("pdf", "check_pdf_pages", [f["agenda.pdf"], {"relation": "eq", "ref_value": 2}], {}),
        ("pdf", "check_pdf_pages", [f["img_two.pdf"], {"relation": "ge", "ref_value": 2}], {}),
        ("pdf", "check_pdf_pages", [None, {"relation": "eq", "ref_value": 1}], {}),
        ("others", "compare_epub", [f["book.epub"], f["book_gold.epub"]], {}),
        ("others", "compare_epub", [f["book_edit.epub"], f["book_gold.epub"]], {}),
        ("others", "compare_epub", [f["broken.zip"], f["book_gold.epub"]], {}),
        ("others", "compare_epub", [None, f["book_gold.epub"]], {}),
        ("others", "check_mp3_meta", [f["song.mp3"], {"title": {"method": "eq", "ref": "Missing You"},
                                                      "artist": {"method": "eq", "ref": "Cheng Xiang"}}], {}),
        ("others", "check_mp3_meta", [f["song.mp3"], {"title": {"method": "eq", "ref": "Missing You"},
                                                      "artist": {"method": "eq", "ref": "Han Baoyi"}}], {}),
        ("others", "check_mp3_meta", [f["song_two.mp3"], {"artist": {"method": "eq", "ref": "Cheng Xiang,Guest"},
                                                          "album": {"method": "eq", "ref": ""}}], {}),
        ("others", "check_mp3_meta", [f["song.mp3"], {"title": {"method": "re.I", "ref": "^missing"}}], {}),
        ("others", "check_mp3_meta", [None, {"title": {"method": "eq", "ref": "Missing You"}}], {}),
        ("general", "check_line_number", [f["report.txt"], {"expected": "3"}], {}),
        ("general", "check_line_number", [f["report.txt"], {"expected": "4"}], {}),
        ("general", "check_line_number", [None, {"expected": "3"}], {}),
        ("general", "fuzzy_place_math", [f["places.docx"], places], {}),
        ("general", "fuzzy_place_math", [f["places_close.docx"], places], {}),
        ("general", "fuzzy_place_math", [f["places_four.docx"], places], {}),
        ("general", "fuzzy_place_math", [None, places], {}),
        ("general", "compare_python_pure_text", [f["colab.py"], f["colab_gold.py"]], {}),
        ("general", "compare_python_pure_text", [f["colab_md.py"], f["colab_gold.py"]], {}),
        ("general", "compare_python_pure_text", [None, f["colab_gold.py"]], {}),
        ("general", "run_sqlite3", [f["msgs.sqlite"], sql], {}),
        ("general", "run_sqlite3", [f["msgs.sqlite"], {"sql": sql["sql"].replace("value = 1", "value = 2")}], {}),
        ("general", "run_sqlite3", [f["msgs.sqlite"], {"sql": "select count(*) from messages"}], {}),
        ("vscode", "check_python_file_by_test_suite", [[], f["suite_pass"]], {}),
        ("vscode", "check_python_file_by_test_suite", [[], f["suite_fail"]], {}),
        ("vscode", "check_python_file_by_test_suite", [[], f["suite_half"]], {}),
        ("vscode", "check_python_file_by_test_suite", [[], f["suite_big"]], {}),
        ("vscode", "check_python_file_by_test_suite", [[], f["suite_list"]], {}),
        ("vscode", "check_python_file_by_test_suite", [[], f["suite_syntax"]], {}),
        ("vscode", "check_python_file_by_test_suite", [[], f["suite_pass"]], {"test_function_name": "test_raises"}),
        ("vscode", "check_python_file_by_test_suite", [[], f["suite_pass"]], {"test_function_name": "absent"}),
        ("vscode", "check_python_file_by_test_suite", [[], None], {}),
        ("vscode", "compare_zip_files", [f["mixed.zip"], f["mixed_same.zip"]], {}),
        ("vscode", "compare_zip_files", [f["mixed_pdf.zip"], f["mixed.zip"]], {}),
        ("vscode", "compare_zip_files", [f["mixed_txt.zip"], f["mixed.zip"]], {}),
        ("vscode", "compare_zip_files", [f["mixed_names.zip"], f["mixed.zip"]], {}),
        ("vscode", "compare_zip_files", [None, f["mixed.zip"]], {}),
        ("vscode", "compare_result_files", [f["r.txt"], f["gold_num.txt"]], {}),
        ("vscode", "compare_result_files", [f["r_num.txt"], f["gold_num.txt"]], {}),
        ("vscode", "compare_result_files", [f["r_far.txt"], f["gold_num.txt"]], {}),
        ("vscode", "compare_result_files", [f["r_word.txt"], f["gold_word.txt"]], {}),
        ("vscode", "compare_result_files", [f["r_word.txt"], f["gold_num.txt"]], {}),
        ("vscode", "compare_result_files", [None, f["gold_num.txt"]], {}),
        ("vscode", "check_json_keybindings", [f["kb.json"], kb], {}),
        ("vscode", "check_json_keybindings", [f["kb_plain.json"], kb], {}),
        ("vscode", "check_json_keybindings", [f["kb_other.json"], kb], {}),
        ("vscode", "check_json_keybindings", [f["kb_dict.json"], kb], {}),
        ("vscode", "check_json_keybindings", [None, kb], {}),
        ("basic_os", "is_in_vm_clickboard", [{"expected": "/home/user/Data3/List3/secret.docx"},
                                             "/home/user/Data3/List3/secret.docx\n"], {}),
        ("basic_os", "is_in_vm_clickboard", [{"expected": ["None"]}, "Some text"], {}),
        ("basic_os", "is_in_vm_clickboard", [{"expected": ["a", "b"]}, "b then a"], {}),
        ("basic_os", "check_gnome_favorite_apps", ["['thunderbird.desktop', 'google-chrome.desktop']\n",
                                                   {"expected": ["google-chrome.desktop", "thunderbird.desktop"]}], {}),
        ("basic_os", "check_gnome_favorite_apps", ["['thunderbird.desktop', 'vim.desktop', 'google-chrome.desktop']",
                                                   {"expected": ["google-chrome.desktop", "thunderbird.desktop"]}], {}),
        ("basic_os", "is_utc_0", [TIMEDATECTL.format(abbr="WET", zone="Atlantic/Faroe (WET, +0000)")], {}),
        ("basic_os", "is_utc_0", [TIMEDATECTL.format(abbr="CET", zone="Europe/Paris (CET, +0100)")], {}),
        ("basic_os", "check_text_enlarged", ["1.25\n"], {}),
        ("basic_os", "check_text_enlarged", ["1.0\n"], {}),
        ("basic_os", "check_moved_jpgs", [{"name": "cpjpg", "children": [{"name": "a.jpg"}, {"name": "b.jpg"}]},
                                          {"expected": ["b.jpg", "a.jpg"]}], {}),
        ("basic_os", "check_moved_jpgs", [{"name": "cpjpg", "children": [{"name": "a.jpg"}]},
                                          {"expected": ["b.jpg", "a.jpg"]}], {}),
    ]


def _pdf_cases(f: dict[str, str]) -> list[tuple[tuple[str, str, list, dict], float]]:
    """compare_pdfs / compare_pdf_images / PDF archives, each with the score PyMuPDF's reading gives."""
    from rapidfuzz import fuzz
    inv, edit, ag = _fitz_text(INVOICE), _fitz_text(INVOICE_EDIT), _fitz_text(AGENDA)
    half_edit = (1 + fuzz.ratio(edit, inv) / 100) / 2
    return [
        (("chrome", "compare_pdfs", [f["inv.pdf"], f["inv_copy.pdf"]], {}), 1.0),
        (("chrome", "compare_pdfs", [f["inv_edit.pdf"], f["inv.pdf"]], {}), fuzz.ratio(edit, inv) / 100),
        (("chrome", "compare_pdfs", [f["agenda.pdf"], f["inv.pdf"]], {}), fuzz.ratio(ag, inv) / 100),
        (("chrome", "compare_pdfs", [[f["inv_edit.pdf"], f["agenda.pdf"]], [f["inv.pdf"], f["agenda_copy.pdf"]]], {}),
         (fuzz.ratio(edit, inv) / 100 + 1) / 2),
        (("chrome", "compare_pdfs", [[f["inv.pdf"], f["not.pdf"]], [f["inv_copy.pdf"], f["agenda.pdf"]]], {}), 0.5),
        (("chrome", "compare_pdfs", [f["img_box.pdf"], f["img_disc.pdf"]], {}), 1.0),  # no text on either side
        (("chrome", "compare_pdfs", [None, f["inv.pdf"]], {}), 0.0),
        (("chrome", "compare_pdf_images", [f["img_box.pdf"], f["img_box_moved.pdf"]], {}), 1.0),
        (("chrome", "compare_pdf_images", [f["img_box.pdf"], f["img_disc.pdf"]], {}), 0.0),
        (("chrome", "compare_pdf_images", [f["img_two.pdf"], f["img_two_half.pdf"]], {}), 0.5),
        (("chrome", "compare_pdf_images", [f["img_two.pdf"], f["img_box.pdf"]], {}), 0.0),
        (("chrome", "compare_pdf_images", [f["img_alpha.pdf"], f["img_alpha_near.pdf"]], {}), 1.0),
        (("chrome", "compare_pdf_images", [f["img_alpha.pdf"], f["img_alpha_other.pdf"]], {}), 0.0),
        (("chrome", "compare_pdf_images", [f["inv.pdf"], f["agenda.pdf"]], {}), 1.0),  # no images on either side
        (("chrome", "compare_pdf_images", [None, f["img_box.pdf"]], {}), 0.0),
        (("chrome", "compare_archive", [f["slides.zip"], f["slides_gold.zip"]],
          {"file_path": "lecture_slides", "file_type": "pdf"}), 1.0),
        (("chrome", "compare_archive", [f["slides_edit.zip"], f["slides_gold.zip"]],
          {"file_path": "lecture_slides", "file_type": "pdf"}), half_edit),
        (("chrome", "compare_archive", [f["slides_names.zip"], f["slides_gold.zip"]],
          {"file_path": "lecture_slides", "file_type": "pdf"}), 0.0),
    ]


@needs_reference
def test_metrics_agree_with_osworld(f, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # OSWorld's compare_zip_files writes temp.pdf into the working directory
    cases = _cases(f)
    if _ref_has_fitz():
        cases += [c for c, _ in _pdf_cases(f)]
    assert_agree(cases)


def test_pdf_metrics_score_as_pymupdf_reads(f):
    for (_, fn, args, kwargs), want in _pdf_cases(f):
        assert METRICS[fn](*args, **kwargs) == pytest.approx(want, abs=1e-6), (fn, args, kwargs)


# ----------------------------------------------------------------------------------------------------
# ours alone: OSWorld crashes, or a form only ours takes


def test_results_osworld_crashes_on_score_zero(f, tmp_path):
    assert METRICS["run_sqlite3"](None, {"sql": "select 1"}) == 0.0
    assert METRICS["run_sqlite3"](f["not.pdf"], {"sql": "select count(*) from messages"}) == 0.0
    assert METRICS["run_sqlite3"](f["msgs.sqlite"], {"sql": "select * from messages where id = 99"}) == 0.0
    assert not (tmp_path / "absent.sqlite").exists()
    assert METRICS["run_sqlite3"](str(tmp_path / "absent.sqlite"), {"sql": "select 1"}) == 0.0
    assert not (tmp_path / "absent.sqlite").exists()  # sqlite3.connect would have made it
    assert METRICS["check_mp3_meta"](f["untagged.mp3"], {"title": {"method": "eq", "ref": ""}}) == 0.0
    assert METRICS["compare_htmls"](None, f["h.html"]) == 0.0
    assert METRICS["compare_archive"](f["broken.zip"], f["notes.zip"]) == 0.0
    assert METRICS["compare_archive"](f["evil.tar.gz"], f["notes.zip"]) == 0.0  # a member leaving the folder
    assert METRICS["compare_zip_files"](f["broken.zip"], f["mixed.zip"]) == 0.0
    assert METRICS["check_gnome_favorite_apps"]("@as []", {"expected": []}) == 0.0
    assert METRICS["is_utc_0"]("") == 0.0
    assert METRICS["check_text_enlarged"]("") == 0.0
    assert METRICS["is_in_vm_clickboard"]({"expected": "x"}, None) == 0.0


def test_epub_with_a_content_folder(f):
    # OSWorld crashes writing OEBPS/ch1.html; ours compares the two .html files (toc/opf sit in the folder)
    assert METRICS["compare_epub"](f["book_folder.epub"], f["book_folder.epub"]) == 1.0
    assert 0.0 < METRICS["compare_epub"](f["book_folder.epub"], f["book_gold.epub"]) < 1.0


def test_moved_jpgs_takes_our_directory_listing():
    rule = {"expected": ["a.jpg", "b.jpg"]}
    assert METRICS["check_moved_jpgs"](["b.jpg", "a.jpg"], rule) == 1.0
    assert METRICS["check_moved_jpgs"](["a.jpg"], rule) == 0.0
    assert METRICS["check_moved_jpgs"](None, rule) == 0.0


def test_malformed_tasks_raise(f):
    with pytest.raises(EvaluatorError, match="ref_value"):
        METRICS["check_pdf_pages"](f["inv.pdf"], {"relation": "eq"})
    with pytest.raises(EvaluatorError, match="relation"):
        METRICS["check_pdf_pages"](f["inv.pdf"], {"relation": "about", "ref_value": 1})
    with pytest.raises(EvaluatorError, match="file_type"):
        METRICS["compare_archive"](f["notes.zip"], f["notes.zip"], file_type="odt")
    with pytest.raises(EvaluatorError, match="expected"):
        METRICS["check_json_keybindings"](f["kb.json"], {"key": "ctrl+j"})
    with pytest.raises(EvaluatorError, match="sql"):
        METRICS["run_sqlite3"](f["msgs.sqlite"], {})
    with pytest.raises(EvaluatorError, match="whole number"):
        METRICS["check_line_number"](f["report.txt"], {"expected": "three"})


# ----------------------------------------------------------------------------------------------------
# getters


def _session(root: Path, run_dir: Path, **extra):
    """The part of DesktopSession the file getters use: VM paths live under `root`."""
    run_dir.mkdir(exist_ok=True)
    return SimpleNamespace(run_dir=run_dir, vm_home="/home/user", vm_path=lambda p: str(root) + str(p), **extra)


@needs_reference
def test_content_from_vm_file_agrees_with_osworld(tmp_path):
    import openpyxl
    vm = tmp_path / "vm"
    (vm / "home/user/Desktop").mkdir(parents=True)
    wb = openpyxl.Workbook()
    ws = wb.active
    for row in (["Name", "Citations", "h-index", "i10", "Top paper", "Link"],
                ["Geoffrey Hinton", 900000, 190, 480, "ImageNet", "https://example.org/a"],
                ["Yann LeCun", 345074, 147, 372, "Deep learning", None]):
        ws.append(row)
    wb.save(vm / "home/user/Desktop/researchers.xlsx")
    config = {"type": "content_from_vm_file", "path": "/home/user/Desktop/researchers.xlsx",
              "file_type": "xlsx", "file_content": "last_row"}
    [theirs] = reference([("getters.file", "get_content_from_vm_file", [config], {})], env_dir=str(vm))
    ours = GETTERS["content_from_vm_file"](_session(vm, tmp_path / "run"), config)
    assert json.dumps(theirs) == json.dumps({"value": ours})  # JSON: the empty cell's NaN compares equal
    assert ours[:5] == ["Yann LeCun", "345074", "147", "372", "Deep learning"]
    assert GETTERS["content_from_vm_file"](_session(vm, tmp_path / "run"),
                                           dict(config, path="/home/user/Desktop/absent.xlsx")) is None
    with pytest.raises(EvaluatorError, match="last_row"):
        GETTERS["content_from_vm_file"](_session(vm, tmp_path / "run"), dict(config, file_content="first_row"))


def test_vscode_config_runs_the_command_then_copies_the_file(tmp_path):
    vm = tmp_path / "vm"
    (vm / "home/user").mkdir(parents=True)
    config = {"type": "vscode_config", "vscode_extension_command": "OpenProject", "path": "/home/user/OpenProject.txt",
              "dest": "OpenProject.txt"}
    assert GETTERS["vscode_config"](_session(vm, tmp_path / "run"), config) is None  # no file, no VS Code window

    sent: list[str] = []

    def run_python(code: str):
        sent.append(code)
        (vm / "home/user/OpenProject.txt").write_text("project")  # what the extension's command writes

    s = _session(vm, tmp_path / "run", find_window=lambda name: "0x1" if name == "Visual Studio Code" else None,
                 activate_window=lambda name: True, run_python=run_python)
    copy = GETTERS["vscode_config"](s, config)
    assert sent == ["pyautogui.hotkey('ctrl', 'shift', 'p'); pyautogui.typewrite('OpenProject'); "
                    "pyautogui.press('enter')"]
    assert copy and Path(copy).read_text() == "project" and Path(copy).parent == tmp_path / "run" / "eval_cache"
    assert METRICS["compare_config"](copy, {"expected": "project"}) == 1.0


def test_osworld_tasks_through_evaluate(tmp_path, osworld_examples):
    """OSWorld's own task files through evaluate(): VS Code's keybindings.json (vm_file) and moved JPEGs
    (list_directory), on a stand-in VM whose files live in a folder."""
    from envs.osworld.evaluators import evaluate
    from envs.osworld.tasks import load_task
    vm = tmp_path / "vm"
    code_user = vm / "home/user/.config/Code/User"
    code_user.mkdir(parents=True)
    session = _session(vm, tmp_path / "run")
    keys = load_task(osworld_examples / "vs_code/930fdb3b-11a8-46fe-9bac-577332e2640e.json")
    assert evaluate(keys, session) == 0.0  # no keybindings.json yet
    (code_user / "keybindings.json").write_text(KEYBINDINGS)
    assert evaluate(keys, session) == 1.0
    (code_user / "keybindings.json").write_text(KEYBINDINGS.replace("ctrl+j", "ctrl+k"))
    assert evaluate(keys, session) == 0.0

    jpgs = load_task(osworld_examples / "os/23393935-50c7-4a86-aeea-2b78fd089c5c.json")
    moved = vm / "home/user/Desktop/cpjpg"
    moved.mkdir(parents=True)
    names = ["emnlp2023.jpg", "hk_group_photo.jpg", "hong-kong-china.jpg",
             "monk252520thailand252520wat252520arun252520scaled25255B225255D.jpg"]
    for n in names[:3]:
        (moved / n).write_bytes(b"\xff\xd8\xff")
    assert evaluate(jpgs, session) == 0.0
    (moved / names[3]).write_bytes(b"\xff\xd8\xff")
    assert evaluate(jpgs, session) == 1.0
