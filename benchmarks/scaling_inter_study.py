"""ScalingInter-RL, measured: fixed-short vs fixed-long vs staged vs adaptive horizon schedules on a
task set where the horizon binds both ways (AgentGym-RL, section 4 and its figures on the schedule).

Every run is `train.train(Config(...))` on BabyAI's `binds-train` split (GoToRedBlueBall,
GoToSeqS5R2, UnlockLocalDist, OpenRedBlueDoorsDebug; envs/tasks.py), whose expert solutions take
1 to 10 of the server's actions (docs/scaling_inter/tasks.md), with the same algorithm (GRPO),
learning rate, batch and seeds; only the horizon schedule differs:

    fixed-short  h = SHORT (3: the expert solves 42% of the set within it) every step
    fixed-long   h = LONG (18: twice the set's 90th-percentile solution length) every step
    staged       SHORT -> MID -> LONG, steps split in three equal stages (the paper's schedule)
    adaptive     the same ladder, lengthened when many episodes are cut and success plateaus
                 (scaling_inter.Adaptive)

The budget is the same number of training steps, hence of sampled episodes (steps x tasks x group)
and of policy updates, for every schedule; this is the paper's comparison (a schedule is a choice
of how many turns an episode may use, at the same number of RL samples). A short horizon also
spends fewer environment turns and generated tokens per episode; the table reports the turns each
schedule used, so the cheaper schedules' saving is visible rather than hidden.

Every schedule is evaluated on the same held-out tasks (`binds-test`, seeds never trained on) at
the LONG horizon every `--eval-every` steps, and its final model on `--sweep-episodes` held-out
tasks at several test-time turn limits (`eval.sweep_horizons`: the paper's test-time interaction
scaling), the last of which (LONG) is the final comparison: paired over tasks between schedules
(each task's success averaged over the seeds, the standard error over tasks). Writes to --out:
`table.md` (mean +- standard error over seeds, then the paired differences), `curves.png`
(held-out success and the mechanisms per step: training success, turns, share cut by the horizon,
flat groups, advantage spread, gradient norm, KL, entropy; one line per schedule, a band of one
standard error over seeds), `sweep.png`, `results.json`. Runs already finished (their
summary.json exists) are reused, so an interrupted study continues, and several processes can
share one --out (e.g. one per seed) and a last call writes the report.

    python benchmarks/scaling_inter_study.py                  # docs/studies/scaling-inter.md's configuration
    python benchmarks/scaling_inter_study.py --quick          # a smoke test (CI)
"""

import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from train import Config, train  # noqa: E402

SCHEDULES = ["fixed-short", "fixed-long", "staged", "adaptive"]


def schedule_config(name: str, short: int, mid: int, long: int, steps: int, window: int) -> dict:
    """The Config fields that define schedule `name`; everything else is shared."""
    return {
        "fixed-short": dict(rounds=str(short), steps_per_stage=steps),
        "fixed-long": dict(rounds=str(long), steps_per_stage=steps),
        "staged": dict(rounds=f"{short},{mid},{long}", steps_per_stage=max(1, math.ceil(steps / 3))),
        "adaptive": dict(rounds=f"{short},{mid},{long}", schedule="adaptive", adapt_window=window),
    }[name]


def mean_se(xs: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample std / sqrt(n); 0 for one value)."""
    m = statistics.mean(xs)
    return m, (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0)


def fmt(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:  # one seed: no spread to show
        return f"{xs[0]:.3f}"
    m, se = mean_se(xs)
    return f"{m:.3f} ± {se:.3f}"


def run_one(args, name: str, seed: int) -> str:
    """Train schedule `name` with `seed` (unless done already), then sweep its final model."""
    out = os.path.join(args.out, f"{name}-{seed}")
    if not os.path.exists(os.path.join(out, "summary.json")):
        cfg = Config(
            env="babyai",
            train_split=args.train_split,
            test_split=args.test_split,
            seed=seed,
            steps=args.steps,
            tasks_per_step=args.tasks_per_step,
            group_size=args.group_size,
            minibatch_size=args.tasks_per_step * args.group_size,
            eval_episodes=args.eval_episodes,
            eval_every=args.eval_every,
            eval_horizon=args.long,
            save_every=args.steps,
            out=out,
            **schedule_config(name, args.short, args.mid, args.long, args.steps, args.window),
        )
        train(cfg)
    sweep_model(args, os.path.join(out, "checkpoint"), os.path.join(out, "sweep"), seed)
    return out


def sweep_model(args, model: str, out: str, seed: int):
    if os.path.exists(os.path.join(out, "sweep.json")):
        return
    import eval as evaluation

    evaluation.main(
        [
            "--model",
            model,
            "--env",
            "babyai",
            "--split",
            args.test_split,
            "--limit",
            str(args.sweep_episodes),
            "--sweep-horizons",
            args.sweep,
            "--seed",
            str(seed),
            "--out",
            out,
        ]
    )


def load_run(out: str) -> dict:
    rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    summary = json.load(open(os.path.join(out, "summary.json")))
    sweep = json.load(open(os.path.join(out, "sweep", "sweep.json")))["sweep"]

    # held-out success vs step: step 0 is eval_before, then every eval_every steps, the last eval_after
    held = (
        [(0, summary["eval_before"]["success_rate"])]
        + [(r["step"], r["eval/success"]) for r in rows if "eval/success" in r]
        + [(rows[-1]["step"], summary["eval_after"]["success_rate"])]
    )
    # test-time horizon -> {held-out task -> the final model's success on it}
    tasks_at = {row["horizon"]: row.get("task_success", {}) for row in sweep}
    return {"rows": rows, "summary": summary, "sweep": sweep, "held": held, "tasks_at": tasks_at}


def paired(a: list[dict], b: list[dict], horizon: int) -> tuple[float, float, int] | None:
    """Schedule a minus schedule b in final held-out success at test-time `horizon`, paired over
    tasks: per held-out task,
    each schedule's success averaged over its seeds, then the mean of the per-task differences and
    its standard error (sample std / sqrt(tasks)). Pairing removes the tasks' own difficulty,
    which dominates the noise of an unpaired comparison."""
    tasks = [run["tasks_at"].get(horizon, {}) for run in a + b]
    common = set.intersection(*map(set, tasks)) if a and b else set()
    if len(common) < 2:
        return None

    def success(runs, t):
        return statistics.mean(run["tasks_at"][horizon][t] for run in runs)

    d = [success(a, t) - success(b, t) for t in sorted(common)]
    return statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d)), len(d)


MECHANISMS = [  # (metric, its name in the table)
    ("charts/success", "training success"),
    ("charts/cut_share", "cut by the horizon"),
    ("signals/flat_groups", "flat groups"),
    ("signals/adv_std", "advantage spread"),
    ("losses/grad_norm", "gradient norm"),
    ("losses/kl", "KL to the reference"),
    ("losses/entropy", "entropy"),
    ("charts/turns", "turns per episode"),
]


def mechanisms_table(runs: dict, n: int) -> list[str]:
    """Each learning signal per schedule over the first n and the last n steps (mean over those
    steps, then mean ± standard error over the seeds): what differs between schedules, and when."""
    lines = [
        "",
        f"The mechanisms: each signal's mean over the first {n} and the last {n} steps (mean ± standard "
        "error over the seeds):",
        "",
        "| schedule | " + " | ".join(f"{name}, first | last" for _, name in MECHANISMS) + " |",
        "|---" * (1 + 2 * len(MECHANISMS)) + "|",
    ]
    for s, rs in runs.items():
        cells = [s]
        for key, _ in MECHANISMS:
            for part in (slice(0, n), slice(-n, None)):
                vals = [[r[key] for r in run["rows"][part] if key in r] for run in rs]
                cells.append(fmt([statistics.mean(v) for v in vals if v]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def paired_table(runs: dict, horizons: list[int]) -> list[str]:
    """Every pair of schedules: the paired difference (row minus column) in final held-out success
    at the sweep's last horizon; then each pair at every test-time horizon of the sweep."""

    def cell(a, b, h):
        p = paired(runs[a], runs[b], h)
        if p is None:
            return "-"
        mark = "**" if abs(p[0]) > 2 * p[1] else ""
        return f"{mark}{100 * p[0]:+.1f} ± {100 * p[1]:.1f}{mark}"

    names, last = list(runs), horizons[-1]
    lines = [
        "",
        f"Final held-out success at h={last}, row minus column, paired over the held-out tasks "
        "(each task's success averaged over the seeds; ± its standard error over tasks; "
        "** beyond 2 standard errors):",
        "",
        "| | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for a in names:
        lines.append(f"| {a} | " + " | ".join("-" if a == b else cell(a, b, last) for b in names) + " |")
    lines += [
        "",
        "The same differences at every test-time horizon of the sweep:",
        "",
        "| pair | " + " | ".join(f"h={h}" for h in horizons) + " |",
        "|---" * (len(horizons) + 1) + "|",
    ]
    for i, a in enumerate(names):
        for b in names[:i]:
            lines.append(f"| {a} − {b} | " + " | ".join(cell(a, b, h) for h in horizons) + " |")
    n_tasks = {len(run["tasks_at"][last]) for rs in runs.values() for run in rs}
    lines.append(f"\n(points; {', '.join(map(str, sorted(n_tasks)))} held-out tasks per run)")
    return lines


def report(args, schedules: list[str], seeds: list[int]):
    runs = {
        s: [
            load_run(os.path.join(args.out, f"{s}-{seed}"))
            for seed in seeds
            if os.path.exists(os.path.join(args.out, f"{s}-{seed}", "sweep", "sweep.json"))
        ]
        for s in schedules
    }
    runs = {s: r for s, r in runs.items() if r}
    horizons = [int(h) for h in args.sweep.split(",")]
    last = max(1, args.steps // 5)  # "end of training": the mean of the last fifth of the steps
    lines = [
        f"BabyAI `{args.train_split}` -> held-out `{args.test_split}` ({args.eval_episodes} tasks), "
        f"{args.steps} steps x {args.tasks_per_step} tasks x {args.group_size} samples per schedule, "
        f"seeds {','.join(map(str, seeds))}; mean ± standard error over the seeds that finished "
        "(a single value: one seed).",
        "",
        f"| schedule | seeds | horizons used | held-out success at h={args.long}, start | end | best "
        f"during training "
        f"| training success, last {last} steps | turns per episode, last {last} | cut by the horizon, "
        f"last {last} "
        f"| env turns used | " + " | ".join(f"test h={h}" for h in horizons) + " |",
        "|---" * (10 + len(horizons)) + "|",
    ]
    episodes = args.tasks_per_step * args.group_size  # per step
    for s, rs in runs.items():
        used = sorted({r["horizon"] for run in rs for r in run["rows"]})
        cells = [
            s,
            str(len(rs)),
            ",".join(map(str, used)),
            fmt([run["held"][0][1] for run in rs]),
            fmt([run["summary"]["eval_after"]["success_rate"] for run in rs]),
            fmt([max(v for _, v in run["held"][1:]) for run in rs if len(run["held"]) > 1]),
            fmt([statistics.mean(r["charts/success"] for r in run["rows"][-last:]) for run in rs]),
            fmt([statistics.mean(r["charts/turns"] for r in run["rows"][-last:]) for run in rs]),
            fmt([statistics.mean(r["charts/cut_share"] for r in run["rows"][-last:]) for run in rs]),
            f"{statistics.mean(sum(r['charts/turns'] for r in run['rows']) for run in rs) * episodes:.0f}",
        ] + [fmt([run["sweep"][i]["success_rate"] for run in rs]) for i in range(len(horizons))]
        lines.append("| " + " | ".join(cells) + " |")
    if os.path.exists(os.path.join(args.out, "start", "sweep", "sweep.json")):
        start = json.load(open(os.path.join(args.out, "start", "sweep", "sweep.json")))["sweep"]
        lines.append(
            "| (untrained start) | 1 | - | - | - | - | - | - | - | - | "
            + " | ".join(f"{r['success_rate']:.3f}" for r in start)
            + " |"
        )
    table = "\n".join(lines + paired_table(runs, horizons) + mechanisms_table(runs, last)) + "\n"
    print(table)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(
            {
                s: [{"held": run["held"], "sweep": run["sweep"], "rows": run["rows"]} for run in rs]
                for s, rs in runs.items()
            },
            f,
        )
    plot(args, runs)


def plot(args, runs: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def band(ax, xs, ys_per_seed, label, smooth=1):
        ys = np.array(ys_per_seed, dtype=float)  # (seeds, points)
        if smooth > 1:  # a running mean over `smooth` steps, for the noisy per-step training curves
            k = np.ones(smooth) / smooth
            ys = np.array([np.convolve(np.pad(y, (smooth - 1, 0), mode="edge"), k, mode="valid") for y in ys])
        m = ys.mean(0)
        se = ys.std(0, ddof=1) / np.sqrt(len(ys)) if len(ys) > 1 else np.zeros_like(m)
        (line,) = ax.plot(xs, m, label=label)
        ax.fill_between(xs, m - se, m + se, alpha=0.2, color=line.get_color())

    smooth = max(1, args.steps // 10)
    panels = [  # the mechanisms: does short plateau, does long start slower or less stably?
        ("charts/success", f"training success (running mean of {smooth})", (0, 1)),
        ("charts/turns", "turns per episode (training)", None),
        ("charts/cut_share", "share of episodes cut by the horizon", (0, 1)),
        ("signals/flat_groups", "groups with all-equal rewards", (0, 1)),
        ("signals/adv_std", "advantage spread (std over agent tokens)", None),
        ("losses/grad_norm", "gradient norm (before clipping)", None),
        ("losses/kl", "KL to the reference", None),
        ("losses/entropy", "entropy", None),
    ]
    fig, axes = plt.subplots(3, 3, figsize=(15, 10))
    axes = axes.ravel()
    for s, rs in runs.items():
        n = min(len(run["held"]) for run in rs)
        band(axes[0], [x for x, _ in rs[0]["held"][:n]], [[v for _, v in run["held"][:n]] for run in rs], s)
        steps = [r["step"] for r in rs[0]["rows"]]
        for ax, (key, _, _) in zip(axes[1:], panels):
            if all(key in r for run in rs for r in run["rows"]):
                band(ax, steps, [[r[key] for r in run["rows"]] for run in rs], s, smooth)
    titles = [(f"held-out success (max turns {args.long})", (0, 1))] + [(t, lim) for _, t, lim in panels]
    for ax, (t, lim) in zip(axes, titles):
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        if lim:
            ax.set_ylim(*lim)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "curves.png"), dpi=80)
    plt.close(fig)

    import eval as evaluation

    mean_rows = {
        s: [
            {
                "horizon": rs[0]["sweep"][i]["horizon"],
                "success_rate": statistics.mean(run["sweep"][i]["success_rate"] for run in rs),
            }
            for i in range(len(rs[0]["sweep"]))
        ]
        for s, rs in runs.items()
    }
    start = os.path.join(args.out, "start", "sweep", "sweep.json")
    if os.path.exists(start):
        mean_rows["untrained start"] = json.load(open(start))["sweep"]
    evaluation.plot_sweep(
        mean_rows,
        os.path.join(args.out, "sweep.png"),
        "held-out success, mean over seeds",
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedules", default=",".join(SCHEDULES))
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument(
        "--steps", type=int, default=100, help="training steps per run (the same for every schedule)"
    )
    p.add_argument("--tasks-per-step", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--short", type=int, default=3, help="fixed-short's horizon, the ladder's first")
    p.add_argument("--mid", type=int, default=8, help="the ladder's middle horizon")
    p.add_argument(
        "--long", type=int, default=18, help="fixed-long's horizon, the ladder's last, the eval horizon"
    )
    p.add_argument("--window", type=int, default=5, help="the adaptive schedule's W")
    p.add_argument("--eval-episodes", type=int, default=100, help="held-out tasks per evaluation in training")
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument(
        "--sweep",
        default="3,8,18",
        help="test-time max turns for each final model (the last: the paired one)",
    )
    p.add_argument("--sweep-episodes", type=int, default=300, help="held-out tasks of the final evaluation")
    p.add_argument("--train-split", default="binds-train")
    p.add_argument("--test-split", default="binds-test")
    p.add_argument("--out", default="runs/scaling_inter_study")
    p.add_argument("--report-only", action="store_true", help="only aggregate the finished runs")
    p.add_argument("--quick", action="store_true", help="a smoke test: 1 seed, 2 steps, tiny batches")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.tasks_per_step, args.group_size = "0", 2, 2, 2
        args.short, args.mid, args.long, args.window = 1, 2, 3, 1
        args.eval_episodes, args.eval_every, args.sweep, args.sweep_episodes = 3, 1, "1,2", 3
    schedules, seeds = args.schedules.split(","), [int(s) for s in args.seeds.split(",")]
    os.makedirs(args.out, exist_ok=True)
    if not args.report_only:
        for seed in seeds:  # seed-major: a study cut short still has every schedule at the first seeds
            for name in schedules:
                run_one(args, name, seed)
        sweep_model(args, "tiny", os.path.join(args.out, "start", "sweep"), 0)
    report(args, schedules, seeds)


if __name__ == "__main__":
    main()
