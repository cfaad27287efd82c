"""The benchmark commands of the `bunshin` CLI: `bunshin bench fork|epoch|webarena|osworld|reset|lookup|soak`,
`bunshin bench figure NAME|figures` (the papers' figures, benchmarks/figures) and `bunshin demo`.

The core CLI (bunshin_gym.cli) finds them through the `bunshin.commands` entry points in pyproject.toml
(`app` as the `bench` group, `demo` as a top-level command), so bunshin_gym never imports benchmarks.
Each command imports its benchmark only when it runs, to keep `bunshin --help` fast.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from bunshin_gym.cli_options import parse_ints, resolve_env

app = typer.Typer(no_args_is_help=True, help="Benchmarks (JSON + PNG, baseline measured in the same run).")


@app.command("fork")
def bench_fork(
    clones: str = typer.Option("1,2,4,8,16", help="clone counts, comma-separated"),
    out: Path = typer.Option(Path("bench-out/fork"), help="output directory"),
    backends: str = typer.Option("private,ksm,memfile", help="memory backends to compare"),
    hold_mb: int = typer.Option(200, help="MiB of anonymous memory held in the workspace"),
    browser: bool = typer.Option(True, help="run headless Chromium in the workspace"),
    settle_max_s: float = typer.Option(60.0, help="longest wait for memory to settle (KSM)"),
    harden: bool = typer.Option(True, help="hardened workspaces (--no-harden: what the hardening costs)"),
) -> None:
    """Fork latency and memory per backend and clone count → OUT/fork.json + OUT/fork.png."""
    from benchmarks.fork_bench import Args

    _run_fork(Args(out=str(out), clones=parse_ints(clones), backends=tuple(b for b in backends.split(",") if b),
                   hold_mb=hold_mb, browser=browser, settle_max_s=settle_max_s, harden=harden))


def _run_fork(args) -> None:
    """Run the fork benchmark with `args` (benchmarks.fork_bench.Args) and print its table."""
    from benchmarks.fork_bench import run

    rows = run(args)
    out = Path(args.out)
    typer.echo(f"{'backend':<9} {'clones':>6} {'snapshot_s':>10} {'frozen_s':>8} {'prepare_s':>9} {'fork_p50_s':>10} "
               f"{'critical_s':>10} {'memory_mb':>10} {'pss_mb':>8}")
    for r in rows:
        if r["standby"]:
            typer.echo(f"{r['backend']:<9} {'1 (standby thaw)':>47} {r['critical_path_s']:>10.3f}")
            continue
        frozen = "-" if r.get("source_frozen_s") is None else f"{r['source_frozen_s']:.3f}"
        typer.echo(f"{r['backend']:<9} {r['clones']:>6} {r['snapshot_s']:>10.3f} {frozen:>8} {r['prepare_s']:>9.3f} "
                   f"{r['fork_p50_s']:>10.3f} {r['critical_path_s']:>10.3f} {r['memory_mb']:>10.1f} "
                   f"{r['pss_mb']:>8.1f}")
    typer.echo(f"wrote {out / 'fork.json'} and {out / 'fork.png'}")


@app.command("epoch")
def bench_epoch(env: str = typer.Option("webarena", help="webarena, osworld or an env id"),
                tasks: int = typer.Option(4, help="tasks T"), group: int = typer.Option(4, help="group size G"),
                iterations: int = typer.Option(3, help="iterations I"),
                concurrency: int = typer.Option(8, help="most workspaces alive at once"),
                think_median_s: float = typer.Option(2.0, help="think-time model median (s)"),
                perturb_p: float = typer.Option(0.3, help="probability of a detour instead of the oracle's action"),
                detour_skew: float = typer.Option(1.0, help="Zipf exponent of detours (0: uniform)"),
                speculate_min_idle_cpus: float = typer.Option(0.5, help="a chain starts only while this many CPUs "
                                                              "were idle over the last second (0: always)"),
                drift_step: float = typer.Option(0.0, help="policy drift: detour probability drops this much "
                                                 "per iteration (0: none)"),
                novel_from: int = typer.Option(0, help="policy drift: from this iteration on, a step is a new call "
                                               "with probability 0.25 (0: never)"),
                backend: str = typer.Option("auto", help="memory backend of every workspace (private: CRIU's)"),
                configs: str = typer.Option("base,cache,spec,cache_spec", help="configurations"),
                out: Path = typer.Option(Path("bench-out/epoch"), help="output directory")) -> None:
    """Replayed GRPO epoch: base vs cache vs spec vs cache_spec → OUT/epoch.json + PNGs."""
    from benchmarks.epoch_bench import Args, run

    result = run(Args(env=resolve_env(env), tasks=tasks, group=group, iterations=iterations, concurrency=concurrency,
                      think_median_s=think_median_s, perturb_p=perturb_p, detour_skew=detour_skew,
                      speculate_min_idle_cpus=speculate_min_idle_cpus, drift_step=drift_step,
                      novel_from=novel_from, backend=backend, configs=tuple(c for c in configs.split(",") if c),
                      out=str(out)))
    _print_epoch(result)
    typer.echo(f"wrote {out / 'epoch.json'} and {out}/epoch_*.png")


@app.command("figure")
def bench_figure(name: Optional[str] = typer.Argument(None, help="figure to run (see --list)"),
                 quick: bool = typer.Option(False, help="CI scale: a few minutes"),
                 list_: bool = typer.Option(False, "--list", help="list the figures and exit"),
                 out: Path = typer.Option(Path("bench-out/figures"), help="output directory")) -> None:
    """One of the papers' figures beside the paper's numbers → OUT/NAME.json + OUT/NAME.png."""
    from benchmarks.figures import FIGURES, run_figure

    if list_ or name is None:
        for fig, what in FIGURES.items():
            typer.echo(f"{fig:<10} {what}")
        return
    try:
        result = run_figure(name, quick, out)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    from benchmarks.figures.common import scalars

    for side in ("paper", "ours"):
        typer.echo(f"{side}: " + ", ".join(f"{k}={v}" for k, v in scalars(result[side]).items()))
    typer.echo(f"wrote {out / (name + '.json')} and {out / (name + '.png')}")


@app.command("figures")
def bench_figures(quick: bool = typer.Option(False, help="CI scale: a few minutes each"),
                  out: Path = typer.Option(Path("bench-out/figures"), help="output directory")) -> None:
    """Every figure, then OUT/index.html showing each PNG with its paper-vs-ours table."""
    from benchmarks.figures import FIGURES, run_figure
    from benchmarks.figures.common import write_index

    failed = {}
    for name in FIGURES:
        typer.echo(f"== {name}")
        try:
            for row in run_figure(name, quick, out)["ours"]["vs_paper"]:
                typer.echo(f"  {row['what']}: paper {row['paper']}, ours {row['ours']} (ratio {row['ratio']})")
        except Exception as e:  # noqa: BLE001 - one figure's failure must not cost the others; reported below
            failed[name] = f"{type(e).__name__}: {e}"
            typer.echo(f"{name} failed: {failed[name]}", err=True)
    typer.echo(f"wrote {write_index(out)}")
    if failed:
        typer.echo(f"{len(failed)} figure(s) failed: {', '.join(failed)}", err=True)
        raise typer.Exit(1)


@app.command("soak")
def bench_soak(envs: int = typer.Option(8, help="envs running at once (both kinds, alternating)"),
               minutes: float = typer.Option(30.0, help="how long"),
               fault_every_s: float = typer.Option(50.0, help="one injected fault every this many seconds"),
               max_steps: int = typer.Option(6, help="steps per episode"),
               out: Path = typer.Option(Path("bench-out/soak"), help="output directory"),
               last_fault: Optional[str] = typer.Option(
                   None, help="inject this fault (kill_process, kill_criu_dump, kill_criu_restore, corrupt_snapshot, "
                              "kill_host, state_dir_full) once more in the last 10 s, just before the leak count")) -> None:
    """Long run of both envs with faults injected, then a count of what leaked → OUT/soak.json + OUT/soak.png.

    --last-fault KIND ends the regular faults 10 s early and injects KIND in those last 10 s, so that the census
    follows it closely. Host memory is reported at the start, at the end (envs closed, runtime released, gc run)
    and after release (this process's free heap also handed back): a leak stays in the last, a full cache not."""
    from benchmarks.soak_bench import Args, run

    try:
        a = Args(envs=envs, minutes=minutes, fault_every_s=fault_every_s, max_steps=max_steps, out=str(out),
                 last_fault=last_fault)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--last-fault") from None
    r = run(a)
    typer.echo(f"{r['episodes']} episodes, {r['steps']} steps, {r['forks']} forks; faults {r['faults_injected']}")
    typer.echo(f"errors by type: {r['errors_by_type']}")
    typer.echo(f"leaked: {r['leaked']} {r['leaked_processes'] or ''}")
    typer.echo(f"host memory {r['host_mb_start']} -> {r['host_mb_end']} MB at the end, {r['host_mb_after_release']} MB "
               f"once this process released its results ({r['results_mb_end']} MB of them); this process "
               f"{r['self_rss_mb_per_min_second_half']} MB/min over the second half")
    typer.echo(f"wrote {out / 'soak.json'} and {out / 'soak.png'}")


def _print_epoch(result: dict) -> None:
    cfgs = result["configs"]
    typer.echo(f"{'config':<11} {'wall_s':>8} {'peak_MB':>8} {'acct_MB':>8} {'hit rate per iteration':<28} "
               f"{'spec acc':>8} {'CPU busy':>8}")
    for name, c in cfgs.items():
        acc = "-" if c["spec_accuracy"] is None else f"{c['spec_accuracy']:.2f}"
        typer.echo(f"{name:<11} {c['wall_s']:>8.1f} {c['peak_memory_mb']:>8.0f} {c['peak_memory_accounted_mb']:>8.0f} "
                   f"{str(c['hit_rate_per_iteration']):<28} {acc:>8} {c['cpu_busy_fraction']:>8.0%}")
    for name, c in cfgs.items():
        paths = "; ".join(f"{i['slowest']['steps']} steps, {i['slowest']['hits']} hits, think {i['slowest']['think_s']:.0f} s"
                          f" + steps {i['slowest']['exec_s']:.0f} s (longest {i['slowest']['longest_step']['exec_s']:.0f} s)"
                          for i in c["iterations"])
        typer.echo(f"{name:<11} slowest rollout per iteration: {paths}")
    floor = next(iter(cfgs.values()))["think_floor_s"]
    share = (f"; {floor / cfgs['base']['wall_s']:.3f}x base's wall" if "base" in cfgs else "")
    typer.echo(f"think floor (every step, reset and close free; rollouts scheduled on the slots): {floor:.1f} s{share}")
    if "base" in cfgs and cfgs["base"]["wall_s"] > floor:
        above = cfgs["base"]["wall_s"] - floor
        for name, c in cfgs.items():
            if name != "base":
                typer.echo(f"  {name} saved {cfgs['base']['wall_s'] - c['wall_s']:.1f} s of base's {above:.1f} s above "
                           "the floor")
    for name, by_status in result.get("step_time_vs_first", {}).items():
        typer.echo(f"  {name}'s steps vs the same steps in {next(iter(cfgs))}: " + "; ".join(
            f"{status} {d['steps']} (median {d['median_s']:+.3f} s, sum {d['sum_s']:+.1f} s)"
            for status, d in by_status.items()))
    for name, bound in result.get("free_cache_vs_first", {}).items():
        typer.echo(f"  a free cache serving {name}'s hits: {bound['wall_s']:.1f} s ({bound['ratio']:.3f}x "
                   f"{next(iter(cfgs))} under the same model, {bound['first_model_s']:.1f} s)")
    rewards = next(iter(cfgs.values()))["rewards"]
    typer.echo(f"rewards identical across configurations: {result['rewards_identical']} "
               f"(mean {sum(rewards) / max(1, len(rewards)):.2f})")
    for d in result["reward_differences"]:
        where = ("the same actions" if d["first_different_action"] is None
                 else f"actions first differ at step {d['first_different_action'] + 1}")
        typer.echo(f"  {d['config']}: iteration {d['iteration']} {d['task']} sample {d['sample']} rewards "
                   f"{d['rewards']}, {where} (steps served: epoch.json reward_differences)")


@app.command("webarena")
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


@app.command("osworld")
def bench_osworld(out: Path = typer.Option(Path("bench-out/osworld"), help="output directory"),
                  tasks: str = typer.Option("edit-type-unsaved,calc-sum-total", help="task ids"),
                  forks: int = typer.Option(3, help="clones per task snapshot"),
                  backend: str = typer.Option("auto", help="forkcore memory backend")) -> None:
    """Desktop cold start vs fork, action/screenshot/a11y latency, PSS → OUT/osworld.json + OUT/osworld.png."""
    from benchmarks.osworld_bench import run as osworld_run

    res = osworld_run([t for t in tasks.split(",") if t], forks, backend, str(out))
    typer.echo(json.dumps({k: v for k, v in res.items() if k != "tasks"}, indent=1))
    typer.echo(f"wrote {out / 'osworld.json'} and {out / 'osworld.png'}")


@app.command("reset")
def bench_reset(env: str = typer.Option("webarena", help="webarena, osworld or an env id"),
                n: int = typer.Option(20, help="resets timed per configuration"),
                task: Optional[str] = typer.Option(None, help="task id (default: webarena 40, osworld edit-type-unsaved)"),
                think_median_s: float = typer.Option(1.5, help="think-time model median before each reset (s)"),
                browsergym: str = typer.Option("auto", help="BrowserGym baseline (webarena): auto | on | off"),
                out: Path = typer.Option(Path("bench-out/reset"), help="output directory")) -> None:
    """Reset until the first step ran: standby clone vs CRIU restore vs BrowserGym → OUT/reset.json + .png."""
    from benchmarks.reset_bench import Args, run

    if browsergym not in ("auto", "on", "off"):
        raise typer.BadParameter(f"--browsergym {browsergym!r}: use auto, on or off")
    r = run(Args(env=resolve_env(env), n=n, task=task, think_median_s=think_median_s, browsergym=browsergym,
                 out=str(out)))
    for name, c in r["configs"].items():
        typer.echo(f"{name:<11} p50 {c['p50_s'] * 1000:8.1f} ms  p90 {c['p90_s'] * 1000:8.1f} ms  {c['sources']}")
    if r["standby_vs_browsergym"] is not None:
        typer.echo(f"standby / browsergym = {r['standby_vs_browsergym']:.3f}")
    typer.echo(f"wrote {out / 'reset.json'} and {out / 'reset.png'}")


@app.command("trl")
def bench_trl(groups: str = typer.Option("4,8", help="group sizes G"),
              steps: int = typer.Option(2, help="GRPO steps per group size"),
              actions: int = typer.Option(6, help="actions per rollout"),
              browsergym: str = typer.Option("auto", help="baseline: auto, on, off"),
              backend: str = typer.Option("auto", help="Bunshin's memory backend: auto, ksm, memfile, private, kmod"),
              out: Path = typer.Option(Path("bench-out/trl"), help="output directory")) -> None:
    """Env seconds per GRPO step and peak memory, Bunshin vs BrowserGym (TRL's environment_factory pattern)
    -> OUT/trl.json, OUT/trl.png."""
    from benchmarks.trl_bench import Args, run

    result = run(Args(groups=tuple(int(g) for g in groups.split(",") if g), steps=steps, actions=actions,
                      browsergym=browsergym, backend=backend, out=str(out)))
    for g, row in result["groups"].items():
        typer.echo(f"G={g}: env s/step bunshin {row['bunshin']['env_s_per_step_mean']} browsergym "
                   f"{(row['browsergym'] or {}).get('env_s_per_step_mean')} (ratio {row.get('env_time_ratio')}); "
                   f"peak PSS MiB {row['bunshin']['pss_mb_peak']} vs {(row['browsergym'] or {}).get('pss_mb_peak')} "
                   f"(ratio {row.get('memory_ratio')})")


@app.command("serve")
def bench_serve(env: str = typer.Option("webarena", help="webarena, osworld or an env id"),
                task: Optional[str] = typer.Option(None, help="task id (default: webarena 5, osworld calc-rename-header)"),
                episodes: int = typer.Option(6, help="oracle episodes per side (the first executes, the rest hit)"),
                out: Path = typer.Option(Path("bench-out/serve"), help="output directory")) -> None:
    """Step, reset and fork latency over `bunshin serve` vs in-process → OUT/serve.json + OUT/serve.png."""
    from benchmarks.serve_bench import Args, run

    if episodes < 2:
        raise typer.BadParameter("--episodes: at least 2 (one to fill the cache, one to hit it)")
    r = run(Args(env=resolve_env(env), task=task, episodes=episodes, out=str(out)))
    for name, c in r["configs"].items():
        typer.echo(f"{name:<7} reset {c['reset_p50_s'] * 1000:8.1f} ms  miss {c['miss_p50_s'] * 1000:8.1f} ms  "
                   f"hit {c['hit_p50_s'] * 1000:8.1f} ms  fork(2) {c['fork2_s'] * 1000:8.1f} ms  rewards {c['rewards']}")
    typer.echo(f"server / local: {r['server_vs_local']}")
    typer.echo(f"wrote {out / 'serve.json'} and {out / 'serve.png'}")


@app.command("scale")
def bench_scale(env: str = typer.Option("webarena", help="webarena, osworld or an env id"),
                nodes: str = typer.Option("1,2,3", help="node counts (each a contained local Ray cluster)"),
                address: Optional[str] = typer.Option(None, help="a running Ray cluster instead (all its nodes)"),
                group: int = typer.Option(4, help="samples per GRPO group"),
                tasks: Optional[str] = typer.Option(None, help="comma-separated task ids (default: six WebArena tasks)"),
                out: Path = typer.Option(Path("bench-out/scale"), help="output directory")) -> None:
    """A GRPO epoch on 1..N Ray nodes + a model of 256 rollouts on N machines → OUT/scale.json + OUT/scale.png."""
    from benchmarks.scale_bench import Args, run

    a = Args(env=resolve_env(env), nodes=parse_ints(nodes), address=address, group=group,
             tasks=tuple(t for t in (tasks or "").split(",") if t), out=str(out))
    r = run(a)
    for row in r["rows"]:
        typer.echo(f"{row['nodes']} node(s): {row['steps_per_s']:.2f} steps/s, peak PSS per node "
                   f"{row['peak_mb_per_node']} MB, local forks {row['local_fork_fraction']:.0%}, "
                   f"rewards identical: {row['rewards_identical_to_first']}")
    for m in r["model"]:
        typer.echo(f"model {m['nodes']:>3} machines: {m['rollouts_per_node']} rollouts each, "
                   f"{m['memory_mb_per_node']} MB, {m['steps_per_s'] if m['fits'] else 'does not fit'} steps/s")
    typer.echo(f"wrote {out / 'scale.json'} and {out / 'scale.png'}")


@app.command("docker")
def bench_docker(repeats: int = typer.Option(5, help="starts of each kind (medians)"),
                 count: int = typer.Option(8, help="containers and forks kept running for the memory comparison"),
                 out: Path = typer.Option(Path("bench-out/docker"), help="output directory")) -> None:
    """The stand-in image as containers vs workspaces: docker run vs workspace start vs fork, memory of COUNT
    containers vs COUNT forks (starts its own dockerd; builds the image if absent) → OUT/docker.json + .png."""
    from benchmarks.docker_bench import Args, run

    r = run(Args(repeats=repeats, count=count, out=str(out)))
    for name, s in r["start_s"].items():
        typer.echo(f"{name:<16} {s * 1000:8.0f} ms (median)")
    for kind, m in r["memory_mb"].items():
        typer.echo(f"{count} {kind:<10} PSS {m['pss']:8.0f} MB, host {m['host']:8.0f} MB")
    typer.echo(f"ratios: {r['ratios']}")
    typer.echo(f"wrote {out / 'docker.json'} and {out / 'docker.png'}")


@app.command("lookup")
def bench_lookup(nodes: str = typer.Option("1000,100000", help="tree sizes"),
                 out: Path = typer.Option(Path("bench-out/lookup"), help="output directory")) -> None:
    """Prefix-tree lookup latency p50/p99 → OUT/lookup.json + OUT/lookup.png."""
    from benchmarks.lookup_bench import Args, main as lookup_main

    rows = lookup_main(Args(nodes=parse_ints(nodes), out=str(out)))
    for r in rows or []:
        typer.echo(f"{r['nodes']:>8} nodes: p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us")


def demo(out: Path = typer.Option(Path("bench-out/demo"), help="where JSON and PNGs go"),
         tasks: int = typer.Option(2, help="tasks"), group: int = typer.Option(4, help="GRPO group size"),
         iterations: int = typer.Option(2, help="iterations"),
         clones: str = typer.Option("1,4", help="fork: clone counts, comma-separated"),
         backends: str = typer.Option("private,ksm,memfile", help="fork: memory backends to compare"),
         quick: bool = typer.Option(False, help="CI scale (~3 min): 1 task x 2 samples x 2 iterations, one clone "
                                    "with the private and ksm backends")) -> None:
    """What a newcomer should see first: a small replayed GRPO epoch on BunshinWebArena-v0, Base vs
    Cache+Spec, then live-forking one workspace with each memory backend."""
    from benchmarks.epoch_bench import Args as EpochArgs, run as run_epoch
    from benchmarks.fork_bench import Args as ForkArgs

    epoch_args = EpochArgs(env="BunshinWebArena-v0", tasks=tasks, group=group, iterations=iterations, concurrency=4,
                           think_median_s=1.5, configs=("base", "cache_spec"), out=str(out / "epoch"))
    fork_args = ForkArgs(out=str(out / "fork"), clones=parse_ints(clones),
                         backends=tuple(b for b in backends.split(",") if b), hold_mb=100, browser=True,
                         settle_max_s=30.0)
    if quick:
        epoch_args.tasks, epoch_args.group, epoch_args.iterations, epoch_args.settle_max_s = 1, 2, 2, 10.0
        fork_args.clones, fork_args.backends = (1,), ("private", "ksm")
        fork_args.settle_max_s, fork_args.standby_takes = 10.0, 2
    typer.echo("== GRPO epoch: base (no reuse) vs cache_spec (prefix cache + speculation) ==")
    _print_epoch(run_epoch(epoch_args))
    typer.echo("\n== fork latency and memory per backend ==")
    _run_fork(fork_args)
