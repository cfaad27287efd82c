"""The papers' figures, one script each: `bunshin bench figure NAME [--quick] --out DIR`.

Each module of this package is one figure (CleanRL style: an `Args` dataclass, `PAPER` — the paper's numbers —
`run(args, out) -> ours`, `scale(args)`, `vs_paper(ours, paper)` — the headline rows (what, paper, ours) — and
`plot(result, plt) -> figure`), and `common.write_figure` turns its result into DIR/NAME.json ({"figure", "paper",
"ours" (with "vs_paper": the headline rows and their ratio), "machine", "args"}) and DIR/NAME.png (the paper's
values drawn beside ours).
`FIGURES` lists the figures built so far; `run_figure` runs one.
"""
from __future__ import annotations

import importlib
from pathlib import Path

#: name -> what it reproduces (the module benchmarks.figures.<name> holds it)
FIGURES = {
    "fig1": "BunshinRL Fig 1: share of an env's memory identical in another env (across tasks; one GRPO group)",
    "fig2": "BunshinRL Fig 2: memory of n concurrent rollouts (8 → as many as fit), CRIU-private vs ours",
    "fig6": "BunshinRL Fig 6: memory of all environments over one OSWorld epoch, CRIU-private vs ours",
    "fig7": "BunshinRL Fig 7: memory of all environments over one WebArena epoch, CRIU-private vs ours",
    "fig8": "BunshinRL Fig 8: rollouts still running over time, Base / Spec / Full (OSWorld training run)",
    "fig9": "BunshinRL Fig 9: memory cost of caching + speculation over Base (OSWorld training run)",
    "fig10": "BunshinRL Fig 10: hit rate per epoch over 5 drifting epochs, Spec and Full (OSWorld training run)",
    "fig11": "BunshinRL Fig 11: average reward per epoch, identical for Base / Spec / Full (OSWorld training run)",
    "fig12": "BunshinRL Fig 12: total memory of a source OSWorld env and 2-16 forks, CRIU-private vs ours",
    "tvcache": "TVCache: hit rate per training step and median tool-call time with vs without the cache",
    "deltabox": "DeltaBox: checkpoint and rollback latency, ours (snapshot, standby thaw) vs CRIU dump/restore",
}


def run_figure(name: str, quick: bool, out: Path) -> dict:
    """Run figure `name` (--quick: the CI scale) and write OUT/NAME.json and OUT/NAME.png; returns the JSON."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; `bunshin bench figure --list` lists: {', '.join(FIGURES)}")
    from .common import write_figure

    module = importlib.import_module(f"{__name__}.{name}")
    args = module.Args.quick() if quick else module.Args()
    ours = module.run(args, Path(out))
    return write_figure(name, module, args, ours, Path(out))
