"""Problem 7's mistakes (REINFORCE++'s advantages): wrong versions students write, one small function
each, in `MISTAKES[what went wrong]`. Read them after your check of problem 7 passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 7` fails on each. Most share a helper (`_reinforce_pp`) that
writes the problem once with its rules changeable; each mistake changes one rule. A mistake's
docstring says what it costs.
"""

import torch

from algorithm import global_masked_moments, returns_to_go
from batch import agent_tokens


def _reinforce_pp(
    batch,
    cfg,
    kl_sign=1.0,
    per_row=False,
    outcome_on_row_end=False,
    whiten_everywhere=False,
    in_float32=False,
    eps_on_the_std=False,
    batch_order=False,
):
    ret = torch.zeros_like(batch.loss_mask)  # (B, T)
    kl = cfg.kl_coef if batch.ref_logprobs is not None else 0.0
    tokens = _in_batch_order if batch_order else agent_tokens
    steps = [(tokens(batch, n), batch.rewards[n]) for n in range(len(batch.rewards))]
    if per_row:  # each row its own episode, each with the outcome on its last agent token
        steps = [
            ((torch.full((len(c),), b), c), batch.rewards[batch.traj[b]]) for b, c in _agent_columns(batch)
        ]
    for (b, t), outcome in steps:
        if len(b) == 0:
            continue
        r = torch.zeros(len(b))
        if outcome_on_row_end:  # the outcome on the row's last column (padding, for a short row): lost
            r[-1] = outcome * batch.loss_mask[b[-1], -1]
        else:
            r[-1] = outcome
        if kl:
            r = r - kl_sign * kl * (batch.old_logprobs[b, t] - batch.ref_logprobs[b, t])
        ret[b, t] = returns_to_go(r, cfg.gamma)
    m = torch.ones_like(batch.loss_mask) if whiten_everywhere else batch.loss_mask
    mean, var = global_masked_moments(ret, m)
    if in_float32:  # the same moments, taken in float32
        mean = (ret * m).sum() / m.sum()
        var = (((ret - mean) * m) ** 2).sum() / m.sum()
        batch.returns = ret
        batch.advantages = (ret - mean) * torch.rsqrt(var + cfg.whiten_eps) * batch.loss_mask
        return
    scale = 1 / (var.sqrt() + cfg.whiten_eps) if eps_on_the_std else torch.rsqrt(var + cfg.whiten_eps)
    batch.returns = ret
    batch.advantages = ((ret.double() - mean) * scale).float() * batch.loss_mask


def _agent_columns(batch):
    return [(b, batch.loss_mask[b].nonzero().squeeze(-1)) for b in range(len(batch))]


def _in_batch_order(batch, n):
    """Trajectory n's agent tokens with its rows in the batch's order, not batch.turn's."""
    b, t = [], []
    for r in (batch.traj == n).nonzero().squeeze(-1).tolist():
        cols = batch.loss_mask[r].nonzero().squeeze(-1).tolist()
        b, t = b + [r] * len(cols), t + cols
    return torch.tensor(b, dtype=torch.long), torch.tensor(t, dtype=torch.long)


def kl_added_not_subtracted(batch, cfg, state=None):
    """r_k = +kl_coef * (old_logp - ref_logp): moving away from the reference is rewarded."""
    _reinforce_pp(batch, cfg, kl_sign=-1.0)


def each_row_an_episode(batch, cfg, state=None):
    """One row per turn (context_turns=K), each taken for a whole episode: every turn's last token
    gets the outcome, and no return flows from a later turn to an earlier one."""
    _reinforce_pp(batch, cfg, per_row=True)


def outcome_on_the_rows_last_column(batch, cfg, state=None):
    """The outcome put on the row's last column and then masked: a row shorter than the batch's
    ends in padding there, and its reward vanishes (the reference code's lost reward)."""
    _reinforce_pp(batch, cfg, outcome_on_row_end=True)


def whitened_over_every_position(batch, cfg, state=None):
    """mean and var over all (B, T) positions, the zeros off the agent tokens included."""
    _reinforce_pp(batch, cfg, whiten_everywhere=True)


def eps_added_to_the_std(batch, cfg, state=None):
    """(G - mean) / (std + whiten_eps) instead of / sqrt(var + whiten_eps): the same for a small
    eps, not for a large one."""
    _reinforce_pp(batch, cfg, eps_on_the_std=True)


def whitened_in_float32(batch, cfg, state=None):
    """The moments taken in float32: equal returns of 0.925 get a mean one ulp off, and divided by
    sqrt(0 + whiten_eps) that ulp becomes an advantage far from 0."""
    _reinforce_pp(batch, cfg, in_float32=True)


def rows_in_batch_order(batch, cfg, state=None):
    """A trajectory's rows taken in the order the batch holds them: where a minibatch sampler has
    reordered the rows, the return flows from an earlier turn into a later one."""
    _reinforce_pp(batch, cfg, batch_order=True)


MISTAKES = {
    "the KL added, not subtracted": kl_added_not_subtracted,
    "each row taken for an episode": each_row_an_episode,
    "the outcome on the row's last column": outcome_on_the_rows_last_column,
    "whitened over every position": whitened_over_every_position,
    "whitened in float32": whitened_in_float32,
    "whiten_eps added to the std": eps_added_to_the_std,
    "a trajectory's rows in batch order, not turn order": rows_in_batch_order,
}
