"""The paper's main table at 135M on a CPU: per environment, expert -> base SmolLM2 -> behaviour
cloning (SFT, plus one DAgger round where it helps the format) -> GRPO on top, in the paper's
setting (free generation, AgentGym's parser, the whole conversation). docs/paper-table.md holds the
measured table and what it says.

One command per row; each stage is one of the project's own commands, printed before it runs, and
skipped when its output exists (an interrupted recipe continues where it stopped):

    python benchmarks/paper_table.py --env babyai                 # demos, base, SFT, DAgger, RL x 2 seeds
    python benchmarks/paper_table.py --env searchqa --seeds 0     # one seed
    python benchmarks/paper_table.py --env textcraft --dagger 32,64 --seeds ""   # two DAgger rounds, no RL
    python benchmarks/paper_table.py --env textcraft --demos 256 --seeds ""      # SFT on 256 demonstrations
    python benchmarks/paper_table.py --env sciworld --rl-steps 16                 # 16 RL steps, not 8
    python benchmarks/paper_table.py --table                      # the table from what is in --root

Stages (under --root/<env>/): demos/ (the expert on the train split, eval.py --expert on),
base/ (SmolLM2 before anything), sft/ (sft.py on the first N successful demonstrations),
dagger_policy/ + dagger/ + sft2/ (a DAgger round: the SFT policy's own train episodes, relabelled
by the expert, then one more epoch on the demonstrations and every round's labels; a second round
writes dagger2_policy/ + dagger2/ + sft3/; RECIPES[env]["dagger"]), rl_s<seed>/ (train.py from the last SFT
checkpoint; its eval_before is the SFT row, its eval_after the RL row, on the same test tasks), and
where a recipe has `wide`, sft_wide/ and rl_s<seed>_wide/ (eval.py: the last SFT checkpoint and each
RL checkpoint on more test episodes, the same ones for all: a second row, less noisy than RL's own).
Each stage's wall time goes to times.json.
"""

import argparse
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FREE = "--mask-actions off --context-turns 0 --max-new-tokens 64"

# per environment: expert episodes written, demonstrations trained on, test tasks evaluated, the
# RL horizon (--rounds: one value fixed, several ScalingInter-RL's stages sharing the steps evenly),
# the train tasks of each DAgger round (consecutive slices of the train split, or of `dagger_split`,
# wrapping around to its start: a later round revisits its tasks with the newer policy), RL steps (default 8),
# the environment instances in flight outside RL (each a JVM or a browser), and the splits.
# SciWorld's whole tasks need 20-30 gold actions: its row is the easier slice of its four find-*
# tasks (envs.py's find-train / find-test). TextCraft's RL draws depth-1 goals (`rl_splits`: its train
# split is mostly depth 2-4, which 5 turns cannot craft: every group failed alike, no signal) and so do
# its DAgger rounds (a third round on the next, deeper train goals taught nothing: docs/sft.md).
# `wide` = (tasks, samples): the larger evaluation of the SFT and RL checkpoints, at seed 1 (20 tasks
# once carry about ±11 points; TextCraft's depth-1 test goals, all 25 x 4 samples, about ±5).
RECIPES = {
    "babyai": dict(expert=80, demos=64, test=30, rounds="5", dagger=[32]),
    "textcraft": dict(
        expert=80,
        demos=64,
        test=20,
        rounds="5",
        dagger=[32],
        dagger_split="depth1-train",
        rl_splits=("depth1-train", "depth1-test"),
        wide=(25, 4),
    ),
    "searchqa": dict(expert=80, demos=64, test=60, rounds="5", dagger=[], steps=16),
    "webarena": dict(expert=28, demos=28, test=7, rounds="5", dagger=[28], parallel=4),
    "sciworld": dict(
        expert=200,
        demos=160,
        test=20,
        rounds="5,10",
        dagger=[],
        parallel=4,
        train_split="find-train",
        test_split="find-test",
    ),
}

# AgentGym-RL's headline table: Qwen2.5-7B base -> ScalingInter-7B (after RL), for orientation
PAPER_7B = {
    "webarena": (9.76, 26.00),
    "searchqa": (18.75, 38.25),
    "textcraft": (42.00, 91.00),
    "babyai": (66.67, 96.67),
    "sciworld": (1.50, 57.00),
}
NAMES = {"babyai": "BabyAI", "textcraft": "TextCraft", "searchqa": "Deep Search", "webarena": "WebArena",
         "sciworld": "SciWorld"}  # fmt: skip


def stage(root: str, name: str, command: str, extra=(), done: str = "") -> None:
    """Run `python <command> <extra>` unless `done` (default <root>/<name>/summary.json) exists; log
    to <root>/<name>.log, its wall time to <root>/times.json."""
    if os.path.exists(done or os.path.join(root, name, "summary.json")):
        return
    argv = shlex.split(command) + list(extra)
    print("$ python", shlex.join(argv), flush=True)
    t0 = time.time()
    with open(os.path.join(root, f"{name}.log"), "w") as log:
        subprocess.run([sys.executable, *argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
    times_path = os.path.join(root, "times.json")
    times = json.load(open(times_path)) if os.path.exists(times_path) else {}
    times[name] = round(time.time() - t0, 1)
    json.dump(times, open(times_path, "w"), indent=1)


def first_successes(src: str, dst: str, n: int) -> None:
    """The first n successful episodes of `src`: what SFT trained on, again beside DAgger's labels."""
    kept = [line for line in open(src) if json.loads(line).get("success")][:n]
    with open(dst, "w") as f:
        f.writelines(kept)


def split_ids(env: str, split: str) -> list[int]:
    """The data_idx of a named split's tasks, in order (eval.py --split takes them from the front)."""
    from envs import ENVS

    return list(ENVS[env].splits[split])


def recipe(env: str, root: str, seeds: list[int], extra: list[str]) -> None:
    """Every stage of `env`'s row in order; `extra` (e.g. --threads 1) goes to every model command."""
    r, d = RECIPES[env], os.path.join(root, env)
    os.makedirs(d, exist_ok=True)
    turns = r["rounds"].split(",")[-1]
    train = r.get("train_split", "train")  # the expert's demonstrations and DAgger's states
    rl_train, test = r.get("rl_splits", (train, r.get("test_split", "test")))
    sft = "--batch-size 8 --lr 1e-4 --mask-actions off --context-turns 0"
    inflight = r.get("parallel", 64)  # environment instances at once in the expert's and DAgger's stages
    expert = f"--expert on --split {train} --limit {r['expert']} --parallel {inflight}"
    stage(d, "demos", f"eval.py --env {env} {expert} --out {d}/demos")
    stage(d, "base", f"eval.py --model smollm2 --env {env} --split {test} --limit {r['test']} "
                     f"--horizon {turns} {FREE} --out {d}/base", extra)  # fmt: skip
    stage(d, "sft", f"sft.py --model smollm2 --env {env} --data {d}/demos/trajectories.jsonl "
                    f"--demos {r['demos']} --epochs 3 {sft} --out {d}/sft", extra)  # fmt: skip
    start = f"{d}/sft/checkpoint"
    labels = [f"{d}/demos/first.jsonl"]  # DAgger's aggregate: every round trains on all labels so far
    if r["dagger"]:
        first_successes(f"{d}/demos/trajectories.jsonl", labels[0], r["demos"])
    pool = split_ids(env, r.get("dagger_split", train))
    for k, n in enumerate(r["dagger"], start=1):  # round k: the last checkpoint's own episodes on the
        name = "dagger" if k == 1 else f"dagger{k}"  # next n train tasks, labelled by the expert
        first = sum(r["dagger"][: k - 1])
        ids = ",".join(str(pool[(first + j) % len(pool)]) for j in range(min(n, len(pool))))
        policy = f"eval.py --model {start} --env {env} --task-ids {ids} --parallel {inflight}"
        stage(d, f"{name}_policy", f"{policy} --horizon {turns} {FREE} --out {d}/{name}_policy", extra)
        relabel = (
            f"sft.py --env {env} --relabel {d}/{name}_policy/trajectories.jsonl --out {d}/{name} "
            f"--parallel {inflight}"
        )
        stage(d, name, relabel, done=f"{d}/{name}/trajectories.jsonl")
        labels.append(f"{d}/{name}/trajectories.jsonl")
        stage(d, f"sft{k + 1}", f"sft.py --model {start} --env {env} --epochs 1 {sft} --out {d}/sft{k + 1} "
                                f"--data {','.join(labels)}", extra)  # fmt: skip
        start = f"{d}/sft{k + 1}/checkpoint"
    steps = r.get("steps", 8)
    per_stage = steps // len(r["rounds"].split(","))  # ScalingInter-RL's stages share the steps evenly
    rl = (
        f"train.py --model {start} --env {env} {FREE} --rounds {r['rounds']} --steps-per-stage {per_stage} "
        f"--steps {steps} --tasks-per-step 4 --group-size 4 --minibatch-size 16 --micro-batch-size 8 "
        f"--lora-rank 16 --kl-coef 0 --lr 1e-4 --train-split {rl_train} --test-split {test} "
        f"--eval-episodes {r['test']}"
    )
    for seed in seeds:
        stage(d, f"rl_s{seed}", f"{rl} --seed {seed} --out {d}/rl_s{seed}", extra)
    if r.get("wide") and seeds:
        tasks, samples = r["wide"]
        wide = (
            f"--env {env} --split {test} --limit {tasks} --n-samples {samples} --seed 1 "
            f"--horizon {turns} {FREE}"
        )
        stage(d, "sft_wide", f"eval.py --model {start} {wide} --out {d}/sft_wide", extra)
        for seed in seeds:
            name = f"rl_s{seed}_wide"
            stage(d, name, f"eval.py --model {d}/rl_s{seed}/checkpoint {wide} --out {d}/{name}", extra)


# ---------------------------------------------------------------------------------------------
# The table


def mean_se(xs: list[float]) -> str:
    """'m ± se' in points (sample std / sqrt(n)); one value: just it."""
    xs = [100 * x for x in xs]
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs) / math.sqrt(len(xs)):.1f}"


def valid_share(path: str) -> tuple[int, int]:
    from sft import read_records, valid_replies

    return valid_replies(read_records(path)) if os.path.exists(path) else (0, 0)


def row(env: str, root: str) -> dict | None:
    """One environment's measured figures, from what its recipe left in <root>/<env>/."""
    d = os.path.join(root, env)
    runs = sorted(n for n in os.listdir(d) if re.fullmatch(r"rl_s\d+", n)) if os.path.isdir(d) else []
    runs = [n for n in runs if os.path.exists(os.path.join(d, n, "summary.json"))]
    if not runs:
        return None
    summaries = [json.load(open(os.path.join(d, n, "summary.json"))) for n in runs]
    # AgentGym scores SciWorld by its score: the rewards of an episode sum to its final score / 100
    metric = "avg_reward" if env == "sciworld" else "success_rate"
    valid = {}
    for when in ("eval_before", "eval_after"):
        counts = [valid_share(os.path.join(d, n, when, "trajectories.jsonl")) for n in runs]
        valid[when] = (sum(c[0] for c in counts), sum(c[1] for c in counts))

    def one(sub: str) -> str:
        """A single evaluation's figure in points, with its episodes where they are not the test's."""
        path = os.path.join(d, sub, "summary.json")
        if not os.path.exists(path):
            return "-"
        s = json.load(open(path))
        n = "" if s["n_episodes"] == summaries[0]["eval_after"]["n_episodes"] else f" (n={s['n_episodes']})"
        return f"{100 * s[metric]:.1f}{n}"

    def wide(name: str) -> tuple[float, int, tuple[int, int]] | None:
        """The `wide` evaluation of a checkpoint: (figure, episodes, valid replies), None if not run."""
        path = os.path.join(d, f"{name}_wide")
        if not os.path.exists(os.path.join(path, "summary.json")):
            return None
        s = json.load(open(os.path.join(path, "summary.json")))
        return s[metric], s["n_episodes"], valid_share(os.path.join(path, "trajectories.jsonl"))

    wides = [wide("sft")] + [wide(n) for n in runs]
    times_path = os.path.join(d, "times.json")
    times = json.load(open(times_path)) if os.path.exists(times_path) else {}
    before = [s["eval_before"][metric] for s in summaries]
    after = [s["eval_after"][metric] for s in summaries]
    return dict(
        tasks=summaries[0]["eval_after"]["n_tasks"],
        expert=one("demos"),
        base=one("base"),
        sft=before,
        rl=after,
        gain=[a - b for a, b in zip(after, before)],
        valid=valid,
        rl_seconds=[times.get(n) for n in runs],
        wide=wides if all(wides) else None,  # the SFT checkpoint's, then each seed's
    )


def table(root: str) -> str:
    head = (
        "| environment (test tasks) | expert (train) | base SmolLM2 | SFT | SFT + RL | RL gain "
        "| valid before -> after RL | RL time per seed | paper 7B base -> RL |\n"
        "|---|---:|---:|---:|---:|---:|---|---|---|\n"
    )
    lines = []
    for env in RECIPES:
        f = row(env, root)
        if f is None:
            continue
        share = lambda c: f"{c[0]}/{c[1]} ({c[0] / c[1]:.2f})" if c[1] else "-"  # noqa: E731
        secs = ", ".join(f"{s / 60:.0f} min" for s in f["rl_seconds"] if s)
        paper = " -> ".join(f"{x:.2f}" for x in PAPER_7B[env])
        lines.append(
            f"| {NAMES[env]} ({f['tasks']}) | {f['expert']} | {f['base']} | {mean_se(f['sft'])} "
            f"| **{mean_se(f['rl'])}** | {mean_se(f['gain'])} | {share(f['valid']['eval_before'])} -> "
            f"{share(f['valid']['eval_after'])} | {secs or '-'} | {paper} |"
        )
        if f["wide"]:  # the same checkpoints on more episodes
            (sft, n, sft_valid), rl = f["wide"][0], f["wide"][1:]
            valid_after = tuple(sum(v[i] for _, _, v in rl) for i in (0, 1))
            lines.append(
                f"| {NAMES[env]} (the same checkpoints, {n} episodes) | | | {100 * sft:.1f} "
                f"| **{mean_se([x for x, _, _ in rl])}** | {mean_se([x - sft for x, _, _ in rl])} "
                f"| {share(sft_valid)} -> {share(valid_after)} | | |"
            )
    return head + "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", choices=sorted(RECIPES), help="run this environment's recipe")
    p.add_argument("--seeds", default="0,1", help="RL seeds (comma-separated; '': stop before RL)")
    p.add_argument("--root", default="runs/paper", help="where the stages write")
    p.add_argument(
        "--dagger", help="train tasks per DAgger round instead of the recipe's (e.g. 32,64; '': none)"
    )
    p.add_argument(
        "--demos",
        type=int,
        help="demonstrations SFT trains on instead of the recipe's (the expert writes N + N/4)",
    )
    p.add_argument(
        "--rl-steps", type=int, help="RL steps instead of the recipe's (its stages share them evenly)"
    )
    p.add_argument("--table", action="store_true", help="print the table (also written to <root>/table.md)")
    args, extra = p.parse_known_args(argv)  # the rest goes to every model-running command (--threads 1)
    if args.env:
        if args.dagger is not None:
            rounds = [int(n) for n in args.dagger.split(",") if n]
            RECIPES[args.env] = dict(RECIPES[args.env], dagger=rounds)  # this run's recipe only
        if args.demos:
            expert = max(RECIPES[args.env]["expert"], args.demos * 5 // 4)
            RECIPES[args.env] = dict(RECIPES[args.env], demos=args.demos, expert=expert)
        if args.rl_steps:
            RECIPES[args.env] = dict(RECIPES[args.env], steps=args.rl_steps)
        recipe(args.env, args.root, [int(s) for s in args.seeds.split(",") if s], extra)
    if args.table or args.env:
        text = table(args.root)
        with open(os.path.join(args.root, "table.md"), "w") as f:
            f.write(text)
        print(text)


if __name__ == "__main__":
    main()
