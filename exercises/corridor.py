"""A tiny environment for problem 8: walk along a corridor to the goal. No server, no HTTP: it
answers `reset(slots, tasks)` and `step(slots, actions)` as `envs.EnvPool` does.

Task t puts the goal t cells ahead; "forward" and "back" move; any other action is refused with
BabyAI's words and the agent stays. Reaching the goal ends the episode with score 10 - steps
(`SPEC.score_scale` 10: reward 1 - steps / 10); every step before sends the score so far, the cells
ahead of the start (0 behind it), a running score as SciWorld's is. Task -1 fails at reset; task 99
at its first step, task 98 at its second, and so on down to 91 (an environment error, as a crashed
server gives).
Task 100 + t is the same corridor with t cells to walk, in a variant that sends no "score": a step
forward earns reward 1 and a step back -1, so the rewards add up to the distance walked.

It refuses, with a RuntimeError, the calls a real server and `envs.EnvPool` refuse: a slot outside
the pool (`Corridor(size)` has slots 0 to size - 1), a slot twice in one call, a task that is not an
integer, an action that is not a string, and a step for an episode that is not in play because its
reset failed, it ended (done), or an error ended it (the pool drops a failed episode's instance, so
its next step finds none).
"""

from types import SimpleNamespace

SPEC = SimpleNamespace(
    instruction="Walk to the goal. Reply with forward or back, after 'Action:'.",
    parse_action=lambda text: text.rsplit("Action:", 1)[-1].strip() if "Action:" in text else "",
    score_scale=10.0,
    success_at=0.5,
)


class Corridor:
    def __init__(self, size: int):
        self.size = size  # the pool's slots: 0 to size - 1
        self.at: dict[int, list] = {}  # slot -> [position, goal, steps, task], while in play

    def reset(self, slots: list[int], tasks: list[int]) -> list[dict]:
        self.check(slots, tasks, int, "task")
        out = []
        for slot, task in zip(slots, tasks):
            self.at.pop(slot, None)
            if task < 0:
                out.append({"observation": "", "error": "the server did not answer /reset"})
                continue
            self.at[slot] = [0, task - 100 if task > 100 else task, 0, task]
            out.append({"observation": self.describe(self.at[slot])})
        return out

    def step(self, slots: list[int], actions: list[str]) -> list[dict]:
        self.check(slots, actions, str, "action")
        for slot in slots:
            if slot not in self.at:
                raise RuntimeError(
                    f"the corridor refuses to step slot {slot}: its episode is not in play (its reset "
                    "failed, the environment ended it, or an error did); step the live episodes only"
                )
        answers = [self.move(slot, action) for slot, action in zip(slots, actions)]
        for slot, answer in zip(slots, answers):
            if answer.get("done") or answer.get("error"):
                del self.at[slot]
        return answers

    def check(self, slots: list, values: list, kind: type, what: str) -> None:
        """Refuse what a pool of `size` instances behind a strict server refuses."""
        for slot, value in zip(slots, values):
            if not (isinstance(slot, int) and 0 <= slot < self.size):
                raise RuntimeError(f"the corridor refuses slot {slot!r}: its slots are 0 to {self.size - 1}")
            if not isinstance(value, kind) or isinstance(value, bool):
                raise RuntimeError(f"the corridor refuses the {what} {value!r}: not a {kind.__name__}")
        if len(set(slots)) < len(slots):
            raise RuntimeError(f"the corridor refuses slots {slots}: each slot at most once a call")

    def move(self, slot: int, action: str) -> dict:
        state = self.at[slot]
        state[2] += 1
        if 91 <= state[3] <= 99 and state[2] == 100 - state[3]:
            return {"observation": "", "error": "time-out after 30 s", "done": False}
        if state[3] > 100:
            return self.unscored(state, action)
        if action not in ("forward", "back"):
            note = f'"{action}" is not an available action. '
            return {
                "observation": note + self.describe(state),
                "reward": 0.0,
                "score": self.so_far(state),
                "done": False,
            }
        state[0] += 1 if action == "forward" else -1
        if state[0] == state[1]:
            return {
                "observation": "You reached the goal.",
                "reward": 1.0,
                "score": 10.0 - state[2],
                "done": True,
            }
        return {
            "observation": self.describe(state),
            "reward": 0.0,
            "score": self.so_far(state),
            "done": False,
        }

    def so_far(self, state: list) -> float:
        return float(max(state[0], 0))

    def unscored(self, state: list, action: str) -> dict:
        moved = {"forward": 1, "back": -1}.get(action, 0)
        state[0] += moved
        done = state[0] == state[1]
        return {"observation": self.describe(state), "reward": float(moved), "done": done}

    def describe(self, state: list) -> str:
        position, goal = state[:2]
        return f"You are at {position}. The goal is at {goal}."
