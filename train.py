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
and writes both to <out>/summary.json (`eval_before`, `eval_after`, same keys as eval.py).
"""

import argparse
import ast
import dataclasses
import inspect
import json
import os
import random
import time
from dataclasses import dataclass

import numpy as np
import torch
from accelerate import Accelerator
from tqdm import tqdm

import grpo
import ppo
import reinforce_pp
from agent import load_policy, make_batch, rollout, token_logprobs
from envs import ENVS, close_pool, open_pool
from eval import evaluate
from scaling_inter import staged

# Each algorithm: (fill batch.advantages, loss on a minibatch, its config). See each file's docstring.
ALGOS = {
    "grpo": (grpo.advantages, grpo.loss, grpo.GRPOConfig),
    "rloo": (grpo.rloo_advantages_for, grpo.loss, grpo.GRPOConfig),
    "ppo": (ppo.advantages, ppo.loss, ppo.PPOConfig),
    "reinforce_pp": (reinforce_pp.advantages, reinforce_pp.loss, reinforce_pp.ReinforcePPConfig),
}


@dataclass
class Config:
    env: str = "babyai"
    """environment name (see envs.ENVS)"""
    algo: str = "grpo"
    """algorithm: one of ALGOS"""
    model: str = "tiny"
    """`tiny` (built locally) or a Hugging Face causal LM id or path"""
    url: str = ""
    """an already running environment server (ours or AgentGym's); empty: start one"""
    steps: int = 50
    """training steps (one rollout batch + update each)"""
    seed: int = 0
    """random seed (task sampling, sampling, initialisation)"""
    out: str = "runs/default"
    """output folder: metrics.jsonl, summary.json, checkpoint/, curves.png"""
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
    """learning rate; 0: 5e-4 for tiny, 1e-6 for real models (the paper's)"""
    clip_ratio: float = 0.2
    """clip range of the policy ratio"""
    kl_coef: float = 0.001
    """weight of the k3 KL to the reference model"""
    entropy_coef: float = 0.001
    """weight of the entropy bonus"""
    gamma: float = 1.0
    """discount per agent token (PPO, REINFORCE++)"""
    lam: float = 1.0
    """GAE lambda (PPO)"""
    critic_lr: float = 0.0
    """learning rate of PPO's critic; 0: the policy's"""
    temperature: float = 1.0
    """sampling temperature at rollout (also used to recompute log-probs)"""
    max_grad_norm: float = 1.0
    """gradient clipping"""
    max_new_tokens: int = 512
    """per-turn generation limit for real models (tiny uses 48)"""
    mask_actions: str = "auto"
    """restrict sampling to the env's available actions: auto (on for tiny), on, off"""
    context_turns: int = -1
    """turns of history the agent sees; 0: all; -1: auto (1 for tiny, 0 for real models)"""
    eval_episodes: int = 200
    """test tasks for eval_before / eval_after (0: skip)"""
    eval_samples: int = 1
    """episodes per test task at eval_before / eval_after (a small test split needs several)"""
    eval_max_turns: int = 0
    """max turns at evaluation; 0: the schedule's last horizon"""
    save_every: int = 20
    """checkpoint every N steps (and at the end)"""
    resume: str = ""
    """checkpoint folder to continue from (model, optimizer, step, RNG)"""
    mixed_precision: str = "no"
    """Accelerate mixed precision: no, fp16, bf16"""
    device: str = "auto"
    """auto (cuda if available), cpu or cuda"""


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field, for --help."""
    tree = ast.parse(inspect.getsource(cls))
    body, docs = tree.body[0].body, {}
    for a, b in zip(body, body[1:]):
        if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
            docs[a.target.id] = b.value.value
    return docs


def parse_args(argv=None) -> Config:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    docs = field_docs(Config)
    for f in dataclasses.fields(Config):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                       help=f"{docs.get(f.name, '')} (default: {f.default})")
    return Config(**vars(p.parse_args(argv)))


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
    device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision, cpu=device == "cpu")
    mask = {"auto": None, "on": True, "off": False}[cfg.mask_actions]
    ctx = None if cfg.context_turns < 0 else cfg.context_turns
    load = lambda path: load_policy(path, env=cfg.env, device=accelerator.device, mask_actions=mask,
                                    context_turns=ctx, max_new_tokens=cfg.max_new_tokens,
                                    temperature=cfg.temperature)

    state = torch.load(os.path.join(cfg.resume, "state.pt"), weights_only=False) if cfg.resume else None
    ref_path = state["ref_path"] if state else cfg.model
    policy = load(cfg.resume or cfg.model)
    ref_model = load(ref_path).model.eval().requires_grad_(False) if cfg.kl_coef else None
    if ref_path == "tiny":
        from tiny import tiny_policy_path
        ref_path = tiny_policy_path(cfg.env)
    lr = cfg.lr or (5e-4 if policy.is_tiny else 1e-6)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr)
    policy.model, optimizer = accelerator.prepare(policy.model, optimizer)
    critic, critic_opt = None, None
    if cfg.algo == "ppo":  # a copy of the policy's backbone + value head, its own optimizer (ppo.py)
        critic = ppo.Critic(accelerator.unwrap_model(policy.model))
        critic_opt = torch.optim.AdamW(critic.parameters(), lr=cfg.critic_lr or lr)
        critic, critic_opt = accelerator.prepare(critic, critic_opt)
    start = 1
    if state:
        optimizer.load_state_dict(state["optimizer"])
        if critic is not None:
            ppo.load_critic(cfg.resume, accelerator.unwrap_model(critic), critic_opt)
        set_rng_state(state["rng"])
        start = state["step"] + 1
    algo_advantages, algo_loss, algo_config = ALGOS[cfg.algo]
    names = {f.name for f in dataclasses.fields(algo_config)}  # its fields take Config's values
    algo_cfg = algo_config(**{k: v for k, v in dataclasses.asdict(cfg).items() if k in names})

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
    if state and os.path.exists(summary_path):
        summary = {**json.load(open(summary_path)), "config": dataclasses.asdict(cfg)}
    metrics_path = os.path.join(cfg.out, "metrics.jsonl")
    if not state and os.path.exists(metrics_path):
        os.remove(metrics_path)
    try:
        if n_eval and start == 1:
            summary["eval_before"], _ = evaluate(policy, pool, spec, test_tasks, cfg.eval_samples, eval_turns,
                                                    desc="eval before")
            print(f"eval before: success {summary['eval_before']['success_rate']:.3f}")
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
            if critic is not None:  # PPO: V(s_t) at rollout time, the baseline and the value clip's anchor
                with torch.no_grad():
                    batch.values = critic(batch).cpu()
            algo_advantages(batch, algo_cfg)
            policy.model.train()
            stats: dict[str, list] = {}
            for _ in range(cfg.epochs):
                perm = torch.randperm(len(trajs))
                for s in range(0, len(trajs), cfg.minibatch_size):
                    rows = torch.isin(batch.traj, perm[s:s + cfg.minibatch_size]).nonzero().squeeze(-1)
                    mb = batch.select(rows)
                    logp, ent = token_logprobs(policy.model, mb, cfg.temperature, with_entropy=True)
                    if critic is None:
                        loss, st = algo_loss(logp, ent, mb, algo_cfg)
                    else:  # PPO: the critic's fresh values add the clipped value loss
                        loss, st = ppo.loss(logp, ent, mb, algo_cfg, values=critic(mb))
                        critic_opt.zero_grad()
                    optimizer.zero_grad()
                    accelerator.backward(loss)
                    accelerator.clip_grad_norm_(policy.model.parameters(), cfg.max_grad_norm)
                    optimizer.step()
                    if critic is not None:
                        accelerator.clip_grad_norm_(critic.parameters(), cfg.max_grad_norm)
                        critic_opt.step()
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
            with open(metrics_path, "a") as f:
                f.write(json.dumps(m) + "\n")
            if writer:
                for k, v in m.items():
                    if k != "step":
                        writer.add_scalar(k, v, step)
            bar.set_postfix(h=horizon, succ=f"{m['charts/success']:.2f}", turns=f"{m['charts/turns']:.1f}")
            if step % cfg.save_every == 0 or step == cfg.steps:
                save_checkpoint(cfg, accelerator, policy, optimizer, step, ref_path)
                if critic is not None:
                    ppo.save_critic(os.path.join(cfg.out, "checkpoint"), accelerator.unwrap_model(critic), critic_opt)
        if n_eval:
            summary["eval_after"], _ = evaluate(policy, pool, spec, test_tasks, cfg.eval_samples, eval_turns,
                                                    desc="eval after")
            print(f"eval before: success {summary.get('eval_before', {}).get('success_rate', float('nan')):.3f}"
                  f"  after: success {summary['eval_after']['success_rate']:.3f}")
    finally:
        close_pool(pool)
        if writer:
            writer.close()
    with open(summary_path, "w") as f:
        json.dump(summary, f, indent=2)
    plot_curves(metrics_path, os.path.join(cfg.out, "curves.png"))
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
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))
    ax[0].plot(steps, [r["charts/success"] for r in rows], label="success (train rollouts)")
    ax[0].plot(steps, [r["charts/reward"] for r in rows], label="reward", alpha=0.6)
    ax[0].set_xlabel("step"); ax[0].legend(); ax[0].set_ylim(0, 1)
    ax[1].plot(steps, [r["charts/turns"] for r in rows], label="turns per episode")
    ax[1].plot(steps, [r["horizon"] for r in rows], label="horizon (max turns)", linestyle="--")
    ax[1].set_xlabel("step"); ax[1].legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    train(parse_args())
