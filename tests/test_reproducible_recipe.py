"""The same command gives the same checkpoint: the paper table's TextCraft imitation recipe
(benchmarks/paper_table.py: the expert's demonstrations, SFT, one DAgger round: the SFT policy's own
episodes, relabelled by the expert, then SFT again) run twice, each run in a process of its own with
a different PYTHONHASHSEED (the iteration order of a set of strings differs from one process to the
next), writes the same files and bit-identical weights at every stage.

The recipe's commands and flags, scaled down: the tiny policy (built once, so that both runs start
from the same weights, as the recipe starts from the same SmolLM2) instead of SmolLM2, fewer tasks
and steps; free generation and whole conversations as the recipe's, and bf16 autocast with the bf16
sampling copy (agent.generation_model), what `--mixed-precision auto` gives SmolLM2 on this
project's CPU. One torch thread in both runs (`--threads 1`, as the recipe's `extra` passes on a
shared machine)."""

import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FREE = ["--mask-actions", "off", "--context-turns", "0", "--max-new-tokens", "64"]
SFT = ["--batch-size", "4", "--lr", "1e-4", *FREE[:4], "--threads", "1", "--mixed-precision", "bf16"]


def recipe(root: str, start: str) -> dict:
    """The stages of paper_table.recipe for TextCraft, in this process, from the model `start`;
    returns a fingerprint (sha256) of what each stage wrote."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from paper_table import first_successes

    import eval as evaluation
    import sft
    from envs import ENVS

    def run(main, *argv):
        main([str(a) for a in argv])

    d, parallel = root, 8
    run(evaluation.main, "--env", "textcraft", "--expert", "on", "--split", "train", "--limit", 10,
        "--parallel", parallel, "--out", f"{d}/demos")  # fmt: skip
    run(sft.main, "--model", start, "--env", "textcraft", "--data", f"{d}/demos/trajectories.jsonl",
        "--demos", 8, "--epochs", 2, *SFT, "--out", f"{d}/sft")  # fmt: skip
    first_successes(f"{d}/demos/trajectories.jsonl", f"{d}/demos/first.jsonl", 8)
    ids = ",".join(str(i) for i in ENVS["textcraft"].splits["depth1-train"][:4])
    run(evaluation.main, "--model", f"{d}/sft/checkpoint", "--env", "textcraft", "--task-ids", ids,
        "--parallel", parallel, "--horizon", 5, *FREE, "--threads", 1, "--mixed-precision", "bf16",
        "--out", f"{d}/dagger_policy")  # fmt: skip
    run(sft.main, "--env", "textcraft", "--relabel", f"{d}/dagger_policy/trajectories.jsonl",
        "--out", f"{d}/dagger", "--parallel", parallel)  # fmt: skip
    run(sft.main, "--model", f"{d}/sft/checkpoint", "--env", "textcraft", "--epochs", 1, *SFT,
        "--out", f"{d}/sft2", "--data", f"{d}/demos/first.jsonl,{d}/dagger/trajectories.jsonl")  # fmt: skip
    return {
        "demos": file_hash(f"{d}/demos/trajectories.jsonl"),
        "sft": weights_hash(f"{d}/sft/checkpoint"),
        "dagger_policy": file_hash(f"{d}/dagger_policy/trajectories.jsonl"),
        "dagger": file_hash(f"{d}/dagger/trajectories.jsonl"),
        "sft2": weights_hash(f"{d}/sft2/checkpoint"),
    }


def file_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def weights_hash(folder: str) -> str:
    """sha256 over a checkpoint's tensors: every name, dtype, shape and byte, in name order."""
    from safetensors.torch import load_file

    h = hashlib.sha256()
    state = load_file(os.path.join(folder, "model.safetensors"))
    for name in sorted(state):
        x = state[name]
        h.update(f"{name} {x.dtype} {tuple(x.shape)}".encode())
        h.update(x.float().numpy().tobytes())  # (exact: float32 and bf16 values are float32 values)
    return h.hexdigest()


def test_the_recipe_run_twice_gives_identical_weights(tmp_path):
    from tiny import build_tiny_policy

    start = str(tmp_path / "tiny")
    build_tiny_policy("textcraft", start, warmup_steps=5, episodes=40)
    fingerprints = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"run{hash_seed}"
        code = (
            f"import json, sys; sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, 'tests')!r}]; "
            f"from test_reproducible_recipe import recipe; "
            f"print('FINGERPRINT', json.dumps(recipe({str(out)!r}, {start!r})))"
        )
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, OMP_NUM_THREADS="1")
        r = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
        )  # a hang's guard: a minute or two here, over 5 minutes with the default kernels on a busy machine
        assert r.returncode == 0, r.stderr[-3000:]
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("FINGERPRINT "))
        fingerprints.append(json.loads(line.removeprefix("FINGERPRINT ")))
    first, second = fingerprints
    assert first == second, f"stages that differ: {[k for k in first if first[k] != second[k]]}"
    # what the bits depend on beyond the command is recorded, so that a rerun elsewhere can tell
    import torch

    sft_summary = json.load(open(tmp_path / "run1" / "sft" / "summary.json"))
    eval_summary = json.load(open(tmp_path / "run1" / "dagger_policy" / "summary.json"))
    assert sft_summary["threads"] == eval_summary["threads"] == 1
    assert sft_summary["torch"] == torch.__version__
    assert sft_summary["cpu"] == eval_summary["cpu"] == torch.backends.cpu.get_cpu_capability()
    assert eval_summary["mixed_precision"] == "bf16"
