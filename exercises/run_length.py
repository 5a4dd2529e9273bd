"""Lesson 7's run length, measured: a game written as a student writes problem 10 (Unscramble),
trained through its OpenEnv server for several seeds, held-out success read every 40 steps.

    python -m exercises.run_length check             # the game passes problem 10's check
    python -m exercises.run_length run --seeds 0 1 2 3 4 --steps 200
    python -m exercises.run_length table             # held-out success per seed and step

Where it sits: beside the course (docs/course.md, lesson 7; docs/teach.md records the table). The
game is not the reference (exercises/find_it.py, whose clue is read off at once): a student's game
asks the tiny policy to work a little, here to match scrambled letters to one of six words. Each
run is `train.py --env openenv` as the lesson gives it, with `--eval-every 40`; its output goes to
runs/course_length/seed_S/ and its log beside it, one run after the other. Like find_it.py, it
is an answer to problem 10: read it after your check of problem 10 passes.
"""

import argparse
import json
import os
import subprocess
import sys
import time

WORDS = ["cat", "dog", "sun", "map", "pen", "cup", "box", "hat", "egg", "key", "bed", "car"]
CHOICES = 6  # words offered a task: the answer and five others
MAX_STEPS = 4  # every step counts, a reply that is no guess too
OUT = "runs/course_length"
PORT = 8790


class Game:
    """Task t: the word WORDS[t % 12], its letters in the order (t // 12) picks, six words offered."""

    def __init__(self):
        self.word, self.letters, self.offered, self.steps, self.last, self.over = "", "", [], 0, "", False

    def reset(self, data_idx: int) -> dict:
        if not isinstance(data_idx, int) or isinstance(data_idx, bool) or data_idx < 0:
            from servers.common import EnvError

            raise EnvError(f"no task {data_idx!r}: tasks are integers from 0", 404)
        self.word = WORDS[data_idx % len(WORDS)]
        orders = ["102", "120", "201", "210", "021"]  # never the word's own order
        order = orders[(data_idx // len(WORDS)) % len(orders)]
        self.letters = " ".join(self.word[int(i)] for i in order)
        others = [w for w in WORDS if w != self.word]
        start = (data_idx * 7) % len(others)
        self.offered = sorted([self.word] + (others * 2)[start : start + CHOICES - 1])
        self.steps, self.over = 0, False
        return self.answer(f"The letters {self.letters} make a word. Which word?", 0.0)

    def step(self, action: str) -> dict:
        if self.over:
            return self.answer(self.last, 0.0, done=True)
        self.steps += 1
        action = " ".join(action.split())
        if action not in self.available():
            return self.answer(f"That is no guess. The letters {self.letters} make a word.", 0.0)
        if action == f"guess {self.word}":
            return self.answer(f"Yes: {self.word}!", 1.0 - 0.25 * (self.steps - 1), done=True)
        return self.answer(f"Not {action[6:]}. The letters {self.letters} make a word.", 0.0)

    def answer(self, text: str, reward: float, done: bool = False) -> dict:
        self.last = text
        done = self.over = done or self.steps >= MAX_STEPS
        return {"observation": text, "reward": reward, "done": done, "available_actions": self.available()}

    def available(self) -> list[str]:
        return [f"guess {w}" for w in self.offered]

    def observation(self) -> str:
        return self.last

    def expert(self) -> dict:
        return {"action": f"guess {self.word}"}

    def close(self) -> None:
        pass


def openenv_app():
    from openenv.core.env_server.http_server import create_fastapi_app

    from exercises.find_it import openenv_environment

    return create_fastapi_app(*openenv_environment(Game), max_concurrent_envs=256, env_name="unscramble")


def project_app():
    from exercises.find_it import project_app as served

    return served(Game)


def run(seeds: list[int], steps: int, rounds: int) -> None:
    """One training run per seed against one OpenEnv server, one after the other."""
    os.makedirs(OUT, exist_ok=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "exercises.run_length", "serve", "--port", str(PORT)],
        stdout=open(f"{OUT}/server.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        time.sleep(5)
        for seed in seeds:
            out = f"{OUT}/seed_{seed}"
            command = [sys.executable, "train.py", "--env", "openenv", "--url", f"ws://127.0.0.1:{PORT}"]
            command += ["--steps", str(steps), "--rounds", str(rounds), "--seed", str(seed)]
            command += ["--eval-every", "40", "--out", out]
            t0 = time.time()
            with open(f"{out}.log", "w") as log:
                code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
            print(f"seed {seed}: exit {code}, {time.time() - t0:.0f} s", flush=True)
    finally:
        server.terminate()


def table() -> None:
    """Held-out success (test split) before, at every 40th step, and after, per seed."""
    for name in sorted(os.listdir(OUT)):
        path = os.path.join(OUT, name, "metrics.jsonl")
        if not os.path.isdir(os.path.join(OUT, name)) or not os.path.exists(path):
            continue
        rows = [json.loads(line) for line in open(path)]
        held = {r["step"]: r["eval/success"] for r in rows if "eval/success" in r and "step" in r}
        summary = os.path.join(OUT, name, "summary.json")
        ends = json.load(open(summary)) if os.path.exists(summary) else {}
        before = ends.get("eval_before", {}).get("success_rate")
        after = ends.get("eval_after", {}).get("success_rate")
        cells = " ".join(f"{s}:{v:.3f}" for s, v in sorted(held.items()))
        print(f"{name}: before {before}, {cells}, after {after}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["check", "serve", "run", "table"])
    p.add_argument("--port", type=int, default=PORT)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2, help="the horizon: the turns a student would allow")
    args = p.parse_args(argv)
    if args.command == "check":
        from exercises.check import failures

        found = failures(10, sys.modules[__name__])
        print("\n".join(found) or "problem 10's check passes")
        return 1 if found else 0
    if args.command == "serve":
        import uvicorn

        uvicorn.run(openenv_app(), host="127.0.0.1", port=args.port, log_level="warning")
    elif args.command == "run":
        run(args.seeds, args.steps, args.rounds)
    else:
        table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
