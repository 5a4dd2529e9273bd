"""Problem 10's mistakes (your own environment): wrong versions students write, one small function
each, in `MISTAKES[what went wrong]`. Read them after your check of problem 10 passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 10` fails on each. Most share a helper (`_answer`,
find_it.py's three names with one rule changed) that writes the problem once with its rules
changeable; each mistake changes one rule. A mistake's docstring says what it costs.
"""

import random
from types import SimpleNamespace

from exercises import find_it

# Each mistake is a whole answer (Game, openenv_app, project_app): find_it.py's with one rule changed.


def _answer(
    game=find_it.Game, openenv_environment=None, one_game=False, sessions=256, project_app=None
) -> SimpleNamespace:
    """find_it.py's three names around `game`; `openenv_environment`: a wrapper of one's own;
    `one_game`: each server handed one Game for all its episodes, not a way to make one;
    `sessions`: the most OpenEnv sessions at once; `project_app`: a server of one's own."""
    shared = game()
    make = (lambda: shared) if one_game else game

    def openenv_app():
        from openenv.core.env_server.http_server import create_fastapi_app

        classes = (openenv_environment or find_it.openenv_environment)(make)
        return create_fastapi_app(*classes, max_concurrent_envs=sessions, env_name="find_it")

    serve = project_app or (lambda: find_it.project_app(make))
    return SimpleNamespace(Game=game, project_app=serve, openenv_app=openenv_app)


class _OneTask(find_it.Game):
    def reset(self, data_idx):
        return super().reset(0)


def the_task_id_ignored():
    """Every task id starts task 0: the trainer trains on one task, and the test split is that task."""
    return _answer(_OneTask)


class _Drawn(find_it.Game):
    def reset(self, data_idx):
        return super().reset(random.randrange(20))


class _Listed(find_it.Game):
    PUZZLES = list(range(20))

    def reset(self, data_idx):
        return super().reset(self.PUZZLES[data_idx])


def twenty_puzzles_indexed():
    """The task id indexes a list of twenty puzzles: the trainer's seeds run to 10199 (train
    0-9999, test 10000-10199), and every reset past the list is an error."""
    return _answer(_Listed)


def the_task_drawn_at_random():
    """The puzzle drawn from an unseeded generator: the same task twice is two tasks, GRPO's group
    of one task holds different puzzles, and no evaluation can be repeated."""
    return _answer(_Drawn)


class _StepsKept(find_it.Game):
    def reset(self, data_idx):
        steps = self.steps
        answer = super().reset(data_idx)
        self.steps = steps  # the step count kept from the episode before
        return answer


def the_step_count_kept_across_resets():
    """The step count not reset: an instance's second episode ends early, so the server's instances,
    reused from episode to episode, give an episode that depends on what they played before."""
    return _answer(_StepsKept)


class _NoLimit(find_it.Game):
    def answer(self, text, reward, done=False):
        answer = super().answer(text, reward, done)
        answer["done"] = self.over = done  # only finding the item ends it
        return answer


def no_step_limit():
    """Only success ends an episode: an agent that never finds the item never gets a done (the
    horizon cuts it, and the adaptive schedule reads every such episode as cut)."""
    return _answer(_NoLimit)


class _DoneForgotten(find_it.Game):
    def answer(self, text, reward, done=False):
        return super().answer(text, reward, False)


def done_forgotten_on_success():
    """Finding the item rewards 1 but does not end the episode: the agent may find it again and
    again, each time for 1, until the step limit."""
    return _answer(_DoneForgotten)


class _Penalty(find_it.Game):
    def step(self, action):
        answer = super().step(action)
        if "is not an action" in answer["observation"]:
            answer["reward"] = -1.0
        return answer


def a_penalty_for_a_wrong_action():
    """-1 for an action that is not one: out of [0, 1], and an episode's sum no longer says whether
    it succeeded (1 - 1 = 0, a success read as a failure)."""
    return _answer(_Penalty)


class _Score(find_it.Game):
    def answer(self, text, reward, done=False):
        return super().answer(text, reward * (find_it.MAX_STEPS - self.steps + 1), done)


def the_score_as_the_reward():
    """A quicker find scores more (MAX_STEPS - steps + 1), as a game's score: rewards up to 6, out
    of [0, 1]; write the score as "score" beside a reward in range, as BabyAI does."""
    return _answer(_Score)


def _from_index(make_env):
    FindIt, Say, Seen = find_it.openenv_environment(make_env)

    class FromIndex(FindIt):
        def reset(self, seed=None, episode_id=None, split="train", index=0, **kwargs):
            return super().reset(seed=index, episode_id=episode_id)

    return FromIndex, Say, Seen


def openenv_task_from_the_index():
    """The OpenEnv wrapper reads the task from `index`, as a task API names it; the trainer sends a
    server without one {"seed": task id}, so every episode is task 0."""
    return _answer(openenv_environment=_from_index)


def project_server_without_openenv():
    """build_app alone, OpenEnv's dialect not added: the server answers this project's client, but
    `train.py --env openenv --url` finds no OpenEnv environment there (and, without an entry in
    envs/tasks.py, --env openenv is the only way to train on it)."""
    from servers.common import build_app

    return _answer(project_app=lambda: build_app("Find it", find_it.Game, inline_calls=True))


def sixty_four_sessions():
    """OpenEnv's server capped at 64 sessions: eval.py's 200 test tasks open 200, and the rest end
    in an environment error the run leaves out of its rates."""
    return _answer(sessions=64)


def one_game_for_every_episode():
    """Each server handed one Game, not a way to make one: two episodes at once share it, and the
    second reset overwrites the first's task."""
    return _answer(one_game=True)


class _Leaky(find_it.Game):
    def reset(self, data_idx):
        answer = super().reset(data_idx)
        return self.answer(f"Find the {self.item}: open the {self.colour} box.", answer["reward"])


def the_answer_in_the_observation():
    """The first observation says the action itself ("open the red box"), not a clue to it: the
    agent learns to copy the words it reads, and held-out success measures copying."""
    return _answer(_Leaky)


class _PlaysOn(find_it.Game):
    def step(self, action):
        self.over = False  # the end forgotten: the episode goes on being played
        return super().step(action)


def a_step_after_done_keeps_playing():
    """A step after done is played as any other: the winning action sent again pays again. The
    trainer never sends one, but OpenEnv's server passes whatever a client sends straight to Game."""
    return _answer(_PlaysOn)


class _FreeNonActions(find_it.Game):
    def step(self, action):
        if " ".join(action.split()) not in self.available() and not self.over:
            return self.answer(f"{action[:50]!r} is not an action; say `open the <colour> box`.", 0.0)
        return super().step(action)


def a_non_action_costs_no_step():
    """Only an available action counts a step: an agent that never names one (a real model's free
    text, early in training) plays an episode that never ends, and only the horizon stops it."""
    return _answer(_FreeNonActions)


class _WrongGuessPaid(find_it.Game):
    def step(self, action):
        answer = super().step(action)
        if "holds no" in answer["observation"]:
            answer["reward"] = 0.3  # a little for trying
        return answer


def a_reward_for_each_wrong_guess():
    """0.3 for every wrong box opened: an episode that never finds the item adds up to 0.6 or more,
    which the trainer counts a success, and a wrong-then-right one to 1.3."""
    return _answer(_WrongGuessPaid)


MISTAKES = {
    "the task id ignored": the_task_id_ignored(),
    "twenty puzzles, indexed by the task id": twenty_puzzles_indexed(),
    "the task drawn at random": the_task_drawn_at_random(),
    "the step count kept across resets": the_step_count_kept_across_resets(),
    "no step limit": no_step_limit(),
    "done forgotten on success": done_forgotten_on_success(),
    "a penalty for a wrong action": a_penalty_for_a_wrong_action(),
    "the score as the reward": the_score_as_the_reward(),
    "the OpenEnv wrapper reads the task from index": openenv_task_from_the_index(),
    "one Game for every episode": one_game_for_every_episode(),
    "sixty-four OpenEnv sessions": sixty_four_sessions(),
    "a project server without OpenEnv's dialect": project_server_without_openenv(),
    "the answer in the observation": the_answer_in_the_observation(),
    "a step after done keeps playing": a_step_after_done_keeps_playing(),
    "a non-action costs no step": a_non_action_costs_no_step(),
    "a reward for each wrong guess": a_reward_for_each_wrong_guess(),
}
