"""Problem 4: PPO's advantages by GAE over one trajectory's agent tokens.

Mirrors: ppo.py, `gae` (GAE: Schulman et al., 2016, eq. 16).

The MDP is the agent's tokens only, a_0 ... a_{n-1} in the order they were sampled (observation
tokens are not steps). The outcome R sits on the last agent token: r_{n-1} = R, all other r_k = 0
(`algorithm.outcome_on_last_token`); V_k is the critic's value before token k.

    delta_k = r_k + gamma * V_{k+1} - V_k          (V_n = 0: after the last agent token, the end)
    A_k     = delta_k + gamma * lam * A_{k+1}      (A_n = 0)
    G_k     = A_k + V_k                            (the critic's target)

With gamma = lam = 1, A_k = R - V_k.

Task: (n,) rewards, (n,) values -> ((n,) advantages, (n,) returns).
Check: python -m exercises.check 4
"""

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float):
    raise NotImplementedError("problem 4: GAE backwards over the agent tokens (this file's docstring)")
