"""train.py and eval.py on any OpenEnv environment (`--env openenv --url ws://host:port`,
envs/openenv.py): a small text environment, docs/own-environment.md's OpenEnv template, served by
OpenEnv's own server code (`create_fastapi_app`), with a task API of its own. The observation becomes
the user's message, the reply the action's one text field (named by the environment's schema, here
`message`), reward and done come from the environment, tasks from its task API; and the training run
never imports the `openenv` package."""

import json
import os
import subprocess
import sys
import time

import pytest
import requests

import eval as evaluation
from envs import env_spec, free_port

pytest.importorskip(
    "openenv.core", reason="OpenEnv's server: pip install --no-deps -r requirements-openenv.txt"
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def template(heading: str) -> str:
    """A template of docs/own-environment.md, as a student copies it."""
    page = open(os.path.join(ROOT, "docs", "own-environment.md")).read()
    return page.split(f"### {heading}\n", 1)[1].split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"


def serve(path, *args) -> subprocess.Popen:
    """`python path args` (with the project importable), once it answers /health."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    server = subprocess.Popen([sys.executable, str(path), *args], env=env)
    port = args[-1]
    for _ in range(300):
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except requests.RequestException:
            time.sleep(0.1)
    server.terminate()
    raise RuntimeError(f"{path} did not start")


def test_the_templates_are_under_100_lines():
    for heading in ("Template: an OpenEnv environment", "Template: a server of this project"):
        assert len(template(heading).splitlines()) < 100


@pytest.fixture(scope="module")
def colours(tmp_path_factory):
    """docs/own-environment.md's OpenEnv template on OpenEnv's own server, at ws://127.0.0.1:PORT."""
    path = tmp_path_factory.mktemp("colours") / "colours.py"
    path.write_text(template("Template: an OpenEnv environment"))
    port = free_port()
    server = serve(path, str(port))
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_spec_comes_from_the_environments_schema_and_task_api(colours):
    spec = env_spec("openenv", colours, "train", "test")
    assert spec.splits == {"train": list(range(12)), "test": list(range(12, 18))}  # numbered in turn
    assert spec.instruction  # /metadata's description
    with pytest.raises(ValueError, match="has the splits train, test"):
        env_spec("openenv", colours, "val")


def test_eval_on_an_openenv_environment(colours, tiny_path, tmp_path):
    out = str(tmp_path / "eval")
    summary = evaluation.main(
        ["--env", "openenv", "--url", colours, "--model", tiny_path, "--split", "test", "--out", out]
    )
    assert summary["n_tasks"] == 6 and 0.0 <= summary["success_rate"] <= 1.0
    rows = [json.loads(line) for line in open(os.path.join(out, "trajectories.jsonl"))]
    assert sorted(r["task"] for r in rows) == list(range(12, 18))
    for r in rows:  # the observation is the user's message; one turn, rewarded by the environment
        goal = ["red", "green", "blue"][(r["task"] - 12) % 3]
        assert r["observations"][0] == f"Say the colour {goal}." and r["turns"] == 1 and r["done"]
        assert r["success"] == (r["actions"][0] == f"say {goal}") == (sum(r["rewards"]) == 1.0)


def test_train_on_an_openenv_environment_without_importing_openenv(colours, tiny_path, tmp_path):
    out = tmp_path / "run"
    flags = [
        "--env",
        "openenv",
        "--url",
        colours,
        "--model",
        tiny_path,
        "--steps",
        "2",
        "--tasks-per-step",
        "2",
    ]
    flags += ["--group-size", "4", "--minibatch-size", "8", "--eval-episodes", "3", "--rounds", "1,2"]
    flags += ["--steps-per-stage", "1", "--out", str(out), "--threads", "1"]
    script = os.path.join(ROOT, "train.py")
    launch = (
        f"import runpy, sys; sys.argv = [{script!r}] + {flags!r}; "
        f"runpy.run_path({script!r}, run_name='__main__'); "
        "print('IMPORTED', sorted(m for m in sys.modules if m.split('.')[0] == 'openenv'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", launch], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "IMPORTED []" in done.stdout
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2] and all(r["charts/env_errors"] == 0 for r in rows)
    summary = json.load(open(out / "summary.json"))
    assert summary["config"]["env"] == "openenv" and "success_rate" in summary["eval_after"]


def test_eval_through_openenv_on_babyai_plays_the_same_episodes_as_through_this_projects_dialect(
    start_server, tiny_path, tmp_path
):
    """This project's BabyAI server, spoken to as any OpenEnv environment: the same instruction
    (its /metadata), the same test tasks (its task API), the same observations, actions and scores
    as eval.py --env babyai, seed for seed."""
    url = start_server("servers.babyai").url
    runs = {}
    for env, address in (("babyai", url), ("openenv", url.replace("http", "ws"))):
        out = str(tmp_path / env)
        flags = ["--env", env, "--url", address, "--model", tiny_path, "--split", "test", "--limit", "8"]
        evaluation.main([*flags, "--horizon", "5", "--out", out])
        runs[env] = [json.loads(line) for line in open(os.path.join(out, "trajectories.jsonl"))]
    ours, theirs = runs["babyai"], runs["openenv"]
    assert len(ours) == len(theirs) == 8  # (the task ids differ: openenv numbers the splits in turn)
    for a, b in zip(ours, theirs):
        assert (a["observations"], a["actions"], a["rewards"], a["score"], a["success"]) == (
            b["observations"],
            b["actions"],
            b["rewards"],
            b["score"],
            b["success"],
        )
        assert a["conversation"][0] == b["conversation"][0]  # the system prompt: the instruction


def test_the_server_template_trains_through_openenv_before_it_has_an_envs_entry(tmp_path, tiny_path):
    """docs/own-environment.md's server of this project, served as written: with no entry in
    envs/tasks.py yet, its OpenEnv dialect has no task API, so its tasks are seeds."""
    path = tmp_path / "guess.py"
    path.write_text(template("Template: a server of this project"))
    port = str(free_port())
    server = serve(path, "--port", port)
    try:
        url = f"ws://127.0.0.1:{port}"
        assert env_spec("openenv", url).splits["test"][:2] == [10_000, 10_001]
        out = str(tmp_path / "eval")
        summary = evaluation.main(
            ["--env", "openenv", "--url", url, "--model", tiny_path, "--limit", "4", "--out", out]
        )
        assert summary["n_tasks"] == 4
        rows = [json.loads(line) for line in open(os.path.join(out, "trajectories.jsonl"))]
        for r in rows:  # a guess per turn, told higher or lower, over at most five turns
            assert r["observations"][0].startswith("I picked a number") and 1 <= r["turns"] <= 5
            assert all(a.startswith("guess ") for a in r["actions"])
            assert r["success"] == (r["rewards"][-1] == 1.0) and (r["done"] or r["turns"] == 5)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_env_openenv_needs_its_address_and_takes_a_websocket_url():
    from train import parse_args

    with pytest.raises(SystemExit):  # one line: --env openenv: give the OpenEnv environment's address
        parse_args(["--env", "openenv"])
    assert parse_args(["--env", "openenv", "--url", "ws://127.0.0.1:8000"]).url == "ws://127.0.0.1:8000"


@pytest.mark.parametrize(
    "change, failed",
    [
        (("", ""), None),  # the template as written passes all four
        (("TASKS[split][index], 0", "TASKS[split][0], 0"), "tasks differ"),  # a reset that ignores the task
        (("done=True", "done=False"), "episodes end"),  # a done that never comes
        (("reward=1.0 if right", "reward=5.0 if right"), "rewards in range"),  # a reward outside [0, 1]
    ],
)
def test_the_checker_tells_a_broken_environment_from_a_working_one(change, failed, tmp_path, capsys):
    from envs import check

    source = template("Template: an OpenEnv environment")
    assert change[0] in source
    path = tmp_path / "colours.py"
    path.write_text(source.replace(*change))
    port = str(free_port())
    server = serve(path, port)
    try:
        code = check.main(["--url", f"ws://127.0.0.1:{port}", "--max-steps", "20"])
    finally:
        server.terminate()
        server.wait(timeout=30)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and code == (0 if failed is None else 1), lines
    assert [line for line in lines if line.startswith("FAIL")] == [x for x in lines if failed and failed in x]


def test_the_checker_passes_this_projects_babyai_through_its_openenv_dialect(start_server, capsys):
    from envs import check

    assert check.main(["--url", start_server("servers.babyai").url.replace("http", "ws")]) == 0


def test_an_environment_at_its_session_cap_says_so_in_the_episodes_error(tmp_path):
    """OpenEnv's server closes a session it has no room for right after sending "Server at
    capacity": the pool reads that message off the closed socket and names the fix (before: the
    episode's error was the socket's "received 1000 (OK); then sent 1000 (OK)")."""
    from envs.openenv import OpenEnvPool

    path = tmp_path / "colours.py"
    path.write_text(
        template("Template: an OpenEnv environment").replace(
            "max_concurrent_envs=64", "max_concurrent_envs=1"
        )
    )
    port = free_port()
    server = serve(path, str(port))
    pool = OpenEnvPool(f"ws://127.0.0.1:{port}", size=2)
    try:
        first = pool.reset([0], [0])[0]
        second = pool.reset([1], [1])[0]
    finally:
        pool.close()
        server.terminate()
        server.wait(timeout=30)
    assert "error" not in first and first["observation"] == "Say the colour red."
    assert second["done"] and "Server at capacity: 1/1 sessions active" in second["error"]
    assert "this pool opened 2 sessions: fewer episodes at once" in second["error"]


def test_an_observations_own_error_field_is_a_wrong_action_not_an_environment_failure(
    tmp_path, tiny_path, capsys
):
    """BrowserGym's observation has an `error` field: what was wrong with the last action. Only the
    protocol's error (the server's {"type": "error"}, a broken session) fails an episode; the field
    rides along as `observation_error` (before: the episode was an environment error, which the
    trainer and eval.py leave out, and the checker said the environment failed)."""
    from envs import check
    from envs.openenv import OpenEnvPool

    source = template("Template: an OpenEnv environment")
    source = source.replace(
        "    available_actions: list[str] = []\n",
        "    available_actions: list[str] = []\n"
        '    error: str = ""  # as BrowserGym\'s: what was wrong with the last action\n',
    ).replace(
        'Seen(prompt="Right." if right else "Wrong.",',
        'Seen(prompt="Right." if right else "Wrong.", error="" if right else "not the colour asked for",',
    )
    assert "error: str" in source and 'error=""' in source
    path = tmp_path / "colours.py"
    path.write_text(source)
    port = free_port()
    server = serve(path, str(port))
    url = f"ws://127.0.0.1:{port}"
    try:
        pool = OpenEnvPool(url, size=2)
        try:
            pool.reset([0, 1], [0, 1])  # red, then green
            right, wrong = pool.step([0, 1], ["say red", "say red"])
        finally:
            pool.close()
        code = check.main(["--url", url, "--max-steps", "20"])
        summary = evaluation.main(
            ["--env", "openenv", "--url", url, "--model", tiny_path, "--split", "test"]
            + ["--out", str(tmp_path / "eval")]
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert "error" not in right and "error" not in wrong
    assert wrong["observation_error"] == "not the colour asked for" and wrong["done"] and wrong["reward"] == 0
    assert code == 0, capsys.readouterr().out
    assert summary["errors"] == 0 and summary["n_tasks"] == 6  # every episode counts, the wrong ones too


def test_train_task_ids_in_an_openenv_environments_test_split_are_refused(colours, tiny_path, tmp_path):
    """The test split's tasks are 12-17 (the server's task API): training on them is refused at
    start-up, once the server has said its splits (before: accepted)."""
    from train import parse_args, train

    flags = ["--env", "openenv", "--url", colours, "--model", tiny_path, "--out", str(tmp_path)]
    with pytest.raises(ValueError, match=r"--train-task-ids: \[12, 13\] are in the held-out split test"):
        train(parse_args([*flags, "--train-task-ids", "4-11,12,13", "--threads", "1"]))


@pytest.mark.parametrize("lists_tasks", [False, True])
def test_an_environment_with_splits_but_no_num_tasks_is_counted_by_its_listing_or_named(
    lists_tasks, tmp_path
):
    """OpenEnv answers POST /<name>/num_tasks with 501 when the environment lacks `num_tasks`: the
    splits are then counted by `list_tasks`, and without that either describe() says what is
    missing (before: a bare KeyError('num_tasks'))."""
    from envs.openenv import describe

    source = template("Template: an OpenEnv environment")
    new = "    def list_tasks(self, split):\n        return TASKS[split]\n" if lists_tasks else ""
    source = source.replace("    def num_tasks(self, split):\n        return len(TASKS[split])\n", new)
    assert "num_tasks" not in source
    path = tmp_path / "colours.py"
    path.write_text(source)
    port = free_port()
    server = serve(path, str(port))
    try:
        if lists_tasks:
            assert describe(f"ws://127.0.0.1:{port}").splits == (("train", 12), ("test", 6))
        else:
            with pytest.raises(ValueError, match="lists the split 'train' but does not say how many tasks"):
                describe(f"ws://127.0.0.1:{port}")
    finally:
        server.terminate()
        server.wait(timeout=30)
