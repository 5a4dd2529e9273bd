"""Shared plumbing of every environment server: instance table, errors, endpoints, both dialects.

Each `servers/<env>.py` defines one environment class with four methods

    reset(data_idx: int | str) -> dict  # {"observation": str, "reward": float, "done": bool, ...}
    step(action: str) -> dict           # same keys
    observation() -> str
    close() -> None

and one more for the trainer, never called on the agent's path (docs/experts.md):

    expert() -> dict                    # {"action": str, "thought": str, ...}: the expert's next
                                        # action from the current state (POST /expert)

and calls `build_app(title, make_env, ...)` to serve it. Every server speaks three dialects on the
same port: OpenEnv's (a WebSocket session per episode, servers/openenv.py, added by
`add_openenv(app, name)`), this project's, and AgentGym's, field for field as AgentGym's client classes
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

A server never imports torch.

What the table does for every environment, so that no environment repeats it:
  * `step` before any successful `reset` is a 400; `step` after the episode ended answers the last
    answer again with reward 0 and a note ("The episode is over; reset to start a new one.").
  * Every environment call runs under a time limit (`--time-limit`, 50 s by default: below the
    client's 60 s, so that the client reads this server's error rather than its own time-out). A
    call that overruns is answered with a 504 JSON error, its instance is dropped from the table (its
    id is a 404 from then on) and closed as soon as the call returns; a call stuck in Python code
    is interrupted (an exception is raised in its thread; servers/calls.py). Each call runs on a
    worker thread and the endpoints are coroutines, so requests queued on one busy instance hold
    no worker thread and never block other instances or `GET /`. (BabyAI's and TextCraft's steps, quick and
    pure
    Python, run on the event loop's own thread instead: `inline_calls` in build_app.)
  * `--max-instances N` caps the live instances: a /create beyond it is a 503 with `Retry-After`.
  * A /create whose client went away before the answer (its own time-out) is closed at once.

Strictness (decided here, once, for every server; AgentGym's own pydantic models are as strict):
  * instance ids (`id`, `env_idx`) and numeric task ids (`data_idx`, `idx`) are JSON integers in
    [0, 2**31): `true`, `1.0`, `null` and larger numbers are a 422; a string (`"3"` included) is a
    task *name*, never a number (a TextCraft item, a WebArena config): an unknown name is a 400/404.
    A missing task means task 0 (as AgentGym's servers default it); an explicit `null` does not.
  * every string in a body must be valid Unicode (a lone surrogate such as "\\ud800" is a 422),
    an action at most MAX_ACTION_CHARS long; /create takes only the keys build_app names, with the
    types the environment's constructor gives them (anything else is a 422).
  * `/reset_batch` and `/step_batch` take a JSON list of /reset or /step bodies (at most MAX_BATCH,
    each instance at most once) and answer a list in the same order: one HTTP round trip per turn
    for a whole batch of episodes. An item that fails (unknown id, a bad task, a time-out, an
    environment that raised) is answered `{"error": ..., "status": N}` in its place, the others
    are served; a body that is not such a list is a 422, a repeated instance a 400.
  * request headers (names and values together) at most MAX_HEADER_BYTES (16 KiB, h11's limit, so
    the bound is the same whichever parser uvicorn picked; httptools has none, and would take
    megabytes): above it a 431 JSON error, before any endpoint runs.
  * Errors are JSON `{"error": ...}`: an unknown id 404, a malformed body 422, an unreadable one 400,
    a bad value 400, a full table 503, a time-out 504. No error closes the connection, and no error
    answer can itself fail. The checks here echo nothing of the request (no value, no key) and name
    at most MAX_LISTED_ERRORS of a body's faults; an environment's own message may name the task
    asked for (a TaskName, at most 1,000 characters); every message is at most MAX_ERROR_CHARS long.
  * An environment that raised (its own fault, not the request's) is a 500 that names only the
    exception's type (its message may quote the action); the traceback is logged once, here. The
    instance stays in the table: the client decides whether to close it (EnvPool does).
  * A WebSocket session's instance (servers/openenv.py) belongs to its socket: it sits in the
    table under an unguessable key (`create_session`), not a number, so no HTTP request can step,
    reset, observe or close it. The one call that reaches it is POST /expert {"session": key},
    with the key that the session's `state` message shows its client (the expert advises; it
    changes nothing). A session that sends no message for `--idle-limit` seconds (IDLE_LIMIT) is
    closed and its instance freed.

`serve()` also makes the server stoppable by its parent whatever a request is doing: on SIGTERM or
SIGINT, uvicorn gets SHUTDOWN_GRACE seconds to finish; then the process kills its own child
processes (JVMs, Chromium) and exits.
"""

import argparse
import asyncio
import contextlib
import inspect
import itertools
import json
import logging
import math
import os
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable

import orjson
import psutil
import uvicorn
from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, create_model, model_validator
from starlette.exceptions import HTTPException

from servers.calls import CallTimeout, run_inline, run_limited, run_limited_many

log = logging.getLogger("servers")

MAX_ID = 2**31 - 1
MAX_ACTION_CHARS = 100_000  # a long LLM reply is ~10k characters; anything past this is not an action
TIME_LIMIT = 50.0  # seconds per environment call (see the docstring)
SHUTDOWN_GRACE = 8.0  # seconds between SIGTERM and a forced exit
MAX_BATCH = 1024  # items of one /reset_batch or /step_batch
MAX_HEADER_BYTES = 16 * 1024  # request headers, names + values (see the docstring); a client sends ~200
MAX_WS_BYTES = 1024 * 1024  # a WebSocket message (an action of MAX_ACTION_CHARS, escaped, is < 0.6 MiB)
KEEP_ALIVE = 600  # seconds an idle connection stays open: longer than a policy's turn (see serve)
RETRY_AFTER = 5  # seconds a client is asked to wait when the table is full
IDLE_LIMIT = 600.0  # seconds a WebSocket session may send nothing before it is closed: > a policy's turn
MAX_ERROR_CHARS = 1000  # an error answer's message, at most (see the docstring)
MAX_LISTED_ERRORS = 3  # a body's validation faults named in one answer (the rest counted)

Id = Annotated[int, Strict(), Field(ge=0, le=MAX_ID)]  # a JSON integer, never a bool/float/string


class EnvError(Exception):
    """An error the client caused (bad value, unknown task): answered as a 4xx JSON error."""

    def __init__(self, message: str, status: int = 400, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers


# ---------------------------------------------------------------------------------------------
# Answers that can always be encoded
# ---------------------------------------------------------------------------------------------


def safe_text(text: str) -> str:
    """`text` with anything UTF-8 cannot encode (lone surrogates) written as a \\uXXXX escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


class SafeJSONResponse(JSONResponse):
    """JSON that never fails to render: a lone surrogate is sent escaped, NaN/inf as null.
    orjson renders the usual answer (it writes NaN/inf as null itself) several times faster than
    `json`; what it refuses (a lone surrogate, a non-string key) falls back to `json`."""

    def render(self, content) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:
            pass
        try:
            return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
                "utf-8"
            )
        except (UnicodeEncodeError, ValueError):
            return json.dumps(
                _finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")
            ).encode()


def bounded(message: str) -> str:
    """An error message as it is sent: encodable, and at most MAX_ERROR_CHARS long."""
    message = safe_text(message)
    return message if len(message) <= MAX_ERROR_CHARS else message[: MAX_ERROR_CHARS - 3] + "..."


def error(status: int, message: str, headers: dict | None = None) -> SafeJSONResponse:
    return SafeJSONResponse(status_code=status, content={"error": bounded(message)}, headers=headers)


def env_fault(e: BaseException) -> str:
    """The answer to an environment's own exception: its type only, since its message may quote
    the request (an action, a task name); the traceback is in the server's log."""
    return f"the environment raised {type(e).__name__}; the server's log has the traceback"


def place_of(loc: tuple, extra_key: bool) -> str:
    """A validation error's place, in the model's own names only: list positions and the first
    field name. Past it a name may be the request's own (a dict's key), and an unexpected key
    (`extra_key`) is the request's by definition: neither is shown."""
    if extra_key:
        loc = loc[:-1]
    if loc and loc[0] in ("body", "query"):  # FastAPI's: where in the request
        loc = loc[1:]
    shown = []
    for x in loc:
        shown.append(str(x))
        if not isinstance(x, int):
            break
    return ".".join(shown) or "body"


def describe_validation(errors: list) -> str:
    """Pydantic's errors as one short line, echoing nothing of the request: no value, no key
    (see `place_of`), at most MAX_LISTED_ERRORS of them."""
    parts = []
    for e in errors[:MAX_LISTED_ERRORS]:
        extra_key = e.get("type") == "extra_forbidden"
        message = "a key it does not take" if extra_key else e.get("msg", "invalid")
        parts.append(f"{place_of(tuple(e.get('loc', ())), extra_key)}: {message}")
    more = f"; and {len(errors) - MAX_LISTED_ERRORS} more" if len(errors) > MAX_LISTED_ERRORS else ""
    return "invalid request: " + "; ".join(parts) + more


class CatchAll:
    """ASGI middleware: an exception nothing else handled becomes a 500 JSON answer. Starlette's
    own handler for `Exception` re-raises after answering, which makes uvicorn close the
    connection; this one answers and returns, so the client's connection stays usable."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_)
        except Exception as exc:
            log.exception("environment error on %s", scope.get("path"))
            if started:  # half an answer is out: nothing sensible is left to send
                raise
            await error(500, env_fault(exc))(scope, receive, send)


class HeaderLimit:
    """ASGI middleware: a request whose headers pass MAX_HEADER_BYTES is answered 431 (Request
    Header Fields Too Large) and goes no further. uvicorn's httptools parser accepts any size."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            size = sum(len(k) + len(v) for k, v in scope["headers"])
            if size > MAX_HEADER_BYTES:
                return await error(431, f"request headers of {size} bytes; at most {MAX_HEADER_BYTES}")(
                    scope, receive, send
                )
        return await self.app(scope, receive, send)


# ---------------------------------------------------------------------------------------------
# Request bodies of both dialects (see the table above), strictly typed
# ---------------------------------------------------------------------------------------------


def _check_text(value) -> None:
    """Every string (and key) in a parsed JSON body must be encodable Unicode (iterative: a
    deeply nested body cannot exhaust the stack here)."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("the body holds a lone surrogate (not valid Unicode text)") from None
        elif isinstance(v, dict):
            todo += list(v.keys()) + list(v.values())
        elif isinstance(v, list):
            todo += v


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")  # AgentGym clients may send extra keys

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data):
        _check_text(data)
        return data


class _WithInstance(_Body):
    id: Id | None = None
    env_idx: Id | None = None

    @model_validator(mode="after")
    def _needs_instance(self):
        if self.id is None and self.env_idx is None:
            raise ValueError(
                "the body needs the instance id as `id` (or `env_idx`); an OpenEnv client steps over "
                "its WebSocket session, /ws"
            )
        return self

    @property
    def instance(self) -> int:
        """`env_idx` when given (AgentGym's Deep Search and WebArena), else `id`."""
        return self.env_idx if self.env_idx is not None else self.id


TaskName = Annotated[str, Field(max_length=1000)]


class ResetBody(_WithInstance):
    data_idx: Id | TaskName | None = None  # a string names a task (a TextCraft item)
    idx: Id | TaskName | None = None  # WebArena's: the task's config file, `idx`.json
    seed: Annotated[int, Strict()] | None = None  # WebArena's; accepted, unused (a task's start is fixed)

    @model_validator(mode="after")
    def _needs_instance(self):
        if {"id", "env_idx"} & self.model_fields_set:  # named (an explicit null too): this dialect's rules
            return super()._needs_instance()
        return self  # none named: OpenEnv's one-off HTTP reset (`app.state.reset_without_instance`)

    @model_validator(mode="after")
    def _no_null_task(self):
        for name in ("data_idx", "idx"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"`{name}` is null; give a task id, or leave the key out for task 0")
        return self

    @property
    def task(self) -> int | str:
        if self.data_idx is not None:
            return self.data_idx  # a string stays a name: "3" is not task 3 (see the docstring)
        if self.idx is not None:
            return str(self.idx)  # AgentGym opens config_files/{idx}.json: a name, not a position
        if self.env_idx is not None and self.id is not None:
            return self.id  # AgentGym's Deep Search: `env_idx` is the instance, `id` the task
        return 0


class StepBody(_WithInstance):
    action: Annotated[str, Field(max_length=MAX_ACTION_CHARS)]


class CloseBody(_WithInstance):
    pass


class ExpertBody(_WithInstance):
    session: Annotated[str, Field(max_length=100)] | None = None  # a WebSocket session's key

    @model_validator(mode="after")
    def _needs_instance(self):
        return self if self.session is not None else super()._needs_instance()

    @property
    def instance(self) -> int | str:
        return self.session if self.session is not None else super().instance


class CreateBody(_Body):
    pass  # the keys are checked against build_app's lists, their types against the constructor


def create_args(make_env: Callable[..., object]) -> type[BaseModel]:
    """The /create body the environment's constructor takes: its keyword parameters with their
    annotated types (a key it does not name is a 422, unless it takes **kwargs)."""
    fields, extra = {}, "forbid"
    for p in inspect.signature(make_env).parameters.values():
        if p.kind == p.VAR_KEYWORD:
            extra = "allow"
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            annotation = Any if p.annotation is p.empty else p.annotation
            fields[p.name] = (annotation, ... if p.default is p.empty else p.default)
    return create_model("CreateArgs", __config__=ConfigDict(extra=extra, strict=True), **fields)


# ---------------------------------------------------------------------------------------------
# The instance table: id -> environment. An asyncio lock per instance keeps two requests for one
# instance from interleaving; requests for different instances run in parallel.
# ---------------------------------------------------------------------------------------------

OVER = "The episode is over; reset to start a new one."


@dataclass
class Instance:
    env: object
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ready: bool = False  # a reset succeeded: steps are allowed
    done: bool = False  # the last answer ended the episode
    last: dict | None = None  # the last reset/step answer


class InstanceTable:
    def __init__(
        self,
        make_env: Callable[..., object],
        max_instances: int | None = None,
        time_limit: float = TIME_LIMIT,
        inline: bool = False,
    ):
        self.make_env, self.max_instances, self.time_limit = make_env, max_instances, time_limit
        self.inline = inline  # steps and observations on the event loop's thread (run_inline)
        self.envs: dict[int | str, Instance] = {}  # an HTTP client's by number, a session's by key
        self._ids = itertools.count()
        self._pending = 0  # creates under way (they count against max_instances)

    def __len__(self):
        return len(self.envs)

    async def create(self, **kwargs) -> int:
        """A new instance of `make_env(**kwargs)`, named by the next number: the HTTP dialects' id."""
        env = await self._make(kwargs)
        i = next(self._ids)
        self.envs[i] = Instance(env)
        return i

    async def create_session(self) -> str:
        """A new instance for a WebSocket session, named by an unguessable key instead of a number.
        Every HTTP call names its instance by a number (a JSON integer), so none reaches this one;
        POST /expert {"session": key} is the one exception (see the module's docstring)."""
        env = await self._make({})
        key = secrets.token_urlsafe(16)
        self.envs[key] = Instance(env)
        return key

    async def _make(self, kwargs: dict) -> object:
        """`make_env(**kwargs)` under the time limit, if the table has room (else a 503)."""
        if self.max_instances is not None and len(self.envs) + self._pending >= self.max_instances:
            raise EnvError(
                f"this server holds its maximum of {self.max_instances} instances; close one or retry later",
                503,
                headers={"Retry-After": str(RETRY_AFTER)},
            )
        self._pending += 1
        try:
            env = await run_limited(
                lambda: self.make_env(**kwargs), self.time_limit, abandoned=_close_quietly
            )
        except CallTimeout:
            raise EnvError(
                f"creating an instance took longer than {self.time_limit:g} s; it was "
                "abandoned (and will be closed)",
                504,
            ) from None
        finally:
            self._pending -= 1
        return env

    def get(self, i: int | str) -> Instance:
        if i not in self.envs:
            if isinstance(i, str):  # a session's key, as POST /expert gave it: never quoted back
                raise EnvError("no WebSocket session with that key (its `state` shows it)", 404)
            raise EnvError(f"no environment instance with id {i}; create one with POST /create", 404)
        return self.envs[i]

    async def call(self, i: int, method: str, *args):
        """env.method(*args) under the instance's lock and the time limit; an unknown id is a 404."""
        [answer] = await self.call_many([(i, method, args)])
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def call_many(self, calls: list[tuple[int, str, tuple]]) -> list:
        """`call` for each (id, method, args) at once: every instance's lock is taken, then the
        environment calls run, each under the time limit, on worker threads side by side
        (run_limited_many), or one after another on this thread for an `inline` table's steps.
        Per call: its answer, or the exception it ended with (EnvError for 4xx/5xx)."""
        entered = (
            await asyncio.gather(*(self._enter(i, m) for i, m, _ in calls), return_exceptions=True)
            if len(calls) != 1
            else [await _caught(self._enter(*calls[0][:2]))]
        )  # (one: no task for it)
        run = [k for k, e in enumerate(entered) if isinstance(e, Instance)]
        out = list(entered)  # the early answers (a step after the end) and errors stay as they are
        try:
            fns = [lambda inst=entered[k], c=calls[k]: getattr(inst.env, c[1])(*c[2]) for k in run]
            closers = [lambda _, inst=entered[k]: _close_quietly(inst.env) for k in run]
            inline = self.inline and all(calls[k][1] in ("step", "observation") for k in run)
            if inline:
                outcomes = run_inline(fns, self.time_limit, closers)
            else:  # each on a worker thread of its own: slow steps (a JVM, a browser) overlap
                outcomes = [
                    o
                    for out in await asyncio.gather(
                        *(run_limited_many([f], self.time_limit, [c]) for f, c in zip(fns, closers))
                    )
                    for o in out
                ]
            for k, (ok, value) in zip(run, outcomes):
                inst, (i, method, _) = entered[k], calls[k]
                if isinstance(value, CallTimeout):
                    if self.envs.get(i) is inst:
                        del self.envs[i]
                    value = EnvError(
                        f"{method} on instance {i} did not finish within {self.time_limit:g} s; "
                        "the instance was closed (create a new one)",
                        504,
                    )
                elif ok and method in ("reset", "step") and isinstance(value, dict):
                    inst.ready, inst.done, inst.last = True, bool(value.get("done")), value
                out[k] = value
        finally:
            for k in run:
                entered[k].lock.release()
        return out

    async def _enter(self, i: int, method: str):
        """Take instance i's lock for `method`: the Instance (lock held), or the answer to a step
        after the episode ended (lock released); an unknown id or a step before reset raise."""
        inst = self.get(i)
        try:
            if inst.lock.locked():  # (wait_for costs a task: only when there is something to wait for)
                await asyncio.wait_for(inst.lock.acquire(), self.time_limit)
            else:
                await inst.lock.acquire()
        except asyncio.TimeoutError:
            raise EnvError(
                f"instance {i} stayed busy with earlier requests for {self.time_limit:g} s; retry later",
                503,
                headers={"Retry-After": str(RETRY_AFTER)},
            ) from None
        try:
            if self.envs.get(i) is not inst:  # closed or dropped while this request waited
                raise EnvError(f"no environment instance with id {i} (it was closed)", 404)
            if method in ("step", "expert") and not inst.ready:
                what = "stepping it" if method == "step" else "asking its expert"
                raise EnvError(f"reset the instance before {what}")
            if method == "expert" and inst.done:  # no next action: nothing for the expert to say
                raise EnvError("the episode is over: the expert has no next action; reset the instance first")
            if method == "step" and inst.done:
                last = dict(inst.last, reward=0.0, observation=f"{OVER}\n{inst.last.get('observation', '')}")
                if "available_actions" in last:
                    last["available_actions"] = []
                inst.lock.release()
                return last
            if method == "reset":
                inst.ready = False  # a failed reset leaves nothing to step
            return inst
        except BaseException:
            if inst.lock.locked():
                inst.lock.release()
            raise

    async def close(self, i: int) -> None:
        inst = self.get(i)
        if self.envs.pop(i, None) is not inst:
            raise EnvError(f"no environment instance with id {i}", 404)
        try:  # wait for a call in progress (it has its own time limit), then close
            await asyncio.wait_for(inst.lock.acquire(), self.time_limit)
        except asyncio.TimeoutError:  # still busy: the id is gone already; close when it is free
            asyncio.get_running_loop().create_task(self._close_when_free(inst))
            return
        try:
            with contextlib.suppress(CallTimeout):
                await run_limited(inst.env.close, self.time_limit)
        finally:
            inst.lock.release()

    async def _close_when_free(self, inst: Instance) -> None:
        async with inst.lock:
            with contextlib.suppress(CallTimeout):
                await run_limited(inst.env.close, self.time_limit)

    async def close_all(self) -> None:
        async def one(i):
            try:
                await self.close(i)
            except Exception:  # shutting down: close what can be closed
                log.exception("closing instance %s", i)

        await asyncio.gather(*(one(i) for i in list(self.envs)))


async def _caught(coro):
    """What `asyncio.gather(coro, return_exceptions=True)` gives for one awaitable: its value, or
    the exception it raised."""
    try:
        return await coro
    except Exception as e:  # noqa: BLE001
        return e


async def call_batch(table: InstanceTable, calls: list[tuple[int, str, Any]]) -> list:
    """`table.call(instance, method, arg)` for every item at once (each under its own lock and time
    limit, as a single request would be); a failed item is answered `{"error", "status"}` in its
    place, so that one bad instance does not fail the batch."""
    ids = [i for i, _, _ in calls]
    if len(set(ids)) != len(ids):  # two calls on one instance in one batch would race for its lock
        raise EnvError("an instance appears more than once in the batch", 400)

    out = []
    for (i, _, _), answer in zip(calls, await table.call_many([(i, m, (arg,)) for i, m, arg in calls])):
        if isinstance(answer, EnvError):
            answer = {"error": bounded(str(answer)), "status": answer.status}
        elif isinstance(answer, BaseException):  # the environment raised: this item's 500, the batch goes on
            log.error("environment error in a batch item (instance %s)", i, exc_info=answer)
            answer = {"error": env_fault(answer), "status": 500}
        out.append(both_dialects(answer))
    return out


def _close_quietly(env) -> None:
    if env is not None:
        with contextlib.suppress(BaseException):
            env.close()


# ---------------------------------------------------------------------------------------------
# The app
# ---------------------------------------------------------------------------------------------


def both_dialects(answer):
    """A /reset or /step answer that AgentGym's clients also read: `terminated` is WebArena's name
    for `done` (its client ends the episode on it, and only then takes `reward`)."""
    if isinstance(answer, dict) and "done" in answer:
        answer.setdefault("terminated", answer["done"])
    return answer


def add_error_handlers(app: FastAPI) -> None:
    """Every error answers a JSON body {"error": ...} with its 4xx status (or 503 at capacity)."""

    @app.exception_handler(EnvError)
    async def _env_error(request: Request, exc: EnvError):
        return error(exc.status, str(exc), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        try:
            return error(422, describe_validation(exc.errors()))
        except Exception:  # never let the error answer fail
            return error(422, "invalid request body")

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):  # 400 unreadable body, 404 path, 405 ...
        return error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))


def create_kwargs(given: dict, CreateArgs, create_keys: tuple, ignored_create_keys: tuple) -> dict:
    """The keyword arguments for `make_env` from a /create body's keys (see build_app): unknown
    keys and values of the wrong type are a 422, ignored keys are dropped."""
    unknown = set(given) - set(create_keys) - set(ignored_create_keys)
    if unknown:  # (not named: a key is the request's own text)
        raise EnvError(
            f"/create takes {sorted(create_keys + ignored_create_keys) or 'no keys'}; "
            f"the body has {len(unknown)} other key(s)",
            422,
        )
    try:
        args = CreateArgs(**{k: v for k, v in given.items() if k in create_keys})
    except ValidationError as e:
        raise EnvError(
            describe_validation(e.errors()).replace("invalid request", "invalid /create body"), 422
        ) from None
    return {k: getattr(args, k) for k in args.model_fields_set}


def build_app(
    title: str,
    make_env: Callable[..., object],
    create_keys: tuple[str, ...] = (),
    ignored_create_keys: tuple[str, ...] = (),
    bare_create_id: bool = False,
    max_instances: int | None = None,
    time_limit: float = TIME_LIMIT,
    inline_calls: bool = False,
) -> FastAPI:
    """The endpoints of both dialects over a table of `make_env(**kwargs)` instances.

    create_keys          /create body keys passed on to `make_env` (TextCraft's `commands`, `goal`),
                         with the types its signature gives them (another type is a 422)
    ignored_create_keys  /create body keys that AgentGym's client sends and this server does not
                         need (TextCraft's `minecraft_dir`, Deep Search's `id`): accepted, dropped;
                         any other key is a 422
    bare_create_id       /create answers the bare instance number (AgentGym's Deep Search client
                         uses the whole answer as the instance), not `{"id", "env_idx", ...}`
    max_instances, time_limit   the defaults of the --max-instances and --time-limit flags
    inline_calls         /step and /observation run on the event loop's own thread, under a
                         watchdog (run_inline): only for quick, pure-Python environments, where
                         a thread hand-off per call costs more than the call (resets, which
                         generate levels, stay on worker threads)

    Returns the FastAPI app; a server file may add its own endpoints (e.g. SciWorld's /action_hint),
    calling `await app.state.table.call(id, method)`.
    """
    table = InstanceTable(make_env, max_instances, time_limit, inline_calls)
    app = new_app(title, table)
    add_create(app, table, create_args(make_env), create_keys, ignored_create_keys, bare_create_id)
    add_episode_endpoints(app, table, title)
    return app


async def _needs_an_instance(body) -> None:
    raise EnvError("the body needs the instance id as `id` (or `env_idx`)", 422)


def new_app(title: str, table: InstanceTable) -> FastAPI:
    """The app around `table`: its middleware, its JSON errors, `GET /`, and every instance closed
    when the server stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await table.close_all()  # free every instance (JVMs, browsers) when the server stops

    # No OpenTelemetry: FastAPI would otherwise look up the global tracer, meter and logger
    # providers on every request (a tenth of a TextCraft step's server CPU) for spans nobody collects.
    app = FastAPI(
        title=title,
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.table = table
    app.state.idle_limit = IDLE_LIMIT  # a WebSocket session's (servers/openenv.py); --idle-limit sets it
    app.state.reset_without_instance = _needs_an_instance  # servers/openenv.py's one-off reset replaces it
    app.add_middleware(CatchAll)
    app.add_middleware(HeaderLimit)  # the outermost: an oversized request reaches nothing else

    add_error_handlers(app)

    @app.get("/", response_class=PlainTextResponse)
    async def hello():
        return f"This is the {title} environment server."

    return app


def add_create(
    app: FastAPI,
    table: InstanceTable,
    CreateArgs: type,
    create_keys: tuple[str, ...],
    ignored_create_keys: tuple[str, ...],
    bare_create_id: bool,
) -> None:
    """`POST /create`, its body checked against `make_env`'s signature (`CreateArgs`)."""

    @app.post("/create")
    async def create(request: Request, body: CreateBody | None = None):
        given = dict(body.model_extra or {}) if body is not None else {}
        i = await table.create(**create_kwargs(given, CreateArgs, create_keys, ignored_create_keys))
        if await request.is_disconnected():  # the client gave up waiting: nobody will close it
            await table.close(i)
            return {"id": i, "closed": True}
        if bare_create_id:
            return i
        # `id` for this project and AgentGym's BabyAI/TextCraft/SciWorld clients, `env_idx` for its
        # WebArena client, `observation` for its TextCraft client (which reads it at once).
        return {"id": i, "env_idx": i, "observation": await table.call(i, "observation")}


def add_episode_endpoints(app: FastAPI, table: InstanceTable, title: str) -> None:
    """An instance's episode: /reset and /step (one or a batch), /observation, /expert, /close."""

    # The hot paths answer a Response themselves: FastAPI then skips its generic encoder, which
    # costs more server CPU than a BabyAI or TextCraft step.
    @app.post("/reset")
    async def reset(body: ResetBody):
        if body.instance is None:
            return await app.state.reset_without_instance(body)
        return SafeJSONResponse(both_dialects(await table.call(body.instance, "reset", body.task)))

    @app.post("/step")
    async def step(body: StepBody):
        return SafeJSONResponse(both_dialects(await table.call(body.instance, "step", body.action)))

    @app.post("/reset_batch")
    async def reset_batch(body: Annotated[list[ResetBody], Body(max_length=MAX_BATCH)]):
        return SafeJSONResponse(await call_batch(table, [(b.instance, "reset", b.task) for b in body]))

    @app.post("/step_batch")
    async def step_batch(body: Annotated[list[StepBody], Body(max_length=MAX_BATCH)]):
        return SafeJSONResponse(await call_batch(table, [(b.instance, "step", b.action) for b in body]))

    @app.get("/observation")
    async def observation(
        id: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
        env_idx: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    ):
        if id is None and env_idx is None:
            raise EnvError("give the instance as ?id=N (or ?env_idx=N)", 422)
        return await table.call(env_idx if env_idx is not None else id, "observation")

    # The expert's next action (servers' `expert()`): for the trainer (demonstrations, DAgger-style
    # relabelling), never on the agent's path. Same errors as /step: 404 unknown id, 422 malformed,
    # 400 before a reset or after the episode ended.
    @app.post("/expert")
    async def expert(body: ExpertBody):
        if not callable(getattr(table.get(body.instance).env, "expert", None)):
            raise EnvError(f"the {title} environment has no expert", 404)
        return await table.call(body.instance, "expert")

    @app.post("/close")
    async def close(body: CloseBody):
        await table.close(body.instance)
        return {"closed": body.instance}


# ---------------------------------------------------------------------------------------------
# The launcher, and a shutdown no request can block
# ---------------------------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: Playwright's driver and Chromium, JVMs."""
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _force_exit_after(grace: float) -> None:
    """After `grace` seconds: kill this process's children and exit, whatever is still running."""

    def watchdog():
        time.sleep(grace)
        log.warning("shutdown took longer than %g s: killing child processes and exiting", grace)
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watchdog, daemon=True, name="shutdown-watchdog").start()


class _Server(uvicorn.Server):
    _watchdog = False

    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        if not self._watchdog:
            self._watchdog = True
            _force_exit_after(SHUTDOWN_GRACE)


def serve(app: FastAPI, argv=None, description: str = "") -> None:
    """The command line of every server: `python -m servers.<env> [--host H] [--port P]
    [--max-instances N] [--time-limit S] [--idle-limit S]`."""
    table = app.state.table
    parser = argparse.ArgumentParser(description=description or app.title)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback by default)")
    parser.add_argument("--port", type=int, default=36001, help="port to listen on")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")
    parser.add_argument(
        "--max-instances",
        type=int,
        default=table.max_instances,
        help="most live instances; /create beyond it is a 503 with Retry-After "
        f"(default {table.max_instances or 'no limit'})",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=table.time_limit,
        help="seconds an environment call may take before its instance is dropped",
    )
    parser.add_argument(
        "--idle-limit",
        type=float,
        default=app.state.idle_limit,
        help="seconds a WebSocket session may send nothing before it is closed and its instance "
        f"freed (default {app.state.idle_limit:g})",
    )
    args = parser.parse_args(argv)
    table.max_instances, table.time_limit = args.max_instances, args.time_limit
    app.state.idle_limit = args.idle_limit
    logging.basicConfig(level=args.log_level.upper())
    # uvicorn's default keep-alive (5 s) closes a client's connection while the policy generates
    # its next turn; the client's next request then races the close and fails ("connection reset").
    # No access log, no proxy-header rewriting (no proxy sits in front of a local server), no
    # `server`/`date` headers: each is measurable CPU per request at a thousand requests per second.
    # uvicorn picks uvloop and httptools (requirements.txt) when they are installed.
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE / 2,
        timeout_keep_alive=KEEP_ALIVE,
        ws_max_size=MAX_WS_BYTES,  # a bigger message closes its socket with 1009 (Message Too Big)
    )
    _Server(config).run()
