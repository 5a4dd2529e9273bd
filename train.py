"""Train an LLM agent with multi-turn online RL (AgentGym-RL) and the ScalingInter-RL horizon.

    python train.py                       # CPU demo: tiny policy, GRPO, BabyAI, staged horizon
    python train.py --model Qwen/Qwen2.5-1.5B-Instruct --lr 1e-6 --rounds 6,13,20 \
        --steps-per-stage 100 --steps 300 --mixed-precision bf16     # a real model on a GPU

The loop, one step at a time (paper, section 2):
    1. horizon h = schedule(step)                                   (scaling_inter.py)
    2. rollouts: `tasks_per_step` train tasks x `group_size` samples, at most h turns each
                                                                     (agent.py -> envs.py -> servers/)
    3. advantages from the outcome rewards                           (grpo.py / ppo.py / ...)
    4. `epochs` passes of clipped-ratio updates over minibatches     (the same file's loss)
    5. log to <out>/metrics.jsonl (and TensorBoard), checkpoint to <out>/checkpoint
       (with the step's learning signals and alarms: machinery/signals.py, docs/signals.md)
The default run also evaluates the policy on the held-out test split before and after training
and writes both to <out>/summary.json (`eval_before`, `eval_after`, same keys as eval.py), their
episodes to <out>/eval_before/ and <out>/eval_after/, and at the end <out>/report.html (view.py:
learning curves, the episodes, which test tasks flipped; `--save-rollouts-every N` adds every
Nth step's rollouts, <out>/rollouts/step_N.jsonl).

Several GPUs or machines: `accelerate launch --multi_gpu --num_processes N train.py ...` runs N
processes that each roll out 1/N of the step's tasks and make one update together (DDP), with the
distributed plumbing in machinery/dist.py (docs/scale-out.md).

Faults: an episode that ended in an environment error (a crashed server, a time-out) has no
outcome the policy earned, so it is left out of the update, counted (`charts/env_errors`) and
warned about; MAX_FAILED_STEPS steps in a row with no usable episode stop the run. A `--url` that
does not answer stops the run before anything else. A checkpoint is written to a temporary folder
and renamed into place, the previous one kept as `checkpoint.prev`, so a kill while saving never
leaves a half-written checkpoint; `--resume` trims metrics.jsonl back to the checkpoint's step.
"""

import contextlib
import dataclasses
import glob
import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator, DistributedType
from tqdm import tqdm

import gigpo
import grpo
import ppo
import reinforce_pp
import tiny
import view
from agent import Policy, rollout
from algorithm import Algorithm, dynamic_sampling, load_state, mask_truncated, save_state
from batch import Batch, make_batch, micro_batches, token_logprobs
from benchmarks.binding_probe import binding, collect_states, probe_tasks
from config import (
    AgentConfig,
    check_split,
    flag,
    load_agent,
    parse,
    resolve_device,
    resolve_precision,
    set_threads,
)
from envs import ENVS, EnvPool, EnvSpec, close_pool, open_pool, server_url
from eval import evaluate, write_trajectories
from machinery import dist, lora, signals
from machinery.logprobs import LogprobForward, disable_dropout
from machinery.timing import timed
from scaling_inter import adaptive, staged

# Each algorithm is an `algorithm.Algorithm` (advantages, loss, optional state): see its file.
ALGOS = {
    "grpo": grpo.GRPO,
    "rloo": grpo.RLOO,
    "ppo": ppo.PPO,
    "reinforce_pp": reinforce_pp.REINFORCE_PP,
    "gigpo": gigpo.GIGPO,
}
REAL_MODEL_LR = 1e-6  # the paper's; the tiny policy's is tiny.LR
MAX_FAILED_STEPS = 3  # consecutive steps whose every episode hit an environment error: give up
ON_POLICY_TOL = 2e-2  # mean |log pi - log pi_old| per agent token before the first step: bf16's floor
# (SmolLM2, benchmarks/gpu_check.py --cpu: 1.8e-2 mean, 0.11 max; float32: ~1e-5)


@dataclass
class Config(AgentConfig):
    """Every knob of a training run: the agent's (config.AgentConfig), the loop's, the algorithms'."""

    algo: str = flag("grpo", choices=list(ALGOS))
    """algorithm: one of ALGOS (grpo, rloo, ppo, reinforce_pp, gigpo)"""
    steps: int = flag(50, at_least=1)
    """training steps (one rollout batch + update each)"""
    out: str = "runs/default"
    """output folder: metrics.jsonl, summary.json, checkpoint/, curves.png, report.html, eval_before/,
    eval_after/"""
    rounds: str = flag("3,5", items=int, at_least=1)
    """ScalingInter-RL horizon stages h1,h2,... (one value: a fixed horizon)"""
    steps_per_stage: int = flag(25, at_least=1)
    """training steps per horizon stage"""
    schedule: str = flag("staged", choices=("staged", "adaptive"))
    """horizon schedule over --rounds: staged (every --steps-per-stage
    steps) or adaptive (scaling_inter.py)"""
    adapt_window: int = flag(5, at_least=1)
    """adaptive schedule: W, steps averaged on each side of its plateau test"""
    adapt_cut_share: float = flag(0.5, at_least=0, at_most=1)
    """adaptive schedule: lengthen only when at least this share of episodes hit the horizon"""
    adapt_min_gain: float = 0.02
    """adaptive schedule: success rising by less than this over W steps counts as a plateau"""
    train_split: str = "train"
    """task split to train on"""
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
    lr: float = flag(0.0, at_least=0)
    """learning rate; 0: tiny.LR (5e-4) for tiny, 1e-6 for real models (the paper's)"""
    max_grad_norm: float = flag(1.0, above=0)
    """gradient clipping (the policy's, and the critic's separately)"""
    clip_ratio: float = flag(0.2, above=0)
    """all algorithms: clip range eps of the policy ratio (PPO, eq. 7);
    with --clip-ratio-high, the lower one"""
    clip_ratio_high: float = flag(0.0, at_least=0)
    """all algorithms: upper clip range eps_high, the ratio clipped to [1 - clip_ratio, 1 + eps_high] (DAPO's
    clip-higher, e.g. 0.28); 0: clip_ratio"""
    dynamic_sampling: bool = False
    """drop groups whose rewards are all equal (no GRPO signal) and roll out more groups to refill the batch
    (DAPO's dynamic sampling)"""
    dynamic_max_rounds: int = flag(3, at_least=1)
    """dynamic sampling: extra rollouts per step at most; then train on what was kept (logged as
    dynamic/rounds)"""
    overlong_filter: bool = False
    """leave episodes with a reply cut at --max-new-tokens out of the loss (DAPO's overlong filtering; their
    reward still counts in the group's baseline)"""
    kl_coef: float = flag(0.001, at_least=0)
    """all algorithms: weight of the KL to the frozen reference model (k3 loss term; REINFORCE++: in the
    reward); 0: no reference model"""
    entropy_coef: float = 0.001
    """all algorithms: weight of the entropy bonus"""
    group_std_eps: float = flag(1e-6, at_least=0)
    """grpo: added to the group's reward std"""
    gamma: float = flag(1.0, at_least=0, at_most=1)
    """ppo, reinforce_pp: discount per agent token"""
    lam: float = flag(1.0, at_least=0, at_most=1)
    """ppo: GAE lambda"""
    norm_adv: bool = True
    """ppo: whiten the advantages over the batch's agent tokens (verl's masked_whiten)"""
    whiten_eps: float = flag(1e-8, at_least=0)
    """ppo, reinforce_pp: added to the std (ppo) or the variance (reinforce_pp) when whitening"""
    vf_coef: float = flag(0.5, at_least=0)
    """ppo: weight of the value loss"""
    vf_clip: float = flag(0.5, above=0)
    """ppo: clip range of the new values around the old ones (verl's cliprange_value)"""
    step_weight: float = flag(1.0, at_least=0)
    """gigpo: omega, weight of the step-level (anchor-state) advantage (GiGPO, Feng et al., 2025)"""
    step_gamma: float = flag(0.95, at_least=0, at_most=1)
    """gigpo: gamma, discount per turn of the step returns (GiGPO, Feng et al., 2025)"""
    step_norm: str = flag("std", choices=("std", "mean"))
    """gigpo: step-level normalisation, std ((R - mean) / std, the paper's) or mean (R - mean)"""
    anchor_normaliser: str = flag("exact", choices=list(gigpo.ANCHOR_NORMALISERS))
    """gigpo: how observations match into anchor states: exact, whitespace, or babyai (drops the server's
    notes)"""
    critic_lr: float = flag(0.0, at_least=0)
    """ppo: learning rate of the critic; 0: AgentGym-RL's 1e-5, or the policy's lr where larger (tiny)"""
    probe_every: int = flag(0, at_least=0)
    """BabyAI: log the mission-binding probe (benchmarks/binding_probe.py) every N steps; 0: never"""
    probe_states: int = flag(100, at_least=1)
    """held-out GoToLocal tasks the probe reads"""
    eval_episodes: int = flag(200, at_least=0)
    """test tasks for eval_before / eval_after (0: skip)"""
    eval_samples: int = flag(1, at_least=1)
    """episodes per test task at eval_before / eval_after (a small test split needs several)"""
    eval_max_turns: int = flag(0, at_least=0)
    """max turns at evaluation; 0: the schedule's last horizon"""
    eval_every: int = flag(0, at_least=0)
    """also evaluate on the test split every N steps (logged as eval/success, eval/turns); 0: never"""
    save_every: int = flag(20, at_least=1)
    """checkpoint every N steps (and at the end)"""
    save_rollouts_every: int = flag(0, at_least=0)
    """write every Nth step's rollouts to <out>/rollouts/step_N.jsonl, to watch them in view.py (0: never)"""
    resume: str = flag("", check=lambda path: check_checkpoint(path))
    """checkpoint folder to continue from (model, optimizer, algorithm state, step, RNG)"""
    mixed_precision: str = flag("auto", choices=("auto", "no", "fp16", "bf16"))
    """no, fp16, bf16: autocast at rollout, evaluation and update alike (the trained weights stay float32;
    docs/gpu.md, "Precision"); auto: bf16 for a real model where the hardware has fast bf16, else no
    (config.resolve_precision)"""
    generation_batch_size: int = flag(256, at_least=1)
    """episodes that generate at once at rollout and evaluation (their prefill's memory); the rest wait"""
    micro_batch_size: int = flag(0, at_least=0)
    """rows per forward/backward at most; a minibatch's gradients are accumulated over them (the step is the
    same); 0: no row limit"""
    micro_batch_tokens: int = flag(4096, at_least=0)
    """padded tokens per forward/backward at most (rows x the longest row; rows sorted by length fill
    micro-batches up to it, a longer row goes alone); 0: no limit"""
    gradient_checkpointing: bool = False
    """recompute each layer's activations in backward instead of keeping
    them (less memory, ~1/3 more compute)"""
    ref_device: str = flag("auto", choices=("auto", "cpu"))
    """where the frozen reference model lives: auto (the policy's device) or cpu"""
    lora_rank: int = flag(0, at_least=0)
    """train rank-R LoRA adapters (machinery/lora.py) instead of all weights; the reference is the base with
    adapters off; 0: off"""
    lora_alpha: float = flag(0.0, at_least=0)
    """LoRA scale alpha (the update is alpha / rank * B A); 0: 2 * rank"""
    stop_on_alarm: bool = False
    """stop the run (after logging the step) when an alarm fires (machinery/signals.py); default: warn and go
    on"""
    alarm_patience: int = flag(3, at_least=1)
    """steps in a row a slow condition (no signal, echo, invalid actions) must hold before its alarm fires"""
    alarm_flat_share: float = flag(0.9, at_least=0, at_most=1)
    """no-signal alarm: a step has no signal when at least this share of its groups have all-equal rewards"""
    alarm_identical: float = flag(0.95, at_least=0, at_most=1)
    """echo alarm: share of a group's replies identical to another rollout's at the same turn"""
    alarm_entropy_drop: float = flag(0.1, at_least=0, at_most=1)
    """echo alarm, entropy collapse: entropy below this fraction of its level over the first steps"""
    alarm_kl: float = flag(0.5, at_least=0)
    """KL alarm: bound on the KL to the reference model (losses/kl)"""
    alarm_kl_jump: float = flag(0.15, at_least=0)
    """KL alarm: bound on the KL to the reference's rise from one step to the next (one update's blow-up)"""
    alarm_approx_kl: float = flag(0.1, at_least=0)
    """KL alarm: bound on one update's approx KL, old to new policy (losses/approx_kl)"""
    alarm_invalid: float = flag(0.3, at_least=0, at_most=1)
    """invalid-action alarm: share of turns without a valid action"""
    alarm_invalid_rise: float = flag(0.2, at_least=0, at_most=1)
    """invalid-action alarm: also fires when that share rose this much above its level over the first steps"""
    alarm_cut: float = flag(0.1, at_least=0, at_most=1)
    """cut alarm: share of replies cut at --max-new-tokens"""
    alarm_env_errors: float = flag(0.05, at_least=0, at_most=1)
    """environment-error alarm: fires above this share of a step's episodes ending in an environment error"""

    def __post_init__(self):
        super().__post_init__()
        check_split(self.env, "train_split", self.train_split)
        check_split(self.env, "test_split", self.test_split)
        if (
            self.ref_device == "cpu" and self.lora_rank
        ):  # nothing to move: the reference is the policy's own base
            raise ValueError(
                "--ref-device cpu does nothing with --lora-rank: the reference model is the policy's "
                "base with its adapters off, which stays where the policy is; leave --ref-device at auto"
            )
        if self.group_size < 2 and self.algo in ("grpo", "rloo", "gigpo"):
            raise ValueError(
                f"--group-size {self.group_size}: {self.algo} compares the samples of a task's "
                "group, so it needs at least 2 (ppo and reinforce_pp learn from 1)"
            )


def parse_args(argv=None) -> Config:
    return parse(Config, argv, description=__doc__.split("\n")[0])


def seed_everything(seed: int):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Every random stream a step draws from: python's (tasks), numpy's, torch's CPU generator and,
    on a GPU, this process's CUDA generator (torch.multinomial samples there)."""
    s = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        s["cuda"] = torch.cuda.get_rng_state()
    return s


def set_rng_state(s: dict):
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state(s["cuda"])


def train(cfg: Config, profile: list[dict] | None = None) -> dict:
    """Run the loop: the five steps of this file's docstring, one step at a time. Set-up and
    --resume are `setup`'s, the evaluations before, during and after training `evaluation`'s.
    `profile`: append, per step, a dict of seconds per part of the step (machinery/timing.py;
    benchmarks/rollout_profile.py prints it)."""
    run = setup(cfg)
    policy, forward, algo, state, accelerator = run.policy, run.forward, run.algo, run.state, run.accelerator
    try:
        if run.start == 1:
            evaluation(run, "before")
        bar = tqdm(
            range(run.start, cfg.steps + 1),
            desc=f"{cfg.algo} on {cfg.env}",
            initial=run.start - 1,
            total=cfg.steps,
            disable=not run.main,
        )
        for step in bar:
            t0 = time.time()
            tm = {} if profile is not None else None  # this step's sections (timing.timed)
            # 1. horizon: the ScalingInter-RL stage of this step (the adaptive schedule reads the history)
            horizon = run.schedule.horizon(step, run.history)
            # 2. rollout: tasks_per_step tasks x group_size samples, at most `horizon` turns each
            policy.model.eval()
            episodes = roll_groups(run, horizon, tm)
            trajs = usable(episodes, step)  # all the episodes are saved; these train
            n_errors = dist.global_sum(len(episodes) - len(trajs))
            extra = {}  # DAPO's batch filters (algorithm.py), off by default
            if cfg.dynamic_sampling:  # groups with no reward spread out, fresh groups in
                trajs, extra = refill(run, trajs, step, horizon, tm)
            t_roll = time.time() - t0
            if skip_failed_step(run, step, horizon, trajs, n_errors):
                continue
            # 3. advantages from the outcome rewards (pi_old and the reference's log-probs first)
            with timed(tm, "make_batch"):
                batch = make_batch(trajs, policy.tokenizer.pad_token_id)
            t_update = time.time()
            extra.update(prepare_batch(run, batch, trajs, tm))
            with timed(tm, "advantages"), accelerator.autocast():  # an algorithm's own model reads it here
                algo.advantages(batch, cfg, state)
            # 4. update: `epochs` passes of clipped-ratio steps over minibatches
            policy.model.train()
            stats = update(forward, batch, len(trajs), algo, cfg, state, accelerator, run.trained, tm)
            if step == run.start and run.main:  # before any optimizer step the ratio must be 1
                print_on_policy_gap(stats)
            signals.check_finite(policy.model, step)  # NaN weights stop the run here, never saved
            # 5. log (with the periodic evaluation), checkpoint
            gen_tokens = int(dist.global_sum(int(batch.loss_mask.sum())))
            times = (t0, t_roll, t_update)
            m = step_metrics(
                run, step, horizon, trajs, batch, {**stats, **extra}, gen_tokens, n_errors, times
            )
            m.update(signals.step_signals(dist.gather(signals.episode_facts(episodes)), batch))  # signals.py
            m.update(evaluation(run, "step", step))
            fired = log_step(run, m, episodes, batch, trajs)
            bar.set_postfix(**progress(m, fired))
            if step % cfg.save_every == 0 or step == cfg.steps:
                with timed(tm, "checkpoint"):
                    save_checkpoint(
                        cfg, accelerator, policy, forward, run.optimizer, step, run.ref_path, state
                    )
            if profile is not None:
                row = {"step": step, "horizon": horizon, "episodes": len(trajs), "agent_tokens": gen_tokens}
                profile.append({**row, "total": time.time() - t0, **tm})
            if fired and cfg.stop_on_alarm:  # an alarm stops the run only when asked to
                if run.main:
                    tqdm.write(f"stopping after step {step}: --stop-on-alarm ({', '.join(fired)})")
                break
        evaluation(run, "after")
    finally:
        close_pool(run.pool)
        if run.writer:
            run.writer.close()
    finish(run)
    return run.summary


@dataclass
class Run:
    """What the loop works with, built once by `setup`."""

    cfg: Config
    accelerator: Accelerator
    device: str  # cpu or cuda
    spec: EnvSpec
    schedule: object  # scaling_inter's staged or adaptive schedule: .horizon(step, history)
    policy: Policy
    forward: torch.nn.Module  # the policy's LogprobForward as Accelerate prepared it (DDP, FSDP)
    optimizer: torch.optim.Optimizer
    ref_model: torch.nn.Module | None  # the frozen reference (None: no KL term, or LoRA's adapters off)
    ref_path: str  # the run's starting weights
    algo: Algorithm
    state: object  # the algorithm's own model and optimizer (PPO's critic), or None
    trained: list  # (model, optimizer) pairs the update steps
    pool: EnvPool
    train_tasks: list[int]
    test_tasks: list[int]  # the first --eval-episodes of the test split
    eval_turns: int
    probe: list  # the binding probe's states (benchmarks/binding_probe.py); empty: no probe
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
    spec = ENVS[cfg.env]
    schedule = horizon_schedule(cfg)
    device = resolve_device(cfg.device)
    set_threads(cfg, device)
    cfg.mixed_precision = resolve_precision(cfg.mixed_precision, cfg.model, device)
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=device == "cpu")
    url = server_url(cfg.url, dist.rank())  # a dead --url is a clear error before anything else runs
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
    policy, ref_model, ref_path = load_models(cfg, accelerator, device, saved)
    lr = cfg.lr or (tiny.LR if policy.is_tiny else REAL_MODEL_LR)
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=lr)
    # `forward` computes the agent tokens' log-probs; Accelerate wraps it (DDP: gradients averaged in
    # backward). policy.model stays the plain model, for generation, the reference and saving.
    forward, optimizer = accelerator.prepare(LogprobForward(policy.model), optimizer)
    algo = ALGOS[cfg.algo]
    state = algo.init(policy.model, cfg, lr) if algo.init else None
    if state is not None:
        state.model, state.optimizer = accelerator.prepare(state.model, state.optimizer)
    start = resume(cfg, saved, optimizer, state, accelerator) if saved else 1

    n_eval = min(cfg.eval_episodes, len(spec.splits[cfg.test_split]))
    # this process's environments: its own local server (on a free port), or its share of --url's list
    my_tasks = len(dist.shard(list(range(cfg.tasks_per_step))))
    size = max(my_tasks * cfg.group_size, math.ceil(n_eval * cfg.eval_samples / dist.world()))
    log_path = os.path.join(cfg.out, "server.log" if main else f"server.{dist.rank()}.log")
    pool = open_pool(cfg.env, size=size, url=url, log_path=log_path)
    summary, history = previous_outputs(cfg, saved, start, main)
    probed = cfg.probe_every and cfg.env == "babyai"
    probe = collect_states(pool, probe_tasks(cfg.probe_states)) if probed else []
    trained = [(forward, optimizer)] + ([(state.model, state.optimizer)] if state else [])
    return Run(
        cfg=cfg,
        accelerator=accelerator,
        device=device,
        spec=spec,
        schedule=schedule,
        policy=policy,
        forward=forward,
        optimizer=optimizer,
        ref_model=ref_model,
        ref_path=ref_path,
        algo=algo,
        state=state,
        trained=trained,
        pool=pool,
        train_tasks=spec.splits[cfg.train_split],
        test_tasks=spec.splits[cfg.test_split][:n_eval],
        probe=probe,
        start=start,
        history=history,
        eval_turns=cfg.eval_max_turns or schedule.rounds[-1],
        summary=summary,
        writer=tensorboard(cfg.out) if main else None,
        main=main,
    )


def horizon_schedule(cfg: Config):
    """ScalingInter-RL's horizon over the steps (scaling_inter.py): --rounds in stages of
    --steps-per-stage, or the adaptive schedule."""
    rounds = [int(h) for h in cfg.rounds.split(",")]
    if cfg.schedule == "adaptive":
        return adaptive(rounds, cfg.adapt_window, cfg.adapt_cut_share, cfg.adapt_min_gain)
    return staged(rounds, cfg.steps_per_stage)


def previous_outputs(cfg: Config, saved: dict | None, start: int, main: bool) -> tuple[dict, list]:
    """The summary and the metrics of the steps before `start`: a resumed run's, trimmed back to its
    checkpoint (outputs of later steps cleared); a fresh run's, empty."""
    summary = {"config": dataclasses.asdict(cfg)}
    summary_path = os.path.join(cfg.out, "summary.json")
    if saved and os.path.exists(summary_path):
        summary = {**json.load(open(summary_path)), "config": dataclasses.asdict(cfg)}
    if main:
        clear_outputs(cfg.out, saved["step"] if saved else 0)
    dist.barrier()  # the main process has trimmed metrics.jsonl: now every process may read it
    metrics_path = os.path.join(cfg.out, "metrics.jsonl")
    history = [r for r in map(json.loads, open(metrics_path)) if r["step"] < start] if saved else []
    return summary, history


def load_models(cfg: Config, accelerator, device: str, saved: dict | None):
    """The trained policy (with LoRA adapters, gradient checkpointing as asked), the frozen
    reference model (None: no KL term, or LoRA, whose reference is the base with its adapters off)
    and the path of the run's starting weights, which the reference is."""
    policy = load_agent(cfg, accelerator.device, model=cfg.resume or None, trainable=True)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.mixed_precision)
    if cfg.lora_rank and not lora.has_adapters(policy.model):
        policy.model = lora.add_adapters(policy.model, cfg.lora_rank, cfg.lora_alpha)
    if half and lora.has_adapters(
        policy.model
    ):  # fresh or resumed: the frozen base in 2 bytes, adapters fp32
        for p in policy.model.parameters():
            p.data = p.data if p.requires_grad else p.data.to(half)
    disable_dropout(policy.model)  # the update's train mode must score like the rollout's eval mode
    policy.model.get_output_embeddings().float()  # (the head stays float32: logprobs.fp32_head)
    if cfg.gradient_checkpointing:  # active in train mode only: generation keeps its KV cache
        policy.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ref_path = saved["ref_path"] if saved else policy.path
    ref_model = None
    if cfg.kl_coef and not lora.has_adapters(policy.model):
        ref_device = "cpu" if cfg.ref_device == "cpu" else accelerator.device
        ref_model = load_agent(cfg, ref_device, model=ref_path).model.eval().requires_grad_(False)
        if half and str(ref_device) != "cpu":
            ref_model.to(half)  # frozen: no fp32 master copy needed
            ref_model.get_output_embeddings().float()  # but the head in float32 (logprobs.fp32_head)
    return policy, ref_model, ref_path


def resume(cfg: Config, saved: dict, optimizer, state, accelerator) -> int:
    """Restore what the checkpoint `saved` (its state.pt) holds besides the weights: the
    optimizer, the algorithm's state, this process's RNG streams. Returns the step to start at."""
    if saved["optimizer"] is not None:  # (None: saved under FSDP)
        optimizer.load_state_dict(saved["optimizer"])
    if state is not None:
        load_state(state, cfg.resume, accelerator.unwrap_model)
    rngs = saved["rng"] if isinstance(saved["rng"], list) else [saved["rng"]]
    if len(rngs) != dist.world():
        raise ValueError(
            f"{cfg.resume} was saved by {len(rngs)} processes; resume it with as many, not {dist.world()}"
        )
    set_rng_state(rngs[dist.rank()])
    return saved["step"] + 1


def clear_outputs(out: str, step: int) -> None:
    """Remove what an earlier run left in `out` after `step` (metrics.jsonl lines, saved rollouts):
    a fresh run (`step` 0) keeps nothing of it, a resumed one runs what came after its checkpoint again."""
    metrics_path = os.path.join(out, "metrics.jsonl")
    if os.path.exists(metrics_path) and not step:
        os.remove(metrics_path)
    elif os.path.exists(metrics_path):
        keep = [ln for ln in open(metrics_path) if ln.strip() and json.loads(ln)["step"] <= step]
        with open(metrics_path, "w") as f:
            f.writelines(keep)
    for old in glob.glob(os.path.join(out, "rollouts", "step_*.jsonl")):
        if int(os.path.basename(old)[5:-6]) > step:
            os.remove(old)


def tensorboard(out: str):
    """A TensorBoard writer to <out>/tb, or None without TensorBoard."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(os.path.join(out, "tb"))


def evaluation(run: Run, when: str, step: int = 0) -> dict:
    """The policy on the held-out test tasks (and the binding probe, with --probe-every) at one
    occasion: "before" training (summary's eval_before, probe_before), after training ("after":
    eval_after), or at `step` of it ("step": every --eval-every steps but the last, whose
    evaluation is eval_after, and the probe every --probe-every steps, the first and the last).
    Under FSDP the whole weights are gathered once for all of it. Returns the step's metrics."""
    cfg, m = run.cfg, {}
    at_step = when == "step"
    evaluate_now = bool(run.test_tasks) and (
        not at_step or (cfg.eval_every > 0 and step % cfg.eval_every == 0 and step != cfg.steps)
    )
    probe_now = (
        bool(run.probe)
        and when != "after"
        and (not at_step or step % cfg.probe_every == 0 or step in (1, cfg.steps))
    )
    if not (evaluate_now or probe_now):
        return m
    # FSDP: generation needs the whole weights; in the run's precision and generation batches
    with dist.full_weights(run.forward), run.accelerator.autocast():
        if evaluate_now:
            ev, episodes = evaluate(
                run.policy,
                run.pool,
                run.spec,
                run.test_tasks,
                cfg.eval_samples,
                run.eval_turns,
                "eval" if at_step else f"eval {when}",
                cfg.generation_batch_size,
            )
        if probe_now:
            probed = binding(run.policy, run.probe).__dict__
    if at_step:
        if evaluate_now:
            m["eval/success"], m["eval/turns"] = ev["success_rate"], ev["avg_turns"]
        if probe_now:
            run.summary["probe_after"] = probed
            m.update({f"probe/{k}": v for k, v in probed.items() if k != "n_states"})
        return m
    if evaluate_now:
        run.summary[f"eval_{when}"] = ev
        if run.main:
            write_trajectories(os.path.join(cfg.out, f"eval_{when}", "trajectories.jsonl"), episodes)
            before = run.summary.get("eval_before", {}).get("success_rate", float("nan"))
            errors = f" ({ev['errors']} episodes with environment errors left out)" if ev["errors"] else ""
            print(
                f"eval before: success {before:.3f}"
                + (errors if when == "before" else f"  after: success {ev['success_rate']:.3f}")
            )
    if probe_now:
        run.summary["probe_before"] = probed
    return m


def roll_groups(run: Run, horizon: int, tm=None, round_: int = 0) -> list:
    """Draw tasks_per_step train tasks (the same on every process) and roll out each group_size
    times, at most `horizon` turns: this process's share, whole groups, numbered from round_ *
    tasks_per_step (dynamic sampling's later rounds get new group ids)."""
    cfg = run.cfg
    tasks = random.sample(run.train_tasks, cfg.tasks_per_step)
    mine = [g for g in dist.shard(list(range(len(tasks)))) for _ in range(cfg.group_size)]  # whole groups
    # in the update's precision (--mixed-precision): bf16 activations and KV cache
    with timed(tm, "rollout"), dist.full_weights(run.forward), run.accelerator.autocast():
        return rollout(
            run.policy,
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
    return dynamic_sampling(trajs, more, want, run.cfg.dynamic_max_rounds)


def recompute_old_logprobs(run: Run, batch: Batch, tm=None) -> dict:
    """pi_old from the training forward, as verl does, under --mixed-precision: in bf16/fp16 the
    sampler's cached one-token decoding rounds differently from the update's full forward, so the
    sampled log-probs would make the first ratio != 1 (docs/gpu.md, "Precision"; in float32 they
    agree to 2e-4 and are kept). Returns the mean |sampled - recomputed| per agent token."""
    with timed(tm, "old_logprobs"), run.accelerator.autocast(), dist.full_weights(run.forward):
        sampled, batch.old_logprobs = batch.old_logprobs, reference_logprobs(run.policy.model, batch, run.cfg)
    gap = dist.global_sum(float(((sampled - batch.old_logprobs).abs() * batch.loss_mask).sum()))
    return {"charts/sampling_logprob_gap": gap / max(dist.global_sum(float(batch.loss_mask.sum())), 1.0)}


def pi_old_from_update(cfg: Config, n_trajs: int) -> bool:
    """Whether, under --mixed-precision, the update's own forward can stand for the recomputed pi_old
    (`recompute_old_logprobs`), saving that whole pass: when the update is one minibatch in one epoch,
    its forward runs on the weights the rollout sampled from, on the same rows in the same micro-
    batches, before any optimizer step, so it is what the separate pass would compute; and nothing
    reads pi_old before the update (no KL term: REINFORCE++ puts it in the reward).
    `accumulate_gradients` then takes pi_old from its forward (tests/test_micro_batches.py)."""
    single = cfg.epochs == 1 and dist.global_sum(n_trajs) <= cfg.minibatch_size
    return cfg.mixed_precision != "no" and single and not cfg.kl_coef


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


def prepare_batch(run: Run, batch: Batch, trajs: list, tm=None) -> dict:
    """What the advantages and the loss read besides the rewards: --overlong-filter's mask (no loss
    on an episode with a reply cut at --max-new-tokens), pi_old recomputed under --mixed-precision,
    and the reference model's log-probs for the KL term. Returns their stats."""
    cfg, policy, stats = run.cfg, run.policy, {}
    if cfg.overlong_filter:
        cut = [t.truncated > 0 for t in trajs]
        stats["charts/overlong_masked"] = dist.global_sum(mask_truncated(batch, cut))
    if cfg.mixed_precision != "no" and not pi_old_from_update(cfg, len(trajs)):
        stats.update(recompute_old_logprobs(run, batch, tm))
    if cfg.kl_coef:
        with (
            timed(tm, "reference"),
            run.accelerator.autocast(),
            lora.reference(policy.model),
            dist.full_weights(run.forward),
        ):
            batch.ref_logprobs = reference_logprobs(run.ref_model or policy.model, batch, cfg)
    return stats


def print_on_policy_gap(stats: dict) -> None:
    """The first minibatch's |log ratio|, before any optimizer step: 0 up to ON_POLICY_TOL."""
    gap, worst = stats["charts/on_policy_gap"], stats["charts/on_policy_gap_max"]
    verdict = "on-policy" if gap <= ON_POLICY_TOL else "NOT on-policy"
    said = f"first minibatch: |log ratio| mean {gap:.2e}, max {worst:.2e}"
    tqdm.write(f"{said} ({verdict} at tolerance {ON_POLICY_TOL:g})")


def progress(m: dict, fired: list) -> dict:
    """The progress bar's short figures: horizon, success, turns, flat groups, alarms so far."""
    return {
        "h": m["horizon"],
        "succ": f"{m['charts/success']:.2f}",
        "turns": f"{m['charts/turns']:.1f}",
        "flat": f"{m['signals/flat_groups']:.2f}",
        "alarms": len(fired),
    }


def step_metrics(
    run: Run,
    step: int,
    horizon: int,
    trajs: list,
    batch: Batch,
    stats: dict,
    gen_tokens: int,
    n_errors: int,
    times: tuple[float, float, float],
) -> dict:
    """The step's line of metrics.jsonl: its episodes (every process's), speed, memory and the
    update's stats. `times`: the step's start, the rollout's seconds, the update's start."""
    t0, t_roll, t_update = times
    # dist.gather: the same lists on every process, so the adaptive schedule decides the same everywhere
    ep = dist.gather(
        [(t.reward, t.success, t.turns, t.truncated, not t.done and t.turns >= horizon) for t in trajs]
    )
    return {
        "step": step,
        "horizon": horizon,
        "charts/reward": float(np.mean([e[0] for e in ep])),
        "charts/success": float(np.mean([e[1] for e in ep])),
        "charts/turns": float(np.mean([e[2] for e in ep])),
        "charts/truncated_replies": sum(e[3] for e in ep),
        # episodes the horizon ended (the env had not said done): the adaptive schedule's signal
        "charts/cut_share": float(np.mean([e[4] for e in ep])),
        "charts/tokens_per_s": gen_tokens / max(t_roll, 1e-9),
        "charts/seconds_per_step": time.time() - t0,
        "charts/env_errors": n_errors,  # episodes left out of this step's update
        "perf/update_tokens_per_s": run.cfg.epochs
        * dist.global_sum(int(batch.attention_mask.sum()))
        / (time.time() - t_update),
        "perf/peak_memory_gb": dist.global_max(peak_memory_gb(run.device)),  # the largest process's
        **stats,
    }


def log_step(run: Run, m: dict, episodes: list, batch: Batch, trajs: list) -> list[str]:
    """Append the step's metrics to the history, metrics.jsonl and TensorBoard, with the alarms
    that hold at this step (machinery/signals.py: `alarm/<name>` = 1, and one console line the
    first time each fires); every --save-rollouts-every steps write its episodes to
    <out>/rollouts/step_N.jsonl, each turn of the batch's trajectories `trajs` (those of them
    that are among `episodes`, the step's first rollouts) with the credit the update gave it.
    Returns the alarms."""
    cfg, step = run.cfg, m["step"]
    run.history.append(m)
    fired = signals.check(run.history, cfg)
    m.update({f"alarm/{name}": 1.0 for name in fired})
    for name in fired:
        if run.main and not any(r.get(f"alarm/{name}") for r in run.history[:-1]):  # its first time
            tqdm.write(signals.describe(name, run.history))
    if run.main:
        log_metrics(os.path.join(cfg.out, "metrics.jsonl"), run.writer, m)
    if cfg.save_rollouts_every and step % cfg.save_rollouts_every == 0:
        for t, credit in zip(trajs, signals.turn_credit(batch, cfg.algo)):
            t.credit = credit  # per turn: the advantage this update gave it (batch order is trajs')
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


def log_metrics(path: str, writer, m: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(m) + "\n")
    if writer:
        for k, v in m.items():
            if k != "step":
                writer.add_scalar(k, v, m["step"])


def update(forward, batch, n_trajs: int, algo, cfg, state, accelerator, trained, tm=None) -> dict:
    """`cfg.epochs` passes over the rollout batch (`n_trajs` trajectories on this process), each in
    minibatches: clipped-ratio steps of every (model, optimizer) in `trained`. With N processes a
    minibatch is every process's share of it (each process cuts its batch into the same number of
    parts) and DDP averages the gradients. Returns the mean of each minibatch's (global) stats, and
    `signals/nonfinite_skips`: the optimizer steps skipped because the loss or a gradient norm was
    NaN or infinite (the weights are left as they were; machinery/signals.py raises the alarm)."""
    n_minibatches = max(
        1, math.ceil(dist.global_sum(n_trajs) / cfg.minibatch_size)
    )  # the same on every process
    filler = batch.select(torch.arange(1)).trim()  # a weight-0 pass for a process with nothing in a minibatch
    stats: dict[str, list] = {}
    first = (
        None  # the first minibatch's |log ratio| (mean, max): 0 up to rounding, or pi_old is not the policy's
    )
    skipped = 0  # optimizer steps skipped for a non-finite loss or gradient
    from_forward = pi_old_from_update(cfg, n_trajs)  # pi_old: the first forward (no separate pass)
    for _ in range(cfg.epochs):
        for part in torch.randperm(n_trajs).tensor_split(n_minibatches):
            rows = torch.isin(batch.traj, part).nonzero().squeeze(-1)
            for _, opt in trained:
                opt.zero_grad()
            with timed(tm, "forward_backward"):
                mb = batch.select(rows)
                st = accumulate_gradients(forward, mb, algo, cfg, state, accelerator, filler, from_forward)
            with timed(tm, "optimizer"):
                # the policy, then the algorithm's own model; the norms are global (the same on every process)
                norms = [
                    float(accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
                    for model, _ in trained
                ]
                if all(map(math.isfinite, norms + [st["losses/loss"]])):
                    for _, opt in trained:
                        opt.step()
                else:  # a NaN/inf loss or gradient would poison the weights: skip (signals.py's alarm)
                    skipped += 1
            top = st.pop("max_log_ratio")
            first = first or (st["losses/abs_log_ratio"], top)
            for k, v in st.items():
                stats.setdefault(k, []).append(v)
    for _, opt in trained:  # free the gradients before the next rollout
        opt.zero_grad(set_to_none=True)
    return {
        **{k: float(np.mean(v)) for k, v in stats.items()},
        "signals/nonfinite_skips": skipped,
        "charts/on_policy_gap": first[0],
        "charts/on_policy_gap_max": first[1],
    }


def accumulate_gradients(forward, mb, algo, cfg, state, accelerator, filler=None, pi_old_from_forward=False):
    """Backward of the algorithm's loss on minibatch `mb`, one micro-batch at a time. `forward`:
    the policy, or its `logprobs.LogprobForward` as Accelerate prepared it (DDP, FSDP).

    Every term of the loss is a token-mean over the minibatch's agent tokens, so the loss of micro-
    batch i, weighted by its share n_i / n of those tokens, sums to the minibatch's loss, and the
    accumulated gradients are the minibatch's (tests/test_micro_batches.py checks this to float
    tolerance). Only one micro-batch's activations are alive at a time.

    With N processes n counts every process's tokens (dist.global_sum) and DDP averages the
    gradients, dividing by N: each backward is scaled by N * n_i / n, so the step is the token mean
    over the global minibatch however unequally the tokens fall (tests/test_distributed.py). Every
    process runs the same number of passes (DDP and FSDP communicate in each): one with fewer
    micro-batches repeats `filler` (default: its last micro-batch) at weight 0, and only the last
    pass averages the gradients (no_sync before). `pi_old_from_forward` (`pi_old_from_update`): each
    micro-batch's pi_old is its own forward's log-probs, detached (every ratio 1, as after a
    recompute); the gap to the sampled ones is logged. Returns the global minibatch's stats."""
    n = dist.global_sum(float(mb.loss_mask.sum()))
    micros = (
        [m for _, m in micro_batches(mb, cfg.micro_batch_size, cfg.micro_batch_tokens)] if len(mb) else []
    )
    passes = [(m, float(m.loss_mask.sum()) / n if n > 0 else 0.0) for m in micros]
    passes += [(filler or micros[-1], 0.0)] * (dist.global_max(len(passes)) - len(passes))
    models = [forward] + ([state.model] if state is not None else [])
    stats: dict[str, float] = {}
    max_log_ratio = 0.0
    for i, (micro, w) in enumerate(passes):
        with contextlib.ExitStack() as no_sync:
            if i < len(passes) - 1:  # accumulate locally; the last backward averages over the processes
                for model in models:
                    no_sync.enter_context(accelerator.no_sync(model))
            sampled = {}  # |sampled - pi_old| per agent token, when pi_old is this forward's
            with accelerator.autocast():
                logp, ent = token_logprobs(forward, micro, cfg.temperature, with_entropy=True)
                if pi_old_from_forward:
                    m = micro.loss_mask.to(logp.device)
                    gap = (micro.old_logprobs.to(logp.device) - logp.detach()).abs() * m
                    sampled = {"charts/sampling_logprob_gap": float(gap.sum() / m.sum().clamp(min=1))}
                    micro.old_logprobs = logp.detach().float()
                loss, st = algo.loss(logp, ent, micro, cfg, state)
            accelerator.backward(loss * w * dist.world())
        for k, v in {**st, **sampled, "losses/loss": loss.item()}.items():
            stats[k] = stats.get(k, 0.0) + w * v
        agent = micro.loss_mask.to(logp.device) > 0
        gap = (logp.detach() - micro.old_logprobs.to(logp.device))[agent].abs()  # |log ratio| per agent token
        stats["losses/abs_log_ratio"] = stats.get("losses/abs_log_ratio", 0.0) + w * float(
            gap.mean() if len(gap) else 0.0
        )
        if w > 0 and len(gap):
            max_log_ratio = max(max_log_ratio, float(gap.max()))
    keys = sorted(stats)  # the same on every process
    out = dict(
        zip(keys, dist.global_sum(torch.tensor([stats[k] for k in keys], dtype=torch.float64)).tolist())
    )
    return {**out, "max_log_ratio": dist.global_max(max_log_ratio)}


@torch.no_grad()
def reference_logprobs(model, batch, cfg) -> torch.Tensor:
    """(B, T) log-probs of the agent tokens under the frozen reference `model`, once per batch,
    in the update's micro-batches (`micro_batches`) on whatever device the model is on."""
    out = torch.zeros_like(batch.loss_mask)
    for rows, micro in micro_batches(batch, cfg.micro_batch_size, cfg.micro_batch_tokens):
        lp, _ = token_logprobs(model, micro, cfg.temperature)
        out[rows, : lp.shape[1]] = lp.float().cpu()
    return out


def peak_memory_gb(device: str) -> float:
    """Peak memory since the last call: the accelerator's allocations, or the process's RSS."""
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 1e9
        torch.cuda.reset_peak_memory_stats()
        return peak
    try:
        peak = (
            next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
            * 1024
            / 1e9
        )
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS to the current one (Linux)
        return peak
    except OSError:
        return float("nan")


def save_checkpoint(cfg, accelerator, policy, forward, optimizer, step, ref_path, state=None):
    """Write <out>/checkpoint.tmp completely, then rename it to <out>/checkpoint, the previous
    checkpoint becoming <out>/checkpoint.prev: a kill at any moment leaves a complete checkpoint.
    Every process calls it (the weights are gathered under FSDP, and each process's RNG state is
    kept so that --resume with as many processes continues every stream); the main one writes."""
    weights = None  # DDP: every process holds the whole model, policy.model saves itself
    fsdp = accelerator.distributed_type == DistributedType.FSDP
    if fsdp:  # gathered from the shards (LogprobForward's names)
        weights = {k.removeprefix("model."): v for k, v in accelerator.get_state_dict(forward).items()}
    rngs = dist.gather([rng_state()])
    if accelerator.is_main_process:
        final = os.path.join(cfg.out, "checkpoint")
        tmp, prev = final + ".tmp", final + ".prev"
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written one from a killed run
        os.makedirs(tmp)
        policy.model.save_pretrained(tmp, state_dict=weights)
        policy.tokenizer.save_pretrained(tmp)
        if state is not None:  # the algorithm's own model and optimizer (PPO's critic)
            save_state(state, tmp, accelerator.unwrap_model)
        # FSDP: each process holds its shard of AdamW's state; not saved (--resume starts it afresh)
        torch.save(
            {
                "step": step,
                "optimizer": None if fsdp else optimizer.state_dict(),
                "rng": rngs if len(rngs) > 1 else rngs[0],
                "ref_path": ref_path,
                "config": dataclasses.asdict(cfg),
            },
            os.path.join(tmp, "state.pt"),
        )
        if os.path.isdir(final):
            shutil.rmtree(prev, ignore_errors=True)
            os.replace(final, prev)
        os.replace(tmp, final)
    dist.barrier()


def check_checkpoint(path: str) -> str | None:
    """--resume: empty, or a folder save_checkpoint wrote (or its .prev)."""
    if not path or any(os.path.exists(os.path.join(p, "state.pt")) for p in (path, path + ".prev")):
        return None
    return (
        f"no checkpoint there (looked for {os.path.join(os.path.abspath(path), 'state.pt')}); "
        "allowed: a folder train.py saved, e.g. runs/default/checkpoint"
    )


def checkpoint_folder(path: str) -> str:
    """`path`, or its `.prev` when a kill between save_checkpoint's two renames left no `path`."""
    if not os.path.exists(os.path.join(path, "state.pt")) and os.path.exists(
        os.path.join(path + ".prev", "state.pt")
    ):
        tqdm.write(f"warning: {path} is missing or incomplete; resuming from {path}.prev")
        return path + ".prev"
    return path


def plot_curves(metrics_path: str, png: str):
    """Success (overall and per task category), turns and horizon, and the learning signals with
    their alarms (machinery/signals.py) per step, for people who would rather see than read."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [json.loads(line) for line in open(metrics_path)] if os.path.exists(metrics_path) else []
    rows = [r for r in rows if "charts/success" in r]  # (a step with no usable episode has none)
    if not rows:
        return
    steps = [r["step"] for r in rows]
    probed = [r for r in rows if "probe/share" in r]
    fig, ax = plt.subplots(1, 4 if probed else 3, figsize=(20 if probed else 15, 3.5))
    ax[0].plot(steps, [r["charts/success"] for r in rows], label="success (train rollouts)")
    ax[0].plot(steps, [r["charts/reward"] for r in rows], label="reward", alpha=0.6)
    for cat in sorted({k for r in rows for k in r if k.startswith("success/")})[:8]:  # per task category
        pts = [(r["step"], r[cat]) for r in rows if cat in r]
        ax[0].plot(*zip(*pts), label=cat, linewidth=0.8, linestyle=":")
    ax[0].set_xlabel("step")
    ax[0].legend()
    ax[0].set_ylim(0, 1)
    ax[1].plot(steps, [r["charts/turns"] for r in rows], label="turns per episode")
    ax[1].plot(steps, [r["horizon"] for r in rows], label="horizon (max turns)", linestyle="--")
    ax[1].set_xlabel("step")
    ax[1].legend()
    signals.plot(ax[2], rows)  # machinery/signals.py: no-signal groups, echo, invalid, cut; the alarms
    if probed:  # benchmarks/binding_probe.py: mass on the mission's object vs the others, held-out GoToLocal
        ps = [r["step"] for r in probed]
        ax[3].plot(ps, [r["probe/p_mission"] for r in probed], marker="o", label="p(mission's object)")
        ax[3].plot(ps, [r["probe/p_other"] for r in probed], marker="o", label="p(other objects)")
        ax[3].plot(ps, [r["probe/share"] for r in probed], marker="o", label="share on mission's object")
        ax[3].plot(ps, [r["probe/chance"] for r in probed], linestyle="--", label="share by chance")
        ax[3].set_xlabel("step")
        ax[3].set_ylim(0, 1)
        ax[3].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    train(parse_args())
