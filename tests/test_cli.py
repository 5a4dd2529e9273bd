"""The command line as a new user meets it: every entry point (train.py, eval.py, view.py,
benchmarks/rollout_profile.py) answers a bad value with ONE line, `<prog>: error: ...`, that names
what was wrong and what is allowed, exit code 2 and no traceback (config.parse, config.flag).
In-process for speed, plus one subprocess per entry point for the whole path from the shell."""

import os
import subprocess
import sys

import pytest

import eval as eval_module
import view
from benchmarks.rollout_profile import ProfileConfig
from config import parse
from train import Config, parse_args

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# flag values that train.py (and rollout_profile.py, its flags) must refuse -> what the line must name
TRAIN_BAD = [
    (["--algo", "foo"], "choose one of grpo, rloo, ppo, reinforce_pp, gigpo"),
    (["--env", "nope"], "choose one of babyai, searchqa, textcraft, sciworld, webarena"),
    (["--train-split", "nope"], "babyai has the splits train, val, test"),
    (["--test-split", "nope"], "babyai has the splits train, val, test"),
    (["--train-task-ids", "3-x"], "expected comma-separated task ids (data_idx) and ranges"),
    (["--train-task-ids", "1,2", "--tasks-per-step", "4"], "2 tasks, fewer than --tasks-per-step 4"),
    (
        ["--env", "textcraft", "--test-split", "depth1-val", "--train-task-ids", "0-10"],
        "[3, 8] are in the held-out split depth1-val",
    ),
    (  # a task of a held-out split other than --test-split is refused too
        ["--env", "textcraft", "--test-split", "depth1-val", "--train-task-ids", "0,1,2,4"],
        "[4] are in the held-out split test",
    ),
    (["--env", "textcraft", "--test-split", "mission-test"], "textcraft has the splits train, val, test"),
    (["--model", "runs/nope/checkpoint"], "no such file or folder (looked for " + os.path.join(ROOT, "runs")),
    (["--model", "./nope.gguf"], "allowed: tiny, smollm2, a .gguf file"),
    (["--resume", "true"], "looked for " + os.path.join(ROOT, "true", "state.pt")),
    (["--group-size", "0"], "--group-size 0: must be at least 1"),
    (["--group-size", "1"], "needs at least 2"),
    (["--algo", "gigpo", "--group-size", "1"], "needs at least 2"),
    (["--steps", "0"], "--steps 0: must be at least 1"),
    (["--tasks-per-step", "-1"], "must be at least 1"),
    (["--epochs", "0"], "must be at least 1"),
    (["--minibatch-size", "0"], "must be at least 1"),
    (["--eval-samples", "0"], "must be at least 1"),
    (["--eval-episodes", "-5"], "must be at least 0"),
    (["--save-every", "0"], "must be at least 1"),
    (["--generation-batch-size", "0"], "must be at least 1"),
    (["--max-new-tokens", "0"], "must be at least 1"),
    (["--temperature", "0"], "must be above 0"),
    (["--gamma", "1.5"], "must be at least 0 and at most 1"),
    (["--rounds", "3,x"], "expected comma-separated integers, each at least 1"),
    (["--rounds", "3,0"], "expected comma-separated integers, each at least 1"),
    (["--rounds", ""], "expected comma-separated integers"),
    (["--schedule", "linear"], "choose one of staged, adaptive"),
    (["--mixed-precision", "fp8"], "choose one of auto, no, fp16, bf16"),
    (["--device", "tpu"], "choose one of auto, cpu, cuda"),
    (["--anchor-normaliser", "x"], "choose one of exact, whitespace, babyai"),
    (["--url", "localhost:36001"], "http:// or https://"),
    (["--steps", "abc"], "invalid int value: 'abc'"),
    (["--max-new-tokens", "many"], "invalid int (or auto) value"),
    (["--mask-actions", "maybe"], "expected true/false"),
    (["--no-such-flag", "1"], "unrecognized arguments: --no-such-flag"),
]

EVAL_BAD = [
    (["--split", "nope"], "babyai has the splits train, val, test"),
    (["--env", "nope"], "choose one of babyai, searchqa"),
    (["--task-ids", "abc"], "expected comma-separated task ids (data_idx) and ranges a-b, e.g. 0-99,200"),
    (["--task-ids", "0-9,x"], "ranges a-b"),
    (["--task-ids=-3"], "ranges a-b"),
    (["--model", "runs/nope/checkpoint"], "no such file or folder"),
    (["--n-samples", "0"], "--n-samples 0: must be at least 1"),
    (["--parallel", "0"], "must be at least 1"),
    (["--limit", "-1"], "must be at least 0"),
    (["--horizon", "-1"], "must be at least 0"),
    (["--sweep-horizons", "1,x"], "expected comma-separated integers, each at least 1"),
    (["--render", "true", "--env", "textcraft"], "only the BabyAI server draws pictures"),
]


def one_line_error(capsys, call, argv) -> str:
    """Run `call(argv)`, which must exit with code 2 and say one line on stderr; returns it."""
    with pytest.raises(SystemExit) as e:
        call(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert ": error: " in lines[0] and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv,allowed", TRAIN_BAD, ids=[" ".join(a) for a, _ in TRAIN_BAD])
def test_train_answers_a_bad_flag_with_one_line_naming_what_is_allowed(capsys, argv, allowed):
    assert allowed in one_line_error(capsys, parse_args, argv)


@pytest.mark.parametrize("argv,allowed", TRAIN_BAD[:12], ids=[" ".join(a) for a, _ in TRAIN_BAD[:12]])
def test_rollout_profile_answers_train_flags_as_train_does(capsys, argv, allowed):
    assert allowed in one_line_error(capsys, lambda a: parse(ProfileConfig, a), argv)


@pytest.mark.parametrize("argv,allowed", EVAL_BAD, ids=[" ".join(a) for a, _ in EVAL_BAD])
def test_eval_answers_a_bad_flag_with_one_line_naming_what_is_allowed(capsys, argv, allowed):
    assert allowed in one_line_error(capsys, eval_module.main, argv)


def test_view_names_the_path_it_looked_for(capsys, tmp_path):
    line = one_line_error(capsys, view.main, [str(tmp_path / "missing")])
    assert f"looked for {tmp_path / 'missing'}" in line and "output folder, or a .jsonl file" in line
    assert "required: inputs" in one_line_error(capsys, view.main, [])


def test_good_values_still_parse():
    cfg = parse_args(
        [
            "--algo",
            "ppo",
            "--group-size",
            "1",
            "--rounds",
            "2,4,8",
            "--schedule",
            "adaptive",
            "--env",
            "textcraft",
            "--train-split",
            "depth1-train",
            "--test-split",
            "depth1-test",
            "--max-new-tokens",
            "auto",
            "--url",
            "http://localhost:1,https://example.org:2",
            "--gamma",
            "0.99",
            "--eval-episodes",
            "0",
            "--model",
            "tiny",
        ]
    )
    got = (cfg.algo, cfg.group_size, cfg.rounds, cfg.max_new_tokens, cfg.eval_episodes)
    assert got == ("ppo", 1, "2,4,8", None, 0)
    assert parse_args([]) == Config()  # the defaults are allowed
    ev = parse(
        eval_module.EvalConfig,
        [
            "--task-ids",
            "0-9,20",
            "--split",
            "nope-ignored-with-task-ids",
            "--sweep-horizons",
            "1,2,4",
            "--n-samples",
            "4",
        ],
    )
    assert eval_module.parse_task_ids(ev.task_ids) == list(range(10)) + [20]
    assert parse(ProfileConfig, ["--group-size", "2"]).steps == 3


def test_a_config_built_in_code_is_checked_as_the_command_line_is():
    with pytest.raises(ValueError, match="--group-size 0: must be at least 1"):
        Config(group_size=0)
    with pytest.raises(ValueError, match="--algo foo: choose one of"):
        Config(algo="foo")


@pytest.mark.parametrize(
    "argv",
    [
        ["train.py", "--group-size", "0"],
        ["eval.py", "--split", "nope"],
        ["view.py", "no/such/run"],
        ["benchmarks/rollout_profile.py", "--algo", "foo"],
    ],
)
def test_each_entry_point_from_the_shell_prints_one_line_and_exits_2(argv):
    r = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(os.path.basename(argv[0]) + ": error: ")
