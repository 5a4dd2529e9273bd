"""Each environment as the agent sees it: its server, its named task splits, the instruction given
to the agent, how an action is read out of a reply (and how an expert's action is written as one).

Where it sits: data for `envs/__init__.py` (which re-exports it: `from envs import ENVS`). `EnvSpec`
is one environment's entry; `ENVS` holds the five. The splits are task ids (`data_idx`) on the
environment's server (`servers/<env>.py`): "train", "val" (every choice is made on it) and "test"
(reported once), pairwise disjoint (tests/test_babyai.py). The reply parsers and the action lists
read from observation text follow AgentGym's clients for each environment, so that its servers
and the ones here are spoken to alike.
"""

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Callable


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
# The ScalingInter study's task set (docs/studies/scaling-inter.md): GoToDoor, GoToObjDoor and
# OpenDoorLoc, AgentGym's levels 10, 11 and 14. The target is often out of view or behind other
# objects, so turns spent looking around pay: on the test split random valid actions succeed
# 11% of the time within 1 turn, 20% within 2, 28% within 3, 34% within 4, 48% within 8 and 64%
# within 16 (benchmarks/horizon_random.py).
BABYAI_HORIZON_LEVELS = [10, 11, 14]
# A mission-heavy set (docs/studies/gigpo.md, benchmarks/gigpo_compare.py --split mission): GoToLocalS8N7 and
# PickupDistDebug, levels 5 and 20, where the mission names one of several objects (by colour and
# type, or by one of them).
BABYAI_MISSION_LEVELS = [5, 20]
# A ScalingInter set where the horizon binds both ways (docs/scaling_inter/tasks.md):
# GoToRedBlueBall, GoToSeqS5R2, UnlockLocalDist and OpenRedBlueDoorsDebug, levels 9, 8, 25 and
# 15, whose expert solutions take a median of 1, 4, 5 and 7 of the server's actions (p90 3, 8,
# 11, 9; the set's p90 9). Short horizon 3 (the expert
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
        # An easier slice for a small model's short horizon (docs/studies/paper-table.md): the four find-*
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
