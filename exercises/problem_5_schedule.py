"""Problem 5: the ScalingInter-RL staged horizon: which stage a training step is in.

Mirrors: scaling_inter.py, `Schedule.stage` and `Schedule.horizon`, built by `staged(rounds, S)`
(read them after your check passes). Read first: AgentGym-RL, ScalingInter-RL (the horizon grows
in stages as training goes on).

The allowed number of agent turns grows in stages with horizons rounds = (h_1, h_2, ..., h_K),
each stage S training steps long; the last stage holds until the end. Training steps count from 1.

Worked example, rounds (3, 5) and S = 25: step 10 is in stage 0 (0-based), horizon 3; step 40 in
stage 1, horizon 5; step 1000 in stage 1 too (the last stage holds), horizon 5.
Properties a right answer has (each one a case of the check):
- Every stage but the last holds exactly S steps, counted from step 1.
- A run of one stage (rounds (4,)) has horizon 4 at every step, step 500 included.
- With S = 1 each step is its own stage until the last.
- The stage is a pure function of the step: a run resumed from a checkpoint at step 37 lands in
  the stage it left.

Decide: which stage steps S and S + 1 are in; the arithmetic that maps a step to its stage, with
steps counted from 1 and stages from 0.

Task: return (stage, horizon) of training step `step` (>= 1).
Check: python -m exercises.check 5
"""


def stage_and_horizon(step: int, rounds: tuple[int, ...], steps_per_stage: int) -> tuple[int, int]:
    raise NotImplementedError("problem 5: the stage of a training step (this file's docstring)")
