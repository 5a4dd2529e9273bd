"""Problem 9's mistakes (the four broken runs): the diagnoses students give instead of the planted
one, per fault, each with the reading that leads there and what tells it apart. Read them after
`python -m exercises.faults answer` has said "right" for all four runs.

Where it sits: problem 9 is a diagnosis, not a function, so its mistakes are wrong answers. The
file names faults, never runs: it says nothing about which run holds which fault.
tests/test_exercises.py proves that `exercises.faults answer` refuses every one of them on the run
that holds the fault.
"""

CONFUSIONS = {  # planted fault -> {a wrong diagnosis: why it tempts, and what the fault itself shows}
    "greedy": {
        "zeroed": "success stays flat, as with no advantage; but the replies of a group are alike "
        "(signals/identical_replies), so its rewards are equal and its advantage 0 before the loss",
        "horizon": "whole groups fail alike; but their rollouts are one reply repeated, which no "
        "horizon causes",
        "lr": "learning stalls; but a learning rate changes how the policy moves, not whether a "
        "group's rollouts differ",
    },
    "flipped": {
        "lr": "held-out success falls; but the report's credit is upside down: failed episodes get "
        "the positive advantage",
        "misaligned": "the wrong episodes get credit; but every failure gets it, every success the "
        "opposite, and no shift by one episode explains that",
        "cut": "the replies drift; but a cut reply is a length, and the credit's sign is the fault",
    },
    "zeroed": {
        "greedy": "the policy does not move; but the rollouts differ and groups have a reward spread "
        "(signals/flat_groups low) that never reaches the advantages (signals/adv_std 0)",
        "lr": "nothing is learned; but no learning rate makes every advantage exactly 0",
        "horizon": "success is flat; but the groups do have a spread: the advantage is lost after it",
    },
    "misaligned": {
        "flipped": "credit looks wrong; but some successes still get a positive advantage: it follows "
        "the episode before, not the sign",
        "zeroed": "learning is weak; but signals/adv_std is well above 0",
        "lr": "training success wanders; but the report credits episodes for their neighbour's outcome",
    },
}
