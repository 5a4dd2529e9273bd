"""Problem 10's reference solution: Find it, a small text environment, served both ways.

Five closed boxes of five colours stand in a row; one holds the item the task names, and every
observation says which colour it is. `open the <colour> box` opens one; the episode ends when the
item is found or after MAX_STEPS steps, whatever the actions were (text that is no action counts a
step too); a step after that changes nothing and rewards 0. Finding it at step k rewards
1 - 0.15 (k - 1), every other step 0, so an episode that never finds it adds up to 0. Task t names
ITEMS[t % 4] and hides it in the box of colour COLOURS[(t // 4) % 5], so tasks 0 to 19 are twenty
different puzzles. The clue is in every observation because the tiny
policy reads the last one only (context_turns=1): a task it cannot tell from what it reads, it
cannot learn.

Where it sits: beside the exercises, like corridor.py. `Game` has the four methods of a server of
this project (servers/common.py) and the expert; `project_app` serves it as servers/babyai.py
serves BabyAI (servers.common.build_app, with OpenEnv's dialect added), `openenv_app` through
OpenEnv's own server code (docs/own-environment.md). Read it after your check of problem 10 passes.

    python -m exercises.find_it openenv --port 8000   # then train.py --env openenv --url ws://127.0.0.1:8000
    python -m exercises.find_it project --port 8001   # the same through this project's server, :8001
"""

import argparse
import sys

ITEMS = ["key", "coin", "ring", "map"]
COLOURS = ["blue", "red", "green", "yellow", "grey"]
INSTRUCTION = "Find the item the task names: open the box it is in. Reply with one action."
MAX_STEPS = 6  # every step counts, an action that is not one too: the episode always ends


class Game:
    def __init__(self):
        self.item, self.colour, self.steps, self.last, self.over = "", "", 0, "", False

    def reset(self, data_idx: int) -> dict:
        if not isinstance(data_idx, int) or isinstance(data_idx, bool) or data_idx < 0:
            from servers.common import EnvError

            raise EnvError(f"no task {data_idx!r}: tasks are integers from 0", 404)
        self.item = ITEMS[data_idx % len(ITEMS)]
        self.colour = COLOURS[(data_idx // len(ITEMS)) % len(COLOURS)]
        self.steps, self.over = 0, False
        return self.answer(f"Find the {self.item}. It is in the {self.colour} box.", 0.0)

    def step(self, action: str) -> dict:
        if self.over:  # the episode is done: nothing changes, nothing is paid (as the servers answer)
            return self.answer(self.last, 0.0, done=True)
        self.steps += 1
        action = " ".join(action.split())
        if action not in self.available():
            return self.answer(f"{action[:50]!r} is not an action; say `open the <colour> box`.", 0.0)
        if action == f"open the {self.colour} box":
            found = f"You open the {self.colour} box: the {self.item}! You found it."
            return self.answer(found, 1.0 - 0.15 * (self.steps - 1), done=True)
        return self.answer(f"That box holds no {self.item}. It is in the {self.colour} box.", 0.0)

    def answer(self, text: str, reward: float, done: bool = False) -> dict:
        self.last = text
        done = self.over = done or self.steps >= MAX_STEPS
        return {"observation": text, "reward": reward, "done": done, "available_actions": self.available()}

    def available(self) -> list[str]:
        return [f"open the {c} box" for c in COLOURS]

    def observation(self) -> str:
        return self.last

    def expert(self) -> dict:
        return {
            "action": f"open the {self.colour} box",
            "thought": f"the {self.item} is in the {self.colour} box",
        }

    def close(self) -> None:
        pass


def project_app(make_env=Game):
    """`make_env` served as a server of this project, OpenEnv's dialect added (as servers/babyai.py)."""
    from servers.common import build_app
    from servers.openenv import add_openenv

    app = build_app("Find it", make_env, inline_calls=True)  # quick, pure-Python steps
    add_openenv(app, "find_it", INSTRUCTION)  # (named nowhere in envs/tasks.py: its instruction here)
    return app


def openenv_app(make_env=Game):
    """`make_env` served by OpenEnv's own server code, one Game per session."""
    from openenv.core.env_server.http_server import create_fastapi_app

    return create_fastapi_app(*openenv_environment(make_env), max_concurrent_envs=256, env_name="find_it")


def openenv_environment(make_env=Game) -> tuple:
    """OpenEnv's three classes around `make_env`: the environment, its action, its observation. The
    task id arrives as reset's `seed`: the trainer sends {"seed": task id} to an environment without
    a task API (envs/openenv.py)."""
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class Say(Action):
        message: str  # the action's one text field: the trainer sends its reply in it

    class Seen(Observation):
        prompt: str  # the observation's one text field: the trainer's user message
        available_actions: list[str] = []

    def seen(answer: dict) -> Seen:
        return Seen(
            prompt=answer["observation"],
            available_actions=answer["available_actions"],
            reward=answer["reward"],
            done=answer["done"],
        )

    class FindIt(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self):
            super().__init__()
            self.game, self.steps = make_env(), 0

        def reset(self, seed=None, episode_id=None, **kwargs):
            self.steps = 0
            return seen(self.game.reset(seed or 0))

        def step(self, action, timeout_s=None, **kwargs):
            self.steps += 1
            return seen(self.game.step(action.message))

        @property
        def state(self):
            return State(step_count=self.steps)

    return FindIt, Say, Seen


def main(argv=None) -> None:
    """`openenv` or `project`, then --port (and, for `project`, any flag of servers.common.serve)."""
    parser = argparse.ArgumentParser(description="serve Find it one way or the other")
    parser.add_argument("way", choices=["openenv", "project"])
    parser.add_argument("--port", type=int, default=8000)
    args, rest = parser.parse_known_args(argv)
    if args.way == "project":
        from servers.common import serve

        serve(project_app(), ["--port", str(args.port), *rest])
    else:
        import uvicorn

        uvicorn.run(openenv_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
