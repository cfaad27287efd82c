"""OSWorld's state getters for images (GIMP's domain): similarity, size, colour and geometry checks.

Runs where the desktop is (inside the workspace, through osworld.collect): registers its getters in
getters.common.GETTERS and compares nothing; its metrics are in evaluators/images.py, which no workspace holds.
"Similar" below means SSIM >= 0.9 (7-pixel window, RGB) on two images of the same size, each side >= 7 px.

Getters:
  vm_wallpaper  {"dest"} → a copy of the file GSettings' org.gnome.desktop.background picture-uri names,
      None if it names no existing file
"""

from __future__ import annotations

import ast
import os
import shutil
from typing import Any, Mapping
from urllib.parse import unquote, urlparse

from .common import cache_dir, getter


# ----------------------------------------------------------------------------------------------------
# getters


def _gvariant_string(text: str) -> str:
    """The value of a GVariant string as `gsettings get` prints it ('...' or "..." with C escapes)."""
    text = text.strip()
    if text[:1] in ("'", '"'):
        try:
            return str(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            return text[1:-1]
    return text


@getter("vm_wallpaper")
def get_vm_wallpaper(session, config: Mapping[str, Any]) -> str | None:
    """A copy of the desktop's wallpaper in the evaluation cache (named by config["dest"]), None if none."""
    p = session.run_task_command(["gsettings", "get", "org.gnome.desktop.background", "picture-uri"])
    if p.returncode != 0:
        return None
    uri = _gvariant_string(p.stdout)
    path = unquote(urlparse(uri).path) if uri.startswith("file://") else uri
    src = session.vm_path(path) if path else ""
    if not os.path.isfile(src):
        return None
    local = os.path.join(cache_dir(session), os.path.basename(str(config.get("dest") or src)))
    shutil.copyfile(src, local)
    return local
