"""Checkpoints: a run's weights, optimizer, algorithm state and random streams, written so that a
kill at any moment leaves a complete one, and read back by --resume.

Where it sits: train.py calls `save_checkpoint` every --save-every steps and at the end; with
--resume, `checkpoint_folder` finds the folder, update.load_learner restores the optimizer and the
algorithm's state (`load_state`), `restore_rng` every random stream, and `previous_outputs` trims
metrics.jsonl back to the checkpoint's step, so the resumed run continues as the first would have.
"""

import dataclasses
import glob
import json
import os
import shutil

import torch
from accelerate import DistributedType
from tqdm import tqdm

from machinery import dist
from machinery.rng import rng_state, set_rng_state


def save_checkpoint(cfg, learner, step: int) -> None:
    """Write <out>/checkpoint.tmp completely, then rename it to <out>/checkpoint, the previous
    checkpoint becoming <out>/checkpoint.prev: a kill at any moment leaves a complete checkpoint.
    Every process calls it (the weights are gathered under FSDP, and each process's RNG state is
    kept so that --resume with as many processes continues every stream); the main one writes."""
    accelerator, policy, state = learner.accelerator, learner.policy, learner.state
    weights = None  # DDP: every process holds the whole model, policy.model saves itself
    fsdp = accelerator.distributed_type == DistributedType.FSDP
    if fsdp:  # gathered from the shards (LogprobForward's names)
        weights = {
            k.removeprefix("model."): v for k, v in accelerator.get_state_dict(learner.forward).items()
        }
    rngs = dist.gather([rng_state()])
    if accelerator.is_main_process:
        final = os.path.join(cfg.out, "checkpoint")
        tmp, prev = final + ".tmp", final + ".prev"
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written one from a killed run
        os.makedirs(tmp)
        policy.model.save_pretrained(tmp, state_dict=weights)
        policy.tokenizer.save_pretrained(tmp)
        if state is not None:  # the algorithm's own model and optimizer (PPO's critic)
            save_state(state, tmp, accelerator.unwrap_model)
        # FSDP: each process holds its shard of AdamW's state; not saved (--resume starts it afresh)
        torch.save(
            {
                "step": step,
                "optimizer": None if fsdp else learner.optimizer.state_dict(),
                "rng": rngs if len(rngs) > 1 else rngs[0],
                "ref_path": learner.ref_path,
                "config": dataclasses.asdict(cfg),
            },
            os.path.join(tmp, "state.pt"),
        )
        if os.path.isdir(final):
            shutil.rmtree(prev, ignore_errors=True)
            os.replace(final, prev)
        os.replace(tmp, final)
    dist.barrier()


def check_checkpoint(path: str) -> str | None:
    """--resume: empty, or a folder save_checkpoint wrote (or its .prev)."""
    if not path or any(os.path.exists(os.path.join(p, "state.pt")) for p in (path, path + ".prev")):
        return None
    return (
        f"no checkpoint there (looked for {os.path.join(os.path.abspath(path), 'state.pt')}); "
        "allowed: a folder train.py saved, e.g. runs/default/checkpoint"
    )


def checkpoint_folder(path: str) -> str:
    """`path`, or its `.prev` when a kill between save_checkpoint's two renames left no `path`."""
    if not os.path.exists(os.path.join(path, "state.pt")) and os.path.exists(
        os.path.join(path + ".prev", "state.pt")
    ):
        tqdm.write(f"warning: {path} is missing or incomplete; resuming from {path}.prev")
        return path + ".prev"
    return path


def restore_rng(saved: dict, folder: str) -> int:
    """Put back this process's RNG streams as checkpoint `saved` (its state.pt, in `folder`) left
    them. Returns the step to start at."""
    rngs = saved["rng"] if isinstance(saved["rng"], list) else [saved["rng"]]
    if len(rngs) != dist.world():
        raise ValueError(
            f"{folder} was saved by {len(rngs)} processes; resume it with as many, not {dist.world()}"
        )
    set_rng_state(rngs[dist.rank()])
    return saved["step"] + 1


def previous_outputs(cfg, saved: dict | None, start: int, main: bool) -> tuple[dict, list]:
    """The summary and the metrics of the steps before `start`: a resumed run's, trimmed back to its
    checkpoint (outputs of later steps cleared; a run cut short wrote no summary.json, so its
    evaluation before training comes from eval_before/); a fresh run's, empty."""
    summary = {"config": dataclasses.asdict(cfg)}
    summary_path = os.path.join(cfg.out, "summary.json")
    if saved and os.path.exists(summary_path):
        summary = {**json.load(open(summary_path)), "config": dataclasses.asdict(cfg)}
    before = os.path.join(cfg.out, "eval_before", "summary.json")  # a run cut short has no summary.json
    if saved and "eval_before" not in summary and os.path.exists(before):
        summary["eval_before"] = json.load(open(before))
    if main:
        clear_outputs(cfg.out, saved["step"] if saved else 0)
    dist.barrier()  # the main process has trimmed metrics.jsonl: now every process may read it
    metrics_path = os.path.join(cfg.out, "metrics.jsonl")
    history = [r for r in map(json.loads, open(metrics_path)) if r["step"] < start] if saved else []
    return summary, history


def clear_outputs(out: str, step: int) -> None:
    """Remove what an earlier run left in `out` after `step` (metrics.jsonl lines, saved rollouts):
    a fresh run (`step` 0) keeps nothing of it, a resumed one runs what came after its checkpoint again."""
    metrics_path = os.path.join(out, "metrics.jsonl")
    if os.path.exists(metrics_path) and not step:
        os.remove(metrics_path)
    elif os.path.exists(metrics_path):
        keep = [ln for ln in open(metrics_path) if ln.strip() and json.loads(ln)["step"] <= step]
        with open(metrics_path, "w") as f:
            f.writelines(keep)
    for old in glob.glob(os.path.join(out, "rollouts", "step_*.jsonl")):
        if int(os.path.basename(old)[5:-6]) > step:
            os.remove(old)


def save_state(state, folder: str, unwrap=lambda m: m) -> None:
    """An algorithm's `State` (its own model and optimizer: PPO's critic) to <folder>/<name>.pt."""
    torch.save(
        {"model": unwrap(state.model).state_dict(), "optimizer": state.optimizer.state_dict()},
        os.path.join(folder, f"{state.name}.pt"),
    )


def load_state(state, folder: str, unwrap=lambda m: m) -> None:
    """What `save_state` wrote, into `state`'s model and optimizer."""
    saved = torch.load(os.path.join(folder, f"{state.name}.pt"), weights_only=False)
    unwrap(state.model).load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
