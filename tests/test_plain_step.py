"""The plain step is train.py's step: on one seed, plain/one_step.py and train.py's own functions
(roll_groups, advantages, update) sample the same episodes, lay out the same token rows and loss
mask as batch.make_batch, give the same advantages and log-probs, and reach the same loss and the
same weights after the optimizer step (one epoch, one minibatch; float rounding apart, as the fast
path sums in another order). A plain path that copies code is kept equal by this, not by hope."""

import copy
import random
import time

import numpy as np
import pytest
import torch

import tiny
import train
from batch import token_logprobs
from envs import close_pool
from loop.run import setup
from loop.watch import Clock
from machinery.logprobs import allowed_bias, full_logprobs
from plain import one_step as plain
from update import load_learner, update

TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One set-up; step 1 taken the plain way, then (seeds, weights and optimizer put back) by
    train.py's functions."""
    out = str(tmp_path_factory.mktemp("plain"))
    cfg = train.Config(tasks_per_step=2, group_size=4, eval_episodes=0, steps=1, out=out, seed=3)
    run = setup(cfg, load_learner)
    try:
        plain.check(run)
        learner = run.learner
        rng = (random.getstate(), torch.get_rng_state(), np.random.get_state())
        weights = copy.deepcopy(learner.policy.model.state_dict())
        optimizer = copy.deepcopy(learner.optimizer.state_dict())
        params = [x for x in learner.policy.model.parameters() if x.requires_grad]
        p = plain.one_step(run, 1)
        after_plain = copy.deepcopy(learner.policy.model.state_dict())
        grads = {"plain": [x.grad.clone() for x in params]}

        random.setstate(rng[0]), torch.set_rng_state(rng[1]), np.random.set_state(rng[2])
        learner.policy.model.load_state_dict(weights)
        learner.optimizer.load_state_dict(optimizer)
        with torch.no_grad():  # machinery/logprobs.py's plain forward, before the step
            full, _ = full_logprobs(learner.policy.model, p.rows.input_ids, p.rows.attention_mask,
                                    cfg.temperature, p.rows.may_sample)  # fmt: skip
        run.clock = Clock(time.time(), None)
        horizon = run.schedule.horizon(1, run.history)
        trajs = train.usable(train.roll_groups(run, horizon), 1)
        batch = train.advantages(run, trajs)
        with torch.no_grad():
            logp, _ = token_logprobs(learner.policy.model, batch, cfg.temperature)
        step = learner.optimizer.step  # (the gradients the real step applies, kept to compare)
        learner.optimizer.step = lambda: (grads.setdefault("real", [x.grad.clone() for x in params]), step())
        stats = update(learner.forward, batch, len(trajs), learner.algo, cfg, learner.state,
                       learner.accelerator, learner.trained)  # fmt: skip
        real = dict(horizon=horizon, trajs=trajs, batch=batch, logp=logp, full=full, stats=stats,
                    stop_ids=learner.policy.stop_ids, grads=grads)  # fmt: skip
        yield p, real, weights, after_plain, learner.policy.model.state_dict()
    finally:
        close_pool(run.pool)


def test_the_plain_rollout_samples_train_pys_episodes(both):
    p, real, *_ = both
    assert p.horizon == real["horizon"]
    assert len(p.trajs) == len(real["trajs"]) == 8
    for a, b in zip(p.trajs, real["trajs"]):
        assert (a.task, a.group, a.actions, a.reward, a.done, a.error) == (
            b.task,
            b.group,
            b.actions,
            b.reward,
            b.done,
            b.error,
        )
        assert a.rows == b.rows  # ids, mask, sampled log-probs, allowed ids: token for token
    assert len({t.group for t in p.trajs}) == 2


def test_the_rows_and_their_mask_are_make_batchs(both):
    p, real, *_ = both
    rows, batch = p.rows, real["batch"]
    for name in ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "traj", "rewards", "groups"):
        assert torch.equal(getattr(rows, name), getattr(batch, name)), name
    # the (B, T, V) action mask is make_batch's (B, T, K) allowed ids spread over the vocabulary
    V = rows.may_sample.shape[-1]
    spread = allowed_bias(batch.allowed.flatten(0, 1), V).view(*batch.allowed.shape[:2], V) == 0
    assert torch.equal(rows.may_sample, spread)


def test_the_mask_is_1_exactly_on_the_sampled_replies(both):
    p, real, *_ = both
    for tr in p.trajs:
        for row in tr.rows:
            n = row.mask.index(1)
            assert row.mask == [0] * n + [1] * (len(row.ids) - n)  # the prompt, then the reply
            assert row.ids[-1] in real["stop_ids"]  # the end-of-turn token the agent sampled: trained


def test_the_advantages_are_grpos(both):
    p, real, *_ = both
    assert torch.equal(p.rows.advantages, real["batch"].advantages)


def test_the_plain_log_probs_are_the_fast_forwards_and_full_logprobs(both):
    p, real, *_ = both
    m = p.rows.loss_mask
    assert torch.allclose(p.logp, real["logp"], **TOL)
    assert torch.allclose(p.logp, real["full"] * m, **TOL)
    assert torch.allclose(p.rows.ref_logprobs, real["batch"].ref_logprobs, **TOL)
    assert torch.allclose(
        p.logp * m, p.rows.old_logprobs, atol=2e-4
    )  # float32: pi_old is pi, the first ratio 1


def test_the_loss_the_gradient_and_the_weights_after_the_step_are_update_pys(both):
    """The weights to lr / 100: AdamW's first step moves a weight by lr * g / (|g| + 1e-8), so where
    |g| is near 1e-8 (a few weights in a million), rounding in g moves it by a visible part of lr."""
    p, real, before, after_plain, after_real = both
    assert p.loss == pytest.approx(real["stats"]["losses/loss"], rel=1e-5, abs=1e-7)
    assert p.grad_norm == pytest.approx(real["stats"]["losses/grad_norm"], rel=1e-5)
    for g, h in zip(real["grads"]["plain"], real["grads"]["real"]):
        assert torch.allclose(g, h, rtol=1e-4, atol=1e-7)
    lr, far, moved = tiny.LR, 0, 0.0
    for name, w in after_real.items():
        assert torch.allclose(after_plain[name], w, rtol=0, atol=lr / 100), name
        far += int(((after_plain[name] - w).abs() > 1e-7).sum())
        moved = max(moved, float((w - before[name]).abs().max()))
    assert far < 1e-3 * sum(w.numel() for w in after_real.values())
    assert moved == pytest.approx(lr, rel=0.1)  # the step did move the weights, by about lr
