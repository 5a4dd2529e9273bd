"""GRPO vs GiGPO (and variants) on the same budget and seeds: held-out success per BabyAI level with
standard errors, and the mission-binding probe (benchmarks/binding_probe.py) before and after training.

Each run is `python train.py --algo A --seed S --out <out>/<variant>-<seed> --probe-every P
--eval-episodes E <extra flags>`; runs go `--jobs` at a time (each with one thread). Then the
table (<out>/table.md) and the figures (<out>/probe.png, <out>/probe_curves.png) are made from
the runs' summary.json and metrics.jsonl; `--report-only` redoes just that.

    python benchmarks/gigpo_compare.py                                   # grpo vs gigpo, seeds 0,1,2
    python benchmarks/gigpo_compare.py --variants "grpo;gigpo;gigpo-g16=gigpo --group-size 16
    --tasks-per-step 4"
    python benchmarks/gigpo_compare.py --split mission --out runs/gigpo_mission   # GoToLocal + PickupDist

A variant is `name=algo flags...`, or just an algorithm name. Standard errors are over seeds
(std / sqrt(n)) of each run's held-out success.
"""

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_variants(text: str) -> list[tuple[str, list[str]]]:
    out = []
    for v in filter(None, (x.strip() for x in text.split(";"))):
        name, _, spec = v.partition("=")
        words = shlex.split(spec or name)
        out.append((name, ["--algo", words[0]] + words[1:]))
    return out


def mean_se(xs: list[float]) -> str:
    if not xs:
        return "-"
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3f} ± {se:.3f}"


def run_all(args, variants, seeds):
    todo = [
        (name, flags, s)
        for name, flags in variants
        for s in seeds
        if not os.path.exists(os.path.join(args.out, f"{name}-{s}", "summary.json"))
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    running: list[tuple[subprocess.Popen, str, float]] = []
    while todo or running:
        while todo and len(running) < args.jobs:
            name, flags, s = todo.pop(0)
            out = os.path.join(args.out, f"{name}-{s}")
            os.makedirs(out, exist_ok=True)
            split = (
                []
                if args.split == "demo"
                else ["--train-split", f"{args.split}-train", "--test-split", f"{args.split}-test"]
            )
            cmd = [
                sys.executable,
                os.path.join(ROOT, "train.py"),
                "--seed",
                str(s),
                "--out",
                out,
                "--probe-every",
                str(args.probe_every),
                "--eval-episodes",
                str(args.eval_episodes),
                "--steps",
                str(args.steps),
                *split,
                *flags,
            ]
            print("start:", " ".join(cmd), flush=True)
            log = open(os.path.join(out, "train.log"), "w")
            running.append(
                (
                    subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT),
                    out,
                    time.time(),
                )
            )
        time.sleep(5)
        for p, out, t0 in list(running):
            if p.poll() is not None:
                running.remove((p, out, t0))
                print(f"done: {out} rc={p.returncode} in {time.time() - t0:.0f} s", flush=True)
                with open(os.path.join(out, "wall_s.txt"), "w") as f:
                    f.write(f"{time.time() - t0:.1f}\n")


def report(args, variants, seeds):
    runs = {}
    for name, _ in variants:
        for s in seeds:
            path = os.path.join(args.out, f"{name}-{s}", "summary.json")
            if os.path.exists(path):
                r = json.load(open(path))
                wall = os.path.join(args.out, f"{name}-{s}", "wall_s.txt")
                r["wall_s"] = float(open(wall).read()) if os.path.exists(wall) else float("nan")
                runs.setdefault(name, []).append(r)
    if not runs:
        return
    first = next(iter(runs.values()))[0]
    levels = sorted(first["eval_after"].get("success_by_category", {}))
    short = lambda lv: lv.replace("BabyAI-", "").replace("-v0", "").replace("-v1", "")
    lines = [
        f"{args.split} levels, {args.steps} steps, seeds {','.join(map(str, seeds))}; held-out success "
        f"({first['eval_after']['n_episodes']} test episodes per run), mean ± standard error over seeds",
        "",
        "| variant | runs | "
        + " | ".join(f"{short(lv)} before → after" for lv in levels)
        + " | all, after | probe share before → after (chance) | minutes per run |",
        "|---|---|" + "---|" * len(levels) + "---|---|---|",
    ]
    for name, rs in runs.items():
        cells = []
        for lv in levels:
            b = [r["eval_before"]["success_by_category"][lv] for r in rs]
            a = [r["eval_after"]["success_by_category"][lv] for r in rs]
            cells.append(f"{mean_se(b)} → {mean_se(a)}")
        overall = mean_se([r["eval_after"]["success_rate"] for r in rs])
        pb = [r["probe_before"]["share"] for r in rs if "probe_before" in r]
        pa = [r["probe_after"]["share"] for r in rs if "probe_after" in r]
        ch = [r["probe_after"]["chance"] for r in rs if "probe_after" in r]
        minutes = [r.get("wall_s", float("nan")) / 60 for r in rs]
        probe = f"{mean_se(pb)} → {mean_se(pa)} ({statistics.mean(ch):.2f})" if pa else "-"
        lines.append(
            f"| {name} | {len(rs)} | " + " | ".join(cells) + f" | {overall} | {probe} | "
            f"{statistics.mean(minutes):.1f} |"
        )
    table = "\n".join(lines) + "\n"
    print(table)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    plot(args, runs, seeds)


def plot(args, runs, seeds):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(runs)
    fig, ax = plt.subplots(1, 2, figsize=(11, 3.8))
    w = 0.8 / 4
    for k, (key, label) in enumerate([("p_mission", "p(mission's object)"), ("p_other", "p(other objects)")]):
        for j, when in enumerate(["before", "after"]):
            vals = [
                statistics.mean([r[f"probe_{when}"][key] for r in runs[n] if f"probe_{when}" in r] or [0])
                for n in names
            ]
            ax[0].bar(
                [i + (2 * k + j) * w for i in range(len(names))],
                vals,
                w,
                label=f"{label}, {when}",
                alpha=0.5 if when == "before" else 1.0,
                color=f"C{k}",
            )
    ax[0].set_xticks([i + 1.5 * w for i in range(len(names))], names)
    ax[0].set_ylabel("probability (mean over held-out states)")
    ax[0].set_title("held-out GoToLocal: mass on object actions")
    ax[0].legend(fontsize=7)
    for i, n in enumerate(names):  # the share on the mission's object, per step, mean over seeds
        per_step = {}
        for s in seeds:
            path = os.path.join(args.out, f"{n}-{s}", "metrics.jsonl")
            if not os.path.exists(path):
                continue
            for line in open(path):
                r = json.loads(line)
                if "probe/share" in r:
                    per_step.setdefault(r["step"], []).append(r["probe/share"])
        b = [r["probe_before"]["share"] for r in runs[n] if "probe_before" in r]
        steps = ([0] if b else []) + sorted(per_step)
        vals = ([statistics.mean(b)] if b else []) + [statistics.mean(per_step[t]) for t in sorted(per_step)]
        ax[1].plot(steps, vals, marker="o", color=f"C{i}", label=n)
    ch = [r["probe_after"]["chance"] for rs in runs.values() for r in rs if "probe_after" in r]
    if ch:
        ax[1].axhline(
            statistics.mean(ch), linestyle="--", color="grey", label="chance (blind to the mission)"
        )
    ax[1].set_xlabel("training step")
    ax[1].set_ylabel("p(mission's object) / p(any object)")
    ax[1].set_title("binding: share on the mission's object")
    ax[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "probe.png"), dpi=100)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="grpo;gigpo", help="';'-separated: name=algo flags..., or an algo")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument(
        "--split", default="demo", help="demo (train/test) or mission (mission-train/mission-test)"
    )
    p.add_argument("--steps", type=int, default=50)
    p.add_argument(
        "--eval-episodes", type=int, default=600, help="test tasks per evaluation (600: 200 per demo level)"
    )
    p.add_argument("--probe-every", type=int, default=10)
    p.add_argument("--jobs", type=int, default=2, help="runs at a time")
    p.add_argument("--out", default="runs/gigpo_compare")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    variants, seeds = parse_variants(args.variants), [int(s) for s in args.seeds.split(",")]
    os.makedirs(args.out, exist_ok=True)
    if not args.report_only:
        run_all(args, variants, seeds)
    report(args, variants, seeds)


if __name__ == "__main__":
    main()
