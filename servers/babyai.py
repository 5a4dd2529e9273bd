"""BabyAI as text: the real BabyAI levels of `minigrid`, served with the AgentGym protocol.

Where it sits: `envs/process.py` starts this file as a subprocess (`python -m servers.babyai --port P`)
and talks to it over HTTP; nothing here knows about models or torch.

Task ids follow AgentGym: `data_idx` -> level `LEVELS[data_idx % 40]` (AgentGym's level 1..40)
with seed `data_idx // 40`. The observation describes what the agent sees (each visible object
with how far ahead and to the side it is), what is in front of it, what it carries, the list of
available actions, and last the goal. Besides the primitive moves, the actions include high-level
ones (`go to red ball 1`, `pickup red ball 1`, `go through blue door 1`, `toggle and go through
blue door 1`) that this server carries out by planning a shortest path (breadth-first search over
position and heading). Every primitive step counts against the level's own step budget; the
episode ends on success (reward 1 - 0.9 * steps / budget, as BabyAI gives it) or when the budget
is spent. `score` is the reward so far, which AgentGym's client uses as the episode's reward.

Pictures, for people (off by default, so training pays nothing): an instance created with
`POST /create {"render": true}` adds `frame`, the real minigrid frame of the whole grid (the
agent's field of view highlighted) as a PNG data URL, to every /reset and /step answer;
`GET /render?id=N` returns `{"frame": ...}` for any instance. `view.py` shows them per turn.

The expert (`POST /expert`, servers/common.py; the trainer's, never the agent's): minigrid's own
BabyAIBot, which solves every level from the full state, runs on a shadow copy of the episode (the
same level and seed, replayed through every primitive step the agent took, the bot told each one,
as in its advising mode for DAgger). Its plan of primitive moves from here is simulated to the end;
the answer is the available action that gets furthest along it: one that completes the mission,
else one that reaches a state of the plan (same position, heading, load and grid), or makes the
same change to the world (a pickup, a door opened, a drop) as the plan does next, and after which
the bot's plan (told those primitives) is shorter and no slower overall; else the primitive the bot
would take now. Off the bot's path the bot replans from where the agent is (docs/experts.md).

Level generation is bounded. minigrid places the agent by rejection sampling in `while True`
loops; for some seeds no placement is ever accepted (data_idx 304514, SynthS5R2 seed 7612, spun
forever). Here one generation attempt may place at most MAX_PLACEMENTS objects (30 is the most any
level needs in 1,200 resets); past that it raises the RecursionError that minigrid's own level loop
already catches ("rare cases where rejection sampling gets stuck") and the level is drawn again from
the seed's random stream; after MAX_ATTEMPTS attempts or GEN_SECONDS the reset is a 400 that says so.
"""

import base64
import copy
import re
import struct
import time
import zlib
from collections import deque

import gymnasium as gym
import minigrid  # noqa: F401  (importing registers the BabyAI-* levels with gymnasium)
from minigrid.core.world_object import Wall
from minigrid.utils.baby_ai_bot import BabyAIBot

from servers.common import EnvError, build_app, serve
from servers.openenv import add_openenv

# AgentGym's 40 BabyAI levels, in its order (its level k is LEVELS[k - 1]). GoToObjS6 is v1 in
# current minigrid.
LEVELS = [
    "BabyAI-GoToRedBallGrey-v0",
    "BabyAI-GoToRedBall-v0",
    "BabyAI-GoToRedBallNoDists-v0",
    "BabyAI-GoToObjS6-v1",
    "BabyAI-GoToLocalS8N7-v0",
    "BabyAI-GoToObjMazeS7-v0",
    "BabyAI-GoToImpUnlock-v0",
    "BabyAI-GoToSeqS5R2-v0",
    "BabyAI-GoToRedBlueBall-v0",
    "BabyAI-GoToDoor-v0",
    "BabyAI-GoToObjDoor-v0",
    "BabyAI-Open-v0",
    "BabyAI-OpenRedDoor-v0",
    "BabyAI-OpenDoorLoc-v0",
    "BabyAI-OpenRedBlueDoorsDebug-v0",
    "BabyAI-OpenDoorsOrderN4Debug-v0",
    "BabyAI-Pickup-v0",
    "BabyAI-UnblockPickup-v0",
    "BabyAI-PickupLoc-v0",
    "BabyAI-PickupDistDebug-v0",
    "BabyAI-PickupAbove-v0",
    "BabyAI-PutNextLocalS6N4-v0",
    "BabyAI-PutNextS7N4Carrying-v0",
    "BabyAI-Unlock-v0",
    "BabyAI-UnlockLocalDist-v0",
    "BabyAI-KeyInBox-v0",
    "BabyAI-UnlockPickupDist-v0",
    "BabyAI-BlockedUnlockPickup-v0",
    "BabyAI-UnlockToUnlock-v0",
    "BabyAI-ActionObjDoor-v0",
    "BabyAI-FindObjS7-v0",
    "BabyAI-KeyCorridorS6R3-v0",
    "BabyAI-OneRoomS20-v0",
    "BabyAI-MoveTwoAcrossS8N9-v0",
    "BabyAI-SynthS5R2-v0",
    "BabyAI-SynthLoc-v0",
    "BabyAI-SynthSeq-v0",
    "BabyAI-MiniBossLevel-v0",
    "BabyAI-BossLevel-v0",
    "BabyAI-BossLevelNoUnlock-v0",
]

LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = 0, 1, 2, 3, 4, 5  # minigrid's action numbers
DIRS = [(1, 0), (0, 1), (-1, 0), (0, -1)]  # heading 0..3 -> (dx, dy): east, south, west, north
OUTSIDE = Wall()  # what the agent's view holds beyond the grid's edge (`agent_view`)
CHECK = "check available actions"
MAX_PLACEMENTS = 1000  # object placements per level-generation attempt
MAX_ATTEMPTS = 50  # level-generation attempts per reset
GEN_SECONDS = 10.0  # time for all of them
TILE = 16  # pixels per grid cell in a frame: 128 x 128 for an 8 x 8 room
SLACK = 0  # primitive steps a shortcut may add to the expert's plan
MAX_CHECKED = 4  # shortcuts the expert checks against the bot's plan per call
MAX_PUSHES = 1000  # subgoals one BabyAIBot replan may push (a few at most when it is not stuck)


def png_data_url(rgb) -> str:
    """(H, W, 3) uint8 -> "data:image/png;base64,...": a plain PNG (filter 0 on every row, zlib),
    so the server needs no image library."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def task_of(data_idx: int) -> tuple[str, int]:
    """AgentGym's mapping of a task id to (level, seed)."""
    return LEVELS[data_idx % len(LEVELS)], data_idx // len(LEVELS)


class LevelGenerationFailed(Exception):
    """minigrid could not generate the level for this seed within the bounds (not caught by it)."""


def bound_generation(env: gym.Env) -> gym.Env:
    """Wrap this level's placement and mission generation with counters (instance attributes
    shadow the class's methods; minigrid calls both through `self`)."""
    u = env.unwrapped
    place_obj, gen_mission = type(u).place_obj, type(u).gen_mission
    u._gen = {"placements": 0, "attempts": 0, "start": 0.0}

    def bounded_place_obj(*args, **kwargs):
        u._gen["placements"] += 1
        if u._gen["placements"] > MAX_PLACEMENTS:
            raise RecursionError(f"more than {MAX_PLACEMENTS} placements")  # minigrid retries the level
        return place_obj(u, *args, **kwargs)

    def bounded_gen_mission():
        g = u._gen
        g["placements"], g["attempts"] = 0, g["attempts"] + 1
        if g["attempts"] > MAX_ATTEMPTS or time.monotonic() - g["start"] > GEN_SECONDS:
            raise LevelGenerationFailed(
                f"{g['attempts'] - 1} attempts in {time.monotonic() - g['start']:.1f} s"
            )
        return gen_mission(u)

    u.place_obj, u.gen_mission = bounded_place_obj, bounded_gen_mission
    return env


def text_only(env: gym.Env) -> gym.Env:
    """Leave out minigrid's image observation, which this server never reads (it describes the view
    itself, `visible_objects`, and reads only the mission): minigrid builds it after every primitive
    step, a "go to" is several, and that is half the server's time. The env checker, which would
    reject the image-less observation, is off (`gym.make(..., disable_env_checker=True)`);
    tests/test_babyai.py checks every answer against minigrid's full observation."""
    u = env.unwrapped
    u.gen_obs = lambda: {"mission": u.mission, "direction": u.agent_dir}
    return env


def agent_view(u) -> tuple[list[list], list[list[bool]]]:
    """What minigrid's `gen_obs_grid` tells `visible_objects`, read off the grid in place instead
    of from a copy of the view cut out, rotated and masked cell by cell (half of a describe's
    time): the cell at each place (i, j) of the agent's view (i from its left, j from the
    farthest row to its own, size - 1; beyond the grid's edge a wall, as minigrid's `slice` puts
    there) and whether the agent sees it (minigrid's `process_vis`: sight spreads from the agent
    row by row, stopped by walls and closed doors)."""
    size, grid = u.agent_view_size, u.grid
    (ax, ay), (fx, fy), (rx, ry) = (tuple(map(int, v)) for v in (u.agent_pos, u.dir_vec, u.right_vec))
    cells = [[None] * size for _ in range(size)]
    for i in range(size):
        for j in range(size):
            ahead, right = size - 1 - j, i - size // 2
            x, y = ax + fx * ahead + rx * right, ay + fy * ahead + ry * right
            cells[i][j] = grid.get(x, y) if 0 <= x < grid.width and 0 <= y < grid.height else OUTSIDE
    seen = [[False] * size for _ in range(size)]
    seen[size // 2][size - 1] = True
    clear = lambda c: c is None or c.see_behind()
    for j in reversed(range(size)):
        for step, columns in ((1, range(size - 1)), (-1, reversed(range(1, size)))):  # rightwards, leftwards
            for i in columns:
                if seen[i][j] and clear(cells[i][j]):
                    seen[i + step][j] = True
                    if j > 0:
                        seen[i + step][j - 1] = seen[i][j - 1] = True
    return cells, seen


def moves(u, state: tuple[int, int, int]) -> list[tuple[tuple[int, int, int], int]]:
    """(next state, primitive) from `state` = (x, y, direction) in the unwrapped level `u`: turn
    left, turn right, and forward when the cell ahead is inside the grid and can be entered."""
    x, y, d = state
    nx, ny = x + DIRS[d][0], y + DIRS[d][1]
    out = [((x, y, (d - 1) % 4), LEFT), ((x, y, (d + 1) % 4), RIGHT)]
    if 0 <= nx < u.width and 0 <= ny < u.height:
        cell = u.grid.get(nx, ny)
        if cell is None or cell.can_overlap():
            out.append(((nx, ny, d), FORWARD))
    return out


def path_to(parents: dict, state) -> list[int]:
    """The primitives from the search's start to `state`, read back through `parents`
    (state -> (previous state, primitive), the start -> None)."""
    path = []
    while parents[state] is not None:
        state, act = parents[state]
        path.append(act)
    return path[::-1]


def normalise(action: str) -> str:
    """Lower case, only [a-z0-9, ] kept, spaces collapsed (what AgentGym's client sends)."""
    return " ".join(re.sub(r"[^a-z0-9, ]", " ", action.lower()).split())


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class BabyAIText:
    """One BabyAI episode at a time, seen and driven through text."""

    def __init__(self, render: bool = False):
        if not isinstance(render, bool):
            raise EnvError(f"render must be true or false, got {render!r}")
        self.render = render  # add `frame` to every answer
        self.levels: dict[str, gym.Env] = {}  # made once per level, reused across resets
        self.env = None
        self.actions: dict[str, list[int]] = {}  # available action -> its primitive steps
        self.last = ""
        self.score, self.done = 0.0, False
        self.task: tuple[str, int] | None = None  # (level, seed) of the episode
        self.history: list[int] = []  # the primitive steps taken this episode (for the expert)
        self.shadow_levels: dict[str, gym.Env] = {}  # the expert's own copies of the levels
        self.shadow = None  # [env, bot, steps replayed, the bot's suggestion]
        self.plan = None  # (len(history) when planned, primitives, state signatures)

    # --- the protocol ---------------------------------------------------------------------

    def reset(self, data_idx) -> dict:
        if not isinstance(data_idx, int) or data_idx < 0:
            raise EnvError(f"data_idx must be a non-negative integer, got {data_idx!r}")
        level, seed = task_of(data_idx)
        if level not in self.levels:
            self.levels[level] = text_only(bound_generation(gym.make(level, disable_env_checker=True)))
        self.env = self.levels[level]
        self.env.unwrapped._gen.update(attempts=0, start=time.monotonic())
        try:
            self.obs, _ = self.env.reset(seed=seed)
        except LevelGenerationFailed as e:
            self.env = None
            raise EnvError(
                f"minigrid could not generate level {level} with seed {seed} (data_idx "
                f"{data_idx}): {e}; use another data_idx"
            ) from None
        self.score, self.done = 0.0, False
        self.task, self.history, self.shadow, self.plan = (level, seed), [], None, None
        self.last = self.describe()
        return self.answer(0.0, category=level, seed=seed)

    def step(self, action: str) -> dict:
        act = normalise(action)  # (servers/common.py answers a step before reset or after the end)
        if act == CHECK or act.startswith("check"):
            return self.answer(0.0, note="You can take the following actions: " + ", ".join(self.actions))
        if act not in self.actions:
            return self.answer(
                0.0,
                note=f'"{act}" is not an available action; choose one of the available actions listed below.',
            )
        reward = 0.0
        for primitive in self.actions[act]:
            self.obs, r, terminated, truncated, _ = self.env.step(primitive)
            self.history.append(primitive)
            reward += float(r)
            if terminated or truncated:
                self.done = True
                break
        self.score += reward
        self.last = self.describe()
        if self.done:
            self.last = ("The task is completed. " if reward > 0 else "You ran out of steps. ") + self.last
        return self.answer(reward)

    def observation(self) -> str:
        return self.last

    def frame(self) -> str:
        """The whole grid as minigrid draws it, the agent's view highlighted, as a PNG data URL."""
        if self.env is None:
            raise EnvError("reset the instance before rendering it")
        return png_data_url(self.env.unwrapped.get_frame(highlight=True, tile_size=TILE))

    def close(self) -> None:
        for env in [*self.levels.values(), *self.shadow_levels.values()]:
            env.close()
        self.levels.clear()
        self.shadow_levels.clear()

    def answer(self, reward: float, note: str = "", **extra) -> dict:
        obs = f"{note}\n{self.last}" if note else self.last
        if self.render:
            extra["frame"] = self.frame()
        return {
            "observation": obs,
            "reward": reward,
            "score": self.score,
            "done": self.done,
            "available_actions": list(self.actions),
            **extra,
        }

    # --- what the agent sees --------------------------------------------------------------

    def visible_objects(self) -> list[dict]:
        """Objects in the agent's 7x7 view, nearest first, named `<colour> <type> <n>`."""
        u = self.env.unwrapped
        view, visible = agent_view(u)
        size = u.agent_view_size
        (ax, ay), (fx, fy), (rx, ry) = map(tuple, (u.agent_pos, u.dir_vec, u.right_vec))
        seen = []
        for i in range(size):
            for j in range(size):
                cell = view[i][j]
                if not visible[i][j] or cell is None or cell.type in ("wall", "empty", "floor", "unseen"):
                    continue
                if (i, j) == (size // 2, size - 1):  # the agent's own cell: what it carries
                    continue
                ahead, right = size - 1 - j, i - size // 2
                pos = (int(ax + fx * ahead + rx * right), int(ay + fy * ahead + ry * right))
                seen.append({"obj": cell, "pos": pos, "ahead": ahead, "right": right})
        seen.sort(key=lambda o: (abs(o["ahead"]) + abs(o["right"]), o["ahead"], o["right"]))
        counts: dict[str, int] = {}
        for o in seen:
            kind = f"{o['obj'].color} {o['obj'].type}"
            counts[kind] = counts.get(kind, 0) + 1
            o["name"] = f"{kind} {counts[kind]}"
        return seen

    def describe(self) -> str:
        u = self.env.unwrapped
        objects = self.visible_objects()
        self.actions = self.available_actions(objects)
        parts = []
        for o in objects:
            where = [plural(o["ahead"], "step") + " ahead"] if o["ahead"] else []
            if o["right"]:
                where.append(plural(abs(o["right"]), "step") + (" right" if o["right"] > 0 else " left"))
            state = ""
            if o["obj"].type == "door":
                state = " (open)" if o["obj"].is_open else " (locked)" if o["obj"].is_locked else " (closed)"
            parts.append(f"{o['name']}{state} {' and '.join(where)}")
        seen = "You see " + ", ".join(parts) + "." if parts else "You see no objects."
        front = u.grid.get(*map(int, u.front_pos))
        front_text = (
            "nothing"
            if front is None
            else "a wall"
            if front.type == "wall"
            else next(
                (o["name"] for o in objects if o["pos"] == tuple(map(int, u.front_pos))),
                f"a {front.color} {front.type}",
            )
        )
        carry = f"a {u.carrying.color} {u.carrying.type}" if u.carrying else "nothing"
        return (
            f"{seen} In front of you: {front_text}. You carry {carry}.\n"
            f"Available actions: {', '.join(self.actions)}.\nGoal: {self.obs['mission']}."
        )

    # --- the actions and their planner ----------------------------------------------------

    def available_actions(self, objects: list[dict]) -> dict[str, list[int]]:
        u = self.env.unwrapped
        front = u.grid.get(*map(int, u.front_pos))
        acts: dict[str, list[int]] = {"turn left": [LEFT], "turn right": [RIGHT]}
        if front is None or front.can_overlap():
            acts["move forward"] = [FORWARD]
        paths = self.paths_to_face({o["pos"] for o in objects})
        for o in objects:
            path = paths.get(o["pos"])
            if path is None:
                continue
            if o["obj"].type == "door":
                acts[f"go to {o['name']}"] = path
                if o["obj"].is_open:
                    acts[f"go through {o['name']}"] = path + [FORWARD, FORWARD]
                elif not o["obj"].is_locked or (
                    u.carrying and u.carrying.type == "key" and u.carrying.color == o["obj"].color
                ):
                    acts[f"toggle and go through {o['name']}"] = path + [TOGGLE, FORWARD, FORWARD]
                continue
            acts[f"go to {o['name']}"] = path
            if u.carrying is None and o["obj"].can_pickup():
                acts[f"pickup {o['name']}"] = path + [PICKUP]
        if u.carrying is not None and front is None:
            acts["drop"] = [DROP]
        if front is not None and front.type in ("door", "box"):
            acts["toggle"] = [TOGGLE]
        acts[CHECK] = []
        return acts

    def paths_to_face(self, targets: set[tuple[int, int]]) -> dict[tuple[int, int], list[int]]:
        """For each target cell, the shortest list of turns and forward moves after which the agent
        faces it: one breadth-first search over (x, y, direction) for all of them (an unreachable
        target is left out). A path is the one a search for its target alone would find: the search
        visits the states in the same order, and a state's parent is fixed when it is first seen."""
        u = self.env.unwrapped
        start = (int(u.agent_pos[0]), int(u.agent_pos[1]), int(u.agent_dir))
        parents = {start: None}
        queue, found = deque([start]), {}
        while queue and len(found) < len(targets):
            x, y, d = state = queue.popleft()
            ahead = (x + DIRS[d][0], y + DIRS[d][1])
            if ahead in targets and ahead not in found:
                found[ahead] = path_to(parents, state)
            for nxt, act in moves(u, state):
                if nxt not in parents:
                    parents[nxt] = (state, act)
                    queue.append(nxt)
        return found

    # --- the expert (POST /expert: the trainer's, never the agent's) ----------------------

    def expert(self) -> dict:
        """{"action", "thought"}: the available action that gets furthest along BabyAIBot's plan
        and after which the bot's plan (told those primitives) is no longer than before."""
        u = self.env.unwrapped
        acts, sigs, solves = self.bot_plan()
        k0 = len(self.history) - self.plan[0]  # primitives of the plan already taken
        wins, ranked = [], []
        for name, prims in self.actions.items():
            if not prims:
                continue
            sim, reward, ended = copy.deepcopy(u), 0.0, False
            for p in prims:
                _, r, terminated, truncated, _ = sim.step(p)
                reward, ended = reward + float(r), terminated or truncated
                if ended:
                    break
            if ended and reward > 0:
                wins.append((len(prims), name))  # completes the mission
            elif not ended and (rank := progress(signature(sim), sigs, k0)) > k0:
                ranked.append((-rank, len(prims), name, prims))
        if wins:
            best = min(wins)[1]
            return {"action": best, "thought": self.thought(best)}
        # A shortcut can confuse the bot (told a toggle or pickup it did not plan, it plans to undo
        # it): keep the first one after which its plan still solves the level, no slower. Its plan
        # left then shrinks at every answer, so the expert never goes round in circles.
        left = len(acts) - k0
        for _, _, name, prims in sorted(ranked)[:MAX_CHECKED]:
            after = self.plan_after(prims, limit=left)
            no_slower = not solves or len(prims) + len(after[0]) <= left + SLACK
            if after[2] and len(after[0]) < left and no_slower:
                self.plan = (len(self.history) + len(prims), *after)
                return {"action": name, "thought": self.thought(name)}
        want = acts[k0] if k0 < len(acts) else LEFT  # the bot's own next move
        best = next((a for a, prims in self.actions.items() if prims == [want]), "turn left")
        return {"action": best, "thought": self.thought(best)}

    def bot_plan(self) -> tuple[list[int], list[tuple], bool]:
        """BabyAIBot's primitive moves from the current state to the end of the episode, the state
        signature before each move and after the last, and whether they complete the mission (the
        plan is kept while the agent follows it)."""
        if self.plan is not None:
            start, acts, sigs, solves = self.plan
            taken = self.history[start:]
            if taken == acts[: len(taken)]:
                return acts, sigs, solves
        _, bot = self.shadow_state()
        self.plan = (len(self.history), *simulate(copy.deepcopy(bot), self.shadow[3]))
        return self.plan[1:]

    def plan_after(self, prims: list[int], limit: int) -> tuple[list[int], list[tuple], bool]:
        """The bot's plan after the agent took `prims` from here (the bot told each one), followed
        for at most `limit` steps (a confused bot can wander until the level's step budget)."""
        _, bot = self.shadow_state()
        bot = copy.deepcopy(bot)  # its `mission` (the shadow env) is copied with it
        suggestion = self.shadow[3]
        for p in prims:
            bot.mission.step(p)
            suggestion = self.safe_replan(bot, p)
        return simulate(bot, suggestion, limit)

    def shadow_state(self):
        """The expert's copy of this episode (same level and seed) and its BabyAIBot, brought up to
        the agent's current step by replaying the primitives taken since the last call."""
        level, seed = self.task
        if self.shadow is None:
            if level not in self.shadow_levels:
                self.shadow_levels[level] = bound_generation(gym.make(level))
            env = self.shadow_levels[level]
            env.unwrapped._gen.update(attempts=0, start=time.monotonic())
            env.reset(seed=seed)
            bot = BabyAIBot(env.unwrapped)
            self.shadow = [env, bot, 0, self.safe_replan(bot, None)]
        env, bot, n, _ = self.shadow
        for p in self.history[n:]:
            env.unwrapped.step(p)
            self.shadow[3] = self.safe_replan(bot, p)  # advising mode: the bot is told what was done
        self.shadow[2] = len(self.history)
        return env, bot

    @staticmethod
    def safe_replan(bot, taken):
        try:
            return replan(bot, taken)
        except Exception:  # the bot cannot help from here (e.g. a box was opened)
            return LEFT

    def thought(self, action: str) -> str:
        goal = f"My goal is to {self.obs['mission']}."
        words = action.split()
        obj = " ".join(words[-3:-1]) if words and words[-1].isdigit() else ""
        reasons = {
            "go to": f"The {obj} is where I need to be next, so I go to it.",
            "pickup": f"I need the {obj}, so I pick it up.",
            "go through": f"My way leads through the {obj}, so I go through it.",
            "toggle and": f"My way leads through the {obj}, so I open it and go through.",
            "turn left": "What I need is not ahead of me, so I turn left.",
            "turn right": "What I need is not ahead of me, so I turn right.",
            "move forward": "I move forward to get closer to what I need.",
            "drop": "I drop what I carry here.",
            "toggle": "I toggle what is in front of me.",
        }
        reason = next((r for k, r in reasons.items() if action.startswith(k)), "")
        return f"{goal} {reason}".strip()


class _Stack(list):
    """BabyAIBot's subgoal stack with a bound on the subgoals one replan may push: in rare states
    (UnlockToUnlock) the bot pushes and pops subgoals forever without choosing an action."""

    budget = None  # pushes left in the current replan; None outside one (a deepcopy pushes too)

    def append(self, subgoal):
        if self.budget is not None:
            self.budget -= 1
            if self.budget < 0:
                raise RecursionError("BabyAIBot replanned without end")
        super().append(subgoal)


def replan(bot, taken):
    """bot.replan(taken), raising RecursionError instead of replanning without end."""
    if not isinstance(bot.stack, _Stack):
        bot.stack = _Stack(bot.stack)
    bot.stack.budget = MAX_PUSHES
    try:
        return bot.replan(taken)
    finally:
        bot.stack.budget = None


def simulate(bot, action, limit: int | None = None) -> tuple[list[int], list[tuple], bool]:
    """Let BabyAIBot (on its own copy of the env, `bot.mission`) play from its suggestion `action`
    to the end, or for `limit` steps: (its primitives, the state signature before each and after
    the last, success)."""
    sim, acts, sigs = bot.mission, [], [signature(bot.mission)]
    steps = max(0, sim.max_steps - sim.step_count)
    try:
        for _ in range(steps if limit is None else min(steps, limit)):
            if action == sim.actions.done:
                break
            _, r, terminated, truncated, _ = sim.step(action)
            acts.append(int(action))
            sigs.append(signature(sim))
            if terminated or truncated:
                return acts, sigs, r > 0
            action = replan(bot, action)
    except Exception:  # the bot gave up (an opened box, an assertion): what it planned so far
        pass
    return acts, sigs, False


def signature(u) -> tuple:
    """A state of a minigrid env: position, heading, what it carries, and the whole grid."""
    carrying = (u.carrying.type, u.carrying.color) if u.carrying else None
    return int(u.agent_pos[0]), int(u.agent_pos[1]), int(u.agent_dir), carrying, u.grid.encode().tobytes()


def progress(sig: tuple, sigs: list[tuple], k0: int) -> int:
    """How far along a plan (its states `sigs`, now at index k0) a state `sig` is: the last plan
    index with the same state, or the first index of the plan's next world changes that `sig` has
    made too (the same load and grid, reached from any cell); k0 if neither."""
    world = sig[3:]
    best = k0
    for k in range(k0 + 1, len(sigs)):
        if sigs[k] == sig:
            best = k
        elif sigs[k][3:] == world and sigs[k - 1][3:] != world and world != sigs[k0][3:]:
            best = max(best, k)
    return best


app = build_app("BabyAI", BabyAIText, create_keys=("render",), inline_calls=True)  # (pure Python steps)
add_openenv(app, "babyai")  # and OpenEnv's WebSocket sessions, HTTP endpoints and task API


@app.get("/render")
async def render(id: int):
    return {"frame": await app.state.table.call(id, "frame")}


if __name__ == "__main__":
    serve(app, description="BabyAI text environment server (AgentGym protocol)")
