"""Problem 4's mistakes (PPO's GAE): wrong versions students write, one small function each, in
`MISTAKES[what went wrong]`. Read them after your check of problem 4 passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 4` fails on each. Most share a helper (`_gae`) that writes
the problem once with its rules changeable; each mistake changes one rule. A mistake's docstring
says what it costs.
"""

import torch


def _gae(rewards, values, gamma, lam, last_value=None, decay=None, add_values=True):
    n, adv, running = len(rewards), torch.zeros(len(rewards)), 0.0
    for k in reversed(range(n)):
        nxt = values[k + 1] if k + 1 < n else (values[k] if last_value == "own" else 0.0)
        running = (
            rewards[k] + gamma * nxt - values[k] + (decay if decay is not None else gamma * lam) * running
        )
        adv[k] = running
    return adv, adv + values if add_values else adv.clone()


def last_token_bootstraps_from_its_own_value(rewards, values, gamma, lam):
    """After the last agent token the episode is over (V_n = 0), but V_{n-1} is used as V_n."""
    return _gae(rewards, values, gamma, lam, last_value="own")


def recursion_without_gamma(rewards, values, gamma, lam):
    """A_k = delta_k + lam * A_{k+1}: the discount gamma left out of the recursion."""
    return _gae(rewards, values, gamma, lam, decay=lam)


def returns_without_the_values(rewards, values, gamma, lam):
    """The critic's target G_k = A_k: without + V_k, the critic learns R - V."""
    return _gae(rewards, values, gamma, lam, add_values=False)


def run_forwards(rewards, values, gamma, lam):
    """The recursion run from the first token to the last: each A_k sums the TD errors before k,
    not after it."""
    n, adv, running = len(rewards), torch.zeros(len(rewards)), 0.0
    for k in range(n):
        nxt = values[k + 1] if k + 1 < n else 0.0
        running = rewards[k] + gamma * nxt - values[k] + gamma * lam * running
        adv[k] = running
    return adv, adv + values


def lam_left_out(rewards, values, gamma, lam):
    """A_k = delta_k + gamma * A_{k+1}: lam left out, so every lam is lam = 1."""
    return _gae(rewards, values, gamma, lam, decay=gamma)


def monte_carlo_target(rewards, values, gamma, lam):
    """The critic's target the discounted reward-to-go, not A_k + V_k: the same at lam = 1 only."""
    adv, _ = _gae(rewards, values, gamma, lam)
    ret, running = torch.zeros(len(rewards)), 0.0
    for k in reversed(range(len(rewards))):
        running = rewards[k] + gamma * running
        ret[k] = running
    return adv, ret


def next_value_wraps_around(rewards, values, gamma, lam):
    """V_{k+1} read as values[(k + 1) % n]: the last token bootstraps from the first token's value."""
    n, adv, running = len(rewards), torch.zeros(len(rewards)), 0.0
    for k in reversed(range(n)):
        running = rewards[k] + gamma * values[(k + 1) % n] - values[k] + gamma * lam * running
        adv[k] = running
    return adv, adv + values


MISTAKES = {
    "the last token bootstraps from its own value": last_token_bootstraps_from_its_own_value,
    "gamma left out of the recursion": recursion_without_gamma,
    "returns without the values": returns_without_the_values,
    "the recursion run forwards": run_forwards,
    "lam left out of the recursion": lam_left_out,
    "the critic's target the Monte Carlo return": monte_carlo_target,
    "the next value wraps around": next_value_wraps_around,
}
