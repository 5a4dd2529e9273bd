"""The agent: a chat LLM that observes, thinks and acts over many turns (AgentGym-RL, section 2).

Where it sits: `train.py` and `eval.py` call `rollout()` here; `rollout()` drives environment
instances through `envs.EnvPool` and returns `Trajectory`s; `make_batch()` turns them into padded
tensors for the algorithm files, and `token_logprobs()` is the one forward pass that both the
update and the tests use.

Token in, token out. The model's sampled token ids and their log-probs are kept exactly as
sampled; generated text is decoded only to be sent to the environment and is never tokenised
again to build a training sequence. A trajectory with full context is ONE token sequence

    [system + first observation][reply 1 <eos>][glue + observation 2 + assistant header][reply 2 <eos>] ...
     loss_mask = 0               1 ... 1        0 ... 0                                  1 ... 1

where the loss mask is 1 exactly on the agent's own tokens (its reply and end-of-turn token).
The observation that follows the last action is not appended: nothing after it is trained and
the outcome reward belongs to the agent's last token (see README, "the reference code's lost
reward"). With `context_turns=K > 0` the agent sees only its last K turns (the tiny policy uses
K=1: the current observation); each turn is then its own sequence ("row"), rows in turn order.

Invalid-action masking (an option, on for the `tiny` policy): when the environment lists its
available actions, sampling is restricted to them by a prefix tree over their token ids; the
same mask is applied when log-probs are recomputed in the update, so the policy ratio is exact.
"""

import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from envs import EnvPool, EnvSpec

CACHE_DIR = os.environ.get("AGENTGYM_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "agentgym-rl-mini"))


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One token sequence the model saw and extended."""

    ids: list[int]
    mask: list[int]  # 1 on the agent's sampled tokens
    logprobs: list[float]  # log-prob of each sampled token at sampling time (0 elsewhere)
    allowed: dict[int, list[int]] = field(default_factory=dict)  # position -> allowed token ids


@dataclass
class Trajectory:
    task: int  # the data_idx
    group: int  # rollouts of the same task in one batch share a group
    rows: list[Row] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)  # the conversation, for humans
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # per-step env rewards (for logs)
    reward: float = 0.0  # the outcome reward that trains the agent
    score: float = 0.0  # the env's final score, as it reports it
    success: bool = False
    done: bool = False  # ended by the env (not by the horizon)
    category: str = ""
    error: str = ""

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
    temperature: float = 1.0
    use_instruction: bool = True  # send the env's instruction as the system message
    is_tiny: bool = False  # the built-in CPU policy (train.py picks its learning rate by this)

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def stop_ids(self) -> set[int]:
        tok, ids = self.tokenizer, set()
        for t in (tok.eos_token, "<|im_end|>", "<|eot_id|>", "<|end|>"):
            i = tok.convert_tokens_to_ids(t) if t else None
            if isinstance(i, int) and i != tok.unk_token_id:
                ids.add(i)
        gen = getattr(self.model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        return ids

    @property
    def end_of_turn(self) -> int:
        tok = self.tokenizer
        i = tok.convert_tokens_to_ids("<|im_end|>")
        return i if isinstance(i, int) and i != tok.unk_token_id else tok.eos_token_id


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_policy(name: str, env: str = "babyai", device: str = "cpu", dtype=None,
                mask_actions: bool | None = None, context_turns: int | None = None,
                max_new_tokens: int = 512, temperature: float = 1.0) -> Policy:
    """`tiny` (built on first use and cached, see tiny.py), or any Hugging Face
    causal LM with a chat template, by hub id or local path (a checkpoint saved by train.py)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per weight file is noise next to train.py's own
    from tiny import build_tiny_policy, tiny_policy_path

    is_tiny = name == "tiny"
    path = tiny_policy_path(env) if is_tiny else name
    if is_tiny and not os.path.exists(os.path.join(path, "config.json")):
        build_tiny_policy(env, path)
    tiny_like = is_tiny or getattr(AutoConfig.from_pretrained(path), "agentgym_tiny", False)
    # AutoTokenizer picks Qwen2Tokenizer from the tiny model's type, which swaps in Qwen's own
    # pre-tokenizer and normaliser: the tiny policy's tokenizer.json is loaded exactly as saved.
    tok = (PreTrainedTokenizerFast if tiny_like else AutoTokenizer).from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32).to(device)
    return Policy(
        model=model, tokenizer=tok,
        mask_actions=tiny_like if mask_actions is None else mask_actions,
        context_turns=(1 if tiny_like else 0) if context_turns is None else context_turns,
        max_new_tokens=48 if tiny_like else max_new_tokens,
        temperature=temperature,
        use_instruction=not tiny_like,
        is_tiny=tiny_like,
    )


# ---------------------------------------------------------------------------------------------
# Chat template, token in / token out
# ---------------------------------------------------------------------------------------------


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The prompt for the next assistant turn, as token ids."""
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def turn_suffix_ids(policy: Policy, observation: str) -> list[int]:
    """Tokens that follow a finished reply (after its end-of-turn token): the template's glue,
    the next user turn holding `observation`, and the assistant header. Only this new text is
    tokenised; the reply's own ids stay as sampled."""
    tok = policy.tokenizer
    base = [{"role": "user", "content": "X"}, {"role": "assistant", "content": "Y"}]
    before = tok.apply_chat_template(base, tokenize=False)
    after = tok.apply_chat_template(base + [{"role": "user", "content": observation}],
                                    tokenize=False, add_generation_prompt=True)
    glue = before[before.rindex("Y") + 1:]
    end = tok.convert_ids_to_tokens(policy.end_of_turn)
    glue = glue[len(end):] if glue.startswith(end) else glue
    new = after[len(before):] if after.startswith(before) else after[before.rindex("Y") + 1:]
    return tok(glue + new, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------------------------------------
# Generation: batched, KV-cached, optionally masked to the available actions
# ---------------------------------------------------------------------------------------------


def action_trie(policy: Policy, actions: list[str]) -> dict:
    """Prefix tree over the token ids of `actions`, each followed by the end-of-turn token.
    A leaf (after end-of-turn) stores the action string under the key None."""
    root: dict = {}
    for a in actions:
        node = root
        for t in policy.tokenizer(a, add_special_tokens=False)["input_ids"] + [policy.end_of_turn]:
            node = node.setdefault(t, {})
        # Distinct actions must have distinct ids, or sampling one could send the other.
        if node.setdefault(None, a) != a:
            raise ValueError(f"actions {a!r} and {node[None]!r} have the same token ids")
    return root


@torch.no_grad()
def generate(policy: Policy, contexts: list[list[int]], tries: list[dict] | None = None):
    """Sample one reply per context. Returns (ids, logprobs, allowed, texts): the sampled ids
    (ending with a stop token unless cut at max_new_tokens), their log-probs under the
    (masked) sampling distribution at temperature T, and per position the allowed ids when masked.
    """
    model, tok, device = policy.model, policy.tokenizer, policy.device
    B = len(contexts)
    L = max(len(c) for c in contexts)
    pad = tok.pad_token_id
    input_ids = torch.full((B, L), pad, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    for i, c in enumerate(contexts):  # left padding: every row's next token is at column L
        input_ids[i, L - len(c):] = torch.tensor(c)
        attn[i, L - len(c):] = 1
    input_ids, attn = input_ids.to(device), attn.to(device)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    stops = policy.stop_ids
    nodes = list(tries) if tries is not None else None
    out_ids = [[] for _ in range(B)]
    out_lp = [[] for _ in range(B)]
    allowed = [{} for _ in range(B)]
    texts = [None] * B
    finished = [False] * B
    cache, step_ids, step_pos = None, input_ids, pos
    for t in range(policy.max_new_tokens):
        out = model(input_ids=step_ids, attention_mask=attn, position_ids=step_pos, cache=cache,
                    use_cache=True, logits_to_keep=1)  # only the next token's logits
        cache = out.cache
        logits = out.logits[:, -1, :].float() / policy.temperature  # (B, V)
        if nodes is not None:
            keep = torch.full_like(logits, float("-inf"))
            for i in range(B):
                if not finished[i]:
                    ok = [k for k in nodes[i] if k is not None]
                    keep[i, ok] = 0.0
                    allowed[i][t] = ok
            logits = logits + keep
            logits[torch.tensor(finished, device=device)] = 0.0  # finished rows: anything, ignored
        logp = F.log_softmax(logits, dim=-1)
        nxt = torch.multinomial(logp.exp(), 1).squeeze(-1)  # (B,)
        for i in range(B):
            if finished[i]:
                continue
            tid = int(nxt[i])
            out_ids[i].append(tid)
            out_lp[i].append(float(logp[i, tid]))
            if nodes is not None:
                nodes[i] = nodes[i][tid]
                if None in nodes[i]:
                    texts[i] = nodes[i][None]
            if tid in stops or (nodes is not None and None in nodes[i]):
                finished[i] = True
        if all(finished):
            break
        step_ids = nxt.unsqueeze(-1)
        attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype, device=device)], dim=1)
        step_pos = step_pos[:, -1:] + 1
    for i in range(B):
        if texts[i] is None:
            body = [x for x in out_ids[i] if x not in stops]
            texts[i] = tok.decode(body, skip_special_tokens=True).strip()
    return out_ids, out_lp, allowed, texts


# ---------------------------------------------------------------------------------------------
# The multi-turn rollout
# ---------------------------------------------------------------------------------------------


def rollout(policy: Policy, pool: EnvPool, spec: EnvSpec, tasks: list[int], max_turns: int,
            groups: list[int] | None = None, batch_size: int = 256) -> list[Trajectory]:
    """Run one episode per entry of `tasks` (up to len(pool) at once), at most `max_turns` agent
    turns each; all live episodes generate together and step their environments concurrently."""
    trajs: list[Trajectory] = []
    for start in range(0, len(tasks), len(pool)):
        chunk = tasks[start:start + len(pool)]
        g = groups[start:start + len(pool)] if groups is not None else list(range(start, start + len(chunk)))
        trajs += _rollout_chunk(policy, pool, spec, chunk, g, max_turns, batch_size)
    return trajs


def _rollout_chunk(policy, pool, spec, tasks, groups, max_turns, batch_size):
    n = len(tasks)
    slots = list(range(n))
    first = pool.reset(slots, tasks)
    trajs = [Trajectory(task=t, group=g) for t, g in zip(tasks, groups)]
    streams: list[list[int]] = [None] * n  # full-context token stream per episode
    masks: list[list[int]] = [None] * n
    lps: list[list[float]] = [None] * n
    allowed: list[dict] = [None] * n
    info = list(first)
    live = []
    for i, (tr, r) in enumerate(zip(trajs, first)):
        tr.category = str(r.get("category", ""))
        if policy.use_instruction:
            tr.messages.append({"role": "system", "content": spec.instruction})
        tr.messages.append({"role": "user", "content": r["observation"]})
        tr.observations.append(r["observation"])
        if r.get("error"):
            tr.error, tr.done = r["error"], True
            continue
        if policy.context_turns == 0:
            streams[i] = chat_ids(policy.tokenizer, tr.messages)
            masks[i], lps[i], allowed[i] = [0] * len(streams[i]), [0.0] * len(streams[i]), {}
        live.append(i)

    for turn in range(max_turns):
        if not live:
            break
        contexts = []
        for i in live:
            if policy.context_turns == 0:
                contexts.append(streams[i])
            else:
                contexts.append(chat_ids(policy.tokenizer, _window(trajs[i].messages, policy.context_turns)))
        tries = None
        if policy.mask_actions:
            tries = [action_trie(policy, info[i].get("available_actions") or ["check available actions"]) for i in live]
        ids, lp, alw, texts = [], [], [], []
        for s in range(0, len(live), batch_size):  # bound the generation batch (memory)
            out = generate(policy, contexts[s:s + batch_size], tries[s:s + batch_size] if tries else None)
            ids += out[0]; lp += out[1]; alw += out[2]; texts += out[3]
        actions = [spec.parse_action(t) if not policy.mask_actions else t for t in texts]
        results = pool.step([slots[i] for i in live], actions)
        still = []
        for k, i in enumerate(live):
            tr, r = trajs[i], results[k]
            reply_ids = ids[k]
            if policy.context_turns == 0:
                base = len(streams[i])
                streams[i] += reply_ids
                masks[i] += [1] * len(reply_ids)
                lps[i] += lp[k]
                allowed[i].update({base + p: a for p, a in alw[k].items()})
            else:
                ctx = contexts[k]
                tr.rows.append(Row(ids=ctx + reply_ids, mask=[0] * len(ctx) + [1] * len(reply_ids),
                                   logprobs=[0.0] * len(ctx) + lp[k],
                                   allowed={len(ctx) + p: a for p, a in alw[k].items()}))
            tr.messages.append({"role": "assistant", "content": texts[k]})
            tr.actions.append(actions[k])
            tr.rewards.append(float(r.get("reward", 0.0)))
            tr.score = float(r.get("score", sum(tr.rewards)))
            tr.observations.append(r.get("observation", ""))
            info[i] = r
            if r.get("error"):
                tr.error = r["error"]
            if r.get("done") or r.get("error"):
                tr.done = bool(r.get("done"))
                continue
            tr.messages.append({"role": "user", "content": r.get("observation", "")})
            if policy.context_turns == 0 and turn + 1 < max_turns:
                # The next observation becomes context (mask 0). After the last allowed turn it
                # is not appended: the sequence ends on the agent's own last token.
                cut = [] if reply_ids[-1:] and reply_ids[-1] in policy.stop_ids else [policy.end_of_turn]
                suffix = cut + turn_suffix_ids(policy, r.get("observation", ""))
                streams[i] += suffix
                masks[i] += [0] * len(suffix)
                lps[i] += [0.0] * len(suffix)
            still.append(i)
        live = still

    for i, tr in enumerate(trajs):
        if policy.context_turns == 0 and streams[i] is not None:
            tr.rows = [Row(ids=streams[i], mask=masks[i], logprobs=lps[i], allowed=allowed[i])]
        tr.reward = tr.score / spec.score_scale
        tr.success = tr.reward >= spec.success_at
    return trajs


def _window(messages: list[dict], k: int) -> list[dict]:
    """System message (if any) plus the last k turns (the last user message and the k-1
    assistant/user pairs before it)."""
    head = [m for m in messages[:1] if m["role"] == "system"]
    body = messages[len(head):]
    return head + body[-(2 * k - 1):]


# ---------------------------------------------------------------------------------------------
# Batching and the training forward pass
# ---------------------------------------------------------------------------------------------


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, T) right-padded
    attention_mask: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T) 1.0 on agent tokens
    old_logprobs: torch.Tensor  # (B, T) at sampling time, aligned with input_ids
    allowed: torch.Tensor | None  # (B, T, V) bool where sampling was masked, else None
    traj: torch.Tensor  # (B,) index of each row's trajectory
    turn: torch.Tensor  # (B,) index of the row within its trajectory
    rewards: torch.Tensor  # (N,) outcome reward per trajectory
    groups: torch.Tensor  # (N,) group per trajectory
    ref_logprobs: torch.Tensor | None = None  # (B, T) under the frozen reference model
    advantages: torch.Tensor | None = None  # (B, T) filled by the algorithm
    returns: torch.Tensor | None = None  # (B, T) PPO's value targets
    values: torch.Tensor | None = None  # (B, T) PPO's old values

    def __len__(self):
        return self.input_ids.shape[0]

    def select(self, rows: torch.Tensor) -> "Batch":
        """A minibatch of rows (trajectory-level tensors are kept whole)."""
        pick = lambda x: None if x is None else x[rows]
        return Batch(self.input_ids[rows], self.attention_mask[rows], self.loss_mask[rows],
                     self.old_logprobs[rows], pick(self.allowed), self.traj[rows], self.turn[rows],
                     self.rewards, self.groups, pick(self.ref_logprobs), pick(self.advantages),
                     pick(self.returns), pick(self.values))


def agent_tokens(batch, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols) of trajectory n's agent tokens, in the order they were sampled: its rows in
    turn order, and within a row the loss-mask-1 columns left to right."""
    rows = (batch.traj == n).nonzero().squeeze(-1)
    rows = rows[batch.turn[rows].argsort()]
    b, t = [], []
    for r in rows.tolist():
        cols = batch.loss_mask[r].nonzero().squeeze(-1).tolist()
        b += [r] * len(cols)
        t += cols
    return torch.tensor(b, dtype=torch.long), torch.tensor(t, dtype=torch.long)


def make_batch(trajs: list[Trajectory], pad_id: int, vocab_size: int) -> Batch:
    rows = [(n, k, r) for n, tr in enumerate(trajs) for k, r in enumerate(tr.rows)]
    B, T = len(rows), max(len(r.ids) for _, _, r in rows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T))
    lp = torch.zeros((B, T))
    masked = any(r.allowed for _, _, r in rows)
    allowed = torch.zeros((B, T, vocab_size), dtype=torch.bool) if masked else None
    for b, (_, _, r) in enumerate(rows):
        n = len(r.ids)
        ids[b, :n] = torch.tensor(r.ids)
        attn[b, :n] = 1
        mask[b, :n] = torch.tensor(r.mask, dtype=torch.float)
        lp[b, :n] = torch.tensor(r.logprobs)
        if masked:
            allowed[b, :, :] = True  # unmasked positions allow everything
            for p, ok in r.allowed.items():
                allowed[b, p, :] = False
                allowed[b, p, ok] = True
    return Batch(
        input_ids=ids, attention_mask=attn, loss_mask=mask, old_logprobs=lp, allowed=allowed,
        traj=torch.tensor([n for n, _, _ in rows]), turn=torch.tensor([k for _, k, _ in rows]),
        rewards=torch.tensor([tr.reward for tr in trajs], dtype=torch.float),
        groups=torch.tensor([tr.group for tr in trajs]),
    )


def token_logprobs(model, batch: Batch, temperature: float = 1.0, with_entropy: bool = False):
    """Log-prob of every token given the ones before it, under the same (masked, temperature-
    scaled) distribution it was sampled from. Position t holds log p(x_t | x_<t); position 0 is 0.
    Returns (B, T) log-probs and, if asked, (B, T) entropies."""
    device = next(model.parameters()).device
    ids, attn = batch.input_ids.to(device), batch.attention_mask.to(device)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, :-1].float()
    logits = logits / temperature  # (B, T-1, V): logits[t] predicts token t+1
    if batch.allowed is not None:
        logits = logits.masked_fill(~batch.allowed[:, 1:].to(device), float("-inf"))
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    logp = F.pad(logp, (1, 0))  # (B, T): align with input_ids
    if not with_entropy:
        return logp, None
    p = logp_all.exp()
    ent = -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)  # (B, T-1); 0*log0 := 0
    return logp, F.pad(ent, (1, 0))
