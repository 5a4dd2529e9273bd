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
import random
import time
from dataclasses import dataclass

from tqdm import tqdm

from agent import rollout
from algorithm import dynamic_sampling
from algos import ALGOS
from algos import Settings as AlgorithmSettings
from batch import Batch, make_batch
from config import AgentConfig, check_split, flag, parse
from envs import ENVS
from eval import check_task_ids, parse_task_ids
from loop import watch
from loop.run import Run, session, skip_failed_step
from machinery import dist, signals
from machinery.checkpoint import check_checkpoint
from presets import PRESETS
from scaling_inter import ScheduleConfig
from update import UpdateConfig, load_learner, prepare_batch, update


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
    episodes_in_flight: int = flag(0, at_least=0)
    """episodes (and environment instances) at once: a step's rollout and an evaluation run in chunks of
    this many, one after another, each chunk's KV caches freed before the next (0: all at once). The
    same policy rolls out every chunk, so the step learns from the same batch: it trades time for memory"""
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
            if self.env in ENVS:  # (openenv's splits are known once its server is asked: setup checks)
                check_held_out(self, ENVS[self.env].splits)
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

    def check_splits(self, splits: dict[str, list[int]]) -> None:
        """`check_held_out` against the environment's splits (loop/run.py's setup: openenv's)."""
        check_held_out(self, splits)


def check_held_out(cfg: Config, splits: dict[str, list[int]]) -> None:
    """--train-task-ids: none in --test-split or any other val or test split of `splits`."""
    ids = set(parse_task_ids(cfg.train_task_ids))
    held_out = [cfg.test_split] + [n for n in splits if {"val", "validation", "test"} & set(n.split("-"))]
    for name in dict.fromkeys(held_out):
        if seen := sorted(ids & set(splits.get(name, ()))):
            raise ValueError(f"--train-task-ids: {seen[:5]} are in the held-out split {name}")


def parse_args(argv=None) -> Config:
    return parse(Config, argv, description=__doc__.split("\n")[0], presets=PRESETS)  # --preset: presets/


def train(cfg: Config, profile: list[dict] | None = None) -> dict:
    """Run the loop: the five steps of this file's docstring, one step at a time. Set-up, --resume
    and the files at the end are loop/run.py's; what watches each step (the evaluations before,
    during and after training, timing, metrics, signals, alarms, checkpoints) is loop/watch.py's.
    `profile`: append, per step, a dict of seconds per part of the step (machinery/timing.py;
    benchmarks/rollout_profile.py prints it)."""
    with session(cfg, load_learner) as run:
        learner = run.learner
        for step in watch.steps(run, profile):
            # 1. horizon: the ScalingInter-RL stage of this step (the adaptive schedule reads the history)
            horizon = run.schedule.horizon(step, run.history)
            # 2. rollout: tasks_per_step tasks x group_size samples, at most `horizon` turns each
            episodes, trajs = collect(run, step, horizon)
            if skip_failed_step(run, step, horizon, trajs):
                continue
            # 3. advantages from the outcome rewards (pi_old and the reference's log-probs first)
            batch = advantages(run, trajs)
            # 4. update: `epochs` passes of clipped-ratio steps over minibatches
            stats = update(learner.forward, batch, len(trajs), watch.ratios(run, step), cfg, learner.state,
                           learner.accelerator, learner.trained, run.clock.sections)  # fmt: skip
            # 5. log (with the step's signals, alarms and periodic evaluation), checkpoint
            watch.after_update(run, step, horizon, episodes, trajs, batch, stats)
    return run.summary


def collect(run: Run, step: int, horizon: int) -> tuple[list, list]:
    """Step 2: this process's rollouts of the step's groups. Returns every episode (all are saved and
    watched) and the trajectories the update learns from (no environment error; with
    --dynamic-sampling, the groups with a reward spread); their stats go to run.facts."""
    run.learner.policy.model.eval()
    episodes = roll_groups(run, horizon)
    trajs = usable(episodes, step)
    run.facts["charts/env_errors"] = dist.global_sum(len(episodes) - len(trajs))  # left out of the update
    if run.cfg.dynamic_sampling:  # DAPO (algorithm.py): groups with no reward spread out, fresh groups in
        trajs, more = refill(run, trajs, step, horizon)
        run.facts.update(more)
    run.clock.rolled = time.time()
    return episodes, trajs


def roll_groups(run: Run, horizon: int, round_: int = 0) -> list:
    """Draw tasks_per_step train tasks (the same on every process) and roll out each group_size
    times, at most `horizon` turns: this process's share, whole groups, numbered from round_ *
    tasks_per_step (dynamic sampling's later rounds get new group ids)."""
    cfg = run.cfg
    tasks = random.sample(run.train_tasks, cfg.tasks_per_step)
    mine = [g for g in dist.shard(list(range(len(tasks)))) for _ in range(cfg.group_size)]  # whole groups
    # in the update's precision (--mixed-precision): bf16 activations and KV cache
    learner = run.learner
    with run.clock.part("rollout"), dist.full_weights(learner.forward), learner.accelerator.autocast():
        return rollout(
            learner.policy,
            run.pool,
            run.spec,
            [tasks[g] for g in mine],
            horizon,
            groups=[round_ * cfg.tasks_per_step + g for g in mine],
            batch_size=cfg.generation_batch_size,
            timings=run.clock.sections,
        )


def refill(run: Run, trajs: list, step: int, horizon: int) -> tuple[list, dict]:
    """--dynamic-sampling: `algorithm.dynamic_sampling` over this process's share of the groups,
    more rounds of `roll_groups` refilling it. Returns (trajectories to train on, stats)."""
    want = len(dist.shard(list(range(run.cfg.tasks_per_step))))
    more = lambda r: usable(roll_groups(run, horizon, r), step)
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


def advantages(run: Run, trajs: list) -> Batch:
    """Step 3: the trajectories as one batch of token rows, each with its loss mask (batch.py), what
    the loss compares against (update.prepare_batch: the masks of --overlong-filter and
    --horizon-filter, pi_old under --mixed-precision, the reference's log-probs for the KL term),
    and the algorithm's advantages from the outcome rewards, in batch.advantages."""
    learner, cfg = run.learner, run.cfg
    with run.clock.part("make_batch"):
        batch = make_batch(trajs, learner.policy.tokenizer.pad_token_id)
    run.clock.update_from = time.time()
    run.facts.update(prepare_batch(learner, batch, trajs, cfg, run.clock.sections))
    with run.clock.part("advantages"), learner.accelerator.autocast():  # an algorithm's own model reads it
        learner.algo.advantages(batch, cfg, learner.state)
    return batch


if __name__ == "__main__":
    train(parse_args())
    gc.freeze()  # the exit then skips collecting torch's and transformers' objects: 1 s of the demo
