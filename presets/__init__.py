"""Presets: the paper's training runs as data, one per recipe and environment, each value a flag of
train.py in its own units, with the reference's knob and value beside it.

    python train.py --preset scalinginter/babyai --model Qwen/Qwen2.5-3B-Instruct
    python train.py --preset agentgym-rl/textcraft --show-preset     # every flag, and where it came from

Where it sits: train.py hands `PRESETS` to machinery/flags.py's `parse`, which reads `--preset
NAME` and takes the preset's values as the defaults, so a flag on the command line wins over the
preset, and the preset over the dataclass's default. `--show-preset` (or `--preset NAME --help`)
prints each flag's value and its source. The data is in presets/scalinginter.py (staged horizon,
`examples/train/ScalingInter-RL/<env>_train.sh`) and presets/agentgym_rl.py (fixed horizon,
`examples/train/AgentGym-RL/<env>_train.sh`); the settings all ten share, and the knobs that have
no counterpart on the other side, are in presets/common.py. docs/reproduce.md lists them for a reader;
tests/test_presets.py holds every preset to the reference's scripts, units included.
"""

from dataclasses import dataclass

from presets import agentgym_rl, scalinginter
from presets.common import EVAL_SCRIPT, HERE_BUT_NOT_THERE, NOT_HERE_BUT_THERE, SCRIPT, Setting

__all__ = ["PRESETS", "Preset", "Setting"]


@dataclass
class Preset:
    """One recipe on one environment: what machinery/flags.py's `parse` reads."""

    name: str  # recipe/env, e.g. scalinginter/babyai
    script: str  # the reference's training script it copies
    flags: dict[str, Setting]  # train.py's field name -> our value and the reference's
    prompt_tokens: int  # data.max_prompt_length: the first prompt's budget (no flag here)
    response_tokens: int  # data.max_response_length: a conversation's budget (its --conversation-tokens)

    @property
    def notes(self) -> list[str]:
        """The lines --show-preset prints under the flags: what has no counterpart either way."""
        there = {
            **NOT_HERE_BUT_THERE,
            "data.max_prompt_length": f"{self.prompt_tokens}: "
            + NOT_HERE_BUT_THERE["data.max_prompt_length"],
        }
        return (
            [f"from {self.script} (github.com/WooooDyy/AgentGym-RL) and {EVAL_SCRIPT.format(env=self.env)}"]
            + ["the reference's knobs with no flag here:"]
            + [f"  {k}: {v}" for k, v in there.items()]
            + ["our flags with no knob there:"]
            + [f"  {k}: {v}" for k, v in HERE_BUT_NOT_THERE.items()]
        )

    @property
    def env(self) -> str:
        return self.flags["env"].value

    @property
    def tokens_per_episode(self) -> int:
        """The longest row a preset trains on: the reference's prompt budget, its conversation budget
        (--conversation-tokens), and one reply that starts at the budget's edge (--max-new-tokens)."""
        return self.prompt_tokens + self.response_tokens + self.flags["max_new_tokens"].value


def _presets() -> dict[str, Preset]:
    out = {}
    for recipe, folder, module in (
        ("agentgym-rl", "AgentGym-RL", agentgym_rl),
        ("scalinginter", "ScalingInter-RL", scalinginter),
    ):
        for env, flags in module.PRESETS.items():
            script = SCRIPT.format(recipe=folder, env=env)
            out[f"{recipe}/{env}"] = Preset(f"{recipe}/{env}", script, flags, *module.BUDGETS[env])
    return out


PRESETS = _presets()
