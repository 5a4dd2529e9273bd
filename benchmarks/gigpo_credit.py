"""Which turns does each algorithm credit? GRPO vs GiGPO advantages on the same GoToLocal rollouts.

Binding the mission needs a signal that separates acting on the mission's object from acting on
another one. This rolls out the policy on GoToLocalS8N7 training tasks (`--batches` batches of
8 tasks x 8 rollouts, horizon 5, as the demo's second stage), computes every turn's advantage under
GRPO (the episode's, on every turn) and under GiGPO (gigpo.gigpo_advantages) for a few settings,
and prints, per method, the mean advantage of turns whose action was about the mission's object
(`go to` / `pickup` it), about another object, and the separation between the two
(difference of means / pooled std), over all turns and over the turns after the first. No
training: it measures the credit signal itself, on identical rollouts.

    python benchmarks/gigpo_credit.py --batches 4 --seed 0
"""

import argparse
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import gigpo  # noqa: E402
from agent import rollout  # noqa: E402
from config import AgentConfig, load_agent  # noqa: E402
from diagnostics.probe import GOTOLOCAL, about_mission, mission_object  # noqa: E402
from envs import ENVS, babyai_tasks, close_pool, open_pool  # noqa: E402

METHODS = {  # name -> (omega, gamma, normaliser); omega 0 is GRPO
    "grpo": (0.0, 1.0, "exact"),
    "gigpo (w1, g0.95)": (1.0, 0.95, "exact"),
    "gigpo (w1, g0.95, babyai)": (1.0, 0.95, "babyai"),
    "gigpo (w1, g0.5)": (1.0, 0.5, "exact"),
}


def separation(a: list[float], b: list[float]) -> float:
    pooled = statistics.pstdev(a + b) or 1.0
    return (statistics.mean(a) - statistics.mean(b)) / pooled


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny")
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    spec, policy = ENVS["babyai"], load_agent(AgentConfig(model=args.model), "cpu")
    train_tasks = babyai_tasks([GOTOLOCAL], range(0, 10000))
    pool = open_pool("babyai", size=64)
    trajs_by_batch = []
    try:
        for _ in range(args.batches):
            tasks = random.sample(train_tasks, 8)
            trajs_by_batch.append(
                rollout(
                    policy,
                    pool,
                    spec,
                    [t for t in tasks for _ in range(8)],
                    5,
                    groups=[g for g in range(8) for _ in range(8)],
                )
            )
    finally:
        close_pool(pool)
    episodes = [t for b in trajs_by_batch for t in b]
    print(
        f"{len(episodes)} GoToLocal episodes, success {statistics.mean(t.success for t in episodes):.3f}, "
        f"{sum(t.turns for t in episodes)} turns"
    )
    print(
        "| method | A, mission's object | A, other object | separation, all turns | separation, turns "
        "after the first |"
    )
    print("|---|---|---|---|---|")
    for name, (omega, gamma, norm) in METHODS.items():
        on, off, on_late, off_late = [], [], [], []
        for trajs in trajs_by_batch:
            anchors = [t.observations[: t.turns] for t in trajs]
            adv = gigpo.gigpo_advantages(
                [t.reward for t in trajs],
                [t.group for t in trajs],
                anchors,
                omega=omega,
                gamma=gamma,
                normaliser=norm,
            )
            for tr, turns, a in zip(trajs, anchors, adv):
                for k, (obs, act) in enumerate(zip(turns, tr.actions)):
                    target = mission_object(obs)
                    kind = about_mission(act, target) if target else None
                    if kind is None:
                        continue
                    (on if kind else off).append(a[k])
                    if k > 0:
                        (on_late if kind else off_late).append(a[k])
        print(
            f"| {name} | {statistics.mean(on):+.3f} (n={len(on)}) | {statistics.mean(off):+.3f} "
            f"(n={len(off)}) | "
            f"{separation(on, off):.3f} | {separation(on_late, off_late):.3f} |"
        )


if __name__ == "__main__":
    main()
