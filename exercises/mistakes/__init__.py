"""Mistakes students make, one file per problem: `problem_N.py` holds problem N's and no other's, so
reading one problem's mistakes gives nothing away about the next. Read a problem's file after your
check of it passes.

Where it sits: tests/test_exercises.py reads `MISTAKES[n][what went wrong]` and proves that
`python -m exercises.check n` fails on every one. Problem 9 is a diagnosis, not a function: its
wrong answers are in problem_9.py as diagnoses that `exercises.faults answer` refuses.
"""

import importlib

PROBLEMS_WITH_MISTAKES = (1, 2, 3, 4, 5, 6, 7, 8, 10)
MISTAKES = {
    n: importlib.import_module(f"exercises.mistakes.problem_{n}").MISTAKES for n in PROBLEMS_WITH_MISTAKES
}
