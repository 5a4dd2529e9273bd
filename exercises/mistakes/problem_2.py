"""Problem 2's mistakes (GRPO's group advantages): wrong versions students write, one small function
each, in `MISTAKES[what went wrong]`. Read them after your check of problem 2 passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 2` fails on each. Most share a helper (`_divided`) that
writes the problem once with its rules changeable; each mistake changes one rule. A mistake's
docstring says what it costs.
"""

import warnings

import torch

from grpo import group_advantages


def std_over_the_batch(rewards, groups, eps=1e-6, use_std=True):
    """The group's mean, but the std of the whole batch."""
    adv = group_advantages(rewards, groups, eps, use_std=False)
    return adv / (rewards.double().std() + eps).to(rewards.dtype) if use_std else adv


def statistics_in_float32(rewards, groups, eps=1e-6, use_std=True):
    """Right, except the mean and std are float32: a group of eight rewards of 0.925 gets a mean
    one ulp off, divided by a std of the same size, and |A| = 0.056 instead of 0."""
    adv = torch.zeros_like(rewards)
    keys = groups.tolist() if torch.is_tensor(groups) else groups
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        if len(idx) > 1:
            r = rewards[idx]
            adv[idx] = (r - r.mean()) / (r.std() + eps) if use_std else r - r.mean()
    return adv


def _divided(rewards, groups, eps, use_std, spread):
    """The group-centred rewards divided, in each group of two or more, by `spread(its rewards)`."""
    adv = group_advantages(rewards, groups, eps, use_std=False).double()
    keys = groups.tolist() if torch.is_tensor(groups) else groups
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        if use_std and len(idx) > 1:
            adv[idx] = adv[idx] / spread(rewards[idx].double())
    return adv.to(rewards.dtype)


def population_std(rewards, groups, eps=1e-6, use_std=True):
    """Divides by the std over n (numpy's default) instead of n - 1 (torch's, DeepSeekMath's)."""
    return _divided(rewards, groups, eps, use_std, lambda r: r.std(unbiased=False) + eps)


def eps_under_the_square_root(rewards, groups, eps=1e-6, use_std=True):
    """sqrt(var + eps) instead of std + eps: the same for a small eps, not for a large one."""
    return _divided(rewards, groups, eps, use_std, lambda r: (r.var() + eps).sqrt())


def _keys(groups):
    return groups.tolist() if torch.is_tensor(groups) else list(groups)


def group_of_one_not_special(rewards, groups, eps=1e-6, use_std=True):
    """Every group normalised alike, a group of one too: its sample std (n - 1 = 0) is NaN, and so
    is its advantage, which then spreads NaN through the loss."""
    adv, keys = torch.zeros_like(rewards, dtype=torch.float64), _keys(groups)
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        r = rewards[idx].double()
        with warnings.catch_warnings():  # (torch warns of the std of one value, then answers NaN)
            warnings.simplefilter("ignore")
            adv[idx] = (r - r.mean()) / (r.std() + eps) if use_std else r - r.mean()
    return adv.to(rewards.dtype)


def groups_as_consecutive_blocks(rewards, groups, eps=1e-6, use_std=True):
    """The batch cut into consecutive blocks of the group size, as if each group's rollouts sat side
    by side: interleaved groups are normalised with another task's rollouts."""
    keys = _keys(groups)
    size = len(keys) // len(set(keys))
    blocks = [i // size for i in range(len(keys))]
    return group_advantages(rewards, torch.tensor(blocks), eps, use_std)


def use_std_ignored(rewards, groups, eps=1e-6, use_std=True):
    """Always divided by the std: Dr. GRPO's mean-only variant (use_std=False) is never reached."""
    return group_advantages(rewards, groups, eps, use_std=True)


def the_batch_mean_subtracted(rewards, groups, eps=1e-6, use_std=True):
    """The batch's mean subtracted and the group's std divided by: an easy task's group gets a
    positive advantage on every rollout, its failures included."""
    adv = group_advantages(rewards, groups, eps, use_std)
    keys = _keys(groups)
    out = (rewards.double() - rewards.double().mean()).clone()
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        r = rewards[idx].double()
        if len(idx) < 2:
            out[idx] = 0.0
        elif use_std:
            out[idx] = out[idx] / (r.std() + eps)
    return out.to(adv.dtype)


MISTAKES = {
    "std over the batch instead of the group": std_over_the_batch,
    "statistics in float32": statistics_in_float32,
    "population std (n, not n - 1)": population_std,
    "eps under the square root": eps_under_the_square_root,
    "a group of one normalised like the others": group_of_one_not_special,
    "groups taken as consecutive blocks": groups_as_consecutive_blocks,
    "use_std ignored": use_std_ignored,
    "the batch's mean subtracted": the_batch_mean_subtracted,
}
