"""OSWorld's state getters for LibreOffice Impress presentations (.pptx) and Impress's settings.

Runs where the desktop is (inside the workspace, through osworld.collect): registers its getters in
getters.common.GETTERS and compares nothing; its metrics are in evaluators/slides.py, which no workspace holds.
Own implementations with python-pptx and lxml; OSWorld's metrics/slides.py and getters/impress.py define the
behaviour (tests/osworld/test_osworld_slides.py compares the two).

Getters (registered in GETTERS):
  audio_in_slide              {"ppt_file_path", "slide_index", "dest"} → the first audio the slide relates
                              (extracted from the deck, or the linked file copied off the VM), None if none
  background_image_in_slide   {"ppt_file_path", "slide_index", "dest"} → the slide's background picture, or None
"""

from __future__ import annotations

import os
import posixpath
import zipfile
from typing import Any, Mapping
from urllib.parse import unquote

from ..errors import EvaluatorError
from .common import cache_dir, get_vm_file, getter

_A_NS = "http://schemas.openxmlformats.org/drawingml/2006/main"
_P_NS = "http://schemas.openxmlformats.org/presentationml/2006/main"
_R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"


def _a(tag: str) -> str:
    return f"{{{_A_NS}}}{tag}"


def _p(tag: str) -> str:
    return f"{{{_P_NS}}}{tag}"


# ----------------------------------------------------------------------------------------------------
# getters: media a slide uses


def _slide_config(config: Mapping[str, Any], name: str) -> tuple[str, int, str]:
    missing = [k for k in ("ppt_file_path", "slide_index", "dest") if k not in config]
    if missing:
        raise EvaluatorError(f"getter {name!r} needs {', '.join(missing)}")
    try:
        index = int(config["slide_index"])
    except (TypeError, ValueError):
        raise EvaluatorError(f"getter {name!r}: slide_index must be an integer, not {config['slide_index']!r}")
    return str(config["ppt_file_path"]), index, str(config["dest"])


def _slide_relations(package: zipfile.ZipFile, slide_no: int) -> list[Any]:
    """The Relationship elements of ppt/slides/slideN.xml (N = slide_no, the file's number)."""
    from lxml import etree
    try:
        root = etree.fromstring(package.read(f"ppt/slides/_rels/slide{slide_no}.xml.rels"))
    except (KeyError, etree.XMLSyntaxError):
        return []
    return root.findall(f"{{{_PKG_REL_NS}}}Relationship")


def _relation_target(session, package: zipfile.ZipFile, relation, dest: str) -> str | None:
    """A local copy of what a slide's relationship points at: a part of the package (extracted), or a file://
    link on the VM (copied off it; None if that file is gone)."""
    target = relation.get("Target", "")
    if target.startswith("file://"):
        return get_vm_file(session, {"path": unquote(target[len("file://"):]), "dest": dest})
    member = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join("ppt/slides",
                                                                                                  target))
    try:
        data = package.read(member)
    except KeyError:
        return None
    local = os.path.join(cache_dir(session), os.path.basename(dest))
    with open(local, "wb") as f:
        f.write(data)
    return local


def _open_deck(session, ppt_path: str) -> zipfile.ZipFile | None:
    local = get_vm_file(session, {"path": ppt_path, "dest": os.path.basename(ppt_path)})
    if local is None:
        return None
    try:
        return zipfile.ZipFile(local)
    except zipfile.BadZipFile:
        return None


@getter("audio_in_slide")
def get_audio_in_slide(session, config: Mapping[str, Any]) -> str | None:
    ppt_path, index, dest = _slide_config(config, "audio_in_slide")
    package = _open_deck(session, ppt_path)
    if package is None:
        return None
    with package:
        for relation in _slide_relations(package, index + 1):
            if "audio" in relation.get("Type", ""):
                return _relation_target(session, package, relation, dest)
    return None


@getter("background_image_in_slide")
def get_background_image_in_slide(session, config: Mapping[str, Any]) -> str | None:
    from lxml import etree
    ppt_path, index, dest = _slide_config(config, "background_image_in_slide")
    package = _open_deck(session, ppt_path)
    if package is None:
        return None
    with package:
        try:
            slide = etree.fromstring(package.read(f"ppt/slides/slide{index + 1}.xml"))
        except (KeyError, etree.XMLSyntaxError):
            return None
        image_id = None
        for props in slide.iter(_p("bgPr")):
            blip = next(props.iter(_a("blip")), None)  # the first picture of each background fill
            image_id = None if blip is None else blip.get(f"{{{_R_NS}}}embed")
            if image_id is not None:
                break
        if image_id is None:
            return None
        for relation in _slide_relations(package, index + 1):
            if "image" in relation.get("Type", "") and relation.get("Id") == image_id:
                return _relation_target(session, package, relation, dest)
    return None
