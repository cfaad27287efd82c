"""Imports point down: benchmarks → envs → bunshin_gym → forkcore, kmod beside them (STYLE rule 3); no file exempt.

The CLI's benchmark and kmod commands are plugins (`bunshin.commands` entry points), so the layers below never
import them; these tests also check the plugins show up and that a broken one cannot break the CLI.
"""
import ast
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
# layer -> modules (and their submodules) it must not import
FORBIDDEN = {"forkcore": {"bunshin_gym", "envs", "benchmarks", "kmod", "gymnasium"},
             "bunshin_gym": {"envs", "benchmarks", "kmod"},
             "envs": {"benchmarks", "kmod", "bunshin_gym.cli"},
             "kmod": {"bunshin_gym", "envs", "benchmarks"},  # its guest tests drive forkcore's kmod backend
             # the top: may import every layer (kmod_bench.py drives kmod.harness), but not the CLI that loads it
             "benchmarks": {"bunshin_gym.cli"}}


def _imports(path: Path):
    """Every absolute module an import statement of `path` names, lazy (in-function) imports included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # module.name: `from bunshin_gym import cli` imports bunshin_gym.cli
            yield from (f"{node.module}.{a.name}" for a in node.names)


def _is_under(module: str, banned: str) -> bool:
    return module == banned or module.startswith(banned + ".")


def test_every_top_level_package_has_a_layer_rule():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(FORBIDDEN)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downwards(layer):
    bad = sorted({f"{f.relative_to(ROOT)} imports {m}" for f in (ROOT / layer).rglob("*.py")
                  for m in _imports(f) if any(_is_under(m, b) for b in FORBIDDEN[layer])})
    assert not bad, "\n".join(bad)


def test_bunshin_help_lists_the_plugin_commands():
    bunshin = Path(sys.executable).with_name("bunshin")  # the installed script: reads the real entry points
    assert bunshin.is_file(), f"no {bunshin}: install the package (pip install -e .) to get the CLI and its plugins"
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    top = subprocess.run([bunshin, "--help"], capture_output=True, text=True, timeout=120, env=env)
    assert top.returncode == 0 and "warning" not in top.stderr, top.stderr
    commands = {line.strip(" │").split()[0] for line in top.stdout.splitlines() if line.strip(" │")}  # first words
    assert {"doctor", "run", "gc", "demo", "bench", "kmod", "tasks"} <= commands, top.stdout
    bench = subprocess.run([bunshin, "bench", "--help"], capture_output=True, text=True, timeout=120, env=env)
    assert bench.returncode == 0 and all(c in bench.stdout for c in ("fork", "epoch", "webarena", "osworld", "lookup"))
    fork = subprocess.run([bunshin, "bench", "fork", "--help"], capture_output=True, text=True, timeout=120, env=env)
    assert all(o in fork.stdout for o in ("--clones", "--out", "--hold-mb", "--no-browser", "bench-out/fork"))
    kmod = subprocess.run([bunshin, "kmod", "test", "--help"], capture_output=True, text=True, timeout=120, env=env)
    assert kmod.returncode == 0 and "--no-forkcore" in kmod.stdout


def test_a_broken_plugin_warns_and_leaves_the_other_commands_working(capsys, tmp_path, monkeypatch):
    from bunshin_gym.cli import PLUGIN_GROUP, load_plugins

    # imports fine, but typer cannot build the command (the annotation names a type-checking-only import)
    (tmp_path / "plugin_bad_hints.py").write_text(
        "from __future__ import annotations\nimport typer\n\n"
        "def cmd(out: Unknown = typer.Option(None)) -> None:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    app = typer.Typer(no_args_is_help=True)

    @app.command()
    def hello() -> None:
        typer.echo("hello")

    eps = [importlib.metadata.EntryPoint("broken", "no_such_module_xyz:app", PLUGIN_GROUP),
           importlib.metadata.EntryPoint("notacommand", "sys:maxsize", PLUGIN_GROUP),
           importlib.metadata.EntryPoint("badhints", "plugin_bad_hints:cmd", PLUGIN_GROUP),
           importlib.metadata.EntryPoint("hello", "kmod.cli:app", PLUGIN_GROUP),  # name taken by a core command
           importlib.metadata.EntryPoint("kmod", "kmod.cli:app", PLUGIN_GROUP)]
    assert load_plugins(app, eps) == ["kmod"]
    err = capsys.readouterr().err
    assert "plugin 'broken' (no_such_module_xyz:app) not loaded: ModuleNotFoundError" in err
    assert "plugin 'notacommand' (sys:maxsize) not loaded: TypeError" in err
    assert "plugin 'badhints' (plugin_bad_hints:cmd) not loaded: NameError" in err
    assert "plugin 'hello' (kmod.cli:app) not loaded: ValueError" in err
    runner = CliRunner()
    assert runner.invoke(app, ["hello"]).output == "hello\n"
    assert runner.invoke(app, ["kmod", "test", "--help"]).exit_code == 0
