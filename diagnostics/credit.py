"""The credit each turn got: how much of the outcome an algorithm gave each of the agent's turns.

Where it sits: when a step's rollouts are saved (`train.py --save-rollouts-every N`), `turn_credit()`
sums the advantages the run's algorithm gave each agent token per turn (and PPO's values), and the
episodes carry it into <out>/rollouts/step_N.jsonl; `credit_on_episodes()` runs several algorithms'
own `advantages()` on the same saved episodes (`view.py --credit grpo,gigpo,ppo`), so the report
shows side by side where GRPO (one number per episode), GiGPO (per anchor state) and PPO (per token,
from its critic) put the credit. On those steps the update's loss is watched too (`watch_ratios`), and
`token_rows()` keeps every token of each trained row with its mask, sampled log-prob, ratio at the
update, advantage and value, and which tokens the action mask forced: the report's token inspector
(docs/view.md).
"""

import dataclasses
from types import SimpleNamespace

import torch

from algorithm import Algorithm
from batch import Row, make_batch, turn_of_tokens


def turn_credit(batch, name: str, algo: Algorithm) -> list[dict]:
    """Per trajectory of `batch` (after algorithm `algo`'s `advantages()`; `name`: its name in
    algos.ALGOS): per turn, its agent tokens, its credit (the advantage of its tokens; summed over
    them for a token-level algorithm) and, with PPO's critic, its values: summed per turn, and per
    token (what `credit_on_episodes` needs to run PPO's GAE again exactly)."""
    turn = turn_of_tokens(batch)  # (B, T), -1 off the agent tokens
    adv = batch.advantages.float().cpu()
    values = batch.values.float().cpu() if batch.values is not None else None
    out = [
        {"algo": name, "token_level": algo.token_level, "tokens": [], "advantage_sum": [], "values": []}
        for _ in range(len(batch.rewards))
    ]
    for b in batch.traj.argsort(stable=True).tolist():  # rows in trajectory, then turn order
        rec = out[int(batch.traj[b])]
        for c in (turn[b] >= 0).nonzero().squeeze(-1).tolist():
            k = int(turn[b, c])
            while len(rec["tokens"]) <= k:
                rec["tokens"].append(0), rec["advantage_sum"].append(0.0), rec["values"].append([])
            rec["tokens"][k] += 1
            rec["advantage_sum"][k] += float(adv[b, c])
            if values is not None:
                rec["values"][k].append(float(values[b, c]))
    for rec in out:
        rec["credit"] = _credit(rec["advantage_sum"], rec["tokens"], algo.token_level)
        if values is not None:
            rec["value_sum"] = [sum(v) for v in rec["values"]]
        else:
            del rec["values"]
    return out


def _credit(sums: list[float], tokens: list[int], token_level: bool) -> list[float]:
    """A turn's credit: the sum of its tokens' advantages for a token-level algorithm, else their
    (shared) value, the mean."""
    return list(sums) if token_level else [s / max(n, 1) for s, n in zip(sums, tokens)]


def credit_on_episodes(records: list[dict], algos: dict, cfg) -> dict[str, list[list[float] | None]]:
    """Each algorithm's per-turn credit on the same saved episodes (eval.write_trajectories'
    records of one training step), from its own `advantages(batch, cfg, None)`. `algos`: name ->
    algorithm.Algorithm. The episodes become a batch with one row per turn holding that turn's
    agent-token count (saved by `turn_credit`; 1 when not saved) and, for PPO, the run's own
    critic values when the run was PPO (a zero critic otherwise: PPO's first step). Returns, per
    algorithm, per record, the per-turn credit (None for an episode that ended in an error, which
    the update left out)."""
    keep = [i for i, r in enumerate(records) if not r.get("error") and int(r.get("turns") or 0) > 0]
    eps = []
    for i in keep:
        r = records[i]
        n_turns = int(r["turns"])
        saved = (r.get("credit") or {}).get("tokens") or []
        tokens = [int(saved[k]) if k < len(saved) else 1 for k in range(n_turns)]
        rows = [Row(ids=[0] * (1 + n), mask=[0] + [1] * n, logprobs=[0.0] * (1 + n)) for n in tokens]
        eps.append(
            SimpleNamespace(
                rows=rows,
                reward=float(r.get("reward") or 0.0),
                group=r.get("group", r.get("task")),
                observations=r.get("observations") or [],
                turns=n_turns,
                tokens=tokens,
                values=(r.get("credit") or {}).get("values"),
            )
        )
    out: dict[str, list] = {name: [None] * len(records) for name in algos}
    if not eps:
        return out
    ids = {g: k for k, g in enumerate(dict.fromkeys(str(e.group) for e in eps))}  # any group key -> 0, 1, ...
    for e in eps:
        e.group = ids[str(e.group)]
    for name, algo in algos.items():
        batch = make_batch(eps, pad_id=0)
        # an algorithm with a model of its own (PPO's critic) reads the run's values when they were saved
        if algo.init is not None and all(e.values and [len(v) for v in e.values] == e.tokens for e in eps):
            batch.values = torch.zeros_like(batch.loss_mask)
            for b, (n, k) in enumerate(zip(batch.traj.tolist(), batch.turn.tolist())):
                batch.values[b, 1 : 1 + eps[n].tokens[k]] = torch.tensor(eps[n].values[k])
        algo.advantages(batch, cfg, None)
        adv = batch.advantages.float()
        for b, (n, k) in enumerate(zip(batch.traj.tolist(), batch.turn.tolist())):
            if out[name][keep[n]] is None:
                out[name][keep[n]] = [0.0] * eps[n].turns
            out[name][keep[n]][k] = float((adv[b] * batch.loss_mask[b]).sum())
        for n, i in enumerate(keep):
            out[name][i] = _credit(out[name][i], eps[n].tokens, algo.token_level)
    return out


def watch_ratios(algo: Algorithm, seen: dict | None) -> Algorithm:
    """`algo` with a loss that also records, per row of each micro-batch it trains, the ratio
    pi / pi_old of the row's tokens ((T,), 1 off the agent tokens): `seen[(trajectory, turn)]`, the
    last minibatch step that trained the row (what its clip saw). A pass trains its rows when the
    backward gives its loss a weight, so the ratios are recorded at the backward: the weight-0
    filler pass (update.accumulate_gradients: a process with fewer micro-batches than another
    repeats one, maybe of rows it trained in an earlier minibatch) leaves no trace. `seen` None:
    `algo` itself, so the update is untouched on a step whose rollouts are not saved."""
    if seen is None:
        return algo

    def loss(logp, entropy, mb, cfg, state):
        with torch.no_grad():
            m = mb.loss_mask.to(logp.device)
            ratio = ((logp.detach().float() - mb.old_logprobs.to(logp.device)) * m).exp().cpu()
        keys = list(zip(mb.traj.tolist(), mb.turn.tolist()))
        out, stats = algo.loss(logp, entropy, mb, cfg, state)

        def record(grad):  # the gradient reaching the loss is the pass's weight: 0 for the filler
            if grad.item() != 0:
                seen.update(zip(keys, ratio))

        out.register_hook(record)
        return out, stats

    return dataclasses.replace(algo, loss=loss)


def token_rows(batch, tokenizer, seen: dict | None, cfg) -> list[dict]:
    """Per trajectory of `batch`, what the report's token inspector shows: `clip`, the ratio's
    bounds [1 - clip_ratio, 1 + eps_high], and per row (in turn order) each token's text, loss mask,
    log-prob at sampling (pi_old), ratio at the update (`watch_ratios`; none recorded: no `ratio`),
    advantage, with a critic its value, and under the action mask `forced`: 1 where the mask allowed
    one id only (" forward" after "move", <|im_end|> after an action), whose log-prob is 0 and ratio
    1 whatever the weights, so it adds no gradient but counts in the token mean's denominator."""
    high = cfg.clip_ratio_high or cfg.clip_ratio
    out = [{"clip": [1 - cfg.clip_ratio, 1 + high], "rows": []} for _ in range(len(batch.rewards))]
    four = lambda x: [round(float(v), 4) for v in x]
    for b in batch.traj.argsort(stable=True).tolist():  # rows in trajectory, then turn order
        n, k, T = int(batch.traj[b]), int(batch.turn[b]), int(batch.attention_mask[b].sum())
        row = {
            "turn": k,
            "text": [tokenizer.decode([i]) for i in batch.input_ids[b, :T].tolist()],
            "mask": [int(v) for v in batch.loss_mask[b, :T].tolist()],
            "logprob": four(batch.old_logprobs[b, :T]),
            "advantage": four(batch.advantages[b, :T].float()),
        }
        if batch.values is not None:
            row["value"] = four(batch.values[b, :T].float())
        if batch.allowed is not None:
            row["forced"] = [int(v) for v in ((batch.allowed[b, :T] >= 0).sum(-1) == 1).tolist()]
        if seen and (n, k) in seen:
            row["ratio"] = four(seen[n, k][:T])
        out[n]["rows"].append(row)
    return out
