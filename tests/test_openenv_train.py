"""train.py and eval.py on any OpenEnv environment (`--env openenv --url ws://host:port`,
envs/openenv.py): a small text environment written here, served by OpenEnv's own server code
(`openenv.core.env_server.create_fastapi_app`), with a task API of its own. The observation becomes
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

COLOURS = '''"""Say the colour: a one-turn OpenEnv environment with a task API (the test's own)."""
import sys

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

COLOURS = ["red", "green", "blue"]
TASKS = {"train": COLOURS * 4, "test": COLOURS * 2}


class Say(Action):
    message: str


class Seen(Observation):
    prompt: str
    available_actions: list[str] = []


class Colours(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.goal, self.steps = None, 0

    def reset(self, seed=None, episode_id=None, split="train", index=0):
        self.goal, self.steps = TASKS[split][index], 0
        return Seen(prompt=f"Say the colour {self.goal}.", available_actions=[f"say {c}" for c in COLOURS])

    def step(self, action, timeout_s=None):
        self.steps += 1
        right = action.message.strip() == f"say {self.goal}"
        return Seen(prompt="Right." if right else "Wrong.", done=True, reward=1.0 if right else 0.0)

    @property
    def state(self):
        return State(step_count=self.steps)

    def list_splits(self):
        return list(TASKS)

    def num_tasks(self, split):
        return len(TASKS[split])

    def get_task(self, split, index):
        return {"index": index, "goal": TASKS[split][index]}


app = create_fastapi_app(Colours, Say, Seen, max_concurrent_envs=64, env_name="colours")
if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''


@pytest.fixture(scope="module")
def colours(tmp_path_factory):
    """The environment above on OpenEnv's server, at ws://127.0.0.1:PORT."""
    path = tmp_path_factory.mktemp("colours") / "colours.py"
    path.write_text(COLOURS)
    port = free_port()
    server = subprocess.Popen([sys.executable, str(path), str(port)])
    try:
        for _ in range(300):
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
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
        assert (a["observations"], a["actions"], a["rewards"], a["score"]) == (
            b["observations"],
            b["actions"],
            b["rewards"],
            b["score"],
        )
        assert a["conversation"][0] == b["conversation"][0]  # the system prompt: the instruction
