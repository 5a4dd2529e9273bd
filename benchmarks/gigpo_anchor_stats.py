"""How often do anchor states recur? GiGPO's step-level groups only help where several rollouts of a
task act from the same observation (gigpo.py). This rolls out one training batch of the starting
tiny policy on the BabyAI demo (8 tasks x 8 rollouts, horizon 5) and prints how many turns fall in
step groups of two or more, with exact matching and with the `babyai` normaliser.

    python benchmarks/gigpo_anchor_stats.py --seed 0
"""

import argparse
import collections
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import gigpo  # noqa: E402
import tiny  # noqa: E402
from agent import rollout  # noqa: E402
from envs import ENVS, close_pool, open_pool  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--horizon", type=int, default=5)
    args = p.parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    spec, policy = ENVS["babyai"], tiny.load("tiny", "babyai")
    pool = open_pool("babyai", size=args.tasks * args.group_size)
    try:
        tasks = random.sample(spec.splits["train"], args.tasks)
        trajs = rollout(
            policy,
            pool,
            spec,
            [t for t in tasks for _ in range(args.group_size)],
            args.horizon,
            groups=[g for g in range(args.tasks) for _ in range(args.group_size)],
        )
    finally:
        close_pool(pool)
    for norm in ("exact", "babyai"):
        keys = gigpo.step_group_ids(
            [t.group for t in trajs], [t.observations[: t.turns] for t in trajs], norm
        )
        size = collections.Counter(k for ks in keys for k in ks)
        later = [k for ks in keys for k in ks[1:]]  # turns after the (always shared) first one
        print(
            f"{norm:>6}: {sum(size.values())} turns in {len(size)} step groups; turns after the first in a "
            f"shared state: {sum(size[k] > 1 for k in later)} of {len(later)}"
        )


if __name__ == "__main__":
    main()
