"""OpenEnv's protocol on every server: a WebSocket session per episode, its HTTP endpoints, its task API.

Where it sits: the third dialect of the servers in servers/, beside this project's and AgentGym's
(servers/common.py), on the same port and over the same instance table, so that the same task gives
the same observations, rewards and done flags in all three. OpenEnv (Meta's PyTorch team with
Hugging Face, the `openenv` package) is what TRL's GRPOTrainer and OpenEnv's hub of environments
speak; its generic client (GenericEnvClient, the package's core/generic_client.py) drives these
servers unchanged (tests/test_openenv_servers.py). Each server file adds it: `add_openenv(app, name)`.

    WS  /ws          one instance per connection: created when the socket opens, closed when the
                     client sends `close` or goes away (mid-episode too)
        -> {"type": "reset", "data": {"split": "test", "index": 3}}   (OpenEnv's task API: the
                     split's index-th task; or {"data_idx": d}, as this project's /reset names a
                     task; or {"seed": d}, the same; or {} for task 0; "episode_id" optional)
        <- {"type": "observation", "data": {"observation": {"text": str, ...}, "reward", "done"}}
        -> {"type": "step", "data": {"action": "turn left"}}          (the agent's text, as /step's)
        -> {"type": "state"}  <- {"type": "state", "data": {"episode_id", "step_count", "task",
                     "session", ...}} (`session`: the instance's key, for POST /expert {"session":
                     key}, the trainer's call; no other HTTP call reaches a session's instance)
        -> {"type": "close"}
        <- {"type": "error", "data": {"message", "code", "status"}}   for anything that went wrong;
                     the session goes on unless its instance is gone (a time-out dropped it)
                     A session that sends nothing for --idle-limit seconds is closed (1008).
    GET /health /metadata /schema /state, and POST /reset without an instance (a one-off instance,
                     reset, answered and closed, as OpenEnv's stateless HTTP reset is)
    task API         GET /list_environments, GET /{name}/splits, POST /{name}/tasks, /num_tasks,
                     /task, /task_range: the project's splits (envs/tasks.py), task i of a split being
                     its i-th data_idx

`observation.text` is the observation this project's dialect answers; the answer's other fields
(`score`, `available_actions`, ...) sit beside it. Errors follow servers/common.py's rules: a
malformed, oversized (uvicorn closes a frame over MAX_WS_BYTES with 1009) or ill-typed message is
answered (VALIDATION_ERROR, ...), echoes nothing of the message, keys included, and never ends the
server; an environment's own exception is an EXECUTION_ERROR (500), logged once; a full table
answers CAPACITY_REACHED with `retry_after` and closes with 1013 (Try Again Later), the WebSocket's
503 + Retry-After.
"""

import asyncio
import logging
import uuid
from typing import Annotated

import orjson
from fastapi import FastAPI, WebSocket
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.websockets import WebSocketDisconnect, WebSocketState

from servers.common import (
    MAX_ACTION_CHARS,
    RETRY_AFTER,
    EnvError,
    Id,
    InstanceTable,
    ResetBody,
    SafeJSONResponse,
    TaskName,
    bounded,
    describe_validation,
    env_fault,
)

log = logging.getLogger("servers")

MAX_LISTED = 10_000  # tasks in one /tasks or /task_range answer (a bounded preview; /num_tasks is exact)
SPLIT_TYPES = {"train": "train", "val": "validation", "test": "test"}  # OpenEnv's split types


# ---------------------------------------------------------------------------------------------
# Messages, strictly typed (a key OpenEnv does not define is an error, not silently dropped)
# ---------------------------------------------------------------------------------------------


class ResetData(BaseModel):
    model_config = ConfigDict(extra="forbid")
    split: Annotated[str, Field(max_length=100)] | None = None
    index: Id | None = None
    data_idx: Id | TaskName | None = None  # a string names a task (a TextCraft item), as at /reset
    seed: Id | None = None
    episode_id: Annotated[str, Field(max_length=255)] | None = None


class TextAction(BaseModel):
    """The action: the agent's text, as this project's /step takes it (the server parses it)."""

    model_config = ConfigDict(extra="forbid")
    action: Annotated[str, Field(max_length=MAX_ACTION_CHARS)]
    metadata: dict = {}


class TextObservation(BaseModel):
    """The observation: its text, and the environment's other fields beside it."""

    model_config = ConfigDict(extra="allow")
    text: str
    done: bool = False
    reward: float | None = None
    metadata: dict = {}


class SessionState(BaseModel):
    model_config = ConfigDict(extra="allow")
    episode_id: str | None = None
    step_count: int = 0


DATA = {"reset": ResetData, "step": TextAction}  # each message type's `data` (state and close take none)


class BadMessage(Exception):
    """A message this dialect does not take: answered with `code`, nothing of it quoted."""

    def __init__(self, message: str, code: str = "VALIDATION_ERROR", status: int = 422):
        super().__init__(message)
        self.code, self.status = code, status


def read_message(raw: str | bytes | None) -> tuple[str, BaseModel | None]:
    """A message's type and its validated `data`, or BadMessage. The keys are checked before pydantic
    sees them: a message of 80,000 unknown keys is one set difference, not 80,000 errors built and
    sent back while every other session on the event loop waits."""
    try:
        message = orjson.loads(raw or b"")  # (orjson refuses a lone surrogate: the text is valid)
    except orjson.JSONDecodeError:
        raise BadMessage("the message is not valid JSON", "INVALID_JSON", 400) from None
    if not isinstance(message, dict):
        raise BadMessage("a message is a JSON object with a `type`: reset, step, state or close")
    kind = message.get("type")
    if not isinstance(kind, str) or kind not in ("reset", "step", "state", "close"):
        raise BadMessage("unknown message type; the types are reset, step, state, close", "UNKNOWN_TYPE", 400)
    data = message.get("data", {})
    if message.keys() - {"type", "data"} or not isinstance(data, dict):
        raise BadMessage('a message is {"type": ..., "data": {...}} and nothing else')
    model = DATA.get(kind)
    if model is None:
        return kind, None
    if data.keys() - model.model_fields.keys():
        raise BadMessage(f"a {kind} message's data takes only the keys {sorted(model.model_fields)}")
    try:
        return kind, model.model_validate(data)
    except ValidationError as e:
        raise BadMessage(describe_validation(e.errors()).replace("request", "message")) from None


# ---------------------------------------------------------------------------------------------
# Tasks: the project's splits, served as OpenEnv's task API
# ---------------------------------------------------------------------------------------------


def splits_of(name: str) -> dict[str, list[int]]:
    """The environment's named splits of task ids: the ones the trainer draws from (envs/tasks.py)."""
    from envs.tasks import ENVS

    return ENVS[name].splits if name in ENVS else {}


def split_type(split: str) -> str:
    """OpenEnv's type of a split: "train", "validation" or "test" (`horizon-val` is a validation split)."""
    return SPLIT_TYPES.get(split.rsplit("-", 1)[-1], "validation")


def task_of(data: ResetData, splits: dict[str, list[int]]) -> int | str:
    """The task (data_idx) a reset names; EnvError for a split or index that does not exist."""
    if data.split is not None:
        if data.split not in splits:
            raise EnvError(f"no such split; the splits are {sorted(splits) or 'none'}")
        ids, index = splits[data.split], data.index or 0
        if index >= len(ids):
            raise EnvError(f"task index {index} is outside split {data.split!r} (0..{len(ids) - 1})")
        return ids[index]
    if data.index is not None:
        raise EnvError("`index` counts within a split: give `split` too (GET /<name>/splits lists them)", 422)
    for task in (data.data_idx, data.seed):
        if task is not None:
            return task
    return 0


def openenv_answer(answer: dict) -> dict:
    """A /reset or /step answer of this project's dialect in OpenEnv's shape: the text becomes
    `observation.text`, the other fields sit beside it; reward and done stay on top."""
    rest = {k: v for k, v in answer.items() if k not in ("observation", "reward", "done", "terminated")}
    return {
        "observation": {"text": answer.get("observation", ""), **rest},
        "reward": answer.get("reward"),
        "done": bool(answer.get("done")),
    }


def task_spec(split: str, index: int, data_idx: int) -> dict:
    return {"id": f"{split}/{index}", "split": split, "index": index, "data_idx": data_idx}


# ---------------------------------------------------------------------------------------------
# The WebSocket session
# ---------------------------------------------------------------------------------------------


class Session:
    """One connection's instance and episode."""

    def __init__(self, table: InstanceTable, instance: str, splits: dict[str, list[int]]):
        self.table, self.instance, self.splits = table, instance, splits  # (instance: its key in the table)
        self.state = SessionState(session=instance)  # for POST /expert {"session": key}

    async def reset(self, data: ResetData) -> dict:
        task = task_of(data, self.splits)
        answer = await self.table.call(self.instance, "reset", task)
        where = {"split": data.split, "index": data.index or 0} if data.split is not None else {}
        self.state = SessionState(
            episode_id=data.episode_id or uuid.uuid4().hex,
            step_count=0,
            session=self.instance,
            task=task,
            done=answer["done"],
            **where,
        )
        return {"type": "observation", "data": openenv_answer(answer)}

    async def step(self, action: TextAction) -> dict:
        answer = await self.table.call(self.instance, "step", action.action)
        self.state.step_count += 1
        self.state.done = answer["done"]
        return {"type": "observation", "data": openenv_answer(answer)}

    async def answer(self, raw: str | bytes | None) -> dict | None:
        """The reply to one message (None: the client closed the session)."""
        try:
            kind, data = read_message(raw)
        except BadMessage as e:
            return ws_error(str(e), e.code, e.status)
        try:
            if kind == "reset":
                return await self.reset(data)
            if kind == "step":
                return await self.step(data)
            if kind == "state":
                return {"type": "state", "data": self.state.model_dump()}
            return None
        except EnvError as e:  # the request's fault (an unknown task), a time-out, a full table
            return ws_error(str(e), ERROR_CODES.get(e.status, "EXECUTION_ERROR"), e.status)
        except Exception as e:  # the environment's own fault: this message's 500, the session goes on
            log.exception("environment error in an OpenEnv session")
            return ws_error(env_fault(e), "EXECUTION_ERROR", 500)


ERROR_CODES = {422: "VALIDATION_ERROR", 503: "CAPACITY_REACHED"}  # else EXECUTION_ERROR, with the status


def ws_error(message: str, code: str, status: int, **more) -> dict:
    return {"type": "error", "data": {"message": bounded(message), "code": code, "status": status, **more}}


async def send(ws: WebSocket, message: dict) -> None:
    await ws.send_text(SafeJSONResponse(None).render(message).decode("utf-8"))


async def session(
    ws: WebSocket, table: InstanceTable, splits: dict[str, list[int]], idle_limit: float
) -> None:
    """Serve one connection: its instance lives exactly as long as the socket (a client that goes
    away mid-episode frees it, as one that sends `close` does, or one silent for `idle_limit` s)."""
    await ws.accept()
    if "session_id" in ws.query_params:  # OpenEnv's attach to an MCP session: there are none here
        await send(
            ws,
            ws_error("each connection is its own session; there is none to attach to", "SESSION_ERROR", 404),
        )
        await ws.close(code=1008)
        return
    try:
        instance = await table.create_session()
    except Exception as e:  # a full table (503), a constructor that timed out (504) or raised
        status = e.status if isinstance(e, EnvError) else 500
        extra = {"retry_after": RETRY_AFTER} if status == 503 else {}
        await send(ws, ws_error(f"{e}", ERROR_CODES.get(status, "FACTORY_ERROR"), status, **extra))
        await ws.close(code=1013 if status == 503 else 1011)
        return
    talk = Session(table, instance, splits)
    try:
        while True:
            try:
                message = await asyncio.wait_for(ws.receive(), idle_limit)
            except asyncio.TimeoutError:  # it answers pings and says nothing: its instance goes back
                await table.close(instance)
                said = f"no message for {idle_limit:g} s (--idle-limit): the session is closed"
                await send(ws, ws_error(said, "SESSION_ERROR", 408))
                await ws.close(code=1008)
                return
            if message["type"] == "websocket.disconnect":
                return
            reply = await talk.answer(message.get("text") or message.get("bytes"))
            if reply is None:  # `close`
                return
            await send(ws, reply)
            if instance not in table.envs:  # a time-out dropped the instance: the session is over
                await ws.close(code=1011)
                return
    except (WebSocketDisconnect, RuntimeError):  # gone while we answered (RuntimeError: sent after close)
        return
    finally:
        if instance in table.envs:
            await table.close(instance)
        if ws.application_state != WebSocketState.DISCONNECTED:
            try:
                await ws.close()
            except (WebSocketDisconnect, RuntimeError):  # the client's close crossed ours
                pass


# ---------------------------------------------------------------------------------------------
# The HTTP side: information, the one-off reset, the task API
# ---------------------------------------------------------------------------------------------


def add_openenv(app: FastAPI, name: str, instruction: str | None = None) -> FastAPI:
    """OpenEnv's endpoints on a server built by `servers.common.build_app`, for the environment
    `name` of envs/tasks.py (its splits and its instruction). `instruction`: the agent's system
    prompt for an environment named nowhere in envs/tasks.py (else a generic one, with a warning)."""
    table: InstanceTable = app.state.table
    splits = splits_of(name)

    @app.websocket("/ws")
    async def ws_session(ws: WebSocket):
        await session(ws, table, splits, app.state.idle_limit)

    async def reset_once(body: ResetBody) -> SafeJSONResponse:
        """OpenEnv's HTTP /reset is stateless: an instance made for it, reset, answered, closed."""
        fields = dict(body.model_extra or {})  # OpenEnv's keys, and this dialect's (`idx` is refused)
        fields.update({k: getattr(body, k) for k in body.model_fields_set - {"id", "env_idx"}})
        if fields.keys() - ResetData.model_fields.keys():  # (before pydantic: see read_message)
            raise EnvError(f"OpenEnv's /reset takes only the keys {sorted(ResetData.model_fields)}", 422)
        try:
            data = ResetData.model_validate(fields)
        except ValidationError as e:
            raise EnvError(describe_validation(e.errors()), 422) from None
        task = task_of(data, splits)
        instance = await table.create_session()  # (a key, not a number: no HTTP call can reach it)
        try:
            return SafeJSONResponse(openenv_answer(await table.call(instance, "reset", task)))
        finally:
            if instance in table.envs:
                await table.close(instance)

    app.state.reset_without_instance = reset_once
    add_info(app, name, instruction)
    add_task_api(app, name, splits)
    return app


def add_info(app: FastAPI, name: str, instruction: str | None = None) -> None:
    """/health, /metadata (the agent's instruction as the description), /schema, /state."""
    from envs.tasks import ENVS

    description = instruction or (ENVS[name].instruction if name in ENVS else None)
    if description is None:  # said aloud: `--env openenv` makes the description the system prompt
        description = f"the {app.title} environment"
        log.warning(
            "%r is named nowhere in envs/tasks.py and add_openenv was given no instruction: /metadata "
            "serves %r, which `--env openenv` sends the agent as its instruction; pass "
            "add_openenv(app, %r, instruction=...) or add an EnvSpec to envs/tasks.py",
            name,
            description,
            name,
        )

    @app.get("/health")
    async def health():
        return {"status": "healthy"}

    @app.get("/metadata")
    async def metadata():
        return {"name": name, "description": description, "version": None, "author": None}

    @app.get("/schema")
    async def schema():
        return {
            "action": TextAction.model_json_schema(),
            "observation": TextObservation.model_json_schema(),
            "state": SessionState.model_json_schema(),
        }

    @app.get("/state")
    async def state():  # stateless over HTTP, as OpenEnv's: a fresh instance's state
        return SessionState().model_dump()


class SplitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    split: Annotated[str, Field(max_length=100)]


class TaskRequest(SplitRequest):
    index: Id


class RangeRequest(SplitRequest):
    start: Annotated[int, Field(ge=-(2**31), le=2**31)] | None = None
    stop: Annotated[int, Field(ge=-(2**31), le=2**31)] | None = None


def add_task_api(app: FastAPI, name: str, splits: dict[str, list[int]]) -> None:
    """OpenEnv's task API over the project's splits (its routes are under /{env_name}/)."""

    def ids(env_name: str, split: str) -> list[int]:
        if env_name.lower() != name.lower():
            raise EnvError(f"unknown environment; this server is {name!r}", 404)
        if not splits:
            raise EnvError(f"{name} has no task splits", 501)
        if split not in splits:
            raise EnvError(f"no such split; the splits are {sorted(splits)}")
        return splits[split]

    @app.get("/list_environments")
    async def list_environments():
        return [name]

    @app.get("/{env_name}/splits")
    async def list_splits(env_name: str):
        ids(env_name, next(iter(splits), ""))
        return [{"name": s, "type": split_type(s)} for s in splits]

    @app.post("/{env_name}/tasks")
    async def list_tasks(env_name: str, body: SplitRequest):
        tasks = ids(env_name, body.split)[:MAX_LISTED]
        return {"tasks": [task_spec(body.split, i, d) for i, d in enumerate(tasks)], "env_name": name}

    @app.post("/{env_name}/num_tasks")
    async def num_tasks(env_name: str, body: SplitRequest):
        return {"num_tasks": len(ids(env_name, body.split))}

    @app.post("/{env_name}/task")
    async def get_task(env_name: str, body: TaskRequest):
        tasks = ids(env_name, body.split)
        if body.index >= len(tasks):
            raise EnvError(f"task index {body.index} is outside split {body.split!r} (0..{len(tasks) - 1})")
        return {"task": task_spec(body.split, body.index, tasks[body.index])}

    @app.post("/{env_name}/task_range")
    async def get_task_range(env_name: str, body: RangeRequest):
        tasks = ids(env_name, body.split)
        picked = range(len(tasks))[body.start : body.stop][:MAX_LISTED]
        return {"tasks": [task_spec(body.split, i, tasks[i]) for i in picked]}
