"""OSWorld's metrics for VLC (its config and playing state), audio and video files.

Judge-only (envs/osworld/.workspace-exclude keeps evaluators/ out of every workspace): registers its metrics
in metrics.METRICS (imported by evaluators/__init__); the getters whose values they compare are in
getters/media.py.

Metrics:
  is_vlc_playing                             status.xml: playing, and its file name / URL is the rule's
  is_vlc_recordings_folder                   vlcrc's input-record-path is rule["recording_file_path"]
  is_vlc_fullscreen                          window size equals screen size
  check_global_key_play_pause                a global play/pause hotkey is set (1) or not (0)
  check_qt_max_volume                        vlcrc's qt-max-volume (default 125)
  check_qt_slider_colours                    qt-slider-colours equal to a string, or all "blackish"
  check_qt_minimal_view                      vlcrc's qt-minimal-view (default 0)
  check_one_instance_when_started_from_file  vlcrc's one-instance-when-started-from-file (default 1)
  check_qt_bgcone                            vlcrc's qt-bgcone (default 1)
Not implemented: compare_audios (librosa MFCC + DTW over decoded mp3) and compare_videos (OpenCV decoding +
perceptual hashes of frames): neither has a faithful equivalent without those libraries.

vlcrc is read as VLC reads it: `key=value` lines count, `#key=value` lines are VLC's commented defaults.
"""

from __future__ import annotations

import os
from typing import Any, Mapping
from urllib.parse import urlparse
from xml.etree import ElementTree

from ..errors import EvaluatorError
from .metrics import _rule, metric


# ----------------------------------------------------------------------------------------------------
# VLC's playing state


def _meta(tree: ElementTree.Element, category: str, name: str) -> str | None:
    el = tree.find(f'information/category[@name="{category}"]/info[@name="{name}"]')
    return el.text if el is not None and el.text else None


def _first_meta(tree: ElementTree.Element, fields: tuple[tuple[str, str], ...]) -> str | None:
    return next((v for c, n in fields if (v := _meta(tree, c, n))), None)


_FILE_FIELDS = tuple(("meta", n) for n in ("filename", "title", "uri", "location", "name"))
_URL_FIELDS = (tuple(("meta", n) for n in ("url", "URI", "location", "title", "filename"))
               + tuple(("Stream 0", n) for n in ("Codec", "Type", "Language")))


def _url_matches(expected: str, shown: str) -> bool:
    if expected in shown:
        return True
    want = urlparse(expected)
    if shown == os.path.basename(want.path):  # VLC shows an HLS stream by its file name
        return True
    if "://" in shown:
        got = urlparse(shown)
        return want.netloc == got.netloc and want.path in got.path
    return False


@metric
def is_vlc_playing(actual_status_path: str, rule: Mapping[str, Any]) -> float:
    """VLC's status.xml says "playing" and its item is rule {"type": "file_name", "file_name"} (the name
    the item's file name / title / URI ends with) or {"type": "url", "url"} (contained in the item's URL)."""
    kind = _rule(rule, "type", "is_vlc_playing")
    if kind not in ("file_name", "url"):
        raise EvaluatorError(f"is_vlc_playing: rule type {kind!r} unsupported; use 'file_name' or 'url'")
    expected = _rule(rule, kind, "is_vlc_playing")
    if not actual_status_path:
        return 0.0
    try:
        tree = ElementTree.parse(actual_status_path).getroot()
    except (OSError, ElementTree.ParseError):
        return 0.0
    if tree.findtext("state") != "playing":
        return 0.0
    if kind == "file_name":
        shown = _first_meta(tree, _FILE_FIELDS)
        return float(shown is not None and shown.endswith(expected))
    shown = _first_meta(tree, _URL_FIELDS)
    return float(shown is not None and _url_matches(expected, shown))


# ----------------------------------------------------------------------------------------------------
# vlcrc settings


def _vlcrc(path: str | None) -> dict[str, str] | None:
    """The set options of a vlcrc (key → value, blanks trimmed); None if unreadable."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    options = {}
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#[" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        options[key.strip()] = value.strip()
    return options


def _setting_is(path: str | None, key: str, default: str, rule: Mapping[str, Any], rule_key: str,
                name: str) -> float:
    expected = _rule(rule, rule_key, name)
    if isinstance(expected, int):  # tasks give 0 / 1 / 200; vlcrc holds text
        expected = str(expected)
    options = _vlcrc(path)
    return 0.0 if options is None else float(options.get(key, default) == expected)


@metric
def is_vlc_recordings_folder(actual_config_path: str, rule: Mapping[str, Any]) -> float:
    """vlcrc sets input-record-path to rule["recording_file_path"] (unset counts as wrong)."""
    expected = _rule(rule, "recording_file_path", "is_vlc_recordings_folder")
    options = _vlcrc(actual_config_path)
    return float(options is not None and options.get("input-record-path") == expected)


@metric
def is_vlc_fullscreen(actual_window_size: Mapping[str, int] | None, screen_size: Mapping[str, int] | None) -> float:
    """The window's size is the screen's ({"width", "height"} each; None scores 0)."""
    if not isinstance(actual_window_size, Mapping) or not isinstance(screen_size, Mapping):
        return 0.0
    return float(all(k in actual_window_size and k in screen_size and actual_window_size[k] == screen_size[k]
                     for k in ("width", "height")))


@metric
def check_qt_bgcone(actual_config_path: str, rule: Mapping[str, Any]) -> float:
    """vlcrc's qt-bgcone (VLC's cone in the empty video area; default 1) is rule["expected_qt_bgcone"]."""
    return _setting_is(actual_config_path, "qt-bgcone", "1", rule, "expected_qt_bgcone", "check_qt_bgcone")


@metric
def check_qt_max_volume(actual_config_path: str, rule: Mapping[str, Any]) -> float:
    """vlcrc's qt-max-volume (default 125) is rule["expected_qt_max_volume"]."""
    return _setting_is(actual_config_path, "qt-max-volume", "125", rule, "expected_qt_max_volume",
                       "check_qt_max_volume")


@metric
def check_qt_minimal_view(actual_config_path: str, rule: Mapping[str, Any]) -> float:
    """vlcrc's qt-minimal-view (default 0) is rule["expected_qt_minimal_view"]."""
    return _setting_is(actual_config_path, "qt-minimal-view", "0", rule, "expected_qt_minimal_view",
                       "check_qt_minimal_view")


@metric
def check_one_instance_when_started_from_file(actual_config_path: str, rule: Mapping[str, Any]) -> float:
    """vlcrc's one-instance-when-started-from-file (default 1) is the rule's expected value."""
    return _setting_is(actual_config_path, "one-instance-when-started-from-file", "1", rule,
                       "expected_one_instance_when_started_from_file", "check_one_instance_when_started_from_file")


@metric
def check_global_key_play_pause(actual_config_path: str, rule: Mapping[str, Any]) -> float:
    """rule["expected_global_key_play_pause"] is 1 iff vlcrc binds a global play/pause hotkey, 0 iff not."""
    expected = _rule(rule, "expected_global_key_play_pause", "check_global_key_play_pause")
    if isinstance(expected, int):
        expected = str(expected)
    options = _vlcrc(actual_config_path)
    if options is None:
        return 0.0
    return float(("1" if options.get("global-key-play-pause") else "0") == expected)


_DEFAULT_SLIDER_COLOURS = "153;210;153;20;210;20;255;199;15;245;39;29"


@metric
def check_qt_slider_colours(actual_config_path: str, rule: Mapping[str, Any]) -> float:
    """vlcrc's qt-slider-colours (12 numbers: 4 RGB stops) is rule {"type": "match",
    "expected_qt_slider_colours"}, or with {"type": "blackish"} has every channel of every stop below 100."""
    kind = _rule(rule, "type", "check_qt_slider_colours")
    if kind not in ("match", "blackish"):
        raise EvaluatorError(f"check_qt_slider_colours: rule type {kind!r} unsupported; use 'match' or 'blackish'")
    expected = _rule(rule, "expected_qt_slider_colours", "check_qt_slider_colours") if kind == "match" else None
    options = _vlcrc(actual_config_path)
    if options is None:
        return 0.0
    colours = options.get("qt-slider-colours", _DEFAULT_SLIDER_COLOURS)
    if kind == "match":
        return float(colours == expected)
    try:
        values = [int(v) for v in colours.split(";")]
    except ValueError:
        return 0.0
    stops = list(zip(values[0::3], values[1::3], values[2::3]))
    return float(all(channel < 100 for stop in stops for channel in stop))
