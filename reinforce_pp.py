"""REINFORCE++ for multi-turn agents (Hu, 2025, "REINFORCE++: a simple and efficient approach for
aligning large language models"), one of the algorithms AgentGym-RL compares.

Where it sits: `train.py` rolls out a batch, computes the frozen reference model's log-probs
(`batch.ref_logprobs`, when kl_coef > 0), calls `advantages()` once per batch, then `loss()` on
each minibatch with fresh log-probs from `batch.token_logprobs`. No critic, no groups.
This file never talks to an environment.

The steps are the agent's tokens only: a trajectory's agent tokens, in the order they were
sampled, are the loss-mask-1 positions of its rows in turn order, a_0 ... a_{n-1}; observation
and template tokens are skipped. The KL to the reference model is folded into the reward, per
token (the k1 estimator, at sampling time; GRPO, GiGPO and PPO here add a k3 loss term instead:
docs/algorithms-notes.md), and the outcome R sits on the LAST AGENT token:

    r_k = -kl_coef * (old_logp_k - ref_logp_k)  +  [k = n-1] * R
    G_k = sum_{j >= k} gamma^(j-k) r_j                              (return-to-go: algorithm.returns_to_go)
    A   = (G - mean(G)) / sqrt(var(G) + whiten_eps)   over ALL agent tokens of the batch (global
                        whitening; with several processes, of every process's part: machinery/dist.py)

(var the biased variance, eps under the root where ppo.py adds it to the std; the statistics in
float64, so that equal returns give exactly A = 0), and the loss is PPO's clipped surrogate
(Schulman et al., 2017, eq. 7; `algorithm.clipped_policy_loss`) with no separate KL term (it is
already in the reward):

    ratio   = exp(logp - old_logp)
    pg_loss = max(-A * ratio, -A * clip(ratio, 1 - clip_ratio, 1 + eps_high))
    loss    = pg_loss - entropy_coef * entropy                      (token-mean)

with eps_high = clip_ratio_high, DAPO's clip-higher, or clip_ratio when that is 0 (PPO's symmetric
clip, the default).

Reads cfg.kl_coef, cfg.gamma, cfg.whiten_eps, cfg.clip_ratio, cfg.clip_ratio_high, cfg.entropy_coef
(train.Config).
"""

from dataclasses import dataclass

import torch

from algorithm import (
    Algorithm,
    clipped_policy_loss,
    global_masked_moments,
    masked_mean,
    outcome_on_last_token,
    returns_to_go,
)
from machinery.flags import flag


@dataclass
class Settings:
    gamma: float = flag(1.0, at_least=0, at_most=1)
    """ppo, reinforce_pp: discount per agent token"""
    whiten_eps: float = flag(1e-8, at_least=0)
    """ppo, reinforce_pp: added to the std (ppo) or the variance (reinforce_pp) when whitening"""


def advantages(batch, cfg, state=None) -> None:
    """Fill batch.returns (B, T, the raw G) and batch.advantages (B, T, G whitened over the
    batch's agent tokens). Zero off the agent tokens."""
    ret = torch.zeros_like(batch.loss_mask)  # (B, T)
    for b, t, r in outcome_on_last_token(batch):  # each trajectory's agent tokens, R on the last
        if batch.ref_logprobs is not None and cfg.kl_coef:  # minus the k1 KL on every agent token
            r = r - cfg.kl_coef * (batch.old_logprobs[b, t] - batch.ref_logprobs[b, t].cpu())
        ret[b, t] = returns_to_go(r, cfg.gamma)
    mean, var = global_masked_moments(ret, batch.loss_mask)  # every process's tokens (machinery/dist.py)
    batch.returns = ret
    batch.advantages = ((ret.double() - mean) * torch.rsqrt(var + cfg.whiten_eps)).float() * batch.loss_mask


def loss(logp: torch.Tensor, entropy: torch.Tensor | None, mb, cfg, state=None):
    """The shared clipped policy loss with no KL term + entropy bonus; logp, entropy: (B, T).
    Returns (loss, stats)."""
    total, stats = clipped_policy_loss(
        logp,
        entropy,
        mb,
        mb.advantages,
        cfg.clip_ratio,
        kl_coef=0.0,
        entropy_coef=cfg.entropy_coef,
        clip_ratio_high=cfg.clip_ratio_high,
    )
    if mb.ref_logprobs is not None:  # the KL that went into the reward (k1, sampling policy)
        m = mb.loss_mask.to(logp.device)
        k1 = mb.old_logprobs.to(logp.device) - mb.ref_logprobs.to(logp.device)
        stats["losses/kl"] = masked_mean(k1, m).item()
    return total, stats


REINFORCE_PP = Algorithm(advantages=advantages, loss=loss, settings=Settings, token_level=True)
