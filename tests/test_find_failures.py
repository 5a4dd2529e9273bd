"""diagnostics/find_failures.py: a find-* episode's stage is read from what the simulator answered."""

import json

from diagnostics.find_failures import STAGES, main, refused_focus, stage

TASK = "Your task is to find a(n) animal. First, focus on the thing. Then, move it to the red box."
REFUSED = "No known action matches that input."


def episode(steps, success=False, done=False, error=""):
    return {
        "success": success,
        "done": done,
        "error": error,
        "actions": [a for a, _ in steps],
        "observations": [TASK] + [o for _, o in steps],
    }


OUTSIDE = [("open door to outside", "The door is now open."), ("go to outside", "You move to the outside.")]
EPISODES = {
    "solved": episode(
        OUTSIDE
        + [
            ("focus on baby baby beaver", "You focus on the baby beaver."),
            ("move baby baby beaver to red box", "You move the beaver to the red box."),
        ],
        success=True,
        done=True,
    ),
    "wrong focus": episode([("focus on glass jar", "You focus on the glass jar.")], done=True),
    "right focus, no box": episode(
        OUTSIDE
        + [
            ("focus on baby baby beaver", "You focus on the baby beaver."),
            ("go to hallway", "You move to the hallway."),
        ]
    ),
    "focus refused": episode(OUTSIDE + [("focus on baby baby bigha", REFUSED), ("focus on beaver", REFUSED)]),
    "never tried to focus": episode(OUTSIDE + [("look around", "This is the outside.")]),
    "ended otherwise": episode([("go to hallway", "You move to the hallway.")], done=True),
    "environment error": episode(OUTSIDE, done=True, error="server crashed"),
}


def test_each_stage_is_told_from_the_trajectory():
    assert set(EPISODES) == set(STAGES)
    for name, ep in EPISODES.items():
        assert stage(ep) == name, name


def test_a_refused_name_before_an_accepted_focus_is_still_a_right_focus():
    ep = episode(
        OUTSIDE
        + [
            ("focus on baby baby bigha", REFUSED),
            ("focus on baby baby beaver", "You focus on the baby beaver."),
        ]
    )
    assert stage(ep) == "right focus, no box"
    assert refused_focus([ep]) == {"focus on baby baby bigha": 1}


def test_refused_focus_counts_only_refused_focus_actions():
    counts = refused_focus(list(EPISODES.values()))
    assert counts == {"focus on baby baby bigha": 1, "focus on beaver": 1}


def test_the_command_line_prints_each_folders_stages(tmp_path, capsys):
    folders = []
    for name, eps in {"a": list(EPISODES.values()), "b": [EPISODES["focus refused"]] * 3}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "trajectories.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
        folders.append(str(tmp_path / name))
    main(folders)
    out = capsys.readouterr().out
    assert "| focus refused | 1 (14.3%) | 3 (100.0%) |" in out
    assert "| solved | 1 (14.3%) | 0 (0.0%) |" in out
    assert "| episodes | 7 | 3 |" in out
    assert "'focus on baby baby bigha' x 3" in out
