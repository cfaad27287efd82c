"""A workspace carries only what runs inside it: the OSWorld state getters (envs/osworld/getters/), never a metric
or the judge's own getters (envs/osworld/evaluators/, named in envs/osworld/.workspace-exclude). Checked on the code
layer's file list (forkcore.layers, what `code_layer` copies into every workspace) and by importing the
in-workspace handler module from a copy of that layer in a fresh interpreter. Each check has its negative control:
the same check on a layer that excludes nothing (as every workspace had it before the split) finds the metrics.
No desktop needed: these run wherever the project's Python does.
"""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forkcore import layers

ROOT = Path(__file__).resolve().parents[2]
OSWORLD = Path("envs", "osworld")
#: what the workspace's executor imports: its handlers, and what osworld.collect / osworld.reset import from there
WORKSPACE_IMPORTS = ("envs.osworld.handlers", "envs.osworld.getters", "envs.osworld.harness", "envs.osworld.tasks")


def layer_files() -> list[Path]:
    """The code layer's files, relative to the repository (what forkcore.layers.code_layer copies)."""
    return [f.relative_to(ROOT) for f in layers._code_files(ROOT)]


@pytest.fixture
def nothing_excluded(monkeypatch):
    """The leaky configuration: no package's .workspace-exclude is read."""
    monkeypatch.setattr(layers, "_excluded", lambda folder: ([], []))


def _registers_metrics(path: Path) -> bool:
    """A Python file that defines a metric (a function decorated @metric / @_image_metric) or the METRICS
    registry itself."""
    tree = ast.parse((ROOT / path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(ast.unparse(d).split("(")[0] in ("metric", "_image_metric") for d in node.decorator_list):
                return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "METRICS" for t in targets):
                return True
    return False


def metric_files(files: list[Path]) -> list[str]:
    """The files of `files` that hold OSWorld's comparison code: evaluators/ (metrics, judge getters) or any
    module that registers a metric."""
    return sorted(str(f) for f in files if f.is_relative_to(OSWORLD)
                  and (f.is_relative_to(OSWORLD / "evaluators") or (f.suffix == ".py" and _registers_metrics(f))))


def test_the_code_layer_holds_the_state_getters_and_no_metric():
    files = layer_files()
    assert metric_files(files) == []
    carried = {str(f) for f in files}
    for module in ("__init__", "common", "browser_pages", "browser_profile", "files", "images", "media", "slides"):
        assert f"envs/osworld/getters/{module}.py" in carried
    assert "envs/osworld/handlers.py" in carried


def test_negative_control_a_layer_that_excludes_nothing_holds_the_metrics(nothing_excluded):
    found = metric_files(layer_files())
    assert "envs/osworld/evaluators/metrics.py" in found and "envs/osworld/evaluators/slides.py" in found, found


def _import_in_layer(tmp_path: Path, modules: tuple[str, ...]) -> dict:
    """Copy the code layer's files to `tmp_path` and import `modules` from there in a fresh interpreter (the
    project's Python, its site-packages, but only the layer's copy of the project). Returns {"modules": every
    envs.* module imported, "evaluators": whether envs.osworld.evaluators is importable there}."""
    for f in layer_files():
        dst = tmp_path / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dst)
    script = (
        "import importlib, importlib.util, json, sys\n"
        f"for m in {list(modules)!r}: importlib.import_module(m)\n"
        "import envs\n"
        "assert envs.__file__.startswith(sys.argv[1]), envs.__file__\n"
        "mods = sorted(m for m in sys.modules if m.startswith('envs.'))\n"
        "spec = importlib.util.find_spec('envs.osworld.evaluators')\n"
        "print(json.dumps({'modules': mods, 'evaluators': spec is not None}))\n")
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_workspace_side_imports_without_the_metrics_and_loads_none(tmp_path):
    """The handlers, the getters (osworld.collect), harness and tasks (osworld.reset) import from a copy of the
    code layer, where evaluators/ is absent, and pull in no metric module."""
    got = _import_in_layer(tmp_path, WORKSPACE_IMPORTS)
    assert got["evaluators"] is False  # the layer really lacks the metrics
    assert "envs.osworld.getters.common" in got["modules"] and "envs.osworld.handlers" in got["modules"]
    assert [m for m in got["modules"] if m.startswith("envs.osworld.evaluators")] == [], got["modules"]


def test_negative_control_in_a_leaky_layer_the_metrics_are_there_and_the_check_sees_them_loaded(
        tmp_path, nothing_excluded):
    got = _import_in_layer(tmp_path, WORKSPACE_IMPORTS + ("envs.osworld.evaluators",))
    assert got["evaluators"] is True
    assert "envs.osworld.evaluators.metrics" in got["modules"], got["modules"]
