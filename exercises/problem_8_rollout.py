"""Problem 8: the multi-turn rollout loop: observe, reply, parse, step, until done or the horizon.

Mirrors: agent.py, `_rollout_chunk` (with `_begin` and `_record`), the loop every training step
and evaluation runs: all episodes in step, one turn at a time.

    first = env.reset(slots, tasks)                     one dict per episode: "observation", maybe "error"
    for turn in range(max_turns):
        for each live episode i: its reply text -> action = spec.parse_action(text)
        results = env.step(live slots, actions)         one dict per live episode: "observation",
                                                        "reward", "score", "done", maybe "error"
        an episode stays live unless its result is done or an error

Here the replies are scripted: episode i says replies[i][0], then replies[i][1], ... (so no model
is needed). The slot of episode i is i. Per episode, an `agent.Trajectory(task=tasks[i], group=i)`:
- messages: {"role": "system", "content": spec.instruction}, then {"role": "user", "content":
  the first observation}; after each turn {"role": "assistant", "content": the reply text} and,
  unless that step ended the episode (done, or an error), {"role": "user", "content": the new
  observation} (also after the last turn the horizon allows).
- observations: the first observation, then the observation of every step (the last one too).
  actions: the parsed action of every turn. rewards: each step's "reward" (default 0).
- score: the last step's "score" (default: the sum of the rewards); reward = score /
  spec.score_scale; success = reward >= spec.success_at.
- done: the last step's "done" (False when the horizon cut the episode). A result with an "error"
  ends the episode: trajectory.error holds the message. An error at reset: no turn, done True.

Task: return the list of trajectories, in task order. Check: python -m exercises.check 8
"""

from agent import Trajectory  # noqa: F401 (what to return)


def rollout(env, spec, tasks: list[int], replies: list[list[str]], max_turns: int) -> list:
    raise NotImplementedError("problem 8: the multi-turn rollout loop (this file's docstring)")
