"""A training run's set-up and tear-down: what train.py's loop works with, and what is left when
it ends.

Where it sits: `train.train` opens `session(cfg, load_learner)`, runs its five steps against the
`Run` it yields, and the session closes the environments and writes <out>/summary.json, curves.png
and report.html. `setup` seeds every random stream in an order a --seed reproduces and, with
--resume, puts back all of it as the checkpoint left it (machinery/checkpoint.py).
"""

import gc
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from accelerate import Accelerator

import view
from algos import ALGOS
from config import resolve_device, resolve_precision, set_threads
from diagnostics.probe import collect_states, probe_tasks
from envs import EnvPool, EnvSpec, close_pool, env_spec, open_pool, server_url
from eval import parse_task_ids
from machinery import dist
from machinery.checkpoint import checkpoint_folder, previous_outputs, restore_rng
from machinery.metrics import log_metrics, plot_curves, tensorboard
from machinery.rng import seed_everything
from scaling_inter import from_config

MAX_FAILED_STEPS = 3  # consecutive steps whose every episode hit an environment error: give up


@dataclass
class Run:
    """What the loop works with, built once by `setup`."""

    cfg: object  # train.Config
    learner: object  # the policy, its optimizer and reference, the algorithm and its state (update.Learner)
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
    clock: object = None  # this step's times and watchers (loop/watch.py's Clock)
    bar: object = None  # the progress bar (loop/watch.py's `steps`)
    stop: bool = False  # --stop-on-alarm: an alarm fired, the run ends after this step
    facts: dict = field(default_factory=dict)  # this step's stats besides the update's (env errors, masks)


@contextmanager
def session(cfg, load_learner):
    """`setup`'s Run for the loop; afterwards the environments closed and, when the loop ended
    without an error, `finish`'s files written."""
    run = setup(cfg, load_learner)
    try:
        yield run
    finally:
        close_pool(run.pool)
        if run.writer:
            run.writer.close()
        gc.unfreeze()  # (setup froze them: a caller that trains again may then free this run's objects)
    finish(run)


def setup(cfg, load_learner) -> Run:
    """Seeds, the policy, its reference and optimizer, the algorithm's state (`load_learner`:
    update.load_learner, as train.py names it), the environments and the output folder, in an order
    a --seed reproduces; with --resume, all of it as the checkpoint left it (its step, RNG streams,
    optimizer and algorithm state; metrics.jsonl trimmed back)."""
    seed_everything(cfg.seed)  # python's `random`, which picks the tasks, is the same on every process
    schedule, device = from_config(cfg), resolve_device(cfg.device)
    set_threads(cfg, device)
    cfg.mixed_precision = resolve_precision(cfg.mixed_precision, cfg.model, device)
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=device == "cpu")
    url = server_url(cfg.url, dist.rank())  # a dead --url is a clear error before anything else runs
    spec = env_spec(cfg.env, url, cfg.train_split, cfg.test_split)  # (openenv: read from its server)
    if cfg.train_task_ids:
        cfg.check_splits(spec.splits)  # openenv's splits are known only now (the others': at parse too)
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
    size = min(size, cfg.episodes_in_flight or size)  # agent.rollout runs len(pool) episodes at a time
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
        else spec.splits[cfg.train_split],  # noqa: E501
        test_tasks=spec.splits[cfg.test_split][:n_eval],
        eval_horizon=cfg.eval_horizon or schedule.rounds[-1],
        probe=collect_states(pool, probe_tasks(cfg.probe_states)) if probed else [],
        start=start,
        history=history,
        summary=summary,
        writer=tensorboard(cfg.out) if main else None,
        main=main,
    )


def skip_failed_step(run: Run, step: int, horizon: int, trajs: list) -> bool:
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
        n_errors = run.facts["charts/env_errors"]
        run.history.append({"step": step, "horizon": horizon, "charts/env_errors": n_errors})
        if run.main:
            log_metrics(os.path.join(run.cfg.out, "metrics.jsonl"), run.writer, run.history[-1])
    return bool(skip)


def finish(run: Run) -> None:
    """The main process writes <out>/summary.json, curves.png and report.html; no process returns
    before they are written."""
    if run.main:
        with open(os.path.join(run.cfg.out, "summary.json"), "w") as f:
            json.dump(run.summary, f, indent=2)
        plot_curves(os.path.join(run.cfg.out, "metrics.jsonl"), os.path.join(run.cfg.out, "curves.png"))
        print("report:", view.write_report([run.cfg.out], os.path.join(run.cfg.out, "report.html")))
    dist.barrier()
