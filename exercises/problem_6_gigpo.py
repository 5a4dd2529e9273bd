"""Problem 6: GiGPO's advantages: the episode's, plus one per turn over anchor states.

Mirrors: gigpo.py, `gigpo_advantages` (and `step_group_ids` beside it; GiGPO: Feng et al., 2025).

Episode level: GRPO over the group g of each trajectory i,
    A^E_i = (R_i - mean_g R) / (std_g R + eps)                  (grpo.group_advantages)
Anchor states: within ONE group, turns taken from the same observation (after the normaliser,
`gigpo.ANCHOR_NORMALISERS[normaliser]`) form a step group; its key is (group, state). Two tasks
that happen to show the same text are different groups.
Step returns, the outcome on the last turn and 0 before it:
    R_{i,t} = gamma^(T_i - 1 - t) * R_i                          (algorithm.returns_to_go)
Step level, within the step group S of turn (i, t) (a singleton step group gets 0):
    A^S_{i,t} = (R_{i,t} - mean_S R) / (std_S R + eps)           (grpo.group_advantages again)
Combined, per turn:  A_{i,t} = A^E_i + omega * A^S_{i,t}.
step_norm "mean" drops the division by the std at BOTH levels.

anchors[i][t] is the observation turn t of trajectory i acted on (one per turn).
Task: return per trajectory, per turn, a list of floats A_{i,t}. You may use grpo.group_advantages
and algorithm.returns_to_go. Check: python -m exercises.check 6
"""


def gigpo_advantages(
    rewards: list[float],
    groups: list[int],
    anchors: list[list[str]],
    omega: float = 1.0,
    gamma: float = 0.95,
    step_norm: str = "std",
    normaliser: str = "exact",
    eps: float = 1e-6,
) -> list[list[float]]:
    raise NotImplementedError("problem 6: GiGPO's per-turn advantages (this file's docstring)")
