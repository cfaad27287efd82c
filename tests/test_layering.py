"""Imports point down: envs → bunshin_gym → forkcore (STYLE rule 3)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"forkcore": {"bunshin_gym", "envs", "gymnasium", "benchmarks"},
             "bunshin_gym": {"envs"},
             "kmod": {"bunshin_gym", "envs"}}  # kmod's guest tests drive forkcore's kmod backend
ALLOWED_FILES = {ROOT / "bunshin_gym" / "cli.py"}  # the CLI dispatches to every layer, lazily


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downwards(layer):
    bad = []
    for f in (ROOT / layer).rglob("*.py"):
        if f in ALLOWED_FILES:
            continue
        bad += [f"{f.relative_to(ROOT)} imports {m}" for m in _imports(f) if m in FORBIDDEN[layer]]
    assert not bad, "\n".join(bad)
