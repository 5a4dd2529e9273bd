"""What every algorithm shares: the interface `train.py` calls, and the clipped policy loss.

Where it sits: `train.py` picks `ALGOS[cfg.algo]`, an `Algorithm`, and never names one. Per run it
calls `init` once (when the algorithm keeps a `State`, e.g. PPO's critic); per step
`advantages(batch, cfg, state)` once, then `loss(logp, entropy, minibatch, cfg, state)` on each
minibatch, and it steps, clips, saves and restores the state's optimizer beside the policy's.
Adding an algorithm is one file that builds an `Algorithm` and one line in `train.ALGOS`.

GRPO, RLOO, PPO and REINFORCE++ differ only in the advantage (and PPO adds a value loss): all of
them maximise PPO's clipped surrogate objective (Schulman et al., 2017, eq. 7)

    L^CLIP = E_t[ min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t) ],   r_t = pi(a_t|s_t) / pi_old(a_t|s_t)

over the agent tokens of a minibatch, averaged per token ("token-mean"), written below as the loss
max(-A r, -A clip(r)) = -min(A r, A clip(r)). With it, optionally, the k3 estimator of the KL to
the frozen reference model (DeepSeekMath, Shao et al., 2024, eq. 4; a loss term as in its GRPO
objective, eq. 3),

    D_KL ~ pi_ref/pi - log(pi_ref/pi) - 1     (>= 0, unbiased),

and an entropy bonus. `clipped_policy_loss()` is that one function.
"""

import os
from dataclasses import dataclass
from typing import Callable

import torch

from machinery import dist


@dataclass
class State:
    """What an algorithm trains beside the policy, with its own optimizer (PPO's critic).
    train.py prepares both with Accelerate, zeroes, clips and steps the optimizer with the
    policy's, saves them to <checkpoint>/<name>.pt and restores them on --resume."""

    name: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer


@dataclass(frozen=True)
class Algorithm:
    advantages: Callable  # (batch, cfg, state) -> None: fills batch.advantages (B, T)
    loss: Callable  # (logp, entropy, minibatch, cfg, state) -> (loss, stats)
    init: Callable | None = None  # (policy_model, cfg, lr) -> State; None: no state


def save_state(state: State, folder: str, unwrap=lambda m: m) -> None:
    torch.save({"model": unwrap(state.model).state_dict(), "optimizer": state.optimizer.state_dict()},
               os.path.join(folder, f"{state.name}.pt"))


def load_state(state: State, folder: str, unwrap=lambda m: m) -> None:
    saved = torch.load(os.path.join(folder, f"{state.name}.pt"), weights_only=False)
    unwrap(state.model).load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the positions where mask is 1 (the agent tokens)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def global_masked_moments(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (biased) variance of x over the positions where mask is 1, in float64, over the
    GLOBAL batch: with several processes (machinery/dist.py) each adds its sums, so N processes whiten
    exactly as one process holding every trajectory would. Two passes (mean, then the squared
    deviations from it) rather than sum of squares: equal values give a variance of 0."""
    x, m = x.double(), mask.double()
    n = dist.global_sum(m.sum()).clamp(min=1.0)
    mean = dist.global_sum((x * m).sum()) / n
    var = dist.global_sum(((x - mean) ** 2 * m).sum()) / n
    return mean, var


def clipped_policy_loss(logp: torch.Tensor, entropy: torch.Tensor | None, mb, adv: torch.Tensor,
                        clip_ratio: float, kl_coef: float = 0.0, entropy_coef: float = 0.0):
    """-L^CLIP (PPO, eq. 7) + kl_coef * k3 KL (DeepSeekMath, eq. 4) - entropy_coef * entropy,
    each a token-mean over the agent tokens of minibatch `mb`.
    logp, entropy: (B, T) under the current policy; adv: (B, T), 0 off the agent tokens.
    Returns (loss, stats) with CleanRL's metric names."""
    m = mb.loss_mask.to(logp.device)
    adv = adv.to(logp.device)
    log_ratio = (logp - mb.old_logprobs.to(logp.device)) * m  # 0 off the agent tokens
    ratio = log_ratio.exp()  # r_t
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * ratio.clamp(1 - clip_ratio, 1 + clip_ratio)
    pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), m)
    total = pg_loss
    stats = {}
    if mb.ref_logprobs is not None and kl_coef:
        d = (mb.ref_logprobs.to(logp.device) - logp) * m  # log(pi_ref / pi)
        kl = masked_mean(d.exp() - d - 1, m)
        total = total + kl_coef * kl
        stats["losses/kl"] = kl.item()
    if entropy is not None:
        ent = masked_mean(entropy, m)
        total = total - entropy_coef * ent
        stats["losses/entropy"] = ent.item()
    with torch.no_grad():
        stats["losses/policy_loss"] = pg_loss.item()
        stats["losses/approx_kl"] = masked_mean((ratio - 1) - log_ratio, m).item()
        stats["losses/clipfrac"] = masked_mean(((ratio - 1).abs() > clip_ratio).float(), m).item()
    return total, stats
