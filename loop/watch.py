"""Watching a training step: everything train.py's loop does that is not the method.

Where it sits: `train.train` runs `for step in steps(run, profile)` and, after each update,
`after_update(...)`. `steps` evaluates before the first step and after the last (eval.py), draws
the progress bar, starts each step's `Clock` and appends its profile row (machinery/timing.py);
`ratios` hands the update an algorithm whose loss also records each row's ratios for the token
inspector (diagnostics/credit.py); `after_update` checks the weights are finite, computes the step's
metrics, learning signals and alarms (machinery/signals.py, docs/signals.md), gathers them across
processes, evaluates every --eval-every steps, writes metrics.jsonl, TensorBoard and every
--save-rollouts-every steps the rollouts, and checkpoints (machinery/checkpoint.py).
"""

import os
import time
from dataclasses import dataclass

from tqdm import tqdm

from diagnostics.credit import token_rows, turn_credit, watch_ratios
from eval import evaluate_in_training, write_trajectories
from machinery import dist, signals
from machinery.checkpoint import save_checkpoint
from machinery.metrics import log_metrics, progress, step_metrics
from machinery.timing import profile_row, timed
from update import print_on_policy_gap


@dataclass
class Clock:
    """One step's times: its start, the rollout's end, the update's start, and with a profile
    (train.train's `profile`) the seconds of each section (machinery/timing.py); and what else
    watches the step: the rows' ratios at the update (`ratios`), the profile row's sizes."""

    t0: float
    sections: dict | None
    rolled: float = 0.0
    update_from: float = 0.0
    seen: dict | None = None  # (trajectory, turn) -> the row's ratios at the update (diagnostics/credit.py)
    sizes: tuple | None = None  # (horizon, trajectories, batch) of a step that updated

    def part(self, name: str):
        """`with clock.part(name):` adds the block's seconds to the section (nothing without a profile)."""
        return timed(self.sections, name)


def steps(run, profile: list | None = None):
    """The run's steps, from run.start: evaluates before the first, and after the last or after
    --stop-on-alarm stopped the run; between, a step's `Clock` and facts, and its profile row once
    its update is done (a skipped step has none)."""
    cfg = run.cfg
    if run.start == 1:
        evaluate_in_training(run, "before")
    bar = tqdm(range(run.start, cfg.steps + 1), desc=f"{cfg.algo} on {cfg.env}", initial=run.start - 1,
               total=cfg.steps, disable=not run.main)  # fmt: skip
    run.bar, run.stop = bar, False
    for step in bar:
        run.clock, run.facts = Clock(time.time(), {} if profile is not None else None), {}
        yield step
        if profile is not None and run.clock.sizes:
            profile.append(profile_row(step, *run.clock.sizes, run.clock.t0, run.clock.sections))
        if run.stop:
            break
    evaluate_in_training(run, "after")


def ratios(run, step: int):
    """The algorithm the update runs: the run's own, whose loss also records each row's ratios at
    the update on the steps whose rollouts are saved (the token inspector's)."""
    run.clock.seen = {} if saves_rollouts(run.cfg, step) else None
    return watch_ratios(run.learner.algo, run.clock.seen)


def after_update(run, step: int, horizon: int, episodes: list, trajs: list, batch, stats: dict) -> None:
    """Step 5: the step's metrics (with its signals, alarms and periodic evaluation) logged, a
    checkpoint every --save-every steps; --stop-on-alarm stops the run when an alarm fired."""
    cfg, learner = run.cfg, run.learner
    if step == run.start and run.main:  # before any optimizer step the ratio must be 1
        print_on_policy_gap(stats)
    signals.check_finite(learner.policy.model, step)  # NaN weights stop the run here, never saved
    times, st = (run.clock.t0, run.clock.rolled - run.clock.t0, run.clock.update_from), {**stats, **run.facts}
    m = step_metrics(step, horizon, trajs, batch, st, times, cfg.epochs, run.device)
    m.update(signals.step_signals(dist.gather(signals.episode_facts(episodes)), batch))
    m.update(evaluate_in_training(run, "step", step))
    fired = log_step(run, m, episodes, batch, trajs, run.clock.seen)
    run.bar.set_postfix(**progress(m, fired))
    if step % cfg.save_every == 0 or step == cfg.steps:
        with run.clock.part("checkpoint"):
            save_checkpoint(cfg, learner, step)
    run.clock.sizes = (horizon, len(trajs), batch)  # the profile row's
    if fired and cfg.stop_on_alarm:  # an alarm stops the run only when asked to
        if run.main:
            tqdm.write(f"stopping after step {step}: --stop-on-alarm ({', '.join(fired)})")
        run.stop = True


def saves_rollouts(cfg, step: int) -> bool:
    return bool(cfg.save_rollouts_every) and step % cfg.save_rollouts_every == 0


def log_step(run, m: dict, episodes: list, batch, trajs: list, seen: dict | None = None) -> list[str]:
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
