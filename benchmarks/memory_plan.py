"""How much accelerator memory a training run needs, from the model's config alone (no weights).

    python benchmarks/memory_plan.py --model Qwen/Qwen2.5-7B-Instruct --seq-len 16384 --micro-batch-size 1
    python benchmarks/memory_plan.py --plan          # 1.5B, 3B, 7B on one 80 GB GPU: the flags that fit
    python benchmarks/memory_plan.py --plan --algo ppo   # the same with PPO's critic
    python benchmarks/memory_plan.py --presets       # each preset (presets/) at 1.5B, 3B, 7B on 80 and 141 GB
                     # then each preset's command that fits 80 GB at 3B and 7B, and its estimated
                     # wall time on one H100 (FLOPs and memory reads, assumed utilisation: step_seconds)

`--model` is one of the built-in published shapes (Qwen2.5-0.5B/1.5B/3B/7B-Instruct, SmolLM2-135M-
Instruct: no hub needed), a local folder, or a hub id (read with AutoConfig when the hub is
reachable). Prints the estimated peak of a rollout and of an update, first adding the options of
train.py one at a time, then removing each one from the full set:

    chunked      log-probs at agent tokens in chunks (machinery/logprobs.py) instead of (B, T, V) logits
    micro        --micro-batch-size: rows per forward/backward (gradient accumulation); without
                 it the plan takes the whole minibatch at once (--micro-batch-tokens 0), an upper
                 bound: train.py's default token budget already cuts micro-batches of long rows
    ckpt         --gradient-checkpointing: keep each layer's input, recompute the rest in backward
    bf16         --mixed-precision bf16: autocast at rollout and update: activations and values in 2
                 bytes; keys stay fp32 (RoPE multiplies them by fp32 cos/sin); weights stay fp32, plus
                 autocast's bf16 copy of every trained weight while it is on (2P)
    ref-cpu      --ref-device cpu: the frozen reference model off the accelerator (not with LoRA)
    gen-batch    --generation-batch-size G: at most G episodes run a forward at once (the prefill's
                 transient); it does NOT bound the KV cache of whole-conversation episodes, whose
                 caches are all kept between turns
    lora         --lora-rank R: frozen base (in bf16 with bf16), trainable adapters; reference =
                 the base with adapters off (no second copy)

The model of memory (bytes; P parameters, L layers, H hidden, I MLP width, V vocabulary):
    weights 4P (fp32, Accelerate keeps fp32 weights under bf16), gradients 4P, AdamW 8P;
    reference 4P (2P in bf16) on the accelerator unless on CPU;
    per token and layer, the activations a backward pass keeps: ACT_COEF_H * H + ACT_COEF_I * I
    values (attention through SDPA/flash, no T x T matrix), in the activation dtype; with
    checkpointing only the layer input (H fp32 values) plus one layer's activations at a time;
    logits, old path: OLD_LOGIT_COPIES float32 copies of (rows, T, V), for the whole rollout
    batch at once in the reference pass (as the old train.py did); chunked: CHUNK_COPIES (C, V);
    rollout (what it really holds, measured with tests/test_precision.py's models and
    benchmarks/gpu_check.py): weights + AdamW's states + the reference + autocast's bf16 weight
    copy, the KV cache of EVERY episode of the rollout batch at full length (whole-conversation
    mode keeps each generation batch's cache between turns), L * kv_heads * head_dim * tokens
    elements each for keys and values, keys 4 bytes, values 4 (2 under bf16), and one generation
    batch's prefill transient.
PPO (--algo ppo) adds its critic (ppo.Critic): a copy of the backbone (the LM head left out) with
a scalar head that trains what the policy trains: every weight in float32 with gradients and
AdamW's two moments (16 bytes a parameter), or under LoRA a frozen copy of the base (2 bytes in
bf16) and its own adapters; its forward's activations are alive beside the policy's until the
loss's backward (the value loss and the policy loss are one backward), so they count twice.
The constants were fitted to what `benchmarks/update_memory.py` measured on CPU (docs/reproduce.md);
the estimate is a guide to which flags a card needs, not a promise to the last GB.
"""

import argparse
import dataclasses
import math
from dataclasses import dataclass

# Fitted to benchmarks/update_memory.py on CPU (float32; SmolLM2-135M and a V = 151,936 Qwen2 shape):
ACT_COEF_H = 10  # per-layer saved values per token, in units of H (norms, q/k/v/o, residuals)
ACT_COEF_I = 4  # ... and of I (gate, up, act(gate) times up: down's input)
OLD_LOGIT_COPIES = 5.5  # float32 (B, T, V) copies alive at the old path's peak (measured 5.1-5.3)
CHUNK_COPIES = 6  # the same, for one (C, V) chunk (measured 5-6)
CHUNK_ELEMENTS = 2**25  # logprobs.CHUNK_ELEMENTS
GB = 1e9
SPARE = 0.9  # a plan fits when its estimate is under 90% of the card (fragmentation, CUDA context)


@dataclass
class Shape:
    """The numbers of a decoder-only transformer that decide its memory."""

    vocab: int
    hidden: int
    inter: int
    layers: int
    heads: int
    kv_heads: int
    tied: bool
    qkv_bias: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def params(self) -> int:
        H, kv = self.hidden, self.kv_heads * self.head_dim
        attn = H * H + 2 * H * kv + H * H + (H + 2 * kv if self.qkv_bias else 0)
        layer = attn + 3 * H * self.inter + 2 * H
        return self.vocab * H * (1 if self.tied else 2) + self.layers * layer + H

    def backbone_params(self) -> int:
        """The decoder without the LM head (what PPO's critic copies); tied: the head is the embedding."""
        return self.params() - (0 if self.tied else self.vocab * self.hidden)

    def lora_params(self, r: int) -> int:
        """Rank-r adapters on every linear layer of every block: r * (in + out) each."""
        H, kv, I = self.hidden, self.kv_heads * self.head_dim, self.inter
        per_layer = r * ((H + H) * 2 + (H + kv) * 2 + (H + I) * 2 + (I + H))
        return self.layers * per_layer


# Published configs (config.json of each model on the Hugging Face hub).
KNOWN = {
    "Qwen/Qwen2.5-0.5B-Instruct": Shape(151936, 896, 4864, 24, 14, 2, tied=True),
    "Qwen/Qwen2.5-1.5B-Instruct": Shape(151936, 1536, 8960, 28, 12, 2, tied=True),
    "Qwen/Qwen2.5-3B-Instruct": Shape(151936, 2048, 11008, 36, 16, 2, tied=True),
    "Qwen/Qwen2.5-7B-Instruct": Shape(152064, 3584, 18944, 28, 28, 4, tied=False),
    "HuggingFaceTB/SmolLM2-135M-Instruct": Shape(49152, 576, 1536, 30, 9, 3, tied=True, qkv_bias=False),
}


def shape_of(model: str) -> Shape:
    if model in KNOWN:
        return KNOWN[model]
    from transformers import AutoConfig  # a local folder, or a hub id when the hub is reachable

    c = AutoConfig.from_pretrained(model)
    return Shape(
        c.vocab_size,
        c.hidden_size,
        c.intermediate_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
        tied=bool(getattr(c, "tie_word_embeddings", False)),
        qkv_bias=bool(getattr(c, "attention_bias", c.model_type == "qwen2")),
    )


@dataclass
class Run:
    """The sizes of one training step and the options that are on."""

    seq_len: int = 8192  # tokens per trajectory (one row: full context)
    agent_frac: float = 0.5  # share of those tokens that are the agent's own
    minibatch_size: int = 8  # trajectories per optimizer step
    rollout_batch: int = 32  # trajectories generated at once (tasks_per_step x group_size)
    micro_batch_size: int = 1  # rows per forward/backward when `micro` is on
    generation_batch_size: int = 8  # episodes generating at once when `gen_batch` is on
    lora_rank: int = 64
    chunked: bool = False
    micro: bool = False
    ckpt: bool = False
    bf16: bool = False
    ref_cpu: bool = False
    lora: bool = False
    gen_batch: bool = False
    critic: bool = False  # --algo ppo: the critic's copy of the backbone (not an option: the algorithm's)


OPTIONS = [
    "chunked",
    "micro",
    "ckpt",
    "bf16",
    "ref_cpu",
    "gen_batch",
    "lora",
]  # the plan adds them in this order


def autocast_copy(s: Shape, r: Run) -> float:
    """Bytes of autocast's cache: a bf16 copy of every fp32 weight that requires grad, alive for
    the whole autocast region (the rollout; each micro-batch's forward and backward). A LoRA base
    is frozen and already bf16: only the adapters are copied."""
    if not r.bf16:
        return 0.0
    return 2 * (s.lora_params(r.lora_rank) if r.lora else s.params())


def critic_parts(s: Shape, r: Run) -> dict[str, float]:
    """Bytes of PPO's critic: its weights (a frozen base copy under LoRA, plus the float32 weights it
    trains), their gradients, AdamW's two moments, autocast's bf16 copy of what it trains."""
    if not r.critic:
        return {"weights": 0.0, "grads": 0.0, "adam": 0.0, "autocast": 0.0}
    B = s.backbone_params()
    trained = s.lora_params(r.lora_rank) if r.lora else B
    frozen = (2 if r.bf16 else 4) * B if r.lora else 0
    return {
        "weights": frozen + 4 * trained,
        "grads": 4 * trained,
        "adam": 8 * trained,
        "autocast": 2 * trained * r.bf16,
    }


def update_parts(s: Shape, r: Run) -> dict[str, float]:
    """Bytes of each part alive at the peak of an update (policy forward/backward + optimizer)."""
    P = s.params()
    c = critic_parts(s, r)
    act = 2 if r.bf16 else 4
    trained = s.lora_params(r.lora_rank) if r.lora else P
    parts = {
        "weights": (2 * P if r.lora and r.bf16 else 4 * P) + (4 * trained if r.lora else 0),
        "grads+adam": 12 * trained,
        "reference": 0 if (r.ref_cpu or r.lora) else (2 if r.bf16 else 4) * P,
        "autocast_copy": autocast_copy(s, r) + c["autocast"],
        "critic": c["weights"] + c["grads"] + c["adam"],
    }
    rows = r.micro_batch_size if r.micro else r.minibatch_size
    tokens = rows * r.seq_len
    per_layer = (ACT_COEF_H * s.hidden + ACT_COEF_I * s.inter) * act  # bytes per token and layer
    if r.ckpt:
        parts["activations"] = tokens * (s.layers * s.hidden * 4 + per_layer)
    else:
        parts["activations"] = tokens * s.layers * per_layer
    parts["activations"] *= 2 if r.critic else 1  # the critic's forward, alive until the same backward
    if r.chunked:
        chunk = max(1, CHUNK_ELEMENTS // s.vocab)
        parts["logits"] = CHUNK_COPIES * 4 * min(chunk, int(tokens * r.agent_frac)) * s.vocab
    else:
        parts["logits"] = OLD_LOGIT_COPIES * 4 * tokens * s.vocab
    return parts


def reference_pass(s: Shape, r: Run) -> float:
    """Bytes beyond the resident state while the reference log-probs are computed (no grad)."""
    act = 2 if r.bf16 else 4
    if r.chunked:  # per micro-batch, one layer's activations at a time, one chunk of logits
        rows = r.micro_batch_size if r.micro else r.minibatch_size
        return rows * r.seq_len * (4 * s.hidden + 2 * s.inter) * act + CHUNK_COPIES * 4 * CHUNK_ELEMENTS
    # the old train.py: one forward over the whole rollout batch, full logits
    return r.rollout_batch * r.seq_len * (s.vocab * 4 * 3 + (4 * s.hidden + 2 * s.inter) * act)


def rollout_parts(s: Shape, r: Run) -> dict[str, float]:
    """Bytes at the peak of a rollout: the resident training state, autocast's weight copy, the
    kept KV caches of every episode, one generation batch's prefill."""
    u = update_parts(s, r)
    act = 2 if r.bf16 else 4
    running = min(r.rollout_batch, r.generation_batch_size if r.gen_batch else r.rollout_batch) * r.seq_len
    kept = r.rollout_batch * r.seq_len  # every episode's cache, kept between turns
    return {
        "resident": u["weights"]
        + u["grads+adam"]
        - 4 * (s.lora_params(r.lora_rank) if r.lora else s.params())
        + u["reference"],  # gradients are freed after the optimizer step
        "critic": critic_parts(s, r)["weights"] + critic_parts(s, r)["adam"],
        "autocast_copy": autocast_copy(s, r) + critic_parts(s, r)["autocast"],
        "kv_cache": s.layers * s.kv_heads * s.head_dim * (4 + act) * kept,  # keys fp32, values in act
        "prefill": running * (4 * s.hidden + 2 * s.inter) * act,  # one layer's transient at a time
    }


def peaks(s: Shape, r: Run) -> tuple[float, float]:
    u = update_parts(s, r)
    resident = u["weights"] + u["grads+adam"] + u["reference"] + u["critic"]
    update = max(sum(u.values()), resident + u["autocast_copy"] + reference_pass(s, r))
    return sum(rollout_parts(s, r).values()) / GB, update / GB


def flags(r: Run) -> str:
    f = {
        "micro": f"--micro-batch-size {r.micro_batch_size}",
        "ckpt": "--gradient-checkpointing true",
        "bf16": "--mixed-precision bf16",
        "ref_cpu": "--ref-device cpu",
        "lora": f"--lora-rank {r.lora_rank}",
        "gen_batch": f"--generation-batch-size {r.generation_batch_size}",
    }
    on = [
        k for k in f if getattr(r, k) and not (k == "ref_cpu" and r.lora)
    ]  # LoRA: no reference copy to move
    return " ".join(f[k] for k in on) or "(none)"


def table(s: Shape, base: Run, gpu_gb: float) -> list[str]:
    lines = [
        f"| options | rollout GB | update GB | fits {gpu_gb:.0f} GB (with 10% spare) |",
        "|---|---|---|---|",
    ]
    row = lambda name, r: "| {} | {:.1f} | {:.1f} | {} |".format(
        name, *peaks(s, r), "yes" if max(peaks(s, r)) <= SPARE * gpu_gb else "no"
    )
    r = dataclasses.replace(base, **{o: False for o in OPTIONS})
    lines.append(row("none (the old path)", r))
    for o in OPTIONS:  # add one at a time
        r = dataclasses.replace(r, **{o: True})
        lines.append(row("+ " + o, r))
    for o in OPTIONS:  # everything but one
        lines.append(row("all but " + o, dataclasses.replace(r, **{o: False})))
    return lines


def plan(run: Run, gpu_gb: float) -> list[str]:
    """For each Qwen2.5 size: the fewest options (in the order above) that fit, every weight trained
    first; where even all of them do not, fewer episodes in flight (--episodes-in-flight: the step's
    batch unchanged, its kept KV caches fewer), as preset_fit does; LoRA, which changes the method,
    only where full training does not fit at all."""
    out = [
        "| model | params | flags | episodes in flight | rollout GB | update GB |",
        "|---|---|---|---|---|---|",
    ]
    for name in ["Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]:
        s = shape_of(name)
        fit = lambda r, s=s: max(peaks(s, r)) <= SPARE * gpu_gb  # noqa: E731
        for lora in (False, True):
            r = dataclasses.replace(run, chunked=True, lora=lora)
            for o in OPTIONS[1:-1]:  # all but LoRA
                if fit(r):
                    break
                r = dataclasses.replace(r, **{o: True})
            while not fit(r) and r.rollout_batch > 1:
                r = dataclasses.replace(r, rollout_batch=r.rollout_batch // 2)
            if fit(r):
                break
        ro, up = peaks(s, r)
        cap = f" --episodes-in-flight {r.rollout_batch}" if r.rollout_batch < run.rollout_batch else ""
        out.append(
            f"| {name} | {s.params() / 1e9:.2f}B | `{flags(r)}{cap}`{'' if fit(r) else ' (does not fit)'} | "
            f"{r.rollout_batch} | {ro:.1f} | {up:.1f} |"
        )
    return out


PRESET_MODELS = ["Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct"]


def preset_run(preset) -> Run:
    """A preset's step as the plan counts it: rows of the reference's whole budget (its prompt and
    whole-conversation tokens: the longest an episode may grow there), every episode of the step
    rolled out at once, and the flags it sets (micro-batches of 1, checkpointing, bf16)."""
    f = {k: s.value for k, s in preset.flags.items()}
    return Run(
        seq_len=preset.tokens_per_episode,
        minibatch_size=f["minibatch_size"],
        rollout_batch=f["tasks_per_step"] * f["group_size"],
        micro_batch_size=f["micro_batch_size"],
        chunked=True,
        micro=True,
        ckpt=f["gradient_checkpointing"],
        bf16=f["mixed_precision"] == "bf16",
    )


@dataclass
class Fit:
    """What one preset needs on one card: the flags beyond its own, and the step they leave."""

    flags: list[str]  # train.py's flags to add after the preset's, in the order a reader weighs them
    run: Run  # the step as planned with them (its rollout_batch: the episodes in flight at once)
    episodes: int  # the step's episodes, the preset's tasks x group: what the update learns from
    in_flight: int  # the most episodes whose caches fit at once (the rollout's chunk, the evaluation's too)
    rollout_gb: float
    update_gb: float

    @property
    def fits(self) -> bool:
        return self.in_flight > 0


GENERATION_BATCHES = (128, 64, 32, 16, 8)  # --generation-batch-size tried, largest first
IN_RUN_EVAL = 200  # train.py's --eval-episodes default: test tasks in flight at once at evaluation


def preset_fit(preset, model: str, gpu_gb: float) -> Fit:
    """The flags a preset needs to fit under SPARE x the card, the step's own method first: every
    weight trained, then the reference on the CPU, then LoRA (train.py refuses the two together:
    a LoRA run's reference is its own base). The step's batch is always the preset's: where its
    episodes' KV caches do not fit at once (whole-conversation episodes keep theirs between turns),
    --episodes-in-flight N rolls the step out in chunks of the most that fit, and the in-run
    evaluation in the same chunks. Only where not even one episode's generation fits is a
    --generation-batch-size tried, the largest first."""
    s, base = shape_of(model), preset_run(preset)
    episodes = base.rollout_batch
    at_once = max(episodes, min(IN_RUN_EVAL, test_tasks(preset)))  # the step's, or the evaluation's
    ok = lambda r: max(peaks(s, r)) <= SPARE * gpu_gb  # noqa: E731
    for lora, ref_cpu in ((False, False), (False, True), (True, False)):
        for g in (None, *GENERATION_BATCHES):
            r = dataclasses.replace(base, lora=lora, ref_cpu=ref_cpu)
            if g:
                r = dataclasses.replace(r, gen_batch=True, generation_batch_size=g)
            n = next((n for n in range(at_once, 0, -1) if ok(dataclasses.replace(r, rollout_batch=n))), 0)
            if n:
                r = dataclasses.replace(r, rollout_batch=min(n, episodes))
                flags = [f"--episodes-in-flight {n}"] * (n < at_once) + ["--ref-device cpu"] * ref_cpu
                flags += [f"--generation-batch-size {g}"] * bool(g) + [f"--lora-rank {r.lora_rank}"] * lora
                return Fit(flags, r, episodes, n, *peaks(s, r))
    r = dataclasses.replace(base, rollout_batch=1, lora=True, gen_batch=True)
    return Fit([f"--lora-rank {r.lora_rank}"], r, episodes, 0, *peaks(s, r))


def test_tasks(preset) -> int:
    """The size of the preset's test split (envs/tasks.py)."""
    from envs import ENVS

    v = {k: x.value for k, x in preset.flags.items()}
    return len(ENVS[v["env"]].splits[v.get("test_split", "test")])


def presets():
    """presets.PRESETS, importable from this folder as well as from the project's root."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project's root
    from presets import PRESETS

    return PRESETS


def preset_table(gpu_gb: float) -> list[str]:
    """Every preset at each model size on one card: the flags it needs beyond its own, and the
    peaks they leave (benchmarks/memory_plan.py --presets; docs/reproduce.md's tables)."""
    sizes = [m.split("-")[1] for m in PRESET_MODELS]  # 1.5B, 3B, 7B
    out = [
        f"| preset ({gpu_gb:.0f} GB) | tokens a row | episodes a step | " + " | ".join(sizes) + " |",
        "|---|---|---|" + "---|" * len(sizes),
    ]
    for name, preset in presets().items():
        cells = []
        for model in PRESET_MODELS:
            fit = preset_fit(preset, model, gpu_gb)
            need = "`" + " ".join(fit.flags) + "`" if fit.flags else "as is"
            cells.append(
                f"{need} ({fit.rollout_gb:.0f} / {fit.update_gb:.0f} GB)" if fit.fits else "does not fit"
            )
        r = preset_run(preset)
        out.append(f"| {name} | {r.seq_len} | {r.rollout_batch} | " + " | ".join(cells) + " |")
    return out


def preset_commands(model: str, gpu_gb: float = 80.0) -> list[str]:
    """One train.py command per preset that the plan fits on the card (docs/reproduce.md's commands)."""
    size = model.split("-")[1].lower()
    out = []
    for name, preset in presets().items():
        fit = preset_fit(preset, model, gpu_gb)
        run = "runs/" + name.replace("/", "-") + "-" + size
        out.append(" ".join(["python train.py --preset", name, "--model", model, *fit.flags, "--out", run]))
    return out


# The time a step takes, estimated from its FLOPs (no GPU has run one): an H100 SXM's published peaks.
H100_FLOPS = 989e12  # dense bf16 FLOP/s
H100_BYTES = 3.35e12  # HBM3 bytes/s
MFU = 0.4  # assumed share of the peak reached by the update's and the prefill's matmuls
DECODE_EFF = 0.5  # assumed share of the roofline reached by a decode step of agent.py's loop


def step_seconds(preset, model: str, fit: Fit) -> tuple[float, float]:
    """(rollout, update) seconds of one step of `fit`, every row at the plan's full length. n is the
    parameters that multiply (all but the embedding's lookup): 2n FLOPs a token forward. Rollout:
    observations prefilled at 2n a token; the step's episodes run in chunks of the episodes in
    flight, each chunk in generation batches of G; a decode step makes one token for each of the G
    episodes generating, as slow as its FLOPs (2n G) or its reads (the bf16 weights and the caches,
    half full on average) allow. Update: the reference's and pi_old's forwards (2n a token each),
    then each epoch a forward (2n), a backward (4n; 2n under LoRA, no weight gradients) and
    checkpointing's second forward (2n)."""
    s, r = shape_of(model), fit.run
    n = s.params() - s.vocab * s.hidden
    tokens = fit.episodes * r.seq_len
    agent = tokens * r.agent_frac
    g = min(r.rollout_batch, r.generation_batch_size if r.gen_batch else r.rollout_batch)
    kv_token = s.layers * s.kv_heads * s.head_dim * (4 + 2)  # keys fp32, values bf16
    reads = 2 * s.params() + g * r.seq_len / 2 * kv_token
    decode = max(2 * n * g / H100_FLOPS, reads / H100_BYTES) / DECODE_EFF
    passes = math.ceil(fit.episodes / r.rollout_batch) * math.ceil(r.rollout_batch / g)  # generation batches
    rollout = (tokens - agent) * 2 * n / (MFU * H100_FLOPS) + passes * (agent / fit.episodes) * decode
    epochs = preset.flags["epochs"].value
    per_token = 4 * n + epochs * (2 * n + (2 if r.lora else 4) * n + (2 * n if r.ckpt else 0))
    return rollout, tokens * per_token / (MFU * H100_FLOPS)


def time_table(gpu_gb: float = 80.0) -> list[str]:
    """Each preset's estimated wall time on one H100 with the flags that fit (docs/reproduce.md)."""
    models = PRESET_MODELS[1:]  # 3B, 7B
    sizes = [m.split("-")[1] for m in models]
    out = [
        "| preset | steps | "
        + " | ".join(f"{z}: rollout + update a step | {z}: the run" for z in sizes)
        + " |",
        "|---|---|" + "---|---|" * len(sizes),
    ]
    for name, preset in presets().items():
        steps, cells = preset.flags["steps"].value, []
        for model in models:
            ro, up = step_seconds(preset, model, preset_fit(preset, model, gpu_gb))
            cells.append(f"{ro:.0f} + {up:.0f} s | {steps * (ro + up) / 3600:.0f} h")
        out.append(f"| {name} | {steps} | " + " | ".join(cells) + " |")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct")
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--agent-frac", type=float, default=0.5, help="share of tokens that are the agent's")
    p.add_argument("--minibatch-size", type=int, default=8)
    p.add_argument("--rollout-batch", type=int, default=32, help="trajectories generated at once")
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--generation-batch-size", type=int, default=8)
    p.add_argument("--lora-rank", type=int, default=64)
    p.add_argument("--gpu-gb", type=float, default=80.0)
    p.add_argument("--plan", action="store_true", help="the 1.5B / 3B / 7B plan for one GPU")
    p.add_argument("--algo", default="grpo", help="ppo: count the critic (the other algorithms have none)")
    p.add_argument(
        "--presets", action="store_true", help="each preset (presets/) at 1.5B, 3B, 7B on 80 and 141 GB"
    )
    a = p.parse_args()
    if a.presets:
        for gpu_gb in (80.0, 141.0):
            print("\n".join(preset_table(gpu_gb)) + "\n")
        for model in PRESET_MODELS[1:]:
            print("\n".join(preset_commands(model)) + "\n")
        print("\n".join(time_table()))
        return
    run = Run(
        seq_len=a.seq_len,
        agent_frac=a.agent_frac,
        minibatch_size=a.minibatch_size,
        rollout_batch=a.rollout_batch,
        micro_batch_size=a.micro_batch_size,
        lora_rank=a.lora_rank,
        generation_batch_size=a.generation_batch_size,
        critic=a.algo == "ppo",
    )
    print(
        f"seq_len {a.seq_len}, minibatch {a.minibatch_size} trajectories, rollout batch {a.rollout_batch}, "
        f"micro-batch {a.micro_batch_size}, LoRA rank {a.lora_rank}, {a.algo}"
    )
    if a.plan:
        print("\n".join(plan(run, a.gpu_gb)))
        return
    s = shape_of(a.model)
    print(
        f"{a.model}: {s.params() / 1e9:.3f}B parameters, {s.layers} layers, hidden {s.hidden}, "
        f"vocabulary {s.vocab}; LoRA rank {a.lora_rank}: {s.lora_params(a.lora_rank) / 1e6:.1f}M"
    )
    print("\n".join(table(s, run, a.gpu_gb)))


if __name__ == "__main__":
    main()
