"""Where one decode step's time goes: a real model's one-token forwards over a kept KV cache.

    python benchmarks/decode_step.py                        # SmolLM2 + LoRA 16, 16 rows, 760 cached
    python benchmarks/decode_step.py --profile 1            # ... and each way's top operators
    python benchmarks/decode_step.py --rows 64 --threads 2

Builds what `agent.generate` decodes from in real_model_profile.py's setting (SmolLM2-135M with rank-16 LoRA
adapters, 16 streams, a ~760-column cache), then times `--steps` decode steps the way
`agent.generate` runs them, for each way the rollout can decode (`kv_cache.Decoder`,
`agent.generation_model`), interleaved, so that a shared machine's load falls on all alike. Prints
milliseconds per step against the step's arithmetic (2 x parameters x rows FLOP for the matmuls),
the figure a well-fed CPU would reach, and against the bytes a bf16 step reads (the blocks' weights,
the float32 LM head and every layer's keys and values) per second: set beside a streaming read's
(benchmarks/matmul_peak.py), it says how far the step is from the memory's speed.

Way `bf16-lean` runs the bf16 way's steps through `lean_step`, a Llama one-token forward written
out by hand (transformers' norms, none of its attention or MLP modules, masks or cache classes;
q/k/v and gate/up each one matmul): what is left of a step once transformers' per-layer overhead
is gone. Before the timing, a whole run of it is checked against the bf16 way's logits, step by
step; it is measured only: the rollout keeps transformers' forward.
Way `bf16-packed` gives the bf16 copy's block linears weights packed once for oneDNN
(`torch.ops.mkldnn._reorder_linear_weight`, the private op torch.compile's freezing uses) instead
of the reorder `F.linear` does on every call; also checked, also measured only.
Way `bf16-int8` gives them int8 copies of their weights instead (`Int8`: one scale per output row,
fbgemm's dynamic quantization): half the bytes of bf16. Not the same model: its check prints how far
its first step's log-probs are from the bf16 way's and how many steps pick the same tokens.
"""

import contextlib
import os
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: E402

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
    ways: str = "plain,fast,autocast,bf16,bf16-lean,bf16-packed"
    """comma-separated: plain (DynamicCache as is), fast (cache reserved), merged (fast, on a float32 copy
    with LoRA merged in), autocast (fast, as train.py ran before generation copies were its default
    under bf16: the frozen base in bf16, the adapters float32, bf16 autocast), bf16 (fast, on a bf16
    copy with LoRA merged in, under bf16 autocast: train.py's rollout now), bf16-lean (bf16, each step
    through `lean_step`; Llama models only), bf16-packed (bf16, the blocks' linears on weights packed
    for oneDNN once), bf16-int8 (bf16, the blocks' linears on int8 weights)"""
    padding: int = 3
    """row i gets i x this many columns of left padding (masked), as a rollout's rows of different
    lengths have; 0: none (then the attention takes another kernel: see docs/studies/speed_smollm2.md)"""
    profile: int = 0
    """1: then profile each way's decode steps once more (the prefill left out): torch.profiler's top
    operators"""


def build(cfg, half_base: bool = False):
    """The policy with LoRA adapters; `half_base`: its frozen base in bf16, as train.py holds it
    under --mixed-precision bf16 (update.load_models)."""
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


def lean_step(model, fused, ids, attn, pos, cache):
    """The logits (B, V) of one decode step of a Llama `model` whose cache layers are reserved
    (kv_cache.ReservedLayer): transformers' computation written out, op for op (the same logits, bit
    for bit, on SmolLM2), with its norms and rotary embedding but without its attention and MLP
    modules, mask builders and cache classes. `fused`: per layer
    (W_qkv, W_gate_up), the projections concatenated so that each is one matmul."""
    m, c = model.model, model.config
    H, KV, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    x = m.embed_tokens(ids)  # (B, 1, C)
    B = x.shape[0]
    cos, sin = m.rotary_emb(x, pos)  # (B, 1, D)
    T, W = cache.layers[0].keys.shape[2], cache.layers[0].room[0].shape[2]
    mask = F.pad(attn.bool(), (0, W - T - 1), value=False).view(B, 1, 1, W)  # the room's unfilled columns out

    for layer, (w_qkv, w_gu), kv in zip(m.layers, fused, cache.layers):
        q, k, v = F.linear(layer.input_layernorm(x), w_qkv).split([H * D, KV * D, KV * D], -1)
        q, k = apply_rotary_pos_emb(
            q.view(B, 1, H, D).transpose(1, 2), k.view(B, 1, KV, D).transpose(1, 2), cos, sin
        )
        k_room, v_room = kv.room
        k_room[:, :, T : T + 1], v_room[:, :, T : T + 1] = k, v.view(B, 1, KV, D).transpose(1, 2)
        kv.keys, kv.values = k_room[:, :, : T + 1], v_room[:, :, : T + 1]
        scores = torch.bmm(q.reshape(B * KV, H // KV, D), k_room.view(B * KV, W, D).transpose(1, 2))
        scores = scores.float().view(B, KV, H // KV, W) * D**-0.5
        probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).to(v_room.dtype)
        out = torch.bmm(probs.view(B * KV, H // KV, W), v_room.view(B * KV, W, D))  # (B KV, H/KV, D)
        x = x + layer.self_attn.o_proj(out.view(B, H, 1, D).transpose(1, 2).reshape(B, 1, H * D))
        gate, up = F.linear(layer.post_attention_layernorm(x), w_gu).chunk(2, -1)
        x = x + layer.mlp.down_proj(F.silu(gate) * up)
    return model.lm_head(m.norm(x)[:, -1, :])


def lean(model, step: Decoder):
    """`step`'s calls (every row live) through `lean_step`, on `step`'s reserved cache."""
    fused = [
        (
            torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
            torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
        )
        for a, mlp in ((layer.self_attn, layer.mlp) for layer in model.model.layers)
    ]

    def call(nxt, live):
        state = step.state
        state.attn = torch.cat([state.attn, torch.ones_like(state.attn[:, :1])], dim=1)
        pos = torch.tensor(state.n).unsqueeze(-1)
        logits = lean_step(model, fused, nxt.unsqueeze(-1), state.attn, pos, state.cache)
        state.n = [n + 1 for n in state.n]
        return logits

    return call


# oneDNN packs bf16 weights only on CPUs with AVX512 (bw, vl, dq) or AVX-NE-CONVERT; elsewhere
# (an AVX2 machine) the packing op raises, so the bf16-packed way is left out there
PACKING = torch.ops.mkldnn._is_mkldnn_bf16_supported()


class Packed(torch.nn.Module):
    """`linear` on its weight packed once for oneDNN's bf16 kernel (for `rows`-row inputs)."""

    def __init__(self, linear, rows: int):
        super().__init__()
        self.weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), rows)
        self.bias = linear.bias

    def forward(self, x):
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")


class Int8(torch.nn.Module):
    """`linear` on an int8 copy of its weight, one scale per output row (fbgemm's dynamic linear:
    each input quantized on the fly to 7 bits, the product back in the input's dtype). The 7 bits
    (`reduce_range`, what PyTorch's x86 qconfig uses) matter on CPUs without VNNI: their int8 kernel
    sums pairs of products in int16, which saturates with 8-bit inputs (16% off on an AVX2 machine,
    1.4% with 7 bits)."""

    def __init__(self, linear):
        super().__init__()
        w = linear.weight.detach().float()
        scales = (w.abs().amax(dim=1) / 127).clamp(min=1e-12).double()
        q = torch.quantize_per_channel(w, scales, torch.zeros_like(scales, dtype=torch.long), 0, torch.qint8)
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.weight = torch.ops.quantized.linear_prepack(q, bias)

    def forward(self, x):
        return torch.ops.quantized.linear_dynamic(x.float(), self.weight, True).to(x.dtype)


@contextlib.contextmanager
def swapped(model, make):
    """`model`'s block linears replaced by `make(linear)` inside the `with` (put back after)."""
    linears = [(n, m) for n, m in model.model.layers.named_modules() if isinstance(m, torch.nn.Linear)]

    def put(name, module):
        parent, attr = name.rsplit(".", 1)
        setattr(model.model.layers.get_submodule(parent), attr, module)

    for name, m in linears:
        put(name, make(m))
    try:
        yield model
    finally:
        for name, m in linears:
            put(name, m)


def packed(model, rows: int):
    """`model`'s block linears replaced by `Packed` ones inside the `with`."""
    return swapped(model, lambda m: Packed(m, rows))


def run(policies, cfg, way: str, profile: bool = False, logits_out: list | None = None) -> float:
    """Seconds per decode step, `way` as named in DecodeConfig.ways (each step's logits appended to
    `logits_out` if given)."""
    policy = policies["half" if way == "autocast" else "float"]
    g = torch.Generator().manual_seed(0)
    V = policy.model.config.vocab_size
    # one prompt for every row (as a GRPO group's first turn): prefill encodes it once and copies
    # its cache rows, and the decode steps cost what they cost for different prompts
    news = [torch.randint(0, V, (cfg.cached,), generator=g).tolist()] * cfg.rows
    bf16 = way.startswith("bf16")
    policy.generation_dtype = "bfloat16" if bf16 else {"merged": "float32"}.get(way, "")
    model = agent.generation_model(policy)
    if policy.generation_dtype:
        model.set_attn_implementation("sdpa" if way == "bf16-sdpa" else "decode")
    half = way == "autocast" or bf16
    swaps = {"bf16-packed": lambda: packed(model, cfg.rows), "bf16-int8": lambda: swapped(model, Int8)}
    swap = swaps.get(way, contextlib.nullcontext)()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=half), swap:
        _, state = prefill(model, news, [0] * cfg.rows, None, 0, "cpu")
        for i in range(cfg.rows):
            state.attn[i, : cfg.padding * i] = 0
        step = Decoder(model, state, cfg.steps, preallocate=way != "plain")
        step = lean(model, step) if way == "bf16-lean" else step
        nxt = torch.randint(0, V, (cfg.rows,), generator=g)
        live = [1] * cfg.rows
        step(nxt, live)  # warm-up
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profile else None
        t0 = time.perf_counter()
        with prof or contextlib.nullcontext():
            for _ in range(cfg.steps - 1):
                logits = step(nxt, live)
                nxt = logits.argmax(-1)
                if logits_out is not None:
                    logits_out.append(logits)
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
    c = policy.model.config
    # what a bf16 step reads: the blocks in bf16, the LM head in float32, each layer's keys and values
    named = policy.model.named_parameters()
    blocks = 2 * sum(p.numel() for n, p in named if "embed" not in n and "lora_" not in n)
    head = 4 * c.vocab_size * c.hidden_size
    columns = cfg.cached + cfg.steps
    kv = 2 * 2 * c.num_hidden_layers * cfg.rows * c.num_key_value_heads * columns * c.head_dim
    ways = cfg.ways.split(",")
    if "bf16-packed" in ways and not PACKING:
        print("bf16-packed left out: this CPU has no oneDNN bf16 packing (it needs AVX512 or AVX-NE-CONVERT)")
        ways.remove("bf16-packed")
    for w in ("bf16-lean", "bf16-packed"):
        if w in ways:
            plain, other = [], []
            run(policies, cfg, "bf16", logits_out=plain), run(policies, cfg, w, logits_out=other)
            same = all(torch.equal(a, b) for a, b in zip(plain, other))
            diff = max((a - b).abs().max().item() for a, b in zip(plain, other))
            verdict = "bit for bit equal" if same else f"max |diff| {diff:.2e}"
            print(f"{w} against bf16, {len(plain)} steps: {verdict}")
    if "bf16-int8" in ways:  # another model: how far from bf16 at the first step, the same tokens?
        plain, other = [], []
        run(policies, cfg, "bf16", logits_out=plain), run(policies, cfg, "bf16-int8", logits_out=other)
        a, b = plain[0].float().log_softmax(-1), other[0].float().log_softmax(-1)
        chosen = a.argmax(-1, keepdim=True)
        gap = (a.gather(-1, chosen) - b.gather(-1, chosen)).abs().mean().item()
        same = sum(torch.equal(x.argmax(-1), y.argmax(-1)) for x, y in zip(plain, other))
        print(
            f"bf16-int8 against bf16: first step's mean |log-prob diff| at bf16's top token {gap:.3f}, "
            f"max |logit diff| {(plain[0] - other[0]).abs().max().item():.2f}; same tokens in {same} of "
            f"{len(plain)} steps"
        )
    times = {w: [] for w in ways}
    for _ in range(cfg.repeats):
        for w in ways:
            times[w].append(run(policies, cfg, w))
    print(
        f"\n{cfg.model}, LoRA {cfg.lora_rank}, {cfg.rows} rows, {cfg.cached} cached columns, "
        f"threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"  a bf16 step reads {(blocks + head + kv) / 1e6:.0f} MB: blocks {blocks / 1e6:.0f}, "
        f"LM head (float32) {head / 1e6:.0f}, keys and values {kv / 1e6:.0f}"
    )
    for w in ways:
        s = statistics.median(times[w])
        read = f"  {(blocks + head + kv) / s / 1e9:4.1f} GB/s" if w.startswith("bf16") else ""
        print(
            f"  {w:11s} {1000 * s:7.1f} ms/step  ({' '.join(f'{1000 * t:.1f}' for t in times[w])})"
            f"  {flop / s / 1e9:5.1f} GFLOP/s  {cfg.rows / s:6.1f} tokens/s{read}"
        )
    if cfg.profile:
        for w in ways:
            run(policies, cfg, w, profile=True)


if __name__ == "__main__":
    main(parse(DecodeConfig, description=__doc__.split("\n")[0]))
