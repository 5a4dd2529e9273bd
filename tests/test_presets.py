"""Each preset is the reference's run in this project's units: the reference's values are written
out below as a table (read off AgentGym-RL's examples/train/<recipe>/<env>_train.sh and
examples/eval/<env>_eval.sh), and every preset is held to them, units included. A flag on the
command line wins over the preset, --show-preset says where each value came from, and every
preset starts: a full training step of a random tiny Qwen2 against the real environment server
(two for a staged preset, the second in its second stage; WebArena's: one of one turn)."""

import json
import os
import shutil

import pytest
import torch

import algorithm
import train
from envs import ENVS
from presets import PRESETS

# The reference, as its scripts set it. prompts: data.train_batch_size; n: rollout.n; mini:
# ppo_mini_batch_size (prompts); stage: steps_scaling_inter (None: a fixed horizon); max_tokens: one
# turn's; prompt / response: data.max_prompt_length / max_response_length (a whole conversation's);
# eval: the eval script's max_rounds.
# fmt: off
REFERENCE = {  # prompts, n, mini, epochs, rounds, stage, max_tokens, prompt, response, total_epochs, eval
    "agentgym-rl/webarena":   (32, 4, 4, 2, [15]        , None, 512,  750, 14098, 25, 15),
    "agentgym-rl/searchqa":   (32, 4, 8, 2, [5]         , None, 512, 1024,  8192, 20, 30),
    "agentgym-rl/textcraft":  (32, 8, 8, 2, [30]        , None, 512,  512, 10240, 30, 30),
    "agentgym-rl/babyai":     (16, 8, 8, 1, [20]        , None, 200, 1024,  4096, 10, 20),
    "agentgym-rl/sciworld":   (16, 8, 8, 1, [20]        , None, 200, 1024,  4096, 10, 30),
    "scalinginter/webarena":  (32, 4, 4, 2, [8, 12, 15] ,   80, 512,  750, 14098, 25, 15),
    "scalinginter/searchqa":  (32, 4, 8, 2, [5, 8, 10]  ,  100, 512, 1024,  8192, 20, 30),
    "scalinginter/textcraft": (32, 8, 8, 2, [10, 20, 30],  100, 512,  512, 10240, 30, 30),
    "scalinginter/babyai":    (32, 4, 8, 2, [6, 13, 20] ,  100, 512,  512,  8192, 20, 20),
    "scalinginter/sciworld":  (16, 8, 8, 1, [10, 20, 30],  100, 200, 1024,  8192, 10, 30),
}
# fmt: on
EVERY_SCRIPT = dict(
    lr=1e-6,
    kl_loss_coef=0.001,
    kl_loss_type="low_var_kl",
    clip_ratio=0.2,
    entropy_coeff=0.001,
    grad_clip=1.0,
    micro_batch_per_gpu=1,
    temperature=1.0,
    save_freq=25,
)  # fmt: skip


def values(name: str) -> dict:
    return {k: s.value for k, s in PRESETS[name].flags.items()}


def test_there_is_a_preset_for_each_recipe_and_environment_and_no_other():
    assert set(PRESETS) == set(REFERENCE)


@pytest.mark.parametrize("name", list(REFERENCE))
def test_each_preset_is_the_reference_in_our_units(name):
    prompts, n, mini, epochs, rounds, stage, max_tokens, prompt, response, total_epochs, eval_turns = (
        REFERENCE[name]
    )
    v, p = values(name), PRESETS[name]
    assert v["env"] == name.split("/")[1]
    train_tasks = len(ENVS[v["env"]].splits[v.get("train_split", "train")])
    assert v["group_size"] == n and v["tasks_per_step"] == min(prompts, train_tasks)  # WebArena: its 21
    if prompts <= train_tasks:
        assert v["tasks_per_step"] * v["group_size"] == prompts * n  # trajectories a step: prompts x n
    assert v["minibatch_size"] == mini * n  # verl's ppo_mini_batch_size is in prompts, ours in trajectories
    assert v["epochs"] == epochs
    assert [int(h) for h in v["rounds"].split(",")] == rounds
    if stage is None:  # a fixed horizon: one stage for the whole run
        assert len(rounds) == 1 and v["steps_per_stage"] >= v["steps"]
    else:  # every stage gets its steps
        assert v["steps_per_stage"] == stage and v["steps"] == stage * len(rounds)
    assert (
        p.flags["steps"].ref_value == total_epochs
    )  # recorded beside --steps (the train file's size is unknown)
    assert v["max_new_tokens"] == max_tokens  # one turn's budget
    assert (
        v["conversation_tokens"] == p.response_tokens == response
    )  # a conversation's, past the first prompt
    assert p.prompt_tokens == prompt and f"data.max_prompt_length: {prompt}:" in "\n".join(p.notes)  # no flag
    assert v["eval_horizon"] == eval_turns
    assert v["lr"] == EVERY_SCRIPT["lr"] and v["kl_coef"] == EVERY_SCRIPT["kl_loss_coef"]
    assert (
        v["clip_ratio"] == EVERY_SCRIPT["clip_ratio"] and v["entropy_coef"] == EVERY_SCRIPT["entropy_coeff"]
    )
    assert v["max_grad_norm"] == EVERY_SCRIPT["grad_clip"] and v["temperature"] == EVERY_SCRIPT["temperature"]
    assert (
        v["micro_batch_size"] == EVERY_SCRIPT["micro_batch_per_gpu"]
        and v["save_every"] == EVERY_SCRIPT["save_freq"]
    )
    assert v["algo"] == "grpo" and v["context_turns"] == 0 and v["mask_actions"] is False
    assert "kl_loss_type: low_var_kl" in "\n".join(p.notes)


def test_a_fixed_horizon_preset_runs_as_many_steps_as_its_staged_twin():
    for env in ("webarena", "searchqa", "textcraft", "babyai", "sciworld"):
        assert values(f"agentgym-rl/{env}")["steps"] == values(f"scalinginter/{env}")["steps"]


def test_our_kl_is_the_references_low_var_kl():
    """verl's low_var_kl, written out: kl = ref - logp clamped to [-20, 20], exp(kl) - kl - 1
    clamped to [-10, 10]; ours (algorithm.k3_kl) is the only KL estimator, so no flag names it."""
    logp, ref = torch.tensor([[-1.0, -30.0, -0.5]]), torch.tensor([[-1.5, -0.1, -25.0]])
    kl = (ref - logp).clamp(-20, 20)
    torch.testing.assert_close(algorithm.k3_kl(logp, ref), (kl.exp() - kl - 1).clamp(-10, 10))


@pytest.mark.parametrize("name", list(REFERENCE))
def test_train_py_takes_each_preset_and_every_value_reaches_the_config(name):
    cfg = train.parse_args(["--preset", name])
    assert {k: getattr(cfg, k) for k in values(name)} == values(name)


def test_a_flag_on_the_command_line_wins_over_the_preset():
    cfg = train.parse_args(["--preset", "scalinginter/babyai", "--group-size", "2", "--model", "tiny"])
    assert (cfg.group_size, cfg.model, cfg.tasks_per_step, cfg.rounds) == (2, "tiny", 32, "6,13,20")
    assert train.parse_args([]).rounds == "3,5"  # no preset: the dataclass's defaults


def test_show_preset_prints_each_value_and_where_it_came_from(capsys):
    with pytest.raises(SystemExit) as e:
        train.parse_args(
            ["--preset", "scalinginter/textcraft", "--model", "Qwen/Qwen2.5-3B-Instruct", "--show-preset"]
        )
    out = capsys.readouterr().out
    assert e.value.code == 0
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  --")}
    assert "command line (preset: Qwen/Qwen2.5-7B-Instruct)" in lines["--model"]
    assert (
        "preset: actor_rollout_ref.actor.ppo_mini_batch_size = 8 (prompts x n 8 = 64"
        in lines["--minibatch-size"]
    )
    assert "--tasks-per-step 32" in lines["--tasks-per-step"] and "data.train_batch_size = 32" in out
    assert "data.max_response_length = 10240" in lines["--conversation-tokens"]
    assert "data.max_prompt_length: 512" in out and "--seed 0" in out  # a default, listed as such


def test_help_shows_the_presets_values_as_the_defaults(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--preset", "agentgym-rl/sciworld", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "preset: actor_rollout_ref.rollout.max_tokens = 200" in out


def test_an_unknown_preset_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        train.parse_args(["--preset", "scalinginter/chess"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "scalinginter/babyai" in err


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory):
    """A random Qwen2 (1 layer, width 8) with the tiny policy's tokenizer and chat template: the
    architecture's code paths at the least cost a row, since a preset's step has 84 to 256 rows.
    benchmarks/preset_check.py's --cpu builds the same."""
    return benchmark("preset_check").tiny_qwen2(str(tmp_path_factory.mktemp("qwen2")))


IN_FLIGHT = {"sciworld": 2, "webarena": 4}  # the fastest here: resets are CPU-bound on 2 cores


SLOW = {"scalinginter/webarena", "scalinginter/textcraft"}  # over 30 s on 2 cores: `-m slow` (pyproject.toml)
STARTS = [
    pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
    for n in REFERENCE
    if n != "agentgym-rl/webarena"
]


@pytest.mark.parametrize("name", STARTS)  # (agentgym-rl/webarena: its twin's run, the test below)
def test_each_preset_starts(fresh_accelerate, start_server, tiny_qwen2, tmp_path, name):
    """A full step with every flag as the preset sets it, on a scaled-down model: the model is a
    random tiny Qwen2, and the lengths shrink (2 tokens a turn; staged rounds 1,2,3 of one step
    each, and two steps, so the second is in the second stage; a fixed horizon of 2 turns and one
    step), since a random model never ends its reply. The batch, group, minibatch, epochs,
    micro-batches, gradient checkpointing, conversation budget and bf16 are the preset's.
    SciWorld's and WebArena's steps roll out a few episodes at a time (--episodes-in-flight, which
    changes no episode), so that 2 cores hold their simulators and browser pages. WebArena's 84
    resets take about 30 s here, so its start is one step of one turn, which is the same run for
    both recipes (the test below): scalinginter/webarena's runs it for agentgym-rl/webarena too."""
    env = name.split("/")[1]
    if env == "webarena" and not (shutil.which("chromium") or os.environ.get("WEBARENA_CHROMIUM")):
        pytest.skip("needs Chromium (apt-get install -y chromium)")
    server = start_server(f"servers.{env}")
    staged = len(values(name)["rounds"].split(",")) > 1
    horizons = [1, 2] if staged else [2]
    if env == "webarena":
        horizons = [1]
    short = ["--rounds", "1,2,3", "--steps-per-stage", "1"] if staged else ["--rounds", str(horizons[0])]
    small = ["--steps", str(len(horizons)), "--eval-episodes", "0", "--max-new-tokens", "2",
             "--device", "cpu", "--threads", "1"]  # fmt: skip
    small += ["--episodes-in-flight", str(IN_FLIGHT[env])] if env in IN_FLIGHT else []
    cfg = train.parse_args(
        [
            "--preset",
            name,
            "--model",
            tiny_qwen2,
            "--url",
            server.url,
            "--out",
            str(tmp_path / "run"),
            *small,
            *short,
        ]
    )
    assert (cfg.tasks_per_step, cfg.minibatch_size, cfg.mixed_precision) == (
        values(name)["tasks_per_step"], values(name)["minibatch_size"], "bf16")  # fmt: skip
    train.train(cfg)
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [r["horizon"] for r in rows] == horizons
    assert all(r["losses/loss"] == r["losses/loss"] and r["signals/nonfinite_skips"] == 0 for r in rows)
    assert all(r["charts/env_errors"] == 0 for r in rows)  # every episode of the step learned from


def test_webarenas_fixed_horizon_start_is_the_same_run_as_its_staged_twins():
    """WebArena's start runs one step of one turn (its resets are slow here). At one turn the two
    recipes' first steps are one run: every flag equal but the schedule's, which the other
    environments' fixed-horizon starts run. So scalinginter/webarena's start runs for both."""
    common = ["--steps", "1", "--max-new-tokens", "2", "--episodes-in-flight", "4", "--eval-episodes", "0"]
    fixed = train.parse_args(["--preset", "agentgym-rl/webarena", *common, "--rounds", "1"])
    staged = train.parse_args(["--preset", "scalinginter/webarena", *common, "--rounds", "1,2,3"])
    schedule = {"rounds", "steps_per_stage"}
    differ = {k for k in vars(fixed) if getattr(fixed, k) != getattr(staged, k)}
    assert differ == schedule and fixed.rounds == "1" and staged.rounds.split(",")[0] == "1"


GPU_PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "reproduce.md")


def benchmark(name: str):
    """A module of benchmarks/, which imports its neighbours by name."""
    import importlib
    import sys

    folder = os.path.join(os.path.dirname(GPU_PAGE), "..", "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def memory_plan():
    return benchmark("memory_plan")


def page_commands(start: str) -> list[str]:
    return [line for line in open(GPU_PAGE).read().splitlines() if line.startswith(start)]


def test_every_command_on_the_gpu_page_parses_and_changes_only_what_it_names():
    """Paste-ready: each `python train.py --preset` line of docs/reproduce.md is a valid command line, and
    every value it does not name is the preset's."""
    import shlex

    lines = page_commands("python train.py --preset")
    assert len(lines) >= 2 * len(PRESETS)
    for line in lines:
        argv = [a for a in shlex.split(line)[2:] if a != "--show-preset"]
        named = {a[2:].replace("-", "_") for a in argv if a.startswith("--")}
        cfg = train.parse_args(argv)
        assert {k: getattr(cfg, k) for k in values(argv[1]) if k not in named} == {
            k: v for k, v in values(argv[1]).items() if k not in named
        }


def test_the_gpu_pages_commands_are_the_ones_the_plan_fits_on_80_gb():
    """Every 3B and 7B command on the page is memory_plan's, which fits under 90% of 80 GB."""
    mp, page = memory_plan(), page_commands("python train.py --preset")
    for model in ("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct"):
        assert set(mp.preset_commands(model)) <= set(page)
        for preset in PRESETS.values():
            fit = mp.preset_fit(preset, model, 80.0)
            assert fit.fits and max(fit.rollout_gb, fit.update_gb) <= mp.SPARE * 80.0


def test_the_gpu_pages_memory_and_time_tables_are_the_plans_output():
    """Said once: the page's per-preset tables and time estimates are `memory_plan.py --presets`'s,
    cell for cell, and its eval.py line caps the episodes in flight where the run's own fit."""
    mp, page = memory_plan(), open(GPU_PAGE).read()
    for gpu_gb in (80.0, 141.0):
        assert "\n".join(mp.preset_table(gpu_gb)) in page
    assert "\n".join(mp.time_table()) in page
    fit = mp.preset_fit(PRESETS["scalinginter/babyai"], "Qwen/Qwen2.5-3B-Instruct", 80.0)
    assert f"--parallel {fit.in_flight} " in page_commands("python eval.py")[0]
