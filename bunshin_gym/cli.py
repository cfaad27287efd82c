"""The `bunshin` command line: doctor, benchmarks, kernel-module tests, task listing and running."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Bunshin Gym: forkable workspaces for agentic RL (web and desktop).")
bench = typer.Typer(no_args_is_help=True, help="Benchmarks (JSON + PNG, baseline measured in the same run).")
kmod_app = typer.Typer(no_args_is_help=True, help="The copy-on-write kernel module.")
tasks_app = typer.Typer(no_args_is_help=True, help="Tasks of the envs.")
app.add_typer(bench, name="bench")
app.add_typer(kmod_app, name="kmod")
app.add_typer(tasks_app, name="tasks")

ENV_IDS = {"webarena": "BunshinWebArena-v0", "osworld": "BunshinOSWorld-v0"}


def resolve_env(name: str) -> str:
    """Accept a short name (webarena, osworld) or an env id; return the env id."""
    if name in ENV_IDS:
        return ENV_IDS[name]
    if name in ENV_IDS.values():
        return name
    raise typer.BadParameter(f"unknown env {name!r}; use one of {', '.join([*ENV_IDS, *ENV_IDS.values()])}")


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected comma-separated integers, e.g. 1,2,4") from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"{text!r}: expected integers >= 1")
    return values


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
           deep: bool = typer.Option(False, "--deep", help="also run every env's restore checks: start its "
                                     "applications, snapshot, fork, and use each one in the clone (~1-2 min an env)"),
           env: Optional[list[str]] = typer.Option(None, help="with --deep: only this env (repeatable)"),
           allow_pkeys: bool = typer.Option(False, "--allow-pkeys", help="with --deep: let the workspaces allocate "
                                            "memory protection keys, as before forkcore hid them; on a PKU CPU this "
                                            "shows whether the CRIU in use restores key state")) -> None:
    """List what this machine can do (root, namespaces, overlayfs, CRIU, KSM, backends, browser, X).

    Exits 1 only when a --deep restore check fails (a missing optional capability is not a failure)."""
    from .doctor import check_all

    caps = check_all()
    if not as_json:
        width = max(len(c.name) for c in caps)
        for c in caps:
            mark = typer.style("OK     ", fg="green") if c.ok else typer.style("MISSING", fg="red")
            line = f"{mark} {c.name:<{width}}  {c.detail}"
            if not c.ok and c.fix:
                line += f"\n        {'':<{width}}  fix: {c.fix}"
            typer.echo(line)
    results = []
    if deep:
        from .compat import run_checks

        if not as_json:
            typer.echo("\nrestore checks (start, snapshot, one clone, use each application in the clone):")
        results = run_checks([resolve_env(e) for e in env] if env else None, allow_pkeys=allow_pkeys,
                             progress=not as_json)
        for r in [] if as_json else results:
            mark = typer.style("OK     ", fg="green") if r.ok else typer.style("FAIL   ", fg="red")
            typer.echo(f"{mark} {r.env:<9} {r.app} [{r.versions}] ({r.seconds:.1f} s)\n        {r.detail}")
    if as_json:
        typer.echo(json.dumps({"capabilities": [c.to_dict() for c in caps],
                               "restore_checks": [r.to_dict() for r in results]} if deep
                              else [c.to_dict() for c in caps], indent=2))
    if any(not r.ok for r in results):
        raise typer.Exit(1)


def _make_env(env: str, **kwargs):
    import gymnasium as gym

    import bunshin_gym  # noqa: F401 - registers the envs

    return gym.make(resolve_env(env), **kwargs)


@tasks_app.command("list")
def tasks_list(env: str = typer.Option(..., help="webarena, osworld or an env id")) -> None:
    """List the tasks of an env: id and goal."""
    from bunshin_gym import adapter_for

    adapter = adapter_for(resolve_env(env))
    for tid in adapter.task_ids():
        typer.echo(f"{tid}\t{adapter.load_task(tid).goal}")


@app.command()
def run(env: str = typer.Option(..., help="webarena, osworld or an env id"),
        task: str = typer.Option(..., help="task id (see `bunshin tasks list`)"),
        policy: str = typer.Option("oracle", help="oracle | random | chat (an LLM, see --llm-url)"),
        seed: int = typer.Option(0, help="seed for the random and chat policies"),
        max_steps: int = typer.Option(30, help="steps before truncation"),
        llm_url: Optional[str] = typer.Option(None, help="chat: an OpenAI-compatible base URL (default: start "
                                                         "the local model of scripts/install_llm.sh)")) -> None:
    """Run one episode of a task with a policy; prints each step and the reward."""
    import contextlib
    import random

    if policy not in ("oracle", "random", "chat"):
        raise typer.BadParameter(f"policy {policy!r}: use oracle, random or chat")
    with contextlib.ExitStack() as stack:
        if policy == "chat":
            from .llm_server import LocalLLMServer
            from .rollout import ChatPolicy

            if llm_url is None:
                llm_url = stack.enter_context(LocalLLMServer()).base_url
            chat = ChatPolicy(base_url=llm_url, timeout_s=600)
        e = stack.enter_context(contextlib.closing(_make_env(env, task_id=task, max_steps=max_steps, diagnostics=True)))
        obs, info = e.reset(seed=seed)
        adapter = e.unwrapped.adapter
        if policy == "oracle":
            actions = iter(adapter.oracle_actions(e.unwrapped.task))
        rng, reward, done = random.Random(seed), 0.0, False
        while not done:
            if policy == "oracle":
                action = next(actions, None)
                if action is None:
                    break
            elif policy == "chat":
                action = chat.act(obs, e, rng)
            else:
                action = rng.choice(adapter.candidate_actions(obs) or ["noop()"])
            obs, reward, term, trunc, info = e.step(action)
            done = term or trunc
            err = f"  error: {info['last_action_error']}" if info["last_action_error"] else ""
            typer.echo(f"step {info['elapsed_steps']:>2}: {str(action)[:90]}{err}")
        typer.echo(f"reward: {reward}")


@app.command()
def gc() -> None:
    """Remove state left by workspaces whose processes are gone (after a crash or kill -9)."""
    from forkcore.gc import collect

    for line in collect():
        typer.echo(line)


@bench.command("fork")
def bench_fork(
    clones: str = typer.Option("1,2,4,8,16", help="clone counts, comma-separated"),
    out: Path = typer.Option(Path("bench-out/fork"), help="output directory"),
    backends: str = typer.Option("private,ksm,memfile", help="memory backends to compare"),
    hold_mb: int = typer.Option(200, help="MiB of anonymous memory held in the workspace"),
    browser: bool = typer.Option(True, help="run headless Chromium in the workspace"),
    settle_max_s: float = typer.Option(60.0, help="longest wait for memory to settle (KSM)"),
) -> None:
    """Fork latency and memory per backend and clone count → OUT/fork.json + OUT/fork.png."""
    from benchmarks.fork_bench import Args, run

    rows = run(Args(out=str(out), clones=_ints(clones), backends=tuple(b for b in backends.split(",") if b),
                    hold_mb=hold_mb, browser=browser, settle_max_s=settle_max_s))
    typer.echo(f"{'backend':<9} {'clones':>6} {'snapshot_s':>10} {'prepare_s':>9} {'fork_p50_s':>10} "
               f"{'memory_mb':>10} {'pss_mb':>8}")
    for r in rows:
        typer.echo(f"{r['backend']:<9} {r['clones']:>6} {r['snapshot_s']:>10.3f} {r['prepare_s']:>9.3f} "
                   f"{r['fork_p50_s']:>10.3f} {r['memory_mb']:>10.1f} {r['pss_mb']:>8.1f}")
    typer.echo(f"wrote {out / 'fork.json'} and {out / 'fork.png'}")


@bench.command("epoch")
def bench_epoch(env: str = typer.Option("webarena", help="webarena, osworld or an env id"),
                tasks: int = typer.Option(4, help="tasks T"), group: int = typer.Option(4, help="group size G"),
                iterations: int = typer.Option(3, help="iterations I"),
                concurrency: int = typer.Option(8, help="most workspaces alive at once"),
                think_median_s: float = typer.Option(2.0, help="think-time model median (s)"),
                configs: str = typer.Option("base,cache,spec,cache_spec", help="configurations"),
                out: Path = typer.Option(Path("bench-out/epoch"), help="output directory")) -> None:
    """Replayed GRPO epoch: base vs cache vs spec vs cache_spec → OUT/epoch.json + PNGs."""
    from benchmarks.epoch_bench import Args, run

    result = run(Args(env=resolve_env(env), tasks=tasks, group=group, iterations=iterations, concurrency=concurrency,
                      think_median_s=think_median_s, configs=tuple(c for c in configs.split(",") if c), out=str(out)))
    _print_epoch(result)
    typer.echo(f"wrote {out / 'epoch.json'} and {out}/epoch_*.png")


def _print_epoch(result: dict) -> None:
    cfgs = result["configs"]
    typer.echo(f"{'config':<11} {'wall_s':>8} {'peak_MB':>8} {'hit rate per iteration':<28} {'spec acc':>8} {'CPU busy':>8}")
    for name, c in cfgs.items():
        acc = "-" if c["spec_accuracy"] is None else f"{c['spec_accuracy']:.2f}"
        typer.echo(f"{name:<11} {c['wall_s']:>8.1f} {c['peak_memory_mb']:>8.0f} "
                   f"{str(c['hit_rate_per_iteration']):<28} {acc:>8} {c['cpu_busy_fraction']:>8.0%}")
    rewards = [c["rewards"] for c in cfgs.values()]
    same = all(r == rewards[0] for r in rewards)
    typer.echo(f"rewards identical across configurations: {same} (mean {sum(rewards[0]) / max(1, len(rewards[0])):.2f})")


@bench.command("webarena")
def bench_webarena(out: Path = typer.Option(Path("bench-out/webarena"), help="output directory"),
                   quick: bool = typer.Option(False, help="CI scale: one env, two resets"),
                   browsergym: str = typer.Option("auto", help="BrowserGym baseline: auto (if installed) | on | off"),
                   backend: str = typer.Option("auto", help="forkcore memory backend")) -> None:
    """Reset/step latency and per-env PSS, Bunshin vs BrowserGym in the same run → OUT/webarena.json + .png."""
    from benchmarks.webarena_bench import Args, run

    if browsergym not in ("auto", "on", "off"):
        raise typer.BadParameter(f"--browsergym {browsergym!r}: use auto, on or off")
    run(Args(out=str(out), quick=quick, browsergym=browsergym, backend=backend))
    typer.echo((out / "webarena.json").read_text()[:2000])
    typer.echo(f"wrote {out / 'webarena.json'} and {out / 'webarena.png'}")


@bench.command("osworld")
def bench_osworld(out: Path = typer.Option(Path("bench-out/osworld"), help="output directory"),
                  tasks: str = typer.Option("edit-type-unsaved,calc-sum-total", help="task ids"),
                  forks: int = typer.Option(3, help="clones per task snapshot"),
                  backend: str = typer.Option("auto", help="forkcore memory backend")) -> None:
    """Desktop cold start vs fork, action/screenshot/a11y latency, PSS → OUT/osworld.json + OUT/osworld.png."""
    from benchmarks.osworld_bench import run as osworld_run

    res = osworld_run([t for t in tasks.split(",") if t], forks, backend, str(out))
    typer.echo(json.dumps({k: v for k, v in res.items() if k != "tasks"}, indent=1))
    typer.echo(f"wrote {out / 'osworld.json'} and {out / 'osworld.png'}")


@bench.command("lookup")
def bench_lookup(nodes: str = typer.Option("1000,100000", help="tree sizes"),
                 out: Path = typer.Option(Path("bench-out/lookup"), help="output directory")) -> None:
    """Prefix-tree lookup latency p50/p99 → OUT/lookup.json + OUT/lookup.png."""
    from benchmarks.lookup_bench import Args, main as lookup_main

    rows = lookup_main(Args(nodes=_ints(nodes), out=str(out)))
    for r in rows or []:
        typer.echo(f"{r['nodes']:>8} nodes: p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us")


@kmod_app.command("test")
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


@app.command()
def demo(out: Path = typer.Option(Path("bench-out/demo"), help="where JSON and PNGs go"),
         tasks: int = typer.Option(2, help="tasks"), group: int = typer.Option(4, help="GRPO group size"),
         iterations: int = typer.Option(2, help="iterations")) -> None:
    """What a newcomer should see first: a small replayed GRPO epoch on BunshinWebArena-v0, Base vs
    Cache+Spec, then live-forking one workspace with each memory backend."""
    from benchmarks.epoch_bench import Args, run

    typer.echo("== GRPO epoch: base (no reuse) vs cache_spec (prefix cache + speculation) ==")
    result = run(Args(env="BunshinWebArena-v0", tasks=tasks, group=group, iterations=iterations, concurrency=4,
                      think_median_s=1.5, configs=("base", "cache_spec"), out=str(out / "epoch")))
    _print_epoch(result)
    typer.echo("\n== fork latency and memory per backend ==")
    bench_fork(clones="1,4", out=out / "fork", backends="private,ksm,memfile", hold_mb=100, browser=True,
               settle_max_s=30.0)


def main() -> None:
    import signal
    import sys

    # SIGTERM exits through atexit, so workspaces of an interrupted command are destroyed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    app()


if __name__ == "__main__":
    main()
