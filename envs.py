"""Environments as the agent sees them: server processes, an HTTP client, a concurrent pool, splits.

Where it sits: `agent.py` rolls out episodes through an `EnvPool`; the pool talks HTTP to an
environment server (`servers/<env>.py`, or any AgentGym server given by URL). AgentGym-RL's
Environment module (paper section 2): each environment is a separate service, so that
environment code never blocks or crashes the learner.

    EnvServer   start `python -m servers.<env>` on a free loopback port, wait until it answers,
                stop it at exit (also on Ctrl-C, SIGTERM or an exception; the child also dies
                with its parent), restart it if it crashed.
    EnvClient   the protocol (/create /reset /step /observation /close) with timeouts, in the
                dialect of AgentGym's client for the environment (every server here accepts it),
                and every answer read into one shape: AgentGym's answers lack `available_actions`,
                so they are read from the observation text where it lists them.
                `expert(iid)` asks the server's expert for its next action (POST /expert,
                docs/experts.md): the trainer's call, never made on the agent's path.
    EnvPool     many instances stepped together: where the server offers `/reset_batch` and
                `/step_batch` (every server here), one HTTP round trip per turn for the whole batch;
                otherwise (AgentGym's servers) one round trip per live episode per turn, all in
                flight at once on a thread pool. Connections are kept alive either way (one
                `requests.Session` per client). A failed request or batch item ends that episode
                with `error` set (the trainer leaves such episodes out); the instance it drops is
                closed on the server, so that failures never leak instances (JVMs, browsers).
    open_pool   a pool on a fresh local server, or on `--url` after checking that it answers.
    ENVS        per environment: its server module, named task splits (train and test never
                overlap), how to read an action out of a reply, the instruction given to the agent.
"""

import atexit
import ctypes
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import psutil
import requests

ROOT = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------------------------
# Per-environment facts
# ---------------------------------------------------------------------------------------------


def action_after_last_tag(reply: str) -> str:
    """AgentGym's BabyAI/TextCraft/SciWorld client: the text after the last `Action:`, on its line."""
    text = reply.split("Action:")[-1] if "Action:" in reply else reply
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[0].strip() if lines else ""


def babyai_action(reply: str) -> str:
    """AgentGym's BabyAI client also strips every character outside [A-Za-z0-9, ]."""
    return re.sub(r"[^A-Za-z0-9, ]", "", action_after_last_tag(reply))


def whole_reply(reply: str) -> str:
    """Servers that parse the reply themselves (Deep Search tags, WebArena's fenced block)."""
    return reply


def react_reply(thought: str, action: str) -> str:
    """A reply in AgentGym's ReAct format, which `action_after_last_tag` reads back to `action`."""
    return f"Thought: {thought}\nAction: {action}" if thought else f"Action: {action}"


def search_r1_reply(thought: str, action: str) -> str:
    """Deep Search's reply as its instruction asks (Search-R1): reasoning in <think>, then the tag."""
    return f"<think> {thought} </think>\n{action}" if thought else action


def webarena_reply(thought: str, action: str) -> str:
    """WebArena's reply as its instruction asks: the reasoning, then the action in a fenced block
    (the expert's action already is one: ```click [12]```)."""
    return f"{thought} In summary, the next action I will perform is {action}".strip()


def babyai_actions(observation: str, episode_actions: list[str] | None) -> list[str] | None:
    """BabyAI's observation lists the available actions: AgentGym's server as the last line,
    `Available actions: ["turn left", "go to red ball 1", ...]`, this project's as
    `Available actions: turn left, go to red ball 1, ....`"""
    lines = [ln for ln in observation.splitlines() if ln.startswith("Available actions:")]
    if not lines:
        return None
    listed = lines[-1].split(":", 1)[1].strip()
    if listed.startswith("["):
        try:
            return [str(a) for a in json.loads(listed)]
        except ValueError:
            listed = listed.strip("[]").replace('"', "")
    return [a.strip() for a in listed.rstrip(".").split(",") if a.strip()]


CRAFT_COMMAND = re.compile(r"craft (\d+) (.+?) using (.+)")
AMOUNT = re.compile(r"(\d+) (.+)")


def textcraft_actions(observation: str, episode_actions: list[str] | None) -> list[str] | None:
    """TextCraft's crafting commands (the first observation; later ones such as `Got 2 bamboo.` do
    not repeat them, so the episode keeps its list) define what can be done: `get N x` for every
    ingredient no shown command makes, at each amount a command asks; every shown command with a
    kind (`planks`) filled by each shown item of that kind (`oak planks`, at most 3); `inventory`."""
    if "Crafting commands:" not in observation:
        return episode_actions
    block = observation.split("Crafting commands:", 1)[1].split("Goal:", 1)[0]
    recipes = []  # (count made, item, [(amount, ingredient)])
    for line in block.splitlines():
        m = CRAFT_COMMAND.fullmatch(line.strip())
        parts = [AMOUNT.fullmatch(p.strip()) for p in m.group(3).split(",")] if m else []
        if m and all(parts):
            recipes.append((m.group(1), m.group(2), [(p.group(1), p.group(2)) for p in parts]))
    made = [item for _, item, _ in recipes]
    gets, crafts = {}, {}  # dicts as ordered sets
    for count, item, inputs in recipes:
        choices = []
        for n, x in inputs:
            kind = [y for y in made if y.endswith(" " + x)][:3]
            if x in made or not kind:
                choices.append([(n, x)])
                if x not in made:
                    gets[f"get {n} {x}"] = None
            else:
                choices.append([(n, y) for y in kind])
        for combo in itertools.product(*choices):
            crafts[f"craft {count} {item} using " + ", ".join(f"{n} {x}" for n, x in combo)] = None
    return list(gets) + list(crafts) + ["inventory"]


@dataclass
class EnvSpec:
    name: str
    module: str  # the server, run as `python -m <module>`
    # named task ids (data_idx): "train", "val" (every choice is made on it) and "test" (reported
    # once), pairwise disjoint; a subset "<name>-train" comes with "<name>-val" and "<name>-test"
    splits: dict[str, list[int]]
    instruction: str  # the system prompt: what the environment is and how to reply
    parse_action: Callable[[str], str] = action_after_last_tag
    # (thought, action) -> a reply in the format the instruction asks for, which `parse_action` (or
    # the server, for whole replies) reads back to `action`: how expert demonstrations are written.
    write_reply: Callable[[str, str], str] = react_reply
    score_scale: float = 1.0  # outcome reward = final `score` / score_scale
    success_at: float = 1.0  # an episode succeeded when its outcome reward >= this
    default_horizon: int = 20  # eval's max turns when none is given
    # How AgentGym's client for this environment shapes its requests (servers here accept it too):
    instance_key: str = "id"  # the instance's name in bodies and queries: `id`, or `env_idx`
    task_key: str = "data_idx"  # the task's name at /reset: `data_idx`, `id` or `idx`
    reset_extra: dict = field(default_factory=dict)  # more of the /reset body (WebArena's seed)
    extra_create: dict = field(default_factory=dict)  # body of POST /create
    # The available actions read from the observation text, for servers that send no
    # `available_actions` (AgentGym's): (observation, the episode's list so far) -> list or None.
    actions_from_text: Callable[[str, list[str] | None], list[str] | None] | None = None


def babyai_tasks(levels: list[int], seeds: range) -> list[int]:
    """data_idx of AgentGym levels (1-based, as in servers/babyai.py LEVELS) x seeds."""
    return [seed * 40 + (level - 1) for seed in seeds for level in levels]


# The CPU demo's task set (docs/tiny-demo.md): BabyAI-GoToRedBall-v0, GoToObjS6 and GoToLocalS8N7,
# AgentGym's levels 2, 4 and 5. Seeds below 10000 train, seeds from 10000 test.
BABYAI_DEMO_LEVELS = [2, 4, 5]
# The ScalingInter study's task set (docs/scaling-inter.md): GoToDoor, GoToObjDoor and
# OpenDoorLoc, AgentGym's levels 10, 11 and 14. The target is often out of view or behind other
# objects, so turns spent looking around pay: on the test split random valid actions succeed
# 11% of the time within 1 turn, 20% within 2, 28% within 3, 34% within 4, 48% within 8 and 64%
# within 16 (benchmarks/horizon_random.py).
BABYAI_HORIZON_LEVELS = [10, 11, 14]
# A mission-heavy set (docs/gigpo.md, benchmarks/gigpo_compare.py --split mission): GoToLocalS8N7 and
# PickupDistDebug, levels 5 and 20, where the mission names one of several objects (by colour and
# type, or by one of them).
BABYAI_MISSION_LEVELS = [5, 20]
# A ScalingInter set where the horizon binds both ways (docs/scaling_inter/tasks.md,
# benchmarks/horizon_tasks.py): GoToRedBlueBall, GoToSeqS5R2, UnlockLocalDist and
# OpenRedBlueDoorsDebug, levels 9, 8, 25 and 15, whose expert solutions take a median of 1, 4, 5
# and 7 of the server's actions (p90 3, 8, 11, 9; the set's p90 9). Short horizon 3 (the expert
# solves 42% of the set within it, none of OpenRedBlueDoorsDebug), long 18 (2x the set's p90, where
# gains saturate: arXiv 2510.01132). Val seeds 10200-10499, test 10000-10199: 800 test tasks.
BABYAI_BINDS_LEVELS = [9, 8, 25, 15]

SPLIT_OF_FIVE = {"train": (0, 1, 2), "val": (3,), "test": (4,)}  # task i's split by i % 5

ENVS: dict[str, EnvSpec] = {
    "babyai": EnvSpec(
        name="babyai",
        module="servers.babyai",
        splits={
            # every set: seeds 0-9999 train, 10200-10299 validate (choose on), 10000-10199 test
            "train": babyai_tasks(BABYAI_DEMO_LEVELS, range(0, 10000)),
            "val": babyai_tasks(BABYAI_DEMO_LEVELS, range(10200, 10300)),
            "test": babyai_tasks(BABYAI_DEMO_LEVELS, range(10000, 10200)),
            "horizon-train": babyai_tasks(BABYAI_HORIZON_LEVELS, range(0, 10000)),
            "horizon-val": babyai_tasks(BABYAI_HORIZON_LEVELS, range(10200, 10300)),
            "horizon-test": babyai_tasks(BABYAI_HORIZON_LEVELS, range(10000, 10200)),
            "mission-train": babyai_tasks(BABYAI_MISSION_LEVELS, range(0, 10000)),
            "mission-val": babyai_tasks(BABYAI_MISSION_LEVELS, range(10200, 10300)),
            "mission-test": babyai_tasks(BABYAI_MISSION_LEVELS, range(10000, 10200)),
            "all-train": babyai_tasks(list(range(1, 41)), range(0, 10000)),
            "all-val": babyai_tasks(list(range(1, 41)), range(10200, 10210)),
            "all-test": babyai_tasks(list(range(1, 41)), range(10000, 10010)),
            "binds-train": babyai_tasks(BABYAI_BINDS_LEVELS, range(0, 10000)),
            "binds-val": babyai_tasks(BABYAI_BINDS_LEVELS, range(10200, 10500)),
            "binds-test": babyai_tasks(BABYAI_BINDS_LEVELS, range(10000, 10200)),
        },
        instruction=(
            "You are an agent in a grid world. Each turn you see the objects in view, what is in "
            "front of you, what you carry, the available actions and your goal. Reply with one of "
            "the available actions, as `Action: <action>`."
        ),
        parse_action=babyai_action,
        actions_from_text=babyai_actions,
        success_at=1e-6,  # BabyAI rewards success with 1 - 0.9 * steps / budget > 0
        default_horizon=20,
    ),
    "searchqa": EnvSpec(
        name="searchqa",
        module="servers.searchqa",
        # The offline fictional encyclopedia (servers/searchqa_data.py, seed 0): 3,000 questions,
        # question i has i % 3 + 1 hops; the last 600 ask only about entities no training
        # question names. Questions 2100-2399 validate. With real data (--qa), data_idx indexes
        # its questions instead.
        splits={
            "train": list(range(0, 2100)),
            "val": list(range(2100, 2400)),
            "test": list(range(2400, 3000)),
            "train-1hop": list(range(0, 2100, 3)),
            "val-1hop": list(range(2100, 2400, 3)),
            "test-1hop": list(range(2400, 3000, 3)),
        },
        instruction=(
            "Answer the given question. You may first reason inside <think> and </think>. If you "
            "lack some knowledge, call the search engine with <search> query </search>; it returns "
            "the top passages between <information> and </information>. Search as many times as "
            "you need. When you know the answer, give it inside <answer> and </answer>, with no "
            "explanation, for example <answer> Paris </answer>. Each reply holds one search or "
            "one answer."
        ),
        parse_action=whole_reply,  # the server reads the tags
        write_reply=search_r1_reply,
        success_at=1.0,
        default_horizon=10,
        # AgentGym's Deep Search client: /create {"id": 0} answers the bare instance, which is
        # `env_idx` from then on, and at /reset `id` names the question.
        instance_key="env_idx",
        task_key="id",
        extra_create={"id": 0},
    ),
    "textcraft": EnvSpec(
        name="textcraft",
        module="servers.textcraft",
        # data_idx -> goal item, sorted by crafting depth (servers/textcraft.py GOALS, 544 items):
        # depth 1 is 0-124, depth 2 125-415, depth 3 416-532, depth 4 533-543 (counted from GOALS;
        # tests/test_textcraft.py checks these numbers). Of every 5 goals, the 4th validates
        # and the 5th is held out for testing.
        splits={split: [i for i in range(544) if i % 5 in r] for split, r in SPLIT_OF_FIVE.items()}
        | {f"depth1-{split}": [i for i in range(125) if i % 5 in r] for split, r in SPLIT_OF_FIVE.items()},
        instruction=(
            "You are given a few crafting commands (Minecraft recipes) and a goal item to craft. "
            "Each turn, reply with one command, as `Action: <command>`. The commands are "
            "`get N item` (only items no recipe makes), `craft N item using N a, N b` (exactly the "
            "amounts of one recipe; where a recipe names a kind such as `planks`, use an item of "
            "that kind, e.g. `oak planks`) and `inventory`. You succeed when the goal item is in "
            "your inventory."
        ),
        parse_action=action_after_last_tag,
        actions_from_text=textcraft_actions,
        success_at=1.0,
        default_horizon=30,
    ),
    "sciworld": EnvSpec(
        name="sciworld",
        module="servers.sciworld",
        # ScienceWorld's own train/dev/test variations as data_idx [start, stop) ranges, one per
        # task, over AgentGym's flat list of 4,639 (task, variation) pairs (servers/sciworld.py
        # GAMES); printed by `python -m servers.sciworld --splits`, which reads its TASKS table
        # (checked against the jar by tests/test_sciworld.py). No test variation is trained on;
        # "val" is ScienceWorld's dev.
        splits={
            split: [i for a, b in ranges for i in range(a, b)]
            for split, ranges in {
                "train": [
                    (0, 14),
                    (30, 44),
                    (60, 74),
                    (90, 104),
                    (120, 390),
                    (660, 878),
                    (1096, 1246),
                    (1396, 1406),
                    (1416, 1426),
                    (1436, 1886),
                    (2336, 2636),
                    (2936, 3086),
                    (3236, 3386),
                    (3536, 3686),
                    (3836, 3986),
                    (4136, 4152),
                    (4168, 4186),
                    (4204, 4222),
                    (4240, 4302),
                    (4365, 4427),
                    (4490, 4552),
                    (4615, 4621),
                    (4629, 4633),
                ],
                "val": [
                    (14, 21),
                    (44, 51),
                    (74, 81),
                    (104, 111),
                    (390, 525),
                    (878, 987),
                    (1246, 1321),
                    (1406, 1411),
                    (1426, 1431),
                    (1886, 2111),
                    (2636, 2786),
                    (3086, 3161),
                    (3386, 3461),
                    (3686, 3761),
                    (3986, 4061),
                    (4152, 4160),
                    (4186, 4195),
                    (4222, 4231),
                    (4302, 4333),
                    (4427, 4458),
                    (4552, 4583),
                    (4621, 4624),
                    (4633, 4635),
                ],
                "test": [
                    (21, 30),
                    (51, 60),
                    (81, 90),
                    (111, 120),
                    (525, 660),
                    (987, 1096),
                    (1321, 1396),
                    (1411, 1416),
                    (1431, 1436),
                    (2111, 2336),
                    (2786, 2936),
                    (3161, 3236),
                    (3461, 3536),
                    (3761, 3836),
                    (4061, 4136),
                    (4160, 4168),
                    (4195, 4204),
                    (4231, 4240),
                    (4333, 4365),
                    (4458, 4490),
                    (4583, 4615),
                    (4624, 4629),
                    (4635, 4639),
                ],
            }.items()
        }
        # An easier slice for a small model's short horizon (docs/paper-table.md): the four find-*
        # tasks (4-1 to 4-4: find a living thing, a non-living thing, a plant, an animal, focus on
        # it and move it to a box), whose gold paths are short; the tasks interleaved, so that the
        # first n of a split cover all four.
        | {
            f"find-{split}": [i for group in zip(*(range(a, b) for a, b in ranges)) for i in group]
            for split, ranges in {
                "train": [(2936, 3086), (3236, 3386), (3536, 3686), (3836, 3986)],
                "val": [(3086, 3161), (3386, 3461), (3686, 3761), (3986, 4061)],
                "test": [(3161, 3236), (3461, 3536), (3761, 3836), (4061, 4136)],
            }.items()
        },
        instruction=(
            "You are an agent in ScienceWorld, a text simulation of a house with rooms, objects, "
            "substances, plants and animals, where you carry out an elementary science task. "
            "Each turn you see the result of your last action. Reply with one action, as "
            "`Action: <action>`. Actions: look around, look at OBJ, look in OBJ, read OBJ, go to "
            "LOC, open OBJ, close OBJ, pick up OBJ, put down OBJ, move OBJ to OBJ, pour OBJ in OBJ, "
            "dunk OBJ in OBJ, mix OBJ, activate OBJ, deactivate OBJ, use OBJ on OBJ, connect OBJ "
            "to OBJ, disconnect OBJ, eat OBJ, flush OBJ, focus on OBJ, wait, wait1, inventory, "
            "task, check valid actions. `focus on` marks the object the task is about: focusing "
            "on a wrong one fails the task. When asked to choose among ambiguous objects, reply "
            "with the number."
        ),
        parse_action=action_after_last_tag,
        score_scale=100.0,  # the server's `score` is ScienceWorld's 0-100
        success_at=1.0,
        default_horizon=30,
    ),
    "webarena": EnvSpec(
        name="webarena",
        module="servers.webarena",
        # data_idx indexes the 35 offline tasks of servers/webarena_tasks/ sorted by task_id (shop
        # and forum; string, URL and page-content evaluators); of every five, the 4th validates and
        # the 5th is held out for testing.
        splits={split: [i for i in range(35) if i % 5 in r] for split, r in SPLIT_OF_FIVE.items()},
        instruction=(  # WebArena's system prompt (Zhou et al., 2023), shortened
            "You are an autonomous intelligent agent tasked with navigating a web browser. You will be "
            "given web-based tasks. Each turn you see the open tabs, the current page's accessibility "
            "tree (each element as [id] role 'name'), its URL, the objective and your previous action.\n"
            "The actions you can perform:\n"
            "`click [id]`: click the element with that id.\n"
            "`type [id] [content] [press_enter_after=0|1]`: type the content into the field with that "
            "id; Enter is pressed after typing unless press_enter_after is 0.\n"
            "`hover [id]`: hover over the element.\n"
            "`press [key_comb]`: press a key combination (e.g. Ctrl+v).\n"
            "`scroll [direction=down|up]`: scroll the page.\n"
            "`new_tab`, `tab_focus [tab_index]`, `close_tab`: open, switch to, or close a tab.\n"
            "`goto [url]`, `go_back`, `go_forward`: navigate.\n"
            "`stop [answer]`: finish; put the answer in the brackets if the objective asks for one, "
            "or N/A if the task is impossible.\n"
            "Issue one action at a time, valid for the current page, and end your reply with it inside "
            'a ``` fenced block, e.g. "In summary, the next action I will perform is ```click [1234]```".'
        ),
        parse_action=whole_reply,  # the server reads the first fenced block
        write_reply=webarena_reply,
        success_at=1.0,
        default_horizon=15,
        # AgentGym's WebArena client: the instance is `env_idx`, /reset takes {env_idx, seed, idx}
        # (`idx` names the config file idx.json: the same task as data_idx for ids 0..n-1).
        instance_key="env_idx",
        task_key="idx",
        reset_extra={"seed": 0},
    ),
}


# ---------------------------------------------------------------------------------------------
# Server process
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the child, before exec: ask Linux to SIGTERM us when the parent dies (no orphans)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _exit_on_sigterm():
    """Turn SIGTERM into SystemExit so that atexit handlers (which stop servers) run."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (a server's JVMs, browsers)."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


class EnvServer:
    """`python -m <module> --port P` as a child process on loopback."""

    def __init__(
        self,
        module: str,
        port: int | None = None,
        startup_timeout: float = 120.0,
        log_path: str | None = None,
        args: list[str] | None = None,
    ):
        self.module, self.port, self.startup_timeout = module, port, startup_timeout
        self.log_path, self.args = log_path, list(args or [])  # args: e.g. ["--max-instances", "8"]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "EnvServer":
        self.port = self.port or free_port()
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "--port", str(self.port), *self.args],
            cwd=ROOT,
            stdout=log,
            stderr=log if self.log_path else subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        if log is not subprocess.DEVNULL:
            log.close()
        atexit.register(self.stop)
        _exit_on_sigterm()
        deadline = time.time() + self.startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.module} exited with code {self.proc.returncode} while "
                    f"starting (log: {self.log_path or 'not kept'})"
                )
            try:
                requests.get(self.url + "/", timeout=2)
                return self
            except requests.RequestException:
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"{self.module} did not answer on {self.url} within {self.startup_timeout}s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # the server closes its instances (and ends itself if that hangs)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:  # never expected: take its children with it
                children = _descendants(self.proc.pid)
                self.proc.kill()
                self.proc.wait()
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        self.proc = None
        atexit.unregister(self.stop)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------------------------
# Client and pool
# ---------------------------------------------------------------------------------------------


def read_answer(
    answer, spec: "EnvSpec | None", episode_actions: list[str] | None, at_reset: bool = False
) -> dict:
    """An answer of either dialect in the one shape the agent reads: a dict with `observation`,
    `reward`, `done` and, where they can be known, `available_actions`.

    AgentGym's Deep Search server answers /reset with the observation string alone; its WebArena
    server says `terminated` for `done`; its SciWorld server sends `task_description` beside the
    first `observation`, which its client joins with a newline; none sends `available_actions`,
    which `spec.actions_from_text` then reads from the observation text."""
    out = {"observation": answer, "reward": 0.0, "done": False} if isinstance(answer, str) else dict(answer)
    if "done" not in out and "terminated" in out:
        out["done"] = bool(out["terminated"])
    if at_reset and out.get("task_description"):
        out["observation"] = f"{out['task_description']}\n{out['observation']}"
    if "available_actions" not in out and spec is not None and spec.actions_from_text is not None:
        found = spec.actions_from_text(str(out.get("observation", "")), episode_actions)
        if found:
            out["available_actions"] = found
    return out


class EnvClient:
    """The protocol for one instance slot on one server, in the dialect of AgentGym's client for
    `spec`'s environment (`id` + `data_idx` for BabyAI, TextCraft, SciWorld; `env_idx` for Deep
    Search and WebArena), which AgentGym's servers and every server here understand. Without a
    spec: `id` + `data_idx`."""

    def __init__(self, url: str, timeout: float = 60.0, spec: "EnvSpec | None" = None):
        self.url, self.timeout, self.spec = url.rstrip("/"), timeout, spec
        self.key = spec.instance_key if spec else "id"
        self.session = requests.Session()
        self.episode_actions: list[str] | None = None  # kept across an episode's answers

    def _post(self, path: str, body: dict):
        r = self.session.post(self.url + path, json=body, timeout=self.timeout)
        if r.status_code >= 400:
            raise RuntimeError(f"POST {path} -> {r.status_code}: {r.text[:500]}")
        out = r.json()
        if isinstance(out, dict) and "error" in out and "observation" not in out:
            raise RuntimeError(f"POST {path}: {out['error']}")  # AgentGym servers answer 200 + error
        return out

    def _read(self, answer, at_reset: bool = False) -> dict:
        out = read_answer(answer, self.spec, self.episode_actions, at_reset)
        self.episode_actions = out.get("available_actions")
        return out

    def create(self, **body) -> int:
        out = self._post("/create", body)
        return out if isinstance(out, int) else out.get("id", out.get("env_idx"))  # bare: Deep Search

    def reset_body(self, iid: int, data_idx: int) -> dict:
        task_key = self.spec.task_key if self.spec else "data_idx"
        extra = self.spec.reset_extra if self.spec else {}
        return {self.key: iid, task_key: data_idx, **extra}

    def step_body(self, iid: int, action: str) -> dict:
        return {self.key: iid, "action": action}

    def reset(self, iid: int, data_idx: int) -> dict:
        self.episode_actions = None
        return self._read(self._post("/reset", self.reset_body(iid, data_idx)), at_reset=True)

    def step(self, iid: int, action: str) -> dict:
        return self._read(self._post("/step", self.step_body(iid, action)))

    def observation(self, iid: int):
        r = self.session.get(self.url + "/observation", params={self.key: iid}, timeout=self.timeout)
        r.raise_for_status()
        return r.json()

    def expert(self, iid: int) -> dict:
        """The server's expert's next action for this instance: {"action", "thought", ...}."""
        return self._post("/expert", {self.key: iid})

    def close(self, iid: int, timeout: float | None = None) -> None:
        try:
            r = self.session.post(self.url + "/close", json={self.key: iid}, timeout=timeout or self.timeout)
            r.close()
        except requests.RequestException:
            pass  # closing is best effort: the server may already be gone


class EnvPool:
    """`size` instances of one environment, reset and stepped concurrently.

    `url` is a running server (ours or AgentGym's); or give `server`, an `EnvServer` the pool may
    restart when it crashed. A request that fails ends that episode (done, reward 0, `error` set)
    instead of the whole batch; the instance is created afresh at its next reset.

    `batched`: True sends each turn's resets and steps as one `/reset_batch` or `/step_batch`
    request, False one request per instance; None (the default) asks the server once, at the first
    reset, whether it has the batch endpoints (an empty batch: `[]` back, or AgentGym's 404).
    """

    def __init__(
        self,
        url: str | None = None,
        size: int = 1,
        server: EnvServer | None = None,
        timeout: float = 60.0,
        spec: EnvSpec | None = None,
        create: dict | None = None,
        batched: bool | None = None,
    ):
        self.server, self.batched = server, batched
        self.url = url or server.url
        self.timeout, self.create_body = timeout, {**(spec.extra_create if spec else {}), **(create or {})}
        self.clients = [EnvClient(self.url, timeout, spec) for _ in range(size)]  # one session each
        self.ids: list[int | None] = [None] * size
        self.executor = ThreadPoolExecutor(max_workers=min(64, max(1, size)))
        self.session = requests.Session()  # the batch requests' keep-alive connection

    def __len__(self):
        return len(self.clients)

    def _failed(self, slot: int, e) -> dict:
        """End this slot's episode with an error; drop its instance (recreated at the next reset)
        and free it on the server (if it is still there)."""
        dropped, self.ids[slot] = self.ids[slot], None
        if dropped is not None:
            self.clients[slot].close(dropped, timeout=5.0)
        return {
            "observation": f"[environment error: {e}]",
            "reward": 0.0,
            "score": 0.0,
            "done": True,
            "error": str(e),
        }

    def _call(self, slot: int, fn: Callable[[], dict]) -> dict:
        try:
            return fn()
        except (requests.RequestException, RuntimeError, ValueError) as e:
            return self._failed(slot, e)

    def has_batch_endpoints(self) -> bool:
        """Whether the server answers `/reset_batch` (asked once: an empty batch)."""
        if self.batched is None:
            try:
                r = self.session.post(self.url + "/reset_batch", json=[], timeout=self.timeout)
                self.batched = r.status_code == 200 and r.json() == []
            except (requests.RequestException, ValueError):
                self.batched = False
        return self.batched

    def _batch(self, path: str, slots: list[int], bodies: list[dict], at_reset: bool = False) -> list[dict]:
        """One request for all `slots`; each answer read by its slot's client, in order."""
        try:
            r = self.session.post(self.url + path, json=bodies, timeout=self.timeout)
            if r.status_code >= 400:
                raise RuntimeError(f"POST {path} -> {r.status_code}: {r.text[:500]}")
            answers = r.json()
            if not isinstance(answers, list) or len(answers) != len(bodies):
                raise RuntimeError(f"POST {path}: expected a list of {len(bodies)} answers")
        except (requests.RequestException, RuntimeError, ValueError) as e:
            return [self._failed(slot, e) for slot in slots]
        out = []
        for slot, a in zip(slots, answers):
            if isinstance(a, dict) and "error" in a and "observation" not in a:
                out.append(
                    self._failed(slot, RuntimeError(f"POST {path} -> {a.get('status')}: {a['error']}"))
                )
                continue
            client = self.clients[slot]
            if at_reset:
                client.episode_actions = None
            out.append(client._read(a, at_reset))
        return out

    def _reset_one(self, slot: int, data_idx: int) -> dict:
        client = self.clients[slot]
        if self.ids[slot] is None:
            self.ids[slot] = client.create(**self.create_body)
        return client.reset(self.ids[slot], data_idx)

    def reset(self, slots: list[int], data_idxs: list[int]) -> list[dict]:
        if self.server is not None and not self.server.alive():
            self.server.restart()  # a crashed server: start it again, instances are gone with it
            self.ids = [None] * len(self.ids)
        if not self.has_batch_endpoints():
            return list(
                self.executor.map(
                    lambda sd: self._call(sd[0], lambda: self._reset_one(*sd)), zip(slots, data_idxs)
                )
            )
        missing = [s for s in slots if self.ids[s] is None]  # creates stay one request each
        created = dict(
            zip(missing, self.executor.map(lambda s: self._call(s, lambda: self._create(s)), missing))
        )
        out: dict[int, dict] = {s: r for s, r in created.items() if r is not None}  # the failed creates
        todo = [(s, d) for s, d in zip(slots, data_idxs) if s not in out]
        answers = self._batch(
            "/reset_batch",
            [s for s, _ in todo],
            [self.clients[s].reset_body(self.ids[s], d) for s, d in todo],
            at_reset=True,
        )
        out.update(zip([s for s, _ in todo], answers))
        return [out[s] for s in slots]

    def _create(self, slot: int) -> None:
        self.ids[slot] = self.clients[slot].create(**self.create_body)

    def step(self, slots: list[int], actions: list[str]) -> list[dict]:
        if self.has_batch_endpoints():
            out = {
                s: self._failed(s, RuntimeError("no instance: reset first"))
                for s in slots
                if self.ids[s] is None
            }
            todo = [(s, a) for s, a in zip(slots, actions) if s not in out]  # (a None id would fail them all)
            answers = self._batch(
                "/step_batch",
                [s for s, _ in todo],
                [self.clients[s].step_body(self.ids[s], a) for s, a in todo],
            )
            out.update(zip([s for s, _ in todo], answers))
            return [out[s] for s in slots]
        return list(
            self.executor.map(
                lambda sa: self._call(sa[0], lambda: self.clients[sa[0]].step(self.ids[sa[0]], sa[1])),
                zip(slots, actions),
            )
        )

    def expert(self, slots: list[int]) -> list[dict]:
        """The expert's next action for each slot's episode (POST /expert, all in flight at once):
        {"action", "thought", ...}, or an answer with `error` set that ends that episode, as a
        failed step does. For the trainer (demonstrations, relabelling); the agent never asks."""

        def ask(slot: int) -> dict:
            if self.ids[slot] is None:
                return self._failed(slot, RuntimeError("no instance: reset first"))
            return self._call(slot, lambda: self.clients[slot].expert(self.ids[slot]))

        return list(self.executor.map(ask, slots))

    def close(self) -> None:
        for slot, iid in enumerate(self.ids):
            if iid is not None:
                self.clients[slot].close(iid)
        self.ids = [None] * len(self.ids)
        self.session.close()
        self.executor.shutdown(wait=False)


def check_server(url: str, timeout: float = 10.0) -> None:
    """A clear error, before anything else runs, when nothing answers at `url`."""
    try:
        r = requests.get(url.rstrip("/") + "/", timeout=timeout)
    except requests.RequestException as e:
        raise RuntimeError(
            f"no environment server answers at {url} ({type(e).__name__}); start one "
            "(e.g. python -m servers.babyai --port 36001) or leave out --url"
        ) from None
    if r.status_code >= 500:
        raise RuntimeError(f"the environment server at {url} answers GET / with {r.status_code}")


def server_url(url: str, rank: int = 0) -> str | None:
    """The environment server of process `rank` from an entry point's `--url`: a comma-separated
    list of running servers, every one checked first (a dead one is a clear error before anything
    else runs), of which process i of N (`accelerate launch`) uses the (i mod count)-th; None (an
    empty `--url`): `open_pool` starts a local server."""
    urls = [u for u in url.split(",") if u]
    for u in urls:
        check_server(u)
    return urls[rank % len(urls)] if urls else None


def open_pool(
    env: str, size: int, url: str | None = None, log_path: str | None = None, create: dict | None = None
) -> EnvPool:
    """A pool for `env`: on the server at `url` if given (checked first), else on a fresh local
    server process. `create`: extra fields of POST /create (e.g. BabyAI's {"render": true})."""
    spec = ENVS[env]
    if url:
        check_server(url)
        return EnvPool(url=url, size=size, spec=spec, create=create)
    server = EnvServer(spec.module, log_path=log_path).start()
    return EnvPool(server=server, size=size, spec=spec, create=create)


def close_pool(pool: EnvPool) -> None:
    pool.close()
    if pool.server is not None:
        pool.server.stop()
