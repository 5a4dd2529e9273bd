"""Problem 1: the loss mask of a multi-turn conversation (which tokens are the agent's).

Mirrors: agent.py, `WholeConversation` (its `context`, `add_reply`, `add_observation`), the
token stream of one episode when the agent sees the whole conversation (`context_turns=0`).

An episode is ONE token sequence, built turn by turn, with a loss mask that is 1 exactly on the
tokens the agent sampled:

    [system + first observation][reply 1][glue + observation 2 + header][reply 2] ... [reply n]
     mask 0                      1 ... 1  0 ... 0                        1 ... 1       1 ... 1

- The prompt is `agent.chat_ids(tokenizer, first_messages)` (the chat template, with the assistant
  header): mask 0, log-prob 0.
- Reply k is appended as its sampled ids, never re-tokenised from text: mask 1, its sampled
  log-probs. A reply that ended itself ends with a stop token (`stop_ids`), which the agent sampled
  too, so it is trained.
- After every reply but the last, the next observation follows: `agent.turn_suffix_ids(tokenizer,
  observation)` (the template's glue, the user turn, the assistant header): mask 0, log-prob 0.
  A reply cut at the token limit (its last id is not in `stop_ids`) first gets the end-of-turn
  token `end_of_turn`, which the agent did NOT sample: mask 0, log-prob 0.
- Nothing follows the last reply: the sequence ends on the agent's own last token, where the
  outcome reward will sit.

Task: return a `batch.Row(ids, mask, logprobs)` (leave `allowed` empty).
Check: python -m exercises.check 1
"""

from batch import Row


def episode_row(
    tokenizer,
    first_messages: list[dict],
    replies: list[tuple[list[int], list[float]]],
    observations: list[str],
    end_of_turn: int,
    stop_ids: set[int],
) -> Row:
    """first_messages: the system message and the first observation (chat messages).
    replies: per turn, (sampled ids, their log-probs). observations: what the agent saw after each
    reply but the last (len(replies) - 1 of them). Returns the episode's one Row."""
    raise NotImplementedError("problem 1: build the episode's Row (this file's docstring)")
