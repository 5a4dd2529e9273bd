"""Problem 1's mistakes (the loss mask of a multi-turn conversation): wrong versions students write,
one small function each, in `MISTAKES[what went wrong]`. Read them after your check of problem 1
passes.

Where it sits: exercises/mistakes/__init__.py gathers every problem's file; tests/test_exercises.py
proves that `python -m exercises.check 1` fails on each. Most share a helper (`_row`) that writes
the problem once with its rules changeable; each mistake changes one rule. A mistake's docstring
says what it costs.
"""

from agent import chat_ids, turn_suffix_ids
from batch import Row


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


MISTAKES = {
    "observation tokens in the mask": observation_tokens_in_the_mask,
    "end-of-turn token not trained": end_of_turn_not_trained,
    "no end-of-turn token after a cut reply": no_end_of_turn_after_a_cut_reply,
    "the last observation appended": last_observation_appended,
    "the reply re-tokenised from its text": reply_retokenised,
}
