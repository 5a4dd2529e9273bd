"""The paper's main table at 135M on a CPU, compared honestly: per environment, expert -> base
SmolLM2 -> behaviour cloning (SFT, then DAgger rounds) -> GRPO from the best imitation checkpoint,
in the paper's setting (free generation, AgentGym's parser, the whole conversation).
docs/studies/paper-table.md holds the measured table and what it says.

Every choice is made on a validation split, every figure reported on test tasks nothing was tuned
on (envs/tasks.py: each environment's train / val / test):

- the imitation checkpoints (SFT and each DAgger round) are evaluated on validation tasks x 8
  samples; the best of them (success, or SciWorld's score) is RL's start **and the baseline**;
  that evaluation also gives its headroom, pass@1 against pass@8 (RL with an outcome reward
  mostly turns pass@k into pass@1);
- RL runs from it at every seed (default 3); its evaluations during training are on validation;
- self-training, RL's cheapest rival (rejection-sampling fine-tuning; AgentGym's AgentEvol is this
  idea): the best imitation checkpoint samples as many episodes as one RL run on RL's tasks and SFT
  trains on its successes, twice (the second round from the first); the better round on validation
  is tested beside RL, and RL minus it is paired like the gain;
- every checkpoint of the row (base, each imitation checkpoint, each RL seed) is then evaluated
  once on the same test episodes (the same tasks x samples at the same evaluation seed), and the
  gain is RL minus the best imitation checkpoint, paired over the test tasks (each task's figure
  averaged over its samples and the RL seeds) +- its standard error over tasks, and beside it the
  error that also counts the seeds' own spread (`paper_records.paired`: SE_tasks^2 +
  sigma_seeds^2 / k), bold past a t quantile for its degrees of freedom (`paper_records.bar`; 4.3
  SE where 3 seeds' spread is all of it, about 2 where they agree).

One command per row; each stage is one of the project's own commands, printed before it runs, and
skipped when it is done, provided that it ran the same command (an interrupted recipe continues
where it stopped, an RL run from its last checkpoint, saved every 2 steps; a stage done with
another command stops the row with the difference):

    python benchmarks/paper_table.py --env babyai                 # demos ... RL x 3 seeds, test
    python benchmarks/paper_table.py --env searchqa --seeds 0     # one seed
    python benchmarks/paper_table.py --env textcraft --dagger 32,64 --seeds ""   # imitation only
    python benchmarks/paper_table.py --env textcraft --demos 256 --seeds ""      # SFT on 256 demonstrations
    python benchmarks/paper_table.py --env sciworld --rl-steps 16                 # 16 RL steps, not 8
    python benchmarks/paper_table.py --env searchqa --rl-lr 5e-4                  # RL's lr, not 1e-4
    python benchmarks/paper_table.py --env textcraft --pick 75    # RL on the goals SFT solves sometimes
    python benchmarks/paper_table.py --env textcraft --disjoint   # RL on goals no demonstration shows
    python benchmarks/paper_table.py --env sciworld --rl-args "--algo gigpo"   # any train.py flag for RL
    python benchmarks/paper_table.py --env searchqa --rl-from self   # RL from the self-training checkpoint
    python benchmarks/paper_table.py --table                      # the table from what is in --root
    python benchmarks/paper_table.py --env babyai --model Qwen/Qwen2.5-1.5B-Instruct   # any model, a GPU

--model (default smollm2, the 135M CPU row) is the row's base: SFT starts from it and test_base
evaluates it; any other model trains with REAL_MODEL_FLAGS (the memory plan's flags for 1.5B and
3B on one GPU) and SFT at sft.py's own learning rate for a real model, and writes under
runs/paper-<model> unless --root says where (docs/studies/paper-table.md, "Any model").

A lever (more RL steps, another horizon, ...) is judged on validation before any test episode: the
row's stages whose commands the lever leaves alone taken from the row (--reuse: their records and
outputs, listed with their revision in <records>/reused.json), RL with the lever, then RL against
RL paired over the val tasks, both arms' seeds counted; the test episodes run once the lever is
chosen (without --val-only):

    python benchmarks/paper_table.py --env textcraft --root runs/steps24 --reuse runs/paper --rl-steps 24 \
      --val-only
    python benchmarks/paper_table.py --env textcraft --root runs/steps24 --compare runs/paper

Stages (under --root/<env>/): demos/ (the expert on the train split, eval.py --expert on), sft/
(sft.py on the first N successful demonstrations), dagger_policy/ + dagger/ + sft2/ (a DAgger
round: the last checkpoint's own train episodes, relabelled by the expert, then one more epoch on
the demonstrations and every round's labels; a second round writes dagger2_policy/ + dagger2/ +
sft3/; RECIPES[env]["dagger"]), val_<checkpoint>/ (eval.py on validation), pick_<best>/ (--pick:
the best on rl_train tasks x 8; RL trains on the tasks it solved sometimes, not always),
rl_s<seed>/ (train.py from the best) + val_rl_s<seed>/ (its final model on validation),
self<k>_policy/ + self<k>/ + val_self<k>/ (self-training round k: the episodes, the SFT on their
successes, its validation), test_<checkpoint>/ (eval.py on the test episodes; test_base/ is
SmolLM2 before anything, test_rl_s<seed>/ an RL run's final model). Each stage's wall time goes to times.json.
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

import paper_records  # noqa: E402 (benchmarks/, beside this file)
from paper_records import STUDY, Paired, paired, seeds_aware_se  # noqa: E402,F401

FREE = "--mask-actions off --context-turns 0 --max-new-tokens 64"

# per environment: expert episodes written, demonstrations trained on, the RL horizon (--rounds: one
# value fixed, several ScalingInter-RL's stages sharing the steps evenly), the train tasks of each
# DAgger round (consecutive slices of `rl_train`, wrapping around to its start: a later round
# revisits its tasks with the newer policy), RL steps (default 8), the environment instances in
# flight outside RL (each a JVM or a browser; `eval_parallel` for the policy's evaluations, default
# the same: 64 SciWorld JVMs starting at once on 2 cores took over the server's 50 s); the splits
# (`train`: the expert's demonstrations, `rl_train`: DAgger's and RL's tasks, default `train`) and
# the evaluations as (tasks, samples):
# `val` chooses the imitation checkpoint and gives pass@1 and pass@8; `test` is every checkpoint's
# one reported evaluation (at least 100 episodes where the split has the tasks); `rl_eval` tasks
# of val are evaluated at the start and end of each RL run.
# SciWorld's whole tasks need 20-30 gold actions: its row is the easier slice of its four find-*
# tasks (envs/tasks.py's find-*). TextCraft's RL draws depth-1 goals (its train split is mostly depth 2-4,
# which 5 turns cannot craft: every group failed alike, no signal) and so do its DAgger rounds (a
# third round on the next, deeper train goals taught nothing: docs/studies/sft.md). WebArena has 35
# offline tasks in all (7 validate, 7 test): its evaluations cannot reach 100 distinct episodes, so
# its test takes 15 samples a task (105 episodes; validation 8, for the pass@8 every row reports).
# The test sizes below were fixed before any episode on them, to tell a gain of 10 points from one
# of 5: 300 episodes a row, distinct tasks where the split has them (BabyAI's and Deep Search's
# tasks 300-599 of their test splits, `test_from`, which no run has seen; SciWorld's 200 find-test
# tasks from the 100th, never reported), more samples a task where it has few (TextCraft 25 x 12;
# WebArena 7 x 30, its whole offline test: both `reuses` the tasks of a reported row, and the table
# says so). Never enlarged after a result (docs/studies/paper-table.md, the recipe's step 7).
# BabyAI's 24 RL steps were chosen on validation over 8 (--compare, docs/studies/paper-table.md); TextCraft's
# 24 were not (its 8 kept), nor its RL on the goals SFT solves sometimes (`pick`: --pick N), nor
# demonstrations and RL on disjoint goals (`disjoint`: --disjoint).
RECIPES = {
    "babyai": dict(
        expert=80, demos=64, rounds="5", dagger=[32], steps=24, val=(32, 8), test=(300, 1), test_from=300
    ),
    "textcraft": dict(
        expert=80,
        demos=64,
        rounds="5",
        dagger=[32],
        rl_train="depth1-train",
        splits=("depth1-val", "depth1-test"),
        val=(25, 8),
        test=(25, 12),
        reuses="the 25 goals of the reported row",
    ),
    "searchqa": dict(
        expert=80, demos=64, rounds="5", dagger=[], steps=32, val=(32, 8), test=(300, 1), test_from=300
    ),
    "webarena": dict(
        expert=21,
        demos=21,
        rounds="5",
        dagger=[21],
        parallel=4,
        val=(7, 8),
        test=(7, 30),
        reuses="the 7 tasks of the reported row",
    ),  # fmt: skip
    "sciworld": dict(
        expert=200,
        demos=160,
        rounds="5,10",
        dagger=[],
        parallel=4,
        eval_parallel=16,
        train="find-train",
        splits=("find-val", "find-test"),
        val=(32, 8),
        test=(200, 1),
        test_from=100,  # the 200 find-test tasks never reported (the row of 2026-12-04 tested the first 100)
    ),
}
SEEDS = "0,1,2"
TASKS_PER_STEP = 4  # RL's tasks per step (each a GRPO group of 4 episodes)
RL_EVAL = 20  # validation tasks each RL run evaluates before and after training
PICK_SAMPLES = 8  # --pick: each rl_train task's episodes that tell "sometimes" from "always" or "never"
RL_VAL_SAMPLES = 4  # each RL seed's final model on the val tasks x this: how a lever is judged (--compare)
RL_SAVE_EVERY = 2  # RL checkpoints every 2 steps: a recipe stopped mid-run continues its RL from there
GROUP = 4  # RL's samples per task (a GRPO group)
SELF_ROUNDS = 2  # self-training rounds (self1/, self2/), the best on validation tested beside RL
BASE = "smollm2"  # the CPU row's base model: SmolLM2-135M-Instruct, offline (machinery/gguf_model.py)
SFT_LR = {BASE: "1e-4"}  # SFT's learning rate per base model; others: sft.py's default for a real model
REAL_MODEL_FLAGS = "--gradient-checkpointing true --micro-batch-size 1"  # sft.py's and train.py's, for
# a base other than smollm2 (bf16 comes from --mixed-precision auto on a GPU): what fits 1.5B and 3B
# (benchmarks/memory_plan.py)

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
    """Run `python <command> <extra>` unless stage `name` is done: its record exists (a row that
    keeps records: paper_records.py), a lever takes it from its row (--reuse), or, without either,
    `done` (default <root>/<name>/summary.json) does. A stage found done must have run this very
    command (its record's, or its output folder's stamp, --resume aside), else the row stops with
    the difference. Log to <root>/<name>.log, its wall time to <root>/times.json and the record.
    Before it runs, every earlier stage whose output its command reads is rebuilt if runs/ lacks it."""
    done = done or os.path.join(root, name, "summary.json")
    argv = shlex.split(command) + list(extra)
    STUDY.stages[name] = (root, argv, done)
    folder, top = os.path.join(root, name), os.path.dirname(root)  # top: the --root, <root> in records
    recorded = STUDY.records and os.path.exists(paper_records.record_path(name))
    if not recorded and STUDY.records and STUDY.reuse:  # a lever: the row's stage, if the same
        recorded = paper_records.reuse(name, argv, folder, inputs(root, name, argv))
    if recorded:
        rec = paper_records.load(paper_records.record_path(name))
        paper_records.check_command(name, argv, top, rec, f"its record {paper_records.record_path(name)}")
        return
    if os.path.exists(done):
        made = paper_records.read_stamp(folder)  # what made it, if this runner did (a copy keeps it)
        if made:
            paper_records.check_command(name, argv, top, made, f"{folder}/stage.json")
        if STUDY.records:  # ran before the row kept records, or copied in: record it now, as it was made
            times = read_times(root)
            paper_records.write_record(folder, name, argv, times.get(name), made=made or {})
        return
    if not paper_records.fits(name):
        return
    for needed in inputs(root, name, argv):
        rebuild(needed)
    seconds = run(root, name, argv)
    STUDY.finished.append((name, seconds))
    if STUDY.records:
        paper_records.write_record(folder, name, argv, seconds)


def run(root: str, name: str, argv: list[str], code: tuple[str, str] | None = None) -> float:
    """One stage's command in the row's code (`code`: (revision, worktree), default the row's pin),
    logged; its wall time in times.json, and a stamp of what made it in its output folder."""
    revision, cwd = code or (STUDY.revision, STUDY.cwd)
    print("$ python", shlex.join(argv), flush=True)
    t0 = time.time()
    with open(os.path.join(root, f"{name}.log"), "w") as log:
        subprocess.run([sys.executable, *argv], cwd=cwd, stdout=log, stderr=subprocess.STDOUT, check=True)
    seconds = round(time.time() - t0, 1)
    times = read_times(root)
    times[name] = seconds
    json.dump(times, open(os.path.join(root, "times.json"), "w"), indent=1)
    paper_records.stamp(os.path.join(root, name), argv, revision)
    return seconds


def read_times(root: str) -> dict:
    path = os.path.join(root, "times.json")
    return json.load(open(path)) if os.path.exists(path) else {}


def inputs(root: str, name: str, argv: list[str]) -> list[str]:
    """The earlier stages whose outputs (<root>/<stage>/...) a stage's command reads."""
    found = re.findall(re.escape(root) + r"/(\w+)", " ".join(argv))
    return [n for n in dict.fromkeys(found) if n != name and n in STUDY.stages]


def rebuild(name: str) -> None:
    """Stage `name`'s outputs back in runs/ when they are gone: its own inputs first, then its command
    at its record's revision (the row's pin, or the row's that a lever reused it from), checked
    against its record (paper_records.check_rebuild); then the files the recipe makes from them
    (`derive`). Nothing is chosen again."""
    root, argv, done = STUDY.stages[name]
    if not os.path.exists(done):
        for needed in inputs(root, name, argv):
            rebuild(needed)
        print(f"(rebuilding {name}: a later stage reads it and runs/ lacks it)", flush=True)
        run(root, name, argv, paper_records.code_for(name))
        if STUDY.records and os.path.exists(paper_records.record_path(name)):
            paper_records.check_rebuild(os.path.join(root, name), name)
    for path, (source, make) in STUDY.derived.items():
        if source == name and not os.path.exists(path):
            make()


def derive(path: str, source: str, reads: str, make) -> None:
    """A file the recipe makes from stage `source`'s output `reads` (`make()` writes it): made now
    when that output is there, else when a later stage rebuilds `source`."""
    STUDY.derived[path] = (source, make)
    if not os.path.exists(path) and os.path.exists(reads):
        make()


def resume_flag(out: str) -> str:
    """` --resume <out>/checkpoint` when an RL run stopped before its end left a checkpoint there
    (train.py --resume continues it exactly, or from checkpoint.prev after a kill while saving);
    else nothing."""
    saved = any(os.path.exists(os.path.join(out, c, "state.pt")) for c in ("checkpoint", "checkpoint.prev"))
    return f" --resume {out}/checkpoint" if saved else ""


def first_successes(src: str, dst: str, n: int) -> None:
    """The first n successful episodes of `src`: what SFT trained on, again beside DAgger's labels."""
    kept = [line for line in open(src) if json.loads(line).get("success")][:n]
    with open(dst, "w") as f:
        f.writelines(kept)


def split_ids(env: str, split: str) -> list[int]:
    """The data_idx of a named split's tasks, in order (eval.py --split takes them from the front)."""
    from envs import ENVS

    return list(ENVS[env].splits[split])


def ids_of(tasks) -> str:
    """Task ids as eval.py's --task-ids and train.py's --train-task-ids read them."""
    return ",".join(map(str, tasks))


def recipe(
    env: str, root: str, seeds: list[int], extra: list[str], val_only: bool = False, model: str = BASE
) -> None:
    """Every stage of `env`'s row in order (with `val_only`, all but the test episodes) from the base
    `model`; `extra` (e.g. --threads 1) goes to every model command."""
    r, d = RECIPES[env], os.path.join(root, env)
    size = "" if model == BASE else f" {REAL_MODEL_FLAGS}"  # the training commands' memory flags
    os.makedirs(d, exist_ok=True)
    turns = r["rounds"].split(",")[-1]
    train = r.get("train", "train")
    rl_train = r.get("rl_train", train)
    val, test = r.get("splits", ("val", "test"))
    lr = f" --lr {SFT_LR[model]}" if model in SFT_LR else ""
    sft = f"--batch-size 8{lr} --mask-actions off --context-turns 0{size}"
    inflight = r.get("parallel", 64)  # environment instances at once in the expert's and DAgger's stages

    def evaluate(name: str, model: str, split: str | list[int], episodes: tuple[int, int]) -> None:
        tasks, samples = episodes  # the same tasks x samples at evaluation seed 1 for every model
        where = f"--split {split} --limit {tasks}"  # a split's first tasks, or these ones:
        where = f"--task-ids {ids_of(split[:tasks])}" if isinstance(split, list) else where
        where += f" --n-samples {samples} --seed 1 --horizon {turns} "
        where += f"--parallel {r.get('eval_parallel', inflight)}"
        stage(d, name, f"eval.py --model {model} --env {env} {where} {FREE} --out {d}/{name}", extra)
        check_errors(os.path.join(d, name))

    pool = split_ids(env, rl_train)  # RL's tasks
    dagger_pool, demos = pool, f"--split {train} --limit {r['expert']}"
    if r.get("disjoint"):  # no demonstration or DAgger label shows a task RL trains on
        dagger_pool = pool[::3] + [t for t in split_ids(env, train) if t not in set(pool)]
        pool = [t for k, t in enumerate(pool) if k % 3]
        demos = f"--task-ids {ids_of(dagger_pool[: r['expert']])}"
    stage(d, "demos", f"eval.py --env {env} --expert on {demos} --parallel {inflight} --out {d}/demos")
    stage(d, "sft", f"sft.py --model {model} --env {env} --data {d}/demos/trajectories.jsonl "
                    f"--demos {r['demos']} --epochs 3 {sft} --out {d}/sft", extra)  # fmt: skip
    imitation = ["sft"]  # the imitation checkpoints, in order
    labels = [f"{d}/demos/first.jsonl"]  # DAgger's aggregate: every round trains on all labels so far
    if r["dagger"]:
        demos_out = f"{d}/demos/trajectories.jsonl"
        derive(labels[0], "demos", demos_out, lambda: first_successes(demos_out, labels[0], r["demos"]))
    for k, n in enumerate(r["dagger"], start=1):  # round k: the last checkpoint's own episodes on the
        name = "dagger" if k == 1 else f"dagger{k}"  # next n train tasks, labelled by the expert
        first = sum(r["dagger"][: k - 1])
        ids = ids_of(dagger_pool[(first + j) % len(dagger_pool)] for j in range(min(n, len(dagger_pool))))
        last = f"{d}/{imitation[-1]}/checkpoint"
        policy = f"eval.py --model {last} --env {env} --task-ids {ids} --parallel {inflight}"
        stage(d, f"{name}_policy", f"{policy} --horizon {turns} {FREE} --out {d}/{name}_policy", extra)
        relabel = (
            f"sft.py --env {env} --relabel {d}/{name}_policy/trajectories.jsonl --out {d}/{name} "
            f"--parallel {inflight}"
        )
        stage(d, name, relabel, done=f"{d}/{name}/trajectories.jsonl")
        labels.append(f"{d}/{name}/trajectories.jsonl")
        stage(d, f"sft{k + 1}", f"sft.py --model {last} --env {env} --epochs 1 {sft} --out {d}/sft{k + 1} "
                                f"--data {','.join(labels)}", extra)  # fmt: skip
        imitation.append(f"sft{k + 1}")
    for name in imitation:  # choose on validation: the best imitation checkpoint is RL's start
        evaluate(f"val_{name}", f"{d}/{name}/checkpoint", val, r["val"])
    best = best_imitation(d, imitation, metric_of(env))
    rl_tasks = pool
    if r.get("pick"):  # RL's tasks: those the best imitation checkpoint solves sometimes, not always
        evaluate(f"pick_{best}", f"{d}/{best}/checkpoint", pool, (r["pick"], PICK_SAMPLES))
        if summary_of(d, f"pick_{best}") or not STUDY.dry:
            rl_tasks = informative(os.path.join(d, f"pick_{best}"))
        # else the budget ended before the pick: the stages after it are only listed, none runs
    picked = f"--train-task-ids {ids_of(rl_tasks)}" if r.get("disjoint") or r.get("pick") else ""
    steps = r.get("steps", 8)

    def self_training() -> list[str]:
        """Self-training, RL's cheapest rival: SFT on the best imitation checkpoint's own successes on
        RL's tasks, as many sampled episodes as one RL run; a second round from the first's checkpoint.
        The rounds that trained, in order."""
        selfs, start, n = [], best, steps * TASKS_PER_STEP  # n tasks x GROUP samples: an RL run's episodes
        for k in range(1, SELF_ROUNDS + 1):
            ids = ids_of(rl_tasks[((k - 1) * n + j) % len(rl_tasks)] for j in range(n))
            own = f"--task-ids {ids} --n-samples {GROUP} --seed {k + 1} --horizon {turns}"
            policy, data = f"{d}/{start}/checkpoint", f"{d}/self{k}_policy"
            rollouts = f"eval.py --model {policy} --env {env} {own} --parallel {inflight} {FREE} --out {data}"
            stage(d, f"self{k}_policy", rollouts, extra)
            rolled = summary_of(d, f"self{k}_policy")
            if rolled and not rolled["success_rate"]:  # no success of its own to learn from
                break
            own_successes = f"--data {data}/trajectories.jsonl --out {d}/self{k}"
            sft_own = f"sft.py --model {policy} --env {env} --epochs 1 {sft} {own_successes}"
            stage(d, f"self{k}", sft_own, extra)
            evaluate(f"val_self{k}", f"{d}/self{k}/checkpoint", val, r["val"])
            selfs.append(f"self{k}")
            start = f"self{k}"
        return selfs

    rl_from, selfs = best, None  # RL starts from the best imitation checkpoint, or (--rl-from self)
    if r.get("rl_from") == "self":  # from the self-training round chosen on validation: a lever
        selfs = self_training()
        if not selfs:
            raise SystemExit(f"{d}: --rl-from self, but self-training found no success to train on")
        rl_from = best_imitation(d, selfs, metric_of(env))
    per_stage = steps // len(r["rounds"].split(","))  # ScalingInter-RL's stages share the steps evenly
    rl = (
        f"train.py --model {d}/{rl_from}/checkpoint --env {env} {FREE} --rounds {r['rounds']} "
        f"--steps-per-stage {per_stage} --steps {steps} --tasks-per-step {TASKS_PER_STEP} "
        f"--group-size {GROUP} "
        f"--minibatch-size 16 --micro-batch-size 8 --lora-rank 16 --kl-coef 0 --lr {r.get('lr', '1e-4')} "
        f"--train-split {rl_train} {picked} --test-split {val} --eval-episodes {RL_EVAL} "
        f"--save-every {RL_SAVE_EVERY}{size}{r.get('rl_args', '')}"
    )
    for seed in seeds:
        out = f"{d}/rl_s{seed}"
        stage(d, f"rl_s{seed}", f"{rl} --seed {seed} --out {out}{resume_flag(out)}", extra)
        evaluate(f"val_rl_s{seed}", f"{d}/rl_s{seed}/checkpoint", val, (r["val"][0], RL_VAL_SAMPLES))
    if val_only:  # a lever's trial on RL: no test episodes (no self-training unless RL starts from it)
        return
    if selfs is None:
        selfs = self_training()
    # the test episodes, once per checkpoint, the same for all of them; the base model last (it
    # rarely ends an episode, so it takes longest): a row stopped midway has its comparison first
    chosen = [best_imitation(d, selfs, metric_of(env))] if selfs else []  # self-training's, on validation
    tests = split_ids(env, test)[r["test_from"] :] if r.get("test_from") else test  # fixed in RECIPES
    for name in imitation + chosen:
        evaluate(f"test_{name}", f"{d}/{name}/checkpoint", tests, r["test"])
    for seed in seeds:
        evaluate(f"test_rl_s{seed}", f"{d}/rl_s{seed}/checkpoint", tests, r["test"])
    evaluate("test_base", model, tests, r["test"])


def check_errors(folder: str, most: float = 0.05) -> None:
    """Stop the recipe when over `most` of an evaluation's episodes ended in an environment error
    (eval.py leaves them out of its rates, so its figures would stand on the few that remain)."""
    summary = summary_of(os.path.dirname(folder), os.path.basename(folder)) or {"n_episodes": 0}
    errors = summary.get("errors", 0)
    if errors > most * (errors + summary["n_episodes"]):
        raise SystemExit(
            f"{folder}: {errors} of {errors + summary['n_episodes']} episodes hit an environment error "
            "(its server.log says why); delete the folder to run it again"
        )


def informative(folder: str) -> list[int]:
    """The tasks of an evaluation (pick_<checkpoint>/) whose episodes neither all succeeded nor all
    failed: a GRPO group on them can differ, so it carries a signal (a flat group carries none)."""
    tasks = [t for t, rate in per_task(folder, "success").items() if 0 < rate < 1]
    if len(tasks) < TASKS_PER_STEP:
        raise SystemExit(
            f"{folder}: only {len(tasks)} tasks solved sometimes and not always, too few to draw from"
        )
    return sorted(tasks)


def metric_of(env: str) -> str:
    """AgentGym scores SciWorld by its score (an episode's rewards sum to its final score / 100);
    the others by success."""
    return "reward" if env == "sciworld" else "success"


def best_imitation(d: str, names: list[str], metric: str) -> str:
    """The imitation checkpoint with the highest mean `metric` on validation (val_<name>/); a tie
    goes to the earlier one (fewer training rounds)."""
    scores = {name: mean_of(per_task(os.path.join(d, f"val_{name}"), metric)) for name in names}
    return max(names, key=lambda name: (scores[name], -names.index(name)))


def per_task(folder: str, metric: str) -> dict:
    """task -> its episodes' mean `metric` in an evaluation (<d>/<name>: its record, or its output
    folder's trajectories.jsonl; environment errors left out, as eval.py's rates leave them out)."""
    rec = result(os.path.dirname(folder), os.path.basename(folder)) or {}
    return {task: statistics.mean(xs) for task, xs in rec.get("outcomes", {}).get(metric, {}).items() if xs}


def result(d: str, name: str) -> dict | None:
    """Stage `name`'s result as a record holds it (paper_records.py): <d>/<name>.json (a records
    folder: --table), the row's record while its recipe runs, else read from the output folder
    <d>/<name>/ (a row that keeps no records). None: the stage has not finished."""
    paths = [os.path.join(d, f"{name}.json")]
    if STUDY.records and os.path.abspath(d) == STUDY.runs:
        paths.append(paper_records.record_path(name))
    for path in paths:
        if os.path.exists(path):
            return paper_records.load(path)
    return paper_records.read_outputs(os.path.join(d, name))


def stage_names(d: str) -> set[str]:
    """The stages with a result in `d` (output folders or records), and in the row's records while
    its recipe runs."""
    places = [d] + ([STUDY.records] if STUDY.records and os.path.abspath(d) == STUDY.runs else [])
    found = {f.removesuffix(".json") for p in places if os.path.isdir(p) for f in os.listdir(p)}
    return found - {"row", "times", "reused"}


def provenance(d: str) -> str:
    """Where a row ran, from its records: the pinned revision, the CPU and the machine hours of every
    recorded stage (their wall times summed); '-' for a row without records."""
    pin = os.path.join(d, "row.json")
    if not os.path.exists(pin):
        return "-"
    row = json.load(open(pin))
    seconds = sum(
        paper_records.load(os.path.join(d, f)).get("seconds") or 0
        for f in sorted(os.listdir(d))
        if f.endswith(".json") and f not in ("row.json", "times.json")
    )
    return f"{row['revision'][:7]}, {row['cpu']}, {seconds / 3600:.1f} h"


def mean_of(task_figures: dict) -> float:
    return statistics.mean(task_figures.values()) if task_figures else 0.0


# ---------------------------------------------------------------------------------------------
# The table


def mean_se(xs: list[float]) -> str:
    """'m ± se' in points (sample std / sqrt(n)); one value: just it."""
    xs = [100 * x for x in xs]
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs) / math.sqrt(len(xs)):.1f}"


def valid_share(d: str, name: str) -> tuple[int, int]:
    """(valid replies, replies) of an evaluation (sft.valid_replies, kept in its record)."""
    return tuple((result(d, name) or {}).get("valid", (0, 0)))


def summary_of(d: str, name: str) -> dict | None:
    return (result(d, name) or {}).get("summary")


def paired_gain(rl: list[dict], base: dict) -> tuple[float, float, int] | None:
    """RL minus `base` paired over the test tasks both have: per task, RL's figure averaged over the
    seeds minus the base's; the mean of those differences and its standard error (std / sqrt(tasks)).
    That error counts the tasks only: how sure we are about these seeds' runs, not the method's
    (`seeds_aware_se`)."""
    tasks = sorted(set(base).intersection(*rl)) if rl else []
    if len(tasks) < 2:
        return None
    diffs = [statistics.mean(seed[t] for seed in rl) - base[t] for t in tasks]
    return statistics.mean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs)


def rl_runs(d: str, split: str) -> list[str]:
    """The RL seeds (rl_s<seed>) whose evaluation on `split` (test or val) is done, in seed order."""
    names = [n.removeprefix(f"{split}_") for n in stage_names(d) if re.fullmatch(rf"{split}_rl_s\d+", n)]
    return sorted((n for n in names if summary_of(d, f"{split}_{n}")), key=lambda n: int(n[4:]))


def compare(env: str, before: str, after: str) -> str:
    """A lever judged on validation: RL in recipe `after` (another --root, e.g. with --rl-steps 24)
    against RL in `before`, from each seed's val_rl_s<seed>/ evaluation; paired over the val tasks
    (per task, the figure averaged over samples and seeds), never reading a test split. Its ±
    counts both arms' seeds (paper_records.paired): each arm's seeds are one draw of many, and
    over tasks alone "> 2 SE" fired in 26-69% of trials for a lever that changes nothing."""
    metric = metric_of(env)
    runs = {}
    for root in (before, after):
        d = os.path.join(root, env)
        runs[root] = [per_task(os.path.join(d, f"val_{n}"), metric) for n in rl_runs(d, "val")]
        if not runs[root]:
            raise SystemExit(f"{d}: no val_rl_s<seed>/ evaluation yet (run its recipe first)")
    gain = paired(runs[after], runs[before])
    if gain is None:
        raise SystemExit(f"{before} and {after}: fewer than 2 val tasks in common, nothing to pair")
    tasks = set.intersection(*(set(seed) for seeds in runs.values() for seed in seeds))
    level = {
        root: mean_of({t: statistics.mean(seed[t] for seed in runs[root]) for t in tasks}) for root in runs
    }
    return (
        f"{NAMES[env]} on validation, RL seeds {len(runs[before])} and {len(runs[after])}: "
        f"{before} {100 * level[before]:.1f} -> {after} {100 * level[after]:.1f}: {signed(gain)} "
        f"paired over {gain.tasks} tasks, both arms' seeds counted (bold past {gain.bar:.2f} SE; "
        f"over tasks only ± {100 * gain.se_tasks:.1f})"
    )


def row(env: str, root: str) -> dict | None:
    """One environment's measured figures, from what its recipe left in <root>/<env>/; None when no
    imitation checkpoint has its test evaluation yet."""
    d, metric = os.path.join(root, env), metric_of(env)
    names = sorted(
        (n for n in stage_names(d) if re.fullmatch(r"sft\d*", n)),
        key=lambda n: int(n[3:] or 1),
    )
    imitation = [n for n in names if summary_of(d, f"test_{n}") and summary_of(d, f"val_{n}")]
    if not imitation:
        return None
    best = best_imitation(d, imitation, metric)
    seeds = rl_runs(d, "test")
    selfs = sorted((n for n in stage_names(d) if re.fullmatch(r"self\d+", n) and summary_of(d, f"val_{n}")),
                   key=lambda n: int(n[4:]))  # fmt: skip
    chosen = best_imitation(d, selfs, metric) if selfs else None  # self-training's round, on validation
    test = {n: per_task(os.path.join(d, f"test_{n}"), metric) for n in ["base", *imitation, *seeds, chosen]
            if n and summary_of(d, f"test_{n}")}  # fmt: skip
    rl_by_task = [test[n] for n in seeds]  # each seed's per-task figures
    tested = chosen in test  # self-training's chosen round has its test evaluation
    val = {n: per_task(os.path.join(d, f"val_{n}"), metric) for n in imitation}
    head = summary_of(d, f"val_{best}")["pass_at_k"]
    times = {n: (result(d, n) or {}).get("seconds") or read_times(d).get(n) for n in seeds}
    valid = [valid_share(d, f"test_{n}") for n in seeds]
    expert = summary_of(d, "demos")
    return dict(
        episodes=summary_of(d, f"test_{best}")["n_episodes"],
        expert=expert["success_rate"] if expert else None,
        base=mean_of(test["base"]) if "base" in test else None,
        imitation=[(n, mean_of(test[n]), mean_of(val[n])) for n in imitation],
        best=best,
        headroom=(head.get("1"), head.get("8")),
        rl=[mean_of(test[n]) for n in seeds],
        rl_val=[mean_of(per_task(os.path.join(d, f"val_{n}"), metric)) for n in rl_runs(d, "val")],
        gain=paired_gain(rl_by_task, test[best]),
        gain_seeds=paired(rl_by_task, [test[best]]),  # counting RL's seeds: the bold mark's
        # self-training (the round chosen on validation): its test and val figures, RL minus it
        self_training=(
            chosen,
            mean_of(test[chosen]),
            mean_of(per_task(os.path.join(d, f"val_{chosen}"), metric)),
        )
        if tested
        else None,
        over_self=paired(rl_by_task, [test[chosen]]) if tested else None,
        valid=(  # (valid, replies): the best imitation checkpoint's, then the RL seeds' summed
            valid_share(d, f"test_{best}"),
            (sum(v for v, _ in valid), sum(n for _, n in valid)),
        ),
        rl_seconds=[times.get(n) for n in seeds],
        provenance=provenance(d),
    )


def signed(gain: Paired) -> str:
    """'+m ± se' in points, in bold past its bar: |m| > bar * se, bar the t quantile for the error's
    degrees of freedom (paper_records.bar: about 2 with no seed spread, 4.3 where 3 seeds' spread is
    all of it), so that a bold mark is a 5% false alarm when nothing changed."""
    mark = "**" if abs(gain.mean) > gain.bar * gain.se else ""
    return f"{mark}{100 * gain.mean:+.1f} ± {100 * gain.se:.1f}{mark}"


def table(root: str) -> str:
    head = (
        "| environment (test episodes) | expert (train) | base SmolLM2 | imitation on test (val) "
        "| best imitation's pass@1 -> pass@8 (val) | SFT + RL, each seed | RL - best imitation, paired "
        "| ± counting seeds, bold past t SE | self-training on test (val) "
        "| RL - self-training, paired, ± counting RL's seeds (self-training: one run, spread not counted) "
        "| valid replies, best imitation -> RL | RL time per seed | paper 7B base -> RL "
        "| revision, CPU, machine hours |\n"
        "|---|---:|---:|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for env in RECIPES:
        f = row(env, root)
        if f is None:
            continue
        pts = lambda x: "-" if x is None else f"{100 * x:.1f}"  # noqa: E731
        share = lambda c: f"{c[0]}/{c[1]} ({c[0] / c[1]:.2f})" if c[1] else "-"  # noqa: E731
        cells = {n: f"{n} {pts(t)} ({pts(v)})" for n, t, v in f["imitation"]}
        cells[f["best"]] = f"**{cells[f['best']]}**"  # the baseline, chosen on validation
        imitation = ", ".join(cells.values())
        gain = seeds_aware = self_cell = over_self = "-"
        if f["gain"]:  # over tasks (the seeds averaged per task), then counting the seeds too
            m, se, n = f["gain"]
            gain = f"{100 * m:+.1f} ± {100 * se:.1f} ({n} tasks)"
            seeds_aware = f"{signed(f['gain_seeds'])} ({len(f['rl'])} seeds, t {f['gain_seeds'].bar:.1f})"
        if f["self_training"]:
            name, on_test, on_val = f["self_training"]
            self_cell = f"{name} {pts(on_test)} ({pts(on_val)})"
        if f["over_self"]:
            over_self = f"{signed(f['over_self'])} ({f['over_self'].tasks} tasks, t {f['over_self'].bar:.1f})"
        rl = ", ".join(pts(x) for x in f["rl"]) or "-"
        if len(f["rl"]) > 1:
            rl += f" (mean {mean_se(f['rl'])})"
        if f["rl_val"]:  # the seeds' mean on validation, as the imitation cells give theirs
            rl += f", val {pts(statistics.mean(f['rl_val']))}"
        secs = ", ".join(f"{s / 60:.0f} min" for s in f["rl_seconds"] if s)
        paper = " -> ".join(f"{x:.2f}" for x in PAPER_7B[env])
        reused = f"; reuses {RECIPES[env]['reuses']}" if "reuses" in RECIPES[env] else ""  # not a fresh test
        lines.append(
            f"| {NAMES[env]} ({f['episodes']}{reused}) | {pts(f['expert'])} | {pts(f['base'])} | {imitation} "
            f"| {pts(f['headroom'][0])} -> {pts(f['headroom'][1])} | {rl} | {gain} | {seeds_aware} "
            f"| {self_cell} | {over_self} "
            f"| {share(f['valid'][0])} -> {share(f['valid'][1])} | {secs or '-'} | {paper} "
            f"| {f['provenance']} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", choices=sorted(RECIPES), help="run this environment's recipe")
    p.add_argument("--seeds", default=SEEDS, help="RL seeds (comma-separated; '': stop before RL)")
    p.add_argument(
        "--root", help="where the stages write (default runs/paper; another --model: runs/paper-<model>)"
    )
    p.add_argument("--model", default=BASE, help="the row's base model, a hub id or folder (default smollm2)")
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
    p.add_argument("--rl-lr", help="RL's learning rate instead of the recipe's 1e-4 (e.g. 5e-4)")
    p.add_argument(
        "--pick",
        type=int,
        metavar="N",
        help="RL trains only on those of the first N rl_train tasks that the best imitation checkpoint "
        f"solves sometimes, not always ({PICK_SAMPLES} samples each)",
    )
    p.add_argument(
        "--disjoint",
        action="store_true",
        help="the demonstrations (and DAgger's labels) never show a task RL trains on: every third "
        "rl_train task goes to the expert, with the train tasks outside rl_train; RL draws the rest",
    )
    p.add_argument(
        "--rl-args",
        metavar="FLAGS",
        help="flags added to RL's train.py command, a lever on trial: '--group-size 8 --tasks-per-step 2' "
        "(groups of 8, the same episodes a step), '--algo gigpo' (per-turn credit), '--horizon-filter true'",
    )
    p.add_argument(
        "--rl-from",
        choices=("best", "self"),
        default="best",
        help="RL's start: the best imitation checkpoint (the recipe), or the self-training round chosen on "
        "validation (a lever: self-training runs first, with --val-only too)",
    )
    p.add_argument("--val-only", action="store_true", help="stop before the test episodes (a lever on trial)")
    p.add_argument(
        "--records",
        help="where each stage's record goes, <records>/<env>/<stage>.json (default docs/paper-table for "
        "the CPU row, <root>/records for another --root or --model; 'none': keep no records)",
    )
    p.add_argument(
        "--reuse",
        metavar="ROOT",
        help="a lever's folder: take each stage whose command is the one this folder would run from the "
        "row in ROOT (its record, unchanged, and its outputs), listed in <records>/<env>/reused.json",
    )
    p.add_argument(
        "--pin",
        help="the revision a new row's stages run at, in a git worktree (default: this checkout's HEAD; "
        "a row already started keeps the revision in its row.json)",
    )
    p.add_argument(
        "--budget",
        type=float,
        metavar="MINUTES",
        help="run the next stages that fit in MINUTES (estimated from the records' wall times; an RL "
        "seed counts with its validation), then print what finished and what remains",
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="print the table from the records (also written to <root>/table.md, beside the runs)",
    )
    p.add_argument(
        "--compare",
        metavar="ROOT",
        help="judge a lever on validation: --env's RL in --root against its RL in ROOT (the recipe "
        "without the lever), paired over the val tasks",
    )
    args, extra = p.parse_known_args(argv)  # the rest goes to every model-running command (--threads 1)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.basename(args.model.rstrip("/")))  # Qwen2.5-1.5B-Instruct
    default_root = "runs/paper" if args.model == BASE else f"runs/paper-{name}"
    if not args.records:
        args.records = paper_records.RECORDS if not args.root and args.model == BASE else None
    args.root = os.path.abspath(args.root or default_root)  # the stages run in the row's worktree
    args.records = args.records or os.path.join(args.root, "records")
    if args.compare:
        if not args.env:
            p.error("--compare needs --env")
        print(compare(args.env, args.compare, args.root))
        return
    if args.env:
        if args.dagger is not None:
            rounds = [int(n) for n in args.dagger.split(",") if n]
            RECIPES[args.env] = dict(RECIPES[args.env], dagger=rounds)  # this run's recipe only
        if args.demos:
            expert = max(RECIPES[args.env]["expert"], args.demos * 5 // 4)
            RECIPES[args.env] = dict(RECIPES[args.env], demos=args.demos, expert=expert)
        if args.rl_steps:
            RECIPES[args.env] = dict(RECIPES[args.env], steps=args.rl_steps)
        if args.rl_lr:
            RECIPES[args.env] = dict(RECIPES[args.env], lr=args.rl_lr)
        if args.pick:
            RECIPES[args.env] = dict(RECIPES[args.env], pick=args.pick)
        if args.disjoint:
            RECIPES[args.env] = dict(RECIPES[args.env], disjoint=True)
        if args.rl_args:
            RECIPES[args.env] = dict(RECIPES[args.env], rl_args=f" {args.rl_args}")
        if args.rl_from == "self":
            RECIPES[args.env] = dict(RECIPES[args.env], rl_from="self")
        seeds = [int(s) for s in args.seeds.split(",") if s]
        STUDY.runs = os.path.join(args.root, args.env)
        if args.records != "none":
            STUDY.records = os.path.join(args.records, args.env)
            STUDY.revision, STUDY.cwd = paper_records.pin(STUDY.records, args.pin, os.path.join(ROOT, "runs"))
        if args.reuse:  # the row's records: docs/paper-table for runs/paper (the CPU row), else ROOT/records
            row_root = os.path.abspath(args.reuse)
            cpu_row = row_root == os.path.abspath(default_root) and args.model == BASE
            row_records = paper_records.RECORDS if cpu_row else os.path.join(row_root, "records")
            if args.records == "none" or row_root == args.root:
                p.error("--reuse needs records of its own and another --root than the row's")
            STUDY.reuse = (os.path.join(row_records, args.env), os.path.join(row_root, args.env))
        STUDY.deadline = time.time() + 60 * args.budget if args.budget else math.inf
        recipe(args.env, args.root, seeds, extra, args.val_only, args.model)
        print(paper_records.report())
    if args.table or args.env:
        text = table(args.root if args.records == "none" else args.records)
        os.makedirs(args.root, exist_ok=True)
        with open(os.path.join(args.root, "table.md"), "w") as f:  # beside the runs, not in the records
            f.write(text)
        print(text)


if __name__ == "__main__":
    main()
