"""Success of uniformly random valid actions per horizon (max turns) on a BabyAI split: how much the
horizon alone caps success on a task set, before any learning. The ScalingInter study's task set
(`horizon-test`) should gain a lot from more turns; the CPU demo's (`test`) gains less.

    python benchmarks/horizon_random.py --split horizon-test --horizons 1,2,3,4,5,8,16
    python benchmarks/horizon_random.py --split test

One random episode per task and repeat is played to the largest horizon; it succeeded "within h"
when it succeeded at turn <= h (an episode ends on success, so this is exactly success at max
turns h). Prints success per horizon (mean +- standard error over repeats) and per level.
"""

import argparse
import math
import os
import random
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs import ENVS  # noqa: E402
from servers.babyai import BabyAIText  # noqa: E402


def won_at(env: BabyAIText, task: int, horizon: int, rng: random.Random):
    """The turn at which a random-valid-action episode succeeded, or None."""
    r = env.reset(task)
    for turn in range(1, horizon + 1):
        r = env.step(rng.choice(r["available_actions"]))
        if r["done"]:
            return turn if r["score"] > 0 else None
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="horizon-test")
    p.add_argument("--horizons", default="1,2,3,4,5,8,16")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--limit", type=int, default=300, help="first N tasks of the split")
    args = p.parse_args()
    horizons = [int(h) for h in args.horizons.split(",")]
    env, tasks = BabyAIText(), ENVS["babyai"].splits[args.split][: args.limit]
    rates = defaultdict(list)  # h -> success per repeat
    by_level = defaultdict(lambda: defaultdict(list))  # level -> h -> wins
    for rep in range(args.repeats):
        rng, wins = random.Random(rep), defaultdict(int)
        for t in tasks:
            w = won_at(env, t, max(horizons), rng)
            level = env.reset(t)["category"]
            for h in horizons:
                won = w is not None and w <= h
                wins[h] += won
                by_level[level][h].append(won)
        for h in horizons:
            rates[h].append(wins[h] / len(tasks))
    print(f"random valid actions, babyai `{args.split}` ({len(tasks)} tasks x {args.repeats} repeats)")
    print("| max turns | " + " | ".join(map(str, horizons)) + " |")
    print("|---" * (len(horizons) + 1) + "|")
    se = lambda xs: statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    print(
        "| all | "
        + " | ".join(f"{statistics.mean(rates[h]):.3f} ± {se(rates[h]):.3f}" for h in horizons)
        + " |"
    )
    for level, per_h in sorted(by_level.items()):
        print(f"| {level} | " + " | ".join(f"{sum(per_h[h]) / len(per_h[h]):.3f}" for h in horizons) + " |")


if __name__ == "__main__":
    main()
