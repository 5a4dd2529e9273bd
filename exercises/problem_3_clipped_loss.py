"""Problem 3: the clipped surrogate loss with the k3 KL term and the entropy bonus.

Mirrors: algorithm.py, `clipped_policy_loss` (read it, `k3_kl` and `masked_mean` after your check
passes). Read first: PPO, Schulman et al., 2017, eq. 7 (the clipped surrogate L^CLIP);
DeepSeekMath, eq. 4 (the k3 estimator of the KL to the reference); DAPO, "clip-higher".

The loss of one minibatch, to be minimised, is three token-means over its agent tokens
(mb.loss_mask == 1; a token-mean is the sum over them divided by their number):

    loss = -L^CLIP  +  kl_coef * KL  -  entropy_coef * entropy

- L^CLIP is PPO's eq. 7 with the ratio pi/pi_old = exp(logp - old_logp) per token and the clip
  range [1 - clip_ratio, 1 + eps_high], eps_high = clip_ratio_high, or clip_ratio when that is 0.
- KL is the k3 estimate of KL(pi || pi_ref) per token from logp and mb.ref_logprobs, which is
  never negative. It is there only when mb.ref_logprobs is not None and kl_coef is not 0.
- The entropy term is there only when `entropy` is not None.

Worked example, one token, clip_ratio 0.2:  A = 1, ratio 1.5: its pg term is -1.2 and its gradient
0 (clipped: the step is already large enough). A = -1, ratio 1.5: the term is 1.5 and the gradient
flows (it pushes the ratio back down). A = 1, ratio 0.5: the term is -0.5, gradient flows.
k3 per token: logp = -1, ref = -1.5: exp(-0.5) + 0.5 - 1 = 0.1065.

Properties a right answer has (each one a case of the check, on the loss AND its gradient with
respect to every input that carries one in training: logp, and entropy, which comes from the same
logits):
- Off the agent tokens, old_logprobs may hold anything (-1e4 in a case): neither the loss nor its
  gradient may depend on it, and nothing may become inf or NaN.
- A token the reference finds very unlikely (ref 30 below logp) counts at most 10 in the KL, as
  verl's low_var_kl does, and the loss stays finite; so does one the reference finds far likelier
  (ref 100 above logp), its gradient too.
- The means are over the agent tokens only: padding and observations do not dilute them.

Decide: what eq. 7's min becomes in a loss to be minimised; what keeps a token off the agent's from
making the loss or its gradient inf or NaN; how to bound k3 without losing its gradient elsewhere.

Task: return (loss, stats): loss a scalar tensor with its gradient; stats a dict (may be empty).
mb has loss_mask, old_logprobs, ref_logprobs, all (B, T); logp, entropy, adv are (B, T).
You may use `algorithm.masked_mean`. Check: python -m exercises.check 3
"""

import torch


def clipped_policy_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor | None,
    mb,
    adv: torch.Tensor,
    clip_ratio: float,
    kl_coef: float = 0.0,
    entropy_coef: float = 0.0,
    clip_ratio_high: float = 0.0,
):
    raise NotImplementedError("problem 3: the clipped surrogate with k3 KL (this file's docstring)")
