"""Why SciWorld's find-* episodes fail: the stage each episode reached, read from its trajectory.

Where it sits: after an evaluation on the find-* slice (eval.py's or an RL run's trajectories.jsonl),
beside the paper table's SciWorld diagnosis (docs/studies/paper-table.md). A find-* task (ScienceWorld's
tasks 4-1 to 4-4: find a living thing, a non-living thing, a plant, an animal) asks the agent to
focus on a thing of that kind, then move it to a named box. Focusing commits: on a thing of another kind the
episode ends at score 0. So every episode stops at one of these stages:

    solved                  the thing is in the box
    wrong focus             focused on a thing of another kind (the episode ended, unsolved)
    right focus, no box     focused on a right thing, then the turns ran out before the box
    focus refused           every `focus on X` was refused (X named nothing the simulator knows here)
    never tried to focus    the turns ran out while exploring
    ended otherwise         the episode ended unsolved on another action
    environment error       the episode ended on an error

    python -m diagnostics.find_failures runs/paper/sciworld/val_sft runs/paper/sciworld/val_rl_s0
"""

import argparse
import collections
import json
import os

STAGES = (
    "solved",
    "wrong focus",
    "right focus, no box",
    "focus refused",
    "never tried to focus",
    "ended otherwise",
    "environment error",
)
FOCUSED = "You focus on"  # ScienceWorld's answer to a focus it accepted


def stage(episode: dict) -> str:
    """The stage a find-* episode stopped at (one of STAGES): `episode` is a trajectories.jsonl
    record (actions, observations: the first is the task's, then one answer per action)."""
    if episode["success"]:
        return "solved"
    if episode.get("error"):
        return "environment error"
    answers = episode["observations"][1:]
    focus = [o for a, o in zip(episode["actions"], answers) if a.startswith("focus on")]
    if episode["done"]:
        last = episode["actions"][-1] if episode["actions"] else ""
        return "wrong focus" if last.startswith("focus on") else "ended otherwise"
    if any(o.startswith(FOCUSED) for o in focus):
        return "right focus, no box"
    return "focus refused" if focus else "never tried to focus"


def refused_focus(episodes: list[dict]) -> collections.Counter:
    """The `focus on X` actions the simulator refused, counted over `episodes`."""
    return collections.Counter(
        a
        for e in episodes
        for a, o in zip(e["actions"], e["observations"][1:])
        if a.startswith("focus on") and not o.startswith(FOCUSED)
    )


def read(folder: str) -> list[dict]:
    with open(os.path.join(folder, "trajectories.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def table(folders: list[str], top: int = 5) -> str:
    """A markdown table: each folder's episodes per stage (count and share), then each folder's
    most refused focus actions."""
    runs = {folder: read(folder) for folder in folders}
    lines = ["| stage | " + " | ".join(runs) + " |", "|---" + "|---:" * len(runs) + "|"]
    counts = {f: collections.Counter(stage(e) for e in eps) for f, eps in runs.items()}
    for name in STAGES:
        cells = [f"{counts[f][name]} ({100 * counts[f][name] / max(len(runs[f]), 1):.1f}%)" for f in runs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| episodes | " + " | ".join(str(len(eps)) for eps in runs.values()) + " |")
    for folder, eps in runs.items():
        refused = "; ".join(f"{a[:60]!r} x {n}" for a, n in refused_focus(eps).most_common(top))
        lines.append(f"\n{folder}: most refused focus actions: {refused}")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", help="evaluation folders, each with a trajectories.jsonl")
    p.add_argument("--top", type=int, default=5, help="refused focus actions listed per folder")
    args = p.parse_args(argv)
    print(table(args.folders, args.top))


if __name__ == "__main__":
    main()
