"""Mistakes students make, one small function each, keyed by problem: `MISTAKES[n][what went wrong]`.

Where it sits: tests/test_exercises.py proves that `python -m exercises.check n` fails on every
one of them, so a student who makes one of these mistakes is told. Read them after solving a
problem. Most problems' mistakes share a helper (`_row`, `_loss`, ...) that writes the problem
once with its rules changeable; each mistake changes one rule, and its docstring says which and
what it costs.
"""

import random
from types import SimpleNamespace

import torch

from agent import chat_ids, turn_suffix_ids
from algorithm import global_masked_moments, masked_mean, returns_to_go
from batch import Row, agent_tokens
from exercises import find_it
from grpo import group_advantages

# --- problem 1: the loss mask --------------------------------------------------------------------


def _row(
    tokenizer,
    first_messages,
    replies,
    observations,
    end_of_turn,
    stop_ids,
    glue_mask=0,
    eot_mask=1,
    cut_eot=True,
    last_observation=False,
    retokenise=False,
):
    """An episode's row built as in problem 1, with one of its rules changeable."""
    ids = chat_ids(tokenizer, first_messages)
    mask, logprobs = [0] * len(ids), [0.0] * len(ids)
    observations = observations + (["(what the environment said last)"] if last_observation else [])
    if retokenise:  # each reply's text encoded afresh, its stop token kept, the log-probs cut to fit
        replies = [_retokenised(tokenizer, reply, lp, stop_ids) for reply, lp in replies]
    for k, (reply, lp) in enumerate(replies):
        ends = [eot_mask if t == end_of_turn else 1 for t in reply]
        ids, mask, logprobs = ids + reply, mask + ends, logprobs + lp
        if k < len(observations):
            cut = [end_of_turn] if cut_eot and reply[-1] not in stop_ids else []
            suffix = cut + turn_suffix_ids(tokenizer, observations[k])
            ids, mask, logprobs = (
                ids + suffix,
                mask + [glue_mask] * len(suffix),
                logprobs + [0.0] * len(suffix),
            )
    return Row(ids=ids, mask=mask, logprobs=logprobs)


def _retokenised(tokenizer, reply, lp, stop_ids):
    stop = reply[-1:] if reply[-1:] and reply[-1] in stop_ids else []
    text = tokenizer.decode(reply[: len(reply) - len(stop)])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + stop
    return ids, (lp + [0.0] * len(ids))[: len(ids)]


def observation_tokens_in_the_mask(*args, **kwargs):
    """Mask 1 on everything after the prompt: the glue and the observations get trained too."""
    return _row(*args, **kwargs, glue_mask=1)


def end_of_turn_not_trained(*args, **kwargs):
    """Mask 0 on the reply's end-of-turn token: the policy never learns to end its turn."""
    return _row(*args, **kwargs, eot_mask=0)


def no_end_of_turn_after_a_cut_reply(*args, **kwargs):
    """A reply cut at the token limit is followed straight by the glue, with no end-of-turn token:
    the model is trained on a conversation its template never writes."""
    return _row(*args, **kwargs, cut_eot=False)


def last_observation_appended(*args, **kwargs):
    """The observation after the last reply is appended: the row no longer ends on the agent's
    last token, where the outcome reward belongs."""
    return _row(*args, **kwargs, last_observation=True)


def reply_retokenised(*args, **kwargs):
    """The reply's text encoded again instead of its sampled ids: a model may sample 'g' + 'o' where
    the tokenizer writes 'go', and the update then scores ids the policy never sampled."""
    return _row(*args, **kwargs, retokenise=True)


# --- problem 2: GRPO's group advantages ---------------------------------------------------------


def std_over_the_batch(rewards, groups, eps=1e-6, use_std=True):
    """The group's mean, but the std of the whole batch."""
    adv = group_advantages(rewards, groups, eps, use_std=False)
    return adv / (rewards.double().std() + eps).to(rewards.dtype) if use_std else adv


def statistics_in_float32(rewards, groups, eps=1e-6, use_std=True):
    """Right, except the mean and std are float32: a group of eight rewards of 0.925 gets a mean
    one ulp off, divided by a std of the same size, and |A| = 0.056 instead of 0."""
    adv = torch.zeros_like(rewards)
    keys = groups.tolist() if torch.is_tensor(groups) else groups
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        if len(idx) > 1:
            r = rewards[idx]
            adv[idx] = (r - r.mean()) / (r.std() + eps) if use_std else r - r.mean()
    return adv


def _divided(rewards, groups, eps, use_std, spread):
    """The group-centred rewards divided, in each group of two or more, by `spread(its rewards)`."""
    adv = group_advantages(rewards, groups, eps, use_std=False).double()
    keys = groups.tolist() if torch.is_tensor(groups) else groups
    for key in set(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        if use_std and len(idx) > 1:
            adv[idx] = adv[idx] / spread(rewards[idx].double())
    return adv.to(rewards.dtype)


def population_std(rewards, groups, eps=1e-6, use_std=True):
    """Divides by the std over n (numpy's default) instead of n - 1 (torch's, DeepSeekMath's)."""
    return _divided(rewards, groups, eps, use_std, lambda r: r.std(unbiased=False) + eps)


def eps_under_the_square_root(rewards, groups, eps=1e-6, use_std=True):
    """sqrt(var + eps) instead of std + eps: the same for a small eps, not for a large one."""
    return _divided(rewards, groups, eps, use_std, lambda r: (r.var() + eps).sqrt())


# --- problem 3: the clipped surrogate with the k3 KL -------------------------------------------


def _loss(
    logp,
    entropy,
    mb,
    adv,
    clip_ratio,
    kl_coef=0.0,
    entropy_coef=0.0,
    clip_ratio_high=0.0,
    kl_sign=1.0,
    pessimism=torch.max,
    mask_ratio=True,
    per_token=True,
    clamp_kl=True,
    clip_higher=True,
    entropy_gradient=True,
    clamp_log_ratio=True,
):
    """Problem 3's loss with one of its rules changeable."""
    m = mb.loss_mask
    mean = (lambda x: masked_mean(x, m)) if per_token else (lambda x: (x * m).mean())
    log_ratio = (logp - mb.old_logprobs) * m if mask_ratio else logp - mb.old_logprobs
    ratio = log_ratio.exp()
    high = (clip_ratio_high if clip_higher else 0.0) or clip_ratio
    loss = mean(pessimism(-adv * ratio, -adv * ratio.clamp(1 - clip_ratio, 1 + high)))
    if mb.ref_logprobs is not None and kl_coef:
        d = mb.ref_logprobs * m - logp * m
        d = d.clamp(-20, 20) if clamp_log_ratio else d
        k3 = (d.exp() - d - 1).clamp(max=10) if clamp_kl else d.exp() - d - 1
        loss = loss + kl_sign * kl_coef * mean(k3)
    if entropy is not None:
        loss = loss - entropy_coef * mean(entropy if entropy_gradient else entropy.detach())
    return loss, {}


def kl_sign_flipped(*args, **kwargs):
    """loss - kl_coef * kl: the KL term rewards moving away from the reference."""
    return _loss(*args, **kwargs, kl_sign=-1.0)


def min_instead_of_max(*args, **kwargs):
    """torch.min of the two losses: the optimistic bound, so clipping never stops a large step."""
    return _loss(*args, **kwargs, pessimism=torch.min)


def log_ratio_not_masked(*args, **kwargs):
    """exp(logp - old_logp) on every token: an observation token's stored log-prob is anything,
    its ratio overflows, and inf * 0 is NaN."""
    return _loss(*args, **kwargs, mask_ratio=False)


def mean_over_every_position(*args, **kwargs):
    """The mean over all (B, T) positions, padding and observations included: the loss shrinks
    with the share of non-agent tokens."""
    return _loss(*args, **kwargs, per_token=False)


def k3_not_bounded(*args, **kwargs):
    """No upper bound on the per-token k3: a token the reference finds 30 nats less likely counts
    19 in the KL instead of at most 10, and a few such tokens swamp the rest of the loss."""
    return _loss(*args, **kwargs, clamp_kl=False)


def clip_higher_ignored(*args, **kwargs):
    """The ratio clipped to [1 - eps, 1 + eps] whatever clip_ratio_high says (DAPO's clip-higher lost)."""
    return _loss(*args, **kwargs, clip_higher=False)


def k3_log_ratio_not_clamped(*args, **kwargs):
    """k3 bounded at 10, but exp(ref - logp) taken unclamped: where the reference is 100 nats above
    the policy exp overflows to inf, the bound keeps the loss finite, and the gradient is
    0 * inf = NaN."""
    return _loss(*args, **kwargs, clamp_log_ratio=False)


def entropy_detached(*args, **kwargs):
    """The entropy bonus on a detached entropy: the loss has the right value and the right gradient
    with respect to logp, but the bonus never pushes the policy's entropy up."""
    return _loss(*args, **kwargs, entropy_gradient=False)


# --- problem 4: GAE ------------------------------------------------------------------------------


def _gae(rewards, values, gamma, lam, last_value=None, decay=None, add_values=True):
    n, adv, running = len(rewards), torch.zeros(len(rewards)), 0.0
    for k in reversed(range(n)):
        nxt = values[k + 1] if k + 1 < n else (values[k] if last_value == "own" else 0.0)
        running = (
            rewards[k] + gamma * nxt - values[k] + (decay if decay is not None else gamma * lam) * running
        )
        adv[k] = running
    return adv, adv + values if add_values else adv.clone()


def last_token_bootstraps_from_its_own_value(rewards, values, gamma, lam):
    """After the last agent token the episode is over (V_n = 0), but V_{n-1} is used as V_n."""
    return _gae(rewards, values, gamma, lam, last_value="own")


def recursion_without_gamma(rewards, values, gamma, lam):
    """A_k = delta_k + lam * A_{k+1}: the discount gamma left out of the recursion."""
    return _gae(rewards, values, gamma, lam, decay=lam)


def returns_without_the_values(rewards, values, gamma, lam):
    """The critic's target G_k = A_k: without + V_k, the critic learns R - V."""
    return _gae(rewards, values, gamma, lam, add_values=False)


# --- problem 5: the staged schedule -------------------------------------------------------------


def one_step_early(step, rounds, steps_per_stage):
    """step // S: step S already in stage 2 (the reference implementation's switch after resume)."""
    stage = min(step // steps_per_stage, len(rounds) - 1)
    return stage, rounds[stage]


def one_stage_late(step, rounds, steps_per_stage):
    """ceil(step / S) as the 0-based stage: counts stages from 1, so every step sits a stage late."""
    stage = min(-(-step // steps_per_stage), len(rounds) - 1)
    return stage, rounds[stage]


def last_stage_not_held(step, rounds, steps_per_stage):
    """No min(..., K - 1): past the last stage there is no horizon (an IndexError)."""
    stage = (step - 1) // steps_per_stage
    return stage, rounds[stage]


# --- problem 6: GiGPO ---------------------------------------------------------------------------


def _gigpo(
    rewards,
    groups,
    anchors,
    omega=1.0,
    gamma=0.95,
    step_norm="std",
    normaliser="exact",
    eps=1e-6,
    key=lambda g, obs: (g, obs),
    discount=True,
    std_everywhere=False,
    dtype=torch.float64,
    normalise=group_advantages,
):
    from gigpo import ANCHOR_NORMALISERS

    norm, std = ANCHOR_NORMALISERS[normaliser], step_norm == "std"
    a_ep = normalise(torch.tensor(rewards, dtype=dtype), groups, eps, std or std_everywhere)
    keys, returns = [], []
    for g, r, turns in zip(groups, rewards, anchors):
        keys += [key(g, norm(obs)) for obs in turns]
        rewards_per_turn = [0.0] * (len(turns) - 1) + [r] if discount else [r] * len(turns)
        returns += returns_to_go(
            torch.tensor(rewards_per_turn, dtype=dtype), gamma if discount else 0.0
        ).tolist()
    a_step = normalise(torch.tensor(returns, dtype=dtype), keys, eps, std)
    out, m = [], 0
    for n, turns in enumerate(anchors):
        out.append([float(a_ep[n] + omega * a_step[m + t]) for t in range(len(turns))])
        m += len(turns)
    return out


def anchors_matched_across_groups(*args, **kwargs):
    """Step groups keyed by the observation alone: turns of two different tasks that show the same
    text are compared with each other."""
    return _gigpo(*args, **kwargs, key=lambda g, obs: obs)


def outcome_on_every_turn(*args, **kwargs):
    """Every turn's step return is the outcome R itself, not discounted from the last turn."""
    return _gigpo(*args, **kwargs, discount=False)


def mean_norm_at_the_step_level_only(*args, **kwargs):
    """step_norm 'mean' drops the std at the step level but keeps it at the episode level."""
    return _gigpo(*args, **kwargs, std_everywhere=True)


def statistics_in_float32_at_both_levels(*args, **kwargs):
    """Rewards, step returns and their group statistics in float32: a group whose eight rewards
    are all 0.925, or a step group whose returns are all 0.95 * 0.925, gets a mean one ulp off,
    divided by a std of the same size, instead of exactly 0."""
    return _gigpo(*args, **kwargs, dtype=torch.float32, normalise=statistics_in_float32)


# --- problem 7: REINFORCE++ ---------------------------------------------------------------------


def _reinforce_pp(
    batch,
    cfg,
    kl_sign=1.0,
    per_row=False,
    outcome_on_row_end=False,
    whiten_everywhere=False,
    in_float32=False,
    eps_on_the_std=False,
):
    ret = torch.zeros_like(batch.loss_mask)  # (B, T)
    kl = cfg.kl_coef if batch.ref_logprobs is not None else 0.0
    steps = [(agent_tokens(batch, n), batch.rewards[n]) for n in range(len(batch.rewards))]
    if per_row:  # each row its own episode, each with the outcome on its last agent token
        steps = [
            ((torch.full((len(c),), b), c), batch.rewards[batch.traj[b]]) for b, c in _agent_columns(batch)
        ]
    for (b, t), outcome in steps:
        if len(b) == 0:
            continue
        r = torch.zeros(len(b))
        if outcome_on_row_end:  # the outcome on the row's last column (padding, for a short row): lost
            r[-1] = outcome * batch.loss_mask[b[-1], -1]
        else:
            r[-1] = outcome
        if kl:
            r = r - kl_sign * kl * (batch.old_logprobs[b, t] - batch.ref_logprobs[b, t])
        ret[b, t] = returns_to_go(r, cfg.gamma)
    m = torch.ones_like(batch.loss_mask) if whiten_everywhere else batch.loss_mask
    mean, var = global_masked_moments(ret, m)
    if in_float32:  # the same moments, taken in float32
        mean = (ret * m).sum() / m.sum()
        var = (((ret - mean) * m) ** 2).sum() / m.sum()
        batch.returns = ret
        batch.advantages = (ret - mean) * torch.rsqrt(var + cfg.whiten_eps) * batch.loss_mask
        return
    scale = 1 / (var.sqrt() + cfg.whiten_eps) if eps_on_the_std else torch.rsqrt(var + cfg.whiten_eps)
    batch.returns = ret
    batch.advantages = ((ret.double() - mean) * scale).float() * batch.loss_mask


def _agent_columns(batch):
    return [(b, batch.loss_mask[b].nonzero().squeeze(-1)) for b in range(len(batch))]


def kl_added_not_subtracted(batch, cfg, state=None):
    """r_k = +kl_coef * (old_logp - ref_logp): moving away from the reference is rewarded."""
    _reinforce_pp(batch, cfg, kl_sign=-1.0)


def each_row_an_episode(batch, cfg, state=None):
    """One row per turn (context_turns=K), each taken for a whole episode: every turn's last token
    gets the outcome, and no return flows from a later turn to an earlier one."""
    _reinforce_pp(batch, cfg, per_row=True)


def outcome_on_the_rows_last_column(batch, cfg, state=None):
    """The outcome put on the row's last column and then masked: a row shorter than the batch's
    ends in padding there, and its reward vanishes (the reference code's lost reward)."""
    _reinforce_pp(batch, cfg, outcome_on_row_end=True)


def whitened_over_every_position(batch, cfg, state=None):
    """mean and var over all (B, T) positions, the zeros off the agent tokens included."""
    _reinforce_pp(batch, cfg, whiten_everywhere=True)


def eps_added_to_the_std(batch, cfg, state=None):
    """(G - mean) / (std + whiten_eps) instead of / sqrt(var + whiten_eps): the same for a small
    eps, not for a large one."""
    _reinforce_pp(batch, cfg, eps_on_the_std=True)


def whitened_in_float32(batch, cfg, state=None):
    """The moments taken in float32: equal returns of 0.925 get a mean one ulp off, and divided by
    sqrt(0 + whiten_eps) that ulp becomes an advantage far from 0."""
    _reinforce_pp(batch, cfg, in_float32=True)


# --- problem 8: the rollout loop ----------------------------------------------------------------


def _begin(env, spec, tasks, slots):
    """Every episode reset: its trajectory, and the episodes in play (a failed reset is done)."""
    from agent import Trajectory

    trajs = [Trajectory(task=t, group=i) for i, t in enumerate(tasks)]
    live = []
    for i, (tr, r) in enumerate(zip(trajs, env.reset(slots, tasks))):
        tr.messages += [
            {"role": "system", "content": spec.instruction},
            {"role": "user", "content": r["observation"]},
        ]
        tr.observations.append(r["observation"])
        if r.get("error"):
            tr.error, tr.done = r["error"], True
        else:
            live.append(i)
    return trajs, live


def _rollout(
    env,
    spec,
    tasks,
    replies,
    max_turns,
    send_text=False,
    drop_finished=True,
    scale=True,
    done_at_horizon=False,
    score_default="sum",
    success_from="reward",
    error_done=False,
    step_every_episode=False,
    slot_of=lambda i, task: i,
):
    slots = [slot_of(i, t) for i, t in enumerate(tasks)]
    trajs, live = _begin(env, spec, tasks, slots)
    started = list(live)
    for turn in range(max_turns):
        sent = started if step_every_episode else live
        said = [replies[i][min(turn, len(replies[i]) - 1)] for i in sent]
        actions = [x if send_text else spec.parse_action(x) for x in said]
        answers = dict(zip(sent, env.step([slots[i] for i in sent], actions)))
        texts = [replies[i][turn] for i in live]
        actions = texts if send_text else [spec.parse_action(x) for x in texts]
        still = []
        for i, text, action in zip(live, texts, actions):
            tr, r = trajs[i], answers[i]
            tr.messages.append({"role": "assistant", "content": text})
            tr.actions.append(action)
            tr.rewards.append(float(r.get("reward", 0.0)))
            tr.score = float(r.get("score", sum(tr.rewards) if score_default == "sum" else tr.rewards[-1]))
            if score_default == "scores summed":
                tr.scores = getattr(tr, "scores", 0.0) + float(r.get("score", tr.rewards[-1]))
                tr.score = tr.scores
            tr.observations.append(r.get("observation", ""))
            tr.error, tr.done = r.get("error", ""), bool(r.get("done") or (error_done and r.get("error")))
            if drop_finished and (tr.done or tr.error):
                continue
            tr.messages.append({"role": "user", "content": r.get("observation", "")})
            still.append(i)
        live = still
    for tr in trajs:
        tr.reward = tr.score / spec.score_scale if scale else tr.score
        tr.success = {
            "reward": tr.reward >= spec.success_at,
            "score": tr.score >= spec.success_at,
            "reward, strictly": tr.reward > spec.success_at,
        }[success_from]
        tr.done = tr.done or (done_at_horizon and not tr.error)
    return trajs


def reply_text_sent_as_the_action(*args, **kwargs):
    """The whole reply goes to the environment, not the action parsed from it: every turn refused."""
    return _rollout(*args, **kwargs, send_text=True)


def finished_episodes_keep_stepping(*args, **kwargs):
    """An episode the environment ended stays live: it is stepped again, past its end."""
    return _rollout(*args, **kwargs, drop_finished=False)


def score_not_scaled(*args, **kwargs):
    """reward = score, not score / spec.score_scale: BabyAI's 0-1 but TextCraft's or SciWorld's 0-100."""
    return _rollout(*args, **kwargs, scale=False)


def horizon_counted_as_done(*args, **kwargs):
    """An episode the horizon cut is marked done, as if the environment had ended it: the adaptive
    schedule's cut share then reads 0."""
    return _rollout(*args, **kwargs, done_at_horizon=True)


def score_from_the_last_reward(*args, **kwargs):
    """Without a "score" in the step's result, the score is the last step's reward, not the sum of
    the episode's rewards: an environment that pays along the way is paid for its last step only."""
    return _rollout(*args, **kwargs, score_default="last")


def scores_summed(*args, **kwargs):
    """The episode's score as the sum of every step's "score": a server's score is the running
    total (SciWorld's, the corridor's), so the sum counts each step's progress again."""
    return _rollout(*args, **kwargs, score_default="scores summed")


def success_from_the_score(*args, **kwargs):
    """success = score >= success_at: the unscaled score (TextCraft's 0-100, the corridor's 0-10)
    makes nearly every finished episode a success."""
    return _rollout(*args, **kwargs, success_from="score")


def success_strictly_above(*args, **kwargs):
    """success = reward > success_at: an episode that reaches the threshold exactly fails."""
    return _rollout(*args, **kwargs, success_from="reward, strictly")


def an_error_marked_done(*args, **kwargs):
    """An environment error marks the episode done, as if the environment had ended it: a crashed
    server's episode counts as finished, not as failed in flight."""
    return _rollout(*args, **kwargs, error_done=True)


def every_episode_stepped_every_turn(*args, **kwargs):
    """Each turn steps every episode that began, and records the live ones only: an episode the
    environment ended, or that failed, is stepped again, which a real server refuses (a failed
    episode's instance is gone) or answers with its last observation, a wasted request per turn."""
    return _rollout(*args, **kwargs, step_every_episode=True)


def the_task_as_the_slot(*args, **kwargs):
    """Episode i sent to slot tasks[i], not slot i: a pool of len(tasks) instances has no slot 103,
    and two episodes of one task would share an instance."""
    return _rollout(*args, **kwargs, slot_of=lambda i, task: task)


# --- problem 10: your own environment --------------------------------------------------------------
# Each mistake is a whole answer (Game, openenv_app, project_app): find_it.py's with one rule changed.


def _answer(
    game=find_it.Game, openenv_environment=None, one_game=False, sessions=256, project_app=None
) -> SimpleNamespace:
    """find_it.py's three names around `game`; `openenv_environment`: a wrapper of one's own;
    `one_game`: each server handed one Game for all its episodes, not a way to make one;
    `sessions`: the most OpenEnv sessions at once; `project_app`: a server of one's own."""
    shared = game()
    make = (lambda: shared) if one_game else game

    def openenv_app():
        from openenv.core.env_server.http_server import create_fastapi_app

        classes = (openenv_environment or find_it.openenv_environment)(make)
        return create_fastapi_app(*classes, max_concurrent_envs=sessions, env_name="find_it")

    serve = project_app or (lambda: find_it.project_app(make))
    return SimpleNamespace(Game=game, project_app=serve, openenv_app=openenv_app)


class _OneTask(find_it.Game):
    def reset(self, data_idx):
        return super().reset(0)


def the_task_id_ignored():
    """Every task id starts task 0: the trainer trains on one task, and the test split is that task."""
    return _answer(_OneTask)


class _Drawn(find_it.Game):
    def reset(self, data_idx):
        return super().reset(random.randrange(20))


class _Listed(find_it.Game):
    PUZZLES = list(range(20))

    def reset(self, data_idx):
        return super().reset(self.PUZZLES[data_idx])


def twenty_puzzles_indexed():
    """The task id indexes a list of twenty puzzles: the trainer's seeds run to 10199 (train
    0-9999, test 10000-10199), and every reset past the list is an error."""
    return _answer(_Listed)


def the_task_drawn_at_random():
    """The puzzle drawn from an unseeded generator: the same task twice is two tasks, GRPO's group
    of one task holds different puzzles, and no evaluation can be repeated."""
    return _answer(_Drawn)


class _StepsKept(find_it.Game):
    def reset(self, data_idx):
        steps = self.steps
        answer = super().reset(data_idx)
        self.steps = steps  # the step count kept from the episode before
        return answer


def the_step_count_kept_across_resets():
    """The step count not reset: an instance's second episode ends early, so the server's instances,
    reused from episode to episode, give an episode that depends on what they played before."""
    return _answer(_StepsKept)


class _NoLimit(find_it.Game):
    def answer(self, text, reward, done=False):
        answer = super().answer(text, reward, done)
        answer["done"] = done  # only finding the item ends it
        return answer


def no_step_limit():
    """Only success ends an episode: an agent that never finds the item never gets a done (the
    horizon cuts it, and the adaptive schedule reads every such episode as cut)."""
    return _answer(_NoLimit)


class _DoneForgotten(find_it.Game):
    def answer(self, text, reward, done=False):
        return super().answer(text, reward, False)


def done_forgotten_on_success():
    """Finding the item rewards 1 but does not end the episode: the agent may find it again and
    again, each time for 1, until the step limit."""
    return _answer(_DoneForgotten)


class _Penalty(find_it.Game):
    def step(self, action):
        answer = super().step(action)
        if "is not an action" in answer["observation"]:
            answer["reward"] = -1.0
        return answer


def a_penalty_for_a_wrong_action():
    """-1 for an action that is not one: out of [0, 1], and an episode's sum no longer says whether
    it succeeded (1 - 1 = 0, a success read as a failure)."""
    return _answer(_Penalty)


class _Score(find_it.Game):
    def answer(self, text, reward, done=False):
        return super().answer(text, reward * (find_it.MAX_STEPS - self.steps + 1), done)


def the_score_as_the_reward():
    """A quicker find scores more (MAX_STEPS - steps + 1), as a game's score: rewards up to 6, out
    of [0, 1]; write the score as "score" beside a reward in range, as BabyAI does."""
    return _answer(_Score)


def _from_index(make_env):
    FindIt, Say, Seen = find_it.openenv_environment(make_env)

    class FromIndex(FindIt):
        def reset(self, seed=None, episode_id=None, split="train", index=0, **kwargs):
            return super().reset(seed=index, episode_id=episode_id)

    return FromIndex, Say, Seen


def openenv_task_from_the_index():
    """The OpenEnv wrapper reads the task from `index`, as a task API names it; the trainer sends a
    server without one {"seed": task id}, so every episode is task 0."""
    return _answer(openenv_environment=_from_index)


def project_server_without_openenv():
    """build_app alone, OpenEnv's dialect not added: the server answers this project's client, but
    `train.py --env openenv --url` finds no OpenEnv environment there (and, without an entry in
    envs/tasks.py, --env openenv is the only way to train on it)."""
    from servers.common import build_app

    return _answer(project_app=lambda: build_app("Find it", find_it.Game, inline_calls=True))


def sixty_four_sessions():
    """OpenEnv's server capped at 64 sessions: eval.py's 200 test tasks open 200, and the rest end
    in an environment error the run leaves out of its rates."""
    return _answer(sessions=64)


def one_game_for_every_episode():
    """Each server handed one Game, not a way to make one: two episodes at once share it, and the
    second reset overwrites the first's task."""
    return _answer(one_game=True)


MISTAKES = {
    1: {
        "observation tokens in the mask": observation_tokens_in_the_mask,
        "end-of-turn token not trained": end_of_turn_not_trained,
        "no end-of-turn token after a cut reply": no_end_of_turn_after_a_cut_reply,
        "the last observation appended": last_observation_appended,
        "the reply re-tokenised from its text": reply_retokenised,
    },
    2: {
        "std over the batch instead of the group": std_over_the_batch,
        "statistics in float32": statistics_in_float32,
        "population std (n, not n - 1)": population_std,
        "eps under the square root": eps_under_the_square_root,
    },
    3: {
        "the KL term's sign flipped": kl_sign_flipped,
        "min instead of max": min_instead_of_max,
        "log ratio not masked": log_ratio_not_masked,
        "mean over every position": mean_over_every_position,
        "the k3 not bounded": k3_not_bounded,
        "clip-higher ignored": clip_higher_ignored,
        "the entropy detached": entropy_detached,
        "the k3's log-ratio not clamped": k3_log_ratio_not_clamped,
    },
    4: {
        "the last token bootstraps from its own value": last_token_bootstraps_from_its_own_value,
        "gamma left out of the recursion": recursion_without_gamma,
        "returns without the values": returns_without_the_values,
    },
    5: {
        "one step early (step // S)": one_step_early,
        "one stage late (stages counted from 1)": one_stage_late,
        "the last stage not held": last_stage_not_held,
    },
    6: {
        "anchors matched across groups": anchors_matched_across_groups,
        "the outcome on every turn": outcome_on_every_turn,
        "mean-norm at the step level only": mean_norm_at_the_step_level_only,
        "statistics in float32 at both levels": statistics_in_float32_at_both_levels,
    },
    7: {
        "the KL added, not subtracted": kl_added_not_subtracted,
        "each row taken for an episode": each_row_an_episode,
        "the outcome on the row's last column": outcome_on_the_rows_last_column,
        "whitened over every position": whitened_over_every_position,
        "whitened in float32": whitened_in_float32,
        "whiten_eps added to the std": eps_added_to_the_std,
    },
    8: {
        "the reply text sent as the action": reply_text_sent_as_the_action,
        "finished episodes keep stepping": finished_episodes_keep_stepping,
        "the score not scaled": score_not_scaled,
        "the horizon counted as done": horizon_counted_as_done,
        "the score from the last reward": score_from_the_last_reward,
        "the scores summed": scores_summed,
        "success from the score, not the reward": success_from_the_score,
        "success strictly above success_at": success_strictly_above,
        "an error marked done": an_error_marked_done,
        "every episode stepped every turn": every_episode_stepped_every_turn,
        "the task as the slot": the_task_as_the_slot,
    },
    10: {
        "the task id ignored": the_task_id_ignored(),
        "twenty puzzles, indexed by the task id": twenty_puzzles_indexed(),
        "the task drawn at random": the_task_drawn_at_random(),
        "the step count kept across resets": the_step_count_kept_across_resets(),
        "no step limit": no_step_limit(),
        "done forgotten on success": done_forgotten_on_success(),
        "a penalty for a wrong action": a_penalty_for_a_wrong_action(),
        "the score as the reward": the_score_as_the_reward(),
        "the OpenEnv wrapper reads the task from index": openenv_task_from_the_index(),
        "one Game for every episode": one_game_for_every_episode(),
        "sixty-four OpenEnv sessions": sixty_four_sessions(),
        "a project server without OpenEnv's dialect": project_server_without_openenv(),
    },
}
