"""The agent: a chat LLM that observes, thinks and acts over many turns (AgentGym-RL, section 2).

Where it sits: `train.py` and `eval.py` call `rollout()` here; `rollout()` drives environment
instances through `envs.EnvPool` and returns `Trajectory`s, whose token sequences (`batch.Row`)
`batch.make_batch()` turns into padded tensors for the algorithm files. `load_policy()` loads any
Hugging Face causal LM with a chat template; the CPU `tiny` policy is built and loaded by
`tiny.py`, which imports this file (never the other way round).

Token in, token out. The model's sampled token ids and their log-probs are kept exactly as
sampled; generated text is decoded only to be sent to the environment and is never tokenised
again to build a training sequence. A trajectory with full context is ONE token sequence

    [system + first observation][reply 1 <eos>][glue + observation 2 + assistant header][reply 2 <eos>] ...
     loss_mask = 0               1 ... 1        0 ... 0                                  1 ... 1

where the loss mask is 1 exactly on the agent's own sampled tokens: its reply and the end-of-turn
token it sampled to end it. A reply cut at `max_new_tokens` sampled none; the end-of-turn token
the stream then needs before the glue is the template's, with mask 0 (`WholeConversation`).
The observation that follows the last action is not appended: nothing after it is trained and
the outcome reward belongs to the agent's last token (docs/algorithms.md, "the reference
code's lost reward"). With `context_turns=K > 0` the agent sees only its last K turns (the tiny policy uses
K=1: the current observation); each turn is then its own sequence ("row"), rows in turn order.

Whole-conversation episodes keep their KV cache from turn to turn (`kv_cache.Encoded`): each
turn encodes only the tokens the stream gained (the last reply's final token, the glue and the
new observation), at the positions they have in the stream, so the model conditions on exactly
the stored trajectory tokens, as if the whole stream were encoded afresh (tests/test_kv_cache.py).
What each turn encodes goes in buckets of similar length, fresh prompts once per distinct prompt
(`kv_cache.prefill`): the prefill's cost is per token, padding included.

Invalid-action masking (an option, on for the `tiny` policy): when the environment lists its
available actions, sampling is restricted to them by a prefix tree over their token ids; the
same mask is applied when log-probs are recomputed in the update, so the policy ratio is exact.
"""

import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from batch import Row
from envs import EnvPool, EnvSpec
from machinery.kv_cache import Decoder, Encoded, prefill, sliding, use_decode_attention
from machinery.logprobs import fp32_head
from machinery.timing import timed

# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


@dataclass
class Trajectory:
    task: int  # the data_idx
    group: int  # rollouts of the same task in one batch share a group
    rows: list[Row] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)  # the conversation, for humans
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)  # a picture per observation, if the server renders
    rewards: list[float] = field(default_factory=list)  # per-step env rewards (for logs)
    reward: float = 0.0  # the outcome reward that trains the agent
    score: float = 0.0  # the env's final score, as it reports it
    success: bool = False
    done: bool = False  # the env said done, or the reset failed (a step's error: as the env said)
    category: str = ""
    error: str = ""
    truncated: int = 0  # replies cut at max_new_tokens (sent parsed as far as they go, as AgentGym does)
    over_budget: bool = False  # ended by --conversation-tokens before the horizon (not done)
    # per turn, the advantage the update gave it, and per token the inspector's numbers
    # (credit.turn_credit, credit.token_rows)
    credit: dict = field(default_factory=dict)

    @property
    def turns(self) -> int:
        return len(self.actions)


@dataclass
class Policy:
    model: torch.nn.Module
    tokenizer: object
    mask_actions: bool = False  # restrict sampling to the env's available actions
    context_turns: int = 0  # 0: the whole conversation; K: only the last K turns
    max_new_tokens: int = 512
    conversation_tokens: int = 0  # 0: none; N: an episode ends before a turn that would start past N tokens
    temperature: float = 1.0  # 0: greedy (the most likely token; log-probs at temperature 1)
    use_instruction: bool = True  # send the env's instruction as the system message
    is_tiny: bool = False  # the built-in CPU policy (train.py picks its learning rate by this)
    path: str = ""  # the folder or hub id it was loaded from (train.py's reference model)
    reuse_cache: bool = True  # whole-conversation mode: keep each episode's KV cache across turns
    generation_dtype: str = ""  # "": generate with the policy; else a merged copy in it (generation_model)

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def stop_ids(self) -> set[int]:
        tok, ids = self.tokenizer, {self.end_of_turn}
        for t in (tok.eos_token, "<|im_end|>", "<|eot_id|>", "<|end|>"):
            i = tok.convert_tokens_to_ids(t) if t else None
            if isinstance(i, int) and i != tok.unk_token_id:
                ids.add(i)
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        return ids

    @functools.cached_property
    def _tries(self) -> dict:  # action list -> its prefix tree (action_trie)
        return {}

    @functools.cached_property
    def _action_ids(self) -> dict:  # action -> its token ids + end-of-turn (action_trie)
        return {}

    @functools.cached_property
    def _generators(self) -> dict:  # dtype -> the generation copy (generation_model)
        return {}

    @functools.cached_property
    def end_of_turn(self) -> int:
        """The token the chat template puts after a reply (see `end_of_turn_id`)."""
        return end_of_turn_id(self.tokenizer)


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_policy(path: str, device: str = "cpu", dtype=None, tokenizer_class=None, **settings) -> Policy:
    """Any Hugging Face causal LM with a chat template, by hub id or local path (a checkpoint
    saved by train.py). `settings` are `Policy` fields (mask_actions, context_turns, ...);
    `tokenizer_class` overrides AutoTokenizer's choice (tiny.py needs that)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per weight file is noise next to train.py's own
    tok = (tokenizer_class or AutoTokenizer).from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32).to(device)
    return Policy(model=model, tokenizer=tok, path=path, **settings)


# ---------------------------------------------------------------------------------------------
# Chat template, token in / token out
# ---------------------------------------------------------------------------------------------


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The prompt for the next assistant turn, as token ids."""
    return chat_ids_batch(tokenizer, [messages])[0]


def chat_ids_batch(tokenizer, conversations: list[list[dict]]) -> list[list[int]]:
    """`chat_ids` of several conversations at once: the template renders each, the tokenizer
    encodes them in one call (the same ids, in about half the time of one call each)."""
    out = tokenizer.apply_chat_template(conversations, add_generation_prompt=True, tokenize=True)
    return [list(ids) for ids in (out["input_ids"] if hasattr(out, "keys") else out)]


# A reply the template renders around; no template changes it (Llama-3's `| trim` keeps it too).
_REPLY = "<<reply>>"


def _after_reply(tokenizer, next_user: str | None) -> str:
    """The text the chat template writes after an assistant reply's content: its end of turn and,
    if `next_user` is given, the next user turn and the assistant header."""
    base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _REPLY}]
    before = tokenizer.apply_chat_template(base, tokenize=False)
    tail = before[before.index(_REPLY) + len(_REPLY) :]
    if next_user is None:
        return tail
    after = tokenizer.apply_chat_template(
        base + [{"role": "user", "content": next_user}], tokenize=False, add_generation_prompt=True
    )
    if not after.startswith(before):  # the template rewrote an earlier turn: no append-only stream
        raise ValueError("chat template does not extend a conversation by appending text")
    return tail + after[len(before) :]


def end_of_turn_id(tokenizer) -> int:
    """The token the chat template puts right after an assistant reply (`<|im_end|>` for ChatML,
    `<|eot_id|>` for Llama-3, whatever the tokenizer calls its EOS): the model ends its turn by
    sampling it, so it is an agent token."""
    ids = tokenizer(_after_reply(tokenizer, None), add_special_tokens=False)["input_ids"]
    if not ids or ids[0] not in set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder):
        raise ValueError("chat template writes no end-of-turn token right after a reply")
    return ids[0]


def turn_suffix_ids(tokenizer, observation: str) -> list[int]:
    """The ids the chat template writes after an assistant turn's end-of-turn token (that token not
    included): its glue, a user turn holding `observation`, and the assistant header. The text is
    tokenised from the end-of-turn token, a special token, so tokenising it alone gives the same
    ids as inside the whole conversation (tests/test_chat_templates.py: SmolLM2's, Qwen2.5's and
    Llama-3's templates)."""
    ids = tokenizer(_after_reply(tokenizer, observation), add_special_tokens=False)["input_ids"]
    assert ids[0] == end_of_turn_id(tokenizer)
    return ids[1:]


# ---------------------------------------------------------------------------------------------
# The model that generates: the policy, or a half-precision copy of it
# ---------------------------------------------------------------------------------------------


def generation_model(policy: Policy):
    """The model `rollout` samples from. By default the policy's own. With `generation_dtype` set
    (`bfloat16`), a copy of the policy in that dtype, any LoRA adapters merged into its weights
    (W0 + alpha/r B A, machinery/lora.py), refreshed from the policy at every call: half the bytes
    read per decode step and no adapter modules to run (on a CPU with AVX512-BF16, bf16 matmuls
    run ~2x fp32's). It changes the numbers: the stored log-probs are the bf16 model's, which the
    update's float32 forward then differs from by bf16 rounding (the ratio is not exactly 1 at the
    first epoch), as when a bf16 inference engine feeds a float32 trainer. The copy's LM head is
    its own float32 weight (logprobs.fp32_head), as the policy's is: log-probs in float32, whatever
    the blocks' dtype. On a CPU its one-token steps attend through `kv_cache.decode_attention`.
    Under --mixed-precision bf16 on a CPU, the default (config.generation_dtype)."""
    if not policy.generation_dtype:
        return policy.model
    src = policy.model.get_base_model() if hasattr(policy.model, "get_base_model") else policy.model
    copy = policy._generators.get(policy.generation_dtype)
    if copy is None:
        from transformers import AutoModelForCausalLM

        dtype = getattr(torch, policy.generation_dtype)
        copy = AutoModelForCausalLM.from_config(src.config, dtype=dtype).to(policy.device)
        head = copy.get_output_embeddings()
        head.weight = torch.nn.Parameter(head.weight.detach().float(), requires_grad=False)  # untied
        fp32_head(copy)
        if policy.device.type == "cpu":  # (measured on a CPU; a GPU keeps SDPA's kernels)
            use_decode_attention(copy)
        copy.eval().requires_grad_(False)
        copy.generation_config = src.generation_config
        policy._generators[policy.generation_dtype] = copy
    into = dict([*copy.named_parameters(), *copy.named_buffers()])
    head = copy.get_output_embeddings().weight
    filled = {n for n, p in copy.named_parameters() if p is head}  # (copied below, from the policy's head)
    with torch.no_grad():
        for name, x in [*src.named_parameters(), *src.named_buffers()]:
            if ".lora_" not in name and plain(name) in into:
                into[plain(name)].copy_(x)
                filled.add(plain(name))
        for name, module in src.named_modules():  # peft's LoRA layers: W0 + the active adapters' B A
            lora_layer = hasattr(module, "get_delta_weight") and hasattr(module, "base_layer")
            if lora_layer and not module.disable_adapters:
                deltas = [module.get_delta_weight(a) for a in module.active_adapters if a in module.lora_A]
                # summed in fp32, rounded once
                into[plain(name) + ".weight"].copy_(module.base_layer.weight + sum(deltas))
        head.copy_(src.get_output_embeddings().weight)
    if set(into) - filled:  # a copy left with its random initial weights would sample noise
        raise RuntimeError(f"generation copy: the policy has no {sorted(set(into) - filled)[:3]}")
    return copy


def plain(name: str) -> str:
    """The generation copy's name of a policy tensor: without LoRA's and FSDP's wrappers (FSDP wraps
    layers in place; under dist.full_weights their weights are whole)."""
    return name.replace("_fsdp_wrapped_module.", "").replace(".base_layer.", ".")


# ---------------------------------------------------------------------------------------------
# Generation: batched, KV-cached, optionally masked to the available actions
# ---------------------------------------------------------------------------------------------


def action_trie(policy: Policy, actions: list[str]) -> dict:
    """Prefix tree over the token ids of `actions`, each followed by the end-of-turn token.
    A leaf (after end-of-turn) stores the action string under the key None. Tries are built once
    per distinct action list and shared (they are only read); each action is tokenised once."""
    key = tuple(actions)
    tries, ids_of = policy._tries, policy._action_ids
    if key in tries:
        return tries[key]
    root: dict = {}
    for a in actions:
        if a not in ids_of:
            ids_of[a] = policy.tokenizer(a, add_special_tokens=False)["input_ids"] + [policy.end_of_turn]
        node = root
        for t in ids_of[a]:
            node = node.setdefault(t, {})
        # Distinct actions must have distinct ids, or sampling one could send the other.
        if node.setdefault(None, a) != a:
            raise ValueError(f"actions {a!r} and {node[None]!r} have the same token ids")
    if len(tries) > 100_000:  # bound the memo (a long run with ever-new action lists)
        tries.clear()
    tries[key] = root
    return root


def _allowed(node: dict) -> list[int]:
    """The token ids a trie node allows next."""
    return [k for k in node if k is not None]


def _depth(node: dict) -> int:
    """The most tokens a reply can take from this trie node: its longest action, end-of-turn included."""
    return max((1 + _depth(child) for k, child in node.items() if k is not None), default=0)


@dataclass
class Sampled:
    """What `generate` has sampled so far, row by row."""

    ids: list[list[int]]  # the sampled ids (a stop token last, once finished)
    logprobs: list[list[float]]  # their log-probs under the (masked) sampling distribution
    allowed: list[dict]  # position -> the ids the action mask allowed there (masked sampling)
    texts: list  # the action a row's trie leaf names (masked sampling); None until it is reached
    finished: list[bool]
    nodes: list[dict] | None  # each row's place in its action trie; None: free generation

    @staticmethod
    def start(n: int, tries: list[dict] | None) -> "Sampled":
        """n empty replies; under the action mask each at the root of its trie."""
        return Sampled(
            ids=[[] for _ in range(n)],
            logprobs=[[] for _ in range(n)],
            allowed=[{} for _ in range(n)],
            texts=[None] * n,
            finished=[False] * n,
            nodes=list(tries) if tries is not None else None,
        )


@torch.no_grad()
def generate(
    policy: Policy,
    contexts: list[list[int]],
    tries: list[dict] | None = None,
    timings: dict | None = None,
    past: Encoded | None = None,
    model=None,
    keep: bool = True,
):
    """Sample one reply per context. Returns (ids, logprobs, allowed, texts, state): the sampled
    ids (ending with a stop token unless cut at max_new_tokens), their log-probs under the
    (masked) sampling distribution at temperature T, per position the allowed ids when masked,
    and the KV state of the streams `context + reply` (most of it: see `Encoded`).
    `past`: the state a previous call returned for these same streams (rows in this order, each
    context extending the stream it held): only the tokens not yet in its cache are encoded.
    `timings`: add the seconds of the prompt's forward ("prefill"), the one-token forwards
    ("decode") and the action masks ("mask") to this dict (see machinery/timing.py).
    `model`: the model to run (default the policy's; `rollout` passes `generation_model(policy)`).
    `keep`: return the state (else None: a caller that encodes each turn afresh spares its copy).
    """
    model, tok, device = model or policy.model, policy.tokenizer, policy.device
    if past is not None and sliding(model):  # a window of cache columns != of positions once a kept cache
        past = None  # has holes (tests/test_precision.py): encode afresh
    B = len(contexts)
    starts = past.n if past is not None else [0] * B
    stops = policy.stop_ids
    out = Sampled.start(B, tries)
    longest = policy.max_new_tokens
    if tries is not None:  # no reply outgrows its longest action: the cache needs no more room
        longest = min(longest, max(_depth(t) for t in {id(t): t for t in tries}.values()))
    with timed(timings, "prefill"):  # (with the cache's room for the reply's longest - 1 forwards)
        news = [c[s:] for c, s in zip(contexts, starts)]
        logits, state = prefill(model, news, starts, past, tok.pad_token_id, device, room=longest - 1)
    nxt, was_live = None, [1] * B  # the tokens sampled last, and which rows were still live then
    decode = Decoder(model, state, longest - 1, keep=keep)
    for t in range(policy.max_new_tokens):
        if t > 0:
            with timed(timings, "decode"):
                logits = decode(nxt, was_live)
        logits = logits.float() / (policy.temperature or 1.0)  # (B, V)
        if out.nodes is not None:
            with timed(timings, "mask"):
                logits = _mask_to_actions(logits, out, t, device)
        nxt, picked = _sample(logits, policy.temperature)
        was_live = [0 if f else 1 for f in out.finished]
        _append(out, nxt.tolist(), picked, stops)
        if all(out.finished):
            break
    state = decode.close()
    return out.ids, out.logprobs, out.allowed, _texts(out, tok, stops), state


def _mask_to_actions(logits: torch.Tensor, out: Sampled, t: int, device) -> torch.Tensor:
    """`logits` (B, V) with -inf on every token a live row's action trie does not allow next; each
    live row's allowed ids recorded at reply position t (the update masks its log-probs the same way)."""
    oks = [_allowed(node) if not done else [] for node, done in zip(out.nodes, out.finished)]
    rows = torch.tensor([i for i, ok in enumerate(oks) for _ in ok], dtype=torch.long)
    cols = torch.tensor([k for ok in oks for k in ok], dtype=torch.long)
    keep = torch.full_like(logits, float("-inf"))
    keep[rows.to(device), cols.to(device)] = 0.0
    for i, ok in enumerate(oks):
        if not out.finished[i]:
            out.allowed[i][t] = ok
    logits = logits + keep
    logits[torch.tensor(out.finished, device=device)] = 0.0  # finished rows: anything, ignored
    return logits


def _sample(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, list[float]]:
    """One token per row from softmax(logits) (the most likely at temperature 0), and its log-prob."""
    logp = F.log_softmax(logits, dim=-1)  # (B, V)
    nxt = logp.argmax(-1) if temperature == 0 else torch.multinomial(logp.exp(), 1).squeeze(-1)  # (B,)
    return nxt, logp.gather(-1, nxt.unsqueeze(-1)).squeeze(-1).tolist()


def _texts(out: Sampled, tokenizer, stops: set[int]) -> list[str]:
    """Each reply as text: the action its trie leaf names (masked sampling), else its ids decoded
    without the stop tokens."""
    texts = []
    for text, ids in zip(out.texts, out.ids):
        if text is None:
            text = tokenizer.decode([x for x in ids if x not in stops], skip_special_tokens=True).strip()
        texts.append(text)
    return texts


def _append(out: Sampled, tokens: list[int], logprobs: list[float], stops: set[int]) -> None:
    """Each live row's sampled token and its log-prob added to its reply; a row finishes on a stop
    token or, under the action mask, at a trie leaf (then its text is that leaf's action)."""
    for i, tid in enumerate(tokens):
        if out.finished[i]:
            continue
        out.ids[i].append(tid)
        out.logprobs[i].append(logprobs[i])
        if out.nodes is not None:
            out.nodes[i] = out.nodes[i][tid]
            if None in out.nodes[i]:
                out.texts[i] = out.nodes[i][None]
        if tid in stops or (out.nodes is not None and None in out.nodes[i]):
            out.finished[i] = True


# ---------------------------------------------------------------------------------------------
# The multi-turn rollout
# ---------------------------------------------------------------------------------------------


def rollout(
    policy: Policy,
    pool: EnvPool,
    spec: EnvSpec,
    tasks: list[int],
    horizon: int,
    groups: list[int] | None = None,
    batch_size: int = 256,
    desc: str | None = None,
    timings: dict | None = None,
) -> list[Trajectory]:
    """Run one episode per entry of `tasks` (up to len(pool) at once), at most `horizon` agent
    turns each; all live episodes generate together and step their environments concurrently.
    `desc`: show a progress bar over the chunks of len(pool) episodes, with this label.
    `timings`: add the seconds of each part (env, template, tries, generate, prefill, decode,
    mask) to this dict (machinery/timing.py; benchmarks/rollout_profile.py prints them)."""
    from tqdm import tqdm

    trajs: list[Trajectory] = []
    model = generation_model(policy)
    starts = range(0, len(tasks), len(pool))
    for start in tqdm(starts, desc=desc, leave=False) if desc else starts:
        chunk = tasks[start : start + len(pool)]
        g = (
            groups[start : start + len(pool)]
            if groups is not None
            else list(range(start, start + len(chunk)))
        )
        trajs += _rollout_chunk(policy, pool, spec, chunk, g, horizon, batch_size, timings, model)
    return trajs


class WholeConversation:
    """Context mode `context_turns=0`: the agent sees the whole conversation. One token stream
    per episode, extended in place: the reply's sampled ids (mask 1), then the template's glue
    and the next observation (mask 0). It becomes the trajectory's only row. The rollout keeps
    the stream's KV cache across turns (`Policy.reuse_cache`), so only the new part is encoded."""

    def __init__(self, policy: Policy):
        self.policy, self.row = policy, None
        self.prompt = self.before = 0  # the first prompt's length; the row's before the last observation

    def context(self, tr: Trajectory) -> list[int]:
        if self.row is None:  # system + first observation, tokenised once
            ids = chat_ids(self.policy.tokenizer, tr.messages)
            self.row = Row(ids=ids, mask=[0] * len(ids), logprobs=[0.0] * len(ids))
            self.prompt = len(ids)
        return self.row.ids

    def end_at_budget(self) -> bool:
        """--conversation-tokens N: whether the episode ends here, because the conversation after
        the first prompt holds more than N tokens, so the next reply would start past it (the
        reference's data.max_response_length, where it caps vLLM's context and cuts its rows). Then
        the last observation is taken back off: the row ends on the agent's own last token, as
        after the last turn of the horizon."""
        budget = self.policy.conversation_tokens
        if not budget or len(self.row.ids) - self.prompt <= budget:
            return False
        for column in (self.row.ids, self.row.mask, self.row.logprobs):
            del column[self.before :]
        return True

    def add_reply(self, ctx: list[int], reply: list[int], logprobs: list[float], allowed: dict) -> None:
        base = len(self.row.ids)
        self.row.ids += reply
        self.row.mask += [1] * len(reply)
        self.row.logprobs += logprobs
        self.row.allowed.update({base + p: a for p, a in allowed.items()})

    def add_observation(self, reply: list[int], observation: str) -> None:
        # A reply cut at max_new_tokens gets an (untrained) end-of-turn token before the glue.
        cut = [] if reply[-1:] and reply[-1] in self.policy.stop_ids else [self.policy.end_of_turn]
        suffix = cut + turn_suffix_ids(self.policy.tokenizer, observation)
        self.before = len(self.row.ids)
        self.row.ids += suffix
        self.row.mask += [0] * len(suffix)
        self.row.logprobs += [0.0] * len(suffix)

    def rows(self) -> list[Row]:
        return [self.row] if self.row is not None else []


class LastTurns:
    """Context mode `context_turns=K>0`: the agent sees the system message, if it is sent one (the
    env's instruction, under `Policy.use_instruction`; the tiny policy is sent none), and its last K
    turns, re-tokenised from the messages each turn. Each turn is its own row, in turn order."""

    def __init__(self, policy: Policy):
        self.policy, self._rows = policy, []

    def context(self, tr: Trajectory) -> list[int]:
        return LastTurns.contexts(self.policy, [tr], {})[0]

    @staticmethod
    def contexts(policy: Policy, trajs: list[Trajectory], memo: dict) -> list[list[int]]:
        """Each episode's window as prompt ids. Each distinct window is tokenised once (a GRPO
        group's samples share their first observation, and often later ones): `memo` (window ->
        ids) keeps them for the rollout's later turns, and a turn's new ones go in one batch
        (`chat_ids_batch`)."""
        windows = [_window(tr.messages, policy.context_turns) for tr in trajs]
        keys = [tuple((m["role"], m["content"]) for m in w) for w in windows]
        new = {k: w for k, w in zip(keys, windows) if k not in memo}
        if new:
            memo.update(zip(new, chat_ids_batch(policy.tokenizer, list(new.values()))))
        return [memo[k] for k in keys]

    def add_reply(self, ctx: list[int], reply: list[int], logprobs: list[float], allowed: dict) -> None:
        self._rows.append(
            Row(
                ids=ctx + reply,
                mask=[0] * len(ctx) + [1] * len(reply),
                logprobs=[0.0] * len(ctx) + logprobs,
                allowed={len(ctx) + p: a for p, a in allowed.items()},
            )
        )

    def add_observation(self, reply: list[int], observation: str) -> None:
        pass  # the next context is rebuilt from the messages

    def rows(self) -> list[Row]:
        return self._rows


def _rollout_chunk(policy, pool, spec, tasks, groups, horizon, batch_size, timings=None, model=None):
    """One episode per task, all in step: reset; then each turn, every live episode's reply is
    generated, parsed and sent, and what comes back is recorded, until no episode is live."""
    n = len(tasks)
    slots = list(range(n))
    with timed(timings, "env"):
        first = pool.reset(slots, tasks)
    trajs = [Trajectory(task=t, group=g) for t, g in zip(tasks, groups)]
    mode = WholeConversation if policy.context_turns == 0 else LastTurns
    memory = [mode(policy) for _ in range(n)]  # the token sequences of each episode
    info = list(first)
    live = [i for i, (tr, r) in enumerate(zip(trajs, first)) if _begin(tr, r, policy, spec)]
    states: dict = {}  # whole-conversation mode: each generation batch's KV cache across turns
    prompts: dict = {}  # one-turn windows: each distinct window's prompt ids (LastTurns.contexts)
    for turn in range(horizon):
        if not live:
            break
        with timed(timings, "template"):  # chat template + tokenising the new observations
            if mode is LastTurns:  # (all of the turn's windows in one batch)
                contexts = LastTurns.contexts(policy, [trajs[i] for i in live], prompts)
            else:
                contexts = [memory[i].context(trajs[i]) for i in live]
        tries = None
        if policy.mask_actions:
            with timed(timings, "tries"):
                tries = [
                    action_trie(policy, info[i].get("available_actions") or ["check available actions"])
                    for i in live
                ]
        ids, lp, alw, texts = _replies(policy, live, contexts, tries, n, batch_size, states, timings, model)
        actions = [spec.parse_action(t) if not policy.mask_actions else t for t in texts]
        with timed(timings, "env"):
            results = pool.step([slots[i] for i in live], actions)
        still = []
        for k, i in enumerate(live):
            memory[i].add_reply(contexts[k], ids[k], lp[k], alw[k])
            info[i] = results[k]
            if not _record(trajs[i], results[k], ids[k], texts[k], actions[k], policy):
                continue
            if turn + 1 < horizon:
                # After the last allowed turn the observation is not appended: the sequence
                # ends on the agent's own last token.
                with timed(timings, "template"):
                    memory[i].add_observation(ids[k], results[k].get("observation", ""))
                if mode is WholeConversation and memory[i].end_at_budget():  # ends as at the horizon
                    trajs[i].over_budget = True
                    continue
            still.append(i)
        live = still

    for tr, mem in zip(trajs, memory):
        tr.rows = mem.rows()
        tr.reward = tr.score / spec.score_scale
        tr.success = tr.reward >= spec.success_at
    return trajs


def _begin(tr: Trajectory, r: dict, policy: Policy, spec: EnvSpec) -> bool:
    """Record an episode's first observation (`r`, the reset's answer); whether it is live."""
    tr.category = str(r.get("category", ""))
    if policy.use_instruction:
        tr.messages.append({"role": "system", "content": spec.instruction})
    tr.messages.append({"role": "user", "content": r["observation"]})
    tr.observations.append(r["observation"])
    tr.frames.append(r.get("frame", ""))
    if r.get("error"):
        tr.error, tr.done = r["error"], True
    return not r.get("error")


def _replies(policy, live, contexts, tries, n, batch_size, states, timings, model):
    """Every live episode's reply (ids, logprobs, allowed, texts), in generation batches of at most
    `batch_size` episodes (memory). Whole-conversation mode keeps each batch's KV cache across
    turns in `states` (batch -> (its episodes, their state)), so a batch is a fixed set of
    episodes; otherwise each turn splits the live episodes afresh."""
    reuse = policy.context_turns == 0 and policy.reuse_cache
    batches = (
        [list(range(s, s + batch_size)) for s in range(0, n, batch_size)]
        if reuse
        else [live[s : s + batch_size] for s in range(0, len(live), batch_size)]
    )
    ids, lp, alw, texts = [], [], [], []
    at = {i: k for k, i in enumerate(live)}
    for g, members in enumerate(batches):
        rows = [at[i] for i in members if i in at]  # this batch's live episodes, as indices into `live`
        if not rows:
            continue
        past = None
        if reuse and g in states:  # the cache of the conversation so far, ended episodes dropped
            held, state = states[g]
            past = state.select([held.index(live[k]) for k in rows]).compact()
        with timed(timings, "generate"):
            out = generate(
                policy,
                [contexts[k] for k in rows],
                [tries[k] for k in rows] if tries else None,
                timings,
                past=past,
                model=model,
                keep=reuse,
            )
        if reuse:
            states[g] = ([live[k] for k in rows], out[4])
        ids += out[0]
        lp += out[1]
        alw += out[2]
        texts += out[3]
    return ids, lp, alw, texts


def _record(tr: Trajectory, r: dict, ids: list[int], text: str, action: str, policy: Policy) -> bool:
    """Record one turn of an episode: its reply and the environment's answer `r`; whether the
    episode goes on (then its next observation is the conversation's next user message)."""
    # A reply cut at max_new_tokens is still parsed and sent, as far as it goes (AgentGym).
    tr.truncated += not (ids[-1:] and ids[-1] in policy.stop_ids)
    tr.messages.append({"role": "assistant", "content": text})
    tr.actions.append(action)
    tr.rewards.append(float(r.get("reward", 0.0)))
    tr.score = float(r.get("score", sum(tr.rewards)))
    tr.observations.append(r.get("observation", ""))
    tr.frames.append(r.get("frame", ""))
    if r.get("error"):
        tr.error = r["error"]
    if r.get("done") or r.get("error"):
        tr.done = bool(r.get("done"))
        return False
    tr.messages.append({"role": "user", "content": r.get("observation", "")})
    return True


def _window(messages: list[dict], k: int) -> list[dict]:
    """System message (if any) plus the last k turns (the last user message and the k-1
    assistant/user pairs before it)."""
    head = [m for m in messages[:1] if m["role"] == "system"]
    body = messages[len(head) :]
    return head + body[-(2 * k - 1) :]
