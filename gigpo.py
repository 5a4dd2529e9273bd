"""GiGPO: Group-in-Group Policy Optimization (Feng et al., 2025, arXiv 2505.10978), credit per turn.

Where it sits: like `grpo.py`, `train.py` calls `advantages()` once per rollout batch and then the
clipped loss (GRPO's, `algorithm.clipped_policy_loss`) on each minibatch. This file never talks
to an environment; it reads only the outcome rewards, the group of each trajectory and the
observation each turn acted on.

GRPO gives every turn of an episode the same advantage, so one 0/1 outcome says little about which
turn was right. GiGPO keeps GRPO's episode-level advantage and adds a step-level one, with no critic
and no extra rollouts (Feng et al., 2025; its section and equation numbers were not checked here):

  Episode level: the rollouts of one task form a group g; trajectory i gets GRPO's
      A^E_i = (R_i - mean_{j in g} R_j) / (std_{j in g} R_j + eps)          (grpo.group_advantages)

  Anchor states: within a group, every turn taken from the same environment state forms a
  step-level group. Every rollout of a task starts from the same state, and later states recur
  (two rollouts that took the same first action, or turned left then right). The state is the
  observation text, matched exactly, optionally after a normaliser that drops text irrelevant to
  the state (`--anchor-normaliser`, see ANCHOR_NORMALISERS).

  Step returns: the discounted return from turn t of trajectory i, with per-turn rewards
  r_t (here the outcome reward on the last turn, 0 before it, as everywhere in this project)
      R_{i,t} = sum_{k >= t} gamma^(k - t) r_{i,k}                          (algorithm.returns_to_go)

  Step level: normalised within the step group S of turn (i, t)
      A^S_{i,t} = (R_{i,t} - mean_{(j,k) in S} R_{j,k}) / (std_{(j,k) in S} R_{j,k} + eps)
                                             (grpo.group_advantages again, keyed by step group)
  A turn from a state no other turn of its group reached (a singleton group) has nothing to compare
  with and gets A^S = 0 (only the episode term); a step group whose returns are all equal gets A^S = 0.
  A state one rollout revisits is a step group too: its turns are compared with each other.

  Combined, on every agent token of turn t of trajectory i:
      A_{i,t} = A^E_i + omega * A^S_{i,t}

  `--step-norm mean` drops the division by the std at BOTH levels, A^E_i = R_i - mean_g R and
  A^S = R_{i,t} - mean_S R, as verl-agent's mean-norm mode does (the paper reports both): rewards
  [1, 0, 0, 0] give the first episode A^E = 0.75 (with std: 1.5).

The loss is GRPO's (`grpo.loss`): the clipped surrogate plus the k3 KL to the reference model as a
loss term (docs/algorithms-notes.md says where each algorithm puts the KL).

The statistics are computed in float64 at both levels: in float32 the mean of eight equal rewards
can differ from them by one ulp, and dividing that by a std of the same size (+ eps) turns "no
signal" into an advantage of ~0.06.

Reads cfg.step_weight (omega), cfg.step_gamma (gamma), cfg.step_norm, cfg.anchor_normaliser,
cfg.group_std_eps, and GRPO's cfg.clip_ratio, cfg.clip_ratio_high, cfg.kl_coef, cfg.entropy_coef
(train.Config).
"""

from dataclasses import dataclass

import torch

import grpo
from algorithm import Algorithm, returns_to_go
from batch import turn_of_tokens
from machinery.flags import flag


def _babyai_state(obs: str) -> str:
    # BabyAI's server puts a note before the state ('"x" is not an available action ...', the answer
    # to `check available actions`); the state itself starts at the last "You see".
    i = obs.rfind("You see")
    return obs[i:] if i >= 0 else obs


ANCHOR_NORMALISERS = {
    "exact": lambda obs: obs,
    "whitespace": lambda obs: " ".join(obs.split()).lower(),
    "babyai": _babyai_state,
}


@dataclass
class Settings(grpo.Settings):
    step_weight: float = flag(1.0, at_least=0)
    """gigpo: omega, weight of the step-level (anchor-state) advantage (GiGPO, Feng et al., 2025)"""
    step_gamma: float = flag(0.95, at_least=0, at_most=1)
    """gigpo: gamma, discount per turn of the step returns (GiGPO, Feng et al., 2025)"""
    step_norm: str = flag("std", choices=("std", "mean"))
    """gigpo: step-level normalisation, std ((R - mean) / std, the paper's) or mean (R - mean)"""
    anchor_normaliser: str = flag("exact", choices=list(ANCHOR_NORMALISERS))
    """gigpo: how observations match into anchor states: exact, whitespace, or babyai (drops the server's
    notes)"""


# --- the math, on plain lists (one entry per trajectory) ---------------------------------------


def step_group_ids(
    groups: list[int], anchors: list[list[str]], normaliser: str = "exact"
) -> list[list[tuple]]:
    """Per trajectory, per turn: the key of its step-level group, (episode group, anchor state).
    Turns match only within their episode group (the same task in the same batch)."""
    norm = ANCHOR_NORMALISERS[normaliser]
    return [[(g, norm(obs)) for obs in turns] for g, turns in zip(groups, anchors)]


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
    """Outcome reward, group and per-turn anchor observations of each trajectory -> per trajectory,
    per turn, A_{i,t} = A^E_i + omega * A^S_{i,t}."""
    std = step_norm == "std"
    a_ep = grpo.group_advantages(torch.tensor(rewards, dtype=torch.float64), groups, eps, std)  # (N,)
    keys = step_group_ids(groups, anchors, normaliser)
    returns = []  # flat over (trajectory, turn); the outcome sits on the last turn
    for r, turns in zip(rewards, anchors):
        returns += (
            returns_to_go(torch.tensor([0.0] * (len(turns) - 1) + [r], dtype=torch.float64), gamma).tolist()
            if turns
            else []
        )
    flat_keys = [k for ks in keys for k in ks]
    a_step = grpo.group_advantages(torch.tensor(returns, dtype=torch.float64), flat_keys, eps, std)
    out, m = [], 0
    for n, turns in enumerate(anchors):
        out.append([float(a_ep[n] + omega * a_step[m + t]) for t in range(len(turns))])
        m += len(turns)
    return out


# --- onto the batch's agent tokens -------------------------------------------------------------


def advantages(batch, cfg, state=None) -> None:
    """Fill batch.advantages (B, T) with A_{i,t} on the agent tokens of turn t of trajectory i.
    Needs batch.anchors: per trajectory, the observation each turn acted on."""
    per_turn = gigpo_advantages(
        batch.rewards.tolist(),
        batch.groups.tolist(),
        batch.anchors,
        cfg.step_weight,
        cfg.step_gamma,
        cfg.step_norm,
        cfg.anchor_normaliser,
        cfg.group_std_eps,
    )
    turn = turn_of_tokens(batch)  # (B, T)
    adv = torch.zeros(batch.loss_mask.shape, dtype=torch.float32)
    for b in range(len(batch)):
        n = int(batch.traj[b])
        for c in (turn[b] >= 0).nonzero().squeeze(-1).tolist():
            adv[b, c] = per_turn[n][int(turn[b, c])]
    batch.advantages = adv * batch.loss_mask


GIGPO = Algorithm(advantages=advantages, loss=grpo.loss, settings=Settings, min_group_size=2)
