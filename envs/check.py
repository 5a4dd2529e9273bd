"""Is an environment trainable? Four checks for the faults that break learning without an error.

    python -m envs.check --url ws://127.0.0.1:8000      # any OpenEnv environment, this project's too

Where it sits: a tool beside the pool it drives (envs/openenv.py's OpenEnvPool), run on a new
environment before `train.py` is (docs/own-environment.md, "The contract"). Each check plays the
environment as the trainer would, with random actions (an available action where the observation
lists them, and now and then a reply that is no action, as a model's free text can be):

    tasks differ     distinct task ids give distinct first observations: a reset that ignores its
                     task id trains on one task, and every held-out score is that task's (tasks
                     alike at their first turn also fail it: a policy cannot tell them apart there)
    episodes end     every episode reaches `done` within --max-steps, whatever the actions: an
                     episode that never ends only stops at the horizon, so nothing the agent does
                     finishes it
    rewards in range every step reward, and every episode's outcome, lies in [--low, --high]. The
                     outcome is the trainer's (`outcome`: the last score, else the rewards' sum,
                     over the spec's score scale), and so is the success it counts (an outcome at
                     the spec's success_at: above 0 for any OpenEnv environment), so a failed
                     episode must add up to 0; advantages scale with the reward's spread
    after done       a step sent after `done` answers done with reward 0: it changes nothing

Prints one line per check and exits 0 when all four pass, 1 otherwise.
"""

import argparse
import random
import sys

from envs.openenv import OpenEnvPool, spec_of
from envs.tasks import EnvSpec

NO_ACTION = "I am not sure what to do."  # a reply that is no action, sent now and then (1 in 4)


def play(
    pool: OpenEnvPool, tasks: list[int], max_steps: int, seed: int = 0
) -> tuple[list[dict], list[list[dict]]]:
    """Each task's episode with random actions, all at once: (first answers, each episode's step answers)."""
    rng, slots = random.Random(seed), list(range(len(tasks)))
    first = pool.reset(slots, tasks)
    steps: list[list[dict]] = [[] for _ in tasks]
    live = [s for s in slots if not first[s]["done"]]
    last = dict(zip(slots, first))
    for _ in range(max_steps):
        if not live:
            break
        actions = [
            NO_ACTION if rng.random() < 0.25 else rng.choice(last[s].get("available_actions") or ["look"])
            for s in live
        ]
        for s, action, answer in zip(live, actions, pool.step(live, actions)):
            steps[s].append({**answer, "sent": action})
            last[s] = answer
        live = [s for s in live if not last[s]["done"]]
    return first, steps


def step_after_done(pool: OpenEnvPool, steps: list[list[dict]]) -> list[dict]:
    """One more step for each episode that ended, its last action sent again: the answers."""
    ended = [s for s, ep in enumerate(steps) if ep and ep[-1]["done"]]
    return pool.step(ended, [steps[s][-1]["sent"] for s in ended]) if ended else []


def outcome(answers: list[dict], spec: EnvSpec) -> tuple[float, bool]:
    """An episode's outcome reward and success from its step answers, by the trainer's rule
    (agent._record keeps the last `score`, else the rewards' sum; the rollout's end divides by
    `score_scale` and counts a success at `success_at`): tests/test_env_contract.py holds them equal."""
    rewards = [float(a.get("reward", 0.0)) for a in answers]
    score = float(answers[-1].get("score", sum(rewards))) if answers else 0.0
    reward = score / spec.score_scale
    return reward, reward >= spec.success_at


def checks(
    first: list[dict],
    steps: list[list[dict]],
    max_steps: int,
    low: float,
    high: float,
    spec: EnvSpec,
    after: list[dict],
) -> list[tuple[bool, str]]:
    """(passed, line) for each of the four checks; `spec`: the trainer's for this environment (its
    success rule); `after`: the answers to a step sent after done."""
    errors = [a["error"] for a in first + [a for ep in steps for a in ep] if a.get("error")]
    if errors:
        return [(False, f"the environment failed: {errors[0]}")]
    distinct = len({a["observation"] for a in first})
    ended = sum(bool(ep and ep[-1]["done"]) or f["done"] for f, ep in zip(first, steps))
    rewards = [a["reward"] for ep in steps for a in ep]
    outside = [r for r in rewards if not low <= r <= high]
    outcomes = [outcome(ep, spec) for ep in steps]
    outside += [r for r, _ in outcomes if not low <= r <= high]  # an episode's sum, not only its steps
    wrong_after = [a for a in after if not a["done"] or a["reward"] != 0]
    return [
        (
            distinct > 1,
            f"tasks differ: {len(first)} tasks, {distinct} distinct first observations"
            + (
                ""
                if distinct > 1
                else ": either reset ignores its task id (split and index, or seed), or the tasks part "
                "only later, which a policy cannot tell apart at its first turn: show what sets a task "
                "apart in its first observation"
            ),
        ),
        (
            ended == len(first),
            f"episodes end: {ended} of {len(first)} reached done within {max_steps} steps"
            + ("" if ended == len(first) else ": give an episode a bound (a step limit that sets done)"),
        ),
        (
            not outside,
            f"rewards in range: {len(rewards)} step rewards and {len(steps)} episodes' outcomes, "
            f"{len(outside)} outside [{low:g}, {high:g}]; {sum(ok for _, ok in outcomes)} counted a success "
            f"(an outcome of at least {spec.success_at:g}: a failed episode adds up to 0)"
            + (f", e.g. {outside[0]:g}: scale the reward into the range" if outside else ""),
        ),
        (
            not wrong_after,
            f"after done: {len(after)} steps sent after done, {len(wrong_after)} answered other than "
            "done with reward 0"
            + (f", e.g. {wrong_after[0]}: a step after done must change nothing" if wrong_after else ""),
        ),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="the OpenEnv environment, ws://host:port")
    p.add_argument(
        "--split", default="train", help="the task split to play (tasks are seeds without a task API)"
    )
    p.add_argument("--tasks", type=int, default=12, help="episodes, one per task: the split's first tasks")
    p.add_argument("--max-steps", type=int, default=100, help="steps an episode may take to end")
    p.add_argument("--low", type=float, default=0.0, help="the lowest step reward allowed")
    p.add_argument("--high", type=float, default=1.0, help="the highest step reward allowed")
    args = p.parse_args(argv)
    pool = OpenEnvPool(args.url, size=args.tasks)
    try:
        tasks = spec_of(pool.info).splits[args.split][: args.tasks]
        first, steps = play(pool, tasks, args.max_steps)
        after = step_after_done(pool, steps)
        results = checks(first, steps, args.max_steps, args.low, args.high, spec_of(pool.info), after)
    finally:
        pool.close()
    for passed, line in results:
        print(("ok    " if passed else "FAIL  ") + line)
    return 0 if all(passed for passed, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
