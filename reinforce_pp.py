"""REINFORCE++ for multi-turn agents (Hu, 2025, "REINFORCE++: a simple and efficient approach for
aligning large language models"), one of the algorithms AgentGym-RL compares.

Where it sits: `train.py` rolls out a batch, computes the frozen reference model's log-probs
(`batch.ref_logprobs`, when kl_coef > 0), calls `advantages()` once per batch, then `loss()` on
each minibatch with fresh log-probs from `agent.token_logprobs`. No critic, no groups.
This file never talks to an environment.

The steps are the agent's tokens only: a trajectory's agent tokens, in the order they were
sampled, are the loss-mask-1 positions of its rows in turn order, a_0 ... a_{n-1}; observation
and template tokens are skipped. The KL to the reference model is folded into the reward, per
token (the k1 estimator, at sampling time), and the outcome R sits on the LAST AGENT token:

    r_k = -kl_coef * (old_logp_k - ref_logp_k)  +  [k = n-1] * R
    G_k = sum_{j >= k} gamma^(j-k) r_j                              (return-to-go)
    A   = (G - mean(G)) / std(G)         over ALL agent tokens of the batch (global whitening)

and the loss is PPO's clipped ratio with no separate KL term (it is already in the reward):

    ratio   = exp(logp - old_logp)
    pg_loss = max(-A * ratio, -A * clip(ratio, 1 - clip_ratio, 1 + clip_ratio))
    loss    = pg_loss - entropy_coef * entropy                      (token-mean)
"""

from dataclasses import dataclass

import torch

from agent import agent_tokens


@dataclass
class ReinforcePPConfig:
    clip_ratio: float = 0.2
    """Clip range of the policy ratio."""
    kl_coef: float = 0.001
    """Weight of the per-token KL penalty in the reward."""
    entropy_coef: float = 0.001
    """Weight of the entropy bonus."""
    gamma: float = 1.0
    """Discount per agent token (the paper: 1.0)."""
    eps: float = 1e-8
    """Added to the variance when whitening."""


def returns_to_go(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """(n,) per-token rewards of one trajectory -> (n,) G_k = r_k + gamma * G_{k+1}."""
    out = torch.zeros(len(rewards))
    running = 0.0
    for k in reversed(range(len(rewards))):
        running = rewards[k] + gamma * running
        out[k] = running
    return out


def advantages(batch, cfg: ReinforcePPConfig = ReinforcePPConfig()) -> None:
    """Fill batch.returns (B, T, the raw G) and batch.advantages (B, T, G whitened over the
    batch's agent tokens). Zero off the agent tokens."""
    ret = torch.zeros_like(batch.loss_mask)  # (B, T)
    for n in range(len(batch.rewards)):
        b, t = agent_tokens(batch, n)
        if len(b) == 0:
            continue
        r = torch.zeros(len(b))  # (n_agent,)
        if batch.ref_logprobs is not None and cfg.kl_coef:
            r = -cfg.kl_coef * (batch.old_logprobs[b, t] - batch.ref_logprobs[b, t].cpu())
        r[-1] += batch.rewards[n]  # the outcome, on the last agent token
        ret[b, t] = returns_to_go(r, cfg.gamma)
    m = batch.loss_mask.bool()
    mean, var = ret[m].mean(), ret[m].var(unbiased=False)
    batch.returns = ret
    batch.advantages = (ret - mean) * torch.rsqrt(var + cfg.eps) * batch.loss_mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def loss(logp: torch.Tensor, entropy: torch.Tensor | None, mb, cfg: ReinforcePPConfig = ReinforcePPConfig()):
    """Clipped ratio loss + entropy bonus over the agent tokens of minibatch `mb`.
    logp, entropy: (B, T) under the current policy. Returns (loss, stats)."""
    m = mb.loss_mask.to(logp.device)
    adv = mb.advantages.to(logp.device)
    old = mb.old_logprobs.to(logp.device)
    log_ratio = (logp - old) * m  # 0 off the agent tokens
    ratio = log_ratio.exp()
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * ratio.clamp(1 - cfg.clip_ratio, 1 + cfg.clip_ratio)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), m)
    total = pg_loss
    stats = {}
    if entropy is not None:
        ent = masked_mean(entropy, m)
        total = total - cfg.entropy_coef * ent
        stats["losses/entropy"] = ent.item()
    with torch.no_grad():
        if mb.ref_logprobs is not None:  # the KL that went into the reward (k1, sampling policy)
            stats["losses/kl"] = masked_mean(old - mb.ref_logprobs.to(logp.device), m).item()
        stats["losses/policy_loss"] = pg_loss.item()
        stats["losses/approx_kl"] = masked_mean((ratio - 1) - log_ratio, m).item()
        stats["losses/clipfrac"] = masked_mean(((ratio - 1).abs() > cfg.clip_ratio).float(), m).item()
    return total, stats
