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
    rows = [{"what": what, "paper": theirs, "ours": mine,
             "ratio": round(mine / theirs, 3) if theirs and mine is not None else None}
            for what, theirs, mine in module.vs_paper(ours, module.PAPER)]
    result = {"figure": name, "paper": module.PAPER, "ours": {**ours, "vs_paper": rows}, "machine": machine(),
              "args": asdict(args)}
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


def scalars(d: dict, prefix: str = "") -> dict:
    """The values of a nested dict that are not lists (curves), keyed "outer.inner"."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(scalars(v, f"{prefix}{k}."))
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
        headline = "".join("<tr>" + "".join(f"<td>{html.escape(str(row[k]))}</td>"
                                            for k in ("what", "paper", "ours", "ratio")) + "</tr>"
                           for row in r["ours"].get("vs_paper", []))
        details = "".join(f"<tr><td>{side}</td><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
                          for side in ("paper", "ours") for k, v in scalars(r[side]).items())
        parts.append(f"<h2>{html.escape(r['figure'])}</h2><img src='{html.escape(r['figure'])}.png' width=900>"
                     f"<table border=1 cellpadding=3><tr><th></th><th>paper</th><th>ours</th><th>ours / paper</th>"
                     f"</tr>{headline}</table><details><summary>every number</summary>"
                     f"<table border=1 cellpadding=3>{details}</table></details>"
                     f"<p><small>machine: {html.escape(json.dumps(r['machine']))}; args: "
                     f"{html.escape(json.dumps(r['args']))}</small></p>")
    index = Path(out) / "index.html"
    index.write_text("\n".join(parts))
    return index
