"""What a run measures about itself beyond its reward: diagnostics, read by `train.py`, `eval.py`
and `view.py`, never by an algorithm.

    probe.py    the mission-binding probe: does the policy act on the object the mission names?
    credit.py   the credit each turn got: how much of the outcome an algorithm gave each turn
"""
