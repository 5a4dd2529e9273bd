"""Problem 2: GRPO's group advantages, including groups whose rewards are all equal.

Mirrors: grpo.py, `group_advantages` (GRPO: Shao et al., 2024, DeepSeekMath, section 4.1.2).

The rollouts of one task form a group g. Every trajectory i gets one scalar, later broadcast to
every agent token of every turn of trajectory i:

    A_i = (R_i - mean_{j in g} R_j) / (std_{j in g} R_j + eps)       (use_std=True)
    A_i =  R_i - mean_{j in g} R_j                                    (use_std=False)

- The statistics are per group, never over the whole batch. `std` is torch's default (n - 1).
- A group of one has nothing to compare with: A = 0.
- A group whose rewards are all equal carries no signal and must get A = 0 EXACTLY. BabyAI's
  rewards (1 - 0.9 * steps / budget, e.g. 0.925) are not exact in float32: compute the
  statistics in float64 and return the rewards' dtype.
- `groups` is a tensor of ids or a list of any hashable keys (GiGPO passes (group, state) pairs).

Task: (N,) rewards, N group keys -> (N,) advantages.
Check: python -m exercises.check 2      Train with yours: python -m exercises.check 2 --train
"""

import torch


def group_advantages(rewards: torch.Tensor, groups, eps: float = 1e-6, use_std: bool = True) -> torch.Tensor:
    raise NotImplementedError("problem 2: GRPO's group-normalised advantages (this file's docstring)")
