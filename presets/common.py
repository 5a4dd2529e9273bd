"""What every preset shares: the reference's settings that are the same in its ten training
scripts, and the vocabulary a preset is written in.

Where it sits: presets/agentgym_rl.py and presets/scalinginter.py each add an environment's own
settings to `SHARED`; presets/__init__.py names the results. Nothing here runs anything.

Units. The reference (verl, in AgentGym-RL's `examples/train/<recipe>/<env>_train.sh`) counts
`data.train_batch_size` and `actor.ppo_mini_batch_size` in prompts and multiplies both by
`rollout.n` to get trajectories. train.py counts `--tasks-per-step` (prompts) x `--group-size`
(n) trajectories a step, and `--minibatch-size` in trajectories. The reference's
`rollout.max_tokens` is one turn's budget (our `--max-new-tokens`); its `data.max_response_length`
is a whole conversation's after the first prompt (our `--conversation-tokens`).
"""

from typing import NamedTuple


class Setting(NamedTuple):
    """One flag of train.py in a preset: our `value`, and the reference's knob it comes from."""

    value: object
    """the flag's value, in train.py's units"""
    ref: str
    """the reference's name for it (a verl config key, or the script's own variable)"""
    ref_value: object
    """its value in the reference's script, in the reference's units"""
    note: str = ""
    """how the one became the other, where it is not a copy"""

    @property
    def source(self) -> str:
        """What --show-preset prints beside the value."""
        return f"{self.ref} = {self.ref_value}" + (f" ({self.note})" if self.note else "")


SCRIPT = "examples/train/{recipe}/{env}_train.sh"  # in github.com/WooooDyy/AgentGym-RL
EVAL_SCRIPT = "examples/eval/{env}_eval.sh"

# The settings every one of the ten scripts gives alike (or leaves at ppo_trainer.yaml's default).
SHARED = {
    "model": Setting("Qwen/Qwen2.5-7B-Instruct", "agent_model_path", "models/Qwen2.5-7B-Instruct"),
    "algo": Setting("grpo", "algorithm.adv_estimator", "grpo"),
    "lr": Setting(1e-6, "actor_rollout_ref.actor.optim.lr", 1e-6, "constant, no warm-up"),
    "kl_coef": Setting(
        0.001,
        "actor_rollout_ref.actor.kl_loss_coef",
        0.001,
        "use_kl_loss=True, kl_loss_type=low_var_kl: our k3",
    ),
    "clip_ratio": Setting(0.2, "actor_rollout_ref.actor.clip_ratio", 0.2, "ppo_trainer.yaml's default"),
    "entropy_coef": Setting(
        0.001, "actor_rollout_ref.actor.entropy_coeff", 0.001, "ppo_trainer.yaml's default"
    ),
    "max_grad_norm": Setting(1.0, "actor_rollout_ref.actor.grad_clip", 1.0, "ppo_trainer.yaml's default"),
    "temperature": Setting(1.0, "actor_rollout_ref.rollout.temperature", 1.0, "ppo_trainer.yaml's default"),
    "micro_batch_size": Setting(
        1, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 1, "rows per forward/backward: memory only"
    ),
    "gradient_checkpointing": Setting(
        True, "actor_rollout_ref.model.enable_gradient_checkpointing", True, "ppo_trainer.yaml's default"
    ),
    "mixed_precision": Setting(
        "bf16",
        "actor_rollout_ref.rollout.dtype",
        "bfloat16",
        "and FSDP's bf16 param_dtype, fp32 weights kept",
    ),
    "context_turns": Setting(0, "(the rollout handler)", "the whole conversation", "every turn in context"),
    "mask_actions": Setting(False, "(the rollout handler)", "free generation", "no action masking"),
    "save_every": Setting(25, "trainer.save_freq", 25),
}

KL_TYPE = "low_var_kl"
"""actor.kl_loss_type in every script: verl's clamped k3, which is the only KL estimator of this
project (algorithm.k3_kl, clamped as verl clamps it), so it has no flag."""

# The reference's knobs that have no flag here, per preset (their values differ per environment,
# so each preset lists its own; presets/agentgym_rl.py and presets/scalinginter.py fill them in).
NOT_HERE_BUT_THERE = {
    "data.max_prompt_length": "the first prompt's budget (the task's description); ours is never cut",
    "trainer.total_epochs": "epochs over the reference's train file (AgentGym-RL-Data-ID), floor(items / "
    "train_batch_size) steps each; the file is not in the reference's repository, so --steps is set to "
    "every stage's steps instead (stages x steps per stage)",
    "actor_rollout_ref.actor.kl_loss_type": f"{KL_TYPE}, our only estimator (k3, clamped as verl clamps it)",
    "algorithm.kl_ctrl.kl_coef": "0.001, the in-reward KL, which verl skips when use_kl_loss=True (as here)",
    "actor_rollout_ref.rollout.gpu_memory_utilization, max_model_len, tensor_model_parallel_size": "vLLM's; "
    "train.py generates with its own KV-cached loop (agent.py)",
    "(dp_actor's loss, ppo_micro_batch_size_per_gpu 1)": "each micro-batch's loss is a token mean over its "
    "one row, divided by the rows of the minibatch: every trajectory weighs the same. train.py takes one "
    "token mean over the minibatch's agent tokens, so a long trajectory weighs more (algorithm.py's "
    "token-mean)",
    "trainer.n_gpus_per_node": "8 (ppo_trainer.yaml's default, which no script changes): the reference's "
    "steps ran on eight GPUs, its rollouts on vLLM; a preset here runs on one",
    "data.shuffle": "True: the reference walks its train file in a shuffled order, each task once an epoch; "
    "train.py draws --tasks-per-step tasks at random each step",
}

HERE_BUT_NOT_THERE = {
    "--eval-episodes": "evaluation on the first N tasks of this project's test split before and after "
    "training (the reference evaluates separately, with examples/eval/<env>_eval.sh, on AgentEval's tasks, "
    "which are not in this project)",
    "--micro-batch-tokens": "a token cap per forward/backward (rows of 1 here, as the reference's)",
    "--generation-batch-size": "episodes that run a forward at once (vLLM schedules the reference's)",
    "--ref-device, --lora-rank": "memory levers for one GPU; the reference trains every weight with FSDP",
    "--alarm-*, --stop-on-alarm": "alarms on the step's learning signals (machinery/signals.py)",
    "--dynamic-sampling, --overlong-filter, --horizon-filter, --clip-ratio-high": "off, as the reference "
    "has none",
}
