"""This project's multi-turn rollout against the natural baseline: transformers' `generate`, each turn
re-encoded and left-padded, on the same multi-turn work.

    python benchmarks/vs_generate.py                      # SmolLM2, 4 BabyAI tasks x 4, 4 turns, 48 tokens
    python benchmarks/vs_generate.py --tasks 2 --group-size 4 --horizon 2 --repeats 1   # quick
    python benchmarks/vs_generate.py --mixed-precision bf16   # in train.py's precision, on its bf16 copy

Each repeat first runs `agent.rollout()` (whole conversation, KV cache kept across turns), timing
its model work (`generate`: prefill, decode, sampling; machinery/timing.py). It then replays the
very same work with `model.generate`: for each turn, the streams still live at that turn, each
as the tokens it held when its reply began (left-padded into one batch, encoded afresh), and as
many new tokens as that turn's longest reply (min_new_tokens = max_new_tokens), sampled at the
same temperature. Both sample, so the replayed replies differ, but every forward has the shapes
the rollout's had: prompt tokens, cached columns and decode steps. The two ways alternate, so
that a shared machine's load falls on both alike; read the ratio.
"""

import os
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from agent import generation_model, rollout  # noqa: E402
from config import AgentConfig, autocast, flag, load_agent, parse, set_threads  # noqa: E402
from envs import ENVS, close_pool, open_pool  # noqa: E402
from machinery.kv_cache import Decoder  # noqa: E402


@dataclass
class VsConfig(AgentConfig):
    """The multi-turn work both ways run."""

    model: str = "smollm2"
    """the policy (train.py's --model)"""
    mask_actions: bool | None = False
    """free text"""
    context_turns: int | None = 0
    """the whole conversation"""
    max_new_tokens: int | None = 48
    """per-turn generation limit"""
    tasks: int = 4
    """distinct BabyAI test tasks"""
    group_size: int = 4
    """episodes per task (a GRPO group: the first prompt repeats)"""
    horizon: int = 4
    """turns per episode"""
    repeats: int = 2
    """interleaved repeats of the two ways"""
    drop_finished: bool = True
    """set finished rows aside while decoding (kv_cache.Decoder); off: every row decodes until the
    turn's longest reply ends, as in `generate`"""
    mixed_precision: str = flag("no", choices=("no", "bf16"))
    """bf16: both ways under bf16 autocast, as train.py's rollout on a CPU with bf16 instructions, and
    both on the same model, the rollout's bf16 generation copy (config.generation_dtype)"""
    generate_attention: str = flag("sdpa", choices=("sdpa", "decode"))
    """the attention `generate` runs on the bf16 copy: sdpa (transformers' default, what a user of
    `generate` gets) or decode (the rollout's own decode step, kv_cache.decode_attention: then only
    the rest of the machinery differs)"""


def turns_of(trajs) -> list[list[tuple[list[int], int]]]:
    """Per turn: (the stream's tokens when the reply began, the reply's length) of each live episode.
    A reply is a maximal run of loss-mask 1 in the trajectory's one row."""
    per_turn: list[list] = []
    for tr in trajs:
        [row] = tr.rows
        k, t = 0, 0
        while t < len(row.mask):
            if row.mask[t]:
                end = t
                while end < len(row.mask) and row.mask[end]:
                    end += 1
                while len(per_turn) <= k:
                    per_turn.append([])
                per_turn[k].append((row.ids[:t], end - t))
                k, t = k + 1, end
            else:
                t += 1
    return per_turn


@torch.no_grad()
def hf_replay(policy, per_turn, attention: str) -> tuple[float, int, int]:
    """Seconds of `model.generate` over the same turns, on the model the rollout sampled from (with
    `attention`); and the prompt positions and decode steps."""
    model, tok = generation_model(policy), policy.tokenizer
    ours = model.config._attn_implementation
    if ours == attention:  # (the policy itself, without a generation copy: SDPA both ways)
        return replay(model, tok, policy.temperature, per_turn)
    model.set_attn_implementation(attention)
    try:
        return replay(model, tok, policy.temperature, per_turn)
    finally:
        model.set_attn_implementation(ours)


def replay(model, tok, temperature, per_turn) -> tuple[float, int, int]:
    """`model.generate` over each turn's streams, left-padded: seconds, prompt positions, steps."""
    seconds, positions, steps = 0.0, 0, 0
    for work in per_turn:
        T, L = max(len(c) for c, _ in work), max(n for _, n in work)
        ids = torch.full((len(work), T), tok.pad_token_id, dtype=torch.long)
        attn = torch.zeros((len(work), T), dtype=torch.long)
        for i, (c, _) in enumerate(work):
            ids[i, T - len(c) :], attn[i, T - len(c) :] = torch.tensor(c), 1
        t0 = time.perf_counter()
        model.generate(
            input_ids=ids,
            attention_mask=attn,
            max_new_tokens=L,
            min_new_tokens=L,
            do_sample=True,
            temperature=temperature or 1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=tok.pad_token_id,
        )
        seconds += time.perf_counter() - t0
        positions, steps = positions + ids.numel(), steps + L
    return seconds, positions, steps


def main(cfg: VsConfig):
    set_threads(cfg, "cpu")
    if not cfg.drop_finished:
        Decoder.DROP_SHARE = float("inf")
    spec = ENVS["babyai"]
    policy = load_agent(cfg, "cpu")
    policy.model.eval()
    tasks = [t for t in spec.splits["test"][: cfg.tasks] for _ in range(cfg.group_size)]
    groups = [g for g in range(cfg.tasks) for _ in range(cfg.group_size)]
    pool = open_pool("babyai", size=len(tasks))
    ours, theirs = [], []
    try:
        with autocast(cfg.mixed_precision, "cpu"):
            measure(cfg, policy, pool, spec, tasks, groups, ours, theirs)
    finally:
        close_pool(pool)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(
        f"\n{cfg.model}, {len(tasks)} episodes x {cfg.horizon} turns, {cfg.max_new_tokens} new tokens, "
        f"threads {torch.get_num_threads()}, precision {cfg.mixed_precision} (generation "
        f"{policy.generation_dtype or 'the policy'}): rollout's model work {a:.1f} s, "
        f"transformers' generate {b:.1f} s, {b / a:.2f}x"
    )


def measure(cfg, policy, pool, spec, tasks, groups, ours: list, theirs: list) -> None:
    """The repeats, each the rollout then generate's replay of its turns; seconds into ours, theirs."""
    rollout(policy, pool, spec, tasks[:2], 1)  # warm up
    for r in range(cfg.repeats):
        torch.manual_seed(cfg.seed + r)
        tm: dict = {}
        trajs = rollout(policy, pool, spec, tasks, cfg.horizon, groups=groups, timings=tm)
        per_turn = turns_of(trajs)
        ours.append(tm["generate"])
        s, positions, steps = hf_replay(policy, per_turn, cfg.generate_attention)
        theirs.append(s)
        replied = sum(n for work in per_turn for _, n in work)  # tokens sampled for real replies
        padded = sum(len(work) * max(n for _, n in work) for work in per_turn)  # rows x longest
        print(
            f"repeat {r}: ours {tm['generate']:.1f} s (prefill {tm['prefill']:.1f}, decode "
            f"{tm['decode']:.1f}), generate {s:.1f} s; {sum(map(len, per_turn))} replies, "
            f"{steps} decode steps, reply tokens {replied} of the {padded} row-steps generate "
            f"decodes, generate's prompt positions {positions}; "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main(parse(VsConfig, description=__doc__.split("\n")[0]))
