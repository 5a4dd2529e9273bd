"""Would speculative decoding from the prompt (prompt lookup) speed up the rollout's decoding here?

    python benchmarks/prompt_lookup.py --trajectories runs/eval/trajectories.jsonl   # both halves
    python benchmarks/prompt_lookup.py --trajectories A.jsonl,B.jsonl --cost-repeats 0  # replies only

Prompt lookup (Saxena, 2023; vLLM's and transformers' n-gram drafts) proposes the next k tokens of
a reply by finding the reply's last n tokens earlier in the context and copying what followed them
there; one forward of the k+1 tokens verifies them. With a draft that is a single token d and
sampling at temperature 1, speculative sampling (Leviathan et al., 2023; Chen et al., 2023)
accepts d with probability min(1, p(d) / 1) = p(d), and on a rejection samples from p with d
removed: the replies keep exactly the policy's distribution. Coupled that way, d is accepted
exactly when the token an ordinary rollout samples is d. So the decode steps speculation would
take on a set of sampled replies can be counted on the replies themselves: no model needed.

Two halves, each printing figures:
1. **Reply tokens per step**: from eval.py's or train.py's `trajectories.jsonl` (each reply tokenized as
   the rollout's chat template lays it out, its end-of-turn token included), the tokens one decode
   step would produce on average, for k = 1, 2, 4, 8 (the longest context n-gram of 3, 2 or 1
   tokens; the most recent match).
2. **What a step of k+1 tokens costs**: the rollout's bf16 generation copy (LoRA 16 merged, as
   train.py's rollout), R rows each with a C-column cache, timed forwarding q = 1 (a decode step)
   and q = k+1 tokens per row (a verification), interleaved, into a reserved cache (machinery/
   kv_cache.py), each q through the rollout's one-token attention generalized to q tokens
   (`verify_attention`), so that q = 1 is the rollout's own decode step.

Speculation pays where (tokens per step) > cost(q = k+1) / cost(q = 1): the printed speed-up.
"""

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from transformers import AttentionInterface, DynamicCache  # noqa: E402
from transformers.masking_utils import AttentionMaskInterface  # noqa: E402

import agent  # noqa: E402
from config import AgentConfig, load_agent, parse  # noqa: E402
from machinery import lora  # noqa: E402
from machinery.kv_cache import reserve  # noqa: E402

DRAFTS = (1, 2, 4, 8)


@dataclass
class LookupConfig(AgentConfig):
    """The replies to count on and the step to time."""

    model: str = "smollm2"
    """the policy whose tokenizer lays out the replies and whose model is timed"""
    trajectories: str = ""
    """comma-separated trajectories.jsonl files (eval.py's or train.py's)"""
    episodes: int = 200
    """episodes read per file"""
    rows: int = 16
    """streams verifying together (a GRPO step's 4 x 4)"""
    cached: int = 760
    """columns already in each row's cache"""
    cost_repeats: int = 3
    """interleaved repeats of the timing (0: count the replies only)"""


def draft(context: list[int], k: int, longest: int = 3) -> list[int]:
    """The next `k` tokens of `context` as prompt lookup proposes them: what followed the most recent
    earlier occurrence of its last n tokens (n = `longest` down to 1); [] when none occurs."""
    for n in range(longest, 0, -1):
        key = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start : start + n] == key:
                return context[start + n : start + n + k]
    return []


def steps_for(context: list[int], reply: list[int], k: int) -> int:
    """Decode steps to produce `reply` after `context` with k-token drafts: each step keeps the
    draft's longest prefix that matches the reply, plus the one token the step samples itself."""
    t = steps = 0
    while t < len(reply):
        d = draft(context + reply[:t], k)
        kept = 0
        while kept < len(d) and t + kept < len(reply) and d[kept] == reply[t + kept]:
            kept += 1
        t, steps = t + kept + 1, steps + 1
    return steps


def replies(path: str, tokenizer, episodes: int):
    """(context ids, reply ids) of every reply in the first `episodes` episodes of `path`."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    with open(path) as f:
        for line in list(f)[:episodes]:
            conv = json.loads(line)["conversation"]
            for i in (i for i, m in enumerate(conv) if m["role"] == "assistant"):
                text = tokenizer.apply_chat_template(conv[:i], add_generation_prompt=True, tokenize=False)
                context = tokenizer(text, add_special_tokens=False)["input_ids"]
                yield context, tokenizer(conv[i]["content"], add_special_tokens=False)["input_ids"] + [end]


def per_step(cfg: LookupConfig, tokenizer) -> dict:
    """{file: {k: reply tokens per decode step}}, printed as it goes."""
    out = {}
    for path in filter(None, cfg.trajectories.split(",")):
        pairs = list(replies(path, tokenizer, cfg.episodes))
        tokens = sum(len(r) for _, r in pairs)
        out[path] = {k: tokens / sum(steps_for(c, r, k) for c, r in pairs) for k in DRAFTS}
        rates = "  ".join(f"k={k}: {v:.2f}" for k, v in out[path].items())
        print(f"{path}: {len(pairs)} replies, {tokens} tokens; tokens per step  {rates}")
    return out


def verify_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """`kv_cache.decode_attention` for q >= 1 new tokens per row: each key/value head's group of
    query heads, q positions each, against the room's columns, causal within the q (query i sees the
    columns up to T - q + i). At q = 1 the same computation as the rollout's decode step."""
    B, H, q, D = query.shape  # (B, H, q, D)
    T, KV = key.shape[2], key.shape[1]
    key, value = key._base, value._base  # the whole room (kv_cache.ReservedLayer), as the rollout reads it
    W = key.shape[2]
    seen = torch.arange(W) <= torch.arange(T - q, T).unsqueeze(-1)  # (q, W): causal, unfilled columns out
    scores = torch.bmm(query.reshape(B * KV, H // KV * q, D), key.reshape(B * KV, W, D).transpose(1, 2))
    scores = scores.float().view(B, KV, H // KV, q, W) * (scaling or D**-0.5)
    probs = torch.softmax(scores.masked_fill(~seen, float("-inf")), dim=-1).to(value.dtype)
    out = torch.bmm(probs.view(B * KV, H // KV * q, W), value.reshape(B * KV, W, D))
    return out.view(B, H, q, D).transpose(1, 2), None  # (B, q, H, D)


def use_verify_attention(model) -> None:
    """Run `model`'s attention through `verify_attention` (its cache reserved: kv_cache.reserve)."""
    AttentionInterface.register("verify", verify_attention)
    AttentionMaskInterface.register("verify", lambda *args, **kwargs: None)  # (it masks itself)
    model.set_attn_implementation("verify")


def cost(cfg: LookupConfig, policy) -> dict:
    """{q: seconds} of one forward of q tokens per row on a `cached`-column reserved cache (median of
    the repeats), every q through `verify_attention`."""
    policy.generation_dtype = "bfloat16"
    model = agent.generation_model(policy)
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    times = {q: [] for q in (1, *(k + 1 for k in DRAFTS))}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model.set_attn_implementation("sdpa")
        cache = DynamicCache(config=model.config)
        model(torch.randint(0, V, (cfg.rows, cfg.cached), generator=g), cache=cache, use_cache=True)
        reserve(cache, max(times))
        use_verify_attention(model)
        for repeat in range(cfg.cost_repeats + 1):  # the first round warms up
            for q in times:
                ids = torch.randint(0, V, (cfg.rows, q), generator=g)
                t0 = time.perf_counter()
                model(ids, cache=cache, use_cache=True, logits_to_keep=q)
                if repeat:
                    times[q].append(time.perf_counter() - t0)
                for layer in cache.layers:  # the verified columns out again: every forward meets C
                    layer.keys, layer.values = (room[:, :, : cfg.cached] for room in layer.room)
    return {q: statistics.median(t) for q, t in times.items()}


def main(cfg: LookupConfig):
    torch.set_num_threads(cfg.threads or 1)
    torch.manual_seed(0)
    policy = load_agent(cfg, "cpu")
    counted = per_step(cfg, policy.tokenizer)
    if not cfg.cost_repeats:
        return
    policy.model = lora.add_adapters(policy.model, 16)
    seconds = cost(cfg, policy)
    print(
        f"\n{cfg.model} bf16 copy, {cfg.rows} rows, {cfg.cached} cached columns, threads "
        f"{torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}: ms per forward"
    )
    for q, s in seconds.items():
        print(f"  q={q}: {1000 * s:7.1f} ms  ({s / seconds[1]:.2f}x a decode step)")
    for path, rates in counted.items():
        gains = "  ".join(f"k={k}: {rates[k] * seconds[1] / seconds[k + 1]:.2f}x" for k in DRAFTS)
        print(f"prompt lookup against plain decoding, {os.path.basename(os.path.dirname(path))}: {gains}")


if __name__ == "__main__":
    main(parse(LookupConfig, description=__doc__.split("\n")[0]))
