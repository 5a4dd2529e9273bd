"""Problem 6's mistakes (GiGPO's anchor-state advantages): wrong versions students write, one small
function each, in `MISTAKES[what went wrong]`. Read them after your check of problem 6 passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 6` fails on each. Most share a helper (`_gigpo`) that writes
the problem once with its rules changeable; each mistake changes one rule. A mistake's docstring
says what it costs.
"""

import torch

from algorithm import returns_to_go
from grpo import group_advantages


def _float32_groups(rewards, groups, eps=1e-6, use_std=True):
    """Group-normalised values with the mean and std taken in float32 (where float64 was asked for)."""
    adv = torch.zeros_like(rewards)
    keys = groups.tolist() if torch.is_tensor(groups) else groups
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        if len(idx) > 1:
            r = rewards[idx]
            adv[idx] = (r - r.mean()) / (r.std() + eps) if use_std else r - r.mean()
    return adv


def _gigpo(
    rewards,
    groups,
    anchors,
    omega=1.0,
    gamma=0.95,
    step_norm="std",
    normaliser="exact",
    eps=1e-6,
    key=lambda g, obs: (g, obs),
    discount=True,
    std_everywhere=False,
    dtype=torch.float64,
    normalise=group_advantages,
    forward=False,
    episode_std=None,
):
    from gigpo import ANCHOR_NORMALISERS

    norm, std = ANCHOR_NORMALISERS[normaliser], step_norm == "std"
    ep_std = (std or std_everywhere) if episode_std is None else episode_std
    a_ep = normalise(torch.tensor(rewards, dtype=dtype), groups, eps, ep_std)
    keys, returns = [], []
    for g, r, turns in zip(groups, rewards, anchors):
        keys += [key(g, norm(obs)) for obs in turns]
        rewards_per_turn = [0.0] * (len(turns) - 1) + [r] if discount else [r] * len(turns)
        if forward:  # gamma^t * R at turn t, counted from the first turn
            returns += [r * gamma**t for t in range(len(turns))]
            continue
        returns += returns_to_go(
            torch.tensor(rewards_per_turn, dtype=dtype), gamma if discount else 0.0
        ).tolist()
    a_step = normalise(torch.tensor(returns, dtype=dtype), keys, eps, std)
    out, m = [], 0
    for n, turns in enumerate(anchors):
        out.append([float(a_ep[n] + omega * a_step[m + t]) for t in range(len(turns))])
        m += len(turns)
    return out


def anchors_matched_across_groups(*args, **kwargs):
    """Step groups keyed by the observation alone: turns of two different tasks that show the same
    text are compared with each other."""
    return _gigpo(*args, **kwargs, key=lambda g, obs: obs)


def outcome_on_every_turn(*args, **kwargs):
    """Every turn's step return is the outcome R itself, not discounted from the last turn."""
    return _gigpo(*args, **kwargs, discount=False)


def mean_norm_at_the_step_level_only(*args, **kwargs):
    """step_norm 'mean' drops the std at the step level but keeps it at the episode level."""
    return _gigpo(*args, **kwargs, std_everywhere=True)


def statistics_in_float32_at_both_levels(*args, **kwargs):
    """Rewards, step returns and their group statistics in float32: a group whose eight rewards
    are all 0.925, or a step group whose returns are all 0.95 * 0.925, gets a mean one ulp off,
    divided by a std of the same size, instead of exactly 0."""
    return _gigpo(*args, **kwargs, dtype=torch.float32, normalise=_float32_groups)


def discounted_from_the_first_turn(rewards, groups, anchors, **kwargs):
    """The step return discounted forwards, gamma^t * R at turn t: the first turn gets the most
    credit, the turn that finished the task the least."""
    return _gigpo(rewards, groups, anchors, **kwargs, forward=True)


def omega_on_the_episode_term(rewards, groups, anchors, omega=1.0, **kwargs):
    """A = omega * A^E + A^S: the weight on the wrong term."""
    step = _gigpo(rewards, groups, anchors, omega=1.0, **kwargs)
    episode = _gigpo(rewards, groups, anchors, omega=0.0, **kwargs)
    return [[omega * e + (s - e) for s, e in zip(ss, es)] for ss, es in zip(step, episode)]


def normaliser_ignored(*args, **kwargs):
    """The raw observation as the state, whatever `normaliser` says: ' you see a red ball ' and
    'You see a red ball' are two states under 'whitespace' too."""
    kwargs["normaliser"] = "exact"
    return _gigpo(*args, **kwargs)


def std_at_the_step_level_only(*args, **kwargs):
    """step_norm 'mean' drops the std at the episode level but keeps it at the step level."""
    mean = kwargs.get("step_norm") == "mean"
    return _gigpo(*args, **dict(kwargs, step_norm="std"), episode_std=not mean)


MISTAKES = {
    "anchors matched across groups": anchors_matched_across_groups,
    "the outcome on every turn": outcome_on_every_turn,
    "mean-norm at the step level only": mean_norm_at_the_step_level_only,
    "statistics in float32 at both levels": statistics_in_float32_at_both_levels,
    "discounted from the first turn": discounted_from_the_first_turn,
    "omega on the episode's term": omega_on_the_episode_term,
    "the normaliser ignored": normaliser_ignored,
    "mean-norm at the episode level only": std_at_the_step_level_only,
}
