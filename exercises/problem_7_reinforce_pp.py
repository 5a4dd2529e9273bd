"""Problem 7: REINFORCE++'s advantages: the KL in the reward, returns over the agent's tokens, whitening.

Mirrors: reinforce_pp.py, `advantages` (REINFORCE++: Hu, 2025).

The steps of a trajectory are its agent tokens a_0 ... a_{n-1} in the order they were sampled:
its rows in turn order (`batch.traj`, `batch.turn`), and within a row the loss-mask-1 columns left
to right; `batch.agent_tokens(batch, n)` returns their (rows, cols). Observation, template and
padding tokens are not steps. Per agent token, the k1 KL to the reference model is a penalty in
the reward, and the outcome R_n sits on the LAST agent token:

    r_k = -kl_coef * (old_logp_k - ref_logp_k)  +  [k = n - 1] * R_n
          (the KL part only when batch.ref_logprobs is not None and kl_coef is not 0)
    G_k = r_k + gamma * G_{k+1},  G_n = 0                      (algorithm.returns_to_go)
    A   = (G - mean(G)) / sqrt(var(G) + whiten_eps)            over ALL agent tokens of the batch

mean and var are over the agent tokens only, var the biased one (divide by the count), both in
float64 so that equal returns give exactly A = 0 (`algorithm.global_masked_moments` computes them).

Task: fill batch.returns (the raw G) and batch.advantages (A, float32), both (B, T) and 0 off the
agent tokens. cfg has kl_coef, gamma and whiten_eps. You may use batch.agent_tokens,
algorithm.returns_to_go and algorithm.global_masked_moments.
Check: python -m exercises.check 7
"""


def advantages(batch, cfg, state=None) -> None:
    raise NotImplementedError(
        "problem 7: REINFORCE++'s returns and whitened advantages (this file's docstring)"
    )
