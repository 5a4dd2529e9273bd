"""The exercises check what they claim: the project's own function passes every problem's check,
the untouched stub fails it, and so does every mistake in exercises/mistakes/ (a file a problem),
each with a message that names the case and what was expected.

Where it sits: calls `exercises.check.failures` as a function (no subprocess, no training); the
whole file runs in about half a minute, most of it problem 10's servers (in process, with
FastAPI's TestClient). `--train` is tested with `train.train` replaced, for its wiring only.
"""

import ast
import dataclasses
import functools
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from exercises.cases import PROBLEMS
from exercises.check import NOT_CHECKED, NOT_WRITTEN, failures, main, student_function, train_with
from exercises.mistakes import MISTAKES

ROOT = Path(__file__).resolve().parent.parent
ALL_MISTAKES = [(n, name) for n, found in MISTAKES.items() for name in found]
NO_OPENENV = importlib.util.find_spec("openenv") is None
NEEDS_OPENENV = "needs the openenv package (pip install --no-deps -r requirements-openenv.txt)"
# problem 10's reference serves its environment through OpenEnv's own server code
WITH_OPENENV = [
    pytest.param(n, marks=pytest.mark.skipif(n == 10 and NO_OPENENV, reason=NEEDS_OPENENV))
    for n in sorted(PROBLEMS)
]


@functools.cache
def mistake_failures(n: int, name: str) -> list[str]:
    """The check's messages on a listed mistake, once per session (problem 10's serve apps)."""
    return failures(n, MISTAKES[n][name])


@pytest.mark.parametrize("n", WITH_OPENENV)
def test_the_projects_own_function_passes_its_check(n):
    assert failures(n, PROBLEMS[n].reference) == []


@pytest.mark.parametrize("n", sorted(PROBLEMS))
def test_the_untouched_stub_fails_its_check_and_says_it_is_not_written(n):
    found = failures(n)
    assert len(found) == 1 and NOT_WRITTEN in found[0] and PROBLEMS[n].name in found[0]


@pytest.mark.parametrize("n,name", ALL_MISTAKES, ids=[f"{n}-{name}" for n, name in ALL_MISTAKES])
def test_every_listed_mistake_fails_its_check_with_the_case_and_what_was_expected(n, name):
    found = mistake_failures(n, name)
    assert found, f"problem {n}: the mistake {name!r} passes the check"
    if NOT_CHECKED in found[0]:  # caught only by a case that needs a package not installed
        pytest.skip(found[0][found[0].index(NOT_CHECKED) :])
    assert found[0].startswith("case ") and ("expected" in found[0] or "raised" in found[0])
    assert "inputs:" in found[0] and "...]" not in found[0]  # nothing cut, the inputs included


def test_a_case_whose_package_is_missing_fails_by_name_and_never_passes(monkeypatch):
    """Without openenv, problem 10's two cases on OpenEnv's own server are not run on either side
    (where both would fail alike and so agree): each is a failure that names the package and how to
    install it, and the check ends in its summary, not a traceback."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "openenv" else real(name, *a)
    )
    found = failures(10, PROBLEMS[10].reference)
    assert len(found) == 2 and all(NOT_CHECKED in m and "openenv package" in m for m in found)
    assert all("requirements-openenv.txt" in m for m in found)


def test_a_failing_case_shows_its_inputs_in_full():
    """Problem 3's sixth case is about a reference far below the policy: its ref_logprobs must be in
    the message whole, not cut."""
    from exercises.mistakes.problem_3 import _loss

    def unclamped(logp, entropy, mb, adv, clip_ratio, kl_coef=0.0, **rest):
        loss, _ = _loss(logp, entropy, mb, adv, clip_ratio, **rest)
        if mb.ref_logprobs is not None and kl_coef:
            d = (mb.ref_logprobs - logp) * mb.loss_mask
            loss = loss + kl_coef * masked_mean(d.exp() - d - 1, mb.loss_mask)
        return loss, {}

    from algorithm import masked_mean

    found = failures(3, unclamped)
    assert found[0].startswith("case 6 ")
    inputs = found[0].split("inputs:")[1]
    assert "ref_logprobs=tensor([[0, 0, -30.5" in inputs and "...]" not in inputs


def test_a_failing_case_shows_every_input_the_function_reads():
    """Problem 1's message shows first_messages; problem 7's KL case the old and reference
    log-probs of the batch it builds; problem 8's the spec and every message's content whole."""
    one = failures(1, MISTAKES[1]["end-of-turn token not trained"])[0].split("inputs:")[1]
    assert "first_messages=[{'role': 'system', 'content': 'You are an agent.'}" in one
    kl = next(m for m in failures(7, MISTAKES[7]["the KL added, not subtracted"]) if "k1 KL" in m)
    shown = kl.split("inputs:")[1]
    assert "batch.old_logprobs=tensor([[" in shown and "batch.ref_logprobs=tensor([[" in shown
    assert "batch.loss_mask=" in shown and "batch.traj=" in shown and "cfg.kl_coef=0.5" in shown

    def last_message_retold(**inputs):
        trajs = PROBLEMS[8].reference(**inputs)
        for t in trajs:
            t.messages[-1] = dict(t.messages[-1], content="I said: " + t.messages[-1]["content"])
        return trajs

    eight = failures(8, last_message_retold)[0]
    system = "Walk to the goal. Reply with forward or back, after 'Action:'."
    compared = eight.split("inputs:")[0]
    assert "messages" in compared and compared.count(system) == 2  # expected and got, whole
    assert "spec.success_at=0.5" in eight


def test_a_loss_check_compares_the_gradient_of_every_input_that_carries_one():
    """The entropy comes from the same logits as logp: a detached entropy bonus has the right loss
    and the right gradient with respect to logp, and is caught by its gradient with respect to
    entropy."""
    found = failures(3, MISTAKES[3]["the entropy detached"])
    assert len(found) == 1 and "w.r.t. entropy" in found[0]


@pytest.mark.parametrize(
    "n,name",
    [(2, "statistics in float32"), (6, "statistics in float32 at both levels"), (7, "whitened in float32")],
)
def test_an_equality_case_is_built_from_values_float32_does_not_hold_exactly(n, name):
    """Where the contract asks for float64 (an exact 0 for equal values), the case that says so
    uses BabyAI's 0.925, which float32 rounds, so statistics taken in float32 fail it."""
    found = failures(n, MISTAKES[n][name])
    assert found and "0.925" in found[0].split(":")[0]


def test_the_corridor_refuses_a_step_for_an_episode_not_in_play():
    """As a real server does: after a failed reset, after the episode ended, after an error."""
    from exercises.corridor import Corridor

    env = Corridor(3)
    env.reset([0, 1, 2], [-1, 1, 99])
    with pytest.raises(RuntimeError, match="refuses to step slot 0"):
        env.step([0], ["forward"])
    done, error = env.step([1, 2], ["forward", "forward"])
    assert done["done"] and error["error"]
    for slot in (1, 2):
        with pytest.raises(RuntimeError, match=f"refuses to step slot {slot}"):
            env.step([slot], ["forward"])
    env.reset([1], [1])  # a new episode in the slot is in play again
    assert env.step([1], ["forward"])[0]["done"]


@pytest.mark.parametrize(
    "call,refused",
    [
        (lambda env: env.reset([3], [1]), "slot 3"),
        (lambda env: env.reset([0], ["1"]), "task '1'"),
        (lambda env: env.step([0, 0], ["forward", "back"]), "at most once"),
        (lambda env: env.step([0], [None]), "action None"),
    ],
)
def test_the_corridor_refuses_a_call_a_strict_server_or_the_pool_refuses(call, refused):
    """A slot outside the pool, a task id that is not an integer, a slot twice in one call, an
    action that is not a string."""
    from exercises.corridor import Corridor

    env = Corridor(3)
    env.reset([0], [2])
    with pytest.raises(RuntimeError, match=refused):
        call(env)


def test_problem_8_catches_the_score_and_success_mistakes_on_the_cases_made_for_them():
    assert failures(8, MISTAKES[8]["the score from the last reward"])[0].startswith("case 8 ")
    found = failures(8, MISTAKES[8]["success from the score, not the reward"])
    assert any(m.startswith("case 6 ") for m in found)


def test_the_course_says_how_many_cases_a_check_runs_and_how_many_failing_ones_it_prints():
    from exercises.check import MAX_SHOWN

    text = " ".join((ROOT / "docs" / "course.md").read_text().split())
    counts = {n: len(p.cases()) for n, p in PROBLEMS.items()}
    others = [c for n, c in counts.items() if n != 5]
    assert f"({min(others)} to {max(others)} per problem; problem 5's {counts[5]} are" in text
    assert f"prints the first {MAX_SHOWN} cases that differ" in text


def test_every_problem_keeps_at_least_two_mistakes_beside_it():
    assert sorted(MISTAKES) == sorted(PROBLEMS)
    assert all(len(found) >= 2 for found in MISTAKES.values())


def test_a_problems_mistakes_file_shows_no_other_problems_mistakes():
    """Reading problem n's mistakes gives nothing away about another problem: its file imports no
    other problem's file and names no other problem."""
    folder = ROOT / "exercises" / "mistakes"
    for path in folder.glob("problem_*.py"):
        n = int(path.stem.split("_")[1])
        text = path.read_text()
        others = {int(m) for m in re.findall(r"[Pp]roblem[ _](\d+)", text)} - {n}
        assert not others, f"{path.name} names problem(s) {others}"
        tree = ast.parse(text)
        names = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not any(x.startswith("exercises.mistakes") for x in names), path.name


def test_problem_7_catches_a_trajectorys_rows_taken_in_batch_order():
    """make_batch orders a trajectory's rows by turn, so only a batch whose rows are reordered (as
    Batch.select may leave them) can tell batch order from turn order: that case catches it."""
    found = failures(7, MISTAKES[7]["a trajectory's rows in batch order, not turn order"])
    assert len(found) == 1 and "reverse order" in found[0] and "rows_reversed=True" in found[0]


def test_every_wrong_diagnosis_of_problem_9_is_refused_on_the_run_that_holds_its_fault(capsys):
    from exercises import faults
    from exercises.mistakes.problem_9 import CONFUSIONS

    assert set(CONFUSIONS) == {faults.planted(run) for run in faults.RUNS}
    assert all(len(wrong) >= 3 and set(wrong) < set(faults.DIAGNOSES) for wrong in CONFUSIONS.values())
    for run in faults.RUNS:
        for wrong in CONFUSIONS[faults.planted(run)]:
            assert faults.main(["answer", run, wrong]) == 1
    assert "right" not in capsys.readouterr().out.replace("not this one", "")


@pytest.mark.parametrize("n", sorted(PROBLEMS))
def test_a_function_that_returns_nothing_fails_with_a_message_not_a_crash(n):
    found = failures(n, lambda *args, **kwargs: None)
    assert found and all(m.startswith("case ") for m in found)


@pytest.mark.parametrize("n", sorted(PROBLEMS))
def test_each_stub_states_its_task_the_function_it_mirrors_and_what_is_left_to_decide(n):
    problem = PROBLEMS[n]
    path = ROOT / "exercises" / f"{problem.module}.py"
    doc = ast.get_docstring(ast.parse(path.read_text()))
    project_file = problem.mirrors.split(",")[0]
    assert project_file in doc and (ROOT / project_file).exists()
    assert "Task:" in doc and f"python -m exercises.check {n}" in doc
    assert "after your check passes" in " ".join(doc.split()), (
        "the stub must say to read the project's function after"
    )
    assert "\nDecide" in doc, "a problem leaves the student something to decide, and says what"
    fn = student_function(n)
    assert (fn.__name__ if problem.whole else fn.__module__) == f"exercises.{problem.module}"


def test_the_command_line_exits_0_on_the_solution_and_1_on_the_stub(capsys):
    assert main(["5", "--solution"]) == 0
    assert "PASS: 20 of 20" in capsys.readouterr().out
    assert main(["5"]) == 1
    assert "FAIL: 0 of 20" in capsys.readouterr().out
    assert main(["2", "--train"]) == 1  # the stub: nothing to train with, and no training started
    assert "write the function first" in capsys.readouterr().out


def test_train_plugs_the_function_into_grpo_and_puts_the_project_back(monkeypatch):
    """`--train` runs train.train with GRPO's advantages computed by the function given (here a
    marked copy of the project's) and leaves algos.ALGOS as it was."""
    import grpo
    import train
    from algos import ALGOS

    calls = []

    def marked(rewards, groups, eps=1e-6, use_std=True):
        calls.append(eps)
        return grpo.group_advantages(rewards, groups, eps, use_std)

    def fake_train(cfg):
        batch = type("B", (), {})()
        batch.rewards, batch.groups = grpo.torch.tensor([1.0, 0.0]), grpo.torch.tensor([0, 0])
        batch.traj, batch.loss_mask = grpo.torch.tensor([0, 1]), grpo.torch.ones(2, 3)
        ALGOS[cfg.algo].advantages(batch, cfg)
        return {"adv": batch.advantages, "steps": cfg.steps}

    monkeypatch.setattr(train, "train", fake_train)
    project = ALGOS["grpo"]
    out = train_with(marked, steps=3, eval_episodes=0, out="/tmp/unused")
    assert calls == [train.Config().group_std_eps] and out["steps"] == 3
    assert out["adv"][0].tolist() == pytest.approx([0.7071, 0.7071, 0.7071], abs=1e-4)
    assert ALGOS["grpo"] is project and dataclasses.replace(project) == project


def test_the_exercises_package_imports_nothing_into_the_project():
    """The project never imports exercises/ (it sits beside the house, not in it)."""
    house = [p for p in ROOT.glob("*/*.py") if p.parent.name not in ("exercises", "tests")]
    for path in [*ROOT.glob("*.py"), *house]:  # the root, its packages, machinery/, servers/, benchmarks/
        tree = ast.parse(path.read_text())
        names = [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
        names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not any(n.split(".")[0] == "exercises" for n in names), path.name
    assert importlib.import_module("exercises").__doc__


# --- problem 10: your own environment ------------------------------------------------------------


@pytest.mark.parametrize(
    "name,case",
    [
        ("the task id ignored", 4),
        ("twenty puzzles, indexed by the task id", 1),
        ("the task drawn at random", 3),
        ("the step count kept across resets", 3),
        ("no step limit", 5),
        ("done forgotten on success", 2),
        ("a penalty for a wrong action", 6),
        ("the score as the reward", 2),
        ("a non-action costs no step", 5),
        ("a reward for each wrong guess", 6),
        ("a step after done keeps playing", 7),
        ("the answer in the observation", 8),
        ("the OpenEnv wrapper reads the task from index", 10),
        ("one Game for every episode", 9),
        ("sixty-four OpenEnv sessions", 11),
        ("a project server without OpenEnv's dialect", 9),
    ],
)
def test_problem_10_tells_each_broken_environment_by_the_property_it_breaks(name, case):
    """A reset that ignores the task id, a done that never comes (for text that is no action too), a
    reward outside its range or paid for failing, a step after done that plays on, the answer
    written in an observation, a server that loses the task id, shares one Game or holds too few
    sessions: each fails the case about it first, and the message holds the episode (or the
    server's answer) that shows it."""
    if NO_OPENENV and case in (10, 11):  # (a server of this project speaks OpenEnv without the package)
        pytest.skip(NEEDS_OPENENV)
    found = mistake_failures(10, name)
    assert found[0].startswith(f"case {case} ") and "got 'the property holds'" not in found[0]
    shown = found[0].split("inputs:")[0]
    assert "[(" in shown or "answered" in shown or "raised" in shown or "before the expert's" in shown


def test_problem_10s_worked_example_is_the_reference_game():
    """The stub's worked example (task 5 of a game of boxes) is what exercises/find_it.py answers."""
    from exercises.find_it import Game

    stub = (ROOT / "exercises" / "problem_10_environment.py").read_text()
    doc = " ".join(ast.get_docstring(ast.parse(stub)).split())
    game = Game()
    first = game.reset(5)
    assert f'reset(5) -> {{"observation": "{first["observation"]}", "reward": 0.0, "done": False,' in doc
    assert f'"available_actions": ["{first["available_actions"][0]}", ...]}}' in doc
    action = game.expert()["action"]
    assert f'expert() -> {{"action": "{action}"}}' in doc
    answer = game.step(action)
    assert (
        f'step("{action}") -> {{"observation": "{answer["observation"]}", "reward": 1.0, "done": True' in doc
    )


def test_the_reference_environment_trains_through_its_own_openenv_server_and_this_projects(tmp_path):
    """find_it.py served both ways gives the trainer the same first observation for a task; the
    project's server also answers POST /expert (for SFT)."""
    pytest.importorskip("openenv.core")
    from fastapi.testclient import TestClient

    from exercises import find_it

    with TestClient(find_it.project_app()) as client:
        i = client.post("/create", json={}).json()["id"]
        first = client.post("/reset", json={"id": i, "data_idx": 6}).json()
        assert client.post("/expert", json={"id": i}).json()["action"] == "open the red box"
    with TestClient(find_it.openenv_app()) as client, client.websocket_connect("/ws") as ws:
        ws.send_json({"type": "reset", "data": {"seed": 6}})
        assert ws.receive_json()["data"]["observation"]["prompt"] == first["observation"]


# --- problem 7: the failure-modes runs ----------------------------------------------------------


def test_each_mystery_run_holds_a_different_planted_fault_and_the_answer_check_knows_it(capsys):
    from exercises import faults

    found = [faults.planted(run) for run in faults.RUNS]
    assert len(set(found)) == len(faults.RUNS) and set(found) < set(faults.DIAGNOSES)
    for run, diagnosis in zip(faults.RUNS, found):
        assert faults.main(["answer", run, diagnosis]) == 0
        wrong = next(d for d in faults.DIAGNOSES if d != diagnosis)
        assert faults.main(["answer", run, wrong]) == 1
    assert "not this one" in capsys.readouterr().out


@pytest.mark.parametrize("fault", ["flipped", "zeroed", "misaligned", "greedy"])
def test_a_planted_fault_changes_what_it_says_and_the_loop_is_put_back(fault, monkeypatch):
    import torch

    import grpo
    import train
    from algos import ALGOS
    from exercises import faults

    learner = type("L", (), {})()
    learner.policy = type("P", (), {"temperature": 1.0})()
    monkeypatch.setattr(train, "load_learner", lambda *a, **k: learner)
    project_algo, project_load = ALGOS["grpo"], train.load_learner

    def batch():
        b = type("B", (), {})()
        b.rewards, b.groups = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 0, 1, 1, 1])
        b.traj, b.loss_mask = torch.arange(6), torch.ones(6, 2)
        return b

    right, cfg = batch(), train.Config()
    grpo.advantages(right, cfg)
    with faults.plant(fault):
        planted = batch()
        ALGOS["grpo"].advantages(planted, cfg)
        assert train.load_learner().policy.temperature == (0.0 if fault == "greedy" else 1.0)
    expected = {
        "flipped": -right.advantages,
        "zeroed": right.advantages * 0,
        "misaligned": grpo.broadcast(grpo.group_advantages(batch().rewards.roll(1), batch().groups), right),
        "greedy": right.advantages,
    }[fault]
    assert torch.equal(planted.advantages, expected)
    assert ALGOS["grpo"] is project_algo and train.load_learner is project_load


def test_a_mystery_run_trains_with_its_fault_planted_and_a_default_configuration(monkeypatch):
    import train
    from algos import ALGOS
    from exercises import faults

    seen = {}

    def fake_train(cfg):
        seen["plant active"] = ALGOS["grpo"] is not project
        seen["cfg"] = cfg
        return {}

    project = ALGOS["grpo"]
    monkeypatch.setattr(train, "train", fake_train)
    faults.run("A")
    assert seen["plant active"] and ALGOS["grpo"] is project
    cfg, default = seen["cfg"], train.Config()
    assert cfg.out == "runs/fault_A" and (cfg.temperature, cfg.lr, cfg.algo) == (
        default.temperature,
        default.lr,
        "grpo",
    )


def test_a_project_server_named_nowhere_in_envs_tasks_says_it_serves_a_generic_instruction(caplog):
    """`--env openenv` sends /metadata's description as the agent's instruction: a server of this
    project that envs/tasks.py does not name, given none, warns that it serves a generic one;
    find_it.py's server gives its own."""
    from fastapi.testclient import TestClient

    from exercises import find_it
    from servers.common import build_app
    from servers.openenv import add_openenv

    with caplog.at_level("WARNING", logger="servers"):
        add_openenv(build_app("Nameless", find_it.Game, inline_calls=True), "nameless")
    assert "'nameless' is named nowhere in envs/tasks.py" in caplog.text and "instruction=" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="servers"), TestClient(find_it.project_app()) as client:
        assert client.get("/metadata").json()["description"] == find_it.INSTRUCTION
    assert "named nowhere" not in caplog.text


def test_grading_a_class_reads_each_students_file_as_the_checker_does(tmp_path):
    """exercises/grade.py checks a student's file by path: a stub left as it is reads "not
    written", a file whose function is right agrees on every case."""
    from exercises.grade import check_file

    stub = ROOT / "exercises" / "problem_2_grpo.py"
    right = tmp_path / "problem_2_grpo.py"
    right.write_text("from grpo import group_advantages  # (the project's: every case agrees)\n")
    assert check_file(2, str(stub)) == {"not written": True}
    assert check_file(2, str(right)) == {"agreed": 8, "cases": 8}
