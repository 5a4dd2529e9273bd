"""machinery/signals.py: the learning signals are the right shares, each alarm fires on a history
that should trigger it and stays quiet on a healthy one, the credit shown per turn is the
algorithms' own advantage, a non-finite step never reaches the weights, and greedy sampling
(--temperature 0) is consistent between rollout and update."""

import json
import math

import pytest
import torch
from accelerate import Accelerator
from transformers import Qwen2Config, Qwen2ForCausalLM

import gigpo
import grpo
import ppo
from agent import Trajectory
from algorithm import Algorithm
from algos import ALGOS
from batch import Row, make_batch, token_logprobs
from diagnostics.credit import credit_on_episodes, turn_credit
from eval import write_trajectories
from machinery import signals
from train import Config
from update import update


def episode(
    group,
    reward,
    replies,
    actions=None,
    observations=None,
    truncated=0,
    tokens=None,
    category="A",
    error="",
    whole=False,
):
    """A trajectory as agent.rollout returns it: one reply per turn, `tokens[k]` agent tokens in
    turn k (one row per turn, or `whole`: one row holding the conversation)."""
    actions = list(replies) if actions is None else actions
    observations = observations or [f"obs {k}" for k in range(len(replies) + 1)]
    tokens = tokens or [2] * len(replies)
    t = Trajectory(
        task=100 + group,
        group=group,
        reward=reward,
        success=reward > 0,
        category=category,
        error=error,
        truncated=truncated,
        actions=actions,
        observations=observations,
    )
    t.messages = [
        m
        for k, r in enumerate(replies)
        for m in ({"role": "user", "content": observations[k]}, {"role": "assistant", "content": r})
    ]
    if whole:  # [obs][reply 0][glue][reply 1]...: runs of agent tokens separated by observation tokens
        ids, mask = [1, 2], [0, 0]
        for n in tokens:
            ids += list(range(3, 3 + n)) + [9]
            mask += [1] * n + [0]
        t.rows = [Row(ids=ids, mask=mask, logprobs=[-0.5 * m for m in mask])]
    else:
        t.rows = [
            Row(ids=[1, 2] + list(range(3, 3 + n)), mask=[0, 0] + [1] * n, logprobs=[0.0, 0.0] + [-0.5] * n)
            for n in tokens
        ]
    return t


# --- the shares, on hand-made groups ------------------------------------------------------------


def hand_made():
    return [
        # group 0: both succeed with the same reward: flat, all succeeded; identical first replies
        episode(0, 0.9, ["go to ball", "pickup ball"], tokens=[3, 2], category="A"),
        episode(0, 0.9, ["go to ball", "drop"], tokens=[3, 1], category="A"),
        # group 1: both fail: flat, all failed; one unparsed turn, one refused, one cut reply
        episode(
            1, 0.0, ["turn left", "???"], actions=["turn left", ""], tokens=[2, 4], truncated=1, category="B"
        ),
        episode(
            1, 0.0, ["fly"], observations=["o", '"fly" is not an available action'], tokens=[1], category="B"
        ),
        # group 2: one success, one failure: a signal
        episode(2, 0.9, ["turn left"], tokens=[2], category="B"),
        episode(2, 0.0, ["turn right", "turn right"], tokens=[2, 2], category="B"),
        # an environment error: left out of the update and of the shares, counted apart
        episode(3, 0.0, ["x"], error="server crashed", category="B"),
    ]


def test_shares_are_right_on_hand_made_groups():
    s = signals.step_signals(signals.episode_facts(hand_made()))
    assert s["signals/flat_groups"] == pytest.approx(2 / 3)  # groups 0 and 1 of 0, 1, 2
    assert s["signals/flat_failed"] == pytest.approx(1 / 3) and s["signals/flat_succeeded"] == pytest.approx(
        1 / 3
    )
    # 10 turns of the 6 usable episodes: 2 without a valid action (unparsed, refused), 1 cut
    assert s["signals/invalid_actions"] == pytest.approx(2 / 10)
    assert s["signals/cut_replies"] == pytest.approx(1 / 10)
    assert s["signals/reply_tokens"] == pytest.approx((5 + 4 + 6 + 1 + 2 + 4) / 10)
    # identical at the same turn within a group: group 0's two "go to ball" replies; nothing else
    assert s["signals/identical_replies"] == pytest.approx(2 / 10)
    assert s["signals/env_error_share"] == pytest.approx(1 / 7)
    assert s["success/A"] == 1.0 and s["success/B"] == pytest.approx(1 / 4)


def test_identical_share_is_one_for_alike_rollouts_and_zero_for_different_ones():
    assert signals.identical_share([[["a", "b"], ["a", "b"], ["a", "b"]]]) == 1.0
    assert signals.identical_share([[["a"], ["b"], ["c"]]]) == 0.0
    assert signals.identical_share([[["a", "x"], ["a"]], [["q"]]]) == pytest.approx(2 / 4)


def test_advantage_spread_is_the_std_over_agent_tokens():
    trajs = hand_made()[:6]
    batch = make_batch(trajs, 0)
    grpo.advantages(batch, Config())
    a = batch.advantages[batch.loss_mask.bool()].double()
    s = signals.step_signals(signals.episode_facts(trajs), batch)
    assert s["signals/adv_std"] == pytest.approx(float(a.std(unbiased=False)), rel=1e-6)
    flat = make_batch(trajs[:4], 0)  # groups 0 and 1: every reward equal within its group
    grpo.advantages(flat, Config())
    assert signals.step_signals(signals.episode_facts(trajs[:4]), flat)["signals/adv_std"] == 0.0


# --- alarms: each fires on a history that should trigger it, none on a healthy one ---------------

HEALTHY = {
    "signals/flat_groups": 0.4,
    "signals/flat_failed": 0.3,
    "signals/flat_succeeded": 0.1,
    "signals/identical_replies": 0.5,
    "signals/invalid_actions": 0.02,
    "signals/cut_replies": 0.0,
    "signals/env_error_share": 0.0,
    "signals/nonfinite_skips": 0,
    "losses/entropy": 1.0,
    "losses/kl": 0.01,
    "losses/approx_kl": 0.001,
    "signals/reply_tokens": 3.0,
}


def history(n=10, from_step=None, **broken):
    """n healthy steps; from step `from_step` on (default: every step) `broken`'s keys take their values."""
    keys = {k.replace("__", "/"): v for k, v in broken.items()}
    return [
        {"step": s, **HEALTHY, **(keys if from_step is None or s >= from_step else {})}
        for s in range(1, n + 1)
    ]


def fired_at(rows, cfg=None):
    cfg = cfg or Config()
    return {s: signals.check(rows[:s], cfg) for s in range(1, len(rows) + 1)}


def test_a_healthy_run_raises_no_alarm():
    assert all(v == [] for v in fired_at(history(20)).values())


@pytest.mark.parametrize(
    "name, broken, first",
    [
        (
            "no_signal",
            dict(signals__flat_groups=1.0, signals__flat_failed=1.0),
            3,
        ),  # after alarm_patience steps
        ("echo", dict(signals__identical_replies=1.0), 3),
        ("kl", dict(losses__kl=3.0), 1),  # at once
        ("kl", dict(losses__approx_kl=0.4), 1),
        ("invalid", dict(signals__invalid_actions=0.6), 3),
        ("cut", dict(signals__cut_replies=0.8), 1),
        ("env_errors", dict(signals__env_error_share=0.25), 1),
        ("non_finite", dict(signals__nonfinite_skips=1), 1),
    ],
)
def test_each_alarm_fires_on_a_history_that_should_trigger_it(name, broken, first):
    fired = fired_at(history(8, **broken))
    assert [s for s, names in fired.items() if name in names][0] == first
    assert name in fired[8]


def test_slow_alarms_need_patience_steps_in_a_row():
    rows = history(10, signals__flat_groups=1.0)
    rows[4]["signals/flat_groups"] = 0.5  # step 5 had some signal: the count starts again
    fired = fired_at(rows)
    assert [s for s in fired if "no_signal" in fired[s]] == [3, 4, 8, 9, 10]
    assert "no_signal" in fired_at(rows, Config(alarm_patience=1))[1]


def test_a_kl_that_jumps_in_one_update_fires_even_under_the_bound():
    rows = history(8, from_step=5, losses__kl=0.3)  # 0.01 -> 0.3 at step 5, then steady under alarm_kl
    fired = fired_at(rows)
    assert [s for s in fired if "kl" in fired[s]] == [5]
    assert "(the step before: 0.01)" in signals.describe("kl", rows[:5])
    assert not any(fired_at(rows, Config(alarm_kl_jump=0.5)).values())


def test_entropy_collapse_and_a_rising_invalid_rate_fire_against_the_runs_own_start():
    rows = history(10, from_step=6, losses__entropy=0.05)  # entropy fell to 5% of its first steps'
    assert "echo" in signals.check(rows[:8], Config()) and "echo" not in signals.check(rows[:7], Config())
    start = history(10)  # invalid actions at 0.02, then at 0.25: under alarm_invalid (0.3), but +0.23
    rows = history(10, from_step=4, signals__invalid_actions=0.25)
    assert "invalid" in signals.check(rows[:6], Config()) and not signals.check(start, Config())
    assert "invalid" not in signals.check(rows[:6], Config(alarm_invalid_rise=0.5))


def test_the_no_signal_alarm_says_which_way_and_what_to_do():
    hard = history(3, signals__flat_groups=1.0, signals__flat_failed=1.0, signals__flat_succeeded=0.0)
    easy = history(3, signals__flat_groups=1.0, signals__flat_failed=0.0, signals__flat_succeeded=1.0)
    alike = history(
        3,
        signals__flat_groups=1.0,
        signals__flat_failed=0.5,
        signals__flat_succeeded=0.5,
        signals__identical_replies=1.0,
    )
    assert "too hard or the horizon too short" in signals.describe("no_signal", hard)
    assert "too easy" in signals.describe("no_signal", easy)
    assert "--temperature" in signals.describe("no_signal", alike) and "no spread" in signals.describe(
        "no_signal", alike
    )
    for name in signals.ALARMS:  # every alarm names its step and a fix
        line = signals.describe(name, hard)
        assert line.startswith(f"alarm [{name}] step 3:") and "Fix: " in line and not line.endswith("Fix: ")


def test_every_alarm_threshold_is_a_documented_flag():
    from config import field_docs

    docs = field_docs(Config)
    for f in (
        "stop_on_alarm",
        "alarm_patience",
        "alarm_flat_share",
        "alarm_identical",
        "alarm_entropy_drop",
        "alarm_kl",
        "alarm_approx_kl",
        "alarm_invalid",
        "alarm_invalid_rise",
        "alarm_cut",
        "alarm_env_errors",
    ):
        assert docs.get(f), f
    assert Config().stop_on_alarm is False  # an alarm never stops a run unless asked


# --- credit: the numbers shown are the algorithms' own advantages -------------------------------


def credit_batch(whole: bool):
    trajs = [
        episode(
            0, 0.9, ["a", "b", "c"], tokens=[3, 1, 2], whole=whole, observations=["s0", "s1", "s2", "s3"]
        ),
        episode(0, 0.0, ["a", "d"], tokens=[2, 4], whole=whole, observations=["s0", "s1", "s9"]),
        episode(0, 0.5, ["e"], tokens=[5], whole=whole, observations=["s0", "end"]),
        episode(1, 1.0, ["f", "g"], tokens=[1, 1], whole=whole, observations=["t0", "t1", "end"]),
        episode(1, 0.0, ["h", "i"], tokens=[2, 3], whole=whole, observations=["t0", "t1", "t2"]),
    ]
    return trajs, make_batch(trajs, 0)


def per_turn(batch, n, reduce):
    """Trajectory n's per-turn advantages, straight from batch.advantages: turn k's agent tokens."""
    turn = gigpo.turn_of_tokens(batch)
    rows = (batch.traj == n).nonzero().squeeze(-1)
    vals = {}
    for b in rows.tolist():
        for c in (turn[b] >= 0).nonzero().squeeze(-1).tolist():
            vals.setdefault(int(turn[b, c]), []).append(float(batch.advantages[b, c]))
    return [reduce(vals[k]) for k in sorted(vals)]


@pytest.mark.parametrize("whole", [False, True])
@pytest.mark.parametrize("algo", ["grpo", "gigpo", "ppo", "rloo", "reinforce_pp"])
def test_saved_credit_and_the_credit_view_equal_the_algorithms_advantages(tmp_path, algo, whole):
    cfg = Config(algo=algo, kl_coef=0.0)
    trajs, batch = credit_batch(whole)
    if algo == "ppo":  # a critic's values at rollout, saved per token and used again by the view
        batch.values = (
            torch.linspace(-0.4, 0.6, batch.loss_mask.numel()).reshape(batch.loss_mask.shape)
            * batch.loss_mask
        )
    ALGOS[algo].advantages(batch, cfg, None)
    token_level = ALGOS[algo].token_level
    reduce = sum if token_level else (lambda xs: sum(xs) / len(xs))
    for t, c in zip(trajs, turn_credit(batch, algo, ALGOS[algo])):
        t.credit = c
    for n, t in enumerate(trajs):
        assert t.credit["credit"] == pytest.approx(per_turn(batch, n, reduce), abs=1e-6)
        if not token_level:  # one advantage per turn: every token of the turn has it
            assert all(max(v) - min(v) < 1e-6 for v in per_turn(batch, n, lambda x: x))
    write_trajectories(str(tmp_path / "step_000001.jsonl"), trajs, step=1)
    records = [json.loads(line) for line in open(tmp_path / "step_000001.jsonl")]
    again = credit_on_episodes(records, {algo: ALGOS[algo]}, cfg)[algo]
    for n, t in enumerate(trajs):  # the view's numbers, from the saved episodes alone
        assert again[n] == pytest.approx(t.credit["credit"], abs=1e-5)


def test_credit_on_episodes_is_grpo_episode_level_and_gigpo_step_level():
    trajs, batch = credit_batch(False)
    grpo.advantages(batch, Config())
    for t, c in zip(trajs, turn_credit(batch, "grpo", grpo.GRPO)):
        t.credit = c
    records = [
        {
            "task": t.task,
            "group": t.group,
            "reward": t.reward,
            "turns": t.turns,
            "observations": t.observations,
            "credit": t.credit,
        }
        for t in trajs
    ] + [{"task": 7, "group": 9, "reward": 1.0, "turns": 1, "error": "boom"}]
    cfg = Config()
    out = credit_on_episodes(records, {"grpo": grpo.GRPO, "gigpo": gigpo.GIGPO}, cfg)
    a_ep = grpo.group_advantages(
        torch.tensor([t.reward for t in trajs]), torch.tensor([t.group for t in trajs])
    )
    for n, t in enumerate(trajs):
        assert out["grpo"][n] == pytest.approx([float(a_ep[n])] * t.turns, abs=1e-6)
    want = gigpo.gigpo_advantages(
        [t.reward for t in trajs],
        [t.group for t in trajs],
        [t.observations[: t.turns] for t in trajs],
        cfg.step_weight,
        cfg.step_gamma,
    )
    assert out["gigpo"][:5] == [pytest.approx(w, abs=1e-6) for w in want]
    assert out["grpo"][5] is None and out["gigpo"][5] is None  # the errored episode: not in the update


def test_ppo_credit_without_saved_values_is_a_zero_critic():
    trajs, batch = credit_batch(False)
    ppo.advantages(batch, Config(), None)  # no critic: V = 0
    records = [
        {
            "task": t.task,
            "group": t.group,
            "reward": t.reward,
            "turns": t.turns,
            "credit": {"tokens": [sum(r.mask) for r in t.rows]},
        }
        for t in trajs
    ]
    out = credit_on_episodes(records, {"ppo": ppo.PPO}, Config())["ppo"]
    for n in range(len(trajs)):
        assert out[n] == pytest.approx(per_turn(batch, n, sum), abs=1e-5)


# --- non-finite: skipped, never saved -----------------------------------------------------------


def small_model():
    torch.manual_seed(0)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=40,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )


def test_a_non_finite_loss_skips_the_step_and_leaves_the_weights_as_they_were():
    trajs, batch = credit_batch(False)
    model, cfg = small_model(), Config(minibatch_size=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    grpo.advantages(batch, cfg)
    before = [p.detach().clone() for p in model.parameters()]
    nan_loss = Algorithm(
        advantages=grpo.advantages, loss=lambda logp, ent, mb, cfg, st: (logp.sum() * math.nan, {})
    )
    stats = update(model, batch, len(trajs), nan_loss, cfg, None, Accelerator(cpu=True), [(model, opt)])
    assert (
        stats["signals/nonfinite_skips"] == 3
    )  # 5 trajectories in minibatches of 2: 3 optimizer steps, all skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert "non_finite" in signals.check([{"step": 1, **stats}], cfg)
    stats = update(model, batch, len(trajs), grpo.GRPO, cfg, None, Accelerator(cpu=True), [(model, opt)])
    assert stats["signals/nonfinite_skips"] == 0 and not all(
        torch.equal(a, b) for a, b in zip(before, model.parameters())
    )


def test_non_finite_weights_stop_the_run_with_a_clear_message():
    model = small_model()
    signals.check_finite(model, 3)  # finite: nothing happens
    with torch.no_grad():
        next(model.parameters())[0, 0] = math.nan
    with pytest.raises(RuntimeError, match="step 3: non-finite weights.*not saved"):
        signals.check_finite(model, 3)


# --- temperature 0: greedy at rollout, the same distribution in the update -----------------------


def test_temperature_0_log_probs_in_the_update_are_the_rollouts_and_finite(tiny_path):
    from agent import generate
    from tiny import load

    policy = load(tiny_path, "babyai", "cpu")
    policy.temperature, policy.mask_actions = 0.0, False
    ctx = policy.tokenizer("You see a red ball 1 . Goal : go to the red ball .")["input_ids"]
    ids, lps, _, _, _ = generate(policy, [ctx, ctx[:-2]])
    trajs = [
        Trajectory(
            task=0,
            group=0,
            rows=[Row(ids=c + r, mask=[0] * len(c) + [1] * len(r), logprobs=[0.0] * len(c) + lp)],
        )
        for c, r, lp in zip([ctx, ctx[:-2]], ids, lps)
    ]
    batch = make_batch(trajs, policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, ent = token_logprobs(policy.model, batch, 0.0, with_entropy=True)
    m = batch.loss_mask.bool()
    assert torch.isfinite(logp).all() and torch.isfinite(ent).all()
    torch.testing.assert_close(logp[m], batch.old_logprobs[m], atol=1e-4, rtol=1e-4)  # ratio 1 on policy
    # and the same two contexts again: greedy picks the same reply
    assert generate(policy, [ctx, ctx[:-2]])[0] == ids


# --- in the loop --------------------------------------------------------------------------------


def test_the_loop_logs_the_signals_and_stops_on_an_alarm_only_when_asked(tmp_path):
    from train import train

    # every step "has no signal" under these thresholds: the alarm fires at step 1
    cfg = Config(
        steps=3,
        tasks_per_step=2,
        group_size=2,
        minibatch_size=4,
        eval_episodes=0,
        rounds="2",
        out=str(tmp_path),
        save_every=3,
        alarm_flat_share=0.0,
        alarm_patience=1,
        stop_on_alarm=True,
    )
    train(cfg)
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1] and rows[0]["alarm/no_signal"] == 1.0
    for key in (
        "signals/flat_groups",
        "signals/identical_replies",
        "signals/invalid_actions",
        "signals/cut_replies",
        "signals/reply_tokens",
        "signals/adv_std",
        "signals/nonfinite_skips",
    ):
        assert key in rows[0], key
    assert any(k.startswith("success/") for k in rows[0])
    assert "no_signal" in open(tmp_path / "report.html").read()  # the banner's data
    cfg.stop_on_alarm, cfg.out = False, str(tmp_path / "go_on")
    train(cfg)  # the same alarm, and the run goes on
    rows = [json.loads(line) for line in open(tmp_path / "go_on" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["alarm/no_signal"] == 1.0 for r in rows)
