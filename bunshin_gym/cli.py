"""The `bunshin` command line: doctor, task listing and running, gc, plus the commands of installed plugins.

Owns the core commands and the plugin loader. Benchmarks (`bunshin bench ...`, `bunshin demo`) and the kernel
module (`bunshin kmod ...`) live in their own packages and register through the `bunshin.commands` entry points
(pyproject.toml), so bunshin_gym imports neither of them.
"""
from __future__ import annotations

import importlib.metadata
import json
import sys
from typing import Iterable, Optional

import typer

from .cli_options import resolve_env

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Bunshin Gym: forkable workspaces for agentic RL (web and desktop).")
tasks_app = typer.Typer(no_args_is_help=True, help="Tasks of the envs.")

#: entry-point group of the CLI plugins: each names a typer.Typer (a sub-command group) or a function (a command)
PLUGIN_GROUP = "bunshin.commands"


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
           deep: bool = typer.Option(False, "--deep", help="also run every env's restore checks: start its "
                                     "applications, snapshot, fork, and use each one in the clone (~1-2 min an env)"),
           env: Optional[list[str]] = typer.Option(None, help="with --deep: only this env (repeatable)"),
           allow_pkeys: bool = typer.Option(False, "--allow-pkeys", help="with --deep: let the workspaces allocate "
                                            "memory protection keys, as before forkcore hid them; on a PKU CPU this "
                                            "shows whether the CRIU in use restores key state")) -> None:
    """List what this machine can do (root, namespaces, overlayfs, CRIU, KSM, backends, browser, X).

    What the main job needs comes first (MISSING when absent); then what only the tests or an optional backend
    use, marked "absent" rather than MISSING. Exits 1 only when a --deep restore check fails (a missing
    capability is not a failure)."""
    from forkcore.capabilities import MAIN, OPTIONAL, TESTS

    from .doctor import check_all

    caps = check_all()
    if not as_json:
        width = max(len(c.name) for c in caps)
        for group, heading in ((MAIN, None), (TESTS, "only the tests and their baselines use these "
                                                     "(bash scripts/test.sh installs them):"),
                               (OPTIONAL, "optional (used when present):")):
            members = [c for c in caps if c.needed_for == group]
            if heading and members:
                typer.echo(heading)
            for c in members:
                mark = (typer.style("OK     ", fg="green") if c.ok else typer.style("MISSING", fg="red")
                        if group == MAIN else typer.style("absent ", fg="yellow"))
                line = f"{mark} {c.name:<{width}}  {c.detail}"
                if not c.ok and c.fix and c.fix not in c.detail:
                    line += f"\n        {'':<{width}}  fix: {c.fix}"
                typer.echo(line)
        missing = [c.name for c in caps if c.needed_for == MAIN and not c.ok]
        typer.echo(f"main job: {'missing ' + ', '.join(missing) if missing else 'everything it needs is here'}")
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
def serve(env: str = typer.Option("webarena", help="webarena, osworld or an env id"),
          host: str = typer.Option("127.0.0.1", help="address to listen on"),
          port: int = typer.Option(8000, help="TCP port (0: any free port, printed at start)"),
          max_sessions: int = typer.Option(8, help="sessions (connections and forked sessions) at once"),
          idle_timeout: float = typer.Option(600.0, help="seconds a session may stay idle before it is ended "
                                                         "and its workspace destroyed (0: never)"),
          no_auth: bool = typer.Option(False, "--no-auth", help="accept requests without a token (loopback only)"),
          token_file: Optional[str] = typer.Option(None, help="file holding the bearer token (default: "
                                                   "$BUNSHIN_SERVE_TOKEN, else a new token printed at start)"),
          env_arg: Optional[list[str]] = typer.Option(None, "--env-arg", help="an env setting KEY=VALUE (the value "
                                                      "as JSON, else a string), e.g. max_steps=10; repeatable")) -> None:
    """Serve an env over OpenEnv's protocol (HTTP + WebSocket sessions), plus fork: see bunshin_gym/server.py."""
    import os
    import secrets

    from .server import serve as run_server

    kwargs = {}
    for item in env_arg or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--env-arg {item!r}: expected KEY=VALUE, e.g. max_steps=10")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    token = None
    if not no_auth:
        if token_file:
            with open(token_file) as f:
                token = f.read().strip()
        else:
            token = os.environ.get("BUNSHIN_SERVE_TOKEN") or None
        if token is None:
            token = secrets.token_urlsafe(24)
            typer.echo(f"token: {token}  (clients send 'Authorization: Bearer <token>')")
        if not token:
            raise typer.BadParameter("the token is empty")
    try:
        run_server(resolve_env(env), kwargs, host=host, port=port, token=token, max_sessions=max_sessions,
                   idle_timeout_s=idle_timeout or None, announce=lambda line: typer.echo(line))
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down on: a normal end
        pass
    except (ValueError, TypeError, OSError) as e:
        typer.echo(f"bunshin serve: {e}", err=True)
        raise typer.Exit(2) from None


@app.command()
def gc() -> None:
    """Remove state left by workspaces whose processes are gone (after a crash or kill -9)."""
    from forkcore.gc import collect

    for line in collect():
        typer.echo(line)


def _command_names(target: typer.Typer) -> set[str]:
    names = {c.name or typer.main.get_command_name(c.callback.__name__) for c in target.registered_commands}
    return names | {g.name for g in target.registered_groups if g.name}


def load_plugins(target: typer.Typer, entry_points: Optional[Iterable[importlib.metadata.EntryPoint]] = None,
                 reserved: Iterable[str] = ()) -> list[str]:
    """Attach every `bunshin.commands` entry point to `target` and return the names attached.

    A typer.Typer becomes the sub-command group `bunshin NAME ...`, a function the command `bunshin NAME`.
    A plugin that fails to load (import error, wrong object, name already taken) is skipped with a warning
    on stderr naming it, so the other commands keep working. `reserved`: names taken by commands added later.
    """
    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=PLUGIN_GROUP)
    reserved, attached, seen = set(reserved), [], {}
    for ep in sorted(entry_points, key=lambda e: e.name):  # sorted: the help lists them in a stable order
        if seen.get(ep.name) == ep.value:
            continue  # the same distribution found twice on sys.path (e.g. a checkout's egg-info)
        seen.setdefault(ep.name, ep.value)
        try:
            if ep.name in _command_names(target) | reserved:
                raise ValueError(f"the command name {ep.name!r} is already taken")
            obj = ep.load()
            # typer builds click commands only when the app runs: build this one now, so a broken
            # plugin fails here and not in every `bunshin` command
            if isinstance(obj, typer.Typer):
                typer.main.get_group(obj)
                target.add_typer(obj, name=ep.name)
            elif callable(obj):
                probe = typer.Typer()
                probe.command(name=ep.name)(obj)
                typer.main.get_command(probe)
                target.command(name=ep.name)(obj)
            else:
                raise TypeError(f"{ep.value} is a {type(obj).__name__}, not a typer.Typer or a function")
        except Exception as e:  # noqa: BLE001 - any plugin error must leave the core CLI usable
            print(f"bunshin: warning: plugin {ep.name!r} ({ep.value}) not loaded: {type(e).__name__}: {e}",
                  file=sys.stderr)
            continue
        attached.append(ep.name)
    return attached


load_plugins(app, reserved={"tasks"})
# after the plugins: keeps the help's old order (bench, kmod, tasks)
app.add_typer(tasks_app, name="tasks")


def main() -> None:
    import signal

    # SIGTERM exits through atexit, so workspaces of an interrupted command are destroyed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    app()


if __name__ == "__main__":
    main()
