"""Problem 4: PPO's advantages by GAE over one trajectory's agent tokens.

Mirrors: ppo.py, `gae` (read it after your check passes). Read first: GAE, Schulman et al., 2016,
eq. 16 (the advantage as a (gamma * lam)-weighted sum of TD errors) and eq. 17-18 (lam 0 and 1).

The MDP is the agent's tokens only, a_0 ... a_{n-1} in the order they were sampled (observation
tokens are not steps). The outcome R sits on the last agent token: r_{n-1} = R, all other r_k = 0;
V_k is the critic's value before token k. Return each
token's advantage A_k and the critic's target G_k (the lambda-return: the value the critic should
have predicted, so that A_k = G_k - V_k).

Worked examples:
    gamma = lam = 1, R = 1, V = [0.1, 0.4, 0.2, 0.6]   ->  A = [0.9, 0.6, 0.8, 0.4], G = [1, 1, 1, 1]
    gamma = 0.9, lam = 1, R = 1, V = [0, 0, 0]         ->  A = G = [0.81, 0.9, 1]
    gamma = 0.9, lam = 0, R = 1, V = [0.5, 0.2, 0.7]   ->  A = [-0.32, 0.43, 0.3]
Properties a right answer has (each one a case of the check):
- The episode is over after the last agent token: nothing is bootstrapped past it.
- With gamma = lam = 1 every token gets R - V_k; with lam = 0, its one-step TD error.
- A zero critic (step 1 of a run) gives A = G: the outcome, times gamma * lam per token back.

Decide: in which direction to run over the tokens, and what the last token's TD error is.

Task: (n,) rewards, (n,) values -> ((n,) advantages, (n,) returns).
Check: python -m exercises.check 4
"""

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float):
    raise NotImplementedError("problem 4: GAE backwards over the agent tokens (this file's docstring)")
