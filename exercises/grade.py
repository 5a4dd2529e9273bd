"""Grade a class: every student's problem files, checked as `python -m exercises.check N` checks
them, one table of cases agreed.

    python -m exercises.grade submissions/          # submissions/<student>/problem_N_name.py ...
    python -m exercises.grade submissions/ --csv grades.csv

Where it sits: beside the checker, for a teacher (docs/teach.md, "Grading"). Each student's folder
holds the stubs they filled in, named as in exercises/. Each file is checked in its own process
(`exercises.check.failures` on the file's function, or its module for problem 10), with a time
limit, so a student's loop that never ends or a crash costs that cell only. A cell reads
"9/9" (cases agreed of cases), "not written", "timeout" or "crashed". Problem 9 is graded by
`python -m exercises.faults answer`, problem 10's training by its run: neither is here.
Exit code 0 once every cell is graded, whatever the grades.
"""

import argparse
import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from exercises.cases import PROBLEMS
from exercises.check import NOT_WRITTEN, failures

TIME_LIMIT = 300  # seconds per student per problem (problem 10's servers take the longest)


def check_file(n: int, path: str) -> dict:
    """Problem n's check of the function in `path`: {"agreed", "cases"} or {"not written"}."""
    problem = PROBLEMS[n]
    spec = importlib.util.spec_from_file_location(f"student_{problem.module}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = failures(n, module if problem.whole else getattr(module, problem.name))
    if found and NOT_WRITTEN in found[0]:
        return {"not written": True}
    return {"agreed": len(problem.cases()) - len(found), "cases": len(problem.cases())}


def cell(n: int, path: Path) -> str:
    command = [sys.executable, "-m", "exercises.grade", "--one", str(n), str(path)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        return "timeout"
    if done.returncode != 0:
        return "crashed"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return "not written" if result.get("not written") else f"{result['agreed']}/{result['cases']}"


def grade(folder: Path) -> list[dict]:
    rows = []
    for student in sorted(p for p in folder.iterdir() if p.is_dir()):
        row = {"student": student.name}
        for n, problem in PROBLEMS.items():
            path = student / f"{problem.module}.py"
            row[f"problem {n}"] = cell(n, path) if path.exists() else "missing"
        rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", help="one subfolder per student, holding their problem_N_name.py files")
    p.add_argument("--csv", help="also write the table to this CSV file")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # (internal: one file, in its own process)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(check_file(args.one, args.folder)))
        return 0
    rows = grade(Path(args.folder))
    columns = ["student"] + [f"problem {n}" for n in PROBLEMS]
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(row[c] for c in columns))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, columns)
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
