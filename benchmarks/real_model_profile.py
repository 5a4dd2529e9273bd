"""Where a real model's RL step goes on a CPU: SmolLM2-135M, LoRA, the whole conversation.

    python benchmarks/real_model_profile.py                  # the step below: 4 x 4, 4 turns, 48 tokens
    python benchmarks/real_model_profile.py --steps 1 --tasks-per-step 2 --rounds 2   # a quick look
    python benchmarks/real_model_profile.py --threads 2      # every train.py flag works here

It is `benchmarks/rollout_profile.py`'s profile mode (it runs `train.train()` itself, with
`machinery/timing.py`'s sections) with docs/studies/speed_smollm2.md's command as the defaults:

    python train.py --model smollm2 --mask-actions off --context-turns 0 --max-new-tokens 48 \
      --tasks-per-step 4 --group-size 4 --minibatch-size 16 --micro-batch-size 8 --lora-rank 16 \
      --kl-coef 0 --lr 1e-4 --rounds 4 --steps 2 --eval-episodes 0

and, after rollout_profile's table, what train.py logged per step: seconds, generation tokens/s,
update tokens/s and peak memory (RSS). The sections: prefill (each turn's new tokens through the
model), decode (one forward per new token), env (the BabyAI server's round trips), reference (the
frozen model's log-probs; skipped when --kl-coef is 0), forward_backward, optimizer.
"""

import json
import os
import sys
import tempfile
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.rollout_profile import ProfileConfig, profile_training  # noqa: E402
from config import parse  # noqa: E402


@dataclass
class RealModelConfig(ProfileConfig):
    """rollout_profile's flags with docs/studies/speed_smollm2.md's command as the defaults."""

    model: str = "smollm2"
    """the policy (train.py's --model)"""
    mask_actions: bool | None = False
    """free text: no action masking"""
    context_turns: int | None = 0
    """the whole conversation"""
    max_new_tokens: int | None = 48
    """per-turn generation limit"""
    tasks_per_step: int = 4
    """distinct tasks per step"""
    group_size: int = 4
    """rollouts per task"""
    minibatch_size: int = 16
    """trajectories per minibatch"""
    micro_batch_size: int = 8
    """rows per forward/backward at most"""
    lora_rank: int = 16
    """LoRA adapters of this rank"""
    kl_coef: float = 0.0
    """no reference model"""
    lr: float = 1e-4
    """learning rate"""
    rounds: str = "4"
    """a fixed horizon of 4 turns"""
    steps: int = 2
    """training steps to profile"""


def main(cfg: RealModelConfig):
    with tempfile.TemporaryDirectory() as tmp:
        cfg.out = cfg.out or tmp
        profile_training(cfg)
        rows = [json.loads(line) for line in open(os.path.join(cfg.out, "metrics.jsonl"))]
    print("\nper step, as train.py logged it")
    for r in rows:
        print(
            f"  step {r['step']}: {r['charts/seconds_per_step']:.1f} s, generation "
            f"{r['charts/tokens_per_s']:.1f} tokens/s, "
            f"update {r['perf/update_tokens_per_s']:.1f} tokens/s, "
            f"peak {r['perf/peak_memory_gb']:.2f} GB"
        )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main(parse(RealModelConfig, description=__doc__.split("\n")[0]))
