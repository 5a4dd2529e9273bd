"""How long each BabyAI level's solutions are, in the text server's own actions, and how much the
horizon caps random play on it: the numbers for choosing a ScalingInter task set where the horizon
binds both ways (docs/scaling_inter/tasks.md).

    python benchmarks/horizon_tasks.py --seeds 30 --out runs/horizon_tasks.json
    python benchmarks/horizon_tasks.py --levels 10,11,14 --seeds 100

Per level (AgentGym's level numbers 1..40, servers/babyai.py LEVELS) and task seed (from
--first-seed, the test range):

- the expert's solution length: the server's expert (`BabyAIText.expert`, what `POST /expert`
  answers) played as the policy, counting turns (server actions: `go to red ball 1`, `turn left`,
  `toggle and go through blue door 1`, ...) until success, at most --expert-cap turns and
  --expert-seconds; an episode not solved by then counts as longer than the cap (the expert is
  BabyAIBot mapped onto the server's actions, so this is a good solution's length, not always the
  shortest). Where the target is out of view one BabyAIBot replan can take seconds, so once a
  level has used --level-seconds of expert time its remaining seeds get random play only (the
  expert columns say over how many seeds they are);
- random valid actions' success within h turns (benchmarks/horizon_random.py's `won_at`):
  --repeats episodes per task, each played to the largest horizon.

Prints one table row per level (expert length median / p10 / p90 / max, expert success within the
cap, random success per h) and writes everything, per task too, as JSON to --out. One process, one
environment instance; minutes on a 2-core machine (the long levels' expert episodes dominate).
"""

import argparse
import contextlib
import io
import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.horizon_random import won_at  # noqa: E402
from servers.babyai import LEVELS, BabyAIText  # noqa: E402


def quiet(fn, *args):
    """minigrid prints "Sampling rejected: ..." while it generates some levels; drop it."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


def expert_length(env: BabyAIText, task: int, cap: int, seconds: float) -> int | None:
    """Turns the expert takes to solve the task, or None if it did not within `cap` turns (or
    `seconds`: where the target is out of view, one BabyAIBot replan can take seconds)."""
    r, start = quiet(env.reset, task), time.monotonic()
    for turn in range(1, cap + 1):
        r = env.step(quiet(env.expert)["action"])
        if r["done"]:
            return turn if r["score"] > 0 else None
        if time.monotonic() - start > seconds:
            return None
    return None


def quantile(xs: list[float], q: float) -> float:
    """Nearest-rank quantile of a sorted list (inf stands for "not solved within the cap")."""
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def fmt(x: float, cap: int) -> str:
    return f">{cap}" if math.isinf(x) else f"{x:g}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", default="1-40", help="AgentGym level numbers: 1-40, or e.g. 10,11,14")
    p.add_argument("--seeds", type=int, default=30, help="task seeds per level")
    p.add_argument("--first-seed", type=int, default=10000, help="first task seed (10000+: the test range)")
    p.add_argument("--horizons", default="1,2,3,4,5,6,8,10,12,16")
    p.add_argument("--repeats", type=int, default=3, help="random episodes per task")
    p.add_argument("--expert-cap", type=int, default=24, help="most turns an expert episode may take")
    p.add_argument("--expert-seconds", type=float, default=10.0, help="most seconds per expert episode")
    p.add_argument(
        "--level-seconds",
        type=float,
        default=30.0,
        help="expert time per level; past it the level's remaining seeds get random play only",
    )
    p.add_argument("--out", default="runs/horizon_tasks.json")
    args = p.parse_args()
    if "-" in args.levels:
        lo, hi = map(int, args.levels.split("-"))
        levels = list(range(lo, hi + 1))
    else:
        levels = [int(x) for x in args.levels.split(",")]
    horizons = sorted(int(h) for h in args.horizons.split(","))
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    env, rows, t_all = BabyAIText(), [], time.monotonic()
    print(
        f"BabyAI levels {args.levels}, seeds {seeds.start}..{seeds.stop - 1}, expert cap "
        f"{args.expert_cap} turns, random {args.repeats} x per task"
    )
    head = "| level | name | expert median | p10 | p90 | max | expert success | " + " | ".join(
        f"rand h={h}" for h in horizons
    )
    print(head + " | seconds |")
    print("|---" * (len(horizons) + 8) + "|")
    for level in levels:
        t0, tasks = time.monotonic(), []
        for seed in seeds:
            task = seed * 40 + (level - 1)
            measured = time.monotonic() - t0 < args.level_seconds
            try:
                length = expert_length(env, task, args.expert_cap, args.expert_seconds) if measured else None
                wins = [
                    quiet(won_at, env, task, max(horizons), random.Random(rep * 1_000_003 + task))
                    for rep in range(args.repeats)
                ]
            except Exception as e:  # a seed minigrid cannot generate: skip it, say so
                tasks.append({"task": task, "seed": seed, "error": str(e)})
                continue
            tasks.append({"task": task, "seed": seed, "expert_turns": length, "random_won_at": wins})
            tasks[-1]["expert_measured"] = measured
        ok = [t for t in tasks if "error" not in t]
        exp = [t for t in ok if t["expert_measured"]]
        lengths = sorted(math.inf if t["expert_turns"] is None else t["expert_turns"] for t in exp)
        solved = [x for x in lengths if not math.isinf(x)]
        rand = {
            h: sum(w is not None and w <= h for t in ok for w in t["random_won_at"])
            / (len(ok) * args.repeats)
            for h in horizons
        }
        row = {
            "level": level,
            "name": LEVELS[level - 1].removeprefix("BabyAI-").removesuffix("-v0"),
            "n": len(ok),
            "n_expert": len(exp),
            "errors": len(tasks) - len(ok),
            "expert_median": quantile(lengths, 0.5),
            "expert_p10": quantile(lengths, 0.1),
            "expert_p90": quantile(lengths, 0.9),
            "expert_max": lengths[-1],
            "expert_mean_solved": sum(solved) / len(solved) if solved else None,
            "expert_success": len(solved) / len(exp),
            "random_success": rand,
            "seconds": round(time.monotonic() - t0, 1),
            "tasks": tasks,
        }
        rows.append(row)
        c = args.expert_cap
        stats = [fmt(row[k], c) for k in ("expert_median", "expert_p10", "expert_p90", "expert_max")]
        print(
            f"| {level} | {row['name']} | "
            + " | ".join(stats)
            + f" | {row['expert_success']:.2f} ({len(exp)}) | "
            + " | ".join(f"{rand[h]:.2f}" for h in horizons)
            + f" | {row['seconds']} |",
            flush=True,
        )
    wall = time.monotonic() - t_all
    print(f"wall time {wall:.0f} s")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    inf_to_none = lambda x: None if isinstance(x, float) and math.isinf(x) else x  # noqa: E731
    for row in rows:
        for k in ("expert_median", "expert_p10", "expert_p90", "expert_max"):
            row[k] = inf_to_none(row[k])
    with open(args.out, "w") as f:
        json.dump(
            {
                "args": vars(args),
                "wall_seconds": round(wall, 1),
                "date": time.strftime("%Y-%m-%d"),
                "levels": rows,
            },
            f,
            indent=1,
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
