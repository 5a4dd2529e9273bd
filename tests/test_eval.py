"""eval.py's summary: per-category pass@k and the table that reads well in a terminal and a report."""

from types import SimpleNamespace

from eval import pass_at_k, summarise, summary_table


def fake(task, success, category, turns=2):
    return SimpleNamespace(
        task=task,
        success=success,
        category=category,
        score=float(success),
        reward=float(success),
        turns=turns,
        error="",
        truncated=0,
    )


def test_pass_at_k_per_category_uses_only_that_categorys_tasks():
    # task 0 (A): 1 of 4 correct; task 1 (A): 0 of 4; task 2 (B): 4 of 4
    trajs = (
        [fake(0, i == 0, "A") for i in range(4)]
        + [fake(1, False, "A") for _ in range(4)]
        + [fake(2, True, "B") for _ in range(4)]
    )
    s = summarise(trajs, 4)
    assert set(s["pass_at_k"]) == {"1", "2", "4"}
    a = s["by_category"]["A"]
    assert (a["n_tasks"], a["n_episodes"]) == (2, 8)
    assert abs(a["pass_at_k"]["2"] - (pass_at_k(4, 1, 2) + 0.0) / 2) < 1e-12
    assert s["by_category"]["B"]["pass_at_k"] == {"1": 1.0, "2": 1.0, "4": 1.0}
    assert abs(s["pass_at_k"]["1"] - (0.25 + 0 + 1) / 3) < 1e-12


def test_summary_table_is_aligned_markdown_with_every_category_and_k():
    trajs = [fake(t, t % 3 == 0, ["GoToObj", "GoToRedBall-v0"][t % 2]) for t in range(6) for _ in range(64)]
    text = summary_table(summarise(trajs, 64))
    tables = text.split("\n\n")
    assert len(tables) == 2
    for table in tables:
        lines = table.splitlines()
        assert len({len(line) for line in lines}) == 1  # every row the same width: columns line up
        assert lines[1].startswith("|--") and all(line.startswith("| ") for line in lines[:1] + lines[2:])
    assert [line.split("|")[1].strip() for line in tables[0].splitlines()[2:]] == [
        "all",
        "GoToObj",
        "GoToRedBall-v0",
    ]
    assert tables[1].splitlines()[0].split("|")[2:-1] == [
        f" {k:>5} " for k in ("k=1", "k=2", "k=4", "k=8", "k=16", "k=32", "k=64")
    ]
    assert "0.333" in tables[0].splitlines()[2]  # success of all: 2 of 6 tasks


def test_pass_at_k_leaves_out_a_k_no_task_has_samples_for_and_errors_leave_the_rates():
    # 4 samples asked per task; environment errors left task 0 with 2 (1 correct), task 1 with 1
    trajs = [fake(0, True, "A"), fake(0, False, "A"), fake(1, True, "A")]
    errored = [SimpleNamespace(**{**vars(fake(t, False, "A")), "error": "time-out"}) for t in (0, 0, 1, 1, 1)]
    s = summarise(trajs + errored, 4)
    # pass@1 over both tasks; pass@2 over task 0 only (1 - C(1,2)/C(2,2) = 1); no "4": no task has 4
    assert s["pass_at_k"] == {"1": (0.5 + 1.0) / 2, "2": 1.0}
    assert s["errors"] == 5 and s["n_episodes"] == 3 and abs(s["success_rate"] - 2 / 3) < 1e-12
    table = summary_table(s)
    assert "left out of the rates" in table and "counted as failures" not in table
