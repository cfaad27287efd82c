"""`bunshin osworld ...`: commands for OSWorld's own task files (registered through the `bunshin.commands`
entry points, pyproject.toml).

    bunshin osworld fetch --examples DIR      download every file the tasks under DIR need into the cache
    bunshin osworld coverage --examples DIR   which of its tasks this env supports, per domain, and why not
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, help="OSWorld's own tasks: their downloads.")


@app.callback()
def _group() -> None:
    """OSWorld's own task files (BUNSHIN_OSWORLD_EXAMPLES), outside this repository."""


def task_files_under(examples: Path) -> list[tuple[Path, dict]]:
    """(path, task dict) of every OSWorld task JSON under `examples` (files that are not a task, such as
    test_all.json, are left out)."""
    out = []
    for p in sorted(examples.rglob("*.json")):
        try:
            raw = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(raw, dict) and "id" in raw and "evaluator" in raw:
            out.append((p, raw))
    return out


@app.command()
def fetch(examples: Path = typer.Option(..., exists=True, file_okay=False,
                                        help="OSWorld's evaluation_examples (or any folder of its task JSONs)"),
          workers: int = typer.Option(4, min=1, max=32, help="downloads at once")) -> None:
    """Download every file the tasks under --examples need (their `download` steps and `cloud_file` getters)
    into BUNSHIN_OSWORLD_CACHE, so the tasks run offline (BUNSHIN_OSWORLD_OFFLINE=1) here or wherever the cache
    is copied. Already cached files are checked, not fetched again. Exits 1 if any failed."""
    from tqdm import tqdm

    from .downloads import DownloadError, cache_dir, cached, fetch as fetch_url, task_urls

    urls: dict[str, list[str]] = {}
    for path, raw in task_files_under(examples):
        for u in task_urls(raw):
            urls.setdefault(u, []).append(raw.get("id", path.stem))
    before = {u for u in urls if cached(u) is not None}
    failed: dict[str, str] = {}

    def one(url: str) -> None:
        try:
            fetch_url(url)
        except DownloadError as e:
            failed[url] = str(e)

    with ThreadPoolExecutor(workers) as pool, tqdm(total=len(urls), unit="file", desc="fetch", disable=None) as bar:
        for _ in pool.map(one, [u for u in urls if u not in before]):
            bar.update()
        bar.update(len(before))
    typer.echo(f"{len(urls)} URLs in {sum(len(v) for v in urls.values())} task uses under {examples}: "
               f"{len(before)} already cached, {len(urls) - len(before) - len(failed)} fetched, {len(failed)} failed; "
               f"cache: {cache_dir()}")
    for url, why in sorted(failed.items()):
        typer.echo(f"FAILED {url} (tasks {', '.join(urls[url][:3])}{', …' if len(urls[url]) > 3 else ''}): {why}")
    if failed:
        raise typer.Exit(1)


@app.command()
def coverage(examples: Path = typer.Option(None, file_okay=False, envvar="BUNSHIN_OSWORLD_EXAMPLES",
                                           help="OSWorld's evaluation_examples (with test_all.json), or any folder "
                                                "of its task JSONs [env: BUNSHIN_OSWORLD_EXAMPLES]"),
             run: bool = typer.Option(False, "--run", help="also reset every task that is ready (apps, files) and "
                                      "judge a do-nothing episode (minutes a task)"),
             out: Path = typer.Option(Path("osworld-coverage"), help="folder for coverage.json and coverage.png")) -> None:
    """Per domain: how many tasks load, have every config step and evaluator piece supported, have their
    applications and files here, and (--run) reset and evaluate; the reason for every task that does not."""
    from tqdm import tqdm

    from .coverage import coverage as check, plot, report, summary_table

    if examples is None or not examples.is_dir():
        raise typer.BadParameter("give --examples (OSWorld's evaluation_examples folder) or set "
                                 "BUNSHIN_OSWORLD_EXAMPLES", param_hint="--examples")
    with tqdm(desc="tasks", unit="task", disable=None) as bar:  # None: no bar when not on a terminal
        results = check(examples, run=run, progress=lambda name: (bar.set_postfix_str(name), bar.update()))
    rep = report(results, examples, run)
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage.json").write_text(json.dumps(rep, indent=1))
    plot(rep, out / "coverage.png")
    typer.echo(summary_table(rep))
    for kind, counts in rep["missing"].items():
        top = ", ".join(f"{k} ({v})" for k, v in list(counts.items())[:12])
        typer.echo(f"missing {kind}: {top}")
    typer.echo(f"wrote {out / 'coverage.json'} and {out / 'coverage.png'}")
