"""GRPO with TRL on a Bunshin env: `GRPOTrainer(environment_factory=WebArenaToolEnv)`, on the CPU.

What it does: builds a tiny Qwen2-architecture model locally (random weights, 2 layers, hidden 64; a byte-level BPE
tokenizer trained here with `tokenizers` on text of this task, with TRL's Qwen2.5 chat template, whose
`<tool_call>` format TRL's parser recognises), teaches it in a few dozen SFT steps to answer with a tool call
(half the examples the right answer, half a wrong one: a random model almost never writes a valid tool call), then runs GRPO: each rollout's tool calls act on a real WebArena workspace, the reward
is the env's evaluator (`get_reward`), and a group's G rollouts start from the task's one snapshot.

What a run proves: the trainer calls the env's tools, the rewards come from the env and differ within a
group, and the optimizer steps change the parameters. It proves nothing about learning the task (the model is
tiny and the warm-up gives the answers away).

    python examples/trl_grpo.py                        # in-process env, 2 optimizer steps
    python examples/trl_grpo.py --url http://127.0.0.1:8000   # against `bunshin serve --env webarena --no-auth`

A real model instead of the tiny one: `--model Qwen/Qwen3-0.6B` (any chat model whose template TRL parses tool
calls of: Qwen2.5/3, Llama 3.1/3.2, ...; downloaded by transformers from its hub on a machine that reaches it),
`--sft-steps 0`, more `--steps`, `--num-generations 8`, and a dataset of many task ids (`--tasks 0,1,2,...`).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import json
import os
import tempfile
import time

TOOLS_PROMPT = "Answer the question about the shop by calling a tool."


@dataclasses.dataclass
class Args:
    url: str | None = None          # a `bunshin serve` server; None: the env in this process
    token: str | None = None        # the server's token
    model: str | None = None        # a model name or path; None: the tiny model built here
    tasks: str = "0"                # task ids of the dataset, comma-separated
    steps: int = 2                  # GRPO optimizer steps
    num_generations: int = 4        # G: rollouts per prompt
    max_completion_length: int = 96 # tokens of one rollout, tool replies included
    max_chars: int = 300            # a tool reply's text (TRL drops replies longer than the tokens left)
    sft_steps: int = 150            # warm-up steps teaching the tiny model to call tools (0: none)
    seed: int = 0                   # sampling and initialisation
    out: str | None = None          # the trainer's output dir (default: a temp dir)


def build_tiny_model(texts: list[str], out_dir: str):
    """A tokenizer trained on `texts` and a random 2-layer Qwen2 model, saved to `out_dir` (nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from trl.chat_template_utils import qwen2_5_chat_template

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    markup = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=special[1:])
    tokenizer.add_tokens(markup)  # plain added tokens (as in Qwen): kept when completions are decoded
    tokenizer.chat_template = qwen2_5_chat_template
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    model = Qwen2ForCausalLM(config)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    return out_dir


def warm_up(model, tokenizer, prompt_ids: list[int], completions: list[str], steps: int, seed: int) -> None:
    """A few steps of SFT on (prompt, completion) pairs: the loss on completion tokens only."""
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        completion = completions[step % len(completions)]
        ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
        x = torch.tensor([prompt_ids + ids])
        labels = torch.tensor([[-100] * len(prompt_ids) + ids])
        loss = model(input_ids=x, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    if os.environ.get("BUNSHIN_EXAMPLE_DEBUG"):
        print("warm-up loss", float(loss))


def main(args: Args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from bunshin_gym.trl_envs import ObservationBudget, WebArenaToolEnv, group_stats_callback, ledger

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    t0 = time.monotonic()
    torch.manual_seed(args.seed)
    out = args.out or tempfile.mkdtemp(prefix="bunshin-trl-")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    budget = ObservationBudget(max_chars=args.max_chars)
    factory = functools.partial(WebArenaToolEnv, url=args.url, token=args.token, budget=budget,
                                **({} if args.url else {"env_kwargs": {"max_steps": 4}}))
    ledger().clear()

    # the first observation of the first task, as the trainer will show it (and text for the tokenizer)
    probe = factory()
    first_obs = probe.reset(task_id=tasks[0])
    messages = [{"role": "user", "content": TOOLS_PROMPT + first_obs}]
    # the tools in the order TRL lists them (inspect.getmembers: by name), so the warm-up's prompt is the trainer's
    tools = [getattr(probe, n) for n, _ in inspect.getmembers(WebArenaToolEnv, predicate=inspect.isfunction)
             if not n.startswith("_") and n not in ("reset", "get_reward")]

    from bunshin_gym import adapter_for

    adapter = adapter_for("BunshinWebArena-v0")
    oracle = adapter.oracle_actions(adapter.load_task(tasks[0]))
    right = oracle[-1][len("stop ["):-1]  # the oracle's answer
    # two answers sharing every token up to the first word of the answer: the warm-up leaves the model ~50/50 there,
    # so a group's samples differ and the env's evaluator scores them 1 and 0
    calls = [("stop", {"answer": right}), ("stop", {"answer": "Chloe Davis"})]
    if args.model is None:
        from transformers.utils import get_json_schema

        schema_text = json.dumps([get_json_schema(t) for t in tools])
        corpus = [first_obs, schema_text, TOOLS_PROMPT] + [json.dumps({"name": n, "arguments": a}) for n, a in calls]
        model_dir = build_tiny_model(corpus * 20, os.path.join(out, "tiny-model"))
    else:
        model_dir = args.model
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if args.sft_steps:
        prompt_ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                                   return_dict=False)
        completions = []
        for name, arguments in calls:
            text = tokenizer.apply_chat_template(
                messages + [{"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": name, "arguments": arguments}}]}],
                tools=tools, tokenize=False)
            prompt_text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                        tokenize=False)
            completions.append(text[len(prompt_text):].rstrip("\n"))
        warm_up(model, tokenizer, list(prompt_ids), completions, args.sft_steps, args.seed)
        if os.environ.get("BUNSHIN_EXAMPLE_DEBUG"):
            out_ids = model.generate(torch.tensor([prompt_ids]), max_new_tokens=60, do_sample=False)
            print("greedy:", repr(tokenizer.decode(out_ids[0][len(prompt_ids):])), "\nwanted:", completions)
            from trl.chat_template_utils import add_response_schema, parse_response
            print("parsed:", parse_response(add_response_schema(tokenizer), out_ids[0][len(prompt_ids):].tolist(),
                                            prefix=list(prompt_ids), tools=tools))
    WebArenaToolEnv.close_all()  # the probe: the trainer makes its own instances
    ledger().clear()

    rows = [{"prompt": [{"role": "user", "content": TOOLS_PROMPT}], "task_id": t} for t in tasks]
    dataset = Dataset.from_list(rows * (args.steps * args.num_generations))
    config = GRPOConfig(output_dir=out, per_device_train_batch_size=args.num_generations,
                        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
                        max_steps=args.steps, learning_rate=1e-3, logging_steps=1, save_strategy="no",
                        report_to=[], use_cpu=True, bf16=False, seed=args.seed, temperature=1.0,
                        max_tool_calling_iterations=2, dataloader_num_workers=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=dataset,
                          environment_factory=factory, callbacks=[group_stats_callback(os.path.join(out, "groups.jsonl"))])
    trainer.train()
    changed = sum(int(not torch.equal(before[n], p.detach())) for n, p in trainer.model.named_parameters())
    WebArenaToolEnv.close_all()
    logs = [h for h in trainer.state.log_history if "loss" in h or "reward" in h]
    groups = [dataclasses.asdict(g) for g in ledger().groups()]
    return {"wall_s": round(time.monotonic() - t0, 1), "optimizer_steps": trainer.state.global_step,
            "parameters_changed": changed, "parameters": len(before), "groups": groups,
            "tool_calls": sum(g["tool_calls"] for g in groups),
            "rewards": [h.get("rewards/WebArenaToolEnv/mean") for h in logs],
            "reward_std": [h.get("rewards/WebArenaToolEnv/std") for h in logs], "log": logs}


def parse_args(argv=None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in dataclasses.fields(Args):
        kind = int if f.type in ("int", int) else str
        p.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default)
    return Args(**vars(p.parse_args(argv)))


if __name__ == "__main__":
    result = main(parse_args())
    print(json.dumps({k: v for k, v in result.items() if k != "log"}, indent=1))
