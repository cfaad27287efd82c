"""OSWorld's metrics for LibreOffice Impress presentations (.pptx) and Impress's settings.

Judge-only (envs/osworld/.workspace-exclude keeps evaluators/ out of every workspace): registers its metrics
in metrics.METRICS (imported by evaluators/__init__); the getters whose values they compare are in
getters/slides.py.
Own implementations with python-pptx and lxml; OSWorld's metrics/slides.py and getters/impress.py define the
behaviour (tests/osworld/test_osworld_slides.py compares the two).

Metrics (registered in METRICS):
  compare_pptx_files                          result vs expected deck: slides, shapes, geometry, text, fonts,
                                              tables, bullets, notes, backgrounds (examine_* options)
  check_image_stretch_and_center              the original's first picture fills the first slide, centred
  check_slide_orientation_Portrait            the slides are taller than wide
  evaluate_presentation_fill_to_rgb_distance  1 - mean distance of the slides' solid backgrounds to rules["rgb"]
  check_transition                            slide file rules["slide_idx"] has a rules["transition_type"]
                                              transition
  check_page_number_colors                    the slide master's slide-number colour is rules["color"]
  check_left_panel                            the accessibility tree shows Impress's "Slides View" pane
  check_presenter_console_disable             registrymodifications.xcu turns the presenter screen off
  check_auto_saving_time                      registrymodifications.xcu autosaves every rules["minutes"]
"""

from __future__ import annotations

import math
import os
import zipfile
from typing import Any, Iterator, Mapping

from ..errors import EvaluatorError
from .metrics import _rule, metric
from ..getters.slides import _A_NS, _a, _p

_XCU_NS = "http://openoffice.org/2001/registry"


def _presentation(path: str | None):
    """The python-pptx Presentation at path, or None when it is missing or unreadable."""
    if not path or not os.path.isfile(path):
        return None
    from pptx import Presentation
    try:
        return Presentation(path)
    except Exception:  # noqa: BLE001 - an unreadable result scores 0
        return None


def _shape_type(shape) -> Any:
    """MSO_SHAPE_TYPE of a shape; None for one python-pptx cannot classify (an sp without geometry)."""
    try:
        return shape.shape_type
    except NotImplementedError:
        return None


_FILL_TAGS = tuple(_a(t) for t in ("noFill", "solidFill", "gradFill", "blipFill", "pattFill", "grpFill"))
_INHERITED = object()  # a background without a fill of its own


def _background_fill(part_element) -> Any:
    """The fill element of a slide's or master's own background; _INHERITED when it has no fill of its own
    (no background, an explicit no-fill, or a theme style reference: python-pptx reads all three as no fill);
    None for a background without a fill element."""
    props = part_element.find(f"{_p('cSld')}/{_p('bg')}/{_p('bgPr')}")
    if props is None:
        return _INHERITED
    fill = next((child for child in props if child.tag in _FILL_TAGS), None)
    return _INHERITED if fill is not None and fill.tag == _a("noFill") else fill


def _background_color(slide) -> Any:
    """The solid colour a slide's background shows: its own solid fill, else (no fill of its own) the slide
    master's, layouts skipped as OSWorld skips them; None for any other fill. An RGB colour is an RGBColor;
    another kind of colour (theme, preset, ...) is its canonical XML."""
    from lxml import etree
    from pptx.dml.color import RGBColor
    fill = _background_fill(slide.element)
    if fill is _INHERITED:
        fill = _background_fill(slide.slide_layout.slide_master.element)
    if fill is None or fill is _INHERITED or fill.tag != _a("solidFill"):
        return None
    if len(fill) and fill[0].tag == _a("srgbClr"):
        return RGBColor.from_string(fill[0].get("val"))
    return etree.tostring(fill, method="c14n")


def _notes_text(slide) -> str:
    """The text of a slide's notes body; "" when the slide has no notes page or the page no notes body."""
    if not slide.has_notes_slide:
        return ""
    frame = slide.notes_slide.notes_text_frame
    return frame.text if frame is not None else ""


def _text_shapes(shapes) -> Iterator[Any]:
    """The shapes holding a text frame, group members included (depth first)."""
    for shape in shapes:
        if shape.has_text_frame:
            yield shape
        if hasattr(shape, "shapes"):
            yield from _text_shapes(shape.shapes)


def _slide_bullets(slide) -> list[tuple] | None:
    """(level, bullet character, text) of every paragraph with visible text in the slide's XML, tables and
    groups included. A paragraph without properties has level None, one without a bullet character has
    character None. None when some text element is empty (<a:t/>): OSWorld's extraction fails on it and
    then skips the bullet check."""
    out = []
    for para in slide.element.iter(_a("p")):
        parts = [t.text for t in para.iter(_a("t"))]
        if any(part is None for part in parts):
            return None
        text = "".join(parts)
        if not text.strip():
            continue
        props = para.find(_a("pPr"))
        if props is None:
            out.append((None, None, text))
            continue
        char = props.find(_a("buChar"))
        out.append((props.get("lvl", "0"), None if char is None else char.get("char"), text))
    return out


# ----------------------------------------------------------------------------------------------------
# compare_pptx_files

# OSWorld's examine_* options and their defaults; other option names (tasks pass the misspelt
# "examine_aligment" and "enable_debug") are ignored as OSWorld ignores them.
_EXAMINE_DEFAULTS = {
    "examine_number_of_slides": True, "examine_shape": True, "examine_text": True, "examine_indent": True,
    "examine_font_name": True, "examine_font_size": True, "examine_font_bold": True,
    "examine_font_italic": True, "examine_color_rgb": True, "examine_font_underline": True,
    "examine_strike_through": True, "examine_alignment": True, "examine_bullets": True,
    "examine_background_color": True, "examine_note": True,
    # special-purpose geometry checks written for single tasks
    "examine_title_bottom_position": False, "examine_table_bottom_position": False,
    "examine_right_position": False, "examine_top_position": False, "examine_shape_for_shift_size": False,
    "examine_image_size": False, "examine_modify_height": False,
}
_TITLE_TEXT = "Product Comparison"  # examine_title_bottom_position's title (task 15aece23)
_SHIFT_EXEMPT_TEXT = "Elaborate on what you want to discuss."  # examine_shape_for_shift_size (task 3161d64e)


class _Mismatch(Exception):
    """The decks differ (raised from deep in the comparison; compare_pptx_files scores 0)."""


def _fail_if(condition: bool) -> None:
    if condition:
        raise _Mismatch


class _DeckComparison:
    """compare_pptx_files' check of one result deck against the expected one; run() raises _Mismatch."""

    def __init__(self, options: Mapping[str, Any]):
        self.on = {name: bool(options.get(name, default)) for name, default in _EXAMINE_DEFAULTS.items()}
        self.tolerance = options.get("approximately_tolerance", 0.005)

    def close(self, a: Any, b: Any) -> bool:
        """Equal within the relative tolerance; a zero against a non-zero is never close."""
        if a == b:
            return True
        if a == 0 or b == 0:
            return False
        return abs(a - b) / max(abs(a), abs(b)) <= self.tolerance

    def same_box(self, s1, s2) -> bool:
        return all(self.close(getattr(s1, k), getattr(s2, k)) for k in ("left", "top", "width", "height"))

    def run(self, prs1, prs2) -> None:
        _fail_if(self.on["examine_number_of_slides"] and len(prs1.slides) != len(prs2.slides))
        for number, (slide1, slide2) in enumerate(zip(prs1.slides, prs2.slides), start=1):
            self.slide(number, slide1, slide2)

    def slide(self, number: int, slide1, slide2) -> None:
        from pptx.enum.shapes import MSO_SHAPE_TYPE
        on = self.on
        _fail_if(on["examine_background_color"] and _background_color(slide1) != _background_color(slide2))
        _fail_if(on["examine_note"] and _notes_text(slide1).strip() != _notes_text(slide2).strip())
        _fail_if(len(slide1.shapes) != len(slide2.shapes))
        compared_runs = False
        for shape1, shape2 in zip(slide1.shapes, slide2.shapes):
            self.geometry(number, shape1, shape2)
            if _shape_type(shape1) == MSO_SHAPE_TYPE.TABLE:  # the result's shape decides, as in OSWorld
                self.table(shape1, shape2)
            if shape1.has_text_frame and shape2.has_text_frame:
                compared_runs = self.text(shape1, shape2) or compared_runs
        # OSWorld compares the whole slide's bullets once it has compared a pair of runs
        if compared_runs and on["examine_bullets"]:
            bullets1, bullets2 = _slide_bullets(slide1), _slide_bullets(slide2)
            _fail_if(bullets1 is not None and bullets2 is not None and bullets1 != bullets2)
        texts1, texts2 = list(_text_shapes(slide1.shapes)), list(_text_shapes(slide2.shapes))
        _fail_if(len(texts1) != len(texts2))
        if on["examine_alignment"]:  # again over every text shape, group members included
            for t1, t2 in zip(texts1, texts2):
                _fail_if(on["examine_text"] and t1.text.strip() != t2.text.strip())
                paras1, paras2 = t1.text_frame.paragraphs, t2.text_frame.paragraphs
                _fail_if(len(paras1) != len(paras2))
                _fail_if(any(_alignment(a) != _alignment(b) for a, b in zip(paras1, paras2)))

    def geometry(self, number: int, s1, s2) -> None:
        """The position checks, each switched on by its option."""
        from pptx.enum.shapes import MSO_SHAPE_TYPE
        on = self.on
        texts = s1.has_text_frame and s2.has_text_frame
        kind1, kind2 = _shape_type(s1), _shape_type(s2)
        pictures = kind1 == kind2 == MSO_SHAPE_TYPE.PICTURE
        if on["examine_title_bottom_position"]:
            # the title must have moved down (to at least 3,600,000 EMU); other shapes stay put
            if texts and s1.text == s2.text:
                _fail_if(s1.text == _TITLE_TEXT and (s1.top <= s2.top or s1.top < 3_600_000))
            else:
                _fail_if(not self.same_box(s1, s2))
        if on["examine_table_bottom_position"]:
            # slide 3's table must have moved down; other shapes stay put
            if number == 3 and kind1 == kind2 == MSO_SHAPE_TYPE.TABLE:
                _fail_if(s1.top <= s2.top or s1.top < 3_600_000)
            else:
                _fail_if(not self.same_box(s1, s2))
        if on["examine_right_position"] and number == 2 and not s1.has_text_frame and not s2.has_text_frame:
            _fail_if(s1.left <= s2.left or s1.left < 4_320_000)
        if on["examine_top_position"] and number == 2 and pictures:
            _fail_if(s1.top >= s2.top or s1.top > 1_980_000)
        if on["examine_shape_for_shift_size"] and not self.same_box(s1, s2):
            _fail_if(not (texts and s1.text == s2.text == _SHIFT_EXEMPT_TEXT))
        if on["examine_shape"]:
            _fail_if(not self.same_box(s1, s2))
        if on["examine_image_size"]:
            if pictures:
                _fail_if(not (self.close(s1.width, s2.width) and self.close(s1.height, s2.height)))
            else:
                _fail_if(not self.same_box(s1, s2))
        if on["examine_modify_height"]:
            if (not s1.has_text_frame and not s2.has_text_frame) or kind1 == kind2 == MSO_SHAPE_TYPE.FREEFORM:
                _fail_if(not self.close(s1.height, s2.height))
            else:
                _fail_if(not self.same_box(s1, s2))

    def table(self, s1, s2) -> None:
        """Same grid, and per cell the same paragraph and run counts and run formatting (not the text)."""
        _fail_if(not getattr(s2, "has_table", False))
        t1, t2 = s1.table, s2.table
        _fail_if(len(t1.rows) != len(t2.rows) or len(t1.columns) != len(t2.columns))
        for r in range(len(t1.rows)):
            for c in range(len(t1.columns)):
                paras1 = t1.cell(r, c).text_frame.paragraphs
                paras2 = t2.cell(r, c).text_frame.paragraphs
                _fail_if(len(paras1) != len(paras2))
                for p1, p2 in zip(paras1, paras2):
                    _fail_if(len(p1.runs) != len(p2.runs))
                    for run1, run2 in zip(p1.runs, p2.runs):
                        f1, f2 = run1.font, run2.font
                        _fail_if(self.on["examine_color_rgb"] and _rgb_differs(f1, f2))
                        _fail_if(_flag_differs(f1.bold, f2.bold) or _flag_differs(f1.italic, f2.italic))
                        _fail_if(_underline_differs(f1.underline, f2.underline))

    def text(self, s1, s2) -> bool:
        """Text, paragraphs and runs of two text shapes; True when some pair of runs was compared."""
        on = self.on
        _fail_if(on["examine_text"] and s1.text.strip() != s2.text.strip())
        paras1, paras2 = s1.text_frame.paragraphs, s2.text_frame.paragraphs
        _fail_if(len(paras1) != len(paras2))
        compared = False
        for p1, p2 in zip(paras1, paras2):
            _fail_if(on["examine_alignment"] and _alignment(p1) != _alignment(p2))
            _fail_if(on["examine_text"] and p1.text != p2.text)
            _fail_if(on["examine_indent"] and p1.level != p2.level)
            _fail_if(len(p1.runs) != len(p2.runs))
            for run1, run2 in zip(p1.runs, p2.runs):
                compared = True
                f1, f2 = run1.font, run2.font
                _fail_if(on["examine_font_name"] and f1.name != f2.name)
                _fail_if(on["examine_font_size"] and f1.size != f2.size)
                _fail_if(on["examine_font_bold"] and _flag_differs(f1.bold, f2.bold))
                _fail_if(on["examine_font_italic"] and _flag_differs(f1.italic, f2.italic))
                _fail_if(on["examine_color_rgb"] and _rgb_differs(f1, f2))
                _fail_if(on["examine_font_underline"] and _underline_differs(f1.underline, f2.underline))
                _fail_if(on["examine_strike_through"] and _strike(run1) != _strike(run2))
        return compared


def _alignment(paragraph) -> Any:
    """A paragraph's alignment; unset counts as left."""
    from pptx.enum.text import PP_ALIGN
    return paragraph.alignment if paragraph.alignment is not None else PP_ALIGN.LEFT


def _flag_differs(a: bool | None, b: bool | None) -> bool:
    """Bold/italic: unset and off are the same."""
    return bool(a) != bool(b)


def _underline_differs(a: Any, b: Any) -> bool:
    """Underline as python-pptx reads it (True single, False none, None unset, else the style): two set
    values must be equal, and unset only differs from single."""
    if a == b:
        return False
    if a is not None and b is not None:
        return True
    return a is True or b is True


def _run_rgb(font) -> Any:
    """The run's explicit RGB colour, None when it has none (a theme colour or no colour is not compared)."""
    from pptx.enum.dml import MSO_COLOR_TYPE, MSO_FILL
    fill = font.fill
    if fill.type != MSO_FILL.SOLID or fill.fore_color.type != MSO_COLOR_TYPE.RGB:
        return None
    return fill.fore_color.rgb


def _rgb_differs(f1, f2) -> bool:
    c1, c2 = _run_rgb(f1), _run_rgb(f2)
    return c1 is not None and c2 is not None and c1 != c2


def _strike(run) -> str:
    props = run._r.rPr
    return "noStrike" if props is None else props.get("strike", "noStrike")


@metric
def compare_pptx_files(file1_path: str, file2_path: str, **options: Any) -> float:
    """1.0 iff the result deck (file1) matches the expected one (file2) in everything the options examine.

    Options (default on): examine_number_of_slides, examine_shape (left/top/width/height within the relative
    approximately_tolerance, default 0.005), examine_text, examine_indent (paragraph level), examine_font_name,
    examine_font_size, examine_font_bold, examine_font_italic, examine_color_rgb, examine_font_underline,
    examine_strike_through, examine_alignment (also over group members), examine_bullets, examine_background_color,
    examine_note. Task-specific (default off): examine_title_bottom_position, examine_table_bottom_position,
    examine_right_position, examine_top_position, examine_shape_for_shift_size, examine_image_size,
    examine_modify_height. Always: the same number of shapes per slide, of paragraphs per text shape and of runs
    per paragraph, and tables (of the result) with the same grid and run formatting.
    """
    prs1, prs2 = _presentation(file1_path), _presentation(file2_path)
    if prs1 is None or prs2 is None:
        return 0.0
    try:
        _DeckComparison(options).run(prs1, prs2)
    except _Mismatch:
        return 0.0
    except Exception:  # noqa: BLE001 - a deck python-pptx cannot fully read (no position to compare, ...) scores 0
        return 0.0
    return 1.0


# ----------------------------------------------------------------------------------------------------
# single-property checks of a deck


@metric
def check_image_stretch_and_center(modified_ppt: str, original_ppt: str) -> float:
    """The original deck's first picture on slide 1, found again on the result's slide 1 (same image bytes;
    the last such picture), fills the original's slide size and is centred, each within half an inch."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE
    from pptx.util import Inches
    original, modified = _presentation(original_ppt), _presentation(modified_ppt)
    if original is None or modified is None or not len(original.slides) or not len(modified.slides):
        return 0.0

    def pictures(prs) -> list:
        return [s for s in prs.slides[0].shapes if _shape_type(s) == MSO_SHAPE_TYPE.PICTURE]

    wanted = pictures(original)
    if not wanted:
        return 0.0
    try:
        blob = wanted[0].image.blob
        matches = [s for s in pictures(modified) if s.image.blob == blob]
    except Exception:  # noqa: BLE001 - a linked picture has no image data to match
        return 0.0
    if not matches:
        return 0.0
    picture, tol = matches[-1], Inches(0.5)
    width, height = original.slide_width, original.slide_height
    return float(abs(picture.width - width) <= tol and abs(picture.height - height) <= tol
                 and abs(picture.left - (width - picture.width) / 2) <= tol
                 and abs(picture.top - (height - picture.height) / 2) <= tol)


@metric
def check_slide_orientation_Portrait(pptx_path: str) -> float:
    """1.0 iff the slide size is portrait (narrower than tall)."""
    prs = _presentation(pptx_path)
    return float(prs is not None and prs.slide_width < prs.slide_height)


@metric
def evaluate_presentation_fill_to_rgb_distance(pptx_file: str, rules: Mapping[str, Any]) -> float:
    """1 - the mean over slides of the background's distance to rules["rgb"] (Euclidean, scaled so black to
    white is 1). A slide whose background is not a solid RGB colour, or is still rules["original_rgb"],
    counts distance 1."""
    target = _rule(rules, "rgb", "evaluate_presentation_fill_to_rgb_distance")
    original = rules.get("original_rgb")
    prs = _presentation(pptx_file)
    if prs is None or not len(prs.slides):
        return 0.0

    def distance(slide) -> float:
        color = _background_color(slide)
        if not isinstance(color, tuple):  # not an RGB colour (RGBColor is a tuple)
            return 1.0
        if original is not None and list(color) == list(original):
            return 1.0
        return math.sqrt(sum((a - b) ** 2 for a, b in zip(color, target))) / math.sqrt(3 * 255 ** 2)

    return 1.0 - sum(distance(s) for s in prs.slides) / len(prs.slides)


def _zip_xml(path: str | None, member: str):
    """The parsed XML of a member of a zip package; None when the file or member is missing or unreadable."""
    from lxml import etree
    if not path or not os.path.isfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as z:
            return etree.fromstring(z.read(member))
    except (KeyError, OSError, zipfile.BadZipFile, etree.XMLSyntaxError):
        return None


@metric
def check_transition(pptx_file: str, rules: Mapping[str, Any]) -> float:
    """1.0 iff the deck's slide file number rules["slide_idx"] + 1 (ppt/slides/slideN.xml, not the play
    order) has a transition whose first p:transition element holds a p:<rules["transition_type"]> element."""
    index = _rule(rules, "slide_idx", "check_transition")
    kind = _rule(rules, "transition_type", "check_transition")
    root = _zip_xml(pptx_file, f"ppt/slides/slide{index + 1}.xml")
    if root is None:
        return 0.0
    transition = next(root.iter(_p("transition")), None)  # LibreOffice writes one per mc:AlternateContent branch
    return float(transition is not None and next(transition.iterdescendants(_p(kind)), None) is not None)


_PAGE_NUMBER_COLORS = {
    "red": lambda r, g, b: r > g + 50 and r > b + 50,
    "green": lambda r, g, b: g > r + 50 and g > b + 50,
    "blue": lambda r, g, b: b > r + 50 and b > g + 50,
    "black": lambda r, g, b: r < 50 and g < 50 and b < 50,
}


@metric
def check_page_number_colors(pptx_file: str, rules: Mapping[str, Any]) -> float:
    """1.0 iff the slide-number colour of slide master 1 is clearly rules["color"] (red, green, blue or black:
    that channel 50 above the others, or all below 50). As OSWorld, the colour is the second-last RGB colour
    of a solid fill in the master's XML (where its slide-number field's text colour sits)."""
    color = _rule(rules, "color", "check_page_number_colors")
    if color not in _PAGE_NUMBER_COLORS:
        raise EvaluatorError(f"check_page_number_colors: color {color!r} unsupported; use one of "
                             f"{', '.join(_PAGE_NUMBER_COLORS)}")
    root = _zip_xml(pptx_file, "ppt/slideMasters/slideMaster1.xml")
    if root is None:
        return 0.0
    colors = root.xpath(".//a:solidFill//a:srgbClr", namespaces={"a": _A_NS})
    value = colors[-2].get("val") if len(colors) >= 2 else None
    try:
        r, g, b = (int(value[i:i + 2], 16) for i in (0, 2, 4))
    except (TypeError, ValueError):
        return 0.0
    return float(_PAGE_NUMBER_COLORS[color](r, g, b))


# ----------------------------------------------------------------------------------------------------
# Impress's window and settings


@metric
def check_left_panel(accessibility_tree: str) -> float:
    """1.0 iff the accessibility tree has a document-frame named "Slides View" (Impress's slide pane is open)."""
    from lxml import etree
    if not accessibility_tree:
        return 0.0
    try:
        root = etree.fromstring(accessibility_tree.encode() if isinstance(accessibility_tree, str)
                                else accessibility_tree)
    except etree.XMLSyntaxError:
        return 0.0
    return float(any(e.get("name") == "Slides View" for e in root.iter("document-frame")))


def _xcu_values(path: str | None, item_path: str, prop_name: str, nested: bool) -> list[str | None] | None:
    """The text of the <value> of the registry property prop_name under each <item oor:path=item_path> of a
    LibreOffice registrymodifications.xcu, in file order (the item's first such property; None for one
    without a value). nested: the property and value may sit deeper than child level. None when the file is
    missing or unreadable."""
    from lxml import etree
    if not path or not os.path.isfile(path):
        return None
    try:
        root = etree.parse(path).getroot()
    except (OSError, etree.XMLSyntaxError):
        return None
    found = []
    for item in root.iter("item"):
        if item.get(f"{{{_XCU_NS}}}path") != item_path:
            continue
        for prop in (item.iter("prop") if nested else item.iterchildren("prop")):
            if prop.get(f"{{{_XCU_NS}}}name") == prop_name:
                value = next(prop.iter("value") if nested else prop.iterchildren("value"), None)
                found.append(None if value is None else value.text)
                break  # one value per item
    return found


@metric
def check_presenter_console_disable(config_file_path: str) -> float:
    """1.0 iff registrymodifications.xcu sets Impress's Misc/Start/EnablePresenterScreen to false (its first
    entry counts)."""
    values = _xcu_values(config_file_path, "/org.openoffice.Office.Impress/Misc/Start", "EnablePresenterScreen",
                         nested=False)
    return float(bool(values) and (values[0] or "").lower() == "false")


@metric
def check_auto_saving_time(pptx_file: str, rules: Mapping[str, Any]) -> float:
    """1.0 iff registrymodifications.xcu sets Save/Document/AutoSaveTimeIntervall to rules["minutes"] (its
    last entry counts). (OSWorld names the file argument pptx_file.)"""
    minutes = _rule(rules, "minutes", "check_auto_saving_time")
    values = _xcu_values(pptx_file, "/org.openoffice.Office.Common/Save/Document", "AutoSaveTimeIntervall",
                         nested=True)
    if not values or values[-1] is None:
        return 0.0
    try:
        return float(int(values[-1]) == minutes)
    except ValueError:
        return 0.0
