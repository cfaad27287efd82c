"""The kernel-module commands of the `bunshin` CLI: `bunshin kmod test`.

The core CLI (bunshin_gym.cli) finds `app` through the `bunshin.commands` entry point `kmod` in pyproject.toml,
so bunshin_gym never imports kmod. Imports only typer; the harness loads when a command runs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(no_args_is_help=True, help="The copy-on-write kernel module.")


@app.command("test")
def kmod_test(out: Optional[Path] = typer.Option(None, help="keep the guest's console log here"),
              forkcore: bool = typer.Option(True, help="also fork a CRIU workspace with the kmod backend in the "
                                                       "guest (~6-10 min under TCG)")) -> None:
    """Build the module, boot Debian's kernel under qemu and run the module's tests in the guest."""
    from kmod.harness import run_forkcore_guest_test, run_tests

    results = [run_tests(out_dir=out)]
    if forkcore:
        results.append(run_forkcore_guest_test(out_dir=out))
    for r in results:
        typer.echo(r.report())
    raise typer.Exit(0 if all(r.passed for r in results) else 1)
