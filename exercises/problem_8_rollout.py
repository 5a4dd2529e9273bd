"""Problem 8: the multi-turn rollout loop: observe, reply, parse, step, until done or the horizon.

Mirrors: agent.py, `_rollout_chunk` with `_begin` and `_record` (read them after your check
passes): the loop every training step and evaluation runs, all episodes in step, one turn at a
time. Read first: train.py, `train` (the rollout is its step 2); exercises/corridor.py, the
environment here.

The environment answers in batches, as `envs.EnvPool` does: `env.reset(slots, tasks)` gives one
dict per episode ("observation", maybe "error"); `env.step(slots, actions)` one dict per episode
stepped ("observation", "reward", maybe "score", "done", maybe "error"); a step for an episode not
in play (its reset failed, or it ended) is refused, as a real server refuses it. The slot of
episode i is i. The replies are scripted: episode i says replies[i][0], then replies[i][1], ...
(no model is needed); the action sent is `spec.parse_action(reply)`, never the reply itself.

Per episode, an `agent.Trajectory(task=tasks[i], group=i)` with:
- messages: the conversation as the agent saw it, each a dict {"role": ..., "content": ...}: the
  system message (spec.instruction), then the first observation as a user message; per turn the
  reply (assistant) and, if the episode goes on or only the horizon stopped it, the new
  observation (user).
- observations: the first observation, then every step's (the last one too); actions: every
  parsed action; rewards: every step's "reward" (0 when absent).
- score: the last step's "score"; where that result has none, the episode's rewards add up to
  it. reward: the score on the 0-1 scale (spec.score_scale is the score's full scale); success:
  reward at least spec.success_at.
- done: the last step's "done", as the environment said it (the horizon cutting an episode is
  not the environment ending it).
- error: the message of a result with an "error". A step's error takes the episode out of play;
  its `done` stays what that result said. An error at reset: the reset's observation is still
  recorded (as the first user message and the first observation), no turn is played, and `done`
  is True.

Worked example (the corridor, task 2, replies "Action: forward" twice, horizon 5): two turns;
observations ["You are at 0. The goal is at 2.", "You are at 1. ...", "You reached the goal."];
the second step sends score 8, so reward 0.8 and success True; done True.

Decide: when an episode leaves the live set; which episodes a step is sent for; what happens to an
episode the environment ended one turn while the others go on.

Task: return the list of trajectories, in task order. Check: python -m exercises.check 8
"""

from agent import Trajectory  # noqa: F401 (what to return)


def rollout(env, spec, tasks: list[int], replies: list[list[str]], max_turns: int) -> list:
    raise NotImplementedError("problem 8: the multi-turn rollout loop (this file's docstring)")
