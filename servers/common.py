"""Shared plumbing of every environment server: instance table, errors, endpoints, launcher.

Each `servers/<env>.py` defines one environment class with four methods

    reset(data_idx: int) -> dict        # {"observation": str, "reward": float, "done": bool, ...}
    step(action: str) -> dict           # same keys
    observation() -> str
    close() -> None

and calls `build_app(title, make_env)` to serve it with the AgentGym protocol (see README):

    GET  /                      -> a short text naming the environment
    POST /create  {}            -> {"id": int}
    POST /reset   {id, data_idx} -> the env's reset() answer
    POST /step    {id, action}  -> the env's step() answer
    GET  /observation?id=N      -> the current observation
    POST /close   {id}          -> {"closed": id}

Some AgentGym servers name the instance `env_idx` instead of `id` (and WebArena's reset names the
task `idx`); both spellings are accepted everywhere. Errors are JSON: an unknown id is a 404, a
malformed body a 422 (FastAPI's validation), a bad value a 400, an environment that raised a 500;
the server itself keeps serving. A server never imports torch.
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
# Request bodies. `id` and `env_idx` are the same thing; so are `data_idx` and `idx`.
# ---------------------------------------------------------------------------------------------


class _WithId(BaseModel):
    model_config = ConfigDict(extra="allow")  # AgentGym clients may send extra keys
    id: int | None = None
    env_idx: int | None = None

    @model_validator(mode="after")
    def _one_id(self):
        if self.id is None:
            self.id = self.env_idx
        if self.id is None:
            raise ValueError("the body needs the instance id as `id` (or `env_idx`)")
        return self


class ResetBody(_WithId):
    data_idx: int | None = None
    idx: int | str | None = None  # WebArena's name for the task
    seed: int | None = None

    @model_validator(mode="after")
    def _one_task(self):
        if self.data_idx is None and isinstance(self.idx, int):
            self.data_idx = self.idx
        if self.data_idx is None and self.idx is None:
            self.data_idx = 0
        return self


class StepBody(_WithId):
    action: str


class CloseBody(_WithId):
    pass


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="allow")  # e.g. TextCraft's `commands`, `goal`


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


def build_app(title: str, make_env: Callable[..., object]) -> FastAPI:
    """The AgentGym endpoints over a table of `make_env()` instances. Returns the FastAPI app;
    a server file may add its own endpoints to it (e.g. SciWorld's /action_hint)."""
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
        extra = dict(body.model_extra or {}) if body is not None else {}
        return {"id": table.create(**extra)}

    @app.post("/reset")
    def reset(body: ResetBody):
        task = body.data_idx if body.data_idx is not None else body.idx
        return table.call(body.id, "reset", task)

    @app.post("/step")
    def step(body: StepBody):
        return table.call(body.id, "step", body.action)

    @app.get("/observation")
    def observation(id: int):
        return table.call(id, "observation")

    @app.post("/close")
    def close(body: CloseBody):
        table.close(body.id)
        return {"closed": body.id}

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
