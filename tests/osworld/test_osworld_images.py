"""OSWorld's image evaluators (envs/osworld/evaluators/images.py, getters/images.py) against OSWorld's own (metrics/gimp.py,
metrics/vlc.py compare_images, getters/info.py get_vm_wallpaper) on images built here with Pillow:
gradients with shapes, their brighter / darker / saturated / contrasted / mirrored / resized / palette /
JPEG versions, triangles, text boxes, green backgrounds.

Known divergences (those inputs are scored by our own expectations only, not in the differential):
  * check_triangle_position: OSWorld sorts colours by count ascending and takes index 1 — the second
    *rarest* colour (in a two-colour image: the background). Ours takes the second most common, the
    triangle its comment describes. They agree where the triangle's count is the middle one of three.
  * check_image_size: OSWorld's `ignore and mode in (RGBA, LA) or 'transparency' in info` measures the
    opaque box of any image with a tRNS chunk even without ignore_transparent; ours only when it is set.
  * check_green_background: OSWorld indexes pixels [x, y] (transposed), so a non-square image raises
    IndexError, and a greyscale / palette image raises on the scalar pixel; ours checks every pixel in RGB.
  * compare_image_list: OSWorld's ImageChops.difference(...).getbbox() looks only at the alpha channel of
    images with one, so two opaque RGBA images of different colours count as equal; ours compares all.
  * OSWorld raises on a path that does not exist, an image too small for SSIM's 7-pixel window
    (compare_images) or a single-colour image (check_triangle_position); ours scores 0.0. OSWorld's
    check_triangle_position also raises on a greyscale image; ours takes grey levels as the colours.
  * vm_wallpaper: with no wallpaper file OSWorld returns the path of an empty file, ours None (both
    make compare_images score 0); its server strips "file://" and every quote, ours parses the GVariant
    string and percent-decodes the URI.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

from envs.osworld.errors import EvaluatorError
from envs.osworld.evaluators import GETTERS, METRICS
from tests.osworld.reference import REF_PY, RUNNER, assert_agree, needs_reference

PARTIAL = "partial"  # expected score strictly between 0 and 1


def _photo(seed: int = 0, w: int = 96, h: int = 64) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    arr = np.stack([40 + 160 * x / w, 60 + 120 * y / h, 200 - 150 * x / w], -1) + rng.normal(0, 10, (h, w, 3))
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(1))
    d = ImageDraw.Draw(img)
    d.ellipse((w * 0.1, h * 0.2, w * 0.45, h * 0.8), fill=(230, 200, 30))
    d.rectangle((w * 0.55, h * 0.15, w * 0.9, h * 0.5), fill=(30, 90, 200))
    d.line((0, h - 5, w, 5), fill=(250, 250, 250), width=3)
    return img


def _saturation(img: Image.Image, factor: float) -> Image.Image:
    """Saturation scaled in HSV, hue and value kept (as GIMP's Hue-Saturation tool)."""
    h, s, v = img.convert("HSV").split()
    return Image.merge("HSV", (h, s.point(lambda x: min(255, int(x * factor))), v)).convert("RGB")


def _triangle(centre: tuple[int, int], colours: int = 3, mode: str = "RGB") -> Image.Image:
    img = Image.new("RGB", (100, 100), "white")
    d = ImageDraw.Draw(img)
    cx, cy = centre
    d.polygon([(cx - 15, cy + 10), (cx + 15, cy + 10), (cx, cy - 20)], fill=(220, 30, 30))  # centroid = centre
    if colours == 3:
        d.rectangle((2, 2, 6, 6), fill=(20, 40, 200))
    return img.convert(mode)


def _textbox(x: int) -> Image.Image:
    img = Image.new("RGB", (200, 100), "white")
    d = ImageDraw.Draw(img)
    d.rectangle((x, 30, x + 80, 60), outline="black", width=2)
    d.text((x + 6, 38), "Hello", fill="black")
    return img


def _object_on(background: tuple, size: tuple[int, int] = (40, 40), mode: str = "RGB") -> Image.Image:
    img = Image.new("RGB", size, background)
    ImageDraw.Draw(img).ellipse((10, 10, 30, 30), fill="black")
    return img.convert(mode)


def _images(d: Path) -> dict[str, str]:
    base, other = _photo(0), _photo(1).transpose(Image.Transpose.FLIP_TOP_BOTTOM)
    padded = Image.new("RGBA", (130, 90), (0, 0, 0, 0))
    padded.paste(base, (20, 11))
    opaque_box = Image.new("RGBA", (40, 30), (0, 0, 0, 0))
    opaque_box.paste((200, 10, 10, 255), (5, 7, 25, 17))
    p_trns = Image.new("P", (40, 30), 0)
    p_trns.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    p_trns.paste(1, (5, 5, 15, 25))
    p_trns.info["transparency"] = 0
    gray = base.convert("L")
    images = {
        "base.png": base, "other.png": other, "base_copy.png": base, "base_rgba.png": base.convert("RGBA"),
        "tiny.png": base.resize((6, 6)),
        "darker.png": ImageEnhance.Brightness(base).enhance(0.6),
        "darker_copy.png": ImageEnhance.Brightness(base).enhance(0.6),
        "brighter.png": ImageEnhance.Brightness(base).enhance(1.3),
        "other_darker.png": ImageEnhance.Brightness(other).enhance(0.6),
        "darker_big.png": ImageEnhance.Brightness(base).enhance(0.6).resize((120, 80), Image.Resampling.LANCZOS),
        "saturated.png": _saturation(base, 1.5), "desaturated.png": _saturation(base, 0.6),
        "other_saturated.png": _saturation(other, 1.5),
        "contrast_up.png": ImageEnhance.Contrast(base).enhance(1.5),
        "contrast_down.png": ImageEnhance.Contrast(base).enhance(0.7),
        "other_contrast_up.png": ImageEnhance.Contrast(other).enhance(1.5),
        "mirrored.png": base.transpose(Image.Transpose.FLIP_LEFT_RIGHT),
        "resized.png": base.resize((48, 32), Image.Resampling.LANCZOS),
        "other_resized.png": other.resize((48, 32), Image.Resampling.LANCZOS),
        "base_up.png": base.resize((120, 80), Image.Resampling.LANCZOS),
        "padded.png": padded, "transparent.png": Image.new("RGBA", (40, 30), (0, 0, 0, 0)),
        "opaque_box.png": opaque_box, "p_trns.png": p_trns,
        "palette.png": base.convert("P", palette=Image.Palette.ADAPTIVE, colors=256),
        "palette_other.png": other.convert("P", palette=Image.Palette.ADAPTIVE, colors=256),
        "tri_centre.png": _triangle((50, 50)), "tri_corner.png": _triangle((25, 75)),
        "tri_centre_rgba.png": _triangle((50, 50), mode="RGBA"),
        "tri2_centre.png": _triangle((50, 50), 2), "tri2_corner.png": _triangle((25, 75), 2),
        "tri2_centre_gray.png": _triangle((50, 50), 2, "L"), "one_colour.png": Image.new("RGB", (50, 50), "white"),
        "text_left.png": _textbox(4), "text_right.png": _textbox(60),
        "blank.png": Image.new("RGB", (200, 100), "white"),
        "object.png": _object_on((255, 255, 255)), "green_bg.png": _object_on((40, 180, 60)),
        "green_bg_rgba.png": _object_on((40, 180, 60), mode="RGBA"),
        "green_wide.png": _object_on((40, 180, 60), (60, 40)), "object_wide.png": _object_on((255, 255, 255), (60, 40)),
        "green_gray.png": _object_on((40, 180, 60), mode="L"),
        "red_rgba.png": Image.new("RGBA", (20, 20), (255, 0, 0, 255)),
        "blue_rgba.png": Image.new("RGBA", (20, 20), (0, 0, 255, 255)),
        "gray.png": gray, "gray_rgb.png": gray.convert("RGB"),
    }
    corner = _object_on((40, 180, 60))
    corner.paste((200, 40, 40), (0, 0, 4, 4))
    images["green_bg_red_corner.png"] = corner
    f = {}
    for name, img in images.items():
        img.save(d / name)
        f[name] = str(d / name)
    for name, src in (("base.jpg", base), ("base_copy.jpg", base), ("other.jpg", other)):
        src.save(d / name, quality=95, subsampling=0)
        f[name] = str(d / name)
    base.save(d / "base.gif")
    f["base.gif"] = str(d / "base.gif")
    (d / "empty.png").write_bytes(b"")
    f["empty.png"] = str(d / "empty.png")
    f["missing.png"] = str(d / "missing.png")
    return f


def _cases(f: dict[str, str]) -> tuple[list[tuple], list[tuple]]:
    """(agreeing, ours_only): each case (module, func, args, kwargs, expected score)."""
    agree: list[tuple] = []
    ours_only: list[tuple] = []

    def add(func, args, expected, kwargs=None, module="gimp", only_ours=False):
        (ours_only if only_ours else agree).append((module, func, args, kwargs or {}, expected))

    fn = "check_brightness_decrease_and_structure_sim"
    for src, tgt, want in (("darker.png", "base.png", 1), ("darker_big.png", "base.png", 1),
                           ("darker.png", "base.jpg", 1), ("brighter.png", "base.png", 0),
                           ("base.png", "base.png", 0), ("other_darker.png", "base.png", 0),
                           (None, "base.png", 0), ("darker.png", None, 0)):
        add(fn, [f.get(src), f.get(tgt)], want)
    add(fn, [f["darker.png"], f["base.png"]], 0, {"threshold": 1e-6})
    add(fn, [f["missing.png"], f["base.png"]], 0, only_ours=True)

    fn = "check_saturation_increase_and_structure_sim"
    for src, tgt, want in (("saturated.png", "base.png", 1), ("desaturated.png", "base.png", 0),
                           ("other_saturated.png", "base.png", 0), ("base.png", "base.png", 0),
                           ("saturated.png", "resized.png", 0), (None, "base.png", 0)):
        add(fn, [f.get(src), f.get(tgt)], want)

    fn = "check_contrast_increase_and_structure_sim"
    for src, tgt, want in (("contrast_up.png", "base.png", 1), ("contrast_down.png", "base.png", 0),
                           ("other_contrast_up.png", "base.png", 0), ("base.png", "contrast_down.png", 1),
                           ("contrast_up.png", "resized.png", 0), (None, "base.png", 0)):
        add(fn, [f.get(src), f.get(tgt)], want)

    for fn in ("check_file_exists_and_structure_sim", "check_structure_sim"):
        for src, tgt, want in (("base.jpg", "base.png", 1), ("base_rgba.png", "base.png", 1),
                               ("base_copy.png", "base.png", 1), ("other.png", "base.png", 0),
                               ("resized.png", "base.png", 0), ("tiny.png", "tiny.png", 0),
                               ("palette.png", "base.png", 1), (None, "base.png", 0), ("base.png", None, 0)):
            add(fn, [f.get(src), f.get(tgt)], want)
        add(fn, [f["missing.png"], f["base.png"]], 0)

    fn = "check_structure_sim_resized"
    for src, tgt, want in (("base.png", "resized.png", 1), ("base.png", "other_resized.png", 0),
                           ("padded.png", "resized.png", 1), ("transparent.png", "resized.png", 0),
                           ("palette.png", "resized.png", 0),  # a palette image resizes by nearest neighbour
                           ("base.png", "base_up.png", 1),
                           (None, "resized.png", 0)):
        add(fn, [f.get(src), f.get(tgt)], want)

    fn = "check_palette_and_structure_sim"
    for src, tgt, want in (("palette.png", "base.png", 1), ("palette.png", "base_rgba.png", 1),
                           ("base.png", "base.png", 0), ("palette_other.png", "base.png", 0),
                           ("empty.png", "base.png", 0), ("missing.png", "base.png", 0), (None, "base.png", 0)):
        add(fn, [f.get(src), f.get(tgt)], want)

    fn = "check_image_mirror"
    for src, tgt, want in (("mirrored.png", "base.png", 1), ("base.png", "mirrored.png", 1),
                           ("base.png", "base.png", 0), ("mirrored.png", "other.png", 0), (None, "base.png", 0)):
        add(fn, [f.get(src), f.get(tgt)], want)

    fn = "check_green_background"
    for src, tgt, want in (("green_bg.png", "object.png", 1), ("green_bg_rgba.png", "object.png", 1),
                           ("object.png", "object.png", 0), ("green_bg_red_corner.png", "object.png", 0),
                           (None, "object.png", 0)):
        add(fn, [f.get(src), f.get(tgt)], want)
    add(fn, [f["green_wide.png"], f["object_wide.png"]], 1, only_ours=True)
    add(fn, [f["green_gray.png"], f["object.png"]], 0, only_ours=True)  # grey green is not green

    fn = "check_triangle_position"
    for src, want in (("tri_centre.png", 1), ("tri_corner.png", 0), ("tri_centre_rgba.png", 1), (None, 0)):
        add(fn, [f.get(src)], want)
    for src, want in (("tri2_centre.png", 1), ("tri2_corner.png", 0), ("tri2_centre_gray.png", 1),
                      ("one_colour.png", 0)):
        add(fn, [f[src]], want, only_ours=True)

    fn = "check_textbox_on_leftside"
    for src, want in (("text_left.png", 1), ("text_right.png", 0), ("blank.png", 0), (None, 0)):
        add(fn, [f.get(src)], want)

    fn = "check_image_size"
    for src, rule, want in (("base.png", {"height": 64}, 1), ("base.png", {"height": 64, "width": 96}, 1),
                            ("base.png", {"width": 95}, 0), ("base.png", {}, 1), (None, {"height": 64}, 0),
                            ("opaque_box.png", {"width": 20, "height": 10, "ignore_transparent": True}, 1),
                            ("opaque_box.png", {"width": 40, "height": 30}, 1),
                            ("transparent.png", {"height": 0, "ignore_transparent": True}, 1),
                            ("p_trns.png", {"width": 10, "height": 20, "ignore_transparent": True}, 1)):
        add(fn, [f.get(src), rule], want)
    add(fn, [f["p_trns.png"], {"width": 40, "height": 30}], 1, only_ours=True)

    fn = "check_image_file_size"
    for src, rule, want in (("base.png", {"max_size": 600000}, 1), ("base.png", {"max_size": 100}, 0),
                            (None, {"max_size": 600000}, 0)):
        add(fn, [f.get(src), rule], want)

    fn = "compare_image_list"
    for pred, gold, want in (("base.png", "base_copy.png", 1), ("base.jpg", "base_copy.jpg", 1),
                             (["base.png", "darker.png"], ["base_copy.png", "darker_copy.png"], 1),
                             (["base.png", "darker.png"], ["base_copy.png", "base_copy.png"], 0),
                             ("gray_rgb.png", "gray.png", 1), ("base_up.png", "base.png", 0),
                             ("other.png", "base.png", 0), ([None], ["base.png"], 0), (None, "base.png", 0)):
        pick = (lambda v: [f.get(x) for x in v]) if isinstance(pred, list) else f.get
        add(fn, [pick(pred), pick(gold)], want)
    add(fn, [f["red_rgba.png"], f["blue_rgba.png"]], 0, only_ours=True)

    fn = "compare_images"
    for a, b, want, kw in (("base.png", "base_copy.png", 1, {}), ("base.png", "other.png", PARTIAL, {}),
                           ("base.png", "darker.png", PARTIAL, {}), ("base.png", "base_up.png", PARTIAL, {}),
                           ("base_up.png", "base.jpg", PARTIAL, {}), ("base.gif", "base.png", PARTIAL, {}),
                           ("base.png", "base.jpg", PARTIAL, {"reference_base_result": 0.3}),
                           ("base.png", "other.png", 0, {"reference_base_result": 0.99}),
                           (None, "base.png", 0, {})):
        add(fn, [f.get(a), f.get(b)], want, kw, module="vlc")
    add(fn, [f["tiny.png"], f["base.png"]], 0, module="vlc", only_ours=True)
    return agree, ours_only


def _check_expected(cases: list[tuple]) -> None:
    wrong = []
    for _, fn, args, kwargs, want in cases:
        got = METRICS[fn](*args, **kwargs)
        ok = 0 < got < 1 if want == PARTIAL else abs(got - want) < 1e-9
        if not ok:
            wrong.append((fn, [os.path.basename(a) if isinstance(a, str) else a for a in args], kwargs, want, got))
    assert not wrong, "\n".join(map(repr, wrong))


def test_image_metrics_score_as_expected(tmp_path):
    agree, ours_only = _cases(_images(tmp_path))
    scores = {want for *_, want in agree}
    assert {0, 1, PARTIAL} <= scores
    _check_expected(agree + ours_only)


@needs_reference
def test_image_metrics_agree_with_osworlds(tmp_path):
    agree, _ = _cases(_images(tmp_path))
    assert_agree([(m, fn, args, kwargs) for m, fn, args, kwargs, _ in agree])


def test_task_errors_raise():
    with pytest.raises(EvaluatorError, match="max_size"):
        METRICS["check_image_file_size"]("/nonexistent.png", {})
    with pytest.raises(EvaluatorError, match="check_image_size"):
        METRICS["check_image_size"]("/nonexistent.png", None)


# ----------------------------------------------------------------------------------------------------
# vm_wallpaper


class _KeyfileSession:
    """What the getter uses of a DesktopSession: its HOME with GSettings in the keyfile, as the desktop's env."""

    vm_home = "/home/user"

    def __init__(self, root: Path):
        from envs.osworld.desktop import desktop_env, prepare_home
        self.home, self.run_dir = root / "home", root / "run"
        prepare_home(self.home)
        self.env = desktop_env(self.home, 99)

    def vm_path(self, path: str) -> str:
        return str(self.home) + path[len(self.vm_home):] if path.startswith(self.vm_home + "/") else path

    def run_task_command(self, command, *, shell=False, timeout=60.0):
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout)

    def set_wallpaper(self, uri: str) -> None:
        p = subprocess.run(["gsettings", "set", "org.gnome.desktop.background", "picture-uri", uri], env=self.env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr


def _osworld_wallpaper(wallpaper: str | None, cache: Path, dest: str) -> str:
    """OSWorld's get_vm_wallpaper with a controller that serves `wallpaper`'s bytes as its VM server would."""
    script = f"""
import importlib, json, sys
sys.path.insert(0, {str(RUNNER.parent)!r})
import osworld_reference_runner as runner
runner._setup()
info = importlib.import_module("desktop_env.evaluators.getters.info")
class Controller:
    def get_vm_wallpaper(self):
        return open({wallpaper!r}, "rb").read() if {wallpaper!r} else None
class Env:
    controller, cache_dir = Controller(), {str(cache)!r}
print(json.dumps(info.get_vm_wallpaper(Env(), {{"dest": {dest!r}}})))
"""
    p = subprocess.run([str(REF_PY), "-W", "ignore", "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not shutil.which("gsettings"), reason="needs gsettings (libglib2.0-bin)")
def test_vm_wallpaper_copies_the_picture_gsettings_names(tmp_path):
    s = _KeyfileSession(tmp_path)
    getter = GETTERS["vm_wallpaper"]
    assert getter(s, {"dest": "w.png"}) is None  # the schema's default picture is not installed
    pictures = s.home / "Pictures"
    _photo(3).save(pictures / "my wall's.png")
    s.set_wallpaper("file:///home/user/Pictures/my%20wall's.png")  # a VM path, percent-encoded
    got = getter(s, {"dest": "result_wallpaper.png"})
    assert got == os.path.join(tmp_path, "run", "eval_cache", "result_wallpaper.png")
    assert Path(got).read_bytes() == (pictures / "my wall's.png").read_bytes()
    assert METRICS["compare_images"](got, str(pictures / "my wall's.png")) == 1.0
    _photo(4).save(pictures / "b.png")
    s.set_wallpaper(str(pictures / "b.png"))  # a plain host path
    assert Path(getter(s, {"dest": "b.png"})).read_bytes() == (pictures / "b.png").read_bytes()
    s.set_wallpaper("file:///home/user/Pictures/gone.png")
    assert getter(s, {"dest": "gone.png"}) is None
    if REF_PY.exists():
        theirs = _osworld_wallpaper(str(pictures / "b.png"), tmp_path, "b.png")
        assert os.path.basename(theirs) == "b.png"
        assert Path(theirs).read_bytes() == (pictures / "b.png").read_bytes()
        assert Path(_osworld_wallpaper(None, tmp_path, "none.png")).read_bytes() == b""  # ours: None


def test_vm_wallpaper_on_the_desktop(clean_desktop):
    d = clean_desktop
    assert GETTERS["vm_wallpaper"](d, {"dest": "w.png"}) is None
    _photo(5).save(Path(d.home) / "Pictures" / "wall.png")
    p = d.run_task_command(["gsettings", "set", "org.gnome.desktop.background", "picture-uri",
                            "file:///home/user/Pictures/wall.png"])
    assert p.returncode == 0, p.stderr
    got = GETTERS["vm_wallpaper"](d, {"dest": "result_wallpaper.png"})
    assert got and os.path.basename(got) == "result_wallpaper.png"
    assert METRICS["compare_images"](got, str(Path(d.home) / "Pictures" / "wall.png")) == 1.0
