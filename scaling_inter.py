"""ScalingInter-RL: the interaction-horizon curriculum (AgentGym-RL, section 4).

Where it sits: `train.py` asks `horizon(step)` before each rollout and passes it to
`agent.rollout(max_turns=...)`. Nothing else depends on it.

The maximum number of agent turns per episode grows in stages, h1 < h2 < ... < hK: training steps
1..S use h1, steps S+1..2S use h2, and so on; the last stage holds until the end. Short horizons
first keep the variance of the outcome low (exploitation, stable learning); longer ones later
leave room for planning, reflection and backtracking (exploration). A fixed schedule is the
one-stage case. The horizon is a pure function of the step, so a run resumed from a checkpoint
at any step lands in the right stage (the reference implementation switched one step early after
a resume; this one cannot).

Reference schedules (rounds / steps per stage): WebArena 8,12,15 / 80; Deep Search 5,8,10 / 100;
TextCraft 10,20,30 / 100; BabyAI 6,13,20 / 100; SciWorld 10,20,30 / 100.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    rounds: tuple[int, ...]  # h1 < h2 < ... (one value: a fixed horizon)
    steps_per_stage: int  # S

    def __post_init__(self):
        if not self.rounds or any(h < 1 for h in self.rounds):
            raise ValueError(f"rounds must be positive turn counts, got {self.rounds}")
        if any(a >= b for a, b in zip(self.rounds, self.rounds[1:])):
            raise ValueError(f"rounds must increase (h1 < h2 < ...), got {self.rounds}")
        if self.steps_per_stage < 1:
            raise ValueError("steps_per_stage must be >= 1")

    def stage(self, step: int) -> int:
        """0-based stage of training step `step` (steps count from 1)."""
        if step < 1:
            raise ValueError(f"training steps count from 1, got {step}")
        return min((step - 1) // self.steps_per_stage, len(self.rounds) - 1)

    def horizon(self, step: int) -> int:
        return self.rounds[self.stage(step)]


def fixed(turns: int) -> Schedule:
    return Schedule(rounds=(turns,), steps_per_stage=1)


def staged(rounds, steps_per_stage: int) -> Schedule:
    return Schedule(rounds=tuple(rounds), steps_per_stage=steps_per_stage)
