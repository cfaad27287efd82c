"""OSWorld's metrics for images (GIMP's domain): similarity, size, colour and geometry checks.

Judge-only (envs/osworld/.workspace-exclude keeps evaluators/ out of every workspace): registers its metrics
in metrics.METRICS (imported by evaluators/__init__); the getters whose values they compare are in
getters/images.py.
"Similar" below means SSIM >= 0.9 (7-pixel window, RGB) on two images of the same size, each side >= 7 px.

Metrics (OSWorld's names and signatures; a missing or unreadable image scores 0.0):
  check_brightness_decrease_and_structure_sim(src, tgt, threshold=0.03)  src darker than tgt, and the two
      normalised to mean brightness 128 differ by MSE < threshold
  check_saturation_increase_and_structure_sim(src, tgt)  src more saturated (HSV), hue and value similar
  check_file_exists_and_structure_sim(src, tgt)  src is a file and similar to tgt
  check_triangle_position(tgt)  the second most common colour's centroid within 5% of the image centre
  check_structure_sim(src, tgt)  same size and similar
  check_image_size(src, rule)  rule height / width match (content box of alpha if rule ignore_transparent)
  check_structure_sim_resized(src, tgt)  src (cropped to its opaque box) resized to tgt's size is similar
  check_palette_and_structure_sim(src, tgt)  src is palette-based (mode P) and similar to tgt
  check_textbox_on_leftside(src)  the leftmost dark pixel (< 128 grey) lies in the left 5%
  check_contrast_increase_and_structure_sim(src, tgt)  src has a higher pixel std and SSIM >= 0.65
  check_image_mirror(src, tgt)  src flipped left-right has SSIM >= 0.99 with tgt
  check_green_background(src, tgt)  wherever tgt is not black, src is green (G > R and G > B)
  compare_image_list(pred, gold)  each pred (resized, converted to gold's size and mode) equals its gold
  check_image_file_size(src, rule)  file size < rule max_size
  compare_images(image1, image2, reference_base_result=None)  grey SSIM at the smaller size; with a base
      score b: (ssim - b) / (1 - b) if ssim >= b + 0.01, else 0
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Mapping, Sequence
import numpy as np
from PIL import Image, ImageStat
from skimage.metrics import structural_similarity

from ..errors import EvaluatorError
from .metrics import _rule, metric

_SSIM_WINDOW = 7


def _image_metric(fn: Callable[..., float]) -> Callable[..., float]:
    """Register fn as a metric that scores 0.0 when the images break it (unreadable file, unusual mode)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> float:
        try:
            return float(fn(*args, **kwargs))
        except EvaluatorError:
            raise
        except Exception:  # noqa: BLE001 - a broken result image scores 0
            return 0.0
    return metric(wrapper)


def _open(path: str | None) -> Image.Image | None:
    if not path or not os.path.isfile(path):
        return None
    try:
        img = Image.open(path)
        img.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return None
    return img


def _rgb(img: Image.Image) -> Image.Image:
    return img if img.mode == "RGB" else img.convert("RGB")


def _ssim(a: Image.Image, b: Image.Image) -> float | None:
    """RGB SSIM of two same-sized images; None when they differ in size or are too small for the window."""
    if a.size != b.size or min(a.size + b.size) < _SSIM_WINDOW:
        return None
    return float(structural_similarity(np.asarray(_rgb(a)), np.asarray(_rgb(b)), win_size=_SSIM_WINDOW,
                                       channel_axis=2))


def _similar(a: Image.Image, b: Image.Image, threshold: float = 0.9) -> bool:
    score = _ssim(a, b)
    return score is not None and score >= threshold


def _brightness(img: Image.Image) -> float:
    return ImageStat.Stat(img.convert("L")).mean[0]


def _opaque_box(img: Image.Image) -> tuple[Image.Image, tuple[int, int, int, int] | None]:
    """img as RGBA and the bounding box of its non-transparent pixels (None if all transparent)."""
    rgba = img if img.mode == "RGBA" else img.convert("RGBA")
    return rgba, rgba.getchannel("A").getbbox()


def _has_alpha(img: Image.Image) -> bool:
    return img.mode in ("RGBA", "LA") or "transparency" in img.info


# ----------------------------------------------------------------------------------------------------
# edits of one picture: result vs original


@_image_metric
def check_brightness_decrease_and_structure_sim(src_path: str | None, tgt_path: str | None,
                                                threshold: float = 0.03) -> float:
    src, tgt = _open(src_path), _open(tgt_path)
    if src is None or tgt is None or not _brightness(src) < _brightness(tgt):
        return 0.0

    def normalised(img: Image.Image) -> Image.Image:
        factor = 128 / _brightness(img)
        return img.point(lambda v: min(255, int(v * factor)))

    a, b = normalised(src), normalised(tgt)
    if a.size != b.size:
        a = a.resize(b.size, Image.Resampling.LANCZOS)
    # float32 as OSWorld computes it, so a score at the threshold falls the same way
    diff = np.asarray(_rgb(a), dtype=np.float32) / 255 - np.asarray(_rgb(b), dtype=np.float32) / 255
    return float(np.mean(diff ** 2) < threshold)


@_image_metric
def check_saturation_increase_and_structure_sim(src_path: str | None, tgt_path: str | None) -> float:
    src, tgt = _open(src_path), _open(tgt_path)
    if src is None or tgt is None:
        return 0.0
    (h1, s1, v1), (h2, s2, v2) = src.convert("HSV").split(), tgt.convert("HSV").split()
    more_saturated = np.mean(np.asarray(s1)) > np.mean(np.asarray(s2))
    return float(more_saturated and _similar(h1, h2) and _similar(v1, v2))


@_image_metric
def check_contrast_increase_and_structure_sim(src_path: str | None, tgt_path: str | None) -> float:
    src, tgt = _open(src_path), _open(tgt_path)
    if src is None or tgt is None:
        return 0.0
    # contrast = std of every raw value (alpha and palette indices included), in float32 as OSWorld
    higher = np.std(np.asarray(src, dtype=np.float32)) > np.std(np.asarray(tgt, dtype=np.float32))
    return float(higher and _similar(src, tgt, 0.65))


@_image_metric
def check_file_exists_and_structure_sim(src_path: str | None, tgt_path: str | None) -> float:
    src, tgt = _open(src_path), _open(tgt_path)
    return float(src is not None and tgt is not None and _similar(src, tgt))


@_image_metric
def check_structure_sim(src_path: str | None, tgt_path: str | None) -> float:
    src, tgt = _open(src_path), _open(tgt_path)
    return float(src is not None and tgt is not None and _similar(src, tgt))


@_image_metric
def check_structure_sim_resized(src_path: str | None, tgt_path: str | None) -> float:
    """src is the original, tgt the resized picture; a transparent margin of src is cropped away first."""
    src, tgt = _open(src_path), _open(tgt_path)
    if src is None or tgt is None:
        return 0.0
    if _has_alpha(src):
        rgba, box = _opaque_box(src)
        if box is None:
            return 0.0
        src = rgba.crop(box).convert("RGB")
    return float(_similar(src.resize(tgt.size), tgt))


@_image_metric
def check_palette_and_structure_sim(src_path: str | None, tgt_path: str | None) -> float:
    src, tgt = _open(src_path), _open(tgt_path)
    if src is None or tgt is None:
        return 0.0
    return float(src.mode == "P" and _similar(src.convert("RGB"), tgt))


@_image_metric
def check_image_mirror(src_path: str | None, tgt_path: str | None) -> float:
    src, tgt = _open(src_path), _open(tgt_path)
    if src is None or tgt is None:
        return 0.0
    # 0.99, not 1: GIMP's flip need not be pixel-exact
    return float(_similar(src.transpose(Image.Transpose.FLIP_LEFT_RIGHT), tgt, 0.99))


@_image_metric
def check_green_background(src_path: str | None, tgt_path: str | None) -> float:
    """tgt is the original with a black object; every other pixel must be green in src."""
    src, tgt = _open(src_path), _open(tgt_path)
    if src is None or tgt is None or src.size != tgt.size:
        return 0.0
    s = np.asarray(_rgb(src))
    background = np.asarray(_rgb(tgt)).any(axis=2)
    r, g, b = s[..., 0], s[..., 1], s[..., 2]
    return float(np.all(((g > r) & (g > b))[background]))


# ----------------------------------------------------------------------------------------------------
# content and geometry of one picture


@_image_metric
def check_triangle_position(tgt_path: str | None) -> float:
    """The triangle is the second most common colour (the most common is the background)."""
    img = _open(tgt_path)
    if img is None:
        return 0.0
    pixels = np.asarray(img)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    colours, counts = np.unique(pixels.reshape(-1, pixels.shape[2]), axis=0, return_counts=True)
    if len(colours) < 2:
        return 0.0
    triangle = colours[np.argsort(-counts, kind="stable")[1]]
    centroid = np.argwhere(np.all(pixels == triangle, axis=2)).mean(axis=0)
    shape = np.array(pixels.shape[:2])
    return float(np.all(np.abs(centroid - shape / 2) < 0.05 * shape))


@_image_metric
def check_textbox_on_leftside(src_path: str | None) -> float:
    img = _open(src_path)
    if img is None:
        return 0.0
    dark_columns = np.flatnonzero((np.asarray(img.convert("L")) < 128).any(axis=0))
    leftmost = dark_columns[0] if dark_columns.size else img.width
    return float(leftmost < img.width * 0.05)


@_image_metric
def check_image_size(src_path: str | None, rule: Mapping[str, Any]) -> float:
    """rule: height?, width? (pixels), ignore_transparent? (measure the box of non-transparent pixels)."""
    if not isinstance(rule, Mapping):
        raise EvaluatorError(f"check_image_size: the rule must be an object with height/width; got {rule!r:.100}")
    img = _open(src_path)
    if img is None:
        return 0.0
    width, height = img.size
    if rule.get("ignore_transparent", False) and _has_alpha(img):
        box = _opaque_box(img)[1] or (0, 0, 0, 0)
        width, height = box[2] - box[0], box[3] - box[1]
    return float(all(rule.get(k) is None or v == rule[k] for k, v in (("width", width), ("height", height))))


@_image_metric
def check_image_file_size(src_path: str | None, rule: Mapping[str, Any]) -> float:
    max_size = _rule(rule, "max_size", "check_image_file_size")
    if not src_path or not os.path.isfile(src_path):
        return 0.0
    return float(os.path.getsize(src_path) < max_size)


# ----------------------------------------------------------------------------------------------------
# comparing pictures


@_image_metric
def compare_image_list(pred_img_path_list: str | Sequence[str | None] | None,
                       gold_img_path_list: str | Sequence[str | None] | None) -> float:
    """Every pair must be pixel-identical once pred has gold's size (Lanczos) and mode."""
    preds = pred_img_path_list if isinstance(pred_img_path_list, list) else [pred_img_path_list]
    golds = gold_img_path_list if isinstance(gold_img_path_list, list) else [gold_img_path_list]
    for pred_path, gold_path in zip(preds, golds):
        pred, gold = _open(pred_path), _open(gold_path)
        if pred is None or gold is None:
            return 0.0
        if pred.size != gold.size:
            pred = pred.resize(gold.size, Image.Resampling.LANCZOS)
        if pred.mode != gold.mode:
            pred = pred.convert(gold.mode)
        if not np.array_equal(np.asarray(pred), np.asarray(gold)):
            return 0.0
    return 1.0


@_image_metric
def compare_images(image1_path: str | None, image2_path: str | None, **options: Any) -> float:
    """Greyscale SSIM, both resized (Lanczos) to the smaller size (OSWorld's: the lesser (width, height) tuple)."""
    a, b = _open(image1_path), _open(image2_path)
    if a is None or b is None:
        return 0.0
    size = min(a.size, b.size)
    score = float(structural_similarity(np.asarray(a.convert("L").resize(size, Image.Resampling.LANCZOS)),
                                        np.asarray(b.convert("L").resize(size, Image.Resampling.LANCZOS))))
    base = options.get("reference_base_result")
    if base is None:
        return score
    return (score - base) / (1 - base) if score >= base + 0.01 else 0.0
