"""The ScalingInter study end to end in its --quick form (CI smoke test): every schedule trains,
is evaluated on held-out tasks and swept over test-time max turns, and the report is written."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def test_quick_study_writes_a_row_per_schedule_and_the_plots(tmp_path):
    import scaling_inter_study as study

    study.main(["--quick", "--out", str(tmp_path)])
    table = open(tmp_path / "table.md").read()
    for name in study.SCHEDULES:
        assert f"| {name} |" in table
    assert (
        "| fixed-short | 1 | 1 |" in table
        and "| fixed-long | 1 | 3 |" in table
        and "| staged | 1 | 1,2 |" in table
    )
    assert (tmp_path / "curves.png").exists() and (tmp_path / "sweep.png").exists()


def test_paired_difference_is_over_tasks_of_seed_means_at_the_asked_horizon():
    import scaling_inter_study as study

    def run(at3, at18):
        return {"tasks_at": {3: at3, 18: at18}}

    # schedule a: two seeds; b: one seed. Per task at h=18: a's mean - b = (0.5-0, 1-0, 1-1) -> mean 0.5
    a = [
        run({"t1": 0, "t2": 0, "t3": 0}, {"t1": 1, "t2": 1, "t3": 1}),
        run({"t1": 0, "t2": 0, "t3": 0}, {"t1": 0, "t2": 1, "t3": 1}),
    ]
    b = [run({"t1": 1, "t2": 1, "t3": 1}, {"t1": 0, "t2": 0, "t3": 1})]
    mean, se, n = study.paired(a, b, 18)
    assert (mean, n) == (0.5, 3) and abs(se - 0.5 / 3**0.5) < 1e-12  # stdev(0.5, 1, 0) = 0.5
    assert study.paired(a, b, 3)[0] == -1.0  # the other horizon's tasks, not the last one's
    assert study.paired(a, b, 8) is None  # a horizon nobody swept
