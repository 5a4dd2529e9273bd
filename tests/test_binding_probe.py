"""The mission-binding probe: exact action probabilities under the sampler's mask, the mission's
object read from the goal, and the split of probability mass that the figures report."""

import pytest

import tiny as tiny_policy
from diagnostics import probe as bp

OBS = (
    "You see red key 1 2 steps left, green ball 1 2 steps ahead, red ball 1 1 step ahead. In front of "
    "you: nothing. You carry nothing.\nAvailable actions: turn left, go to red key 1, pickup red key 1, "
    "go to green ball 1, go to red ball 1, check available actions.\nGoal: go to the red ball."
)
ACTIONS = [
    "turn left",
    "go to red key 1",
    "pickup red key 1",
    "go to green ball 1",
    "go to red ball 1",
    "check available actions",
]


def test_the_mission_object_and_which_actions_are_about_it():
    assert bp.mission_object(OBS) == ("red", "ball")
    assert bp.mission_object("... Goal: pick up a key.") == (None, "key")
    target = ("red", "ball")
    assert [bp.about_mission(a, target) for a in ACTIONS] == [None, False, False, False, True, None]
    assert bp.about_mission("pickup blue key 2", (None, "key")) is True


@pytest.fixture(scope="module")
def tiny():
    return tiny_policy.load("tiny", "babyai")


def test_action_probabilities_are_the_masked_samplers_and_sum_to_one(tiny):
    p = bp.action_probs(tiny, bp.action_rows(tiny, OBS, ACTIONS))
    assert len(p) == len(ACTIONS) and all(q > 0 for q in p)
    assert abs(sum(p) - 1.0) < 1e-4


def test_binding_splits_the_mass_between_the_missions_object_and_the_others(tiny, monkeypatch):
    fixed = [0.1, 0.2, 0.1, 0.2, 0.3, 0.1]  # by action: move, other, other, other, MISSION, check
    monkeypatch.setattr(bp, "action_probs", lambda policy, rows: fixed * (len(rows) // len(ACTIONS)))
    no_mission_object = (
        OBS.replace("go to red ball 1, ", ""),
        [a for a in ACTIONS if a != "go to red ball 1"],
    )
    b = bp.binding(tiny, [(OBS, ACTIONS), no_mission_object])  # the second state is not counted
    assert b.n_states == 1
    assert abs(b.p_mission - 0.3) < 1e-9 and abs(b.p_other - 0.5) < 1e-9
    assert abs(b.share - 0.3 / 0.8) < 1e-9 and abs(b.chance - 1 / 4) < 1e-9
