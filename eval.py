"""Evaluate an agent: success rate, score, pass@k and turns on a split or explicit task ids.

    python eval.py --model runs/default/checkpoint --split test --n-samples 4 --max-turns 20
    python eval.py --model tiny --task-ids 0-99 --out runs/eval_tiny
    python eval.py --model Qwen/Qwen2.5-7B-Instruct --env babyai --split all-test

Writes <out>/summary.json and every trajectory to <out>/trajectories.jsonl (conversation,
actions, per-step rewards, outcome). pass@k is the unbiased estimator of Chen et al. (2021):
1 - C(n-c, k) / C(n, k) per task, averaged, for k = 1, 2, 4, ... up to n samples.
"""

import argparse
import json
import math
import os
from collections import defaultdict

import numpy as np
from tqdm import tqdm

from agent import Policy, load_policy, rollout
from envs import ENVS, EnvPool, EnvSpec, close_pool, open_pool


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) is correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def summarise(trajs, n_samples: int) -> dict:
    by_task = defaultdict(list)
    for t in trajs:
        by_task[t.task].append(t)
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n_samples]
    out = {
        "n_tasks": len(by_task), "n_samples": n_samples, "n_episodes": len(trajs),
        "success_rate": float(np.mean([t.success for t in trajs])) if trajs else 0.0,
        "avg_score": float(np.mean([t.score for t in trajs])) if trajs else 0.0,
        "avg_reward": float(np.mean([t.reward for t in trajs])) if trajs else 0.0,
        "avg_turns": float(np.mean([t.turns for t in trajs])) if trajs else 0.0,
        "pass_at_k": {str(k): float(np.mean([pass_at_k(len(v), sum(t.success for t in v), k)
                                             for v in by_task.values()])) for k in ks},
        "errors": sum(bool(t.error) for t in trajs),
    }
    cats = defaultdict(list)
    for t in trajs:
        cats[t.category or "all"].append(t.success)
    if len(cats) > 1:
        out["success_by_category"] = {c: float(np.mean(v)) for c, v in sorted(cats.items())}
    return out


def evaluate(policy: Policy, pool: EnvPool, spec: EnvSpec, task_ids: list[int], n_samples: int = 1,
             max_turns: int = 20, desc: str = "eval"):
    """Roll out every task n_samples times (sampling at the policy's temperature)."""
    tasks = [t for t in task_ids for _ in range(n_samples)]
    trajs = []
    chunk = max(1, len(pool))
    for s in tqdm(range(0, len(tasks), chunk), desc=desc, leave=False):
        trajs += rollout(policy, pool, spec, tasks[s:s + chunk], max_turns)
    return summarise(trajs, n_samples), trajs


def parse_task_ids(text: str) -> list[int]:
    """"0-99,200,300-310" -> [0..99, 200, 300..310]."""
    ids = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        ids += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return ids


def write_trajectories(path: str, trajs) -> None:
    with open(path, "w") as f:
        for t in trajs:
            f.write(json.dumps({
                "task": t.task, "category": t.category, "success": t.success, "reward": t.reward,
                "score": t.score, "turns": t.turns, "done": t.done, "error": t.error,
                "actions": t.actions, "rewards": t.rewards, "conversation": t.messages,
            }) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description="Evaluate an agent on an environment's tasks.")
    p.add_argument("--model", default="tiny", help="tiny, a Hugging Face id, or a path / checkpoint")
    p.add_argument("--env", default="babyai", choices=sorted(ENVS))
    p.add_argument("--split", default="test", help="a named split of the env (see envs.ENVS)")
    p.add_argument("--task-ids", default="", help="explicit data_idx list/ranges, e.g. 0-99,200")
    p.add_argument("--n-samples", type=int, default=1, help="samples per task (for pass@k)")
    p.add_argument("--max-turns", type=int, default=0, help="turn limit (0: the env's default)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N tasks of the split")
    p.add_argument("--url", default="", help="an already running environment server")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--mask-actions", default="auto", choices=["auto", "on", "off"])
    p.add_argument("--parallel", type=int, default=64, help="episodes in flight at once")
    p.add_argument("--out", default="runs/eval")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    import torch

    torch.manual_seed(args.seed)
    spec = ENVS[args.env]
    tasks = parse_task_ids(args.task_ids) if args.task_ids else spec.splits[args.split]
    tasks = tasks[:args.limit] if args.limit else tasks
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    policy = load_policy(args.model, env=args.env, device=device, temperature=args.temperature,
                         mask_actions={"auto": None, "on": True, "off": False}[args.mask_actions])
    os.makedirs(args.out, exist_ok=True)
    pool = open_pool(args.env, size=min(args.parallel, len(tasks) * args.n_samples), url=args.url or None)
    try:
        summary, trajs = evaluate(policy, pool, spec, tasks, args.n_samples,
                                  args.max_turns or spec.default_horizon)
    finally:
        close_pool(pool)
    summary.update(model=args.model, env=args.env, split=args.split if not args.task_ids else args.task_ids)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    write_trajectories(os.path.join(args.out, "trajectories.jsonl"), trajs)
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
