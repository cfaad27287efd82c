"""TRL's GRPOTrainer on Bunshin envs: examples/trl_grpo.py for two optimizer steps, in-process and against a
`bunshin serve` process, plus the tool env's own contract (a dataset row, replies, the end of an episode).

The example's tiny model is built here (random weights, a tokenizer trained locally) and warmed up to answer
with tool calls; seeded, so a run is the same each time. What the runs check: the trainer's tool calls act on the
env (the ledger counts them as env steps), the rewards come from the env's evaluator and differ in a group
(one sample of a group answers right), the optimizer changed the parameters, and the instances' server
sessions are gone after close_all.
"""
from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("trl", reason="requires trl (pip install 'bunshin-gym[train]')")

from bunshin_gym.server import ServerProcess  # noqa: E402
from bunshin_gym.trl_envs import ObservationBudget, OSWorldToolEnv, WebArenaToolEnv, ledger  # noqa: E402

pytestmark = [pytest.mark.criu, pytest.mark.browser, pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"


def _example():
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _check_run(result: dict) -> None:
    assert result["optimizer_steps"] == 2
    assert result["parameters_changed"] > 0, "the optimizer steps left every parameter as it was"
    assert result["tool_calls"] > 0, f"no tool call reached the env: {result['groups']}"
    assert len(result["rewards"]) == 2 and all(r is not None for r in result["rewards"])
    # the env's evaluator judged the answers: one group at least had a right and a wrong one
    assert any(0 < r < 1 for r in result["rewards"]) and any(s > 0 for s in result["reward_std"])
    groups = result["groups"]
    assert [g["rollouts"] for g in groups] == [4, 4]
    assert sum(g["first_of_task"] for g in groups) <= 1  # one cold start of the task, not one per rollout
    assert sum(g["hits"] for g in groups) > 0  # a group's rollouts share the prefix cache


def test_grpo_example_trains_two_steps_in_process(tmp_path):
    module = _example()
    result = module.main(module.Args(out=str(tmp_path)))
    _check_run(result)
    assert sum(g["thaws"] + g["restores"] for g in result["groups"]) > 0
    assert (tmp_path / "groups.jsonl").read_text().count("\n") == 2  # the trainer's log got each group


def test_grpo_example_trains_two_steps_against_bunshin_serve(tmp_path):
    with ServerProcess("webarena", "--no-auth", "--env-arg", "diagnostics=true", "--env-arg", "max_steps=4",
                       "--max-sessions", "6") as server:
        module = _example()
        result = module.main(module.Args(url=server.url, out=str(tmp_path)))
        _check_run(result)
        assert httpx.get(f"{server.url}/sessions").json()["active"] == 0  # close_all ended every session


def test_tool_env_contract_row_replies_and_end(tmp_path):
    """A dataset row with extra columns resets; an action error is a reply; after the end no action runs."""
    tools = [n for n, _ in inspect.getmembers(WebArenaToolEnv, predicate=inspect.isfunction)
             if not n.startswith("_") and n not in ("reset", "get_reward")]
    assert set(tools) == {"click", "type_text", "hover", "press", "scroll", "new_tab", "tab_focus", "close_tab",
                          "goto", "go_back", "stop"}
    ledger().clear()
    with WebArenaToolEnv(env_kwargs={"max_steps": 3}, budget=ObservationBudget(max_chars=500)) as env:
        with pytest.raises(ValueError, match="neither `task_id` nor `task_config`"):
            env.reset(prompt=[{"role": "user", "content": "hi"}])
        text = env.reset(prompt=[{"role": "user", "content": "hi"}], task_id="0", difficulty="easy")
        assert text.startswith("\n\n") and "OBJECTIVE:" in text and len(text) <= 500
        reply = env.click(999999)
        assert "PREVIOUS ACTION ERROR: none" not in reply and len(reply) <= 500  # the env's error, as text
        assert "episode has ended" in env.stop("Hannah Wilson, Caleb Robinson")
        assert "already ended" in env.scroll("down")
        assert env.get_reward() == 1.0
        g = ledger().groups()[-1]
        assert (g.rollouts, g.tool_calls, g.steps) == (1, 2, 2)


@pytest.mark.desktop
def test_osworld_tool_env_oracle_scores_1_unfinished_rollout_is_judged_and_scores_0():
    """OSWorld through TRL's tool contract: the oracle's pyautogui code through `run_pyautogui`, then `done`,
    scores 1; a rollout that never acts is ended and judged at get_reward: 0. The ledger counts the first
    rollout's tool calls, and the second start of the task as no first start."""
    from envs.osworld.tasks import load_oracle

    tools = [n for n, _ in inspect.getmembers(OSWorldToolEnv, predicate=inspect.isfunction)
             if not n.startswith("_") and n not in ("reset", "get_reward")]
    assert set(tools) == {"run_pyautogui", "wait", "done", "fail"}
    ledger().clear()
    with OSWorldToolEnv(budget=ObservationBudget(max_chars=2000, screenshot="none")) as env:
        text = env.reset(prompt=[{"role": "user", "content": "hi"}], task_id="os-sort-names")
        assert "names" in text.lower() and len(text) <= 2000 and isinstance(text, str)
        *code, last = load_oracle("os-sort-names")
        assert last == "DONE"
        for c in code:
            reply = env.run_pyautogui(c)
            assert "episode has ended" not in reply
        assert "the task was submitted" in env.done()
        assert env.get_reward() == 1.0
        env.reset(task_id="os-sort-names")
        assert env.get_reward() == 0.0
    first, second = ledger().groups()[-2:]
    assert (first.rollouts, first.first_of_task, first.tool_calls) == (1, 1, len(code) + 1)
    assert (second.rollouts, second.first_of_task, second.tool_calls) == (1, 0, 0)
