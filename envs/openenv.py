"""Any OpenEnv environment as the agent sees it: `--env openenv --url ws://host:port`.

Where it sits: beside the HTTP client and pool of envs/__init__.py, which hands `--env openenv` here
(`env_spec`, `open_pool`): `agent.py` rolls out through an `OpenEnvPool` exactly as through an
`EnvPool`. OpenEnv (the `openenv` package; TRL's environments and OpenEnv's hub speak it) serves an
environment as a WebSocket session per episode (`/ws`: reset, step, state, close messages) beside
HTTP endpoints that describe it (`/schema`, `/metadata`) and, optionally, a task API with splits.
This file speaks that wire protocol itself, a few messages over `websockets`: nothing here imports
the `openenv` package or its dependencies (tests/test_openenv_train.py checks it).

    describe(url)   what the server says about itself, once: the action's text field (the one
                    string field of `/schema`'s action), the observation's text field (the one
                    string field of its observation), the instruction (`/metadata`'s description)
                    and its splits (task API: GET /list_environments, /<name>/splits, POST
                    /<name>/num_tasks).
    spec_of(info)   an EnvSpec: each split's tasks numbered one after another (split 1's n tasks
                    are task ids 0..n-1, split 2's follow), so that a task id is (split, index)
                    and reset sends {"split", "index"}; without a task API, a task id is a seed,
                    {"seed": id} (train 0-9999, test 10000-10199, val 10200-10299, as BabyAI's).
                    The whole reply is the action (the server parses it); the outcome is the sum
                    of the step rewards (or the observation's `score`), a success above 0 (as
                    BabyAI's, whose reward for a success shrinks with its steps; an environment
                    of partial credit, as SciWorld's score, counts any progress).
    OpenEnvPool     EnvPool's interface (reset, step, close) over one WebSocket per slot, all slots
                    in flight at once on a thread pool. The observation's text is the user's message,
                    its other fields (e.g. `available_actions`, for action masking) ride along; a
                    failed session (the server's `{"type": "error"}` answer, a broken or silent
                    socket) ends that episode with `error` set and is opened afresh at the next
                    reset, as EnvPool does with a failed request. Only such a failure sets `error`:
                    an observation's own field of that name (BrowserGym's: the last action's fault)
                    rides along as `observation_error`, since the trainer leaves an episode with
                    `error` out of the update and the success rate. A slot's session that the
                    server closed while it waited (its idle limit) is opened afresh at its reset.

Two runs of one command repeat each other: the sockets send no keepalive pings. websockets' client
pings every 20 s from a background thread, each ping's payload drawn from Python's global `random`,
the stream train.py draws each step's tasks from: how many pings fell between two steps depended on
the clock, and runs parted after their first 20 s (tests/test_openenv_repeats.py). A dead server
still ends the episode: every answer is awaited at most `timeout` seconds.
"""

import bisect
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

import requests
from websockets.exceptions import WebSocketException
from websockets.protocol import State
from websockets.sync.client import connect

from envs.tasks import EnvSpec, whole_reply

SEED_SPLITS = {"train": range(0, 10_000), "test": range(10_000, 10_200), "val": range(10_200, 10_300)}
CLOSE = json.dumps({"type": "close"})


@dataclass(frozen=True)
class OpenEnvInfo:
    url: str  # http(s):// base of the server
    action_field: str  # the action's text field: {action_field: reply}
    text_field: str | None  # the observation's text field (None: the observation shown as JSON)
    instruction: str
    splits: tuple[tuple[str, int], ...]  # (name, number of tasks), in the server's order; () no task API


def http_url(url: str) -> str:
    """ws(s)://host:port[/ws] -> http(s)://host:port."""
    url = url.rstrip("/").removesuffix("/ws")
    return "http" + url[2:] if url.startswith("ws") else url


def text_fields(schema: dict, skip: tuple[str, ...]) -> list[str]:
    """The string-typed fields of a JSON schema (required ones first), except `skip`."""
    props, required = schema.get("properties", {}), schema.get("required", [])
    strings = [k for k, v in props.items() if k not in skip and v.get("type") == "string"]
    return sorted(strings, key=lambda k: k not in required)


@lru_cache(maxsize=None)  # asked once per address: the spec (env_spec) and the pool (open_pool) both read it
def describe(url: str, timeout: float = 30.0) -> OpenEnvInfo:
    """What the OpenEnv server at `url` says about itself (see the module's docstring)."""
    base = http_url(url)
    get = lambda path: requests.get(base + path, timeout=timeout)  # noqa: E731
    answer = get("/schema")
    if answer.status_code != 200 or "action" not in answer.json():
        raise ValueError(f"no OpenEnv environment at {url}: GET /schema answers {answer.status_code}")
    schema = answer.json()
    actions = text_fields(schema["action"], ("metadata",))
    if len(actions) != 1:
        raise ValueError(
            f"the OpenEnv environment at {url} takes actions with the text fields {actions}: "
            "--env openenv sends the reply as an action's one text field"
        )
    texts = text_fields(schema.get("observation", {}), ("metadata",))
    meta = get("/metadata")
    instruction = meta.json().get("description", "") if meta.status_code == 200 else ""
    return OpenEnvInfo(
        base, actions[0], texts[0] if len(texts) == 1 else None, instruction, task_splits(base, get)
    )


def task_splits(base: str, get) -> tuple[tuple[str, int], ...]:
    """(split, number of tasks) from OpenEnv's task API; () when the server has none."""
    listed = get("/list_environments")
    if listed.status_code != 200 or not listed.json():
        return ()
    name = listed.json()[0]
    splits = get(f"/{name}/splits")
    if splits.status_code != 200:  # 501: the environment has no task methods
        return ()
    return tuple((s["name"], count_tasks(base, name, s["name"])) for s in splits.json())


def count_tasks(base: str, name: str, split: str) -> int:
    """The number of tasks in `split`: POST /<name>/num_tasks, or, for an environment that lists its
    splits without `num_tasks` (OpenEnv answers 501), the length of its listing (POST /<name>/tasks);
    a ValueError naming what is missing when it has neither."""
    said = []
    for path in ("num_tasks", "tasks"):  # {"num_tasks": n}, {"tasks": [...]}
        answer = requests.post(f"{base}/{name}/{path}", json={"split": split}, timeout=30)
        body = answer.json() if answer.status_code == 200 else None
        found = body.get(path) if isinstance(body, dict) else None
        if path == "num_tasks" and isinstance(found, int) and not isinstance(found, bool):
            return found
        if path == "tasks" and isinstance(found, list):
            return len(found)
        said.append(f"POST /{name}/{path} answers {answer.status_code}")
    raise ValueError(
        f"the OpenEnv environment at {base} lists the split {split!r} but does not say how many tasks "
        f"it holds ({'; '.join(said)}): give the environment `num_tasks(split)` (or `list_tasks(split)`)"
    )


def spec_of(info: OpenEnvInfo) -> EnvSpec:
    if info.splits:
        firsts = first_ids(info)
        splits = {name: list(range(first, first + n)) for (name, n), first in zip(info.splits, firsts)}
    else:
        splits = {name: list(ids) for name, ids in SEED_SPLITS.items()}
    return EnvSpec(
        name="openenv",
        module="",  # (no local server: --url is required)
        splits=splits,
        instruction=info.instruction,
        parse_action=whole_reply,
        success_at=1e-6,  # any positive outcome
    )


def first_ids(info: OpenEnvInfo) -> list[int]:
    """The first task id of each split (the splits' tasks numbered one after another)."""
    out, n = [], 0
    for _, count in info.splits:
        out.append(n)
        n += count
    return out


def reset_data(info: OpenEnvInfo, task: int) -> dict:
    """The reset message's data for task id `task`: its (split, index), or a seed."""
    if not info.splits:
        return {"seed": task}
    firsts = first_ids(info)
    k = bisect.bisect_right(firsts, task) - 1
    return {"split": info.splits[k][0], "index": task - firsts[k]}


def read_observation(info: OpenEnvInfo, data: dict) -> dict:
    """OpenEnv's {"observation": {...}, "reward", "done"} in the one shape the agent reads."""
    observation = dict(data.get("observation") or {})
    if info.text_field is not None:
        text = str(observation.pop(info.text_field, ""))
    else:
        text = json.dumps(observation, ensure_ascii=False)
    if "error" in observation:  # the observation's own word (a wrong action's), not a failed session
        observation["observation_error"] = observation.pop("error")
    return {
        **observation,
        "observation": text,
        "reward": float(data.get("reward") or 0.0),
        "done": bool(data.get("done")),
    }


class OpenEnvPool:
    """`size` OpenEnv sessions (one WebSocket each), reset and stepped concurrently."""

    def __init__(self, url: str, size: int = 1, timeout: float = 60.0):
        self.info, self.timeout = describe(url), timeout
        self.url, self.server = url, None  # (EnvPool's fields that train.py and close_pool read)
        self.sockets: list = [None] * size
        self.executor = ThreadPoolExecutor(max_workers=min(64, max(1, size)))

    def __len__(self):
        return len(self.sockets)

    def _ask(self, slot: int, message: dict) -> dict:
        """Send one message on the slot's session (opened if need be) and read its answer; an error
        ends the episode with `error` set and drops the session (a new one opens at the next reset)."""
        try:
            self._open(slot, fresh=message["type"] == "reset")
            self.sockets[slot].send(json.dumps(message))
            answer = json.loads(self.sockets[slot].recv(timeout=self.timeout))
            if answer.get("type") == "error":
                raise RuntimeError(self._explain(answer))
            return read_observation(self.info, answer.get("data", {}))
        except (WebSocketException, OSError, TimeoutError, RuntimeError, ValueError) as e:
            said = self._last_word(slot) or str(e)  # OpenEnv's "Server at capacity", not "received 1000 (OK)"
            self._drop(slot)
            return {"observation": f"[environment error: {said}]", "reward": 0.0, "done": True, "error": said}

    def _open(self, slot: int, fresh: bool) -> None:
        """The slot's session, opened if it has none; `fresh` (a reset): also if the server closed it
        meanwhile (its idle limit: a slot that only the evaluations use waits through the training)."""
        if fresh and self.sockets[slot] is not None and self.sockets[slot].state is not State.OPEN:
            self._drop(slot)
        if self.sockets[slot] is None:
            ws_url = self.info.url.replace("http", "ws", 1) + "/ws"
            self.sockets[slot] = connect(  # no keepalive pings: they draw from `random` (the docstring)
                ws_url, open_timeout=self.timeout, max_size=None, ping_interval=None, legacy=True
            )

    def _last_word(self, slot: int) -> str | None:
        """The error the server sent before it closed the session (OpenEnv closes a session it has no
        room for right after saying so), if one is waiting on the socket."""
        try:
            answer = json.loads(self.sockets[slot].recv(timeout=0))
        except Exception:  # nothing waiting, or not a message: the exception said it all
            return None
        return self._explain(answer) if answer.get("type") == "error" else None

    def _explain(self, answer: dict) -> str:
        """An error message of the server's, with the fix when it is out of sessions (the message
        comes as an answer, or waits on a socket the server closed before the request was sent)."""
        message = answer.get("data", {}).get("message", "error")
        if answer.get("data", {}).get("code") == "CAPACITY_REACHED":
            message += (
                f" (this pool opened {len(self.sockets)} sessions: fewer episodes at once, e.g. --parallel)"
            )
        return message

    def _drop(self, slot: int) -> None:
        ws, self.sockets[slot] = self.sockets[slot], None
        if ws is not None:
            ws.close()

    def reset(self, slots: list[int], tasks: list[int]) -> list[dict]:
        data = [reset_data(self.info, t) for t in tasks]
        return list(self.executor.map(lambda s, d: self._ask(s, {"type": "reset", "data": d}), slots, data))

    def step(self, slots: list[int], actions: list[str]) -> list[dict]:
        field = self.info.action_field
        return list(
            self.executor.map(lambda s, a: self._ask(s, {"type": "step", "data": {field: a}}), slots, actions)
        )

    def expert(self, slots: list[int]) -> list[dict]:
        raise ValueError(
            "an OpenEnv environment has no expert (POST /expert is this project's servers' call)"
        )

    def close(self, free: bool = True) -> None:
        """Ends every session (`close`, then the socket: the server frees its instance)."""
        for slot, ws in enumerate(self.sockets):
            if ws is not None:
                try:
                    ws.send(CLOSE)
                except WebSocketException:
                    pass
                self._drop(slot)
        self.executor.shutdown(wait=False)
