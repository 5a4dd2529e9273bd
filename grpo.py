"""GRPO for multi-turn agents (Shao et al., 2024, as used by AgentGym-RL), and RLOO beside it.

Where it sits: `train.py` rolls out n trajectories per task (a group), calls `advantages()` once
per batch, then `loss()` on each minibatch with fresh log-probs from `agent.token_logprobs`.
This file never talks to an environment.

Outcome advantage (paper, section 3): every trajectory i of a group g gets one scalar

    A_i = (R_i - mean_{j in g} R_j) / (std_{j in g} R_j + eps)

broadcast to every agent token of every turn of trajectory i; observation and template tokens
get nothing (loss_mask = 0). RLOO (Ahmadian et al., 2024) differs only in the baseline: the mean
of the OTHER n-1 rewards of the group, A_i = R_i - mean_{j != i} R_j, no division.

Loss, averaged over the agent tokens of the minibatch ("token-mean"):

    ratio    = exp(logp - old_logp)
    pg_loss  = max(-A * ratio, -A * clip(ratio, 1 - eps_clip, 1 + eps_clip))
    kl       = exp(ref_logp - logp) - (ref_logp - logp) - 1          (the "k3" estimator, >= 0)
    loss     = pg_loss + kl_coef * kl - entropy_coef * entropy
"""

from dataclasses import dataclass

import torch


@dataclass
class GRPOConfig:
    clip_ratio: float = 0.2
    """PPO-style clip range of the policy ratio."""
    kl_coef: float = 0.001
    """Weight of the k3 KL to the frozen reference model (a loss term, as in the paper)."""
    entropy_coef: float = 0.001
    """Weight of the entropy bonus."""
    eps: float = 1e-6
    """Added to the group std."""


def group_advantages(rewards: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(N,) outcome rewards, (N,) group ids -> (N,) GRPO advantages."""
    adv = torch.zeros_like(rewards)
    for g in groups.unique():
        idx = groups == g
        r = rewards[idx]
        std = r.std() if r.numel() > 1 else torch.tensor(0.0)
        adv[idx] = (r - r.mean()) / (std + eps)
    return adv


def rloo_advantages(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N,) leave-one-out: R_i minus the mean of the others in its group."""
    adv = torch.zeros_like(rewards)
    for g in groups.unique():
        idx = groups == g
        r, n = rewards[idx], int(idx.sum())
        if n > 1:
            adv[idx] = r - (r.sum() - r) / (n - 1)
    return adv


def broadcast(traj_adv: torch.Tensor, batch) -> torch.Tensor:
    """(N,) per trajectory -> (B, T): each row's agent tokens get its trajectory's advantage."""
    return traj_adv[batch.traj].unsqueeze(-1) * batch.loss_mask  # (B, 1) * (B, T)


def advantages(batch, cfg: GRPOConfig = GRPOConfig()) -> None:
    batch.advantages = broadcast(group_advantages(batch.rewards, batch.groups, cfg.eps), batch)


def rloo_advantages_for(batch, cfg: GRPOConfig = GRPOConfig()) -> None:
    batch.advantages = broadcast(rloo_advantages(batch.rewards, batch.groups), batch)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def loss(logp: torch.Tensor, entropy: torch.Tensor | None, mb, cfg: GRPOConfig = GRPOConfig()):
    """Clipped policy loss + k3 KL + entropy bonus over the agent tokens of minibatch `mb`.
    logp, entropy: (B, T) under the current policy. Returns (loss, stats)."""
    m = mb.loss_mask.to(logp.device)
    adv = mb.advantages.to(logp.device)
    log_ratio = (logp - mb.old_logprobs.to(logp.device)) * m  # 0 off the agent tokens
    ratio = log_ratio.exp()
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * ratio.clamp(1 - cfg.clip_ratio, 1 + cfg.clip_ratio)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), m)
    total = pg_loss
    stats = {}
    if mb.ref_logprobs is not None and cfg.kl_coef:
        d = (mb.ref_logprobs.to(logp.device) - logp) * m
        kl = masked_mean(d.exp() - d - 1, m)
        total = total + cfg.kl_coef * kl
        stats["losses/kl"] = kl.item()
    if entropy is not None:
        ent = masked_mean(entropy, m)
        total = total - cfg.entropy_coef * ent
        stats["losses/entropy"] = ent.item()
    with torch.no_grad():
        stats["losses/policy_loss"] = pg_loss.item()
        stats["losses/approx_kl"] = masked_mean((ratio - 1) - log_ratio, m).item()
        stats["losses/clipfrac"] = masked_mean(((ratio - 1).abs() > cfg.clip_ratio).float(), m).item()
    return total, stats
