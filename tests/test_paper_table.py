"""The paper table's figures come from the runs' own files: the baseline is the imitation
checkpoint that scores best on validation; every checkpoint's figure is its evaluation on the same
test episodes; RL's gain over the baseline is paired over test tasks; the valid-reply shares are
counted in the trajectories. A recipe skips the stages whose output exists."""

import json
import os
import shlex
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


@pytest.fixture(autouse=True)
def study(tmp_path, monkeypatch):
    """Each test a fresh study whose records (if it keeps any) go under tmp_path/records, pinned to
    this checkout (no worktree made)."""
    import paper_records

    paper_records.STUDY.__init__()
    monkeypatch.setattr(paper_records, "RECORDS", str(tmp_path / "records"))
    monkeypatch.setattr(paper_records, "pin", lambda records, wanted, runs: ("0" * 40, paper_records.ROOT))
    yield paper_records.STUDY
    paper_records.STUDY.__init__()


def _eval(folder, successes: dict, refused: int = 0, pass_at_k=None):
    """An eval.py output: summary.json and one 1-reply BabyAI episode per (task, success) listed;
    the first `refused` episodes' reply answered with a refusal."""
    os.makedirs(folder)
    episodes = []
    for task, outcomes in successes.items():
        for ok in outcomes:
            answer = '"go to x" is not an available action' if len(episodes) < refused else "You see a wall."
            episodes.append(
                {
                    "task": task,
                    "success": ok,
                    "reward": float(ok),
                    "actions": ["go to x"],
                    "observations": ["start", answer],
                }
            )
    (folder / "trajectories.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    summary = {
        "n_episodes": len(episodes),
        "success_rate": sum(e["success"] for e in episodes) / len(episodes),
    }
    (folder / "summary.json").write_text(json.dumps(summary | {"pass_at_k": pass_at_k or {}}))


def test_the_baseline_is_the_best_imitation_checkpoint_on_val_and_the_gain_is_paired_over_test_tasks(
    tmp_path,
):
    """sft2 (DAgger) is worse on validation than sft, so sft is the baseline even though sft2 is
    better on test; RL's gain is its per-task figure averaged over seeds minus sft's, paired."""
    import paper_table

    d = tmp_path / "babyai"
    _eval(d / "val_sft", {1: [1, 1], 2: [1, 0]}, pass_at_k={"1": 0.75, "8": 1.0})
    _eval(d / "val_sft2", {1: [1, 0], 2: [0, 0]})
    for name in ("sft", "sft2"):
        os.makedirs(d / name / "checkpoint")
    _eval(d / "test_base", {10: [0], 11: [0], 12: [0]})
    _eval(d / "test_sft", {10: [1], 11: [0], 12: [0]}, refused=1)
    _eval(d / "test_sft2", {10: [1], 11: [1], 12: [0]})
    _eval(d / "test_rl_s0", {10: [1], 11: [1], 12: [0]})
    _eval(d / "test_rl_s1", {10: [1], 11: [0], 12: [1]})
    os.makedirs(d / "test_rl_s2")  # unfinished: no summary.json, left out
    (d / "times.json").write_text(json.dumps({"rl_s0": 600, "rl_s1": 1200}))
    assert paper_table.best_imitation(str(d), ["sft", "sft2"], "success") == "sft"
    (line,) = [x for x in paper_table.table(str(tmp_path)).splitlines() if x.startswith("| BabyAI")]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[0] == "BabyAI (3)" and cells[1] == "-" and cells[2] == "0.0"
    assert cells[3] == "**sft 33.3 (75.0)**, sft2 66.7 (25.0)"  # test (val); the best on val in bold
    assert cells[4] == "75.0 -> 100.0"  # the best's pass@1 -> pass@8 on validation
    assert cells[5] == "66.7, 66.7 (mean 66.7 ± 0.0)"
    # per task, RL averaged over seeds minus sft: (1-1, 0.5-0, 0.5-0) -> +33.3, std 0.289 / sqrt(3)
    assert cells[6] == "+33.3 ± 16.7 (3 tasks)"
    # the seeds-aware error, bold past t(2) = 4.3 of them (3 tasks: the task term has 2 dof)
    assert cells[7].startswith("+33.3 ± ") and cells[7].endswith(" (2 seeds, t 4.3)")
    assert cells[8] == cells[9] == "-"  # no self-training yet
    assert cells[10] == "2/3 (0.67) -> 6/6 (1.00)"
    assert cells[11] == "10 min, 20 min"
    assert cells[13] == "-"  # no records: no pinned revision, CPU or hours to show
    assert "TextCraft" not in paper_table.table(str(tmp_path))


def test_a_tie_on_validation_goes_to_the_earlier_checkpoint(tmp_path):
    import paper_table

    for name in ("val_sft", "val_sft2"):
        _eval(tmp_path / name, {1: [1, 0]})
    assert paper_table.best_imitation(str(tmp_path), ["sft", "sft2"], "success") == "sft"


def test_a_stage_whose_output_exists_is_skipped(tmp_path):
    import paper_table

    (tmp_path / "done.json").write_text("{}")
    paper_table.stage(str(tmp_path), "x", "-c 'raise SystemExit(3)'", done=str(tmp_path / "done.json"))
    assert not (tmp_path / "times.json").exists()
    paper_table.stage(str(tmp_path), "y", "-c \"print('ran')\"")
    assert (tmp_path / "y.log").read_text() == "ran\n" and "y" in json.load(open(tmp_path / "times.json"))


def test_dagger_rounds_take_the_next_train_tasks_and_train_on_every_rounds_labels(tmp_path, monkeypatch):
    """Round k runs the last checkpoint on the train split's next slice of tasks; its SFT starts
    from that checkpoint and trains on the demonstrations plus the labels of rounds 1..k (DAgger's
    aggregate); RL starts from the last round's checkpoint."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setitem(
        paper_table.RECIPES, "textcraft", dict(paper_table.RECIPES["textcraft"], dagger=[2, 3])
    )
    monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[1])
    os.makedirs(tmp_path / "textcraft" / "demos")
    (tmp_path / "textcraft" / "demos" / "trajectories.jsonl").write_text("")
    paper_table.recipe("textcraft", str(tmp_path), [0], [])
    cmd = dict(calls)
    d, ids = f"{tmp_path}/textcraft", paper_table.split_ids("textcraft", "depth1-train")
    names = "demos sft dagger_policy dagger sft2 dagger2_policy dagger2 sft3 val_sft val_sft2 val_sft3 "
    names += "rl_s0 val_rl_s0 self1_policy self1 val_self1 self2_policy self2 val_self2 "
    names += "test_sft test_sft2 test_sft3 test_self2 test_rl_s0 test_base"
    assert [n for n, _ in calls] == names.split()
    assert f"--model {d}/sft/checkpoint" in cmd["dagger_policy"]
    assert f"--task-ids {','.join(map(str, ids[:2]))} " in cmd["dagger_policy"]
    assert f"--model {d}/sft2/checkpoint" in cmd["dagger2_policy"]
    assert f"--task-ids {','.join(map(str, ids[2:5]))} " in cmd["dagger2_policy"]
    assert f"--model {d}/sft2/checkpoint" in cmd["sft3"]
    assert (
        f"--data {d}/demos/first.jsonl,{d}/dagger/trajectories.jsonl,{d}/dagger2/trajectories.jsonl"
        in cmd["sft3"]
    )
    # RL from the checkpoint chosen on validation (here sft2), evaluated on validation in training
    assert f"--model {d}/sft2/checkpoint" in cmd["rl_s0"] and "--test-split depth1-val " in cmd["rl_s0"]
    val = "--env textcraft --split depth1-val --limit 25 --n-samples 8 --seed 1 --horizon 5 "
    assert all(f"--model {d}/{n}/checkpoint {val}" in cmd[f"val_{n}"] for n in ("sft", "sft2", "sft3"))
    rl_val = "--env textcraft --split depth1-val --limit 25 --n-samples 4 --seed 1 --horizon 5 "
    assert f"--model {d}/rl_s0/checkpoint {rl_val}" in cmd["val_rl_s0"]
    # every checkpoint of the row on the same 25 x 12 test episodes (RECIPES fixes them in advance)
    test = "--env textcraft --split depth1-test --limit 25 --n-samples 12 --seed 1 --horizon 5 "
    for name, model in [
        ("base", "smollm2"),
        ("sft", f"{d}/sft/checkpoint"),
        ("rl_s0", f"{d}/rl_s0/checkpoint"),
    ]:
        assert f"--model {model} {test}" in cmd[f"test_{name}"]


def test_a_dagger_round_past_the_end_of_its_split_revisits_its_first_tasks(tmp_path, monkeypatch):
    """TextCraft's rounds draw depth-1 goals (75 train tasks): a round that runs past them starts
    again at the first, now with the newer policy, and takes each task at most once."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setitem(
        paper_table.RECIPES, "textcraft", dict(paper_table.RECIPES["textcraft"], dagger=[60, 20, 500])
    )
    monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[0])
    os.makedirs(tmp_path / "textcraft" / "demos")
    (tmp_path / "textcraft" / "demos" / "trajectories.jsonl").write_text("")
    paper_table.recipe("textcraft", str(tmp_path), [], [])
    cmd = dict(calls)
    pool = paper_table.split_ids("textcraft", "depth1-train")
    assert len(pool) == 75 and max(pool) < 125  # the depth-1 goals (envs/tasks.py)
    assert f"--task-ids {','.join(map(str, pool[60:] + pool[:5]))} " in cmd["dagger2_policy"]
    assert f"--task-ids {','.join(map(str, pool[5:] + pool[:5]))} " in cmd["dagger3_policy"]


def test_rl_steps_are_shared_evenly_by_scaling_inter_rls_stages(tmp_path, monkeypatch):
    """`--rl-steps 16` on SciWorld's two-stage horizon (5, then 10 turns): 8 steps a stage."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setitem(paper_table.RECIPES, "sciworld", dict(paper_table.RECIPES["sciworld"]))
    monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[0])
    paper_table.main(["--env", "sciworld", "--rl-steps", "16", "--seeds", "0", "--root", str(tmp_path)])
    assert "--rounds 5,10 --steps-per-stage 8 --steps 16 " in dict(calls)["rl_s0"]
    # the expert's instances (JVMs) 4 at a time, the policy's evaluations 16: 64 took too long to start
    assert "--parallel 4 " in dict(calls)["demos"] and "--parallel 16 " in dict(calls)["val_sft"]


def test_an_evaluation_mostly_lost_to_environment_errors_stops_the_recipe(tmp_path):
    import paper_table

    _eval(tmp_path / "val_sft", {1: [1, 0], 2: [0, 0]})
    paper_table.check_errors(str(tmp_path / "val_sft"))  # no errors: goes on
    summary = json.loads((tmp_path / "val_sft" / "summary.json").read_text())
    (tmp_path / "val_sft" / "summary.json").write_text(json.dumps(summary | {"errors": 1}))
    with pytest.raises(SystemExit, match="1 of 5 episodes hit an environment error"):
        paper_table.check_errors(str(tmp_path / "val_sft"))


def test_a_lever_is_judged_on_validation_paired_over_tasks_before_any_test_episode(tmp_path, monkeypatch):
    """--val-only stops the recipe before the test episodes; --compare pairs RL with the lever
    against RL without it over the val tasks, each task averaged over its samples and the seeds."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[0])
    lever = "--group-size 8 --tasks-per-step 2 --horizon-filter true"
    paper_table.main(["--env", "searchqa", "--rl-steps", "24", "--rl-lr", "5e-4", "--seeds", "0,1",
                      "--val-only", "--root", str(tmp_path), "--rl-args", lever])  # fmt: skip
    assert [n for n, _ in calls][-4:] == ["rl_s0", "val_rl_s0", "rl_s1", "val_rl_s1"]
    assert "--steps 24 " in dict(calls)["rl_s1"] and "--lr 5e-4 " in dict(calls)["rl_s1"]
    assert "--lr 1e-4 " in dict(calls)["sft"]  # the imitation stages keep theirs
    # --rl-args reaches RL's command only, and overrides the recipe's own group (argparse: the last wins)
    import train

    rl = shlex.split(dict(calls)["rl_s1"].split(" --out ")[0])[1:]
    rl[rl.index("--model") + 1] = "tiny"  # the checkpoint is not there: parse the flags only
    cfg = train.parse_args(rl)
    assert (cfg.group_size, cfg.tasks_per_step, cfg.horizon_filter) == (8, 2, True)
    assert all("--horizon-filter" not in c for n, c in calls if not n.startswith("rl_"))

    before, after = tmp_path / "before", tmp_path / "after"
    _eval(before / "babyai" / "val_rl_s0", {1: [1, 0], 2: [0, 0], 3: [1, 1]})
    _eval(before / "babyai" / "val_rl_s1", {1: [0, 0], 2: [0, 0], 3: [1, 1]})
    _eval(after / "babyai" / "val_rl_s0", {1: [1, 1], 2: [1, 0], 3: [1, 1]})
    _eval(after / "babyai" / "test_rl_s0", {9: [0]})  # never read by --compare
    # per task, after - before: (1 - 0.25, 0.5 - 0, 1 - 1) -> mean 0.417, std 0.382 / sqrt(3); the
    # two seeds before differ by no more than their episode noise: the seed term is 0
    line = paper_table.compare("babyai", str(before), str(after))
    expected = f"{before} 41.7 -> {after} 83.3: +41.7 ± 22.0 paired over 3 tasks, both arms' seeds counted"
    assert (
        line
        == f"BabyAI on validation, RL seeds 2 and 1: {expected} (bold past 4.30 SE; over tasks only ± 22.0)"
    )


def test_pick_trains_rl_on_the_tasks_the_baseline_solves_sometimes_not_always(tmp_path, monkeypatch):
    """--pick N: the best imitation checkpoint on the first N rl_train tasks x 8 samples; RL draws
    only the tasks whose episodes neither all succeeded nor all failed (a group on them can carry a
    signal); too few such tasks is a clear error."""
    import paper_table

    calls = []

    def stage(root, name, command, extra=(), done=""):
        calls.append((name, command))
        if name == "pick_sft":  # its evaluation: task 0 always, 5 never, 1, 6, 10, 11 sometimes
            outcomes = {
                0: [1] * 8,
                5: [0] * 8,
                1: [1] + [0] * 7,
                6: [0, 1] * 4,
                10: [1] * 7 + [0],
                11: [0, 1] * 4,
            }
            _eval(tmp_path / "textcraft" / name, outcomes)

    monkeypatch.setattr(paper_table, "stage", stage)
    monkeypatch.setitem(paper_table.RECIPES, "textcraft", dict(paper_table.RECIPES["textcraft"], dagger=[]))
    monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[0])
    paper_table.main(
        ["--env", "textcraft", "--pick", "6", "--seeds", "0", "--val-only", "--root", str(tmp_path)]
    )
    cmd = dict(calls)
    pick = "--task-ids 0,1,2,5,6,7 --n-samples 8 --seed 1 --horizon 5 "  # depth1-train's first 6
    assert f"--model {tmp_path}/textcraft/sft/checkpoint --env textcraft {pick}" in cmd["pick_sft"]
    assert [n for n, _ in calls][-3:] == ["pick_sft", "rl_s0", "val_rl_s0"]
    assert "--train-split depth1-train --train-task-ids 1,6,10,11 --test-split depth1-val " in cmd["rl_s0"]
    _eval(tmp_path / "few", {1: [1, 0], 2: [1, 1], 3: [0, 1], 4: [1, 0]})
    with pytest.raises(SystemExit, match="only 3 tasks solved sometimes and not always, too few"):
        paper_table.informative(str(tmp_path / "few"))


def test_disjoint_demonstrations_and_dagger_labels_never_show_a_task_rl_trains_on(tmp_path, monkeypatch):
    """--disjoint: every third rl_train task goes to the expert (then the train tasks outside
    rl_train), DAgger relabels from those too, and RL draws the other two thirds."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setitem(paper_table.RECIPES, "textcraft", dict(paper_table.RECIPES["textcraft"], dagger=[40]))
    monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[0])
    os.makedirs(tmp_path / "textcraft" / "demos")
    (tmp_path / "textcraft" / "demos" / "trajectories.jsonl").write_text("")
    paper_table.main(
        ["--env", "textcraft", "--disjoint", "--seeds", "0", "--val-only", "--root", str(tmp_path)]
    )
    cmd = dict(calls)
    ids = lambda name, flag: [int(t) for t in cmd[name].split(f"{flag} ")[1].split()[0].split(",")]  # noqa: E731
    demos, dagger, rl = (
        ids("demos", "--task-ids"),
        ids("dagger_policy", "--task-ids"),
        ids("rl_s0", "--train-task-ids"),
    )
    pool = paper_table.split_ids("textcraft", "depth1-train")
    assert "--expert on" in cmd["demos"] and len(demos) == 80  # the recipe's expert episodes
    assert demos[:25] == pool[::3] and min(demos[25:]) >= 125  # then depth-2 goals, in train order
    assert dagger == demos[:40]
    assert rl == [t for t in pool if t not in demos] and len(rl) == 50
    assert not set(rl) & (set(demos) | set(dagger))


def test_an_rl_run_stopped_mid_way_is_resumed_from_its_checkpoint(tmp_path, monkeypatch):
    """RL saves a checkpoint every RL_SAVE_EVERY steps; the recipe, run again, passes --resume to a
    seed whose run left one (no summary.json: stage() runs it) and starts the others afresh."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[0])
    d = tmp_path / "searchqa"
    os.makedirs(d / "rl_s1" / "checkpoint.prev")  # killed between save_checkpoint's renames
    (d / "rl_s1" / "checkpoint.prev" / "state.pt").write_bytes(b"")
    os.makedirs(d / "rl_s2")  # started, but no checkpoint yet
    paper_table.recipe("searchqa", str(tmp_path), [0, 1, 2], [], val_only=True)
    cmd = dict(calls)
    assert all(f"--save-every {paper_table.RL_SAVE_EVERY}" in cmd[f"rl_s{s}"] for s in (0, 1, 2))
    assert cmd["rl_s1"].endswith(f"--out {d}/rl_s1 --resume {d}/rl_s1/checkpoint")
    assert "--resume" not in cmd["rl_s0"] and "--resume" not in cmd["rl_s2"]


def test_any_model_runs_the_same_protocol_with_its_memory_flags_and_its_own_root(tmp_path, monkeypatch):
    """`--model <hub id or folder>`: the same stages (validation choice, paired test, seeds) from that
    base: SFT starts from it and test_base evaluates it; its training commands carry the memory
    plan's flags and SFT a real model's learning rate; every command parses as its entry point's
    flags; the row writes under runs/paper-<model>. The default (smollm2) row is unchanged."""
    import paper_table

    import sft
    import train
    from eval import EvalConfig
    from machinery.flags import parse

    def commands(*argv) -> dict:
        calls = {}
        monkeypatch.setattr(
            paper_table,
            "stage",
            lambda root, name, command, extra=(), done="": calls.setdefault(name, command),
        )
        monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[-1])
        monkeypatch.setattr(paper_table, "check_errors", lambda folder: None)
        monkeypatch.setattr(paper_table, "first_successes", lambda src, dst, n: None)
        monkeypatch.setattr(paper_table, "table", lambda root: root)
        monkeypatch.chdir(tmp_path)
        paper_table.main(["--env", "babyai", "--seeds", "0,1", *argv])
        return calls

    from machinery.gguf_model import resolve_model

    smol = resolve_model("smollm2")  # SmolLM2 by its folder, as a user names any model
    row, default = commands("--model", smol), commands()
    assert row.keys() == default.keys()  # the same stages: val_*, rl_s0, rl_s1, test_* ...
    assert f"sft.py --model {smol} " in row["sft"] and f"eval.py --model {smol} " in row["test_base"]
    for name in ("sft", "sft2", "rl_s0", "rl_s1"):
        assert paper_table.REAL_MODEL_FLAGS in row[name] and paper_table.REAL_MODEL_FLAGS not in default[name]
    assert "--lr 1e-4" in default["sft"] and "--lr" not in row["sft"]  # sft.py's real-model default
    assert "--model smollm2 " in default["sft"] and "eval.py --model smollm2 " in default["test_base"]
    # BabyAI's test: the 300 test tasks from the 300th on (no earlier row saw them), one sample each
    fresh = paper_table.ids_of(paper_table.split_ids("babyai", "test")[300:])
    assert f"--task-ids {fresh} --n-samples 1 " in default["test_base"] and len(fresh.split(",")) == 300
    assert (
        f"runs/paper-{os.path.basename(smol)}/babyai/" in row["rl_s0"]
        and "runs/paper/babyai/" in default["rl_s0"]
    )
    entry = {"sft.py": sft.Config, "train.py": train.Config, "eval.py": EvalConfig}
    for command in row.values():
        script, *argv = command.split()
        argv = [smol if a.endswith("/checkpoint") else a for a in argv]  # (checkpoints not yet written)
        parse(entry[script], argv)  # a bad flag or value exits here


@pytest.mark.parametrize("spread", [0.0, 0.6, 1.0])
def test_the_seeds_aware_error_is_within_10_percent_of_the_true_se_whatever_the_seeds_spread(spread):
    """300 tasks x 3 RL seeds against one baseline run, Bernoulli episodes: each task's logit drawn
    afresh per experiment, each seed's level shifted by N(0, spread) on the logit scale. Over 600
    simulated experiments the true SE is the spread of the paired gain itself; the estimator's
    root mean square is within 10% of it with no spread, a moderate one and a large one (the
    two-level bootstrap it replaced gave 1.15x, 0.85x and 0.81x). The over-tasks error alone sees
    none of the seeds' spread."""
    import numpy as np
    import paper_table

    rng = np.random.default_rng(int(10 * spread))
    gains, squares, over_tasks = [], [], []
    for _ in range(600):
        logit = rng.normal(0.3, 1.5, 300)
        base = (rng.random(300) < 1 / (1 + np.exp(-logit))).astype(float)
        level = logit + 0.5 + rng.normal(0, spread, (3, 1))  # (seeds, tasks)
        runs = (rng.random((3, 300)) < 1 / (1 + np.exp(-level))).astype(float)
        rl, b = [dict(enumerate(r)) for r in runs], dict(enumerate(base))
        gains.append(runs.mean() - base.mean())
        squares.append(paper_table.seeds_aware_se(rl, b) ** 2)
        over_tasks.append(paper_table.paired_gain(rl, b)[1] ** 2)
    true = np.std(gains)
    assert np.sqrt(np.mean(squares)) == pytest.approx(true, rel=0.1)
    if spread >= 0.6:
        assert np.sqrt(np.mean(over_tasks)) < 0.6 * true


def test_self_training_learns_from_the_baselines_own_successes_on_rls_tasks_with_rls_episode_count(
    tmp_path, monkeypatch
):
    """Self-training (rejection-sampling fine-tuning), the cheapest rival of online RL: the best
    imitation checkpoint samples as many episodes as one RL run (steps x tasks per step tasks x
    GROUP samples) on RL's training tasks, SFT trains on its successes; a second round does the same
    from the first round's checkpoint on the next tasks; the better round on validation is tested
    with the rest. A round with no success stops them (nothing of its own to learn from)."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setattr(paper_table, "best_imitation", lambda d, names, metric: names[0])
    monkeypatch.setattr(paper_table, "first_successes", lambda src, dst, n: None)
    paper_table.recipe("babyai", str(tmp_path), [0], [])
    cmd, d = dict(calls), f"{tmp_path}/babyai"
    rl_tasks, n = paper_table.split_ids("babyai", "train"), 24 * paper_table.TASKS_PER_STEP
    assert f"--model {d}/sft/checkpoint " in cmd["self1_policy"] and " --n-samples 4 " in cmd["self1_policy"]
    assert f"--task-ids {','.join(map(str, rl_tasks[:n]))} " in cmd["self1_policy"]
    assert f"--task-ids {','.join(map(str, rl_tasks[n : 2 * n]))} " in cmd["self2_policy"]
    assert f"--model {d}/sft/checkpoint " in cmd["self1"] and f"--data {d}/self1_policy/" in cmd["self1"]
    assert f"--model {d}/self1/checkpoint " in cmd["self2_policy"] and f"--model {d}/self1/" in cmd["self2"]
    assert "test_self1" in cmd and "test_self2" not in cmd  # the one chosen on validation

    _eval(tmp_path / "stop" / "babyai" / "self1_policy", {1: [0, 0]})  # no success: no SFT, no round 2
    calls.clear()
    paper_table.recipe("babyai", str(tmp_path / "stop"), [0], [])
    assert "self1_policy" in dict(calls) and not {"self1", "self2_policy", "test_self1"} & dict(calls).keys()


def test_rl_from_self_training_starts_from_the_round_chosen_on_validation_even_on_a_lever_trial(
    tmp_path, monkeypatch
):
    """--rl-from self (a lever): self-training runs before RL, also with --val-only, and every RL seed
    starts from the self-training round that scores best on validation, not from the imitation
    checkpoint (no round trained: the lever stops); without it, RL starts from the imitation
    checkpoint and self-training follows RL."""
    import paper_table

    calls, recipe = [], paper_table.RECIPES["searchqa"]
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setattr(paper_table, "RECIPES", dict(paper_table.RECIPES))  # main() sets this run's recipe
    d = tmp_path / "searchqa"
    _eval(d / "val_sft", {1: [1, 0], 2: [0, 0]})
    _eval(d / "val_self1", {1: [0, 0], 2: [0, 0]})
    _eval(d / "val_self2", {1: [1, 1], 2: [1, 0]})  # the better round
    _eval(d / "self1_policy", {1: [1, 0]})
    paper_table.main(["--env", "searchqa", "--seeds", "0,1", "--val-only", "--rl-from", "self",
                      "--root", str(tmp_path), "--records", "none"])  # fmt: skip
    names = [n for n, _ in calls]
    assert names.index("val_self2") < names.index("rl_s0")
    assert names[-4:] == ["rl_s0", "val_rl_s0", "rl_s1", "val_rl_s1"]
    for seed in (0, 1):
        assert f"train.py --model {d}/self2/checkpoint " in dict(calls)[f"rl_s{seed}"]
    assert f"--model {d}/sft/checkpoint " in dict(calls)["self1_policy"]  # self-training's own start
    no_success = tmp_path / "none"
    _eval(no_success / "searchqa" / "self1_policy", {1: [0, 0]})  # no self-training: not this lever
    with pytest.raises(SystemExit, match="no success"):
        paper_table.main(["--env", "searchqa", "--val-only", "--rl-from", "self", "--root", str(no_success),
                          "--records", "none"])  # fmt: skip

    calls.clear()
    paper_table.RECIPES["searchqa"] = recipe
    paper_table.main(["--env", "searchqa", "--seeds", "0", "--root", str(tmp_path), "--records", "none"])
    names = [n for n, _ in calls]
    assert f"train.py --model {d}/sft/checkpoint " in dict(calls)["rl_s0"]
    assert names.index("val_rl_s0") < names.index("self1_policy") < names.index("test_self2")


def test_the_table_gives_self_training_chosen_on_validation_and_rl_minus_it_paired(tmp_path):
    """Two self-training rounds: the better on validation (self2) is the column's, and RL minus it is
    paired over the test tasks (RL averaged over seeds per task), its ± counting the seeds."""
    import paper_table

    d = tmp_path / "babyai"
    _eval(d / "val_sft", {1: [1, 0], 2: [0, 0]})
    os.makedirs(d / "sft" / "checkpoint")
    _eval(d / "test_sft", {10: [0], 11: [0], 12: [0]})
    _eval(d / "val_self1", {1: [1, 0], 2: [0, 0]})
    _eval(d / "val_self2", {1: [1, 1], 2: [1, 0]})
    for name in ("self1", "self2"):
        os.makedirs(d / name / "checkpoint")
    _eval(d / "test_self2", {10: [1], 11: [1], 12: [0]})
    _eval(d / "test_rl_s0", {10: [1], 11: [0], 12: [0]})
    _eval(d / "test_rl_s1", {10: [1], 11: [1], 12: [0]})
    (line,) = [x for x in paper_table.table(str(tmp_path)).splitlines() if x.startswith("| BabyAI")]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[8] == "self2 66.7 (75.0)"
    # per task: (1 - 1, 0.5 - 1, 0 - 0) -> -16.7
    assert cells[9].startswith("-16.7 ± ") and cells[9].endswith(" (3 tasks, t 4.3)")


def test_every_stage_leaves_a_record_and_the_table_comes_from_the_records_alone(tmp_path, study):
    """A row that keeps records: each stage's record holds its command, revision, CPU, wall time,
    summary, every sample's outcome by task, the valid-reply count, and a checkpoint's fingerprint;
    with runs/ gone, `--table` on the records gives the very table the output folders gave."""
    import shutil

    import paper_records
    import paper_table

    runs = tmp_path / "runs"
    d = runs / "babyai"
    _eval(d / "val_sft", {1: [1, 1], 2: [1, 0]}, pass_at_k={"1": 0.75, "8": 1.0})
    os.makedirs(d / "sft" / "checkpoint")
    (d / "sft" / "checkpoint" / "model.safetensors").write_bytes(b"weights")
    (d / "sft" / "summary.json").write_text("{}")
    _eval(d / "test_base", {10: [0], 11: [0], 12: [0]})
    _eval(d / "test_sft", {10: [1], 11: [0], 12: [0]}, refused=1)
    _eval(d / "test_rl_s0", {10: [1], 11: [1], 12: [0]})
    _eval(d / "test_rl_s1", {10: [1], 11: [0], 12: [1]})
    (d / "times.json").write_text(json.dumps({"rl_s0": 600, "rl_s1": 1200}))
    from_runs = paper_table.table(str(runs))

    study.records, study.runs, study.revision = str(tmp_path / "records" / "babyai"), str(d), "abc123"
    for name in ("val_sft", "sft", "test_base", "test_sft", "test_rl_s0", "test_rl_s1", "rl_s0", "rl_s1"):
        command = f"eval.py --out {d}/{name}"
        paper_records.stamp(str(d / name), shlex.split(command), "abc123")  # as run() leaves it
        paper_table.stage(str(d), name, command, done=str(d / "times.json"))
    rec = json.load(open(tmp_path / "records" / "babyai" / "test_sft.json"))
    assert rec["command"] == "python eval.py --out <root>/babyai/test_sft" and rec["revision"] == "abc123"
    assert rec["cpu"] == paper_records.cpu() and rec["outcomes"]["success"] == {
        "10": [1.0],
        "11": [0.0],
        "12": [0.0],
    }
    assert rec["valid"] == [2, 3] and rec["summary"]["n_episodes"] == 3
    sft = json.load(open(tmp_path / "records" / "babyai" / "sft.json"))
    assert sft["fingerprint"] == paper_records.fingerprint(str(d / "sft" / "checkpoint"))
    assert json.load(open(tmp_path / "records" / "babyai" / "rl_s1.json"))["seconds"] == 1200

    shutil.rmtree(runs)
    paper_records.STUDY.__init__()
    assert paper_table.table(str(tmp_path / "records")) == from_runs
    # with the row's pin, the row says where it ran: revision, CPU, and the recorded stages' hours
    pin = {"revision": "abc1234def", "cpu": "a 2-core CPU"}
    (tmp_path / "records" / "babyai" / "row.json").write_text(json.dumps(pin))
    lines = paper_table.table(str(tmp_path / "records")).splitlines()
    (line,) = [x for x in lines if x.startswith("| BabyAI")]
    assert line.split("|")[-2].strip() == "abc1234, a 2-core CPU, 0.5 h"  # 600 s + 1200 s


def _script(path, body: str) -> str:
    path.write_text(body)
    return str(path)


def test_a_stage_that_reads_a_checkpoint_gone_from_runs_rebuilds_it_and_checks_its_fingerprint(
    tmp_path, study
):
    """runs/ gone between stretches: a recorded stage is not run again, but a new stage that reads
    its checkpoint rebuilds it first (the same command, at the row's revision) and goes on when the
    weights match the record's fingerprint; when they differ, the row stops with a clear message."""
    import shutil

    import paper_table

    weights = tmp_path / "weights"
    weights.write_bytes(b"w1")
    train = _script(
        tmp_path / "train.py",
        "import os, shutil, sys\nos.makedirs(sys.argv[1] + '/checkpoint')\n"
        f"shutil.copy({str(weights)!r}, sys.argv[1] + '/checkpoint/model.safetensors')\n"
        "open(sys.argv[1] + '/summary.json', 'w').write('{}')\n",
    )
    use = _script(
        tmp_path / "use.py",
        "import json, os, sys\nopen(sys.argv[1] + '/checkpoint/model.safetensors').read()\n"
        "os.makedirs(sys.argv[2])\njson.dump({'n_episodes': 0}, open(sys.argv[2] + '/summary.json', 'w'))\n",
    )
    d = tmp_path / "runs" / "babyai"

    def stretch(*uses):
        paper_table.STUDY.__init__()
        study.records, study.runs = str(tmp_path / "records"), str(d)
        os.makedirs(d, exist_ok=True)
        paper_table.stage(str(d), "sft", f"{train} {d}/sft")
        for name in uses:
            paper_table.stage(str(d), name, f"{use} {d}/sft {d}/{name}")
        return [n for n, _ in study.finished]

    assert stretch("val_sft") == ["sft", "val_sft"]
    shutil.rmtree(tmp_path / "runs")
    assert stretch("val_sft", "test_sft") == ["test_sft"]  # sft rebuilt for it, val_sft not rerun
    assert (d / "sft" / "checkpoint").exists() and not (d / "val_sft").exists()
    shutil.rmtree(tmp_path / "runs")
    weights.write_bytes(b"w2")  # the rebuild no longer gives the recorded weights
    with pytest.raises(SystemExit, match="sft rebuilt at .* differs from its record \\(fingerprint"):
        stretch("val_sft", "test_sft", "test_rl_s0")


def test_a_budget_runs_the_stages_that_fit_and_lists_what_remains(tmp_path, study):
    """--budget: a stage whose estimate (the records' wall times of its kind, else DEFAULT_MINUTES;
    an RL seed with its validation) would end past the budget does not start, nor does any after
    it; the report lists them with the time they need."""
    import time

    import paper_records
    import paper_table

    d = tmp_path / "runs" / "babyai"
    os.makedirs(d)
    study.records, study.runs = str(tmp_path / "records"), str(d)
    study.deadline = time.time() + 10 * 60
    quick = _script(
        tmp_path / "quick.py",
        "import os, sys\nos.makedirs(sys.argv[1])\nopen(sys.argv[1] + '/summary.json', 'w').write('{}')\n",
    )
    for name in ("demos", "rl_s0", "val_rl_s0", "test_base"):
        paper_table.stage(str(d), name, f"{quick} {d}/{name}")
    assert [n for n, _ in study.finished] == ["demos"]
    assert [n for n, _ in study.left] == ["rl_s0", "val_rl_s0", "test_base"]
    assert paper_records.estimate("rl_s0") == 60 * (35 + 5)
    said = paper_records.report()
    assert (
        "finished in this stretch: demos" in said and "left: rl_s0, val_rl_s0, test_base (about 0.9 h" in said
    )


# ---------------------------------------------------------------------------------------------
# Marks that count the seeds (issue 82: 5, 6)


def test_the_t_quantile_matches_the_tables():
    import paper_records

    for p, dof, table in [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 30, 2.042),
                          (0.995, 2, 9.925), (0.975, 1e6, 1.960)]:  # fmt: skip
        assert paper_records.t_quantile(p, dof) == pytest.approx(table, abs=5e-4)
    assert paper_records.t_quantile(0.025, 4) == pytest.approx(-2.776, abs=5e-4)
    assert 4.303 > paper_records.t_quantile(0.975, 2.5) > 2.776  # fractional degrees of freedom
    assert paper_records.betainc(2, 3, 0.4) == pytest.approx(0.5248)  # I_0.4(2, 3), by its polynomial


def test_a_levers_error_counts_both_arms_seeds(tmp_path):
    """--compare: three seeds a side whose levels differ (0.25, 0.5, 0.75 before; 0.5, 0.75, 1.0 with
    the lever) by the same amount on every task. Over tasks alone the +25 has no error at all; with
    each arm's seed term (sigma_seeds^2 / 3 = 0.0625 / 3 each) it is ± 20.4, which no bar passes."""
    import paper_table

    before, after = tmp_path / "before", tmp_path / "after"
    for seed in range(3):
        _eval(
            before / "babyai" / f"val_rl_s{seed}", {t: [1] * (seed + 1) + [0] * (3 - seed) for t in range(4)}
        )
        _eval(
            after / "babyai" / f"val_rl_s{seed}", {t: [1] * (seed + 2) + [0] * (2 - seed) for t in range(4)}
        )
    line = paper_table.compare("babyai", str(before), str(after))
    assert f"{before} 50.0 -> {after} 75.0: +25.0 ± 20.4 paired over 4 tasks" in line
    assert "(bold past 2.78 SE; over tasks only ± 0.0)" in line  # nu = 4: two seed terms of 2 dof each


def _null_trial(rng, tasks: int, samples: int, seeds: int, spread: float, base_seeds: int):
    """One experiment where nothing changed: (arm a, arm b) per-task figures, (runs, tasks). Each
    task's logit ~ N(0.3, 1.5), each seed's level shifted by N(0, spread) on the logit scale; Bernoulli
    episodes. Two arms (a lever against the recipe's RL): both drawn alike. One arm against a fixed
    checkpoint (RL against the best imitation): the checkpoint's per-task probability is RL's mean
    over seed shifts (Gauss-Hermite), so the null holds exactly."""
    import numpy as np

    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    logit = rng.normal(0.3, 1.5, tasks)
    arm = lambda k: rng.binomial(samples, sig(logit + rng.normal(0, spread, (k, 1)))) / samples  # noqa: E731
    if base_seeds:
        return arm(seeds), arm(base_seeds)
    x, w = np.polynomial.hermite_e.hermegauss(20)
    p = (w[:, None] * sig(logit + spread * x[:, None])).sum(0) / w.sum()
    return arm(seeds), (rng.binomial(samples, p) / samples)[None]


@pytest.mark.parametrize(
    "tasks, samples, seeds, spread, base_seeds",
    [
        (32, 4, 3, 0.3, 3),  # a lever on validation, 3 seeds a side (SciWorld's, Deep Search's levers)
        (32, 4, 3, 0.6, 3),
        (32, 4, 3, 1.0, 3),
        (300, 1, 3, 0.3, 0),  # a row on test: 3 RL seeds against the best imitation checkpoint
        (300, 1, 3, 0.6, 0),
    ],
)
def test_a_bold_mark_is_a_5_percent_false_alarm_when_nothing_changed(
    tasks, samples, seeds, spread, base_seeds
):
    """2,000 simulated experiments with no effect: a mark past the t bar (paper_records.bar) fires at
    most 5% of the time, within the simulation's own binomial error (3 sigma: 1.5 points), and at
    least half of that; the old rules do not hold it: 2 seeds-aware SE (8-16%), and for a lever 2 SE
    over tasks only (the old --compare: 27-67%)."""
    import numpy as np
    import paper_records

    rng = np.random.default_rng(round(100 * spread) + tasks)
    trials, new, two_se, tasks_only, satterthwaite = 2000, 0, 0, 0, 0
    for _ in range(trials):
        a, b = _null_trial(rng, tasks, samples, seeds, spread, base_seeds)
        g = paper_records.paired_arrays(a, b)
        new += abs(g.mean) > g.bar * g.se
        two_se += abs(g.mean) > 2 * g.se
        tasks_only += abs(g.mean) > 2 * g.se_tasks
        # for comparison, Satterthwaite's nu over all three parts of SE^2 at once
        parts = [(g.se_tasks**2, tasks - 1)] + [
            (paper_records.seed_term(y), len(y) - 1) for y in (a, b) if len(y) > 1
        ]
        nu = g.se**4 / sum(s**2 / dof for s, dof in parts if s > 0)
        satterthwaite += abs(g.mean) > paper_records.t_quantile(0.975, nu) * g.se
    tolerance = 3 * (0.05 * 0.95 / trials) ** 0.5
    rates = new / trials, two_se / trials, tasks_only / trials, satterthwaite / trials
    print(
        "false alarms, t bar / 2 SE / 2 SE over tasks / Satterthwaite: "
        + " / ".join(f"{r:.3f}" for r in rates)
    )
    assert 0.025 <= rates[0] <= 0.05 + tolerance
    assert rates[1] > 0.05 + tolerance
    if base_seeds:
        assert rates[2] > 0.05 + tolerance


def test_a_gain_past_2_se_but_not_past_its_t_bar_is_not_bold(tmp_path):
    """3 RL seeds that solve the first 1, 4 and 6 of 8 test tasks, against a baseline that solves
    none: +45.8 ± 20.8 counting the seeds is 2.2 SE, bold under the old 2-SE rule; its seeds' spread
    is most of the error, so its bar is 3.7 SE and the mark is plain."""
    import shutil

    import paper_table

    d = tmp_path / "babyai"
    _eval(d / "val_sft", {1: [1, 0]}, pass_at_k={"1": 0.5, "8": 1.0})
    os.makedirs(d / "sft" / "checkpoint")
    _eval(d / "test_sft", {t: [0] for t in range(8)})
    for seed, solved in enumerate((1, 4, 6)):
        _eval(d / f"test_rl_s{seed}", {t: [int(t < solved)] for t in range(8)})
    (line,) = [x for x in paper_table.table(str(tmp_path)).splitlines() if x.startswith("| BabyAI")]
    assert line.split("|")[8].strip() == "+45.8 ± 20.8 (3 seeds, t 3.7)"  # 45.8 > 2 x 20.8, < 3.7 x 20.8
    agree = tmp_path / "agree" / "babyai"  # the same +50 from seeds that agree (4, 4 and 4 of 8)
    shutil.copytree(d, agree)
    for seed in range(3):
        shutil.rmtree(agree / f"test_rl_s{seed}")
        _eval(agree / f"test_rl_s{seed}", {t: [int(t < 4)] for t in range(8)})
    (line,) = [x for x in paper_table.table(str(agree.parent)).splitlines() if x.startswith("| BabyAI")]
    assert line.split("|")[8].strip() == "**+50.0 ± 18.9** (3 seeds, t 2.4)"  # t(7): the tasks' dof


# ---------------------------------------------------------------------------------------------
# Records (issue 82: 9, 10, 11, and machine paths)


def _fake_subprocess(calls: list):
    """paper_table's `subprocess`, whose run() makes a command's --out folder with a summary (an
    evaluation of 4 episodes, half solved) instead of running it, and lists the command."""
    import subprocess
    import types

    def run(args, cwd=None, **kwargs):
        calls.append(args[1:])
        out = args[args.index("--out") + 1]
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump({"n_episodes": 4, "success_rate": 0.5, "config": {"out": out}}, f)

    return types.SimpleNamespace(run=run, STDOUT=subprocess.STDOUT)


def test_a_stage_done_with_another_command_stops_the_row_with_the_difference(tmp_path, study):
    """A recorded stage is skipped only when its record ran the command the recipe would run now
    (--resume aside: a resumed run continues the same one); otherwise the row stops and names the
    words that differ. The same for an output folder found done: its stamp says what made it."""
    import paper_table

    d = tmp_path / "runs" / "babyai"
    os.makedirs(d)
    study.records, study.runs = str(tmp_path / "records"), str(d)
    quick = _script(
        tmp_path / "quick.py",
        "import os, sys\nos.makedirs(sys.argv[1])\nopen(sys.argv[1] + '/summary.json', 'w').write('{}')\n",
    )
    paper_table.stage(str(d), "rl_s0", f"{quick} {d}/rl_s0 --lr 1e-4")
    paper_table.stage(str(d), "rl_s0", f"{quick} {d}/rl_s0 --lr 1e-4 --resume {d}/rl_s0/checkpoint")
    assert [n for n, _ in study.finished] == ["rl_s0"]  # recorded, the same run: skipped
    with pytest.raises(SystemExit, match=r"rl_s0: its record .* ran another command .* -> --algo gigpo"):
        paper_table.stage(str(d), "rl_s0", f"{quick} {d}/rl_s0 --lr 1e-4", extra=["--algo", "gigpo"])
    os.remove(tmp_path / "records" / "rl_s0.json")  # no record: the output folder's stamp decides
    with pytest.raises(SystemExit, match=r"rl_s0/stage.json ran another command .* 1e-4 -> 5e-4"):
        paper_table.stage(str(d), "rl_s0", f"{quick} {d}/rl_s0 --lr 5e-4")


def _row_then_lever(tmp_path, monkeypatch, lever: list[str], prepare=lambda: None):
    """Deep Search's row (pinned at aaa...) through its first RL seed on validation, every command
    faked (`_fake_subprocess`), then `prepare()`, then the lever (pinned at bbb...) in runs/lever
    with records in records/lever; the commands the lever ran."""
    import paper_records
    import paper_table

    calls = []
    monkeypatch.setattr(paper_table, "subprocess", _fake_subprocess(calls))
    monkeypatch.setattr(paper_records, "pin", lambda records, wanted, runs: (wanted, paper_records.ROOT))
    monkeypatch.setattr(paper_table, "RECIPES", dict(paper_table.RECIPES))  # main() sets this run's recipe
    row = ["--env", "searchqa", "--seeds", "0", "--val-only"]  # its records: runs/paper/records
    paper_table.main([*row, "--root", str(tmp_path / "runs" / "paper"), "--pin", "a" * 40])
    prepare()
    calls.clear()
    paper_records.STUDY.__init__()
    lever_root = [
        "--root",
        str(tmp_path / "runs" / "lever"),
        "--records",
        str(tmp_path / "records" / "lever"),
    ]
    paper_table.main([*row, *lever_root, "--pin", "b" * 40, *lever])
    return [c[0] for c in calls]


def test_a_lever_reuses_the_rows_stages_with_the_same_command_and_lists_them_with_their_revision(
    tmp_path, monkeypatch
):
    """--reuse runs/paper: the row's demos, sft and val_sft ran the very commands the lever would,
    so their records are copied unchanged (the row's revision) with their outputs, and reused.json
    lists them; RL with the lever's flag is the lever's own and runs, at the lever's revision."""
    ran = _row_then_lever(tmp_path, monkeypatch, ["--reuse", str(tmp_path / "runs" / "paper"), "--rl-args",
                                                  "--algo gigpo"])  # fmt: skip
    assert ran == ["train.py", "eval.py"]  # rl_s0 and val_rl_s0: nothing of the row ran again
    row, lever = (
        tmp_path / "runs" / "paper" / "records" / "searchqa",
        tmp_path / "records" / "lever" / "searchqa",
    )
    reused = json.load(open(lever / "reused.json"))
    assert sorted(reused) == ["demos", "sft", "val_sft"]
    for name in reused:
        assert (lever / f"{name}.json").read_text() == (row / f"{name}.json").read_text()
        assert reused[name]["revision"] == "a" * 40 and reused[name]["from"].endswith(f"{name}.json")
    assert (tmp_path / "runs" / "lever" / "searchqa" / "sft" / "summary.json").exists()  # outputs copied
    rl = json.load(open(lever / "rl_s0.json"))
    assert rl["revision"] == "b" * 40 and "--algo gigpo" in rl["command"]


def test_a_lever_folder_holding_the_rows_rl_record_stops_instead_of_comparing_rl_with_itself(
    tmp_path, monkeypatch
):
    """The old way of preparing a lever, copying the row's records by hand, copied rl_s0 too: the
    lever then ran no RL and --compare paired the row's RL with itself. Now rl_s0's record ran
    another command than the lever's, and the row stops there, naming the lever's flag."""
    import shutil

    def copy_records():
        shutil.copytree(tmp_path / "runs" / "paper" / "records", tmp_path / "records" / "lever")

    with pytest.raises(SystemExit, match=r"rl_s0: its record .* -> .*--algo gigpo"):
        _row_then_lever(tmp_path, monkeypatch, ["--rl-args", "--algo gigpo"], prepare=copy_records)


def test_copied_stages_keep_the_revision_and_cpu_that_made_them(tmp_path, monkeypatch):
    """A lever prepared by copying the row's output folders (cp -r, no records): the lever records
    each copied stage with the revision its output folder's stamp names (the row's, aaa...), not the
    lever's pin; a folder without a stamp is recorded as of unknown revision. Every record names the
    recipe (the paper_table.py revision) that wrote its command, which the pin does not cover."""
    import shutil

    import paper_records

    def copy_runs():  # cp -r runs/paper/searchqa/{demos,sft,val_sft} runs/lever/searchqa/
        for name in ("demos", "sft", "val_sft"):
            shutil.copytree(
                tmp_path / "runs" / "paper" / "searchqa" / name,
                tmp_path / "runs" / "lever" / "searchqa" / name,
            )
        stamp = tmp_path / "runs" / "lever" / "searchqa" / "val_sft" / "stage.json"
        if stamp.exists():  # a folder made before the runner left stamps
            os.remove(stamp)

    ran = _row_then_lever(tmp_path, monkeypatch, ["--rl-lr", "5e-4"], prepare=copy_runs)
    assert ran == ["train.py", "eval.py"]
    lever = tmp_path / "records" / "lever" / "searchqa"
    records = {n: json.load(open(lever / f"{n}.json")) for n in ("demos", "sft", "val_sft", "rl_s0")}
    assert records["demos"]["revision"] == records["sft"]["revision"] == "a" * 40
    assert records["val_sft"]["revision"] == records["val_sft"]["cpu"] == "unknown"
    assert records["rl_s0"]["revision"] == "b" * 40
    assert records["rl_s0"]["recipe"] == paper_records.recipe_revision() != "unknown"


def test_a_budget_that_ends_before_the_pick_lists_what_remains(tmp_path, capsys):
    """--budget with --pick: when the budget ends before the pick stage, RL's tasks are not known yet;
    the recipe lists the pick and every later stage as left instead of stopping with "only 0 tasks
    solved sometimes"."""
    import paper_table

    paper_table.main(["--env", "textcraft", "--pick", "6", "--seeds", "0", "--val-only",
                      "--root", str(tmp_path), "--budget", "0.1"])  # fmt: skip
    said = capsys.readouterr().out
    assert "finished in this stretch: nothing" in said
    assert (
        "left: demos, sft, dagger_policy, dagger, sft2, val_sft, val_sft2, pick_sft, rl_s0, val_rl_s0" in said
    )


def test_a_record_holds_no_path_of_the_machine_it_ran_on(tmp_path, study):
    """The writer keeps the row's --root as <root>, this checkout's paths relative, any other as
    <abs>/<name>: the command and every field of the summary (train.py's and eval.py's write their
    config, paths included)."""
    import paper_records

    d = tmp_path / "runs" / "babyai"
    _eval(d / "rl_s0", {1: [1]})
    summary = json.loads((d / "rl_s0" / "summary.json").read_text())
    summary["config"] = {
        "out": f"{d}/rl_s0",
        "model": "/models/Qwen2.5-1.5B",
        "data": f"{paper_records.ROOT}/x",
    }
    (d / "rl_s0" / "summary.json").write_text(json.dumps(summary))
    study.records = str(tmp_path / "records")
    paper_records.write_record(
        str(d / "rl_s0"), "rl_s0", ["train.py", "--model", "/models/Qwen2.5-1.5B"], 1.0
    )
    rec = json.load(open(tmp_path / "records" / "rl_s0.json"))
    assert rec["summary"]["config"] == {
        "out": "<root>/babyai/rl_s0",
        "model": "<abs>/Qwen2.5-1.5B",
        "data": "x",
    }
    assert rec["command"] == "python train.py --model <abs>/Qwen2.5-1.5B"


def _strings(x):
    if isinstance(x, dict):
        yield from (s for v in x.values() for s in _strings(v))
    elif isinstance(x, list):
        yield from (s for v in x for s in _strings(v))
    elif isinstance(x, str):
        yield x


def test_no_committed_record_holds_an_absolute_path():
    """Every record under docs/paper-table*/: no string in it names a path from the file system's
    root (a "/" that starts a string or a word)."""
    import glob
    import re

    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    records = glob.glob(os.path.join(docs, "paper-table*", "**", "*.json"), recursive=True)
    assert len(records) > 50
    for path in records:
        for s in _strings(json.load(open(path))):
            assert not re.search(r"(^|[\s=,'\"])/\w", s), (path, s[:120])
