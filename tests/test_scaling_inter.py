"""The adaptive ScalingInter schedule: its decisions on a synthetic log, its purity (so --resume
reproduces it), its plumbing through train.py, and eval's test-time sweep over max turns."""

import json

import pytest

from scaling_inter import adaptive, staged


def log(successes, cuts):
    return [{"charts/success": s, "charts/cut_share": c} for s, c in zip(successes, cuts)]


def horizons(schedule, history):
    """The horizon of every step 1..len(history)+1, each computed from the steps before it."""
    return [schedule.horizon(t, history[: t - 1]) for t in range(1, len(history) + 2)]


def test_lengthens_when_many_episodes_are_cut_and_success_has_stopped_rising():
    s = adaptive([3, 5, 8], window=2, cut_share=0.5, min_gain=0.05)
    # steps 1-4: flat success, most episodes cut -> after step 4 (2W steps) the horizon grows
    hist = log([0.3, 0.3, 0.3, 0.3], [0.8] * 4)
    assert horizons(s, hist) == [3, 3, 3, 3, 5]


def test_stays_while_success_is_still_rising():
    s = adaptive([3, 5, 8], window=2, cut_share=0.5, min_gain=0.05)
    hist = log([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [0.9] * 8)  # +0.2 per window: still learning
    assert set(horizons(s, hist)) == {3}


def test_stays_when_few_episodes_are_cut():
    s = adaptive([3, 5, 8], window=2, cut_share=0.5, min_gain=0.05)
    hist = log([0.5] * 8, [0.2] * 8)  # a plateau, but episodes end on their own: more turns won't help
    assert set(horizons(s, hist)) == {3}


def test_each_stage_needs_its_own_2W_steps_and_the_last_rung_holds():
    s = adaptive([3, 5, 8], window=2, cut_share=0.5, min_gain=0.05)
    hist = log([0.3] * 14, [0.9] * 14)  # always plateaued and cut
    assert horizons(s, hist) == [3] * 4 + [5] * 4 + [8] * 7


def test_a_rise_then_plateau_switches_exactly_when_the_plateau_fills_the_window():
    s = adaptive([2, 4], window=2, cut_share=0.5, min_gain=0.05)
    hist = log([0.1, 0.3, 0.5, 0.7, 0.7, 0.7], [0.9] * 6)
    # after step 4: last two 0.6 vs 0.2 (rising); after 5: 0.7 vs 0.4; after 6: 0.7 vs 0.6 (+0.1);
    assert set(horizons(s, hist)) == {2}
    hist = log([0.1, 0.3, 0.5, 0.7, 0.7, 0.7, 0.7], [0.9] * 7)  # after 7: 0.7 vs 0.7 -> lengthen
    assert horizons(s, hist) == [2] * 7 + [4]


def test_under_dynamic_sampling_the_rule_reads_every_group_rolled_out_not_the_kept_ones():
    """--dynamic-sampling keeps only groups with a reward spread, so charts/success sits near 1/2
    while the policy improves: read alone, it is a plateau at once. The rule reads
    dynamic/success_all and dynamic/cut_share_all (every episode rolled out) instead."""
    s = adaptive([3, 5], window=2, cut_share=0.5, min_gain=0.05)
    rising = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
    hist = [
        {
            "charts/success": 0.5,
            "charts/cut_share": 0.8,
            "dynamic/success_all": a,
            "dynamic/cut_share_all": 0.8,
        }
        for a in rising
    ]
    assert set(horizons(s, hist)) == {3}  # still learning over every group: no lengthening
    plateau = [{**row, "dynamic/success_all": 0.6} for row in hist]
    assert horizons(s, plateau)[-1] == 5  # flat over every group and cut: lengthen


def test_decisions_depend_only_on_the_logged_history_so_a_resume_reproduces_them():
    hist = log(
        [0.1, 0.3, 0.3, 0.31, 0.3, 0.5, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7],
        [0.9, 0.8, 0.7, 0.9, 0.6, 0.6, 0.9, 0.9, 0.9, 0.4, 0.9, 0.9],
    )
    straight = horizons(adaptive([3, 5, 8], window=2), hist)
    assert len(set(straight)) > 1  # the log does make it switch
    for resume_at in range(1, len(hist)):  # a fresh schedule object that sees only the log so far
        fresh = adaptive([3, 5, 8], window=2)
        assert [fresh.horizon(t, hist[: t - 1]) for t in range(resume_at + 1, len(hist) + 2)] == straight[
            resume_at:
        ]
    with pytest.raises(ValueError):  # a step without its history is refused, never guessed
        adaptive([3, 5]).horizon(5, hist[:2])


def test_staged_ignores_history():
    assert staged([3, 5], 2).horizon(3, log([0.0] * 2, [1.0] * 2)) == 5


# --- through train.py ------------------------------------------------------------------------------


def test_train_logs_cut_share_and_a_resumed_adaptive_run_repeats_the_straight_one(tmp_path):
    from train import Config, train

    # cut_share 0 and min_gain 1: the rule fires as soon as a stage has 2W = 2 steps
    kw = dict(
        steps=4,
        tasks_per_step=2,
        group_size=2,
        minibatch_size=4,
        eval_episodes=0,
        rounds="1,2",
        schedule="adaptive",
        adapt_window=1,
        adapt_cut_share=0.0,
        adapt_min_gain=1.0,
        save_every=1,
    )
    a, b = tmp_path / "a", tmp_path / "b"
    train(Config(out=str(a), **kw))
    train(Config(out=str(b), **{**kw, "steps": 3}))
    train(Config(out=str(b), resume=str(b / "checkpoint"), **kw))
    ra = [json.loads(x) for x in open(a / "metrics.jsonl")]
    rb = [json.loads(x) for x in open(b / "metrics.jsonl")]
    assert [r["horizon"] for r in ra] == [1, 1, 2, 2] == [r["horizon"] for r in rb]
    for r in ra[:2]:  # at horizon 1 every episode the env did not end (BabyAI ends one on success) was cut
        assert r["charts/cut_share"] == pytest.approx(1.0 - r["charts/success"])
    assert ra[3]["charts/reward"] == rb[3]["charts/reward"]


def test_sweep_horizons_caps_every_episode_at_each_limit(tmp_path):
    import eval as evaluation

    rows = evaluation.main(
        ["--model", "tiny", "--task-ids", "9,49,89,13", "--sweep-horizons", "1,3", "--out", str(tmp_path)]
    )
    assert [r["horizon"] for r in rows] == [1, 3]
    assert rows[0]["avg_turns"] == 1.0 and 1.0 <= rows[1]["avg_turns"] <= 3.0
    assert all(r["n_episodes"] == 4 and 0.0 <= r["cut_share"] <= 1.0 for r in rows)
    assert rows[0]["cut_share"] == pytest.approx(
        1.0 - rows[0]["success_rate"]
    )  # BabyAI: done only on success here
    saved = json.load(open(tmp_path / "sweep.json"))
    assert [r["horizon"] for r in saved["sweep"]] == [1, 3] and (tmp_path / "sweep.png").exists()
