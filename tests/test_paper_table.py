"""The paper table's figures come from the runs' own files: the SFT column is each RL run's
eval_before, the RL column its eval_after (mean ± standard error over seeds, in points), the
valid-reply shares are counted in their trajectories, and an environment without a finished run
has no row. A recipe skips the stages whose output exists."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def _run(path, before: float, after: float, invalid_after: int):
    """A finished RL run: summary.json and two 2-reply BabyAI episodes per evaluation."""
    for when, bad in (("eval_before", 0), ("eval_after", invalid_after)):
        os.makedirs(path / when)
        episodes = []
        for i in range(2):
            answer = '"go to x" is not an available action' if i < bad else "You see a wall."
            episodes.append({"actions": ["turn left", "go to x"], "observations": ["start", "ok", answer]})
        (path / when / "trajectories.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    summary = {
        w: {"n_tasks": 2, "n_episodes": 2, "success_rate": r}
        for w, r in (("eval_before", before), ("eval_after", after))
    }
    (path / "summary.json").write_text(json.dumps(summary))


def test_the_row_is_the_mean_and_standard_error_of_the_seeds_eval_before_and_after(tmp_path):
    import paper_table

    _run(tmp_path / "babyai" / "rl_s0", before=0.5, after=0.9, invalid_after=1)
    _run(tmp_path / "babyai" / "rl_s1", before=0.6, after=0.7, invalid_after=0)
    os.makedirs(tmp_path / "babyai" / "rl_s2")  # unfinished: no summary.json, left out
    (tmp_path / "babyai" / "times.json").write_text(json.dumps({"rl_s0": 600, "rl_s1": 1200}))
    os.makedirs(tmp_path / "babyai" / "base")  # the base model, on fewer tasks
    (tmp_path / "babyai" / "base" / "summary.json").write_text(
        json.dumps({"n_episodes": 1, "success_rate": 0.0})
    )
    text = paper_table.table(str(tmp_path))
    (line,) = [x for x in text.splitlines() if x.startswith("| BabyAI")]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[0] == "BabyAI (2)" and cells[1] == "-" and cells[2] == "0.0 (n=1)"
    assert cells[3] == "55.0 ± 5.0"  # SFT: eval_before 50 and 60
    assert cells[4] == "**80.0 ± 10.0**"  # RL: eval_after 90 and 70
    assert cells[5] == "25.0 ± 15.0"  # gains 40 and 10
    assert cells[6] == "8/8 (1.00) -> 7/8 (0.88)"
    assert cells[7] == "10 min, 20 min"
    assert "TextCraft" not in text


def test_a_wide_evaluation_is_a_second_row_of_the_same_checkpoints(tmp_path):
    """sft_wide/ and rl_s<seed>_wide/ (eval.py outputs) give a row under the environment's: the SFT
    checkpoint's figure, the RL checkpoints' mean ± standard error and their gains over it; the
    wide folders are not RL runs."""
    import paper_table

    d = tmp_path / "textcraft"
    _run(d / "rl_s0", before=0.5, after=0.5, invalid_after=0)
    _run(d / "rl_s1", before=0.5, after=0.5, invalid_after=0)
    for name, rate, bad in (("sft_wide", 0.57, 1), ("rl_s0_wide", 0.65, 0), ("rl_s1_wide", 0.67, 2)):
        os.makedirs(d / name)
        s = {"n_tasks": 25, "n_episodes": 100, "success_rate": rate}
        (d / name / "summary.json").write_text(json.dumps(s))
        episodes = [  # two 2-reply episodes; `bad` replies answered with a TextCraft refusal
            {
                "actions": ["get 1 x", "craft 1 y using 1 x"],
                "observations": ["goal", "Got 1 x.", "Crafted 1 y."],
            }
            for _ in range(2)
        ]
        for i in range(bad):
            episodes[i]["observations"][2] = "Wrong ingredients: no recipe for y uses 1 x."
        (d / name / "trajectories.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    text = paper_table.table(str(tmp_path))
    first, wide = [x for x in text.splitlines() if x.startswith("| TextCraft")]
    assert first.startswith("| TextCraft (2) |") and "| **50.0 ± 0.0** |" in first  # the RL runs' row
    cells = [c.strip() for c in wide.split("|")[1:-1]]
    assert cells[0] == "TextCraft (the same checkpoints, 100 episodes)"
    assert cells[3:7] == ["57.0", "**66.0 ± 1.0**", "9.0 ± 1.0", "3/4 (0.75) -> 6/8 (0.75)"]
    os.remove(d / "rl_s1_wide" / "summary.json")  # a seed's wide evaluation not run: no second row
    assert len([x for x in paper_table.table(str(tmp_path)).splitlines() if x.startswith("| TextCraft")]) == 1


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
    os.makedirs(tmp_path / "textcraft" / "demos")
    (tmp_path / "textcraft" / "demos" / "trajectories.jsonl").write_text("")
    paper_table.recipe("textcraft", str(tmp_path), [0], [])
    cmd = dict(calls)
    d, ids = f"{tmp_path}/textcraft", paper_table.split_ids("textcraft", "depth1-train")
    names = "demos base sft dagger_policy dagger sft2 dagger2_policy dagger2 sft3 rl_s0 sft_wide rl_s0_wide"
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
    assert f"--model {d}/sft3/checkpoint" in cmd["rl_s0"]
    # the wide evaluation: the RL start and the RL checkpoint on the same 25 x 4 test episodes
    wide = "--env textcraft --split depth1-test --limit 25 --n-samples 4 --seed 1 --horizon 5 "
    assert f"--model {d}/sft3/checkpoint {wide}" in cmd["sft_wide"]
    assert f"--model {d}/rl_s0/checkpoint {wide}" in cmd["rl_s0_wide"]


def test_a_dagger_round_past_the_end_of_its_split_revisits_its_first_tasks(tmp_path, monkeypatch):
    """TextCraft's rounds draw depth-1 goals (100 train tasks): a round that runs past them starts
    again at the first, now with the newer policy, and takes each task at most once."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setitem(
        paper_table.RECIPES, "textcraft", dict(paper_table.RECIPES["textcraft"], dagger=[90, 20, 500])
    )
    os.makedirs(tmp_path / "textcraft" / "demos")
    (tmp_path / "textcraft" / "demos" / "trajectories.jsonl").write_text("")
    paper_table.recipe("textcraft", str(tmp_path), [], [])
    cmd = dict(calls)
    pool = paper_table.split_ids("textcraft", "depth1-train")
    assert len(pool) == 100 and max(pool) < 125  # the depth-1 goals (envs.py)
    assert f"--task-ids {','.join(map(str, pool[90:] + pool[:10]))} " in cmd["dagger2_policy"]
    assert f"--task-ids {','.join(map(str, pool[10:] + pool[:10]))} " in cmd["dagger3_policy"]


def test_rl_steps_are_shared_evenly_by_scaling_inter_rls_stages(tmp_path, monkeypatch):
    """`--rl-steps 16` on SciWorld's two-stage horizon (5, then 10 turns): 8 steps a stage."""
    import paper_table

    calls = []
    monkeypatch.setattr(
        paper_table, "stage", lambda root, name, command, extra=(), done="": calls.append((name, command))
    )
    monkeypatch.setitem(paper_table.RECIPES, "sciworld", dict(paper_table.RECIPES["sciworld"]))
    paper_table.main(["--env", "sciworld", "--rl-steps", "16", "--seeds", "0", "--root", str(tmp_path)])
    assert "--rounds 5,10 --steps-per-stage 8 --steps 16 " in dict(calls)["rl_s0"]
