"""Problem 5's mistakes (the ScalingInter-RL stage of a step): wrong versions students write, one small
function each, in `MISTAKES[what went wrong]`. Read them after your check of problem 5 passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 5` fails on each. A mistake's docstring says what it costs.
"""


def one_step_early(step, rounds, steps_per_stage):
    """step // S: step S already in stage 2 (the reference implementation's switch after resume)."""
    stage = min(step // steps_per_stage, len(rounds) - 1)
    return stage, rounds[stage]


def one_stage_late(step, rounds, steps_per_stage):
    """ceil(step / S) as the 0-based stage: counts stages from 1, so every step sits a stage late."""
    stage = min(-(-step // steps_per_stage), len(rounds) - 1)
    return stage, rounds[stage]


def last_stage_not_held(step, rounds, steps_per_stage):
    """No min(..., K - 1): past the last stage there is no horizon (an IndexError)."""
    stage = (step - 1) // steps_per_stage
    return stage, rounds[stage]


MISTAKES = {
    "one step early (step // S)": one_step_early,
    "one stage late (stages counted from 1)": one_stage_late,
    "the last stage not held": last_stage_not_held,
}
