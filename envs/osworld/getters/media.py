"""OSWorld's state getters for VLC (its config and playing state), audio and video files.

Runs where the desktop is (inside the workspace, through osworld.collect): registers its getters in
getters.common.GETTERS and compares nothing; its metrics are in evaluators/media.py, which no workspace holds.

Getters:
  vlc_config            {"dest"} → a copy of ~/.config/vlc/vlcrc, None if absent
  vlc_playing_info      {"dest"} → a copy of VLC's HTTP status.xml (127.0.0.1:session.vlc_port, else 8080;
                        password "password" as in OSWorld's VM), None if VLC does not answer
  default_video_player  {} → the .desktop id (xdg-mime's output line) that is the default for most video
                        types, 'unknown' if none
  vm_screen_size        {} → {"width", "height"} of the X screen
  vm_window_size        {"app_class_name"} → {"width", "height"} of the first managed window whose WM_CLASS
                        names that class (case-insensitive), None if none
"""

from __future__ import annotations

import base64
import os
import re
import urllib.error
import urllib.request
from collections import Counter
from typing import Any, Mapping

from ..errors import EvaluatorError
from .common import cache_dir, get_vm_file, getter

VLC_HTTP_PORT = 8080
"""VLC's default HTTP port, the one OSWorld's VM serves status.xml on."""
VLC_HTTP_PASSWORD = "password"
"""The Lua HTTP password OSWorld's VM image sets in vlcrc."""


# ----------------------------------------------------------------------------------------------------
# getters


@getter("vlc_config")
def get_vlc_config(session, config: Mapping[str, Any]) -> str | None:
    return get_vm_file(session, {"path": f"{session.vm_home}/.config/vlc/vlcrc",
                                 "dest": config.get("dest", "vlcrc")})


@getter("vlc_playing_info")
def get_vlc_playing_info(session, config: Mapping[str, Any]) -> str | None:
    port = getattr(session, "vlc_port", None) or VLC_HTTP_PORT
    auth = base64.b64encode(f":{VLC_HTTP_PASSWORD}".encode()).decode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/requests/status.xml",
                                 headers={"Authorization": f"Basic {auth}"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            body = r.read()
    except (urllib.error.URLError, OSError):  # VLC not running, no HTTP interface, wrong password
        return None
    path = os.path.join(cache_dir(session), os.path.basename(str(config.get("dest", "status.xml"))))
    with open(path, "wb") as f:
        f.write(body)
    return path


# OSWorld asks xdg-mime about these video/<subtype>s; it lists each twice except x-ogm+ogg, so that one
# weighs half in the vote (kept: it decides ties the same way).
_VIDEO_SUBTYPES = (
    "3gp", "3gpp", "3gpp2", "avi", "divx", "dv", "fli", "flv", "mp2t", "mp4", "mp4v-es", "mpeg", "mpeg-system",
    "msvideo", "ogg", "quicktime", "vnd.divx", "vnd.mpegurl", "vnd.rn-realvideo", "webm", "x-anim", "x-avi",
    "x-flc", "x-fli", "x-flv", "x-m4v", "x-matroska", "x-mpeg", "x-mpeg-system", "x-mpeg2", "x-ms-asf",
    "x-ms-asf-plugin", "x-ms-asx", "x-ms-wm", "x-ms-wmv", "x-ms-wmx", "x-ms-wvx", "x-msvideo", "x-nsv", "x-ogm",
    "x-ogm+ogg", "x-theora", "x-theora+ogg",
)


@getter("default_video_player")
def get_default_video_player(session, config: Mapping[str, Any]) -> str:
    # one shell for all queries; a NUL after each keeps every answer apart, trailing newline included
    script = "".join(f"xdg-mime query default video/{t}; printf '\\0'; " for t in _VIDEO_SUBTYPES)
    answers = session.run(["sh", "-c", script], timeout=120).stdout.split("\0")
    votes: Counter[str] = Counter()
    for subtype, app in zip(_VIDEO_SUBTYPES, answers):
        if app:
            votes[app] += 1 if subtype == "x-ogm+ogg" else 2
    return votes.most_common(1)[0][0] if votes else "unknown"


def _stdout(session, *argv: str) -> str:
    return session.run(list(argv), timeout=10).stdout


@getter("vm_screen_size")
def get_vm_screen_size(session, config: Mapping[str, Any]) -> dict[str, int]:
    m = re.fullmatch(r"\s*(\d+)\s+(\d+)\s*", _stdout(session, "xdotool", "getdisplaygeometry"))
    width, height = (int(m[1]), int(m[2])) if m else session.size
    return {"width": width, "height": height}


@getter("vm_window_size")
def get_vm_window_size(session, config: Mapping[str, Any]) -> dict[str, int] | None:
    if "app_class_name" not in config:
        raise EvaluatorError("getter 'vm_window_size' needs 'app_class_name'")
    wanted = str(config["app_class_name"]).lower()
    for wid in re.findall(r"0x[0-9a-fA-F]+", _stdout(session, "xprop", "-root", "-notype", "_NET_CLIENT_LIST")):
        classes = re.findall(r'"([^"]*)"', _stdout(session, "xprop", "-id", wid, "-notype", "WM_CLASS"))
        if wanted in (c.lower() for c in classes):
            info = _stdout(session, "xwininfo", "-id", wid)
            w, h = re.search(r"Width:\s*(\d+)", info), re.search(r"Height:\s*(\d+)", info)
            if w and h:
                return {"width": int(w[1]), "height": int(h[1])}
    return None
