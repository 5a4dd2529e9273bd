"""Problem 5: the ScalingInter-RL staged horizon: which stage a training step is in.

Mirrors: scaling_inter.py, `Schedule.stage` and `Schedule.horizon` (built by `staged(rounds, S)`;
AgentGym-RL, ScalingInter-RL).

The allowed number of agent turns grows in stages h_1 < h_2 < ... < h_K. Training steps count
from 1: steps 1..S use h_1, steps S+1..2S use h_2, and so on; the last stage holds until the end:

    stage(step) = min((step - 1) // S, K - 1)          (0-based)
    horizon(step) = rounds[stage(step)]

The stage is a pure function of the step, so a run resumed from a checkpoint at any step lands
in the right stage.

Task: return (stage, horizon) of training step `step` (>= 1).
Check: python -m exercises.check 5
"""


def stage_and_horizon(step: int, rounds: tuple[int, ...], steps_per_stage: int) -> tuple[int, int]:
    raise NotImplementedError("problem 5: the stage of a training step (this file's docstring)")
