"""What every figure writes: the JSON beside the paper's numbers, the machine it ran on, and the PNG."""
from __future__ import annotations

import html
import json
import os
import platform
from dataclasses import asdict
from pathlib import Path

from forkcore import accounting
from forkcore.backends import get_backend


def machine() -> dict:
    """Cores, memory, kernel and the memory backend `auto` picks here."""
    try:
        backend = get_backend("auto").name
    except Exception as e:  # noqa: BLE001 - reported, not fatal: the figure says what it used
        backend = f"none ({e})"
    return {"cores": os.cpu_count(), "memory_gb": round(accounting.meminfo()["MemTotal"] / 2**30, 1),
            "kernel": platform.release(), "auto_backend": backend}


def write_figure(name: str, module, args, ours: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    result = {"figure": name, "paper": module.PAPER, "ours": ours, "machine": machine(), "args": asdict(args)}
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = module.plot(result, plt)
    fig.text(0.01, 0.01, f"this machine: {result['machine']['cores']} cores, {result['machine']['memory_gb']} GB, "
             f"kernel {result['machine']['kernel']}; scale: {module.scale(args)}", fontsize=7, color="0.35")
    fig.savefig(out / f"{name}.png", dpi=110)
    plt.close(fig)
    return result


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif not isinstance(v, list):
            out[f"{prefix}{k}"] = v
    return out


def write_index(out: Path) -> Path:
    """OUT/index.html: every NAME.png of OUT with the paper's numbers and ours beside it."""
    parts = ["<!doctype html><meta charset=utf-8><title>Bunshin Gym: the papers' figures here</title>",
             "<h1>The papers' figures on this machine</h1>"]
    for path in sorted(Path(out).glob("*.json")):
        r = json.loads(path.read_text())
        if "figure" not in r:
            continue
        rows = "".join(f"<tr><td>paper</td><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                       for k, v in _flat(r["paper"]).items())
        rows += "".join(f"<tr><td>ours</td><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                        for k, v in _flat(r["ours"]).items())
        parts.append(f"<h2>{html.escape(r['figure'])}</h2><img src='{html.escape(r['figure'])}.png' width=720>"
                     f"<table border=1 cellpadding=3><tr><th></th><th>value</th><th></th></tr>{rows}</table>"
                     f"<p><small>machine: {html.escape(json.dumps(r['machine']))}</small></p>")
    index = Path(out) / "index.html"
    index.write_text("\n".join(parts))
    return index
