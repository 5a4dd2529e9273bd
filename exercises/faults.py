"""Problem 9 (failure modes): four short training runs, each with one planted fault. Find it from
what the run prints and writes: its alarms, the signals in metrics.jsonl, report.html.

    python -m exercises.faults run A          # ~40 s on a 2-core CPU: runs/fault_A/
    python -m exercises.faults run A B C D    # all four, one after the other
    python -m exercises.faults answer A greedy
    python -m exercises.faults list           # the diagnoses to choose from

Where it sits: beside the project, like the other problems. A run is `train.train` with GRPO on
BabyAI and the tiny policy (8 steps, 50 test tasks before and after, every 4th step's rollouts
saved with the credit each turn got), and one fault planted by replacing a piece of the loop in
this process: the configuration the run records (summary.json) is the default one, so it gives
nothing away. Which run holds which fault is stored as hashes; reading `plant` tells you what
each fault does, not which run has it. What to read, and the signals each fault moves:
docs/signals.md and docs/course.md, lesson 6.
"""

import argparse
import dataclasses
import hashlib
import sys
from contextlib import contextmanager

RUNS = "ABCD"
DIAGNOSES = {  # name -> the diagnosis, in words; four are planted, the others are not
    "greedy": "sampling has no spread: the rollouts are greedy",
    "flipped": "the advantage has the wrong sign",
    "zeroed": "the advantage never reaches the loss: it is 0 on every token",
    "misaligned": "the rewards are attached to the wrong episodes (off by one)",
    "lr": "the learning rate is far too high",
    "cut": "the replies are cut at the token limit",
    "horizon": "the horizon is too short for the tasks",
}
PLANTED = {  # sha256(f"{run}:{diagnosis}")[:16] for the fault planted in each run
    "A": "8a051ccab7606763",
    "B": "7c2ca7ac825af30c",
    "C": "3980cdf6984a907f",
    "D": "49fca8d5e34d2fe8",
}


def fingerprint(run: str, diagnosis: str) -> str:
    return hashlib.sha256(f"{run}:{diagnosis}".encode()).hexdigest()[:16]


def planted(run: str) -> str:
    """The diagnosis of the fault planted in `run`."""
    return next(d for d in DIAGNOSES if fingerprint(run, d) == PLANTED[run])


@contextmanager
def plant(fault: str):
    """Replace one piece of the loop for the duration of a run; put it back afterwards."""
    import grpo
    import train
    from algos import ALGOS

    project_algo, project_load = ALGOS["grpo"], train.load_learner

    def advantages(batch, cfg, state=None):
        if fault == "misaligned":  # each episode's reward read from the episode before it
            batch.rewards = batch.rewards.roll(1)
        grpo.advantages(batch, cfg, state)
        if fault == "flipped":
            batch.advantages = -batch.advantages
        if fault == "zeroed":
            batch.advantages = batch.advantages * 0.0

    def load_learner(*args, **kwargs):
        learner = project_load(*args, **kwargs)
        if fault == "greedy":
            learner.policy.temperature = 0.0
        return learner

    ALGOS["grpo"] = dataclasses.replace(project_algo, advantages=advantages)
    train.load_learner = load_learner
    try:
        yield
    finally:
        ALGOS["grpo"], train.load_learner = project_algo, project_load


def run(letter: str, steps: int = 8) -> dict:
    import train

    cfg = train.Config(
        algo="grpo", steps=steps, eval_episodes=50, save_rollouts_every=4, out=f"runs/fault_{letter}"
    )
    with plant(planted(letter)):
        return train.train(cfg)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="run mystery runs: runs/fault_<X>/")
    go.add_argument("runs", nargs="+", choices=list(RUNS))
    ask = sub.add_parser("answer", help="check a diagnosis")
    ask.add_argument("run", choices=list(RUNS))
    ask.add_argument("diagnosis", choices=list(DIAGNOSES))
    sub.add_parser("list", help="the diagnoses to choose from")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name, text in DIAGNOSES.items():
            print(f"{name:12s} {text}")
    elif args.command == "run":
        for letter in args.runs:
            run(letter)
            print(f"run {letter}: runs/fault_{letter}/ (report.html, metrics.jsonl); its alarms are above")
    else:
        right = fingerprint(args.run, args.diagnosis) == PLANTED[args.run]
        print(f"run {args.run}: {DIAGNOSES[args.diagnosis]}: {'right' if right else 'not this one'}")
        return 0 if right else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
