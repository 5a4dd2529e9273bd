"""Train an LLM agent with multi-turn online RL (AgentGym-RL) and the ScalingInter-RL horizon.

    python train.py                       # CPU demo: tiny policy, GRPO, BabyAI, staged horizon
    python train.py --model Qwen/Qwen2.5-1.5B-Instruct --lr 1e-6 --rounds 6,13,20 \
        --steps-per-stage 100 --steps 300 --mixed-precision bf16     # a real model on a GPU

The loop, one step at a time (paper, section 2):
    1. horizon h = schedule(step)                                   (scaling_inter.py)
    2. rollouts: `tasks_per_step` train tasks x `group_size` samples, at most h turns each
                                                                       (agent.py -> envs/ -> servers/)
    3. advantages from the outcome rewards                           (grpo.py / ppo.py / ...)
    4. `epochs` passes of clipped-ratio updates over minibatches     (update.py, the algorithm's loss)
    5. log to <out>/metrics.jsonl (and TensorBoard), checkpoint to <out>/checkpoint
       (with the step's learning signals and alarms: machinery/signals.py, docs/signals.md;
        machinery/metrics.py, machinery/checkpoint.py)
The default run also evaluates the policy on the held-out test split before and after training
and writes both to <out>/summary.json (`eval_before`, `eval_after`, same keys as eval.py), their
episodes and figures to <out>/eval_before/ and <out>/eval_after/, and at the end <out>/report.html (view.py:
learning curves, the episodes, which test tasks flipped; `--save-rollouts-every N` adds every
Nth step's rollouts, <out>/rollouts/step_N.jsonl).

Several GPUs or machines: `accelerate launch --multi_gpu --num_processes N train.py ...` runs N
processes that each roll out 1/N of the step's tasks and make one update together (DDP), with the
distributed plumbing in machinery/dist.py (docs/scale-out.md).

Faults: an episode that ended in an environment error (a crashed server, a time-out) has no
outcome the policy earned, so it is left out of the update, counted (`charts/env_errors`) and
warned about; MAX_FAILED_STEPS steps in a row with no usable episode stop the run. A `--url` that
does not answer stops the run before anything else. A kill while saving never leaves a half-written
checkpoint, and `--resume` continues where the checkpoint stopped (machinery/checkpoint.py).
"""

import gc
import json
import math
import os
import random
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator
from tqdm import tqdm

import view
from agent import rollout
from algorithm import dynamic_sampling
from algos import ALGOS
from algos import Settings as AlgorithmSettings
from batch import Batch, make_batch
from config import AgentConfig, check_split, flag, parse, resolve_device, resolve_precision, set_threads
from diagnostics.credit import token_rows, turn_credit, watch_ratios
from diagnostics.probe import collect_states, probe_tasks
from envs import ENVS, EnvPool, EnvSpec, close_pool, env_spec, open_pool, server_url
from eval import check_task_ids, evaluate_in_training, parse_task_ids, write_trajectories
from machinery import dist, signals
from machinery.checkpoint import (
    check_checkpoint,
    checkpoint_folder,
    previous_outputs,
    restore_rng,
    save_checkpoint,
)
from machinery.metrics import log_metrics, plot_curves, progress, step_metrics, tensorboard
from machinery.rng import seed_everything
from machinery.timing import profile_row, timed
from scaling_inter import ScheduleConfig, from_config
from update import Learner, UpdateConfig, load_learner, prepare_batch, print_on_policy_gap, update

MAX_FAILED_STEPS = 3  # consecutive steps whose every episode hit an environment error: give up


@dataclass
class Config(AgentConfig, UpdateConfig, ScheduleConfig, AlgorithmSettings, signals.Alarms):
    """Every knob of a training run: the agent's (config.py), the update's (update.py), the
    horizon schedule's (scaling_inter.py), each algorithm's own (its file; algos/ joins them), the
    alarms' (machinery/signals.py), and the loop's, below."""

    algo: str = flag("grpo", choices=list(ALGOS))
    """algorithm: one of algos.ALGOS (grpo, rloo, ppo, reinforce_pp, gigpo)"""
    steps: int = flag(50, at_least=1)
    """training steps (one rollout batch + update each)"""
    out: str = "runs/default"
    """output folder: metrics.jsonl, summary.json, checkpoint/, curves.png, report.html, eval_before/,
    eval_after/"""
    train_split: str = "train"
    """task split to train on"""
    train_task_ids: str = flag("", check=check_task_ids)
    """task ids (data_idx) to train on instead of --train-split, e.g. 0-9,12 (benchmarks/paper_table.py
    --pick: the goals a policy solves sometimes); none of them in any val or test split"""
    test_split: str = "test"
    """held-out split for eval_before / eval_after"""
    tasks_per_step: int = flag(8, at_least=1)
    """distinct tasks per step (with N processes: in all, each process rolling out about 1/N of them)"""
    group_size: int = flag(8, at_least=1)
    """rollouts per task (GRPO's group n)"""
    epochs: int = flag(1, at_least=1)
    """passes over each rollout batch"""
    minibatch_size: int = flag(64, at_least=1)
    """trajectories per minibatch (at most; the batch is cut into equal minibatches; with N processes: of the
    global batch)"""
    ref_device: str = flag("auto", choices=("auto", "cpu"))
    """where the frozen reference model lives: auto (the policy's device) or cpu"""
    generation_batch_size: int = flag(256, at_least=1)
    """episodes that generate at once at rollout and evaluation (their prefill's memory); the rest wait"""
    eval_episodes: int = flag(200, at_least=0)
    """test tasks for eval_before / eval_after (0: skip)"""
    eval_samples: int = flag(1, at_least=1)
    """episodes per test task at eval_before / eval_after (a small test split needs several)"""
    eval_horizon: int = flag(0, at_least=0)
    """the horizon at evaluation; 0: the schedule's last"""
    eval_every: int = flag(0, at_least=0)
    """also evaluate on the test split every N steps (logged as eval/success, eval/turns); 0: never"""
    probe_every: int = flag(0, at_least=0)
    """BabyAI: log the mission-binding probe (diagnostics/probe.py) every N steps; 0: never"""
    probe_states: int = flag(100, at_least=1)
    """held-out GoToLocal tasks the probe reads"""
    save_every: int = flag(20, at_least=1)
    """checkpoint every N steps (and at the end)"""
    save_rollouts_every: int = flag(0, at_least=0)
    """write every Nth step's rollouts to <out>/rollouts/step_N.jsonl, to watch them in view.py (0: never)"""
    resume: str = flag("", check=lambda path: check_checkpoint(path))
    """checkpoint folder to continue from (model, optimizer, algorithm state, step, RNG)"""

    def __post_init__(self):
        super().__post_init__()
        check_split(self.env, "train_split", self.train_split)
        check_split(self.env, "test_split", self.test_split)
        if self.train_task_ids:
            ids = set(parse_task_ids(self.train_task_ids))
            # held out: --test-split and every other val or test split (openenv: read at start-up)
            splits = ENVS[self.env].splits if self.env in ENVS else {}
            held_out = [self.test_split] + [n for n in splits if {"val", "test"} & set(n.split("-"))]
            for name in dict.fromkeys(held_out):
                if seen := sorted(ids & set(splits.get(name, ()))):
                    raise ValueError(f"--train-task-ids: {seen[:5]} are in the held-out split {name}")
            if len(ids) < self.tasks_per_step:
                raise ValueError(
                    f"--train-task-ids: {len(ids)} tasks, fewer than --tasks-per-step {self.tasks_per_step}"
                )
        if self.ref_device == "cpu" and self.lora_rank:  # nothing to move: the reference is the policy's base
            raise ValueError(
                "--ref-device cpu does nothing with --lora-rank: the reference model is the policy's "
                "base with its adapters off, which stays where the policy is; leave --ref-device at auto"
            )
        if self.group_size < ALGOS[self.algo].min_group_size:
            raise ValueError(
                f"--group-size {self.group_size}: {self.algo} compares the samples of a task's group, so "
                f"it needs at least {ALGOS[self.algo].min_group_size}"
            )


def parse_args(argv=None) -> Config:
    return parse(Config, argv, description=__doc__.split("\n")[0])


def train(cfg: Config, profile: list[dict] | None = None) -> dict:
    """Run the loop: the five steps of this file's docstring, one step at a time. Set-up and
    --resume are `setup`'s, the evaluations before, during and after training eval.py's.
    `profile`: append, per step, a dict of seconds per part of the step (machinery/timing.py;
    benchmarks/rollout_profile.py prints it)."""
    run = setup(cfg)
    learner = run.learner
    try:
        if run.start == 1:
            evaluate_in_training(run, "before")
        bar = tqdm(range(run.start, cfg.steps + 1), desc=f"{cfg.algo} on {cfg.env}", initial=run.start - 1,
                   total=cfg.steps, disable=not run.main)  # fmt: skip
        for step in bar:
            t0, tm = time.time(), ({} if profile is not None else None)  # tm: this step's sections
            # 1. horizon: the ScalingInter-RL stage of this step (the adaptive schedule reads the history)
            horizon = run.schedule.horizon(step, run.history)
            # 2. rollout: tasks_per_step tasks x group_size samples, at most `horizon` turns each
            episodes, trajs, extra = collect(run, step, horizon, tm)
            t_roll = time.time() - t0
            if skip_failed_step(run, step, horizon, trajs, extra["charts/env_errors"]):
                continue
            # 3. advantages from the outcome rewards (pi_old and the reference's log-probs first)
            with timed(tm, "make_batch"):
                batch = make_batch(trajs, learner.policy.tokenizer.pad_token_id)
            t_update = time.time()
            extra.update(prepare_batch(learner, batch, trajs, cfg, tm))
            with timed(tm, "advantages"), learner.accelerator.autocast():  # an algorithm's own model reads it
                learner.algo.advantages(batch, cfg, learner.state)
            # 4. update: `epochs` passes of clipped-ratio steps over minibatches
            learner.policy.model.train()
            seen = {} if saves_rollouts(cfg, step) else None  # each row's ratios at the update (report)
            stats = update(learner.forward, batch, len(trajs), watch_ratios(learner.algo, seen), cfg,
                           learner.state, learner.accelerator, learner.trained, tm)  # fmt: skip
            if step == run.start and run.main:  # before any optimizer step the ratio must be 1
                print_on_policy_gap(stats)
            signals.check_finite(learner.policy.model, step)  # NaN weights stop the run here, never saved
            # 5. log (with the step's signals, alarms and periodic evaluation), checkpoint
            times, st = (t0, t_roll, t_update), {**stats, **extra}
            m = step_metrics(step, horizon, trajs, batch, st, times, cfg.epochs, run.device)
            m.update(signals.step_signals(dist.gather(signals.episode_facts(episodes)), batch))
            m.update(evaluate_in_training(run, "step", step))
            fired = log_step(run, m, episodes, batch, trajs, seen)
            bar.set_postfix(**progress(m, fired))
            if step % cfg.save_every == 0 or step == cfg.steps:
                with timed(tm, "checkpoint"):
                    save_checkpoint(cfg, learner, step)
            if profile is not None:
                profile.append(profile_row(step, horizon, len(trajs), batch, t0, tm))
            if fired and cfg.stop_on_alarm:  # an alarm stops the run only when asked to
                if run.main:
                    tqdm.write(f"stopping after step {step}: --stop-on-alarm ({', '.join(fired)})")
                break
        evaluate_in_training(run, "after")
    finally:
        close_pool(run.pool)
        if run.writer:
            run.writer.close()
        gc.unfreeze()  # (setup froze them: a caller that trains again may then free this run's objects)
    finish(run)
    return run.summary


@dataclass
class Run:
    """What the loop works with, built once by `setup`."""

    cfg: Config
    learner: Learner  # the policy, its optimizer and reference, the algorithm and its state (update.py)
    device: str  # cpu or cuda
    spec: EnvSpec
    schedule: object  # scaling_inter's staged or adaptive schedule: .horizon(step, history)
    pool: EnvPool
    train_tasks: list[int]
    test_tasks: list[int]  # the first --eval-episodes of the test split
    eval_horizon: int
    probe: list  # the binding probe's states (diagnostics/probe.py); empty: no probe
    start: int  # the first step to run (after --resume: the checkpoint's + 1)
    history: list[dict]  # the logged steps so far: the adaptive schedule replays its decisions from them
    summary: dict  # what <out>/summary.json will hold
    writer: object  # TensorBoard's SummaryWriter, or None
    main: bool  # with N processes (machinery/dist.py) only the main one writes files
    failed_steps: int = 0  # consecutive steps with no usable episode


def setup(cfg: Config) -> Run:
    """Seeds, the policy, its reference and optimizer, the algorithm's state, the environments and
    the output folder, in an order a --seed reproduces; with --resume, all of it as the checkpoint
    left it (its step, RNG streams, optimizer and algorithm state; metrics.jsonl trimmed back)."""
    seed_everything(cfg.seed)  # python's `random`, which picks the tasks, is the same on every process
    schedule, device = from_config(cfg), resolve_device(cfg.device)
    set_threads(cfg, device)
    cfg.mixed_precision = resolve_precision(cfg.mixed_precision, cfg.model, device)
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=device == "cpu")
    url = server_url(cfg.url, dist.rank())  # a dead --url is a clear error before anything else runs
    spec = env_spec(cfg.env, url, cfg.train_split, cfg.test_split)  # (openenv: read from its server)
    os.makedirs(cfg.out, exist_ok=True)
    main = accelerator.is_main_process
    if cfg.tasks_per_step < dist.world():
        raise ValueError(
            f"--tasks-per-step {cfg.tasks_per_step} < {dist.world()} processes: some would have no task"
        )
    torch.manual_seed(dist.process_seed(cfg.seed))  # each process samples its own replies
    np.random.seed(dist.process_seed(cfg.seed))

    if cfg.resume:
        cfg.resume = checkpoint_folder(cfg.resume)
    saved = torch.load(os.path.join(cfg.resume, "state.pt"), weights_only=False) if cfg.resume else None
    learner = load_learner(cfg, ALGOS[cfg.algo], accelerator, saved)
    start = restore_rng(saved, cfg.resume) if saved else 1

    n_eval = min(cfg.eval_episodes, len(spec.splits[cfg.test_split]))
    # this process's environments: its own local server (on a free port), or its share of --url's list
    my_tasks = len(dist.shard(list(range(cfg.tasks_per_step))))
    size = max(my_tasks * cfg.group_size, math.ceil(n_eval * cfg.eval_samples / dist.world()))
    log_path = os.path.join(cfg.out, "server.log" if main else f"server.{dist.rank()}.log")
    pool = open_pool(cfg.env, size=size, url=url, log_path=log_path)
    summary, history = previous_outputs(cfg, saved, start, main)
    probed = cfg.probe_every and cfg.env == "babyai"
    gc.freeze()  # the imports' and the models' objects live on: full collections skip them (0.6 s)
    return Run(
        cfg=cfg,
        learner=learner,
        device=device,
        spec=spec,
        schedule=schedule,
        pool=pool,
        train_tasks=parse_task_ids(cfg.train_task_ids)
        if cfg.train_task_ids
        else spec.splits[cfg.train_split],
        test_tasks=spec.splits[cfg.test_split][:n_eval],
        eval_horizon=cfg.eval_horizon or schedule.rounds[-1],
        probe=collect_states(pool, probe_tasks(cfg.probe_states)) if probed else [],
        start=start,
        history=history,
        summary=summary,
        writer=tensorboard(cfg.out) if main else None,
        main=main,
    )


def collect(run: Run, step: int, horizon: int, tm=None) -> tuple[list, list, dict]:
    """Step 2: this process's rollouts of the step's groups. Returns every episode (all are saved and
    watched), the trajectories the update learns from (no environment error; with
    --dynamic-sampling, the groups with a reward spread) and their stats."""
    run.learner.policy.model.eval()
    episodes = roll_groups(run, horizon, tm)
    trajs = usable(episodes, step)
    extra = {"charts/env_errors": dist.global_sum(len(episodes) - len(trajs))}  # left out of the update
    if run.cfg.dynamic_sampling:  # DAPO (algorithm.py): groups with no reward spread out, fresh groups in
        trajs, more = refill(run, trajs, step, horizon, tm)
        extra.update(more)
    return episodes, trajs, extra


def roll_groups(run: Run, horizon: int, tm=None, round_: int = 0) -> list:
    """Draw tasks_per_step train tasks (the same on every process) and roll out each group_size
    times, at most `horizon` turns: this process's share, whole groups, numbered from round_ *
    tasks_per_step (dynamic sampling's later rounds get new group ids)."""
    cfg = run.cfg
    tasks = random.sample(run.train_tasks, cfg.tasks_per_step)
    mine = [g for g in dist.shard(list(range(len(tasks)))) for _ in range(cfg.group_size)]  # whole groups
    # in the update's precision (--mixed-precision): bf16 activations and KV cache
    with timed(tm, "rollout"), dist.full_weights(run.learner.forward), run.learner.accelerator.autocast():
        return rollout(
            run.learner.policy,
            run.pool,
            run.spec,
            [tasks[g] for g in mine],
            horizon,
            groups=[round_ * cfg.tasks_per_step + g for g in mine],
            batch_size=cfg.generation_batch_size,
            timings=tm,
        )


def refill(run: Run, trajs: list, step: int, horizon: int, tm=None) -> tuple[list, dict]:
    """--dynamic-sampling: `algorithm.dynamic_sampling` over this process's share of the groups,
    more rounds of `roll_groups` refilling it. Returns (trajectories to train on, stats)."""
    want = len(dist.shard(list(range(run.cfg.tasks_per_step))))
    more = lambda r: usable(roll_groups(run, horizon, tm, r), step)
    return dynamic_sampling(trajs, more, want, run.cfg.dynamic_max_rounds, horizon)


def usable(trajs: list, step: int) -> list:
    """The episodes the update may learn from: those that did not end in an environment error.
    Such an episode's reward 0 says nothing about the policy (the server crashed or timed out);
    trained on, it would get a negative advantage for the environment's fault."""
    ok = [t for t in trajs if not t.error]
    if len(ok) < len(trajs):
        first = next(t.error for t in trajs if t.error)
        tqdm.write(
            f"warning: step {step}: {len(trajs) - len(ok)} of {len(trajs)} episodes ended in an "
            f"environment error and are left out of the update (first: {first[:200]})"
        )
    return ok


def skip_failed_step(run: Run, step: int, horizon: int, trajs: list, n_errors: int) -> bool:
    """Whether the step has nothing to learn from: the processes update together, so one with no
    usable episode skips the step for all (the pool restarts a crashed server meanwhile). Such a
    step is logged with its error count; MAX_FAILED_STEPS of them in a row stop the run."""
    skip = dist.global_max(int(not trajs))
    run.failed_steps = run.failed_steps + 1 if skip else 0
    if run.failed_steps >= MAX_FAILED_STEPS:
        raise RuntimeError(
            f"every episode of the last {run.failed_steps} steps ended in an environment "
            f"error; is the environment server at {run.pool.url} working?"
        )
    if skip:
        run.history.append({"step": step, "horizon": horizon, "charts/env_errors": n_errors})
        if run.main:
            log_metrics(os.path.join(run.cfg.out, "metrics.jsonl"), run.writer, run.history[-1])
    return bool(skip)


def saves_rollouts(cfg: Config, step: int) -> bool:
    return bool(cfg.save_rollouts_every) and step % cfg.save_rollouts_every == 0


def log_step(
    run: Run, m: dict, episodes: list, batch: Batch, trajs: list, seen: dict | None = None
) -> list[str]:
    """Append the step's metrics to the history, metrics.jsonl and TensorBoard, with the alarms
    that hold at this step (machinery/signals.py: `alarm/<name>` = 1, and one console line the
    first time each fires); every --save-rollouts-every steps write its episodes to
    <out>/rollouts/step_N.jsonl, each turn of the batch's trajectories `trajs` (those of them
    that are among `episodes`, the step's first rollouts) with the credit the update gave it and
    each token of its rows (credit.token_rows; `seen`: the rows' ratios at the update). Returns the
    alarms."""
    cfg, step = run.cfg, m["step"]
    run.history.append(m)
    fired = signals.check(run.history, cfg)
    m.update({f"alarm/{name}": 1.0 for name in fired})
    for name in fired:
        if run.main and not any(r.get(f"alarm/{name}") for r in run.history[:-1]):  # its first time
            tqdm.write(signals.describe(name, run.history))
    if run.main:
        log_metrics(os.path.join(cfg.out, "metrics.jsonl"), run.writer, m)
    if saves_rollouts(cfg, step):
        tokens = token_rows(batch, run.learner.policy.tokenizer, seen, cfg)
        for t, credit, rows in zip(trajs, turn_credit(batch, cfg.algo, run.learner.algo), tokens):
            # per turn, the advantage this update gave it; per token, what the inspector shows (trajs' order)
            t.credit = {**credit, **rows}
        episodes = dist.gather(episodes)  # in task order
        if run.main:
            path = os.path.join(cfg.out, "rollouts", f"step_{step:06d}.jsonl")
            write_trajectories(path, episodes, step=step)
    return fired


def finish(run: Run) -> None:
    """The main process writes <out>/summary.json, curves.png and report.html; no process returns
    before they are written."""
    if run.main:
        with open(os.path.join(run.cfg.out, "summary.json"), "w") as f:
            json.dump(run.summary, f, indent=2)
        plot_curves(os.path.join(run.cfg.out, "metrics.jsonl"), os.path.join(run.cfg.out, "curves.png"))
        print("report:", view.write_report([run.cfg.out], os.path.join(run.cfg.out, "report.html")))
    dist.barrier()


if __name__ == "__main__":
    train(parse_args())
    gc.freeze()  # the exit then skips collecting torch's and transformers' objects: 1 s of the demo
