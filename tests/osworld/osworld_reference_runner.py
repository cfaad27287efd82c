"""Runs OSWorld's own metric functions (PyPI desktop-env) on JSON cases; used by test_metric_differential.py.

Runs under /opt/bunshin/osworld-ref-venv/bin/python (made by envs/osworld/install_reference.sh), never
in the gym's venv. Reads [{"module", "func", "args", "kwargs"}] on stdin, prints [{"score"} | {"error"}].

desktop_env/evaluators/metrics/__init__.py imports every metric module (torch, easyocr, ...), so the
packages desktop_env, desktop_env.evaluators and desktop_env.evaluators.metrics are registered here as bare
namespace modules and each metric module is imported on its own. Three libraries that some modules import
at top level but the compared functions never call (easyocr, skimage, borb: OCR, colour distance, PDF)
(and imagehash, fitz, and cv2 for the GIMP module) are replaced by placeholders that raise if actually used.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import pathlib
import sys
import types

logging.disable(logging.CRITICAL)
HEAVY = ("easyocr", "skimage", "borb", "imagehash", "fitz", "cv2")


class _Placeholder(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        def unavailable(*a, **k):
            raise RuntimeError(f"{self.__name__}.{name} is a placeholder in the OSWorld reference runner")
        return type(name, (), {"__init__": unavailable, "__call__": unavailable})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in HEAVY:
            try:
                if importlib.machinery.PathFinder.find_spec(fullname.split(".")[0]) is not None:
                    return None  # really installed: use it
            except Exception:
                pass
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Placeholder(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def _setup():
    sys.meta_path.insert(0, _Finder())
    try:  # offline: tldextract's bundled public-suffix snapshot instead of a download attempt
        import tldextract
        tldextract.tldextract.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    except ImportError:
        pass
    spec = importlib.util.find_spec("desktop_env")
    if spec is None:
        raise SystemExit("desktop-env is not installed here: run envs/osworld/install_reference.sh")
    root = pathlib.Path(spec.submodule_search_locations[0])
    for name, path in (("desktop_env", root), ("desktop_env.evaluators", root / "evaluators"),
                       ("desktop_env.evaluators.metrics", root / "evaluators" / "metrics")):
        m = types.ModuleType(name)
        m.__path__ = [str(path)]
        sys.modules[name] = m


def main():
    _setup()
    cases = json.load(sys.stdin)
    out = []
    import contextlib, io
    for c in cases:
        try:
            mod = importlib.import_module("desktop_env.evaluators.metrics." + c["module"])
            fn = getattr(mod, c["func"])
            with contextlib.redirect_stdout(io.StringIO()):  # OSWorld's metrics print
                score = fn(*c.get("args", []), **c.get("kwargs", {}))
            out.append({"score": float(score)})
        except Exception as e:
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
