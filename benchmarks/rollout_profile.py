"""Where a training step's time goes, and whether batching rollouts pays.

    python benchmarks/rollout_profile.py --steps 3                   # train.py's demo, profiled
    python benchmarks/rollout_profile.py --steps 3 --threads 2       # ... on two torch threads
    python benchmarks/rollout_profile.py --compare-batch 32          # 32 episodes batched vs one at a time
    python benchmarks/rollout_profile.py --compare-batch 32 --compare-cache on --context-turns 0
                                                     # whole conversation: KV cache kept vs re-encoded

Profile mode runs `train.train()` itself (every train.py flag works here) with a `profile` list:
each step fills a dict through `timing.timed` sections that agent.py and train.py wrap around
their work, so what is measured is the real loop, not a copy of it. Printed: one row per step,
then a summary of seconds per step and share of the step per section:

    rollout      env          the environment servers' reset and step round trips
                 template     chat template + tokenising observations (the prompts of each turn)
                 tries        building the action-mask prefix trees
                 generate     prefill (the prompt's forward), decode (one forward per new token),
                              mask (applying the tries to the logits), other (sampling, bookkeeping)
    update       make_batch, reference (the frozen model's log-probs), advantages,
                 forward_backward (log-probs, loss and backward, micro-batch by micro-batch), optimizer (clip
                 + step), checkpoint

Compare mode rolls out the first N test tasks `--repeats` times in one batch and one episode at a
time, interleaved so that load from other processes falls on both alike, and prints episodes/s.
On a shared machine read the ratios, not the absolute figures.
"""

import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import train  # noqa: E402
from agent import rollout  # noqa: E402
from config import flag, load_agent, parse, resolve_device, set_threads  # noqa: E402
from envs import ENVS, close_pool, open_pool  # noqa: E402

ROLLOUT = ["env", "template", "tries", "prefill", "decode", "mask", "gen other", "roll other"]
UPDATE = ["make_batch", "reference", "advantages", "forward_backward", "optimizer", "checkpoint", "other"]


@dataclass
class ProfileConfig(train.Config):
    """train.py's flags, with a short run as the default, plus the compare mode's."""

    steps: int = flag(3, at_least=1)
    """training steps to profile"""
    eval_episodes: int = flag(0, at_least=0)
    """test tasks for eval_before / eval_after (0: skip, the profile is of the training steps)"""
    out: str = ""
    """train.py's output folder; empty: a temporary one"""
    compare_batch: int = flag(0, at_least=0)
    """instead of training: roll out this many test episodes batched vs one at a time"""
    horizon: int = flag(5, at_least=1)
    """compare mode: turns per episode"""
    repeats: int = flag(3, at_least=1)
    """compare mode: interleaved repeats of each way"""
    compare_cache: bool = False
    """compare mode: instead, N episodes batched with the conversation's KV cache kept across turns vs
    re-encoded each turn"""


def derived(t: dict) -> dict:
    """Add the parts no section names: the rest of generate, of the rollout, and of the step."""
    t = dict(t)
    t["gen other"] = t.get("generate", 0) - sum(t.get(k, 0) for k in ("prefill", "decode", "mask"))
    t["roll other"] = t.get("rollout", 0) - sum(t.get(k, 0) for k in ("env", "template", "tries", "generate"))
    t["other"] = t.get("total", 0) - t.get("rollout", 0) - sum(t.get(k, 0) for k in UPDATE[:-1])
    return t


def table(head: list[str], rows: list[list[str]]) -> str:
    width = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, width)))
    return "\n".join([fmt(head), fmt(["-" * w for w in width])] + [fmt(r) for r in rows])


def summary(profile: list[dict], title: str) -> str:
    """Seconds per step (mean) and share of the step, per section."""
    total = statistics.mean(t["total"] for t in profile)
    rows = []
    for name in ["rollout"] + ROLLOUT + ["update"] + UPDATE:
        if name == "update":
            v = total - statistics.mean(t.get("rollout", 0) for t in profile)
        else:
            v = statistics.mean(t.get(name, 0) for t in profile)
        indent = "" if name in ("rollout", "update") else "  "
        rows.append([indent + name, f"{v:.3f}", f"{100 * v / total:.1f}%"])
    rows.append(["total", f"{total:.3f}", "100.0%"])
    return f"{title}\n" + table(["section", "s/step", "share"], rows)


def profile_training(cfg: ProfileConfig):
    with tempfile.TemporaryDirectory() as tmp:
        cfg.out = cfg.out or tmp
        profile: list[dict] = []
        train.train(cfg, profile=profile)
    steps = [derived(t) for t in profile]
    cols = ["total", "rollout"] + ROLLOUT + ["reference", "forward_backward", "optimizer"]
    rows = [
        [str(t["step"]), str(t["horizon"]), str(t["episodes"]), str(t["agent_tokens"])]
        + [f"{t.get(c, 0):.3f}" for c in cols]
        for t in steps
    ]
    print(
        f"\nper step (seconds), {cfg.algo} on {cfg.env}, model {cfg.model}, threads {torch.get_num_threads()}"
    )
    print(table(["step", "h", "eps", "tokens"] + cols, rows))
    print()
    print(summary(steps, f"summary over {len(steps)} steps"))


def compare_batch(cfg: ProfileConfig):
    """N episodes in one batch against the same N one at a time, interleaved."""
    spec, n = ENVS[cfg.env], cfg.compare_batch
    device = resolve_device(cfg.device)
    set_threads(cfg, device)
    policy = load_agent(cfg, device)
    policy.model.eval()
    tasks = spec.splits[cfg.test_split][:n]
    pool = open_pool(cfg.env, size=n, url=cfg.url or None)
    ways = ["cache kept", "re-encoded"] if cfg.compare_cache else ["batched", "one at a time"]
    rates: dict[str, list[float]] = {w: [] for w in ways}
    parts: dict[str, dict] = {w: {} for w in ways}
    try:
        rollout(policy, pool, spec, tasks[:2], 1)  # warm up: server instances, first forwards
        for _ in range(cfg.repeats):
            for way in rates:
                t0 = time.perf_counter()
                policy.reuse_cache = way != "re-encoded"
                if way != "one at a time":
                    rollout(policy, pool, spec, tasks, cfg.horizon, timings=parts[way])
                else:
                    for t in tasks:
                        rollout(policy, pool, spec, [t], cfg.horizon, timings=parts[way])
                rates[way].append(len(tasks) / (time.perf_counter() - t0))
    finally:
        close_pool(pool)
    print(
        f"\n{n} {cfg.env} episodes of {cfg.horizon} turns, model {cfg.model}, "
        f"threads {torch.get_num_threads()}, {cfg.repeats} interleaved repeats"
    )
    rows = [[way, " ".join(f"{r:.2f}" for r in v), f"{statistics.median(v):.2f}"] for way, v in rates.items()]
    print(table(["way", "episodes/s per repeat", "median"], rows))
    ratio = statistics.median(rates[ways[0]]) / statistics.median(rates[ways[1]])
    print(f"{ways[0]} / {ways[1]}: {ratio:.2f}x")
    names = ["env", "template", "tries", "prefill", "decode", "mask", "generate"]
    rows = [[k] + [f"{parts[w].get(k, 0) / (cfg.repeats * n) * 1000:.2f}" for w in parts] for k in names]
    print("\nms per episode by section\n" + table(["section"] + list(parts), rows))


if __name__ == "__main__":
    cfg = parse(ProfileConfig, description=__doc__.split("\n")[0])
    compare_batch(cfg) if cfg.compare_batch else profile_training(cfg)
