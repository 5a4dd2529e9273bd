"""Check a problem: your function against the project's own, case by case.

    python -m exercises.check 2              # your exercises/problem_2_grpo.py
    python -m exercises.check 2 --solution   # the project's grpo.group_advantages (it passes)
    python -m exercises.check 2 --train      # yours in the real loop: GRPO on BabyAI, tiny policy

Where it sits: reads `cases.PROBLEMS` (each problem's reference, the project's function, and its
cases), imports your stub, runs both on every case and prints the first MAX_SHOWN cases that
differ, each with what it tests, every input the function reads in full (what a case builds and
hands it too: problem 7's batch, problem 8's spec), what was expected and what came back, and
counts the rest. Exit code 0: every case agrees.
`failures(n, fn)` is the same check as a function (tests/test_exercises.py calls it).
"""

import argparse
import dataclasses
import importlib
import importlib.util
import json
import os
import sys
import time
from types import SimpleNamespace

from exercises.cases import PROBLEMS
from exercises.compare import difference, show

MAX_SHOWN = 3  # failing cases printed in full; the rest are counted
NOT_WRITTEN = "is not written yet"
NOT_CHECKED = "not checked"
INSTALL = {"openenv": "pip install --no-deps --only-binary=:all: -r requirements-openenv.txt"}
OUT = "runs/exercise_2"  # where --train writes its run


def student_function(n: int):
    problem = PROBLEMS[n]
    module = importlib.import_module(f"exercises.{problem.module}")
    return module if problem.whole else getattr(module, problem.name)


def failures(n: int, fn=None) -> list[str]:
    """Problem n's failing cases, one message each (empty: `fn` agrees with the project on all).
    `fn`: the function to check; None: the student's, from the stub file."""
    problem = PROBLEMS[n]
    fn = fn or student_function(n)
    out = []
    for k, case in enumerate(problem.cases(), 1):
        head = f"case {k} ({case.what})"
        if case.needs and importlib.util.find_spec(case.needs) is None:
            # a failure, not a pass: with neither side able to run, both would answer alike
            out.append(f"{head}: {NOT_CHECKED}: it needs the {case.needs} package ({INSTALL[case.needs]})")
            continue
        expected = problem.run(problem.reference, case.inputs)
        try:
            got = problem.run(fn, case.inputs)
        except NotImplementedError:
            return [f"{problem.module}.py: {problem.name} {NOT_WRITTEN} (it raises NotImplementedError)"]
        except Exception as e:  # the student's code may fail in any way: say which case and how
            out.append(f"{head}: raised {type(e).__name__}: {e}\n    inputs:{inputs(problem, case)}")
            continue
        found = difference(expected, got)
        if found:
            out.append(f"{head}: {found}\n    inputs:{inputs(problem, case)}")
    return out


def inputs(problem, case) -> str:
    """Every input the function reads, in full, one a line: the case's own, then what `run` builds
    from them and hands the function (a batch, an environment); an object's fields one a line too.
    What the case is about is in them."""
    shown = []
    handed = {**case.inputs, **problem.handed(case.inputs)}
    for k, v in handed.items():
        if k in problem.hidden:
            shown.append(f"\n      {k}: {problem.hidden[k]}")
            continue
        parts = [(f, x) for f, x in vars(v).items() if x is not None] if _has_fields(v) else [(None, v)]
        shown += [f"\n      {k}{'.' + f if f else ''}={show(x)}" for f, x in parts]
    return "".join(shown)


def _has_fields(v) -> bool:
    return isinstance(v, SimpleNamespace) or dataclasses.is_dataclass(v)


def report(n: int, fn=None) -> list[str]:
    """Print problem n's check; returns its failures (empty: it passes)."""
    problem = PROBLEMS[n]
    print(f"problem {n}: {problem.title} (mirrors {problem.mirrors})")
    found = failures(n, fn)
    for message in found[:MAX_SHOWN]:
        print("  FAIL " + message)
    if len(found) > MAX_SHOWN:
        print(f"  ... and {len(found) - MAX_SHOWN} more failing cases")
    n_cases = len(problem.cases())
    agree = 0 if found and NOT_WRITTEN in found[0] else n_cases - len(found)
    print(f"  {'FAIL' if found else 'PASS'}: {agree} of {n_cases} cases agree")
    return found


def train_with(group_advantages, steps: int = 10, eval_episodes: int = 50, out: str = OUT) -> dict:
    """Problem 2's function as GRPO's advantage in the real loop (train.train): the tiny policy on
    BabyAI, `steps` steps, evaluated on `eval_episodes` test tasks before and after. Returns the
    run's summary (eval_before, eval_after)."""
    import dataclasses

    import grpo
    import train
    from algos import ALGOS

    def advantages(batch, cfg, state=None):
        batch.advantages = grpo.broadcast(
            group_advantages(batch.rewards, batch.groups, cfg.group_std_eps), batch
        )

    project = ALGOS["grpo"]
    ALGOS["grpo"] = dataclasses.replace(project, advantages=advantages)  # train.py reads this table
    try:
        cfg = train.Config(algo="grpo", steps=steps, eval_episodes=eval_episodes, out=out)
        return train.train(cfg)
    finally:
        ALGOS["grpo"] = project


def training_success(k: int, out: str = OUT) -> float:
    """Mean training success over the first k (k > 0) or last -k steps of the run in `out`."""
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    rows = [r["charts/success"] for r in rows if "charts/success" in r]
    part = rows[:k] if k > 0 else rows[k:]
    return sum(part) / max(len(part), 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("problem", type=int, choices=sorted(PROBLEMS))
    parser.add_argument("--solution", action="store_true", help="check the project's own function instead")
    parser.add_argument(
        "--train", action="store_true", help="problem 2: train GRPO with the function checked"
    )
    parser.add_argument("--steps", type=int, default=10, help="--train: training steps")
    args = parser.parse_args(argv)
    if args.train and args.problem != 2:
        parser.error("--train is for problem 2 (GRPO's advantages)")
    t0 = time.time()
    fn = PROBLEMS[args.problem].reference if args.solution else None
    found = report(args.problem, fn)
    print(f"  ({time.time() - t0:.1f} s)")
    if args.train and found and NOT_WRITTEN in found[0]:
        print("nothing to train with yet: write the function first")
    elif args.train:
        if found:
            print("training anyway: watch what the failing cases do to learning")
        print(f"training: {args.steps} GRPO steps on BabyAI with the shipped tiny policy (~15 s for 10)")
        summary = train_with(fn or student_function(2), steps=args.steps)
        before, after = summary["eval_before"]["success_rate"], summary["eval_after"]["success_rate"]
        verdict = "learned" if after > before else "no gain"
        print(f"training success, first 3 steps {training_success(3):.3f}, last 3 {training_success(-3):.3f}")
        print(f"held-out success before {before:.3f}, after {after:.3f} ({verdict})")
        print(f"curves, episodes, alarms: {OUT}/report.html; per step: {OUT}/metrics.jsonl")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
