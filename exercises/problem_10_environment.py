"""Problem 10: your own environment: a small text game, served through OpenEnv and as a server of this
project, then trained on.

Mirrors: servers/babyai.py, `BabyAIText` and its app (read it after your check passes: how a real
environment turns a task id into a level, ends an episode and scores it). Read first:
docs/own-environment.md (which way fits when, and the two templates: how each is served);
servers/common.py, its docstring (the four methods a server's class has, and the expert's).

Invent the game (not the page's colours or number guessing): a few boxes to open, a lock, a tiny
corridor, a word to spell. Write it three times over:

`Game`, the environment, one episode at a time, with the methods of a server of this project:
- `reset(data_idx)` starts task `data_idx` (any integer from 0) and returns an answer; `step(action)`
  takes the agent's text and returns an answer; `observation()` the last answer's observation ("" if
  none yet: a server of this project asks at /create, before any reset); `expert()` `{"action":
  ...}`, an action that solves the task from here; `close()`. `Game()` takes no arguments.
- An answer is a dict: "observation" (str, what the agent reads), "reward" (a number), "done"
  (bool), "available_actions" (list of str: the actions the tiny policy picks among).
- Tasks 0 to 9 are ten different tasks. The same task played the same way plays the same episode.
- Every reward is in [0, 1], and an episode's rewards add up to at most 1: the trainer reads an
  episode's outcome as their sum and counts it a success when the sum is above 0. So an episode
  that fails adds up to exactly 0: no credit for trying. The expert's episodes add up to exactly 1.
- An episode is done within 20 steps, whatever the actions: text that is no action counts too.
- A step after done changes nothing: it answers done True and reward 0.
- No observation writes the answer itself (the agent would learn to copy it); a clue is fine.

`openenv_app()`: a FastAPI app that serves Game through OpenEnv's own server code
(`openenv.core.env_server.http_server.create_fastapi_app`; `pip install --no-deps -r
requirements-openenv.txt`): an action with one text field, an observation with one text field and
the available actions. This project's trainer talks to an environment without a task API by seeds:
reset's data is {"seed": task id}. It holds 200 sessions at once.

`project_app()`: a FastAPI app that serves Game as a server of this project
(`servers.common.build_app`, and OpenEnv's dialect with `servers.openenv.add_openenv`, given your
game's instruction: a game named nowhere in envs/tasks.py has none, and the server warns).

Worked example, a game of boxes (task 5: find the coin, in the red box):
    reset(5)                  -> {"observation": "Find the coin. It is in the red box.", "reward": 0.0,
                                  "done": False, "available_actions": ["open the blue box", ...]}
    expert()                  -> {"action": "open the red box"}
    step("open the red box")  -> {"observation": "You open the red box: the coin! You found it.",
                                  "reward": 1.0, "done": True, ...}

Decide: how a task id becomes a task, and what makes two tasks different; when an episode ends, for
an agent that never solves it too; what reward each step gives; what a Game must forget at reset;
how the task id reaches your Game through each server, and how many Games each server makes.

Task: write Game, openenv_app and project_app. Check: python -m exercises.check 10
Then serve it (`openenv` or `project`) and train on it, R the turns your game needs (docs/course.md,
lesson 7):
  python -m exercises.problem_10_environment openenv --port 8000
  python train.py --env openenv --url ws://127.0.0.1:8000 --steps 200 --rounds R --eval-every 40 --out runs/l7
"""

import argparse
import sys


class Game:
    def reset(self, data_idx: int) -> dict:
        raise NotImplementedError("problem 10: your environment (this file's docstring)")

    def step(self, action: str) -> dict:
        raise NotImplementedError("problem 10: your environment (this file's docstring)")

    def observation(self) -> str:
        raise NotImplementedError("problem 10: your environment (this file's docstring)")

    def expert(self) -> dict:
        raise NotImplementedError("problem 10: your environment (this file's docstring)")

    def close(self) -> None:
        pass


def openenv_app():
    raise NotImplementedError("problem 10: Game through OpenEnv's server code (this file's docstring)")


def project_app():
    raise NotImplementedError("problem 10: Game as a server of this project (this file's docstring)")


def main(argv=None) -> None:
    """`openenv` or `project`, then --port (and, for `project`, any flag of servers.common.serve)."""
    parser = argparse.ArgumentParser(description="serve Game one way or the other")
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
