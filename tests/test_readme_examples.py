"""The README's Python examples run as a newcomer runs them: each fenced `python` block saved as a script and run
with the Python the README names (its `source .../activate` line, found in the README itself), in a fresh process
in an empty folder.

Cheap examples run whole. An example that needs what CI cannot have runs up to its first such call, whose callee
and argument names are then checked without calling it (tests/readme_check.py); EXAMPLES says which and why.
Every block must have an entry here, so README and test cannot drift apart.
"""
from __future__ import annotations

import ast
import builtins
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from bunshin_gym.server import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: a line each block alone contains -> ("run", None) or ("until", (the call to stop at, why))
EXAMPLES = {
    'gym.make("BunshinWebArena-v0", task_id="0")': ("run", None),
    "gym.make_vec(": ("run", None),
    "SB3VecEnvAdapter.from_env_id(": ("until", (".learn", "4096 PPO timesteps of WebArena steps take ~15 min; the "
                                                "vec env and the PPO model are built for real")),
    "GenericEnvClient(": ("server", None),
    "GRPOTrainer(": ("until", ("GRPOTrainer", "trains a real model from a hub; examples/trl_grpo.py trains a "
                                              "tiny local one (tests/integration/test_trl.py)")),
    "Cluster(": ("until", ("Cluster", "needs Ray started on each machine; one machine's contained cluster is "
                                      "tests/integration/test_cluster.py")),
    'image_spec("shopping_final_0712"': ("until", ("image_spec", "needs WebArena's real shopping image, which "
                                                                 "cannot be fetched here")),
    'site_image="shopping_final_0712"': ("until", ("gym.make", "needs WebArena's real shopping image, which "
                                                               "cannot be fetched here")),
    "Workspace.start(probe_spec())": ("run", None),
}


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


def activate_line() -> str:
    """The README's line that gives a shell the project's Python."""
    lines = [line.split("#")[0].strip() for line in README.read_text().splitlines()
             if line.startswith("source ") and "activate" in line]
    assert len(lines) == 1, f"the README should name the project's Python in one `source .../activate` line: {lines}"
    return lines[0]


def _entry(block: str) -> tuple[str, tuple | None]:
    keys = [k for k in EXAMPLES if k in block]
    assert len(keys) == 1, f"no single EXAMPLES entry for this README block ({keys}):\n{block}"
    return EXAMPLES[keys[0]]


def undefined_names(source: str) -> set[str]:
    """Names an example reads but never binds (imports, assignments, parameters, loop targets) nor gets built in."""
    tree = ast.parse(source)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def run_as_newcomer(cwd: Path, script: Path, *args: str, stdin: str | None = None, timeout: float = 600) -> str:
    """`python SCRIPT ARGS` in a shell that ran the README's activate line, in folder `cwd`."""
    cmd = f"{activate_line()} && python {' '.join(shlex.quote(str(a)) for a in (script, *args))}"
    r = subprocess.run(["bash", "-c", cmd], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"`{cmd}` exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return r.stdout


def test_every_readme_example_is_known_and_names_what_it_uses():
    blocks = python_blocks()
    assert len(blocks) == len(EXAMPLES), "each README python block needs an EXAMPLES entry, and each entry a block"
    for block in blocks:
        _entry(block)
        assert not undefined_names(block), f"the example uses names it never defines: {undefined_names(block)}\n{block}"


def test_the_undefined_name_check_can_fail():
    """Negative control: the vector example as the README had it (no import of gym)."""
    assert undefined_names('venv = gym.make_vec("X", num_envs=4)\nobs, info = venv.reset()\n') == {"gym"}


@pytest.mark.criu
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("key", list(EXAMPLES))
def test_readme_example_runs_as_a_newcomer_runs_it(key, tmp_path):
    block = next(b for b in python_blocks() if key in b)
    mode, stop = EXAMPLES[key]
    script = tmp_path / "example.py"
    if mode == "run":
        script.write_text(block)
        run_as_newcomer(tmp_path, script)
    elif mode == "until":
        # a copy: run from tests/, its folders (tests/forkcore/, ...) would shadow the project's packages
        checker = tmp_path / "readme_check.py"
        checker.write_text((ROOT / "tests" / "readme_check.py").read_text())
        out = run_as_newcomer(tmp_path, checker, *stop, stdin=block)
        assert out.strip().endswith(f"not run ({stop[1]})"), out
    else:  # the OpenEnv client example, against a real `bunshin serve` on loopback with a token
        token_file = tmp_path / "token"
        token_file.write_text("readme-example-token\n")
        with ServerProcess("webarena", "--token-file", str(token_file)) as server:
            port = server.url.rsplit(":", 1)[1]
            script.write_text(block.replace("host:8000", f"127.0.0.1:{port}").replace("TOKEN", "readme-example-token"))
            run_as_newcomer(tmp_path, script)


@pytest.mark.parametrize("key, wrong", [
    ('site_image="shopping_final_0712"', ("site_memory_mb=", "site_memory_megabytes=")),
    ("Cluster(", (".run_groups(", ".run_group(")),
    ('image_spec("shopping_final_0712"', ("Workspace.start(spec)", "Workspace.begin(spec)")),
])
def test_the_partial_check_fails_on_a_wrong_name(key, wrong, tmp_path):
    """Negative control for the examples that stop early: a misspelt argument or method after the stop fails."""
    block = next(b for b in python_blocks() if key in b)
    assert wrong[0] in block
    checker = tmp_path / "readme_check.py"
    checker.write_text((ROOT / "tests" / "readme_check.py").read_text())
    with pytest.raises(AssertionError, match="TypeError|AttributeError"):
        run_as_newcomer(tmp_path, checker, *EXAMPLES[key][1], stdin=block.replace(*wrong))
