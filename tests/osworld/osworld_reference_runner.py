"""Runs OSWorld's own metric functions (PyPI desktop-env) on JSON cases; used by test_metric_differential.py.

Runs under /opt/bunshin/osworld-ref-venv/bin/python (made by envs/osworld/install_reference.sh), never
in the gym's venv. Reads [{"module", "func", "args", "kwargs"}] on stdin, prints [{"score"} | {"value"} |
{"error"}]. "module" is a metric module ("slides") or "getters.<module>" ("getters.misc"); a getter's value
comes back as JSON ("value"), a metric's as a float ("score"). A getter's `env` argument is passed as null
unless the case gives "env_dir": then it is a stand-in whose controller reads files from that directory
(get_file) and whose vm_platform is "Linux", enough for the getters that only read the VM's files.

desktop_env/evaluators/metrics/__init__.py imports every metric module (torch, easyocr, ...), so the
packages desktop_env, desktop_env.evaluators and desktop_env.evaluators.metrics are registered here as bare
namespace modules and each metric module is imported on its own. Libraries that some modules import at top
level but this project does not install for them (easyocr, librosa, acoustid, fastdtw, borb: OCR, audio,
PDF) are replaced by placeholders that raise if actually used; an installed one is used as is.
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
HEAVY = ("easyocr", "librosa", "acoustid", "fastdtw", "borb", "fitz", "skimage", "imagehash", "cv2")


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
                       ("desktop_env.evaluators.metrics", root / "evaluators" / "metrics"),
                       ("desktop_env.evaluators.getters", root / "evaluators" / "getters")):
        m = types.ModuleType(name)
        m.__path__ = [str(path)]
        sys.modules[name] = m


class _FileController:
    """The part of OSWorld's PythonController that file-reading getters use, over a local directory."""

    def __init__(self, root):
        self.root = pathlib.Path(root)

    def get_file(self, path):
        p = self.root / str(path).lstrip("/")
        return p.read_bytes() if p.is_file() else None


class _Env:
    def __init__(self, root, cache_dir):
        self.controller = _FileController(root)
        self.vm_platform = "Linux"
        self.cache_dir = cache_dir


def main():
    _setup()
    cases = json.load(sys.stdin)
    out = []
    import contextlib, io, tempfile
    for c in cases:
        try:
            is_getter = c["module"].startswith("getters.")
            prefix = "desktop_env.evaluators." if is_getter else "desktop_env.evaluators.metrics."
            mod = importlib.import_module(prefix + c["module"])
            fn = getattr(mod, c["func"])
            args = list(c.get("args", []))
            if is_getter:
                env = _Env(c["env_dir"], tempfile.mkdtemp()) if c.get("env_dir") else None
                args.insert(0, env)
            with contextlib.redirect_stdout(io.StringIO()):  # OSWorld's metrics print
                value = fn(*args, **c.get("kwargs", {}))
            out.append({"value": value} if is_getter else {"score": float(value)})
        except Exception as e:
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
