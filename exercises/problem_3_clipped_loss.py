"""Problem 3: the clipped surrogate loss with the k3 KL term and the entropy bonus.

Mirrors: algorithm.py, `clipped_policy_loss` (and `k3_kl`, `masked_mean` beside it; PPO:
Schulman et al., 2017, eq. 7; k3: DeepSeekMath, eq. 4; clip-higher: DAPO).

Over the agent tokens m (mb.loss_mask == 1) of a minibatch, each term a token-mean
(sum over m / number of agent tokens):

    ratio   = exp(logp - old_logp)                              (log ratio 0 off the agent tokens:
                                                                 their old_logp may be anything)
    pg_loss = mean_m max(-A * ratio, -A * clip(ratio, 1 - clip_ratio, 1 + eps_high))
    d       = clamp(ref_logp - logp, -20, 20)                   (on the agent tokens)
    kl      = mean_m clamp(exp(d) - d - 1, max=10)              (k3 estimate of KL(pi || pi_ref))
    loss    = pg_loss + kl_coef * kl - entropy_coef * mean_m entropy

eps_high is clip_ratio_high, or clip_ratio when clip_ratio_high is 0. The KL term is there only
when mb.ref_logprobs is not None and kl_coef is not 0; the entropy term only when `entropy` is not
None. mb has loss_mask, old_logprobs, ref_logprobs, all (B, T); logp, entropy, adv are (B, T).

Task: return (loss, stats): loss a scalar tensor with its gradient; stats a dict (may be empty).
You may use `algorithm.masked_mean`. Check: python -m exercises.check 3
"""

import torch


def clipped_policy_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor | None,
    mb,
    adv: torch.Tensor,
    clip_ratio: float,
    kl_coef: float = 0.0,
    entropy_coef: float = 0.0,
    clip_ratio_high: float = 0.0,
):
    raise NotImplementedError("problem 3: the clipped surrogate with k3 KL (this file's docstring)")
