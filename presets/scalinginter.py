"""ScalingInter-RL's presets: the horizon grows in stages (paper, section 4), as the reference's
`examples/train/ScalingInter-RL/<env>_train.sh` sets it for each of the five environments.

Where it sits: presets/__init__.py names these `scalinginter/<env>`; machinery/flags.py's `parse`
takes their values as train.py's defaults. Each `Setting` is our flag's value (train.py's units)
beside the reference's knob and value (its units): tests/test_presets.py holds them to the
reference's scripts. Every stage gets its steps: `--steps` = stages x `--steps-per-stage`.
"""

from presets.common import SHARED, Setting

MINI = "actor_rollout_ref.actor.ppo_mini_batch_size"
STAGE = "algorithm.rounds_ctrl.steps_scaling_inter"
ROUNDS = "algorithm.rounds_ctrl.rounds (type scaling_inter_stepwise)"
EPOCHS = "trainer.total_epochs"
RESPONSE = "data.max_response_length"
WHOLE = "a conversation's tokens after the first prompt"
WHY_STEPS = "epochs over a train file of unknown size; here 3 stages x steps per stage"

WEBARENA = {
    **SHARED,
    "env": Setting("webarena", "task_name", "webarena"),
    # our offline WebArena has 21 train tasks (the paper's has 812): a step takes every one of them
    "tasks_per_step": Setting(21, "data.train_batch_size", 32, "prompts; here all 21 offline train tasks"),
    "group_size": Setting(4, "actor_rollout_ref.rollout.n", 4),
    "minibatch_size": Setting(16, MINI, 4, "prompts x n 4 = 16 trajectories"),
    "epochs": Setting(2, "actor_rollout_ref.actor.ppo_epochs", 2),
    "rounds": Setting("8,12,15", ROUNDS, "[8,12,15]"),
    "steps_per_stage": Setting(80, STAGE, 80),
    "steps": Setting(240, EPOCHS, 25, WHY_STEPS),
    "max_new_tokens": Setting(512, "actor_rollout_ref.rollout.max_tokens", 512, "one turn's tokens"),
    "conversation_tokens": Setting(14098, RESPONSE, 14098, WHOLE),
    "eval_horizon": Setting(15, "max_rounds (examples/eval/webarena_eval.sh)", 15),
}

SEARCHQA = {
    **SHARED,
    "env": Setting("searchqa", "task_name", "searchqa"),
    "tasks_per_step": Setting(32, "data.train_batch_size", 32, "prompts"),
    "group_size": Setting(4, "actor_rollout_ref.rollout.n", 4),
    "minibatch_size": Setting(32, MINI, 8, "prompts x n 4 = 32 trajectories"),
    "epochs": Setting(2, "actor_rollout_ref.actor.ppo_epochs", 2),
    "rounds": Setting("5,8,10", ROUNDS, "[5,8,10]"),
    "steps_per_stage": Setting(100, STAGE, 100),
    "steps": Setting(300, EPOCHS, 20, WHY_STEPS),
    "max_new_tokens": Setting(512, "actor_rollout_ref.rollout.max_tokens", 512, "one turn's tokens"),
    "conversation_tokens": Setting(8192, RESPONSE, 8192, WHOLE),
    "eval_horizon": Setting(30, "max_rounds (examples/eval/searchqa_eval.sh)", 30),
}

TEXTCRAFT = {
    **SHARED,
    "env": Setting("textcraft", "task_name", "textcraft"),
    "tasks_per_step": Setting(32, "data.train_batch_size", 32, "prompts"),
    "group_size": Setting(8, "actor_rollout_ref.rollout.n", 8),
    "minibatch_size": Setting(64, MINI, 8, "prompts x n 8 = 64 trajectories"),
    "epochs": Setting(2, "actor_rollout_ref.actor.ppo_epochs", 2),
    "rounds": Setting("10,20,30", ROUNDS, "[10,20,30]"),
    "steps_per_stage": Setting(100, STAGE, 100),
    "steps": Setting(300, EPOCHS, 30, WHY_STEPS),
    "max_new_tokens": Setting(512, "actor_rollout_ref.rollout.max_tokens", 512, "one turn's tokens"),
    "conversation_tokens": Setting(10240, RESPONSE, 10240, WHOLE),
    "eval_horizon": Setting(30, "max_rounds (examples/eval/textcraft_eval.sh)", 30),
}

BABYAI = {
    **SHARED,
    "env": Setting("babyai", "task_name", "babyai"),
    "train_split": Setting(
        "all-train", "data.train_file", "AgentItemId/babyai_train.json", "AgentGym's 40 levels"
    ),
    "test_split": Setting(
        "all-test",
        "data.path (examples/eval/babyai_eval.sh)",
        "AgentEval/babyai",
        "not the same tasks: AgentEval's test set is not in this project; here seeds 10000-10009 of "
        "each of AgentGym's 40 levels (400 tasks), the first --eval-episodes of them",
    ),
    "tasks_per_step": Setting(32, "data.train_batch_size", 32, "prompts"),
    "group_size": Setting(4, "actor_rollout_ref.rollout.n", 4),
    "minibatch_size": Setting(32, MINI, 8, "prompts x n 4 = 32 trajectories"),
    "epochs": Setting(2, "actor_rollout_ref.actor.ppo_epochs", 2),
    "rounds": Setting("6,13,20", ROUNDS, "[6,13,20]"),
    "steps_per_stage": Setting(100, STAGE, 100),
    "steps": Setting(300, EPOCHS, 20, WHY_STEPS),
    "max_new_tokens": Setting(512, "actor_rollout_ref.rollout.max_tokens", 512, "one turn's tokens"),
    "conversation_tokens": Setting(8192, RESPONSE, 8192, WHOLE),
    "eval_horizon": Setting(20, "max_rounds (examples/eval/babyai_eval.sh)", 20),
}

SCIWORLD = {
    **SHARED,
    "env": Setting("sciworld", "task_name", "sciworld"),
    "tasks_per_step": Setting(16, "data.train_batch_size", 16, "prompts"),
    "group_size": Setting(8, "actor_rollout_ref.rollout.n", 8),
    "minibatch_size": Setting(64, MINI, 8, "prompts x n 8 = 64 trajectories"),
    "epochs": Setting(1, "actor_rollout_ref.actor.ppo_epochs", 1),
    "rounds": Setting("10,20,30", ROUNDS, "[10,20,30]"),
    "steps_per_stage": Setting(100, STAGE, 100),
    "steps": Setting(300, EPOCHS, 10, WHY_STEPS),
    "max_new_tokens": Setting(200, "actor_rollout_ref.rollout.max_tokens", 200, "one turn's tokens"),
    "conversation_tokens": Setting(8192, RESPONSE, 8192, WHOLE),
    "eval_horizon": Setting(30, "max_rounds (examples/eval/sciworld_eval.sh)", 30),
}

# data.max_prompt_length (no flag here: the first prompt is never cut), data.max_response_length
BUDGETS = {
    "webarena": (750, 14098),
    "searchqa": (1024, 8192),
    "textcraft": (512, 10240),
    "babyai": (512, 8192),
    "sciworld": (1024, 8192),
}

PRESETS = {
    "webarena": WEBARENA,
    "searchqa": SEARCHQA,
    "textcraft": TEXTCRAFT,
    "babyai": BABYAI,
    "sciworld": SCIWORLD,
}
