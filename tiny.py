"""The `tiny` policy: a CPU-sized chat model built here, so that `python train.py` does real RL
on a laptop with nothing downloaded.

Where it sits: `config.load_agent()` calls `load()` here for the name `tiny` or a checkpoint of the
tiny policy; `load()` only reads files: the BabyAI policy ships with the code
(policies/tiny-babyai-v2, 2.3 MB), and `python -m tiny build --env <env>` builds one for another
environment (or rebuilds the shipped one) into the same place. It loads through
`agent.load_policy` with the tiny policy's own settings (`SETTINGS`: action masking, a one-turn
context, 48 new tokens, no system instruction) and learning rate (`LR`). This file imports
agent.py, never the other way round. The build, `build_tiny_policy()`, has three parts:

1. a byte-level BPE tokenizer trained on the text of random play, with ChatML as chat template;
2. a 2-layer Qwen2 (hidden 128) built from a config: random weights;
3. a warm-up that teaches only the FORMAT of an action: imitate actions drawn uniformly at random
   from each state's available actions (never a planner or an expert), so that everything the
   policy learns about the task comes from reward.
"""

import json
import os
import random

import torch

from agent import Policy, Trajectory, action_trie, chat_ids, load_policy
from batch import Row, make_batch, token_logprobs

POLICIES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policies")
"""Where `tiny-<env>-<version>` folders live: shipped (BabyAI) or written by `python -m tiny build`."""
SETTINGS = dict(mask_actions=True, context_turns=1, max_new_tokens=48, use_instruction=False, is_tiny=True)
"""The tiny policy's `agent.Policy` settings: it needs the action mask to write an action at all,
and sees only the current observation (flags may override the first three)."""
LR = 5e-4
"""Its learning rate (real models: the paper's 1e-6)."""

TINY_VERSION = "v2"
TINY_SHAPE = dict(
    hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4
)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_policy_path(env: str) -> str:
    return os.path.join(POLICIES_DIR, f"tiny-{env}-{TINY_VERSION}")


def is_tiny(name: str) -> bool:
    """`tiny`, or a folder holding a tiny policy (policies/tiny-<env>-v2 or a train.py checkpoint)."""
    config = os.path.join(name, "config.json")
    return name == "tiny" or (os.path.isfile(config) and bool(json.load(open(config)).get("agentgym_tiny")))


def load(name: str, env: str, device: str = "cpu") -> Policy:
    """The tiny policy for `env` (its folder in policies/) or a checkpoint of it. Only reads files:
    building one starts an environment server, so it is a step of its own (`python -m tiny build`)."""
    from transformers import PreTrainedTokenizerFast

    path = tiny_policy_path(env) if name == "tiny" else name
    if not os.path.exists(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            f"no tiny policy for {env} in {path}: build it once with `python -m tiny build --env {env}` "
            "(random play on its server, then a format warm-up: a few minutes on a CPU)"
        )
    # AutoTokenizer would pick Qwen2Tokenizer from the model type, which swaps in Qwen's own
    # pre-tokenizer and normaliser: the tiny policy's tokenizer.json is loaded exactly as saved.
    return load_policy(path, device=device, tokenizer_class=PreTrainedTokenizerFast, **SETTINGS)


def _random_states(env: str, episodes: int, horizon: int, seed: int):
    """(observation, available actions) pairs visited by uniformly random valid actions on the
    train split. Nothing here knows which action is good."""
    from envs import ENVS, close_pool, open_pool

    spec = ENVS[env]
    rng = random.Random(seed)
    tasks = rng.sample(spec.splits["train"], min(episodes, len(spec.splits["train"])))
    pool = open_pool(env, size=min(32, len(tasks)))
    states = []
    try:
        for s in range(0, len(tasks), len(pool)):
            chunk = tasks[s : s + len(pool)]
            res = pool.reset(list(range(len(chunk))), chunk)
            live = list(range(len(chunk)))
            for _ in range(horizon):
                live = [i for i in live if not res[i].get("done") and res[i].get("available_actions")]
                if not live:
                    break
                acts = [rng.choice(res[i]["available_actions"]) for i in live]
                for i in live:
                    states.append((res[i]["observation"], res[i]["available_actions"]))
                out = pool.step(live, acts)
                for i, r in zip(live, out):
                    res[i] = r
    finally:
        close_pool(pool)
    return states


def tiny_tokenizer(texts: list[str], vocab_size: int = 2000):
    """A byte-level BPE tokenizer trained on `texts`, with ChatML and its special tokens.

    Byte-level: the 256 byte symbols are the initial alphabet, so any string is encodable and
    `decode(encode(s)) == s` exactly. Test splits name items and entities never met in training
    (TextCraft, Deep Search); a word-level vocabulary would map them all to [UNK], and two
    different available actions could then share token ids in the action trie. BPE still merges
    every frequent word into one token, so BabyAI's closed vocabulary stays one token a word.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts + ["user", "assistant", "system", "check available actions"], trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="[UNK]",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template, tok.padding_side = CHATML, "left"
    return tok


def build_tiny_policy(
    env: str, path: str, seed: int = 0, warmup_steps: int = 200, episodes: int = 400
) -> None:
    """Build, warm up and save the tiny policy for `env`.

    1. A byte-level BPE tokenizer trained on the text of random play, with ChatML.
    2. A 2-layer Qwen2 (hidden 128) built from a config: random weights, nothing downloaded.
    3. Warm-up (format only): imitate actions drawn uniformly at random from each state's
       available actions. The model learns what an action looks like, never which one is good:
       everything it learns about the task must come from reward.
    """
    from tqdm import tqdm
    from transformers import Qwen2Config, Qwen2ForCausalLM

    caller_rng = torch.get_rng_state()  # building here must not change the run that asked for it
    torch.manual_seed(seed)
    rng = random.Random(seed)
    states = _random_states(env, episodes=episodes, horizon=6, seed=seed)
    tok = tiny_tokenizer([text for obs, acts in states for text in [obs, *acts]])
    cfg = Qwen2Config(
        vocab_size=len(tok),
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.eos_token_id,
        **TINY_SHAPE,
    )
    cfg.agentgym_tiny = True  # is_tiny(): a checkpoint of it loads with SETTINGS too
    model = Qwen2ForCausalLM(cfg)
    policy = Policy(model=model, tokenizer=tok, **SETTINGS)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in tqdm(range(warmup_steps), desc=f"tiny {env} warm-up (random valid actions)", leave=False):
        rows = []
        for obs, acts in rng.sample(states, 32):
            ctx = chat_ids(tok, [{"role": "user", "content": obs}])
            reply = tok(rng.choice(acts), add_special_tokens=False)["input_ids"] + [policy.end_of_turn]
            trie, allowed = action_trie(policy, acts), {}
            for p, t in enumerate(reply):  # the same mask as at sampling time
                allowed[len(ctx) + p] = [k for k in trie if k is not None]
                trie = trie[t]
            rows.append(
                Row(
                    ids=ctx + reply,
                    mask=[0] * len(ctx) + [1] * len(reply),
                    logprobs=[0.0] * (len(ctx) + len(reply)),
                    allowed=allowed,
                )
            )
        batch = make_batch([Trajectory(task=0, group=0, rows=rows)], tok.pad_token_id)
        logp, _ = token_logprobs(model, batch)
        loss = -(logp * batch.loss_mask).sum() / batch.loss_mask.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    torch.set_rng_state(caller_rng)


def main(argv: list[str] | None = None) -> None:
    """`python -m tiny build [--env babyai] [--seed 0] [--out folder]`: build the tiny policy for an
    environment into policies/ (or --out), on one torch thread as train.py runs it. The same seed
    and code give the same files bit for bit (a 2-thread build gave the same bits too);
    tests/test_tiny.py checks the shipped BabyAI policy against a fresh build: the tokenizer and
    config exactly, the weights to float rounding (the shipped ones predate a change in the order
    of the update's arithmetic)."""
    import argparse

    from envs import ENVS

    p = argparse.ArgumentParser(
        prog="python -m tiny", description="Build the tiny policy for an environment."
    )
    p.add_argument("command", choices=["build"])
    p.add_argument("--env", default="babyai", choices=list(ENVS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="folder to write; empty: policies/tiny-<env>-" + TINY_VERSION)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out or tiny_policy_path(args.env)
    build_tiny_policy(args.env, out, seed=args.seed)
    print(f"built the tiny policy for {args.env} in {out}")


if __name__ == "__main__":
    main()
