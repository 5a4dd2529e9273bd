"""The presets on the card you have: the first steps of each, every step's time and peak memory
printed beside benchmarks/memory_plan.py's plan for it (the last part of benchmarks/gpu_check.sh).

    python benchmarks/preset_check.py                          # every preset, 2 steps each, on the GPU
    python benchmarks/preset_check.py --presets scalinginter/babyai,agentgym-rl/webarena --steps 1
    python benchmarks/preset_check.py --cpu                    # a tiny random Qwen2: proves the script

The model: Qwen2.5-3B-Instruct where the machine holds it offline (the Hugging Face cache), else the
largest of Qwen2.5-1.5B and 0.5B-Instruct it holds, else SmolLM2-135M-Instruct (this project's
own copy, always here); --model names another. Each preset runs as its own train.py process, so
one that fails does not stop the rest: the preset, the flags memory_plan.preset_fit gives for this
card, --steps, and no evaluation. Its checkpoint is deleted afterwards (6 GB at 3B).

The table, a row a step: the horizon; the rollout's and the update's seconds, measured, and the
plan's estimate for an H100 (memory_plan.step_seconds, for rows of the reference's whole budget:
a first stage's short episodes take less); the peak memory measured (torch.cuda.max_memory_allocated,
each step's own) and the plan's (the larger of its rollout and update peaks). Exits non-zero when a
run failed, or, on a GPU, when a measured peak is over the plan's: the plan is what the page's
commands rely on. On the CPU (--cpu) the model is a random tiny Qwen2, the lengths are cut (2
tokens a turn, 2 turns), 8 episodes are in flight, and the peaks are the process's RSS, which
the plan does not model: the run proves the script, not the plan.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import memory_plan  # noqa: E402

OFFLINE = ("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"  # memory_plan's name for train.py's `--model smollm2`
CPU_FLAGS = ["--device", "cpu", "--threads", "1", "--max-new-tokens", "2", "--rounds", "2",
             "--episodes-in-flight", "8"]  # fmt: skip


def cached(model: str) -> bool:
    """Whether the Hugging Face cache holds `model`, a hub id (then it loads with no network)."""
    from huggingface_hub import try_to_load_from_cache

    if os.path.exists(model) or model.count("/") != 1:  # a local folder, or no hub id
        return False
    return isinstance(try_to_load_from_cache(model, "config.json"), str)


def pick_model() -> str:
    """The largest model of OFFLINE in the Hugging Face cache, else SmolLM2 (vendored)."""
    return next((model for model in OFFLINE if cached(model)), SMOLLM2)


def tiny_qwen2(folder: str) -> str:
    """A random Qwen2 (1 layer, width 8) with the tiny policy's tokenizer: the architecture's code
    paths at the least cost (tests/test_presets.py starts every preset with it)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import tiny

    tok = tiny.load(tiny.tiny_policy_path("babyai"), "babyai").tokenizer
    torch.manual_seed(0)
    ids = dict(eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, **ids)  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def card_gb() -> float:
    import torch

    return torch.cuda.get_device_properties(0).total_memory / 1e9


def run_preset(name: str, model: str, flags: list[str], steps: int, out: str, timeout: float) -> tuple:
    """train.py on one preset; returns (its metrics rows, the log's tail when it failed)."""
    argv = [sys.executable, "train.py", "--preset", name, "--model", "smollm2" if model == SMOLLM2 else model,
            *flags, "--steps", str(steps), "--eval-episodes", "0", "--out", out]  # fmt: skip
    print("$", " ".join(argv[1:]), flush=True)
    env = dict(os.environ, **({"HF_HUB_OFFLINE": "1"} if cached(model) else {}))  # no hub calls
    with open(out + ".log", "w") as log:
        try:
            run = subprocess.run(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout
            )
            code = run.returncode
        except subprocess.TimeoutExpired:
            code = f"timed out after {timeout:.0f} s"
    shutil.rmtree(os.path.join(out, "checkpoint"), ignore_errors=True)
    path = os.path.join(out, "metrics.jsonl")
    rows = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    tail = "" if code == 0 else f"exit {code}: " + " | ".join(open(out + ".log").read().splitlines()[-5:])
    return rows, tail


def main(argv=None) -> int:
    from presets import PRESETS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="all", help="comma-separated preset names, or all")
    p.add_argument("--model", default="", help="default: the largest Qwen2.5 held offline, else SmolLM2")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--cpu", action="store_true", help="a tiny random Qwen2 on the CPU, lengths cut")
    p.add_argument("--timeout", type=float, default=1800, help="seconds a preset may run")
    p.add_argument("--out", default="runs/preset_check")
    a = p.parse_args(argv)
    names = list(PRESETS) if a.presets == "all" else a.presets.split(",")
    if unknown := [n for n in names if n not in PRESETS]:
        p.error(f"unknown preset {unknown[0]}; one of {', '.join(PRESETS)}")
    os.makedirs(a.out, exist_ok=True)
    model = a.model or (tiny_qwen2(tempfile.mkdtemp()) if a.cpu else pick_model())
    gpu_gb = 80.0 if a.cpu else card_gb()
    print(
        f"model {model}; plan for a card of {gpu_gb:.0f} GB"
        + (" (CPU: the plan is not compared)" if a.cpu else "")
    )
    header = ["| preset | flags beyond the preset | step | horizon | rollout s (plan, H100) |",
              " update s (plan, H100) | peak GB | plan's peak GB |"]  # fmt: skip
    table, failed = ["".join(header), "|---|---|---|---|---|---|---|---|"], []
    for name in names:
        fit = memory_plan.preset_fit(PRESETS[name], model, gpu_gb)
        flags = [f for flag in fit.flags for f in flag.split()] + (CPU_FLAGS if a.cpu else [])
        rows, tail = run_preset(
            name, model, flags, a.steps, os.path.join(a.out, name.replace("/", "-")), a.timeout
        )
        ro, up = memory_plan.step_seconds(PRESETS[name], model, fit)
        plan_gb = max(fit.rollout_gb, fit.update_gb)
        for r in rows:
            over = not a.cpu and r["perf/peak_memory_gb"] > plan_gb
            plan = ("–", "–", "–") if a.cpu else (f"{ro:.0f}", f"{up:.0f}", f"{plan_gb:.1f}")
            table.append(
                f"| {name} | `{' '.join(fit.flags) or '(none)'}` | {r['step']} | {r['horizon']} | "
                f"{r['perf/rollout_seconds']:.0f} ({plan[0]}) | {r['perf/update_seconds']:.0f} ({plan[1]}) | "
                f"{r['perf/peak_memory_gb']:.1f}{' OVER' if over else ''} | {plan[2]} |"
            )
            failed += [f"{name}: step {r['step']} peaked at {r['perf/peak_memory_gb']:.1f} GB"] * over
        if tail or len(rows) < a.steps:
            failed.append(f"{name}: {tail or f'{len(rows)} of {a.steps} steps logged'}")
    print("\n".join(table))
    for line in failed:
        print("FAILED", line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
