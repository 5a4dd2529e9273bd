"""TRL's GRPOTrainer on this project's BabyAI, through OpenEnv: a few training steps, measured.

Where it sits: outside the project's loop, beside it. `train.py` trains with the project's own
rollout (agent.py) and algorithms (grpo.py); here Hugging Face TRL's `GRPOTrainer` trains instead, in
its environment mode (`environment_factory`, TRL 1.x), on the same BabyAI server speaking OpenEnv's
dialect (servers/openenv.py), driven by OpenEnv's own client (`openenv.core.GenericEnvClient`, one
WebSocket session per rollout). Nothing in the project imports this file; it needs `trl` (not in
requirements.txt: `pip install trl==1.16.0`).

How TRL's environment mode plays an episode (trl/trainer/grpo_trainer.py, 1.16.0): one environment
object per rollout; `reset(**row)` gets the dataset row and its text is appended to the user
message; every public method of the environment is a tool the model calls in its chat template's
tool-call format (for the Qwen2.5 template, `<tool_call>{"name": "act", "arguments": {...}}
</tool_call>`); the tool's return comes back as a `tool` message, masked out of the loss, and the
model generates again, up to `max_tool_calling_iterations` times or `max_completion_length` tokens
(the tool results count against it); `get_reward()` scores the finished rollout. The advantage is
GRPO's, over the `num_generations` rollouts of a task (DeepSeekMath eq. 3).

    python benchmarks/trl_openenv.py                      # CPU: SmolLM2-135M-Instruct, 3 steps
    python benchmarks/trl_openenv.py --model Qwen/Qwen2.5-1.5B-Instruct --steps 200 --lr 1e-6 \\
        --tasks-per-step 8 --num-generations 8 --max-turns 8 --max-completion-length 4096 \\
        --max-reply-tokens 256                            # a GPU (its template has tool calls)

With no --url it starts servers/babyai.py on a free port and stops it at the end; with --url it
uses a BabyAI server already running (another of the five servers needs its own SYSTEM prompt and
`act` docstring; the rest is the same). Measured output and what limits it on a CPU: docs/openenv.md.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SYSTEM = (
    "You are an agent in a grid world. Each turn you see the objects in view, what is in front of "
    "you, what you carry, the available actions and your goal. Call the `act` tool with exactly one "
    "of the available actions, then read what you see and call it again, until the goal is reached."
)
URL = ""  # the OpenEnv server every BabyAI object connects to (set in main, before the trainer)


class BabyAI:
    """One rollout's episode, as TRL's `environment_factory` wants it: `reset` starts it, `act` is
    the one tool, `get_reward` is its return. TRL keeps these objects and resets them each batch,
    so each holds one OpenEnv session (one instance on the server) for the whole run."""

    played: list[dict] = []  # every scored episode of the run, all objects together: what the model did

    def __init__(self):
        from openenv.core import GenericEnvClient

        self.client = GenericEnvClient(base_url=URL).sync()  # connects: a WebSocket session
        self.reward, self.done, self.actions, self.task = 0.0, False, [], None

    def reset(self, split: str, index: int, **row) -> str:  # row: the dataset's other columns
        result = self.client.reset(split=split, index=index)
        self.reward, self.done, self.actions, self.task = 0.0, result.done, [], f"{split}/{index}"
        return result.observation["text"]

    def act(self, action: str) -> str:
        """Take one action in the grid world.

        Args:
            action: One of the available actions, as listed, e.g. "turn left" or "go to red ball 1".

        Returns:
            What you see after the action, with the available actions and your goal.
        """
        if self.done:  # TRL hands the error to the model as the tool's answer, counted as a failure
            raise ValueError("the episode is over")
        result = self.client.step({"action": action})
        self.reward += result.reward or 0.0
        self.done = result.done
        self.actions.append(action)
        return result.observation["text"]

    def get_reward(self) -> float:
        BabyAI.played.append({"task": self.task, "actions": self.actions, "reward": self.reward})
        return self.reward


def tasks(split: str, n: int):
    """A dataset of n tasks of the split (OpenEnv's task API: split, index), as TRL reads one."""
    from datasets import Dataset

    prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "You see:\n"}]
    return Dataset.from_dict({"prompt": [prompt] * n, "split": [split] * n, "index": list(range(n))})


OPEN = '<tool_call>\n{"name": "act", "arguments": {"action": "'  # a tool call's opening, Qwen2.5's format


def load(model: str, force_tool_call: bool):
    """The policy and its tokenizer. TRL parses tool calls only in chat templates it knows
    (trl.chat_template_utils.add_response_schema raises "Unrecognized chat template" for SmolLM2's,
    which has no tool calls); SmolLM2 shares Qwen2.5's <|im_start|> format, so it gets Qwen2.5's
    template and TRL's parser for it. With `force_tool_call` every reply starts inside a call of
    `act` (the opening is part of the prompt, so it gets no gradient): SmolLM2-135M never writes
    one of its own, and a rollout without a tool call scores 0 (docs/openenv.md)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template, qwen3_template

    if model == "smollm2":
        from machinery.gguf_model import resolve_model

        model = resolve_model("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
    if "<tool_call>" not in (tokenizer.chat_template or ""):
        tokenizer.chat_template = qwen2_5_chat_template
    if force_tool_call:
        header = "{{- '<|im_start|>assistant\\n' }}"
        assert tokenizer.chat_template.count(header) == 1, "--force-tool-call needs a Qwen2.5-style template"
        opened = "{{- '<|im_start|>assistant\\n" + OPEN.replace("\n", "\\n") + "' }}"
        tokenizer.chat_template = tokenizer.chat_template.replace(header, opened)
        tokenizer.response_template = (
            qwen3_template  # TRL's parser for Qwen's tool calls; it reads the prompt too
        )
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return AutoModelForCausalLM.from_pretrained(model, dtype=dtype), tokenizer


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help='"smollm2" (offline) or a hub id or path')
    p.add_argument("--url", default="", help="a BabyAI server running; empty: start one")
    p.add_argument("--split", default="train")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps")
    p.add_argument("--tasks-per-step", type=int, default=2)
    p.add_argument("--num-generations", type=int, default=4, help="rollouts per task (GRPO's group)")
    p.add_argument("--max-turns", type=int, default=3, help="tool calls per episode at most")
    p.add_argument("--max-completion-length", type=int, default=768, help="tokens, tool results included")
    p.add_argument("--max-reply-tokens", type=int, default=32, help="tokens one reply may take")
    p.add_argument(
        "--force-tool-call", choices=["auto", "true", "false"], default="auto", help="auto: for smollm2"
    )
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--threads", type=int, default=1, help="CPU threads")
    p.add_argument("--out", default="runs/trl_openenv")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def grpo_config(args: argparse.Namespace):
    """TRL's GRPOConfig: a step is tasks_per_step tasks x num_generations rollouts, one optimizer
    step on them (TRL's defaults otherwise: beta 0, no reference model; loss_type "dapo")."""
    import torch
    from trl import GRPOConfig

    gpu = torch.cuda.is_available()  # TRL's default gradient checkpointing stays: without it, 8 rollouts
    return GRPOConfig(  # of SmolLM2 took over 15 GB on a CPU (attention is (heads, T, T) per layer)
        output_dir=args.out,
        max_steps=args.steps,
        per_device_train_batch_size=args.num_generations,  # the loss runs a task's group at a time
        gradient_accumulation_steps=args.tasks_per_step,  # = TRL's steps_per_generation: one rollout phase
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_turns,
        generation_kwargs={"max_new_tokens": args.max_reply_tokens},  # per generate call: per turn
        learning_rate=args.lr,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not gpu,
        bf16=gpu,
        seed=args.seed,
    )


def main():
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is "experimental"
    from trl import GRPOTrainer

    from envs.process import EnvServer

    global URL
    server = None if args.url else EnvServer("servers.babyai").start()
    URL = args.url or server.url
    force = args.force_tool_call == "true" or (args.force_tool_call == "auto" and args.model == "smollm2")
    model, tokenizer = load(args.model, force)
    trainer = GRPOTrainer(
        model=model,
        args=grpo_config(args),
        train_dataset=tasks(args.split, args.steps * args.tasks_per_step),
        processing_class=tokenizer,
        environment_factory=BabyAI,
    )
    start = time.time()
    try:
        trainer.train()
    finally:
        if server:
            server.stop()
    rows = [{"step": i + 1, **r} for i, r in enumerate(r for r in trainer.state.log_history if "loss" in r)]
    print("\n".join(json.dumps(r) for r in rows))
    print(summary(rows, time.time() - start, args))
    print(episodes(BabyAI.played, args.out))


COLUMNS = [  # (TRL's log key, the column's name)
    ("reward", "reward"),
    ("reward_std", "reward_std"),
    ("frac_reward_zero_std", "flat_groups"),
    ("tools/call_frequency", "tool_calls"),
    ("tools/failure_frequency", "tool_failures"),
    ("completions/mean_length", "tokens"),
    ("loss", "loss"),
    ("grad_norm", "grad_norm"),
    ("step_time", "seconds"),
]


def summary(rows: list[dict], seconds: float, args) -> str:
    """A table of TRL's own log, one line per step: BabyAI's return (reward), the share of groups
    with no spread (no gradient), tool calls and failures per rollout, tokens, loss, seconds."""
    head = (
        f"TRL GRPOTrainer on BabyAI via OpenEnv: {args.model}, {args.tasks_per_step} tasks x "
        f"{args.num_generations} rollouts per step, {seconds:.0f} s in all"
    )
    lines = [head, "step " + " ".join(f"{name:>13}" for _, name in COLUMNS)]
    for r in rows:
        lines.append(f"{r['step']:>4} " + " ".join(f"{r.get(key, float('nan')):13.3f}" for key, _ in COLUMNS))
    return "\n".join(lines)


def episodes(played: list[dict], out: str) -> str:
    """What the rollouts did on the server, from the environment's side (saved to out/episodes.jsonl):
    how many made a valid tool call at all, how many succeeded, and their first actions."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "episodes.jsonl"), "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in played)
    acted = [e for e in played if e["actions"]]
    won = [e for e in played if e["reward"] > 0]
    firsts = sorted({e["actions"][0] for e in acted})
    return (
        f"episodes {len(played)}: {len(acted)} called act at least once, {len(won)} succeeded; "
        f"first actions: {firsts[:12]}"
    )


if __name__ == "__main__":
    main()
