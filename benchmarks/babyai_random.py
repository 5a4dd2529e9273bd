"""Success of uniformly random valid actions on a BabyAI split: the floor the demo is measured
against (the tiny policy's warm-up imitates exactly this distribution).

    python benchmarks/babyai_random.py --split test --horizon 5 --repeats 5 --limit 200
"""

import argparse
import os
import random
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs import ENVS  # noqa: E402
from servers.babyai import BabyAIText  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="test")
    p.add_argument("--horizon", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--limit", type=int, default=200, help="first N tasks (train.py evaluates the first 200)")
    args = p.parse_args()
    env, tasks = BabyAIText(), ENVS["babyai"].splits[args.split][: args.limit]
    rates, by_level = [], defaultdict(list)
    for rep in range(args.repeats):
        rng, wins = random.Random(rep), 0
        for t in tasks:
            r = env.reset(t)
            for _ in range(args.horizon):
                r = env.step(rng.choice(r["available_actions"]))
                if r["done"]:
                    break
            won = r["done"] and r["score"] > 0
            wins += won
            by_level[env.reset(t)["category"]].append(won)
        rates.append(wins / len(tasks))
    print(
        f"random valid actions, {args.split} ({len(tasks)} tasks), {args.horizon} turns: "
        f"success {statistics.mean(rates):.3f} +- {statistics.stdev(rates) if len(rates) > 1 else 0:.3f}"
    )
    for level, w in sorted(by_level.items()):
        print(f"  {level}: {sum(w) / len(w):.3f}")


if __name__ == "__main__":
    main()
