"""The plain reading path: one training step of train.py, the method only, in one file a student
reads top to bottom (`plain/one_step.py`; `python -m plain.one_step` runs it). train.py runs the same
step with the machinery that makes it fast and lets it scale; tests/test_plain_step.py keeps the
two equal. Nothing imports this package: it sits on top, beside the entry points."""
