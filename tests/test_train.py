"""The training loop end to end, the horizon schedule, checkpoints, the flags of train.py and eval.py."""

import json
import os
from unittest import mock

import psutil
import pytest
import torch

import config
from config import AgentConfig, set_threads
from scaling_inter import Schedule, fixed, staged
from train import Config, parse_args, train

# --- ScalingInter-RL ---------------------------------------------------------------------------


def test_stage_2_starts_at_step_S_plus_1():
    s = staged([6, 13, 20], steps_per_stage=100)
    assert [s.horizon(t) for t in (1, 100, 101, 200, 201, 10_000)] == [6, 6, 13, 13, 20, 20]


def test_fixed_schedule_is_one_stage():
    assert {fixed(15).horizon(t) for t in range(1, 500)} == {15}


def test_horizon_depends_only_on_the_step_so_a_resume_lands_in_the_right_stage():
    s = staged([5, 8, 10], steps_per_stage=3)
    straight = [s.horizon(t) for t in range(1, 12)]
    for resume_at in range(1, 11):  # a fresh schedule object after a checkpoint at any step
        resumed = [staged([5, 8, 10], 3).horizon(t) for t in range(resume_at + 1, 12)]
        assert resumed == straight[resume_at:]


def test_schedule_rejects_bad_rounds():
    for bad in [(), (5, 5), (8, 5), (0,)]:
        with pytest.raises(ValueError):
            Schedule(bad, 10)


# --- the loop ------------------------------------------------------------------------------------


def small(tmp_path, **kw) -> Config:
    base = dict(
        steps=2,
        tasks_per_step=2,
        group_size=2,
        minibatch_size=2,
        eval_episodes=4,
        rounds="2,3",
        steps_per_stage=1,
        out=str(tmp_path),
        save_every=1,
    )
    base.update(kw)
    return Config(**base)


def servers_running() -> set[int]:
    """This test process's own BabyAI server subprocesses (others on the machine are not ours)."""
    return {
        p.pid for p in psutil.Process().children(recursive=True) if "servers.babyai" in " ".join(p.cmdline())
    }


def test_threads_are_the_idle_cores_for_the_tiny_policy_and_every_core_for_a_real_model():
    before = torch.get_num_threads()
    try:  # --threads 0 on a CPU: the tiny policy takes the idle cores, at most 2
        with mock.patch.object(config, "idle_cores", return_value=1):
            assert set_threads(AgentConfig(), "cpu") == 1
        with mock.patch.object(config, "idle_cores", return_value=6):
            assert set_threads(AgentConfig(), "cpu") == 2 == torch.get_num_threads()
        cores = set_threads(AgentConfig(model="smollm2", threads=0), "cpu")  # torch's own default
        assert cores == config._DEFAULT_THREADS[0] and set_threads(AgentConfig(threads=3), "cpu") == 3
    finally:
        torch.set_num_threads(before)


def test_idle_cores_reads_the_idle_share_of_the_cpu_time():
    # /proc/stat's (all, idle) ticks before and after the sample: half the time idle on 2 cores is one
    # idle core; all of it, two; none, still one (a run always gets a thread)
    with mock.patch.object(config.os, "sched_getaffinity", return_value={0, 1}):
        for ticks, want in [((1000, 450), 1), ((1000, 500), 2), ((1000, 400), 1)]:
            with mock.patch.object(config, "_cpu_times", side_effect=[(900, 400), ticks]):
                assert config.idle_cores(sample_s=0) == want
    total, idle = config._cpu_times()  # the real file: idle time is part of all of it
    assert 0 <= idle <= total


def test_a_short_training_run_completes_and_leaves_no_server(tmp_path):
    before = servers_running()
    profile = []
    # --train-task-ids: the steps draw their tasks from these ids only, not from --train-split
    summary = train(small(tmp_path, train_task_ids="5,7", save_rollouts_every=1), profile=profile)
    for step in (1, 2):
        rows = [json.loads(x) for x in open(tmp_path / "rollouts" / f"step_{step:06d}.jsonl")]
        assert {r["task"] for r in rows} == {5, 7}
    # the profile: one dict per step, its sections inside the step
    assert [p["step"] for p in profile] == [1, 2]
    assert all(p["rollout"] + p["forward_backward"] + p["optimizer"] <= p["total"] for p in profile)
    assert all(p["env"] + p["generate"] <= p["rollout"] for p in profile)
    assert set(summary["eval_before"]) >= {"success_rate", "avg_score", "pass_at_k", "avg_turns"}
    assert set(summary["eval_after"]) == set(summary["eval_before"])
    rows = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2] and [r["horizon"] for r in rows] == [2, 3]
    for key in (
        "charts/reward",
        "charts/success",
        "charts/turns",
        "losses/loss",
        "losses/kl",
        "losses/entropy",
        "losses/clipfrac",
        "charts/tokens_per_s",
        "charts/seconds_per_step",
    ):
        assert key in rows[0]
    assert os.path.exists(tmp_path / "summary.json") and os.path.exists(tmp_path / "checkpoint" / "state.pt")
    assert servers_running() == before  # the server subprocess is gone


# Exact resume (3 steps straight == 2 steps, a kill while saving step 3, then resume): see
# tests/test_faults.py::test_a_kill_while_checkpointing_keeps_the_previous_checkpoint_and_resume_is_exact


def test_cli_flags_cover_the_config():
    cfg = parse_args(
        [
            "--env",
            "babyai",
            "--algo",
            "grpo",
            "--steps",
            "7",
            "--rounds",
            "3,6",
            "--steps-per-stage",
            "4",
            "--seed",
            "3",
            "--out",
            "x",
            "--model",
            "tiny",
        ]
    )
    assert (cfg.steps, cfg.rounds, cfg.steps_per_stage, cfg.seed) == (7, "3,6", 4, 3)
    assert parse_args([]) == Config()  # the flags' defaults are the dataclass's


def test_every_knob_is_a_documented_flag_of_both_entry_points():
    import dataclasses

    from config import field_docs
    from eval import EvalConfig

    for cls in (Config, EvalConfig):
        docs = field_docs(cls)
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{cls.__name__}.{f.name} has no docstring"
    algo_knobs = {
        "clip_ratio",
        "kl_coef",
        "entropy_coef",
        "group_std_eps",
        "gamma",
        "lam",
        "norm_adv",
        "whiten_eps",
        "vf_coef",
        "vf_clip",
        "critic_lr",
    }
    assert algo_knobs <= {f.name for f in dataclasses.fields(Config)}
    cfg = parse_args(["--vf-coef", "0.25", "--vf-clip", "0.1", "--group-std-eps", "1e-3", "--lam", "0.9"])
    assert (cfg.vf_coef, cfg.vf_clip, cfg.group_std_eps, cfg.lam) == (0.25, 0.1, 1e-3, 0.9)


@pytest.mark.parametrize(
    "text,value",
    [
        ("false", False),
        ("False", False),
        ("0", False),
        ("off", False),
        ("no", False),
        ("true", True),
        ("1", True),
        ("on", True),
    ],
)
def test_booleans_parse_safely(text, value):
    assert parse_args(["--norm-adv", text]).norm_adv is value
    assert parse_args(["--mask-actions", text]).mask_actions is value


def test_auto_means_the_models_own_default_and_a_bad_bool_is_an_error():
    assert parse_args(["--mask-actions", "auto", "--context-turns", "auto"]).mask_actions is None
    assert parse_args(["--context-turns", "0"]).context_turns == 0
    assert parse_args([]).max_new_tokens is None
    with pytest.raises(SystemExit):
        parse_args(["--norm-adv", "maybe"])


def test_eval_shares_the_agent_flags():
    from config import parse
    from eval import EvalConfig

    cfg = parse(
        EvalConfig,
        [
            "--max-new-tokens",
            "64",
            "--context-turns",
            "2",
            "--mask-actions",
            "off",
            "--temperature",
            "0.5",
            "--n-samples",
            "3",
        ],
    )
    assert (cfg.max_new_tokens, cfg.context_turns, cfg.mask_actions, cfg.temperature, cfg.n_samples) == (
        64,
        2,
        False,
        0.5,
        3,
    )


def test_flags_override_the_tiny_policys_defaults():
    from config import AgentConfig, load_agent

    default = load_agent(AgentConfig(), "cpu")
    assert (default.mask_actions, default.context_turns, default.max_new_tokens) == (True, 1, 48)
    assert default.is_tiny and default.path.endswith("tiny-babyai-v2")
    custom = load_agent(
        AgentConfig(mask_actions=False, context_turns=0, max_new_tokens=7, temperature=0.5), "cpu"
    )
    assert (custom.mask_actions, custom.context_turns, custom.max_new_tokens, custom.temperature) == (
        False,
        0,
        7,
        0.5,
    )


def test_eval_writes_summary_and_every_trajectory(tmp_path):
    import eval as evaluation

    out = tmp_path / "ev"
    summary = evaluation.main(
        [
            "--model",
            "tiny",
            "--task-ids",
            "1,41,81-82",
            "--n-samples",
            "2",
            "--horizon",
            "3",
            "--out",
            str(out),
        ]
    )
    assert summary["n_tasks"] == 4 and summary["n_episodes"] == 8
    assert summary["tasks"] == "task ids 1,41,81-82 (4 tasks)"
    assert set(summary["pass_at_k"]) == {"1", "2"}
    assert summary["pass_at_k"]["2"] >= summary["pass_at_k"]["1"]
    lines = [json.loads(x) for x in open(out / "trajectories.jsonl")]
    assert len(lines) == 8 and all(len(t["actions"]) == t["turns"] <= 3 for t in lines)
    assert lines[0]["conversation"][0]["role"] == "user" and "Goal:" in lines[0]["conversation"][0]["content"]


def test_pass_at_k_estimator():
    from eval import pass_at_k

    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert abs(pass_at_k(4, 1, 1) - 0.25) < 1e-12 and abs(pass_at_k(4, 1, 2) - 0.5) < 1e-12
