"""Problem 3's mistakes (the clipped surrogate with the k3 KL): wrong versions students write, one
small function each, in `MISTAKES[what went wrong]`. Read them after your check of problem 3 passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 3` fails on each. Most share a helper (`_loss`) that writes
the problem once with its rules changeable; each mistake changes one rule. A mistake's docstring
says what it costs.
"""

import torch

from algorithm import masked_mean


def _loss(
    logp,
    entropy,
    mb,
    adv,
    clip_ratio,
    kl_coef=0.0,
    entropy_coef=0.0,
    clip_ratio_high=0.0,
    kl_sign=1.0,
    pessimism=torch.max,
    mask_ratio=True,
    per_token=True,
    clamp_kl=True,
    clip_higher=True,
    entropy_gradient=True,
    clamp_log_ratio=True,
):
    """Problem 3's loss with one of its rules changeable."""
    m = mb.loss_mask
    mean = (lambda x: masked_mean(x, m)) if per_token else (lambda x: (x * m).mean())
    log_ratio = (logp - mb.old_logprobs) * m if mask_ratio else logp - mb.old_logprobs
    ratio = log_ratio.exp()
    high = (clip_ratio_high if clip_higher else 0.0) or clip_ratio
    loss = mean(pessimism(-adv * ratio, -adv * ratio.clamp(1 - clip_ratio, 1 + high)))
    if mb.ref_logprobs is not None and kl_coef:
        d = mb.ref_logprobs * m - logp * m
        d = d.clamp(-20, 20) if clamp_log_ratio else d
        k3 = (d.exp() - d - 1).clamp(max=10) if clamp_kl else d.exp() - d - 1
        loss = loss + kl_sign * kl_coef * mean(k3)
    if entropy is not None:
        loss = loss - entropy_coef * mean(entropy if entropy_gradient else entropy.detach())
    return loss, {}


def kl_sign_flipped(*args, **kwargs):
    """loss - kl_coef * kl: the KL term rewards moving away from the reference."""
    return _loss(*args, **kwargs, kl_sign=-1.0)


def min_instead_of_max(*args, **kwargs):
    """torch.min of the two losses: the optimistic bound, so clipping never stops a large step."""
    return _loss(*args, **kwargs, pessimism=torch.min)


def log_ratio_not_masked(*args, **kwargs):
    """exp(logp - old_logp) on every token: an observation token's stored log-prob is anything,
    its ratio overflows, and inf * 0 is NaN."""
    return _loss(*args, **kwargs, mask_ratio=False)


def mean_over_every_position(*args, **kwargs):
    """The mean over all (B, T) positions, padding and observations included: the loss shrinks
    with the share of non-agent tokens."""
    return _loss(*args, **kwargs, per_token=False)


def k3_not_bounded(*args, **kwargs):
    """No upper bound on the per-token k3: a token the reference finds 30 nats less likely counts
    19 in the KL instead of at most 10, and a few such tokens swamp the rest of the loss."""
    return _loss(*args, **kwargs, clamp_kl=False)


def clip_higher_ignored(*args, **kwargs):
    """The ratio clipped to [1 - eps, 1 + eps] whatever clip_ratio_high says (DAPO's clip-higher lost)."""
    return _loss(*args, **kwargs, clip_higher=False)


def k3_log_ratio_not_clamped(*args, **kwargs):
    """k3 bounded at 10, but exp(ref - logp) taken unclamped: where the reference is 100 nats above
    the policy exp overflows to inf, the bound keeps the loss finite, and the gradient is
    0 * inf = NaN."""
    return _loss(*args, **kwargs, clamp_log_ratio=False)


def entropy_detached(*args, **kwargs):
    """The entropy bonus on a detached entropy: the loss has the right value and the right gradient
    with respect to logp, but the bonus never pushes the policy's entropy up."""
    return _loss(*args, **kwargs, entropy_gradient=False)


MISTAKES = {
    "the KL term's sign flipped": kl_sign_flipped,
    "min instead of max": min_instead_of_max,
    "log ratio not masked": log_ratio_not_masked,
    "mean over every position": mean_over_every_position,
    "the k3 not bounded": k3_not_bounded,
    "clip-higher ignored": clip_higher_ignored,
    "the entropy detached": entropy_detached,
    "the k3's log-ratio not clamped": k3_log_ratio_not_clamped,
}
