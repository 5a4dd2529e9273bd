"""Problem 8's mistakes (the multi-turn rollout loop): wrong versions students write, one small
function each, in `MISTAKES[what went wrong]`. Read them after your check of problem 8 passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 8` fails on each. Most share a helper (`_rollout`) that
writes the problem once with its rules changeable; each mistake changes one rule. A mistake's
docstring says what it costs.
"""


def _begin(env, spec, tasks, slots, reset_error_live=False):
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
        if r.get("error") and not reset_error_live:
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
    turns_short=0,
    last_observation=True,
    final_message=False,
    reset_error_live=False,
):
    slots = [slot_of(i, t) for i, t in enumerate(tasks)]
    trajs, live = _begin(env, spec, tasks, slots, reset_error_live)
    started = list(live)
    for turn in range(max_turns - turns_short):
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
            tr.error, tr.done = r.get("error", ""), bool(r.get("done") or (error_done and r.get("error")))
            if last_observation or not (tr.done or tr.error):
                tr.observations.append(r.get("observation", ""))
            if drop_finished and (tr.done or tr.error):
                if final_message:
                    tr.messages.append({"role": "user", "content": r.get("observation", "")})
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


def one_turn_short(*args, **kwargs):
    """range(max_turns - 1) turns, the horizon read as the last turn's index: every episode the
    horizon cuts has a turn fewer than it was allowed."""
    return _rollout(*args, **kwargs, turns_short=1)


def the_last_observation_not_kept(*args, **kwargs):
    """An observation kept only while the episode goes on: the answer that ended it ("You reached
    the goal.") is lost from the record."""
    return _rollout(*args, **kwargs, last_observation=False)


def the_last_observation_told_to_the_agent(*args, **kwargs):
    """The observation that ended the episode appended as a user message too: the conversation no
    longer ends on the agent's last reply, where its outcome belongs."""
    return _rollout(*args, **kwargs, final_message=True)


def a_failed_reset_stepped(*args, **kwargs):
    """An episode whose reset failed is kept in play: it is stepped, which the server refuses (no
    episode started there)."""
    return _rollout(*args, **kwargs, reset_error_live=True)


MISTAKES = {
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
    "one turn short of the horizon": one_turn_short,
    "the last observation not kept": the_last_observation_not_kept,
    "the last observation told to the agent": the_last_observation_told_to_the_agent,
    "a failed reset stepped": a_failed_reset_stepped,
}
