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
