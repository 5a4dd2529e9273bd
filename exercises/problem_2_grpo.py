"""Problem 2: GRPO's group advantages, including groups whose rewards are all equal.

Mirrors: grpo.py, `group_advantages` (read it after your check passes). Read first: GRPO, Shao et
al., 2024 (DeepSeekMath), section 4.1.2, "outcome supervision", and its equation for A_i.

The rollouts of one task form a group. Every trajectory gets one scalar, its outcome reward
normalised within its group (later broadcast to every agent token of every turn it took):
centred on the group's mean and, with use_std=True, divided by the group's standard deviation
plus eps (eps added to the std, not under a square root); with use_std=False only centred.

Worked examples, one group each:
    rewards [1, 0, 0, 0]                 -> [1.5, -0.5, -0.5, -0.5]     (use_std=True)
    rewards [1, 0, 0, 0]                 -> [0.75, -0.25, -0.25, -0.25] (use_std=False)
    rewards [1, 1] and [0, 0, 0]         -> all 0
Properties a right answer has (each one a case of the check):
- The statistics are per group, never over the whole batch; the groups may interleave.
- A group of one has nothing to compare with: 0.
- A flat group (every reward equal) gets exactly 0, to 1e-5, whatever the rewards: eight BabyAI
  rewards of 0.925 (1 - 0.9 * steps / budget) included. 0.925 is not exact in float32: check
  yours on that group before you trust it.
- The result has the rewards' shape and dtype.
- `groups` is a tensor of ids or a list of any hashable keys (GiGPO passes (group, state) pairs).

Decide: which standard deviation the first example implies (there are two in common use), and how
to get an exact 0 for a flat group.

Task: (N,) rewards, N group keys -> (N,) advantages.
Check: python -m exercises.check 2      Train with yours: python -m exercises.check 2 --train
"""

import torch


def group_advantages(rewards: torch.Tensor, groups, eps: float = 1e-6, use_std: bool = True) -> torch.Tensor:
    raise NotImplementedError("problem 2: GRPO's group-normalised advantages (this file's docstring)")
