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
The default run also evaluates the policy on the held-out test split before and after training
and writes both to <out>/summary.json (`eval_before`, `eval_after`, same keys as eval.py), their
episodes to <out>/eval_before/ and <out>/eval_after/, and at the end <out>/report.html (view.py:
learning curves, the episodes, which test tasks flipped; `--save-rollouts-every N` adds every
Nth step's rollouts, <out>/rollouts/step_N.jsonl).
"""

import dataclasses
import glob
import json
import os
import random
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator
from tqdm import tqdm

import gigpo
import grpo
import ppo
import reinforce_pp
import tiny
import view
from agent import rollout
from algorithm import load_state, save_state
from batch import make_batch, token_logprobs
from binding_probe import binding, collect_states, probe_tasks
from config import AgentConfig, load_agent, parse, resolve_device
from envs import ENVS, close_pool, open_pool
from eval import evaluate, write_trajectories
from scaling_inter import staged

# Each algorithm is an `algorithm.Algorithm` (advantages, loss, optional state): see its file.
ALGOS = {
    "grpo": grpo.GRPO,
    "rloo": grpo.RLOO,
    "ppo": ppo.PPO,
    "reinforce_pp": reinforce_pp.REINFORCE_PP,
    "gigpo": gigpo.GIGPO,
}
REAL_MODEL_LR = 1e-6  # the paper's; the tiny policy's is tiny.LR


@dataclass
class Config(AgentConfig):
    """Every knob of a training run: the agent's (config.AgentConfig), the loop's, the algorithms'."""

    algo: str = "grpo"
    """algorithm: one of ALGOS (grpo, rloo, ppo, reinforce_pp, gigpo)"""
    steps: int = 50
    """training steps (one rollout batch + update each)"""
    out: str = "runs/default"
    """output folder: metrics.jsonl, summary.json, checkpoint/, curves.png, report.html, eval_before/, eval_after/"""
    rounds: str = "3,5"
    """ScalingInter-RL horizon stages h1,h2,... (one value: a fixed horizon)"""
    steps_per_stage: int = 25
    """training steps per horizon stage"""
    train_split: str = "train"
    """task split to train on"""
    test_split: str = "test"
    """held-out split for eval_before / eval_after"""
    tasks_per_step: int = 8
    """distinct tasks per step"""
    group_size: int = 8
    """rollouts per task (GRPO's group n)"""
    epochs: int = 1
    """passes over each rollout batch"""
    minibatch_size: int = 64
    """trajectories per minibatch"""
    lr: float = 0.0
    """learning rate; 0: tiny.LR (5e-4) for tiny, 1e-6 for real models (the paper's)"""
    max_grad_norm: float = 1.0
    """gradient clipping (the policy's, and the critic's separately)"""
    clip_ratio: float = 0.2
    """all algorithms: clip range eps of the policy ratio (PPO, eq. 7)"""
    kl_coef: float = 0.001
    """all algorithms: weight of the KL to the frozen reference model (k3 loss term; REINFORCE++: in the reward); 0: no reference model"""
    entropy_coef: float = 0.001
    """all algorithms: weight of the entropy bonus"""
    group_std_eps: float = 1e-6
    """grpo: added to the group's reward std"""
    gamma: float = 1.0
    """ppo, reinforce_pp: discount per agent token"""
    lam: float = 1.0
    """ppo: GAE lambda"""
    norm_adv: bool = True
    """ppo: whiten the advantages over each minibatch's agent tokens"""
    whiten_eps: float = 1e-8
    """ppo, reinforce_pp: added to the std (ppo) or the variance (reinforce_pp) when whitening"""
    vf_coef: float = 0.5
    """ppo: weight of the value loss"""
    vf_clip: float = 0.5
    """ppo: clip range of the new values around the old ones (verl's cliprange_value)"""
    step_weight: float = 1.0
    """gigpo: omega, weight of the step-level (anchor-state) advantage (GiGPO, Feng et al., 2025)"""
    step_gamma: float = 0.95
    """gigpo: gamma, discount per turn of the step returns (GiGPO, Feng et al., 2025)"""
    step_norm: str = "std"
    """gigpo: step-level normalisation, std ((R - mean) / std, the paper's) or mean (R - mean)"""
    anchor_normaliser: str = "exact"
    """gigpo: how observations match into anchor states: exact, whitespace, or babyai (drops the server's notes)"""
    critic_lr: float = 0.0
    """ppo: learning rate of the critic; 0: the policy's"""
    probe_every: int = 0
    """BabyAI: log the mission-binding probe (binding_probe.py) every N steps; 0: never"""
    probe_states: int = 100
    """held-out GoToLocal tasks the probe reads"""
    eval_episodes: int = 200
    """test tasks for eval_before / eval_after (0: skip)"""
    eval_samples: int = 1
    """episodes per test task at eval_before / eval_after (a small test split needs several)"""
    eval_max_turns: int = 0
    """max turns at evaluation; 0: the schedule's last horizon"""
    save_every: int = 20
    """checkpoint every N steps (and at the end)"""
    save_rollouts_every: int = 0
    """write every Nth step's rollouts to <out>/rollouts/step_N.jsonl, to watch them in view.py (0: never)"""
    resume: str = ""
    """checkpoint folder to continue from (model, optimizer, algorithm state, step, RNG)"""
    mixed_precision: str = "no"
    """Accelerate mixed precision: no, fp16, bf16"""


def parse_args(argv=None) -> Config:
    return parse(Config, argv, description=__doc__.split("\n")[0])


def seed_everything(seed: int):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(s: dict):
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])


def train(cfg: Config) -> dict:
    os.makedirs(cfg.out, exist_ok=True)
    seed_everything(cfg.seed)
    spec = ENVS[cfg.env]
    schedule = staged([int(h) for h in cfg.rounds.split(",")], cfg.steps_per_stage)
    device = resolve_device(cfg.device)
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=device == "cpu")

    saved = torch.load(os.path.join(cfg.resume, "state.pt"), weights_only=False) if cfg.resume else None
    policy = load_agent(cfg, accelerator.device, model=cfg.resume or None)
    ref_path = saved["ref_path"] if saved else policy.path  # the run's starting weights
    ref_model = load_agent(cfg, accelerator.device, model=ref_path).model.eval().requires_grad_(False) \
        if cfg.kl_coef else None
    lr = cfg.lr or (tiny.LR if policy.is_tiny else REAL_MODEL_LR)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr)
    policy.model, optimizer = accelerator.prepare(policy.model, optimizer)
    algo = ALGOS[cfg.algo]
    state = algo.init(accelerator.unwrap_model(policy.model), cfg, lr) if algo.init else None
    if state is not None:
        state.model, state.optimizer = accelerator.prepare(state.model, state.optimizer)
    trained = [(policy.model, optimizer)] + ([(state.model, state.optimizer)] if state else [])
    start = 1
    if saved:
        optimizer.load_state_dict(saved["optimizer"])
        if state is not None:
            load_state(state, cfg.resume, accelerator.unwrap_model)
        set_rng_state(saved["rng"])
        start = saved["step"] + 1

    writer = None
    try:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(os.path.join(cfg.out, "tb"))
    except ImportError:
        pass

    eval_turns = cfg.eval_max_turns or schedule.rounds[-1]
    n_eval = min(cfg.eval_episodes, len(spec.splits[cfg.test_split]))
    test_tasks = spec.splits[cfg.test_split][:n_eval]
    train_tasks = spec.splits[cfg.train_split]
    pool = open_pool(cfg.env, size=max(cfg.tasks_per_step * cfg.group_size, n_eval), url=cfg.url or None,
                     log_path=os.path.join(cfg.out, "server.log"))
    summary = {"config": dataclasses.asdict(cfg)}
    summary_path = os.path.join(cfg.out, "summary.json")
    if saved and os.path.exists(summary_path):
        summary = {**json.load(open(summary_path)), "config": dataclasses.asdict(cfg)}
    metrics_path = os.path.join(cfg.out, "metrics.jsonl")
    rollouts_dir = os.path.join(cfg.out, "rollouts")
    if not saved:  # a fresh run: nothing of an earlier run in this folder may mix with it
        for old in [metrics_path] + glob.glob(os.path.join(rollouts_dir, "step_*.jsonl")):
            if os.path.exists(old):
                os.remove(old)
    try:
        if n_eval and start == 1:
            summary["eval_before"], episodes = evaluate(policy, pool, spec, test_tasks, cfg.eval_samples,
                                                        eval_turns, desc="eval before")
            write_trajectories(os.path.join(cfg.out, "eval_before", "trajectories.jsonl"), episodes)
            print(f"eval before: success {summary['eval_before']['success_rate']:.3f}")
        probe = collect_states(pool, probe_tasks(cfg.probe_states)) if cfg.probe_every and cfg.env == "babyai" else []
        if probe and start == 1:
            summary["probe_before"] = binding(policy, probe).__dict__
        bar = tqdm(range(start, cfg.steps + 1), desc=f"{cfg.algo} on {cfg.env}", initial=start - 1, total=cfg.steps)
        for step in bar:
            t0 = time.time()
            horizon = schedule.horizon(step)
            tasks = random.sample(train_tasks, cfg.tasks_per_step)
            policy.model.eval()
            trajs = rollout(policy, pool, spec, [t for t in tasks for _ in range(cfg.group_size)], horizon,
                            groups=[g for g in range(len(tasks)) for _ in range(cfg.group_size)])
            t_roll = time.time() - t0
            batch = make_batch(trajs, policy.tokenizer.pad_token_id, policy.model.config.vocab_size)
            if ref_model is not None:
                with torch.no_grad():
                    batch.ref_logprobs, _ = token_logprobs(ref_model, batch, cfg.temperature)
            algo.advantages(batch, cfg, state)
            policy.model.train()
            stats: dict[str, list] = {}
            for _ in range(cfg.epochs):
                perm = torch.randperm(len(trajs))
                for s in range(0, len(trajs), cfg.minibatch_size):
                    rows = torch.isin(batch.traj, perm[s:s + cfg.minibatch_size]).nonzero().squeeze(-1)
                    mb = batch.select(rows)
                    logp, ent = token_logprobs(policy.model, mb, cfg.temperature, with_entropy=True)
                    loss, st = algo.loss(logp, ent, mb, cfg, state)
                    for _, opt in trained:
                        opt.zero_grad()
                    accelerator.backward(loss)
                    for model, opt in trained:  # the policy, then the algorithm's own model
                        accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                        opt.step()
                    st["losses/loss"] = loss.item()
                    for k, v in st.items():
                        stats.setdefault(k, []).append(v)
            gen_tokens = int(batch.loss_mask.sum())
            m = {
                "step": step, "horizon": horizon,
                "charts/reward": float(np.mean([t.reward for t in trajs])),
                "charts/success": float(np.mean([t.success for t in trajs])),
                "charts/turns": float(np.mean([t.turns for t in trajs])),
                "charts/tokens_per_s": gen_tokens / max(t_roll, 1e-9),
                "charts/seconds_per_step": time.time() - t0,
                **{k: float(np.mean(v)) for k, v in stats.items()},
            }
            if probe and (step % cfg.probe_every == 0 or step in (1, cfg.steps)):
                summary["probe_after"] = binding(policy, probe).__dict__
                m.update({f"probe/{k}": v for k, v in summary["probe_after"].items() if k != "n_states"})
            with open(metrics_path, "a") as f:
                f.write(json.dumps(m) + "\n")
            if cfg.save_rollouts_every and step % cfg.save_rollouts_every == 0:
                write_trajectories(os.path.join(rollouts_dir, f"step_{step:06d}.jsonl"), trajs, step=step)
            if writer:
                for k, v in m.items():
                    if k != "step":
                        writer.add_scalar(k, v, step)
            bar.set_postfix(h=horizon, succ=f"{m['charts/success']:.2f}", turns=f"{m['charts/turns']:.1f}")
            if step % cfg.save_every == 0 or step == cfg.steps:
                save_checkpoint(cfg, accelerator, policy, optimizer, step, ref_path)
                if state is not None:
                    save_state(state, os.path.join(cfg.out, "checkpoint"), accelerator.unwrap_model)
        if n_eval:
            summary["eval_after"], episodes = evaluate(policy, pool, spec, test_tasks, cfg.eval_samples,
                                                       eval_turns, desc="eval after")
            write_trajectories(os.path.join(cfg.out, "eval_after", "trajectories.jsonl"), episodes)
            print(f"eval before: success {summary.get('eval_before', {}).get('success_rate', float('nan')):.3f}"
                  f"  after: success {summary['eval_after']['success_rate']:.3f}")
    finally:
        close_pool(pool)
        if writer:
            writer.close()
    with open(summary_path, "w") as f:
        json.dump(summary, f, indent=2)
    plot_curves(metrics_path, os.path.join(cfg.out, "curves.png"))
    print("report:", view.write_report([cfg.out], os.path.join(cfg.out, "report.html")))
    return summary


def save_checkpoint(cfg, accelerator, policy, optimizer, step, ref_path):
    path = os.path.join(cfg.out, "checkpoint")
    os.makedirs(path, exist_ok=True)
    accelerator.unwrap_model(policy.model).save_pretrained(path)
    policy.tokenizer.save_pretrained(path)
    torch.save({"step": step, "optimizer": optimizer.state_dict(), "rng": rng_state(),
                "ref_path": ref_path, "config": dataclasses.asdict(cfg)}, os.path.join(path, "state.pt"))


def plot_curves(metrics_path: str, png: str):
    """Success, turns and horizon per step, for people who would rather see than read."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [json.loads(line) for line in open(metrics_path)] if os.path.exists(metrics_path) else []
    if not rows:
        return
    steps = [r["step"] for r in rows]
    probed = [r for r in rows if "probe/share" in r]
    fig, ax = plt.subplots(1, 3 if probed else 2, figsize=(15 if probed else 10, 3.5))
    ax[0].plot(steps, [r["charts/success"] for r in rows], label="success (train rollouts)")
    ax[0].plot(steps, [r["charts/reward"] for r in rows], label="reward", alpha=0.6)
    ax[0].set_xlabel("step"); ax[0].legend(); ax[0].set_ylim(0, 1)
    ax[1].plot(steps, [r["charts/turns"] for r in rows], label="turns per episode")
    ax[1].plot(steps, [r["horizon"] for r in rows], label="horizon (max turns)", linestyle="--")
    ax[1].set_xlabel("step"); ax[1].legend()
    if probed:  # binding_probe.py: mass on the mission's object vs the others, held-out GoToLocal
        ps = [r["step"] for r in probed]
        ax[2].plot(ps, [r["probe/p_mission"] for r in probed], marker="o", label="p(mission's object)")
        ax[2].plot(ps, [r["probe/p_other"] for r in probed], marker="o", label="p(other objects)")
        ax[2].plot(ps, [r["probe/share"] for r in probed], marker="o", label="share on mission's object")
        ax[2].plot(ps, [r["probe/chance"] for r in probed], linestyle="--", label="share by chance")
        ax[2].set_xlabel("step"); ax[2].set_ylim(0, 1); ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    train(parse_args())
