"""ChatPolicy against a real local LLM (llama-cpp-python's server, Gemma 3 270M): a GRPO group on WebArena.

Needs scripts/install_llm.sh (scripts/setup.sh --test runs it, so CI has it): a missing install fails here with the
command to run, it does not skip. Takes a few minutes on 2 CPU cores (prompt processing ~70 tokens/s).
"""
from __future__ import annotations

import os
import time

import gymnasium as gym
import pytest

import bunshin_gym  # noqa: F401 - registers the envs
from bunshin_gym import adapter_for
from bunshin_gym.llm_server import LocalLLMServer
from bunshin_gym.rollout import ChatPolicy, ThinkTimeModel, rollout_group, write_jsonl
from bunshin_gym.speculation.trajectories import read_trajectories

pytestmark = [pytest.mark.criu, pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1800)]
ENV_ID = "BunshinWebArena-v0"
TASK = "16"  # search "backpack" and count the results: the home page has a searchbox and 60+ links
GROUP, MAX_STEPS = 4, 3


@pytest.fixture(scope="module")
def llm():
    server, missing = LocalLLMServer(), None
    try:
        server.check()
    except gym.error.DependencyNotInstalled as e:
        missing = str(e)
    if missing:  # setup installs it (CI too): fail, do not skip
        pytest.fail(f"the local LLM is not installed: {missing}", pytrace=False)
    with server:
        yield server


def test_llm_server_answers_and_stops_its_own_process(llm):
    import httpx

    models = httpx.get(f"{llm.base_url}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [str(llm.model)]
    assert llm.load_s is not None and llm.load_s < 60
    with LocalLLMServer() as other:  # a second one on another port; leaving the block stops exactly it
        assert other.base_url != llm.base_url
        pid = other.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert httpx.get(f"{llm.base_url}/models", timeout=10).status_code == 200


def test_grpo_group_with_a_real_llm_gives_valid_divergent_actions(llm, tmp_path):
    policies: list[ChatPolicy] = []

    def factory(g: int) -> ChatPolicy:
        # The server answers one request at a time: a sample's request may wait for the other three (timeout).
        # The prompt is cut to 4,000 characters (~1,800 tokens) to keep prompt processing to ~25 s a request.
        p = ChatPolicy(base_url=llm.base_url, temperature=1.0, timeout_s=900, max_prompt_chars=4000)
        policies.append(p)
        return p

    t0 = time.monotonic()
    rollouts = rollout_group(ENV_ID, TASK, factory, group=GROUP, think=ThinkTimeModel(median_s=0.0), concurrency=GROUP,
                             env_kwargs={"max_steps": MAX_STEPS})
    wall_s = time.monotonic() - t0
    calls = [c for p in policies for c in p.calls]
    sequences = [r.actions for r in rollouts]
    gen = [c for c in calls if c["completion_tokens"]]
    print(f"\n{GROUP} samples x <= {MAX_STEPS} steps in {wall_s:.0f} s; {len(calls)} requests "
          f"({sum(c['finish_reason'] == 'length' for c in calls)} cut at max_tokens and asked again), "
          f"{sum(c['prompt_tokens'] for c in gen) / max(1, len(gen)):.0f} prompt tokens and "
          f"{sum(c['seconds'] for c in gen) / max(1, len(gen)):.1f} s per request (waiting included)")
    for r in rollouts:
        print(f"  sample {r.sample}: reward {r.reward}  {r.actions}")

    # every sample ran (the model may end one early with `stop [...]`)
    assert [r.sample for r in rollouts] == list(range(GROUP))
    assert all(1 <= len(a) <= MAX_STEPS for a in sequences)
    # constrained decoding: every action the model wrote parses (no grammar-violating or cut-off output)
    adapter = adapter_for(ENV_ID)
    bad = [a for seq in sequences for a in seq if not _parses(adapter, a)]
    assert not bad, f"actions that do not parse: {bad} (requests: {calls})"
    # GRPO needs samples that really differ: temperature 1.0 and a seed per request
    assert len({tuple(s) for s in sequences}) > 1, f"all {GROUP} samples took the same actions: {sequences[0]}"

    path = tmp_path / "trajectories.jsonl"
    write_jsonl(path, rollouts, iteration=0)
    back = read_trajectories(path)
    assert [t.rollout_id for t in back] == [f"{TASK}-{g}" for g in range(GROUP)]
    assert [[s.signature for s in t.steps] for t in back] == [[s.signature for s in r.steps] for r in rollouts]
    assert all(t.iteration == 0 and t.total_s > 0 for t in back)


def _parses(adapter, action: str) -> bool:
    try:
        adapter.canonical_action(action)
        return True
    except Exception:  # noqa: BLE001 - ActionError: not valid action syntax
        return False
