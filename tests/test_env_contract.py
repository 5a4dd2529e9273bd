"""The environment contract (docs/own-environment.md, "The contract") is one rule in three places:
the trainer's outcome and success, `envs.check`'s, and problem 10's check.

Where it sits: calls `agent._record` (how the rollout keeps an episode's score) and
`envs.check.outcome` on the same answers, and plays exercises/find_it.py after done; no server.
"""

from types import SimpleNamespace

import pytest

from envs.check import outcome
from envs.tasks import ENVS, EnvSpec

ANSWERS = {
    "rewards only, a failure": [{"reward": 0.0, "done": False}, {"reward": 0.0, "done": True}],
    "rewards only, a success": [{"reward": 0.0, "done": False}, {"reward": 0.85, "done": True}],
    "a running score": [
        {"reward": 0.0, "score": 20.0, "done": False},
        {"reward": 0.5, "score": 70.0, "done": True},
    ],
    "a score only at the end": [
        {"reward": 0.3, "done": False},
        {"reward": 0.0, "score": 100.0, "done": True},
    ],
}
SPECS = {
    "openenv": EnvSpec(name="openenv", module="", splits={}, instruction="", success_at=1e-6),
    "babyai": ENVS["babyai"],
    "sciworld": ENVS["sciworld"],
}


def trainers_outcome(answers: list[dict], spec: EnvSpec) -> tuple[float, bool]:
    """The rollout's record of the answers (agent._record), then its end: score over score_scale,
    a success at success_at."""
    from agent import Trajectory, _record

    tr, policy = Trajectory(task=0, group=0), SimpleNamespace(stop_ids={0})
    for answer in answers:
        _record(tr, answer, [0], "reply", "action", policy)
    reward = tr.score / spec.score_scale
    return reward, reward >= spec.success_at


@pytest.mark.parametrize("answers", ANSWERS, ids=list(ANSWERS))
@pytest.mark.parametrize("spec", SPECS, ids=list(SPECS))
def test_the_checker_reads_an_episodes_outcome_and_success_as_the_trainer_does(answers, spec):
    assert outcome(ANSWERS[answers], SPECS[spec]) == pytest.approx(
        trainers_outcome(ANSWERS[answers], SPECS[spec])
    )


def test_a_failed_episode_that_pays_for_trying_is_a_success_to_the_trainer():
    """Why the contract asks a failed episode to add up to 0: over --env openenv, 0.3 for a wrong
    guess makes a failure count as a success."""
    paid = [{"reward": 0.3, "done": False}, {"reward": 0.3, "done": True}]
    assert outcome(paid, SPECS["openenv"]) == (pytest.approx(0.6), True)


def test_the_reference_game_changes_nothing_after_done():
    from exercises.find_it import Game

    game = Game()
    game.reset(5)
    won = game.step("open the red box")
    assert won["done"] and won["reward"] == 1.0
    for action in ("open the red box", "dance"):
        again = game.step(action)
        assert again["done"] and again["reward"] == 0.0 and again["observation"] == won["observation"]
