"""Option parsers shared by the `bunshin` CLI and its plugin commands (benchmarks, kmod): env names, integer lists.

Kept out of cli.py so a plugin can use them without importing the CLI that loads it (that would be a cycle).
"""
from __future__ import annotations

import typer

#: short name -> env id, for every `--env` option
ENV_NAMES = {"webarena": "BunshinWebArena-v0", "osworld": "BunshinOSWorld-v0"}


def resolve_env(name: str) -> str:
    """Accept a short name (webarena, osworld) or an env id; return the env id."""
    if name in ENV_NAMES:
        return ENV_NAMES[name]
    if name in ENV_NAMES.values():
        return name
    raise typer.BadParameter(f"unknown env {name!r}; use one of {', '.join([*ENV_NAMES, *ENV_NAMES.values()])}")


def parse_ints(text: str) -> tuple[int, ...]:
    """Parse a comma-separated list of integers >= 1, e.g. "1,2,4"."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected comma-separated integers, e.g. 1,2,4") from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"{text!r}: expected integers >= 1")
    return values
