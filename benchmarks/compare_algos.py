"""GRPO vs RLOO vs PPO vs REINFORCE++ on the same task, budget and seeds (AgentGym-RL compares
them in its section 4; the reference code's PPO and REINFORCE++ lost the outcome reward, see
docs/algorithms.md). Every run is `train.train(Config(algo=A, seed=S, out=runs/compare/A-S))` with train.py's
defaults otherwise; the table gives held-out test success before and after training, mean +- std
over seeds, and is written to runs/compare/table.md.

    python benchmarks/compare_algos.py                        # 4 algos x 3 seeds, the defaults
    python benchmarks/compare_algos.py --steps 2 --seeds 0    # a smoke test
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from algos import ALGOS  # noqa: E402
from train import Config, train  # noqa: E402


def mean_std(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3f} +- {sd:.3f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", default=",".join(ALGOS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--env", default=Config.env)
    p.add_argument("--steps", type=int, default=Config.steps)
    p.add_argument("--steps-per-stage", type=int, default=Config.steps_per_stage)
    p.add_argument("--out", default="runs/compare")
    args = p.parse_args()
    algos, seeds = args.algos.split(","), [int(s) for s in args.seeds.split(",")]

    results: dict[str, list[dict]] = {}
    for algo in algos:
        for seed in seeds:
            summary = train(
                Config(
                    env=args.env,
                    algo=algo,
                    seed=seed,
                    steps=args.steps,
                    steps_per_stage=args.steps_per_stage,
                    out=os.path.join(args.out, f"{algo}-{seed}"),
                )
            )
            results.setdefault(algo, []).append(summary)

    lines = [
        f"{args.env}, {args.steps} steps ({args.steps_per_stage} per horizon stage), seeds {args.seeds}; "
        "held-out test success rate",
        "",
        "| algorithm | eval_before | eval_after |",
        "|---|---|---|",
    ]
    for algo, runs in results.items():
        before = [r["eval_before"]["success_rate"] for r in runs if "eval_before" in r]
        after = [r["eval_after"]["success_rate"] for r in runs if "eval_after" in r]
        lines.append(
            f"| {algo} | {mean_std(before) if before else '-'} | {mean_std(after) if after else '-'} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)


if __name__ == "__main__":
    main()
