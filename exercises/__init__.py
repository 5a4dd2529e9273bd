"""Exercises: the pieces of multi-turn agent RL that a reader should be able to write alone.

Where it sits: beside the project, importing it and never imported by it. Each problem is a stub,
`problem_N_name.py`, whose docstring gives the behaviour to reach (the contract, worked examples,
properties), the paper to read, what is left to decide, and the project function it mirrors (read
after the check passes); you fill in its function. `python -m exercises.check N` compares yours
with the project's own on chosen cases (`cases.py`) and says, for the first failing cases, what
each tests, every input your function reads, what was expected and what came back
(`--solution` checks the project's function itself; `--train` on problem 2 puts yours into the real
training loop). `mistakes/problem_N.py` holds problem N's wrong versions that students write (one
file a problem, so reading one gives nothing away about another); the checker catches each
(tests/test_exercises.py). `corridor.py` is problem 8's small environment; `faults.py` is problem 9,
training runs with a planted fault to diagnose; problem 10 is an environment of the student's own,
its cases judging properties (`env_cases.py`), `find_it.py` one that has them. The path through the
code, lesson by lesson: docs/course.md.
"""
