"""No typer command is called as a Python function.

A typer command's parameters default to `typer.Option(...)`/`typer.Argument(...)` objects: called from Python
with an argument left out, the command gets that OptionInfo object as the value (on 2026-12-07 `bunshin demo`
called `bench_fork(...)` without `harden`, and the fork stage crashed with "Object of type OptionInfo is not JSON
serializable"). Commands call plain functions with explicit arguments instead; this static check keeps it so.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("forkcore", "bunshin_gym", "envs", "benchmarks", "kmod", "tests", "scripts")


def _is_typer_param(node: ast.expr | None) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("Option", "Argument") and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "typer")


def _is_command(fn: ast.FunctionDef) -> bool:
    """A typer command: registered with `@<app>.command(...)`/`.callback(...)`, or taking typer parameters."""
    decorated = any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                    and d.func.attr in ("command", "callback") for d in fn.decorator_list)
    defaults = fn.args.defaults + [d for d in fn.args.kw_defaults if d is not None]
    return decorated or any(_is_typer_param(d) for d in defaults)


def commands_of(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and _is_command(n)}


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _bound_in(fn: ast.AST) -> set[str]:
    """Names a function binds itself (parameters, imports, assignments), which shadow the module's commands."""
    names = set()
    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = fn.args
        names |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x is not None}
    for node in ast.walk(fn):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(al.asname or al.name).split(".")[0] for al in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def command_calls(source: str, path: Path, commands_by_module: dict[str, set[str]]) -> list[str]:
    """Each place in `source` that calls a typer command as a function, or imports one to call it."""
    tree = ast.parse(source)
    found = []
    local = commands_of(tree)
    # `import benchmarks.cli as cli` / `from benchmarks import cli`: module aliases whose commands we know
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for al in node.names:
                if al.name in commands_by_module:
                    aliases[al.asname or al.name] = commands_by_module[al.name]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for al in node.names:
                sub = f"{node.module}.{al.name}"
                if sub in commands_by_module:
                    aliases[al.asname or al.name] = commands_by_module[sub]
                elif al.name in commands_by_module.get(node.module, set()):
                    found.append(f"{path}:{node.lineno}: imports typer command {node.module}.{al.name}")

    def visit(scope: ast.AST, shadowed: set[str]) -> None:
        for node in ast.iter_child_nodes(scope):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(node, shadowed | _bound_in(node))
                continue
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in local and f.id not in shadowed:
                    found.append(f"{path}:{node.lineno}: calls typer command {f.id}()")
                elif (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in aliases
                      and f.attr in aliases[f.value.id] and f.value.id not in shadowed):
                    found.append(f"{path}:{node.lineno}: calls typer command {f.value.id}.{f.attr}()")
            visit(node, shadowed)

    visit(tree, set())
    return found


def _all_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if ".venv" not in p.parts]


def _commands_by_module() -> dict[str, set[str]]:
    out = {}
    for p in _all_files():
        cmds = commands_of(ast.parse(p.read_text()))
        if cmds:
            rel = p.relative_to(ROOT).with_suffix("")
            out[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = cmds
    return out


def test_the_check_knows_every_cli_modules_commands():
    by_module = _commands_by_module()
    assert {"bench_fork", "bench_epoch", "demo"} <= by_module["benchmarks.cli"]
    assert {"doctor", "run", "serve"} <= by_module["bunshin_gym.cli"]


def test_the_check_flags_a_command_called_as_a_function():
    """Negative control: the crash of 2026-12-07, in its own shape and through a module alias."""
    by_module = _commands_by_module()
    old_demo = (
        "import typer\n"
        "app = typer.Typer()\n"
        "@app.command('fork')\n"
        "def bench_fork(clones: str = typer.Option('1'), harden: bool = typer.Option(True)):\n"
        "    pass\n"
        "def demo(out: str = typer.Option('x')):\n"
        "    bench_fork(clones='1,4')\n")
    assert command_calls(old_demo, Path("old.py"), by_module) == ["old.py:7: calls typer command bench_fork()"]
    via_alias = "from benchmarks import cli\ndef main():\n    cli.bench_fork(clones='1')\n"
    assert command_calls(via_alias, Path("a.py"), by_module) == ["a.py:3: calls typer command cli.bench_fork()"]
    imported = "from benchmarks.cli import demo\n"
    assert command_calls(imported, Path("b.py"), by_module) == ["b.py:1: imports typer command benchmarks.cli.demo"]
    # a local name that shadows a command is not the command (e.g. `from .epoch_bench import run` in a function)
    shadowed = old_demo.replace("    bench_fork(clones='1,4')\n",
                                "    from benchmarks.fork_bench import run as bench_fork\n    bench_fork(1)\n")
    assert command_calls(shadowed, Path("c.py"), by_module) == []


def test_no_typer_command_is_called_as_a_python_function():
    by_module = _commands_by_module()
    found = [f for p in _all_files() for f in command_calls(p.read_text(), p.relative_to(ROOT), by_module)]
    assert not found, "call a plain function with explicit arguments instead:\n" + "\n".join(found)
