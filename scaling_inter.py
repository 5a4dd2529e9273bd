"""ScalingInter-RL: the interaction-horizon curriculum (AgentGym-RL, section 4), and an adaptive
variant (the paper's stated future work: choosing when to lengthen the horizon from training).

Where it sits: `train.py` builds the schedule from its flags (`ScheduleConfig`, `from_config`),
asks `schedule.horizon(step, history)` before each rollout and passes it to `agent.rollout`;
`history` is the logged metrics of the steps before. Nothing else depends on it.

Staged (the paper's): the maximum number of agent turns per episode grows in stages,
h1 < h2 < ... < hK: training steps 1..S use h1, steps S+1..2S use h2, and so on; the last stage
holds until the end. Short horizons first keep the variance of the outcome low (exploitation,
stable learning); longer ones later leave room for planning, reflection and backtracking
(exploration). A fixed schedule is the one-stage case. The horizon is a pure function of the step,
so a run resumed from a checkpoint at any step lands in the right stage (the reference
implementation switched one step early after a resume; this one cannot).

Adaptive (this project's): the same ladder h1 < h2 < ..., but a stage ends when training says the
horizon has become the bottleneck rather than after a fixed S steps. After each step, looking only
at the steps of the current stage, with W = `window`:

    lengthen  iff  the stage has >= 2W steps
              and  mean(cut share over its last W steps) >= `cut_share`        (theta)
              and  mean(success, last W) - mean(success, the W before) < `min_gain`  (epsilon)

"cut share" is the fraction of a step's episodes that the horizon ended (not done by the
environment after h turns): a high share says episodes would go on if allowed; the plateau says
the policy has stopped improving within this horizon. Both are needed: a high cut share with
success still rising means the short horizon is still teaching; a plateau with few cut episodes
means more turns would not help. The decision is replayed from the logged history every time,
so it is a pure function of that history and a resumed run (which reads metrics.jsonl back)
makes exactly the decisions of an uninterrupted one.

Reference schedules (rounds / steps per stage): WebArena 8,12,15 / 80; Deep Search 5,8,10 / 100;
TextCraft 10,20,30 / 100; BabyAI 6,13,20 / 100; SciWorld 10,20,30 / 100.
"""

from dataclasses import dataclass

from machinery.flags import flag


@dataclass
class ScheduleConfig:
    """The horizon schedule's flags (train.Config extends them)."""

    rounds: str = flag("3,5", items=int, at_least=1)
    """ScalingInter-RL horizon stages h1,h2,... (one value: a fixed horizon)"""
    steps_per_stage: int = flag(25, at_least=1)
    """training steps per horizon stage"""
    schedule: str = flag("staged", choices=("staged", "adaptive"))
    """horizon schedule over --rounds: staged (every --steps-per-stage
    steps) or adaptive (scaling_inter.py)"""
    adapt_window: int = flag(5, at_least=1)
    """adaptive schedule: W, steps averaged on each side of its plateau test"""
    adapt_cut_share: float = flag(0.5, at_least=0, at_most=1)
    """adaptive schedule: lengthen only when at least this share of episodes hit the horizon"""
    adapt_min_gain: float = 0.02
    """adaptive schedule: success rising by less than this over W steps counts as a plateau"""


def _check_rounds(rounds):
    if not rounds or any(h < 1 for h in rounds):
        raise ValueError(f"rounds must be positive turn counts, got {rounds}")
    if any(a >= b for a, b in zip(rounds, rounds[1:])):
        raise ValueError(f"rounds must increase (h1 < h2 < ...), got {rounds}")


@dataclass(frozen=True)
class Schedule:
    rounds: tuple[int, ...]  # h1 < h2 < ... (one value: a fixed horizon)
    steps_per_stage: int  # S

    def __post_init__(self):
        _check_rounds(self.rounds)
        if self.steps_per_stage < 1:
            raise ValueError("steps_per_stage must be >= 1")

    def stage(self, step: int, history=()) -> int:
        """0-based stage of training step `step` (steps count from 1); `history` is not needed."""
        if step < 1:
            raise ValueError(f"training steps count from 1, got {step}")
        return min((step - 1) // self.steps_per_stage, len(self.rounds) - 1)

    def horizon(self, step: int, history=()) -> int:
        return self.rounds[self.stage(step)]


@dataclass(frozen=True)
class Adaptive:
    rounds: tuple[int, ...]  # h1 < h2 < ...: the same ladder as the staged schedule
    window: int = 5  # W: steps averaged on each side of the plateau test
    cut_share: float = 0.5  # theta: lengthen only if at least this share of episodes hit the horizon
    min_gain: float = 0.02  # epsilon: success rising by less than this over W steps is a plateau

    def __post_init__(self):
        _check_rounds(self.rounds)
        if self.window < 1:
            raise ValueError("window must be >= 1")

    def stage(self, step: int, history=()) -> int:
        """0-based stage for `step`, replayed from `history`: one dict per earlier step (steps
        1..step-1, in order) with `charts/success` and `charts/cut_share`, as train.py logs them;
        under --dynamic-sampling those describe the kept groups only (a reward spread in each), so the
        rule reads `dynamic/success_all` and `dynamic/cut_share_all`, every group rolled out."""
        if step < 1:
            raise ValueError(f"training steps count from 1, got {step}")
        if len(history) < step - 1:
            raise ValueError(f"step {step} needs the {step - 1} earlier steps' metrics, got {len(history)}")
        stage, succ, cut = 0, [], []  # succ, cut: the current stage's steps so far
        for row in history[: step - 1]:
            if "charts/success" not in row:  # a step whose every episode hit an environment error
                continue
            succ.append(row.get("dynamic/success_all", row["charts/success"]))
            cut.append(row.get("dynamic/cut_share_all", row["charts/cut_share"]))
            if stage < len(self.rounds) - 1 and self.lengthen(succ, cut):
                stage, succ, cut = stage + 1, [], []
        return stage

    def lengthen(self, succ: list[float], cut: list[float]) -> bool:
        """The rule, on one stage's per-step training success and cut share (oldest first)."""
        w = self.window
        if len(succ) < 2 * w:
            return False
        mean = lambda xs: sum(xs) / len(xs)
        return mean(cut[-w:]) >= self.cut_share and mean(succ[-w:]) - mean(succ[-2 * w : -w]) < self.min_gain

    def horizon(self, step: int, history=()) -> int:
        return self.rounds[self.stage(step, history)]


def fixed(turns: int) -> Schedule:
    return Schedule(rounds=(turns,), steps_per_stage=1)


def staged(rounds, steps_per_stage: int) -> Schedule:
    return Schedule(rounds=tuple(rounds), steps_per_stage=steps_per_stage)


def adaptive(rounds, window: int = 5, cut_share: float = 0.5, min_gain: float = 0.02) -> Adaptive:
    return Adaptive(rounds=tuple(rounds), window=window, cut_share=cut_share, min_gain=min_gain)


def from_config(cfg: ScheduleConfig):
    """The schedule the flags name: --rounds in stages of --steps-per-stage, or the adaptive one."""
    rounds = [int(h) for h in cfg.rounds.split(",")]
    if cfg.schedule == "adaptive":
        return adaptive(rounds, cfg.adapt_window, cfg.adapt_cut_share, cfg.adapt_min_gain)
    return staged(rounds, cfg.steps_per_stage)
