"""Problem 10's reference solution: Find it, a small text environment, served both ways.

Five closed boxes stand in a row; one holds the item the task names. `open box N` opens one; the
episode ends when the item is found (reward 1) or after MAX_STEPS steps, whatever the actions were
(reward 0 on every other step). Task t names ITEMS[t % 4] and hides it in box (t // 4) % 5 + 1, so
tasks 0 to 19 are twenty different puzzles; two tasks that name the same item begin with the same
observation and part at the first box opened.

Where it sits: beside the exercises, like corridor.py. `Game` has the four methods of a server of
this project (servers/common.py) and the expert; `project_app` serves it as servers/babyai.py
serves BabyAI (servers.common.build_app, with OpenEnv's dialect added), `openenv_app` through
OpenEnv's own server code (docs/own-environment.md). Read it after your check of problem 10 passes.

    python -m exercises.find_it openenv --port 8000   # then: python train.py --env openenv --url ws://127.0.0.1:8000
    python -m exercises.find_it project --port 8001   # the same, through this project's server
"""

import argparse
import sys

ITEMS = ["key", "coin", "ring", "map"]
BOXES = 5
MAX_STEPS = 6  # every step counts, an action that is not one too: the episode always ends


class Game:
    def __init__(self):
        self.item, self.box, self.steps, self.last = "", 0, 0, ""

    def reset(self, data_idx: int) -> dict:
        if not isinstance(data_idx, int) or isinstance(data_idx, bool) or data_idx < 0:
            from servers.common import EnvError

            raise EnvError(f"no task {data_idx!r}: tasks are integers from 0", 404)
        self.item, self.box = ITEMS[data_idx % len(ITEMS)], (data_idx // len(ITEMS)) % BOXES + 1
        self.steps = 0
        return self.answer(f"Find the {self.item}. {BOXES} boxes stand in a row, all closed.", 0.0)

    def step(self, action: str) -> dict:
        self.steps += 1
        words = action.strip().split()
        if len(words) != 3 or words[:2] != ["open", "box"] or words[2] not in self.available():
            return self.answer(f"{action[:50]!r} is not an action; say `open box N`.", 0.0)
        n = int(words[2])
        if n == self.box:
            return self.answer(f"You open box {n}: the {self.item}! You found it.", 1.0, done=True)
        return self.answer(f"Box {n} holds no {self.item}.", 0.0)

    def answer(self, text: str, reward: float, done: bool = False) -> dict:
        self.last = text
        done = done or self.steps >= MAX_STEPS
        actions = [f"open box {n}" for n in self.available()]
        return {"observation": text, "reward": reward, "done": done, "available_actions": actions}

    def available(self) -> list[str]:
        return [str(n) for n in range(1, BOXES + 1)]

    def observation(self) -> str:
        return self.last

    def expert(self) -> dict:
        return {"action": f"open box {self.box}", "thought": f"the {self.item} is in box {self.box}"}

    def close(self) -> None:
        pass


def project_app(make_env=Game):
    """`make_env` served as a server of this project, OpenEnv's dialect added (as servers/babyai.py)."""
    from servers.common import build_app
    from servers.openenv import add_openenv

    app = build_app("Find it", make_env, inline_calls=True)  # quick, pure-Python steps
    add_openenv(app, "find_it")
    return app


def openenv_app(make_env=Game):
    """`make_env` served by OpenEnv's own server code, one Game per session."""
    from openenv.core.env_server.http_server import create_fastapi_app

    return create_fastapi_app(*openenv_environment(make_env), max_concurrent_envs=64, env_name="find_it")


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


def main(argv=None, apps=None) -> None:
    """`openenv` or `project`, then --port (and, for `project`, every flag of servers.common.serve)."""
    apps = apps or {"openenv": openenv_app, "project": project_app}
    parser = argparse.ArgumentParser(description="serve the environment one way or the other")
    parser.add_argument("way", choices=sorted(apps))
    parser.add_argument("--port", type=int, default=8000)
    args, rest = parser.parse_known_args(argv)
    app = apps[args.way]()
    if args.way == "project":
        from servers.common import serve

        serve(app, ["--port", str(args.port), *rest])
    else:
        import uvicorn

        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
