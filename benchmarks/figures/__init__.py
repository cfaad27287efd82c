"""The papers' figures, one script each: `bunshin bench figure NAME [--quick] --out DIR`.

Each module of this package is one figure (CleanRL style: an `Args` dataclass, `PAPER` — the paper's numbers —
`run(args) -> ours` and `plot(result, path)`), and `common.write_figure` turns its result into DIR/NAME.json
({"figure", "paper", "ours", "machine", "args"}) and DIR/NAME.png (the paper's values drawn beside ours).
`FIGURES` lists the figures built so far; `run_figure` runs one.
"""
from __future__ import annotations

import importlib
from pathlib import Path

#: name -> what it reproduces (the module benchmarks.figures.<name> holds it)
FIGURES = {
    "fig1": "BunshinRL Fig 1: share of an env's memory identical in another env (across tasks; one GRPO group)",
    "fig12": "BunshinRL Fig 12: total memory of a source OSWorld env and 2-16 forks, CRIU-private vs ours",
    "deltabox": "DeltaBox: checkpoint and rollback latency, ours (snapshot, standby thaw) vs CRIU dump/restore",
}


def run_figure(name: str, quick: bool, out: Path) -> dict:
    """Run figure `name` (--quick: the CI scale) and write OUT/NAME.json and OUT/NAME.png; returns the JSON."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; `bunshin bench figure --list` lists: {', '.join(FIGURES)}")
    from .common import write_figure

    module = importlib.import_module(f"{__name__}.{name}")
    args = module.Args.quick() if quick else module.Args()
    ours = module.run(args)
    return write_figure(name, module, args, ours, Path(out))
