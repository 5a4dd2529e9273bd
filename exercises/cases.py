"""The problems: per problem, the project's own function (the reference solution), the cases the
checker runs it and the student's function on, and how a case is run.

Where it sits: `check.py` reads `PROBLEMS`; nothing else does. A reference is the project's
function itself, or (problems 1 and 5) a few lines that drive the project's class with the
problem's arguments: never a copy of the math. Problem 10's student writes an environment, which
no reference can be compared with: its cases (env_cases.py) judge properties, and its reference
(find_it.py) is one environment that has them. Each case's `what` is the sentence a student reads
when that case fails, so it says what the case is about.

Three rules keep a wrong answer from passing. A loss is compared with its gradient with respect to
every input that carries one in training (problem 3: logp and entropy). Where the contract asks for
float64 so that equal values give exactly 0, the case uses values float32 rounds (BabyAI's 0.925),
not ones it holds exactly (1.0, 0.5). A stand-in refuses every call the real thing refuses
(problem 8's corridor, `corridor.py`).
"""

import functools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import torch


@dataclass
class Case:
    what: str  # what this case tests, in plain words
    inputs: dict  # keyword arguments of the function
    needs: str = ""  # a package the case cannot run without (problem 10's OpenEnv server: openenv)


@dataclass
class Problem:
    title: str
    module: str  # the stub the student fills in: exercises.<module>
    name: str  # the function in it
    mirrors: str  # the project's file and function
    reference: Callable  # the project's function, or a thin driver of it
    cases: Callable[[], list[Case]]  # built on demand (problem 1's need a tokenizer)
    run: Callable = lambda fn, inputs: fn(**inputs)  # (function, inputs) -> what is compared
    handed: Callable[[dict], dict] = lambda inputs: {}  # what `run` builds from the inputs and hands
    # the function (problem 7's batch, problem 8's spec): shown with the inputs when a case fails
    hidden: dict = field(default_factory=dict)  # input -> what it is, for one not worth printing
    whole: bool = False  # the student writes several names (problem 10): the stub module is handed whole


# --- problem 1: the loss mask of a multi-turn conversation -------------------------------------


def project_episode_row(tokenizer, first_messages, replies, observations, end_of_turn, stop_ids):
    """The project's `agent.WholeConversation`, driven through one recorded episode as `rollout`
    drives it: context, then per turn the reply and (all but the last turn) the next observation."""
    from agent import Trajectory, WholeConversation

    policy = SimpleNamespace(tokenizer=tokenizer, end_of_turn=end_of_turn, stop_ids=stop_ids)
    memory = WholeConversation(policy)
    episode = Trajectory(task=0, group=0, messages=list(first_messages))
    for k, (ids, logprobs) in enumerate(replies):
        memory.add_reply(memory.context(episode), list(ids), list(logprobs), {})
        if k < len(observations):
            memory.add_observation(list(ids), observations[k])
    return memory.rows()[0]


@functools.cache
def chat_tokenizer():
    """A small ChatML tokenizer, the tiny policy's kind (tiny.tiny_tokenizer), trained in a second."""
    from tiny import tiny_tokenizer

    return tiny_tokenizer(["You see a red ball. go to the red ball", "turn left", "go forward", "done"] * 4)


def loss_mask_cases() -> list[Case]:
    from agent import end_of_turn_id

    tok = chat_tokenizer()
    eot = end_of_turn_id(tok)
    say = lambda text: tok(text, add_special_tokens=False)["input_ids"]
    reply = lambda text, end=(eot,), lp0=-0.1: (say(text) + list(end), [lp0 - 0.1 * i for i in range(99)])
    first = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "You see a red ball"},
    ]
    base = dict(tokenizer=tok, first_messages=first, end_of_turn=eot, stop_ids={eot, tok.pad_token_id})

    def case(what, replies, observations):
        replies = [(ids, lp[: len(ids)]) for ids, lp in replies]
        return Case(what, {**base, "replies": replies, "observations": observations})

    return [
        case("one turn: the prompt, then the reply with its end-of-turn token", [reply("go forward")], []),
        case(
            "three turns: observations between the replies, nothing after the last reply",
            [reply("turn left", lp0=-0.5), reply("go forward", lp0=-0.2), reply("done", lp0=-0.9)],
            ["You see a wall", "You see a red ball"],
        ),
        case(
            "the middle reply was cut at the token limit (no stop token at its end)",
            [reply("turn left"), reply("go forward go", end=()), reply("done")],
            ["You see a wall", "You see a red ball"],
        ),
        case(
            "a reply ended by another stop token (the pad id), not the end-of-turn token",
            [reply("turn left", end=(tok.pad_token_id,)), reply("done")],
            ["You see a wall"],
        ),
        case(
            "the last reply was cut at the token limit",
            [reply("turn left"), reply("go", end=())],
            ["You see a wall"],
        ),
        case(
            "a reply sampled as 'g' + 'o' + ' forward', ids the tokenizer would not write for its text",
            [reply("turn left"), (say("g") + say("o") + say(" forward") + [eot], [-0.3, -0.2, -0.1, -0.05])],
            ["You see a wall"],
        ),
    ]


def episode_row_run(fn, inputs):
    copy = dict(inputs, replies=[(list(i), list(lp)) for i, lp in inputs["replies"]])
    return fn(**copy)


# --- problem 2: GRPO's group advantages ---------------------------------------------------------


def grpo_cases() -> list[Case]:
    r = lambda *xs: torch.tensor(xs, dtype=torch.float32)
    g = lambda *xs: torch.tensor(xs)
    return [
        Case(
            "two interleaved groups of four, 0/1 rewards",
            dict(rewards=r(1, 0, 0, 0, 1, 1, 0, 1), groups=g(0, 1).repeat(4)),
        ),
        Case(
            "an all-equal group of BabyAI rewards 0.925 (must give exactly 0) beside a mixed group",
            dict(
                rewards=r(0.925, 0.925, 0.925, 0.925, 0.925, 0.925, 0.925, 0.925, 0.7, 0.0, 0.925, 0.0),
                groups=g(*[0] * 8, 1, 1, 1, 1),
            ),
        ),
        Case(
            "a group of one (nothing to compare with) beside a group of three",
            dict(rewards=r(1, 1, 0, 0), groups=g(5, 7, 7, 7)),
        ),
        Case(
            "use_std=False: only the group mean is subtracted",
            dict(rewards=r(1, 0, 0, 0, 0.5, 1), groups=g(0, 0, 0, 0, 1, 1), use_std=False),
        ),
        Case(
            "a large eps (1.0): eps is added to the group's std",
            dict(rewards=r(1, 0, 1, 0), groups=g(0, 0, 1, 1), eps=1.0),
        ),
        Case(
            "groups as a list of hashable keys (GiGPO's (group, state) pairs)",
            dict(rewards=r(1, 0, 0, 1, 0), groups=[(0, "a"), (0, "a"), (0, "b"), (1, "a"), (1, "a")]),
        ),
        Case(
            "every reward in the batch 0 (every group flat)",
            dict(rewards=r(0, 0, 0, 0), groups=g(0, 0, 1, 1)),
        ),
        Case(
            "float64 rewards: the advantages come back in float64",
            dict(rewards=r(1, 0, 0.5, 0.25).double(), groups=g(0, 0, 0, 0)),
        ),
    ]


# --- problem 3: the clipped surrogate with the k3 KL -------------------------------------------


def clipped_loss_cases() -> list[Case]:
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 0, 1, 1]], dtype=torch.float32)  # (B, T)
    logp = torch.tensor([[0, 0, -0.5, -1.2, -0.1, 0], [0, -2.0, -0.3, 0, -0.7, -1.5]]) * mask
    near = logp + torch.tensor([[0, 0, 0.05, -0.1, 0.02, 0], [0, 0.1, -0.05, 0, 0.0, 0.08]]) * mask
    far = (
        logp + torch.tensor([[0, 0, 0.9, -0.8, 0.3, 0], [0, -0.6, 0.5, 0, -0.9, 0.7]]) * mask
    )  # ratio outside 1 +- 0.2
    garbage_obs = far + (1 - mask) * -1e4  # observation tokens' stored log-probs: anything, never read
    adv = torch.tensor([[0, 0, 1.0, 1.0, 1.0, 0], [0, -0.5, -0.5, 0, -0.5, -0.5]]) * mask
    ent = torch.tensor([[0, 0, 1.2, 0.8, 0.5, 0], [0, 2.0, 1.5, 0, 0.3, 0.9]]) * mask
    mb = lambda old, ref=None: SimpleNamespace(loss_mask=mask, old_logprobs=old, ref_logprobs=ref)
    base = dict(logp=logp, entropy=None, adv=adv, clip_ratio=0.2)
    return [
        Case("ratios near 1 (no clipping), no KL, no entropy", dict(base, mb=mb(near))),
        Case("ratios outside [0.8, 1.2] on both sides: the pessimistic max clips", dict(base, mb=mb(far))),
        Case(
            "observation tokens whose stored old log-probs are -1e4 (must not matter)",
            dict(base, mb=mb(garbage_obs)),
        ),
        Case(
            "clip-higher: clip_ratio_high=0.5 widens the upper end",
            dict(base, mb=mb(far), clip_ratio_high=0.5),
        ),
        Case(
            "the k3 KL term to a reference (kl_coef=0.1)",
            dict(base, mb=mb(near, ref=near - 0.3 * mask), kl_coef=0.1),
        ),
        Case(
            "a reference far below the policy: the k3 clamps bind",
            dict(base, mb=mb(near, ref=logp - 30 * mask), kl_coef=0.1),
        ),
        Case(
            "a reference far above the policy (100 nats): exp must not overflow, nothing inf or NaN",
            dict(base, mb=mb(near, ref=logp + 100 * mask), kl_coef=0.1),
        ),
        Case(
            "the entropy bonus (entropy_coef=0.01)", dict(base, mb=mb(near), entropy=ent, entropy_coef=0.01)
        ),
        Case(
            "kl_coef > 0 but no reference model (ref_logprobs None): no KL term",
            dict(base, mb=mb(near), kl_coef=0.1),
        ),
    ]


def loss_and_gradient(fn, inputs):
    """The loss and its gradient with respect to every input that carries one in training: logp,
    and the entropy (computed from the same logits) where a case gives one. A loss with the right
    value and the wrong gradient (a detach, a clamp on the wrong side) still trains the wrong thing."""
    logp = inputs["logp"].clone().requires_grad_(True)
    entropy = inputs["entropy"]
    if entropy is not None:
        entropy = entropy.clone().requires_grad_(True)
    out = fn(**dict(inputs, logp=logp, entropy=entropy))
    loss = out[0] if isinstance(out, tuple) else out
    loss.backward()
    found = {"loss": loss.detach(), "gradient of the loss w.r.t. logp": _grad(logp)}
    if entropy is not None:
        found["gradient of the loss w.r.t. entropy"] = _grad(entropy)
    return found


def _grad(x: torch.Tensor) -> torch.Tensor:
    """x's gradient; zeros where the loss never reached x (a detached input has no gradient)."""
    return x.grad if x.grad is not None else torch.zeros_like(x)


# --- problem 4: GAE ------------------------------------------------------------------------------


def gae_cases() -> list[Case]:
    t = lambda *xs: torch.tensor(xs, dtype=torch.float32)
    outcome = lambda n, R: t(*[0.0] * (n - 1), R)
    return [
        Case("one agent token", dict(rewards=t(1.0), values=t(0.3), gamma=1.0, lam=1.0)),
        Case(
            "gamma = lam = 1: every token gets R - V_k",
            dict(rewards=outcome(4, 1.0), values=t(0.1, 0.4, 0.2, 0.6), gamma=1.0, lam=1.0),
        ),
        Case(
            "gamma 0.9, lam 0.95",
            dict(rewards=outcome(5, 1.0), values=t(0.2, 0.3, 0.1, 0.5, 0.4), gamma=0.9, lam=0.95),
        ),
        Case(
            "lam = 0: one-step TD errors",
            dict(rewards=outcome(3, 0.8), values=t(0.5, 0.2, 0.7), gamma=0.9, lam=0.0),
        ),
        Case(
            "a zero critic (step 1 of a run)",
            dict(rewards=outcome(3, 0.925), values=t(0, 0, 0), gamma=0.99, lam=0.95),
        ),
    ]


def advantages_and_returns(fn, inputs):
    adv, ret = fn(**inputs)
    return {"advantages": adv, "returns": ret}


# --- problem 5: the ScalingInter-RL staged schedule ---------------------------------------------


def project_stage_and_horizon(step, rounds, steps_per_stage):
    """The project's staged schedule (`scaling_inter.staged`), asked about one step."""
    from scaling_inter import staged

    schedule = staged(rounds, steps_per_stage)
    return schedule.stage(step), schedule.horizon(step)


def schedule_cases() -> list[Case]:
    plan = [((3, 5), 25, [1, 24, 25, 26, 50, 51, 1000]), ((6, 13, 20), 100, [100, 101, 200, 201, 300, 301])]
    plan += [((4,), 10, [1, 11, 500]), ((2, 4, 8), 1, [1, 2, 3, 4])]
    return [
        Case(f"step {s} of rounds {r}, {S} steps per stage", dict(step=s, rounds=r, steps_per_stage=S))
        for r, S, steps in plan
        for s in steps
    ]


def stage_and_horizon_run(fn, inputs):
    stage, horizon = fn(**inputs)
    return {"stage": stage, "horizon": horizon}


# --- problem 6: GiGPO ---------------------------------------------------------------------------


def gigpo_cases() -> list[Case]:
    red, wall, door = "You see a red ball", "You see a wall", "You see a door"
    one = dict(rewards=[1.0, 0.0, 1.0, 0.0], groups=[0, 0, 0, 0])
    one["anchors"] = [[red, wall], [red, door], [red, wall, door], [red, door, wall]]
    two = dict(rewards=[1.0, 0.0, 0.0, 1.0, 1.0], groups=[0, 0, 1, 1, 1])
    two["anchors"] = [[red, wall], [red], [red, wall], [red, door, wall], [door]]
    spaced = dict(
        rewards=[1.0, 0.0, 0.0],
        groups=[3, 3, 3],
        anchors=[[red], ["you see  a RED ball"], [" you see a red ball "]],
    )
    babyai = dict(  # the rewards of BabyAI, 1 - 0.9 * steps / budget: 0.925 is not exact in float32
        rewards=[0.925] * 8 + [0.7, 0.0, 0.925],
        groups=[0] * 8 + [1, 1, 1],
        anchors=[[red, wall]] * 8 + [[red], [red, door], [red, wall]],
    )
    return [
        Case("one group of four, the first state shared by all, later states by some", one),
        Case(
            "eight equal BabyAI rewards of 0.925 in one group (every turn must get exactly 0) "
            "beside a mixed group",
            babyai,
        ),
        Case("two groups showing the same texts: anchors match within a group only", two),
        Case("step_norm 'mean': no division by the std at either level", dict(two, step_norm="mean")),
        Case("omega 0.5 and gamma 0.8", dict(one, omega=0.5, gamma=0.8)),
        Case(
            "the 'whitespace' normaliser: spacing and case do not split a state",
            dict(spaced, normaliser="whitespace"),
        ),
        Case("the same texts under the 'exact' normaliser: three singleton step groups", spaced),
    ]


# --- problem 7: REINFORCE++ ---------------------------------------------------------------------


def reinforce_pp_cases() -> list[Case]:
    whole = [(0.0, ["0001110000111"]), (1.0, ["0001100011"])]  # one row each: the whole conversation
    per_turn = [(1.0, ["00111", "000111"]), (0.0, ["0011", "00011", "0001"])]  # one row per turn
    cfg = dict(kl_coef=0.0, gamma=1.0, whiten_eps=1e-8)
    return [
        Case("whole-conversation rows of different lengths, no KL", dict(cfg, trajectories=whole)),
        Case(
            "one row per turn: the outcome must reach every turn's tokens", dict(cfg, trajectories=per_turn)
        ),
        Case(
            "gamma 0.9: the return decays from the last agent token",
            dict(cfg, trajectories=per_turn, gamma=0.9),
        ),
        Case(
            "one row per turn, the batch's rows in reverse order (as Batch.select may leave them): "
            "a trajectory's turn order is batch.turn's, not the rows'",
            dict(cfg, trajectories=per_turn, gamma=0.9, rows_reversed=True),
        ),
        Case("the k1 KL in the reward (kl_coef 0.5)", dict(cfg, trajectories=whole + per_turn, kl_coef=0.5)),
        Case(
            "a large whiten_eps (1.0): it goes under the square root, with the variance",
            dict(cfg, trajectories=whole, whiten_eps=1.0),
        ),
        Case(
            "equal rewards of 0.925 (BabyAI's; not exact in float32) and no KL: every advantage exactly 0",
            dict(
                cfg,
                trajectories=[
                    (0.925, ["0001110000111"]),
                    (0.925, ["0001100011"]),
                    (0.925, ["00111", "000111"]),
                ],
            ),
        ),
    ]


def reinforce_pp_batch(trajectories, kl_coef=0.0, rows_reversed=False):
    """A Batch from (reward, rows as mask strings) pairs: per agent token an old log-prob and,
    with kl_coef, a reference log-prob that differs from it; `rows_reversed`: its rows last first."""
    from batch import Row, make_batch

    def row(mask: str, n: int) -> Row:
        m = [int(c) for c in mask]
        return Row(
            ids=[3 + k for k in range(len(m))],
            mask=m,
            logprobs=[-0.1 * (n + k + 1) * x for k, x in enumerate(m)],
        )

    trajs = [
        SimpleNamespace(rows=[row(r, n + t) for t, r in enumerate(rows)], reward=R, group=n)
        for n, (R, rows) in enumerate(trajectories)
    ]
    batch = make_batch(trajs, pad_id=0)
    if kl_coef:
        wobble = torch.sin(torch.arange(batch.loss_mask.numel(), dtype=torch.float32)).view_as(
            batch.loss_mask
        )
        batch.ref_logprobs = (batch.old_logprobs - 0.3 * wobble) * batch.loss_mask
    return batch.select(torch.arange(len(batch) - 1, -1, -1)) if rows_reversed else batch


def returns_and_advantages(fn, inputs):
    batch, cfg = reinforce_pp_handed(inputs).values()
    fn(batch, cfg)
    return {"returns": batch.returns, "advantages": batch.advantages}


def reinforce_pp_handed(inputs) -> dict:
    """The batch and cfg the function is handed, built afresh from the case's inputs."""
    cfg = SimpleNamespace(kl_coef=inputs["kl_coef"], gamma=inputs["gamma"], whiten_eps=inputs["whiten_eps"])
    batch = reinforce_pp_batch(inputs["trajectories"], inputs["kl_coef"], inputs.get("rows_reversed", False))
    return {"batch": batch, "cfg": cfg}


# --- problem 8: the rollout loop ----------------------------------------------------------------


def project_rollout(env, spec, tasks, replies, max_turns):
    """The project's `agent._rollout_chunk`, with the model's replies (`agent._replies`) replaced
    by the script for the duration of the call: the loop, the parsing and the records are its own."""
    import agent

    eot = agent.end_of_turn_id(chat_tokenizer())
    tok = chat_tokenizer()
    policy = SimpleNamespace(context_turns=1, mask_actions=False, use_instruction=True, tokenizer=tok)
    policy.stop_ids, policy.end_of_turn = {eot}, eot
    said = [0] * len(tasks)

    def scripted(policy, live, *rest):
        texts = [replies[i][said[i]] for i in live]
        for i in live:
            said[i] += 1
        return [[eot] for _ in live], [[0.0] for _ in live], [{} for _ in live], texts

    model_replies, agent._replies = agent._replies, scripted
    try:
        return agent._rollout_chunk(policy, env, spec, tasks, list(range(len(tasks))), max_turns, len(tasks))
    finally:
        agent._replies = model_replies


def rollout_cases() -> list[Case]:
    fwd, back = "I go. Action: forward", "Oops. Action: back"
    case = lambda what, tasks, replies, max_turns: Case(
        what, dict(tasks=tasks, replies=replies, max_turns=max_turns)
    )
    return [
        case("one episode that reaches its goal in two turns", [2], [[fwd] * 5], 5),
        case("the horizon cuts an episode: done stays False", [3], [[fwd] * 5], 2),
        case("replies without a valid action are refused", [1], [["I think.", "Action: jump", fwd]], 4),
        case(
            "three episodes in step, ending at different turns",
            [1, 3, 2],
            [[fwd] * 6, [fwd, back, fwd, fwd, fwd, fwd], [back, fwd, fwd, fwd, fwd, fwd]],
            6,
        ),
        case(
            "an error at reset and one at the first step, beside a sound episode",
            [-1, 99, 1],
            [[fwd] * 3] * 3,
            3,
        ),
        case(
            "the goal reached late, at turn 7: score 3, reward 0.3, and 0.3 is below success_at",
            [1],
            [[back, fwd, back, fwd, back, fwd, fwd, fwd]],
            8,
        ),
        case(
            "the goal reached at turn 5: reward exactly success_at (0.5)",
            [1],
            [[back, fwd, back, fwd, fwd]],
            5,
        ),
        case(
            "an environment that sends no score (tasks over 100), beside one that does; one is cut",
            [103, 106, 2],
            [[fwd, back, fwd, fwd, fwd, fwd], [fwd] * 6, [fwd] * 6],
            5,
        ),
        case("an error at the last turn the horizon allows", [97, 3], [[fwd] * 3, [fwd] * 3], 3),
    ]


def rollout_run(fn, inputs):
    from exercises.corridor import SPEC, Corridor

    out = fn(env=Corridor(len(inputs["tasks"])), spec=SPEC, **inputs)
    fields = ("actions", "observations", "messages", "reward", "success", "done", "error", "turns")
    return {f"episode {i}": {k: getattr(t, k, None) for k in fields} for i, t in enumerate(out)}


def rollout_handed(inputs) -> dict:
    """What the rollout is handed besides the case's inputs: the corridor and its spec."""
    from exercises.corridor import SPEC

    spec = SimpleNamespace(**vars(SPEC))
    spec.parse_action = "the text after the last 'Action:', stripped; '' without one"
    return {"env": f"Corridor({len(inputs['tasks'])}), a fresh one (exercises/corridor.py)", "spec": spec}


def per_trajectory(fn, inputs):
    return {f"trajectory {i}, turn": a for i, a in enumerate(fn(**inputs))}


def _problems() -> dict[int, Problem]:
    return {**_loop_problems(), **_advantage_problems(), **_environment_problems()}


def _loop_problems() -> dict[int, Problem]:
    """The problems about the token stream, the loss and the loop: 1, 3, 5, 8."""
    import algorithm

    return {
        1: Problem(
            "the loss mask of a multi-turn conversation",
            "problem_1_loss_mask",
            "episode_row",
            "agent.py, WholeConversation",
            project_episode_row,
            loss_mask_cases,
            episode_row_run,
            hidden={"tokenizer": "a small ChatML tokenizer, the tiny policy's kind (cases.chat_tokenizer)"},
        ),
        3: Problem(
            "the clipped surrogate with the k3 KL",
            "problem_3_clipped_loss",
            "clipped_policy_loss",
            "algorithm.py, clipped_policy_loss",
            algorithm.clipped_policy_loss,
            clipped_loss_cases,
            loss_and_gradient,
        ),
        5: Problem(
            "the ScalingInter-RL stage of a step",
            "problem_5_schedule",
            "stage_and_horizon",
            "scaling_inter.py, Schedule.stage / Schedule.horizon",
            project_stage_and_horizon,
            schedule_cases,
            stage_and_horizon_run,
        ),
        8: Problem(
            "the multi-turn rollout loop",
            "problem_8_rollout",
            "rollout",
            "agent.py, _rollout_chunk",
            project_rollout,
            rollout_cases,
            rollout_run,
            rollout_handed,
        ),
    }


def _advantage_problems() -> dict[int, Problem]:
    """The problems about advantages: 2, 4, 6, 7."""
    import gigpo
    import grpo
    import ppo
    import reinforce_pp

    return {
        2: Problem(
            "GRPO's group advantages",
            "problem_2_grpo",
            "group_advantages",
            "grpo.py, group_advantages",
            grpo.group_advantages,
            grpo_cases,
        ),
        4: Problem(
            "PPO's GAE", "problem_4_gae", "gae", "ppo.py, gae", ppo.gae, gae_cases, advantages_and_returns
        ),
        6: Problem(
            "GiGPO's anchor-state advantages",
            "problem_6_gigpo",
            "gigpo_advantages",
            "gigpo.py, gigpo_advantages",
            gigpo.gigpo_advantages,
            gigpo_cases,
            per_trajectory,
        ),
        7: Problem(
            "REINFORCE++'s advantages",
            "problem_7_reinforce_pp",
            "advantages",
            "reinforce_pp.py, advantages",
            reinforce_pp.advantages,
            reinforce_pp_cases,
            returns_and_advantages,
            reinforce_pp_handed,
        ),
    }


def _environment_problems() -> dict[int, Problem]:
    """Problem 10, an environment of the student's own: its cases judge properties (env_cases.py)."""
    from exercises import env_cases, find_it

    return {
        10: Problem(
            "your own environment, served two ways",
            "problem_10_environment",
            "Game",
            "servers/babyai.py, BabyAIText and its app",
            find_it,
            functools.partial(env_cases.env_cases, Case),  # (handed Case: env_cases.py imports nothing here)
            env_cases.judge,
            whole=True,
        )
    }


PROBLEMS = dict(sorted(_problems().items()))
