"""Where one decode step's time goes: a real model's one-token forwards over a kept KV cache.

    python benchmarks/decode_step.py                        # SmolLM2 + LoRA 16, 16 rows, 760 cached
    python benchmarks/decode_step.py --profile 1            # ... and each way's top operators
    python benchmarks/decode_step.py --rows 64 --threads 2

Builds what `agent.generate` decodes from in the issue-29 setting (SmolLM2-135M with rank-16 LoRA
adapters, 16 streams, a ~760-column cache), then times `--steps` decode steps the way
`agent.generate` runs them, for each way the rollout can decode (`kv_cache.Decoder`,
`agent.generation_model`), interleaved, so that a shared machine's load falls on all alike. Prints
milliseconds per step against the step's arithmetic (2 x parameters x rows FLOP for the matmuls),
the figure a well-fed CPU would reach.
"""

import contextlib
import os
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import agent  # noqa: E402
from config import AgentConfig, load_agent, parse  # noqa: E402
from machinery import lora  # noqa: E402
from machinery.kv_cache import Decoder, prefill  # noqa: E402


@dataclass
class DecodeConfig(AgentConfig):
    """The model and the batch to decode."""

    model: str = "smollm2"
    """the policy (as train.py's --model)"""
    lora_rank: int = 16
    """LoRA adapters on the model, as train.py --lora-rank (0: none)"""
    rows: int = 16
    """streams decoding together"""
    cached: int = 760
    """columns already in the cache (the prompt and the earlier turns)"""
    steps: int = 16
    """decode steps timed per repeat"""
    repeats: int = 3
    """interleaved repeats of each way"""
    ways: str = "plain,fast,autocast,bf16"
    """comma-separated: plain (DynamicCache as is), fast (cache reserved), merged (fast, on a float32 copy
    with LoRA merged in), autocast (fast, as train.py ran before generation copies were its default
    under bf16: the frozen base in bf16, the adapters float32, bf16 autocast), bf16 (fast, on a bf16
    copy with LoRA merged in, under bf16 autocast: train.py's rollout now)"""
    padding: int = 3
    """row i gets i x this many columns of left padding (masked), as a rollout's rows of different
    lengths have; 0: none (then the attention takes another kernel: see docs/speed_smollm2.md)"""
    profile: int = 0
    """1: then profile each way's decode steps once more (the prefill left out): torch.profiler's top
    operators"""


def build(cfg, half_base: bool = False):
    """The policy with LoRA adapters; `half_base`: its frozen base in bf16, as train.py holds it
    under --mixed-precision bf16 (train.load_models)."""
    torch.manual_seed(0)
    policy = load_agent(cfg, "cpu")
    if cfg.lora_rank:
        policy.model = lora.add_adapters(policy.model, cfg.lora_rank)
    if half_base:
        for p in policy.model.parameters():
            p.data = p.data if p.requires_grad else p.data.to(torch.bfloat16)
        policy.model.get_output_embeddings().float()
    policy.model.eval()
    return policy


def run(policies, cfg, way: str, profile: bool = False) -> float:
    """Seconds per decode step, `way` as named in DecodeConfig.ways."""
    policy = policies["half" if way == "autocast" else "float"]
    g = torch.Generator().manual_seed(0)
    V = policy.model.config.vocab_size
    # one prompt for every row (as a GRPO group's first turn): prefill encodes it once and copies
    # its cache rows, and the decode steps cost what they cost for different prompts
    news = [torch.randint(0, V, (cfg.cached,), generator=g).tolist()] * cfg.rows
    policy.generation_dtype = {"bf16": "bfloat16", "bf16-sdpa": "bfloat16", "merged": "float32"}.get(way, "")
    model = agent.generation_model(policy)
    if policy.generation_dtype:
        model.set_attn_implementation("sdpa" if way == "bf16-sdpa" else "decode")
    half = way in ("autocast", "bf16", "bf16-sdpa")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
        _, state = prefill(model, news, [0] * cfg.rows, None, 0, "cpu")
        for i in range(cfg.rows):
            state.attn[i, : cfg.padding * i] = 0
        step = Decoder(model, state, cfg.steps, preallocate=way != "plain")
        nxt = torch.randint(0, V, (cfg.rows,), generator=g)
        live = [1] * cfg.rows
        step(nxt, live)  # warm-up
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profile else None
        t0 = time.perf_counter()
        with prof or contextlib.nullcontext():
            for _ in range(cfg.steps - 1):
                logits = step(nxt, live)
                nxt = logits.argmax(-1)
    if prof is not None:
        print(f"\n{way}: {1000 * (time.perf_counter() - t0) / (cfg.steps - 1):.1f} ms/step, profiled")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    return (time.perf_counter() - t0) / (cfg.steps - 1)


def main(cfg: DecodeConfig):
    torch.set_num_threads(cfg.threads or 1)
    policies = {"float": build(cfg)}
    if "autocast" in cfg.ways:
        policies["half"] = build(cfg, half_base=True)
    policy = policies["float"]
    n_params = sum(p.numel() for n, p in policy.model.named_parameters() if "embed" not in n)
    flop = 2 * n_params * cfg.rows
    ways = cfg.ways.split(",")
    times = {w: [] for w in ways}
    for _ in range(cfg.repeats):
        for w in ways:
            times[w].append(run(policies, cfg, w))
    print(
        f"\n{cfg.model}, LoRA {cfg.lora_rank}, {cfg.rows} rows, {cfg.cached} cached columns, "
        f"threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}"
    )
    for w in ways:
        s = statistics.median(times[w])
        print(
            f"  {w:8s} {1000 * s:7.1f} ms/step  ({' '.join(f'{1000 * t:.1f}' for t in times[w])})"
            f"  {flop / s / 1e9:5.1f} GFLOP/s  {cfg.rows / s:6.1f} tokens/s"
        )
    if cfg.profile:
        for w in ways:
            run(policies, cfg, w, profile=True)


if __name__ == "__main__":
    main(parse(DecodeConfig, description=__doc__.split("\n")[0]))
