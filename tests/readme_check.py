"""Run a README example up to its first call that needs what this machine cannot have, and check that call.

`python readme_check.py STOP REASON < example.py`: executes the example's statements in order until the first
statement that calls STOP (e.g. `Cluster` or `.learn`). That call is not made: its callee is evaluated (so
`PPO(...).learn` builds the real PPO model) and its arguments are bound to the callee's signature (for
`gym.make`, to the registered env class's and its adapter's), and every later call on an imported name or on the value the
stopped call would have returned (when the callee is a class) is bound the same way. Exits 1 on any error,
printing it; on success prints "reached STOP(...): not run (REASON)".
"""
from __future__ import annotations

import ast
import functools
import inspect
import sys

_UNSET = object()


def _callee_of(call: ast.Call, stop: str) -> bool:
    return ast.unparse(call.func).endswith(stop.lstrip("."))


def bind(func, call: ast.Call, skip_self: bool = False) -> None:
    """Bind the call's arguments (their values not evaluated) to func's signature: wrong names or arity raise."""
    args = [_UNSET] * len(call.args)
    kwargs = {k.arg: _UNSET for k in call.keywords if k.arg is not None}
    if getattr(func, "__module__", "").startswith("gymnasium") and getattr(func, "__name__", "") == "make":
        import gymnasium as gym

        env_id = ast.literal_eval(call.args[0]) if call.args else ast.literal_eval(
            next(k.value for k in call.keywords if k.arg == "id"))
        from gymnasium.envs.registration import load_env_creator

        entry = gym.spec(env_id).entry_point  # Bunshin registers partial(make_forkable, "module:Class")
        entry = entry.args[0] if isinstance(entry, functools.partial) else entry
        entry = load_env_creator(entry) if isinstance(entry, str) else entry
        func, args = entry, []
        kwargs = {k: v for k, v in kwargs.items() if k not in ("id", "max_episode_steps", "disable_env_checker")}
        adapter_class = getattr(entry, "adapter_class", None)
        if adapter_class is not None:  # a BunshinEnv hands the kwargs it does not name to its adapter
            own = inspect.signature(entry).parameters
            inspect.signature(adapter_class).bind(**{k: v for k, v in kwargs.items() if k not in own})
    sig = inspect.signature(func)
    if skip_self:
        args = [_UNSET] + args
    sig.bind(*args, **kwargs)


def main() -> int:
    stop, reason = sys.argv[1], sys.argv[2]
    source = sys.stdin.read()
    tree = ast.parse(source)
    namespace: dict = {"__name__": "__main__"}
    for i, stmt in enumerate(tree.body):
        calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call) and _callee_of(n, stop)]
        if not calls:
            exec(compile(ast.Module([stmt], []), "<readme example>", "exec"), namespace)
            continue
        call = calls[0]
        func = eval(compile(ast.Expression(call.func), "<readme example>", "eval"), namespace)
        bind(func, call)
        returned = {}
        if inspect.isclass(func) and isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            returned[stmt.targets[0].id] = func
        for later in tree.body[i + 1:]:
            for node in ast.walk(later):
                if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                    continue
                root = node.func.value
                if isinstance(root, ast.Name) and root.id in returned:
                    method = getattr(returned[root.id], node.func.attr)  # AttributeError: no such method
                    bind(method, node, skip_self=True)
                elif isinstance(root, ast.Name) and root.id in namespace:
                    bind(eval(compile(ast.Expression(node.func), "<readme example>", "eval"), namespace), node)
        print(f"reached {ast.unparse(call.func)}(...): not run ({reason})")
        return 0
    print(f"{stop} is not called in the example", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
