"""Shared plumbing of every environment server: instance table, errors, endpoints, both dialects.

Each `servers/<env>.py` defines one environment class with four methods

    reset(data_idx: int | str) -> dict  # {"observation": str, "reward": float, "done": bool, ...}
    step(action: str) -> dict           # same keys
    observation() -> str
    close() -> None

and calls `build_app(title, make_env, ...)` to serve it. Every server speaks two dialects on the
same port: this project's, and AgentGym's, field for field as AgentGym's client classes
(`agentenv/envs/<env>.py`) send them:

    this project           /create {} -> {"id"}; then {id, data_idx}, {id, action}, ?id=N, {id}
    AgentGym's BabyAI,     the same (/create without a body); TextCraft's /create sends
      SciWorld, TextCraft  {minecraft_dir, commands, goal} and reads `observation` from the answer
    AgentGym's Deep Search /create {"id": 0} -> a bare int; from then on `env_idx` names the
                           instance, and at /reset `id` names the task: {env_idx, id}; ?env_idx=N
    AgentGym's WebArena    /create (no body) -> {"env_idx"}; /reset {env_idx, seed, idx}; reads
                           `terminated` from /step; ?env_idx=N

One rule reads both: `env_idx`, when present, names the instance, else `id` does; the task is
`data_idx`, else WebArena's `idx` (a config name, passed on as a string), else, when `env_idx`
named the instance, `id` (Deep Search's task), else 0. Answers satisfy both: /create answers
`{"id", "env_idx", "observation"}` (or the bare int, where AgentGym's client needs one), /step and
/reset answers carry `done` and its WebArena name `terminated`.

Errors are JSON: an unknown id is a 404, a malformed body a 422 (FastAPI's validation, or a key
/create does not take), a bad value a 400, an environment that raised a 500; the server itself keeps
serving. A server never imports torch.
"""

import argparse
import contextlib
import itertools
import logging
import threading
from typing import Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, model_validator

log = logging.getLogger("servers")


class EnvError(Exception):
    """An error the client caused (bad value, unknown task): answered as a 4xx JSON error."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------------------------
# Request bodies of both dialects (see the table above).
# ---------------------------------------------------------------------------------------------


class _WithInstance(BaseModel):
    model_config = ConfigDict(extra="allow")  # AgentGym clients may send extra keys
    id: int | None = None
    env_idx: int | None = None

    @model_validator(mode="after")
    def _needs_instance(self):
        if self.id is None and self.env_idx is None:
            raise ValueError("the body needs the instance id as `id` (or `env_idx`)")
        return self

    @property
    def instance(self) -> int:
        """`env_idx` when given (AgentGym's Deep Search and WebArena), else `id`."""
        return self.env_idx if self.env_idx is not None else self.id


class ResetBody(_WithInstance):
    data_idx: int | str | None = None  # a string names a task (a TextCraft item)
    idx: int | str | None = None  # WebArena's: the task's config file, `idx`.json
    seed: int | None = None  # WebArena's; accepted, unused (a task's start is fixed)

    @property
    def task(self) -> int | str:
        if self.data_idx is not None:
            d = self.data_idx
            return int(d) if isinstance(d, str) and d.isdigit() else d
        if self.idx is not None:
            return str(self.idx)  # AgentGym opens config_files/{idx}.json: a name, not a position
        if self.env_idx is not None and self.id is not None:
            return self.id  # AgentGym's Deep Search: `env_idx` is the instance, `id` the task
        return 0


class StepBody(_WithInstance):
    action: str


class CloseBody(_WithInstance):
    pass


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="allow")  # checked against the server's own list in /create


# ---------------------------------------------------------------------------------------------
# The instance table: id -> environment, with a lock per instance so that two requests for the
# same instance never interleave while requests for different instances run in parallel
# (FastAPI runs plain `def` endpoints in a thread pool).
# ---------------------------------------------------------------------------------------------


class InstanceTable:
    def __init__(self, make_env: Callable[..., object]):
        self.make_env = make_env
        self.envs: dict[int, object] = {}
        self.locks: dict[int, threading.Lock] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def create(self, **kwargs) -> int:
        env = self.make_env(**kwargs)
        with self._lock:
            i = next(self._ids)
            self.envs[i], self.locks[i] = env, threading.Lock()
        return i

    def call(self, i: int, method: str, *args):
        """Run env.method(*args) under the instance's lock; an unknown id is a 404."""
        with self._lock:
            if i not in self.envs:
                raise EnvError(f"no environment instance with id {i}; create one with POST /create", 404)
            env, lock = self.envs[i], self.locks[i]
        with lock:
            return getattr(env, method)(*args)

    def close(self, i: int) -> None:
        with self._lock:
            if i not in self.envs:
                raise EnvError(f"no environment instance with id {i}", 404)
            env, lock = self.envs.pop(i), self.locks.pop(i)
        with lock:
            env.close()

    def close_all(self) -> None:
        for i in list(self.envs):
            try:
                self.close(i)
            except Exception:  # shutting down: close what can be closed
                log.exception("closing instance %s", i)


def both_dialects(answer):
    """A /reset or /step answer that AgentGym's clients also read: `terminated` is WebArena's name
    for `done` (its client ends the episode on it, and only then takes `reward`)."""
    if isinstance(answer, dict) and "done" in answer:
        answer.setdefault("terminated", answer["done"])
    return answer


def build_app(title: str, make_env: Callable[..., object], create_keys: tuple[str, ...] = (),
              ignored_create_keys: tuple[str, ...] = (), bare_create_id: bool = False) -> FastAPI:
    """The endpoints of both dialects over a table of `make_env(**kwargs)` instances.

    create_keys          /create body keys passed on to `make_env` (TextCraft's `commands`, `goal`)
    ignored_create_keys  /create body keys that AgentGym's client sends and this server does not
                         need (TextCraft's `minecraft_dir`, Deep Search's `id`): accepted, dropped;
                         any other key is a 422
    bare_create_id       /create answers the bare instance number (AgentGym's Deep Search client
                         uses the whole answer as the instance), not `{"id", "env_idx", ...}`

    Returns the FastAPI app; a server file may add its own endpoints (e.g. SciWorld's /action_hint).
    """
    table = InstanceTable(make_env)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        table.close_all()  # free every instance (JVMs, browsers) when the server stops

    app = FastAPI(title=title, lifespan=lifespan)
    app.state.table = table

    @app.exception_handler(EnvError)
    def _env_error(request: Request, exc: EnvError):
        return JSONResponse(status_code=exc.status, content={"error": str(exc)})

    @app.exception_handler(Exception)
    def _crash(request: Request, exc: Exception):
        log.exception("environment error on %s", request.url.path)
        return JSONResponse(status_code=500, content={"error": f"{type(exc).__name__}: {exc}"})

    @app.get("/", response_class=PlainTextResponse)
    def hello():
        return f"This is the {title} environment server."

    @app.post("/create")
    def create(body: CreateBody | None = None):
        given = dict(body.model_extra or {}) if body is not None else {}
        unknown = sorted(set(given) - set(create_keys) - set(ignored_create_keys))
        if unknown:
            raise EnvError(f"/create takes {sorted(create_keys + ignored_create_keys) or 'no keys'}, "
                           f"not {unknown}", 422)
        i = table.create(**{k: v for k, v in given.items() if k in create_keys})
        if bare_create_id:
            return i
        # `id` for this project and AgentGym's BabyAI/TextCraft/SciWorld clients, `env_idx` for its
        # WebArena client, `observation` for its TextCraft client (which reads it at once).
        return {"id": i, "env_idx": i, "observation": table.call(i, "observation")}

    @app.post("/reset")
    def reset(body: ResetBody):
        return both_dialects(table.call(body.instance, "reset", body.task))

    @app.post("/step")
    def step(body: StepBody):
        return both_dialects(table.call(body.instance, "step", body.action))

    @app.get("/observation")
    def observation(id: int | None = None, env_idx: int | None = None):
        if id is None and env_idx is None:
            raise EnvError("give the instance as ?id=N (or ?env_idx=N)", 422)
        return table.call(env_idx if env_idx is not None else id, "observation")

    @app.post("/close")
    def close(body: CloseBody):
        table.close(body.instance)
        return {"closed": body.instance}

    return app


def serve(app: FastAPI, argv=None, description: str = "") -> None:
    """The command line of every server: `python -m servers.<env> [--host H] [--port P]`."""
    parser = argparse.ArgumentParser(description=description or app.title)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback by default)")
    parser.add_argument("--port", type=int, default=36001, help="port to listen on")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper())
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
