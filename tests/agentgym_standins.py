"""Minimal stand-ins for AgentGym's five environment servers: they speak only AgentGym's dialect.

Each answers with the shapes AgentGym's own servers send (`agentenv-<env>/.../server.py` and the
environment code behind it in WooooDyy/AgentGym) and validates requests as strictly as they do
(their pydantic bodies, or WebArena's `query["env_idx"]`): no `available_actions`, no `category`,
no `score` where they send none, Deep Search's bare integer from /create and bare string from
/reset, WebArena's `terminated` instead of `done`. BabyAI and TextCraft play the real game (this
project's environment classes, their text re-shaped as AgentGym's servers print it); SciWorld,
Deep Search and WebArena replay recorded answers. Every stand-in logs what it was sent.
"""

import itertools
import socket
import threading
import time

import uvicorn
from fastapi import Body, FastAPI
from pydantic import BaseModel

from servers.babyai import BabyAIText
from servers.textcraft import TextCraftEnv


class IdAction(BaseModel):  # BabyAI's, TextCraft's and SciWorld's StepRequestBody
    id: int
    action: str


class IdDataIdx(BaseModel):  # BabyAI's and SciWorld's ResetRequestBody (TextCraft's data_idx is optional)
    id: int
    data_idx: int


class IdOnly(BaseModel):  # CloseRequestBody
    id: int


def _app(name: str) -> FastAPI:
    app = FastAPI(title=f"AgentGym-dialect {name} stand-in")
    app.state.log = []  # (path, body or offered text)
    app.state.ids = itertools.count()
    app.state.envs = {}
    return app


def babyai_text(observation: str, env: BabyAIText) -> str:
    """AgentGym's BabyAI text: the description, then `Available actions: ["a", "b", ...]`."""
    kept = [ln for ln in observation.splitlines() if not ln.startswith(("Available actions:", "Goal:"))]
    return "\n".join(kept) + "\nAvailable actions: [" + ", ".join(f'"{a}"' for a in env.actions) + "]"


def babyai() -> FastAPI:
    app = _app("BabyAI")

    @app.post("/create")
    async def create():
        i = next(app.state.ids)
        app.state.envs[i] = BabyAIText()
        return {"id": i}

    @app.post("/reset")
    def reset(body: IdDataIdx):
        env = app.state.envs[body.id]
        out = env.reset(body.data_idx)
        app.state.log.append(("/reset", list(env.actions)))
        return {
            "observation": f"Your goal: {env.obs['mission']}\n" + babyai_text(out["observation"], env),
            "reward": 0,
            "score": 0,
            "deleted": False,
            "done": False,
        }

    @app.post("/step")
    def step(body: IdAction):
        env = app.state.envs[body.id]
        offered = list(env.actions)
        out = env.step(body.action)
        app.state.log.append(("/step", body.action, offered, list(env.actions)))
        return {
            "observation": babyai_text(out["observation"], env),
            "reward": out["reward"],
            "score": out["score"],
            "done": out["done"],
        }

    @app.get("/observation")
    def observation(id: int):
        return {"observation": app.state.envs[id].last}

    @app.post("/close")
    def close(body: IdOnly):
        return app.state.envs.pop(body.id, None) is not None

    return app


class TextCraftCreate(BaseModel):
    commands: str | None = None
    goal: str | None = None


class TextCraftReset(BaseModel):
    id: int
    data_idx: int | None = 0


def textcraft() -> FastAPI:
    app = _app("TextCraft")

    @app.post("/create")
    async def create(body: TextCraftCreate):
        i = next(app.state.ids)
        env = app.state.envs[i] = TextCraftEnv()
        ob = env.reset(i)["observation"]  # AgentGym resets a new instance to task `id`
        return {"id": i, "observation": ob, "done": False, "reward": 0}

    @app.post("/reset")
    def reset(body: TextCraftReset):
        ob = app.state.envs[body.id].reset(body.data_idx)["observation"]
        app.state.log.append(("/reset", body.id, ob))
        return {"id": body.id, "observation": ob, "done": False, "reward": 0}

    @app.post("/step")
    def step(body: IdAction):
        out = app.state.envs[body.id].step(body.action)
        app.state.log.append(("/step", body.id, body.action, out["observation"]))
        return {"observation": out["observation"], "reward": out["reward"], "done": out["done"]}

    @app.get("/observation")
    def observation(id: int):
        return app.state.envs[id].last

    @app.post("/close")
    def close(body: IdOnly):
        return app.state.envs.pop(body.id, None) is not None

    return app


SCIWORLD_TASK = "Your task is to boil water. First, focus on the substance."
SCIWORLD_LOOK = "This room is called the kitchen. In it, you see: a stove, a sink, a pot."
SCIWORLD_SCORES = [25, 100]  # ScienceWorld's score after each recorded step; done at 100


def sciworld() -> FastAPI:
    app = _app("SciWorld")

    @app.post("/create")
    def create():
        i = next(app.state.ids)
        app.state.envs[i] = {"steps": 0}
        return {"id": i}

    @app.post("/reset")
    def reset(body: IdDataIdx):
        app.state.envs[body.id] = {"steps": 0, "observation": SCIWORLD_LOOK}
        app.state.log.append(("/reset", body.data_idx))
        return {
            "task_name": "boil",
            "var_num": body.data_idx,
            "task_description": SCIWORLD_TASK,
            "observation": SCIWORLD_LOOK,
            "reward": 0,
            "score": 0,
            "deleted": False,
            "done": False,
        }

    @app.post("/step")
    def step(body: IdAction):
        env = app.state.envs[body.id]
        before = SCIWORLD_SCORES[env["steps"] - 1] if env["steps"] else 0
        score = SCIWORLD_SCORES[min(env["steps"], len(SCIWORLD_SCORES) - 1)]
        env["steps"] += 1
        env["observation"] = f"You did: {body.action}."
        app.state.log.append(("/step", body.action))
        return {
            "observation": env["observation"],
            "reward": score - before,
            "score": score,
            "done": score == 100,
        }

    @app.get("/observation")
    def observation(id: int):
        return app.state.envs[id]["observation"]

    @app.post("/close")
    def close(body: IdOnly):
        return app.state.envs.pop(body.id, None) is not None

    return app


class SearchCreate(BaseModel):  # CreateQuery
    id: int


class SearchReset(BaseModel):  # ResetQuery
    env_idx: int
    id: int | None = None


class SearchStep(BaseModel):  # StepQuery
    env_idx: int
    action: str


class EnvIdxOnly(BaseModel):  # Deep Search's CloseRequestBody
    env_idx: int


def searchqa_question(task: int) -> str:
    return f"Question: What is the capital of Country{task}?"


def searchqa() -> FastAPI:
    app = _app("SearchQA")

    @app.post("/create")
    def create(body: SearchCreate) -> int:
        i = next(app.state.ids)
        app.state.envs[i] = {"task": body.id, "steps": 0}
        return i

    @app.post("/reset")
    def reset(body: SearchReset) -> str:
        app.state.envs[body.env_idx] = {"task": body.id, "steps": 0}
        app.state.log.append(("/reset", body.id))
        return f"You must reason inside <think>...</think> first.\n\n {searchqa_question(body.id)}"

    @app.post("/step")
    def step(body: SearchStep):
        env = app.state.envs[body.env_idx]
        env["steps"] += 1
        app.state.log.append(("/step", body.action))
        if env["steps"] == 2:  # the recorded episode: a search, then the right answer
            return {
                "observation": "Congratulations! You have answered the question correctly.",
                "reward": 1.0,
                "done": True,
                "info": None,
            }
        return {
            "observation": "<information>Doc 1(Title: Capital) City is the capital.\n</information>",
            "reward": 0.0,
            "done": False,
            "info": None,
        }

    @app.get("/observation")
    def observation(env_idx: int) -> str:
        return searchqa_question(app.state.envs[env_idx]["task"])

    @app.post("/close")
    def close(body: EnvIdxOnly):
        return app.state.envs.pop(body.env_idx, None) is not None

    return app


def webarena() -> FastAPI:
    """AgentGym's WebArena server is Quart and indexes the JSON directly: a missing key raises."""
    app = _app("WebArena")

    def page(env) -> str:
        return (
            f"OBSERVATION:\n[1] link 'Forum'\nURL: http://forum\nOBJECTIVE: task {env['idx']}\n"
            f"PREVIOUS ACTION: {env['previous']}"
        )

    @app.post("/create")
    def create():
        i = next(app.state.ids)
        app.state.envs[i] = {"idx": None, "steps": 0, "previous": "None"}
        return {"env_idx": i}

    @app.post("/reset")
    def reset(query: dict = Body(...)):
        env = app.state.envs[query["env_idx"]]
        env.update(idx=query["idx"], seed=query["seed"], steps=0, previous="None")
        app.state.log.append(("/reset", query["idx"]))
        return {"observation": page(env), "sites": ["reddit"], "object": f"task {query['idx']}"}

    @app.post("/step")
    def step(query: dict = Body(...)):
        env = app.state.envs[query["env_idx"]]
        env["steps"] += 1
        env["previous"] = query["action"]
        app.state.log.append(("/step", query["action"]))
        terminated = env["steps"] == 2  # the recorded episode: a click, then stop
        return {
            "observation": page(env),
            "reward": 1.0 if terminated else 0.0,
            "terminated": terminated,
            "truncated": False,
            "info": None,
        }

    @app.get("/observation")
    def observation(env_idx: int):
        return page(app.state.envs[env_idx])

    @app.post("/close")
    def close(query: dict = Body(...)):
        app.state.envs.pop(query["env_idx"])
        return {"closed": "closed"}

    return app


STANDINS = {
    "babyai": babyai,
    "textcraft": textcraft,
    "sciworld": sciworld,
    "searchqa": searchqa,
    "webarena": webarena,
}


class Served:
    """A stand-in app served by uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app: FastAPI):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.app, self.url = app, f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "Served":
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline, "the stand-in did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)
