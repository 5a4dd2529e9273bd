"""Problem 7: REINFORCE++'s advantages: the KL in the reward, returns over the agent's tokens, whitening.

Mirrors: reinforce_pp.py, `advantages` (read it after your check passes). Read first:
REINFORCE++, Hu, 2025 (the token-level KL penalty in the reward, the return, the
global advantage normalisation); docs/algorithms.md, "The reference code's lost reward".

The steps of a trajectory are its agent tokens a_0 ... a_{n-1} in the order they were sampled:
its rows in turn order (`batch.traj`, `batch.turn`), and within a row the loss-mask-1 columns left
to right (`batch.agent_tokens(batch, n)` returns their (rows, cols)). Observation, template and
padding tokens are not steps.
- Reward per agent token: the outcome R_n on the trajectory's LAST agent token, and on every
  agent token a KL term: kl_coef times the k1 estimate of KL(pi_old || pi_ref) at that token
  (the log-ratio of the sampled log-prob to the reference's), when batch.ref_logprobs is not None
  and kl_coef is not 0.
- Return G_k: the discounted sum of the rewards from token k to the trajectory's end.
- Advantage: G whitened over the batch, as REINFORCE++'s global normalisation does (the mean
  subtracted, divided by sqrt(variance + whiten_eps), the biased variance), the mean and variance
  in float64.

Worked example, gamma 1, no KL, two one-row trajectories: R = 0 with 3 agent tokens, R = 1 with 2:
    G = [0, 0, 0] and [1, 1];  mean 0.4, variance 0.24  ->  A = [-0.816] * 3 and [1.225] * 2
Properties a right answer has (each one a case of the check):
- With one row per turn, the outcome reaches the first turn's tokens too.
- A row shorter than the batch's width loses nothing (the reference code's lost reward).
- Equal returns give exactly A = 0 (to 1e-5), BabyAI's rewards of 0.925 included.

Decide: the KL term's sign; which positions of the (B, T) batch the whitening's moments are
taken over (the worked example has one answer).

Task: fill batch.returns (the raw G) and batch.advantages (A, float32), both (B, T) and 0 off the
agent tokens. cfg has kl_coef, gamma and whiten_eps. You may use `batch.agent_tokens` and
`algorithm.returns_to_go(rewards, gamma)`, which takes one trajectory's (n,) rewards and returns
its (n,) G_k = r_k + gamma * G_{k+1} (use them by these contracts, and read their files after your
check passes, with the rest of the answer).
Check: python -m exercises.check 7
"""


def advantages(batch, cfg, state=None) -> None:
    raise NotImplementedError(
        "problem 7: REINFORCE++'s returns and whitened advantages (this file's docstring)"
    )
