"""SciWorld: the real ScienceWorld simulator (Wang et al., 2022), served with the AgentGym protocol.

Where it sits: `envs/process.py` starts this file as a subprocess (`python -m servers.sciworld --port P`)
and talks to it over HTTP; nothing here knows about models or torch.

Each instance owns one ScienceWorld JVM (the simulator is Scala, reached through py4j). The JVM is
started by `/create` (about a second; several `/create`s run in parallel on the server's thread
pool, which is how the paper parallelised SciWorld's slow initialisation), reused by every
`/reset` of that instance (a `load` of the next task takes 15-50 ms once warm), and shut down for
real by `/close`. Its heap is capped (JVM_OPTIONS) so that a long run stays near 350 MB per JVM.

Tasks follow AgentGym: `data_idx` indexes the flat list GAMES of (task, variation) pairs, tasks in
ScienceWorld's order without 5-1, 5-2, 9-1, 9-2, 9-3, 10-1, 10-2 (4,639 pairs). Each task's
variations are split by ScienceWorld itself into train, then dev, then test (TASKS); `envs/tasks.py`
turns that into data_idx splits (`python -m servers.sciworld --splits` prints them).

The reset answer carries `task_description` and, as `observation`, the answer to `look around` (the
step AgentGym makes after loading); the agent's first observation is the two joined as AgentGym's
client joins them (`task_description + "\n" + observation`, in `envs/__init__.py` too). Then each answer is
ScienceWorld's own text for the action,
including its "No known action matches that input." for an invalid one. `score` is ScienceWorld's
score 0-100 as AgentGym reports it, except that a failed task (ScienceWorld's -100, e.g. focusing on
the wrong object) reports 0 with `failed: true`; `reward` is the per-step change of score / 100,
so the rewards of an episode sum to its final score / 100. `done` on completion, on failure, or
after ScienceWorld's default limit of 100 moves.

Speed: ScienceWorld's Python `env.step()` also recomputes the valid actions (28-165 ms), the look,
and the inventory on every call; this server calls the simulator's own step (2-10 ms) and reads
only score, completion and move count. The extras are computed when asked: the command
`check valid actions`, `GET /action_hint?id=` (action templates, objects, valid actions),
`GET /goals?id=` (ScienceWorld's subgoal progress), `GET /task_description?id=`, `GET /detail?id=`.

The expert (`POST /expert`, servers/common.py; the trainer's, never the agent's) follows
ScienceWorld's own gold path of the loaded variation (`getGoldActionSequence`). Generating it takes
3-30 s, so it happens only when the expert is first asked about a variation (the path is then kept
by this process): the task is loaded again with `generateGoldPath` and the episode's actions are
replayed (a variation's world is the same at every load), so the agent's state is unchanged. The
expert answers the gold action after the last one the agent followed. Between them, pure
observations (`look ...`, `inventory`, `task`), actions the simulator did not carry out (`No known
action matches that input.`) and opening doors do not leave the path. Walking elsewhere (`go to`
another room) does not either: the expert walks back the way the agent came (`go to` the room it
came from), then answers the gold path again. Any other action leaves the path: from then on the
expert still answers the next gold action, with `on_path: false` and `stale: true` (it may no longer
apply; DAgger's relabelling stops there). Past the gold path's end it answers `look around`
(docs/experts.md).

A JVM that dies (killed, out of memory) makes its instance answer a 503 JSON error that says so;
the server and the other instances keep going, and the next `/reset` of that instance (or a new
`/create`) starts a fresh JVM.
"""

import os
import re
import subprocess

# Cap each JVM's heap before ScienceWorld launches any: without a cap a JVM grows towards 1 GB on
# long runs; with 256 MB it levels off near 350 MB RSS (128 MB runs out on some tasks). A JVM out of
# memory exits, so that its instance reports a dead JVM and restarts at the next reset instead of
# limping on. The JVM reads this variable at start; a value set by the user wins.
JVM_OPTIONS = "-Xmx256m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError"
os.environ.setdefault("JAVA_TOOL_OPTIONS", JVM_OPTIONS)

from py4j.protocol import Py4JError  # noqa: E402
from scienceworld import ScienceWorldEnv  # noqa: E402

from servers.common import EnvError, build_app, serve  # noqa: E402
from servers.openenv import add_openenv  # noqa: E402

# (task id, task name, variations, of which train, of which dev) in ScienceWorld's task order,
# without the tasks AgentGym leaves out. Variations [0, train) are ScienceWorld's train set,
# [train, train + dev) its dev set, the rest its test set (`get_variations_train/dev/test()`
# after `load(name, 0)`; tests/test_sciworld.py checks this table against the jar).
TASKS = [
    ("1-1", "boil", 30, 14, 7),
    ("1-2", "melt", 30, 14, 7),
    ("1-3", "freeze", 30, 14, 7),
    ("1-4", "change-the-state-of-matter-of", 30, 14, 7),
    ("2-1", "use-thermometer", 540, 270, 135),
    ("2-2", "measure-melting-point-known-substance", 436, 218, 109),
    ("2-3", "measure-melting-point-unknown-substance", 300, 150, 75),
    ("3-1", "power-component", 20, 10, 5),
    ("3-2", "power-component-renewable-vs-nonrenewable-energy", 20, 10, 5),
    ("3-3", "test-conductivity", 900, 450, 225),
    ("3-4", "test-conductivity-of-unknown-substances", 600, 300, 150),
    ("4-1", "find-living-thing", 300, 150, 75),
    ("4-2", "find-non-living-thing", 300, 150, 75),
    ("4-3", "find-plant", 300, 150, 75),
    ("4-4", "find-animal", 300, 150, 75),
    ("6-1", "chemistry-mix", 32, 16, 8),
    ("6-2", "chemistry-mix-paint-secondary-color", 36, 18, 9),
    ("6-3", "chemistry-mix-paint-tertiary-color", 36, 18, 9),
    ("7-1", "lifespan-longest-lived", 125, 62, 31),
    ("7-2", "lifespan-shortest-lived", 125, 62, 31),
    ("7-3", "lifespan-longest-lived-then-shortest-lived", 125, 62, 31),
    ("8-1", "identify-life-stages-1", 14, 6, 3),
    ("8-2", "identify-life-stages-2", 10, 4, 2),
]
EXCLUDED = ("5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2")  # AgentGym's exceptions

# AgentGym's flat list: data_idx -> (task name, variation, split).
GAMES = [
    (name, v, "train" if v < n_train else "dev" if v < n_train + n_dev else "test")
    for _, name, n, n_train, n_dev in TASKS
    for v in range(n)
]

MAX_MOVES = 100  # ScienceWorld's default envStepLimit, which AgentGym keeps
CHECK = "check valid actions"
MAX_LISTED = 200  # valid actions listed by `check valid actions` (all of them: /action_hint)
GOLD_PATHS: dict[tuple[str, int], list[str]] = {}  # (task, variation) -> its gold path, once generated
OBSERVING = ("look around", "look at ", "look in ", "inventory", "task")  # actions that change nothing
NO_MATCH = "No known action matches that input"  # the simulator's answer to an action it did not parse
HARMLESS = OBSERVING + ("open door to ",)  # off the gold path, these leave nothing in its way


def split_ranges() -> dict[str, list[tuple[int, int]]]:
    """The data_idx of each split as [start, stop) ranges (one per task): what envs/tasks.py holds."""
    ranges: dict[str, list[tuple[int, int]]] = {"train": [], "dev": [], "test": []}
    start = 0
    for _, _, n, n_train, n_dev in TASKS:
        ranges["train"].append((start, start + n_train))
        ranges["dev"].append((start + n_train, start + n_train + n_dev))
        ranges["test"].append((start + n_train + n_dev, start + n))
        start += n
    return ranges


class SciWorldEnv:
    """One ScienceWorld JVM and the episode running in it."""

    def __init__(self):
        self.sim: ScienceWorldEnv | None = None
        self._start_jvm()
        self.game: tuple[str, int, str] | None = None
        self.last, self.task_description = "", ""
        self.score, self.moves, self.done, self.failed = 0, 0, False, False
        self.history: list[str] = []  # the actions of this episode, for the expert's replay
        # (action, room before, room after) of each action the simulator carried out: the expert's `follow`
        self.carried_out: list[tuple[str, str, str]] = []
        self.gold: list[str] | None = None  # the gold path, once the expert was asked

    # --- the JVM --------------------------------------------------------------------------

    def _start_jvm(self) -> None:
        self.sim = ScienceWorldEnv()  # launches `java -cp scienceworld.jar` and connects py4j
        self.jvm: subprocess.Popen = self.sim._gateway.java_process

    def _stop_jvm(self) -> None:
        sim, self.sim = self.sim, None
        if sim is None:
            return
        try:
            sim.close()  # py4j shutdown, then a newline on stdin makes the JVM exit
        except Exception:  # a dead JVM cannot be asked politely
            pass
        sim.close = lambda: None  # ScienceWorldEnv.__del__ would close it again
        try:
            self.jvm.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.jvm.kill()
            self.jvm.wait()
        sim._obj_tree_tempdir.cleanup()

    def alive(self) -> bool:
        return self.sim is not None and self.jvm.poll() is None

    def _dead(self) -> EnvError:
        code = self.jvm.poll() if self.sim is not None else None
        return EnvError(
            f"the ScienceWorld JVM of this instance (pid {self.jvm.pid}) is not running "
            f"(exit code {code}); reset this instance to start a fresh one, or create a new "
            "instance",
            503,
        )

    def _call(self, method: str, *args):
        """A call into the simulator that turns a dead JVM into a clear 503 error."""
        if not self.alive():
            raise self._dead()
        try:
            return getattr(self.sim.server, method)(*args)
        except Py4JError:
            if not self.alive():
                raise self._dead() from None
            raise

    # --- the protocol ---------------------------------------------------------------------

    def reset(self, data_idx) -> dict:
        if not isinstance(data_idx, int) or not 0 <= data_idx < len(GAMES):
            raise EnvError(f"data_idx must be an integer in [0, {len(GAMES)}), got {data_idx!r}")
        if not self.alive():  # it died during the last episode: start a fresh one
            self._stop_jvm()
            self._start_jvm()
        name, variation, split = GAMES[data_idx]
        self._call("load", name, variation, "", False)
        self.game = (name, variation, split)
        self.score, self.moves, self.done, self.failed = 0, 0, False, False
        self.history, self.carried_out, self.gold = [], [], None
        self.task_description = self._call("getTaskDescription")
        # AgentGym's first move after loading. As on AgentGym's server, `observation` is its answer
        # alone: AgentGym's client (and envs/) show `task_description + "\n" + observation`.
        answer = self.step("look around")
        return {
            **answer,
            "category": name,
            "task_name": name,
            "var_num": variation,
            "split": split,
            "task_description": self.task_description,
        }

    def step(self, action: str) -> dict:
        # (servers/common.py answers a step before reset or after the end)
        if " ".join(re.sub(r"[^a-z ]", " ", action.lower()).split()) == CHECK:
            return self.answer(self.valid_actions_text(), 0)  # free: no move, no change
        self.last = self._call("step", action)
        self.history.append(action)
        if NO_MATCH not in self.last:
            before = self.carried_out[-1][2] if self.carried_out else ""  # the agent's room
            self.carried_out.append((action, before, room_of(self.last, before)))
        # The simulator's own score, completion and move count; no look/inventory/valid list.
        raw = int(round(100 * self._call("getScore")))
        self.moves = self._call("getNumMoves")
        self.failed = raw < 0  # ScienceWorld marks a failed task with a negative score
        score = max(raw, 0)
        reward, self.score = (score - self.score) / 100, score
        self.done = bool(self._call("getCompleted")) or self.failed or self.moves > MAX_MOVES
        return self.answer(self.last, reward)

    def observation(self) -> str:
        return self.last

    def close(self) -> None:
        self._stop_jvm()

    def answer(self, observation: str, reward: float) -> dict:
        return {
            "observation": observation,
            "reward": reward,
            "score": self.score,
            "done": self.done,
            "failed": self.failed,
            "moves": self.moves,
        }

    # --- the expert (POST /expert: the trainer's, never the agent's) ----------------------

    def expert(self) -> dict:
        """{"action", "thought", "on_path"}: the next action of the variation's gold path."""
        self._need_game()
        if self.gold is None:
            self.gold = self._gold_path()
        pos, back, on_path = follow(self.gold, self.carried_out[1:])  # ([0]: the reset's `look around`)
        if back:
            return {
                "action": f"go to {back}",
                "on_path": False,
                "thought": f"I took a wrong turn; I go back to the {back}.",
            }
        if pos >= len(self.gold):
            return {
                "action": "look around",
                "on_path": False,
                "stale": True,
                "thought": "My plan is done but the task is not; I look around.",
            }
        action = self.gold[pos]
        stale = {} if on_path else {"stale": True}  # the next gold action, which may no longer apply
        return {"action": action, "thought": gold_thought(action), "on_path": on_path, **stale}

    def _gold_path(self) -> list[str]:
        """The variation's gold path: from this process's cache, else by loading the variation again
        with its gold path generated and replaying the episode so far."""
        name, variation, _ = self.game
        if (name, variation) not in GOLD_PATHS:
            self._call("load", name, variation, "", True)
            GOLD_PATHS[(name, variation)] = [str(a) for a in self._call("getGoldActionSequence")]
            for action in self.history:
                self._call("step", action)
        return GOLD_PATHS[(name, variation)]

    # --- extras, computed only when asked -------------------------------------------------

    def valid_actions(self) -> list[str]:
        # Shortest first: the one-object actions (open, focus on, go to) before the hundreds of
        # `connect X to Y` pairs that fill ScienceWorld's alphabetical list.
        valid = set(self._call("getValidActionObjectCombinations"))
        return sorted(valid, key=lambda a: (len(a.split()), a))

    def valid_actions_text(self) -> str:
        valid = self.valid_actions()
        more = f" (and {len(valid) - MAX_LISTED} more)" if len(valid) > MAX_LISTED else ""
        return f"Valid actions{more}: " + ", ".join(valid[:MAX_LISTED])

    def action_hint(self) -> dict:
        self._need_game()
        return {
            "possible_actions": list(self._call("getPossibleActions")),
            "possible_objects": list(self._call("getPossibleObjects")),
            "valid_actions": self.valid_actions(),
        }

    def goals(self) -> dict:
        self._need_game()
        return {"goals": self._call("getGoalProgressStr")}

    def get_task_description(self) -> dict:
        self._need_game()
        return {"task_description": self.task_description}

    def detail(self) -> dict:
        name, variation, split = self.game or (None, None, None)
        return {
            "task_name": name,
            "var_num": variation,
            "split": split,
            "score": self.score,
            "done": self.done,
            "failed": self.failed,
            "moves": self.moves,
            "jvm_pid": self.jvm.pid if self.sim is not None else None,
            "jvm_alive": self.alive(),
        }

    def _need_game(self) -> None:
        if self.game is None:
            raise EnvError("reset the instance first")


def follow(gold: list[str], taken: list[tuple[str, str, str]]) -> tuple[int, str, bool]:
    """(how many gold actions `taken` followed, the room to walk back to first ("": none), whether
    it stayed on the path), over the (action, room before, room after) the simulator carried out.
    Harmless actions between gold actions are allowed; a walk elsewhere is retraced (each `go to`
    off the path pushes the room it left; a `go to` back into one of those rooms drops it and all
    above it); anything else leaves the path."""
    pos, trail = 0, []  # trail: the rooms the agent left off the path, the last one on top
    for a, before, after in taken:
        a = " ".join(a.lower().split())
        if not trail and pos < len(gold) and a == " ".join(gold[pos].lower().split()):
            pos += 1
        elif a.startswith("go to ") and before and after:
            if after in trail:
                del trail[trail.index(after) :]
            elif after != before:
                trail.append(before)
        elif not a.startswith(HARMLESS):
            return pos, "", False
    return pos, trail[-1] if trail else "", True


def room_of(answer: str, room: str) -> str:
    """The agent's room after the simulator's `answer` (`room` if it does not say): `You move to
    the X.` after a walk, `This room is called the X.` (`This outside location is called the X.`)
    after a look around."""
    answer = answer.strip()
    m = re.match(r"You move to the (.+?)\.", answer) or re.match(
        r"This (?:room|outside location) is called the (.+?)\.", answer
    )
    return m.group(1) if m else room


def gold_thought(action: str) -> str:
    """A short reason for a gold action, from its verb."""
    for verb, why in [
        ("focus on ", "The task is about the {}, so I focus on it."),
        ("go to ", "I need to be in the {} next."),
        ("pick up ", "I need the {}, so I pick it up."),
        ("open ", "I open the {} to get through or see inside."),
        ("move ", "I move {} as the task needs."),
        ("pour ", "I pour {}."),
        ("activate ", "I turn on the {}."),
        ("deactivate ", "I turn off the {}."),
        ("look at ", "I examine the {}."),
        ("use ", "I use {}."),
        ("connect ", "I connect {}."),
        ("mix ", "I mix the {}."),
        ("read ", "I read the {}."),
    ]:
        if action.startswith(verb):
            return why.format(action[len(verb) :])
    if action == "look around":
        return "I look around to see what is here."
    if action.startswith("wait"):
        return "I wait for the process to go on."
    if action.isdigit():
        return f"The action was ambiguous; I choose option {action}."
    return f"Next I {action}."


# Each instance is a JVM of 150-350 MB: at most 64 by default (--max-instances).
app = build_app("SciWorld", SciWorldEnv, max_instances=64)
add_openenv(app, "sciworld")  # and OpenEnv's WebSocket sessions, HTTP endpoints and task API


@app.get("/action_hint")
async def action_hint(id: int):
    return await app.state.table.call(id, "action_hint")


@app.get("/goals")
async def goals(id: int):
    return await app.state.table.call(id, "goals")


@app.get("/task_description")
async def task_description(id: int):
    return await app.state.table.call(id, "get_task_description")


@app.get("/detail")
async def detail(id: int):
    return await app.state.table.call(id, "detail")


if __name__ == "__main__":
    import sys

    if "--splits" in sys.argv:  # the data_idx ranges that envs/tasks.py hard-codes
        for split, ranges in split_ranges().items():
            print(f'"{split}": {ranges},')
    else:
        serve(app, description="ScienceWorld environment server (AgentGym protocol)")
