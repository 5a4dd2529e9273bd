"""Metrics: each step's line of metrics.jsonl (and TensorBoard), the peak memory, and the curves.

Where it sits: train.py builds every step's line with `step_metrics` (the learning signals join it
from machinery/signals.py), logs it with `log_metrics`, shows a few figures on the progress bar
(`progress`) and draws <out>/curves.png with `plot_curves` at the end.
"""

import json
import os
import time

import numpy as np
import torch

from machinery import dist, signals


def step_metrics(
    step: int, horizon: int, trajs: list, batch, stats: dict, times, epochs: int, device: str
) -> dict:
    """The step's line of metrics.jsonl: its episodes (`trajs`, every process's), speed, memory and
    the update's `stats`. `times`: the step's start, the rollout's seconds, the update's start;
    `epochs`: passes over the batch `batch`."""
    t0, t_roll, t_update = times
    # dist.gather: the same lists on every process, so the adaptive schedule decides the same everywhere
    ep = dist.gather(
        [
            (t.reward, t.success, t.turns, t.truncated, not t.done and t.turns >= horizon, t.over_budget)
            for t in trajs
        ]
    )
    agent_tokens = int(dist.global_sum(int(batch.loss_mask.sum())))
    update_tokens = epochs * dist.global_sum(int(batch.attention_mask.sum()))
    return {
        "step": step,
        "horizon": horizon,
        "charts/reward": float(np.mean([e[0] for e in ep])),
        "charts/success": float(np.mean([e[1] for e in ep])),
        "charts/turns": float(np.mean([e[2] for e in ep])),
        "charts/truncated_replies": sum(e[3] for e in ep),
        # episodes the horizon ended (the env had not said done): the adaptive schedule's signal
        "charts/cut_share": float(np.mean([e[4] for e in ep])),
        "charts/over_budget_share": float(np.mean([e[5] for e in ep])),  # ended by --conversation-tokens
        "charts/tokens_per_s": agent_tokens / max(t_roll, 1e-9),
        "charts/seconds_per_step": time.time() - t0,
        "perf/update_tokens_per_s": update_tokens / (time.time() - t_update),
        "perf/rollout_seconds": t_roll,
        "perf/update_seconds": time.time() - t_update,  # pi_old, the reference, advantages, the passes
        "perf/peak_memory_gb": dist.global_max(peak_memory_gb(device)),  # the largest process's
        **stats,
    }


def progress(m: dict, fired: list) -> dict:
    """The progress bar's short figures: horizon, success, turns, flat groups, alarms so far."""
    return {
        "h": m["horizon"],
        "succ": f"{m['charts/success']:.2f}",
        "turns": f"{m['charts/turns']:.1f}",
        "flat": f"{m['signals/flat_groups']:.2f}",
        "alarms": len(fired),
    }


def log_metrics(path: str, writer, m: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(m) + "\n")
    if writer:
        for k, v in m.items():
            if k != "step":
                writer.add_scalar(k, v, m["step"])


def tensorboard(out: str):
    """A TensorBoard writer to <out>/tb, or None without TensorBoard."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(os.path.join(out, "tb"))


def peak_memory_gb(device: str) -> float:
    """Peak memory since the last call: the accelerator's allocations, or the process's RSS."""
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 1e9
        torch.cuda.reset_peak_memory_stats()
        return peak
    try:
        peak = (
            next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
            * 1024
            / 1e9
        )
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS to the current one (Linux)
        return peak
    except OSError:
        return float("nan")


def plot_curves(metrics_path: str, png: str):
    """Success (overall and per task category), turns and horizon, and the learning signals with
    their alarms (machinery/signals.py) per step, for people who would rather see than read."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [json.loads(line) for line in open(metrics_path)] if os.path.exists(metrics_path) else []
    rows = [r for r in rows if "charts/success" in r]  # (a step with no usable episode has none)
    if not rows:
        return
    steps = [r["step"] for r in rows]
    probed = [r for r in rows if "probe/share" in r]
    fig, ax = plt.subplots(1, 4 if probed else 3, figsize=(20 if probed else 15, 3.5))
    ax[0].plot(steps, [r["charts/success"] for r in rows], label="success (train rollouts)")
    ax[0].plot(steps, [r["charts/reward"] for r in rows], label="reward", alpha=0.6)
    for cat in sorted({k for r in rows for k in r if k.startswith("success/")})[:8]:  # per task category
        pts = [(r["step"], r[cat]) for r in rows if cat in r]
        ax[0].plot(*zip(*pts), label=cat, linewidth=0.8, linestyle=":")
    ax[0].set_xlabel("step")
    ax[0].legend()
    ax[0].set_ylim(0, 1)
    ax[1].plot(steps, [r["charts/turns"] for r in rows], label="turns per episode")
    ax[1].plot(steps, [r["horizon"] for r in rows], label="horizon (max turns)", linestyle="--")
    ax[1].set_xlabel("step")
    ax[1].legend()
    signals.plot(ax[2], rows)  # machinery/signals.py: no-signal groups, echo, invalid, cut; the alarms
    if probed:  # diagnostics/probe.py: mass on the mission's object vs the others, held-out GoToLocal
        ps = [r["step"] for r in probed]
        ax[3].plot(ps, [r["probe/p_mission"] for r in probed], marker="o", label="p(mission's object)")
        ax[3].plot(ps, [r["probe/p_other"] for r in probed], marker="o", label="p(other objects)")
        ax[3].plot(ps, [r["probe/share"] for r in probed], marker="o", label="share on mission's object")
        ax[3].plot(ps, [r["probe/chance"] for r in probed], linestyle="--", label="share by chance")
        ax[3].set_xlabel("step")
        ax[3].set_ylim(0, 1)
        ax[3].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
