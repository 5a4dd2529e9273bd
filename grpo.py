"""GRPO for multi-turn agents (Shao et al., 2024, DeepSeekMath, as used by AgentGym-RL), and RLOO
beside it.

Where it sits: `train.py` rolls out n trajectories per task (a group) and calls `advantages()` once
per batch; `update.update` then calls `loss()` on each minibatch with fresh log-probs from
`batch.token_logprobs`.
This file never talks to an environment.

Outcome advantage (DeepSeekMath, section 4.1.2, "outcome supervision"): every trajectory i of a
group g gets one scalar

    A_i = (R_i - mean_{j in g} R_j) / (std_{j in g} R_j + eps)

broadcast to every agent token of every turn of trajectory i; observation and template tokens
get nothing (loss_mask = 0). The statistics are taken in float64: a group whose rewards are all
equal must get A = 0 exactly, and BabyAI's rewards (1 - 0.9 * steps / budget, e.g. 0.925) are not
exact in float32, whose mean of 8 equal values can be off by 6e-8 and turn, divided by a std of
6e-8 + eps, into |A| = 0.056 for the whole group. RLOO (Ahmadian et al., 2024) differs only in the
baseline: the mean of the OTHER n-1 rewards of the group, A_i = R_i - mean_{j != i} R_j.

The objective (DeepSeekMath, eq. 3), maximised; o_i is trajectory i's agent tokens (every turn's
reply), G the group size, r the policy ratio, beta = kl_coef, eps = clip_ratio:

    J_GRPO(theta) = E[ 1/G sum_i 1/|o_i| sum_t { min(r_it A_i, clip(r_it, 1 - eps, 1 + eps) A_i)
                                                  - beta D_KL[pi_theta || pi_ref]_it } ]
    r_it = pi_theta(o_it | q, o_i<t) / pi_old(o_it | q, o_i<t)

with the per-token average taken over all agent tokens of the minibatch ("token-mean",
1 / sum_i |o_i| sum_i sum_t) instead of per trajectory, the KL as DeepSeekMath's k3 estimator
(eq. 4), and an entropy bonus. `loss()` below minimises its negative; the lines are
`algorithm.clipped_policy_loss`, shared with PPO and REINFORCE++ (the same surrogate, PPO eq. 7):

    ratio    = exp(logp - old_logp)                                          # r_it
    pg_loss  = max(-A * ratio, -A * clip(ratio, 1 - clip_ratio, 1 + clip_ratio))
    kl       = exp(ref_logp - logp) - (ref_logp - logp) - 1                   # k3, eq. 4
    loss     = pg_loss + kl_coef * kl - entropy_coef * entropy               # token-means

Reads cfg.group_std_eps, cfg.clip_ratio (and cfg.clip_ratio_high: DAPO's clip-higher, the upper
end 1 + clip_ratio_high; docs/algorithms-notes.md), cfg.kl_coef, cfg.entropy_coef (train.Config).
"""

from collections import defaultdict
from dataclasses import dataclass

import torch

from algorithm import Algorithm, clipped_policy_loss
from machinery.flags import flag


@dataclass
class Settings:
    group_std_eps: float = flag(1e-6, at_least=0)
    """grpo: added to the group's reward std"""


def group_advantages(rewards: torch.Tensor, groups, eps: float = 1e-6, use_std: bool = True) -> torch.Tensor:
    """(N,) rewards, N group keys (a tensor of ids, or any hashable keys such as GiGPO's (group,
    state) pairs) -> (N,) GRPO advantages (R - mean_g) / (std_g + eps), statistics in float64
    (std_g the sample std, n - 1 in the denominator, as torch.std); `use_std=False`: R - mean_g
    (GiGPO's mean-norm). A group of one gets 0."""
    x = rewards.double()
    adv = torch.zeros_like(x)
    members = defaultdict(list)
    for i, key in enumerate(groups.tolist() if torch.is_tensor(groups) else groups):
        members[key].append(i)
    for idx in members.values():
        if len(idx) < 2:
            continue  # nothing to compare with
        r = x[idx]
        adv[idx] = (r - r.mean()) / (r.std() + eps) if use_std else r - r.mean()
    return adv.to(rewards.dtype)


def rloo_advantages(rewards: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """(N,) -> (N,) leave-one-out: R_i minus the mean of the others in its group (float64)."""
    rewards64 = rewards.double()
    adv = torch.zeros_like(rewards64)
    for g in groups.unique():
        idx = groups == g
        r, n = rewards64[idx], int(idx.sum())
        if n > 1:
            adv[idx] = r - (r.sum() - r) / (n - 1)
    return adv.to(rewards.dtype)


def broadcast(traj_adv: torch.Tensor, batch) -> torch.Tensor:
    """(N,) per trajectory -> (B, T): each row's agent tokens get its trajectory's advantage."""
    return traj_adv[batch.traj].unsqueeze(-1) * batch.loss_mask  # (B, 1) * (B, T)


def advantages(batch, cfg, state=None) -> None:
    batch.advantages = broadcast(group_advantages(batch.rewards, batch.groups, cfg.group_std_eps), batch)


def rloo_advantages_for(batch, cfg, state=None) -> None:
    batch.advantages = broadcast(rloo_advantages(batch.rewards, batch.groups), batch)


def loss(logp: torch.Tensor, entropy: torch.Tensor | None, mb, cfg, state=None):
    """-J_GRPO (DeepSeekMath, eq. 3, token-mean; this file's docstring) on minibatch `mb`, by
    `algorithm.clipped_policy_loss`; logp, entropy: (B, T). Returns (loss, stats)."""
    return clipped_policy_loss(
        logp, entropy, mb, mb.advantages, cfg.clip_ratio, cfg.kl_coef, cfg.entropy_coef, cfg.clip_ratio_high
    )


GRPO = Algorithm(advantages=advantages, loss=loss, settings=Settings, min_group_size=2)
RLOO = Algorithm(advantages=rloo_advantages_for, loss=loss, min_group_size=2)
