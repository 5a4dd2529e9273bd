"""Problem 6: GiGPO's advantages: the episode's, plus one per turn over anchor states.

Mirrors: gigpo.py, `gigpo_advantages` and `step_group_ids` (read them after your check passes).
Read first: GiGPO, Feng et al., 2025 (episode-level and step-level advantages, anchor
states); docs/studies/gigpo.md.

Each turn (i, t) gets A_{i,t} = A^E_i + omega * A^S_{i,t}:
- A^E_i, the episode's: GRPO's normalised outcome of trajectory i within its group (problem 2).
- A^S_{i,t}, the turn's: turns taken from the same anchor state form a step group (which turns
  may share one: the paper's anchor states); each turn's step return is the outcome discounted
  back from the episode's last turn (the last turn gets R_i, the one before gamma * R_i, and so
  on), normalised within its step group as GRPO does.
- A state is the observation the turn acted on (anchors[i][t]) after the normaliser
  (`from gigpo import ANCHOR_NORMALISERS`: a dict from the normaliser's name to a function of one
  text that returns the text normalised; use it by this contract, as gigpo.py holds the answer).
- step_norm "mean" centres without dividing by the std, at both levels; "std" divides at both.

Worked example, gamma 0.9, omega 1, one group of two: R = [1, 0],
anchors [["a", "b"], ["a", "c"]]:
    A^E = [0.707, -0.707];  step returns [[0.9, 1], [0, 0]];
    step group "a" holds (0, 0) and (1, 0): A^S = 0.707 and -0.707; "b" and "c" hold one turn each
    -> A = [[1.414, 0.707], [-1.414, -0.707]]
Properties a right answer has (each one a case of the check):
- A turn from a state no other turn reached gets A^S = 0: only its episode's term.
- A group, or a step group, whose values are all equal gets exactly 0 (to 1e-5), as in problem 2:
  BabyAI's rewards of 0.925 and their discounted returns included.
- Under the 'whitespace' normaliser, spacing and case do not split a state; under 'exact' they do.

Decide: what identifies a step group (two tasks can show the same text); how to reuse problem 2's
function at both levels.

Task: return per trajectory, per turn, a list of floats A_{i,t}. You may use grpo.group_advantages
and algorithm.returns_to_go. Check: python -m exercises.check 6
"""


def gigpo_advantages(
    rewards: list[float],
    groups: list[int],
    anchors: list[list[str]],
    omega: float = 1.0,
    gamma: float = 0.95,
    step_norm: str = "std",
    normaliser: str = "exact",
    eps: float = 1e-6,
) -> list[list[float]]:
    raise NotImplementedError("problem 6: GiGPO's per-turn advantages (this file's docstring)")
