"""Token in, token out: the loss mask, stored log-probs, and where the gradient goes."""

import pytest
import torch

import grpo
import tiny
from agent import rollout
from batch import make_batch, token_logprobs
from envs import ENVS, EnvPool
from train import Config


@pytest.fixture(scope="module")
def pool(start_server):
    server = start_server("servers.babyai")
    p = EnvPool(url=server.url, size=8)
    yield p
    p.close()


def run(tiny_path, pool, context_turns, mask_actions, horizon=3, max_new_tokens=48, conversation_tokens=0):
    torch.manual_seed(0)
    policy = tiny.load(tiny_path, "babyai")
    policy.context_turns, policy.mask_actions, policy.max_new_tokens = (
        context_turns,
        mask_actions,
        max_new_tokens,
    )
    policy.conversation_tokens = conversation_tokens
    spec = ENVS["babyai"]
    trajs = rollout(
        policy, pool, spec, spec.splits["train"][:4] * 2, horizon=horizon, groups=[0, 1, 2, 3] * 2
    )
    return policy, trajs


def spans(mask):
    """Maximal runs of 1s as (start, end) pairs."""
    out, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            out.append((start, i))
            start = None
    return out


def test_loss_mask_is_one_exactly_on_the_agents_replies(tiny_path, pool):
    """Full context, one sequence per episode: each masked span decodes to that turn's reply
    followed by the end-of-turn token, and there is one span per turn."""
    policy, trajs = run(tiny_path, pool, context_turns=0, mask_actions=True)
    tok = policy.tokenizer
    for tr in trajs:
        assert len(tr.rows) == 1
        row = tr.rows[0]
        runs = spans(row.mask)
        assert len(runs) == tr.turns
        for (a, b), action in zip(runs, tr.actions):
            assert row.ids[b - 1] == policy.end_of_turn
            assert tok.decode(row.ids[a : b - 1]) == tok.decode(
                tok(action, add_special_tokens=False)["input_ids"]
            )
        # the sequence ends on the agent's last token: no observation after the last action
        assert row.mask[-1] == 1


def test_conversation_tokens_ends_an_episode_before_a_turn_that_would_start_past_the_budget(tiny_path, pool):
    """--conversation-tokens N (the reference's data.max_response_length): no reply starts after N
    tokens of conversation past the first prompt; an episode that reached it ends there, not done,
    its row ending on the agent's own last token. Without the budget the same episodes run longer."""
    first = lambda row: row.mask.index(1)  # noqa: E731  the first prompt's length
    _, free = run(tiny_path, pool, context_turns=0, mask_actions=True, horizon=8)
    budget = max(len(t.rows[0].ids) - first(t.rows[0]) for t in free) // 2
    _, cut = run(tiny_path, pool, context_turns=0, mask_actions=True, horizon=8, conversation_tokens=budget)
    assert any(t.over_budget for t in cut) and not any(t.over_budget for t in free)
    for t in cut:
        row = t.rows[0]
        last = spans(row.mask)[-1]
        assert last[0] - first(row) <= budget  # the last reply started within the budget
        assert len(spans(row.mask)) == t.turns and row.mask[-1] == 1
        if t.over_budget:
            assert not t.done and t.turns < 8
    assert sum(t.turns for t in cut) < sum(t.turns for t in free)


def test_conversation_tokens_needs_the_whole_conversation():
    with pytest.raises(ValueError, match="--conversation-tokens counts a whole conversation"):
        from train import train

        train(Config(conversation_tokens=100, steps=1, eval_episodes=0))  # the tiny policy: 1 turn in view


def test_free_generation_masks_exactly_the_sampled_tokens(tiny_path, pool):
    """Without action masking, the masked tokens are exactly the sampled ones (up to a stop
    token or max_new_tokens), and a reply cut short gets an untrained end-of-turn token."""
    policy, trajs = run(tiny_path, pool, context_turns=0, mask_actions=False, max_new_tokens=6)
    cut = 0
    for tr in trajs:
        row = tr.rows[0]
        runs = spans(row.mask)
        assert len(runs) == tr.turns
        for a, b in runs[:-1]:
            if row.ids[b - 1] in policy.stop_ids:  # ended by the model: glue follows directly
                assert b - a <= 6 and row.mask[b] == 0
            else:  # cut at max_new_tokens
                assert b - a == 6 and row.ids[b] == policy.end_of_turn and row.mask[b] == 0
                cut += 1
    assert cut > 0  # the case above was exercised


def test_stored_logprobs_equal_a_fresh_forward_pass(tiny_path, pool):
    for context_turns, mask in [(0, True), (1, True), (0, False)]:
        policy, trajs = run(tiny_path, pool, context_turns=context_turns, mask_actions=mask)
        batch = make_batch(trajs, policy.tokenizer.pad_token_id)
        with torch.no_grad():
            logp, _ = token_logprobs(policy.model, batch, policy.temperature)
        m = batch.loss_mask.bool()
        assert m.sum() > 0
        torch.testing.assert_close(logp[m], batch.old_logprobs[m], atol=2e-4, rtol=0)


def test_window_context_gives_one_row_per_turn(tiny_path, pool):
    policy, trajs = run(tiny_path, pool, context_turns=1, mask_actions=True)
    for tr in trajs:
        assert len(tr.rows) == tr.turns
        for row in tr.rows:
            assert len(spans(row.mask)) == 1 and row.mask[-1] == 1


def test_observation_tokens_get_no_gradient(tiny_path, pool):
    """d loss / d logp is zero on every observation/template token and non-zero on agent tokens."""
    policy, trajs = run(tiny_path, pool, context_turns=0, mask_actions=True)
    for i, t in enumerate(trajs):
        t.reward = float(i < 4)  # each group: one success, one failure
    batch = make_batch(trajs, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        batch.ref_logprobs, _ = token_logprobs(policy.model, batch)
    grpo.advantages(batch, Config())
    logp, ent = token_logprobs(policy.model, batch, with_entropy=True)
    logp.retain_grad()
    ent.retain_grad()
    loss, _ = grpo.loss(logp, ent, batch, Config())
    loss.backward()
    obs = batch.loss_mask == 0
    assert torch.all(logp.grad[obs] == 0) and torch.all(ent.grad[obs] == 0)
    assert torch.all(logp.grad[~obs] != 0)


def test_observation_tokens_do_not_change_the_update(tiny_path, pool):
    """Changing the stored old log-probs of observation tokens leaves the loss unchanged, even to
    a value whose ratio exp(logp - old) overflows: without the mask the loss would be NaN."""
    policy, trajs = run(tiny_path, pool, context_turns=0, mask_actions=True)
    for i, t in enumerate(trajs):
        t.reward = float(i < 4)
    batch = make_batch(trajs, policy.tokenizer.pad_token_id)
    grpo.advantages(batch, Config())
    with torch.no_grad():
        logp, _ = token_logprobs(policy.model, batch)
        a, _ = grpo.loss(logp, None, batch, Config())
        batch.old_logprobs[batch.loss_mask == 0] = -1e4
        b, _ = grpo.loss(logp, None, batch, Config())
    assert a.item() == b.item()


def test_unseen_names_round_trip_and_never_share_an_action_leaf(tiny_path):
    """The tiny tokenizer (built on BabyAI text) encodes any string exactly, so distinct actions
    with names it never met (TextCraft test items, Deep Search entities) get distinct ids."""
    from agent import action_trie

    policy = tiny.load(tiny_path, "babyai")
    tok = policy.tokenizer
    actions = [
        "craft 1 warped fungus on a stick using 1 fishing rod, 1 warped fungus",
        "craft 1 crimson fungus on a stick using 1 fishing rod, 1 crimson fungus",
        "get 3 netherite scrap",
        "get 4 netherite scrap",
        "inventory",
        "<search>Zhaumbrei Köstrand</search>",
        "<answer>Zhaumbrei Köstrand</answer>",
        "<answer>Zhaumbrel Köstrand</answer>",
        "<answer>1873</answer>",
        "go to  blue ball 1 ",
    ]
    ids = [tok(a, add_special_tokens=False)["input_ids"] for a in actions]
    assert [tok.decode(i) for i in ids] == actions
    assert len({tuple(i) for i in ids}) == len(actions)
    leaves, stack = [], [action_trie(policy, actions)]
    while stack:
        node = stack.pop()
        leaves += [v for k, v in node.items() if k is None]
        stack += [v for k, v in node.items() if k is not None]
    assert sorted(leaves) == sorted(actions)


def test_babyai_words_are_single_tokens(tiny_path):
    """BPE still merges the closed BabyAI vocabulary into one token a word."""
    tok = tiny.load(tiny_path, "babyai").tokenizer
    for action in ["go to blue ball 1", "pickup red key 2", "turn left", "move forward", "toggle"]:
        assert len(tok(action, add_special_tokens=False)["input_ids"]) == len(action.split())


def test_a_profiled_rollout_is_the_same_rollout_and_times_every_part(tiny_path, pool):
    """timings=dict only measures: same seed, same episodes; the parts sit inside generate."""
    _, plain = run(tiny_path, pool, context_turns=0, mask_actions=True)
    torch.manual_seed(0)
    policy = tiny.load(tiny_path, "babyai")
    policy.context_turns, policy.mask_actions = 0, True
    spec, t = ENVS["babyai"], {}
    timed_trajs = rollout(
        policy, pool, spec, spec.splits["train"][:4] * 2, horizon=3, groups=[0, 1, 2, 3] * 2, timings=t
    )
    assert [tr.actions for tr in timed_trajs] == [tr.actions for tr in plain]
    assert set(t) == {"env", "template", "tries", "generate", "prefill", "decode", "mask"}
    assert t["prefill"] + t["decode"] + t["mask"] <= t["generate"]
    assert all(v > 0 for v in t.values())


def test_building_the_tiny_policy_leaves_the_callers_random_stream_as_it_was(tmp_path):
    """A build in the caller's process (a test's own small policy) must not change what it samples next."""
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    tiny.build_tiny_policy("babyai", str(tmp_path), warmup_steps=1, episodes=20)
    assert torch.equal(torch.rand(3), expected)
