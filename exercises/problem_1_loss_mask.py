"""Problem 1: the loss mask of a multi-turn conversation (which tokens are the agent's).

Mirrors: agent.py, `WholeConversation` (read it after your check passes), the token stream of
one episode when the agent sees the whole conversation (`context_turns=0`).

An episode is ONE token sequence, built turn by turn, with a loss mask and the sampled log-probs
beside it. What it must be:

- The ids are exactly what the chat template would write for this conversation, and what the
  policy will be scored on in the update: the prompt (`agent.chat_ids(tokenizer, first_messages)`,
  the template with its assistant header), then each reply, then the template's glue and the next
  observation (`agent.turn_suffix_ids(tokenizer, observation)`), and so on.
- The loss mask is 1 on exactly the tokens the agent sampled, 0 on every other; a token's log-prob
  is the one it was sampled with, and 0 where the mask is 0.
- A reply is stored as the ids that were sampled, never re-tokenised from its text.
- The row ends on the agent's own last token: the outcome reward will sit there.

Picture (three turns; the second reply ended itself, so it carries its stop token):

    [system + observation 1 + header][reply 1][glue + observation 2 + header][reply 2][stop] ...
     mask 0                           1 ... 1  0 ... 0                        1 ... 1  ?

Decide, from the rules above (each one is a case of the check):
- A reply that ended itself ends with a stop token (one of `stop_ids`). Is it trained?
- A reply cut at the token limit has no stop token, but the template closes every assistant turn
  with `end_of_turn` before the glue. What goes between such a reply and the next observation,
  and with which mask and log-prob?
- After the last reply, is anything appended?

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
