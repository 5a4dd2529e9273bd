"""Problem 10's cases: an environment the student wrote, played and judged. Don't read it before you
try: it holds the cases.

Where it sits: cases.py registers problem 10 with `env_cases` and `judge`; check.py runs them as it
runs every problem's. An environment has no one right answer to compare with, so a case judges a
property: `judge(env, inputs)` plays episodes on `env` (the student's module, or anything with its
names: Game, project_app, openenv_app) and returns AGREES when the property holds, else a sentence
that says where it broke with every episode it played in full. The reference (exercises/find_it.py)
gives AGREES on every case, so the checker's "expected" is that word and "got" the sentence.

An episode is a list: the reset's (observation, reward, done), then per step (action, observation,
reward, done), each as the environment answered it.
"""

import math
import re

AGREES = "the property holds"
MAX_STEPS = 20  # the contract's bound on an episode, whatever the actions (text that is no action too)
NONSENSE = ["dance", "", "42"]  # replies that are no action in any game
ANSWER_KEYS = {"observation": str, "reward": (int, float), "done": bool, "available_actions": list}


def env_cases(Case) -> list:
    """Problem 10's cases, each a `Case` (cases.py's, handed in: cases.py imports this file)."""
    case = lambda what, prop, tasks, actions, needs="": Case(  # noqa: E731
        what, dict(property=prop, tasks=tasks, actions=actions, max_steps=MAX_STEPS), needs
    )
    return game_cases(case) + served_cases(case)


def game_cases(case) -> list:
    """The Game's own properties, played in this process."""
    ten = list(range(10))
    expert = "the expert's: Game.expert()['action'], each turn"
    firsts = "the first available action, each turn"
    return [
        case(
            "every answer has observation (str), reward (a number), done (bool), available_actions "
            "(a list of str); observation() repeats the last observation ('' before any reset); the "
            "expert's action is available; on tasks as the trainer numbers them (its seeds: train "
            "0-9999, test 10000-10199)",
            "answers",
            [0, 1, 2, 9_999, 10_199],
            expert,
        ),
        case(
            "the expert solves every task: done within the bound, its rewards adding up to 1",
            "solves",
            ten,
            expert,
        ),
        case(
            "the same task twice, played the same way, on a fresh Game and on a Game that played task "
            "3 first: the same episode",
            "twice",
            [7, 3],
            f"{expert}; then {firsts}; then the last available action, each turn",
        ),
        case(
            "tasks 0 to 9 are ten different tasks: task a's expert actions, played on task b, do not "
            "play the same episode as on task a",
            "differ",
            ten,
            "task a's expert's actions, replayed",
        ),
    ] + end_cases(case)


def end_cases(case) -> list:
    """How an episode ends and what it pays: the bound, the rewards, after done, no leak."""
    ten = list(range(10))
    expert = "the expert's: Game.expert()['action'], each turn"
    firsts = "the first available action, each turn"
    return [
        case(
            "every episode ends within the bound, whatever the actions: available ones that need not "
            "solve the task, and text that is no action",
            "ends",
            ten,
            f"{firsts}; then the last available action, each turn; then 'dance', each turn",
        ),
        case(
            "every reward is in [0, 1] and an episode's rewards add up to at most 1; an episode that "
            "never takes the expert's action fails, its rewards adding up to 0 (the trainer counts "
            "an episode whose rewards add up to more than 0 a success), on every task",
            "rewards",
            ten,
            "a wrong available action (one the expert would not take), then the expert's; "
            f"'dance', '', '42', then the expert's; {firsts}; the last available one; each turn an "
            "available action other than the expert's",
        ),
        case(
            "a step after done changes nothing: it answers done True and reward 0, as this project's "
            "servers do (the winning action sent again pays nothing)",
            "after_done",
            [0, 1, 2],
            f"the expert's, then {firsts}, until done; then the last action again, and 'dance'",
        ),
        case(
            "no observation writes the answer: on tasks 0 to 9, an observation that names the "
            "expert's next action, and no other available action, lets the agent copy instead of play",
            "no_leak",
            ten,
            expert,
        ),
    ]


def served_cases(case) -> list:
    """The Game through each server, over the wire's messages (FastAPI's TestClient, in process)."""
    return [
        case(
            "served as a server of this project (project_app()): two episodes at once answer as Game "
            "does, over /create, /reset and /step and over OpenEnv's WebSocket",
            "project",
            [4, 9],
            "each task's expert's, the two episodes stepped in turn",
        ),
        case(
            "served through OpenEnv's own server code (openenv_app()): two sessions at once over its "
            "WebSocket, reset with {'seed': task}, answer as Game does",
            "openenv",
            [2, 6],
            "each task's expert's, the two sessions stepped in turn",
            needs="openenv",
        ),
        case(
            "OpenEnv's server (openenv_app()) holds 200 sessions at once (eval.py opens one per test "
            "task, 200): each answers its reset with {'seed': task}",
            "sessions",
            list(range(10_000, 10_200)),
            "none: a reset per session, all sessions open",
            needs="openenv",
        ),
    ]


def judge(env, inputs) -> str:
    return JUDGES[inputs["property"]](env, inputs["tasks"], inputs["max_steps"])


# --- playing an episode ----------------------------------------------------------------------------


def expert(game, answer, k):
    return game.expert()["action"]


def first(game, answer, k):
    return answer["available_actions"][0]


def last(game, answer, k):
    return answer["available_actions"][-1]


def nonsense(game, answer, k):
    return "dance"


def other_than_expert(game, answer, k):
    """An available action the expert would not take now ('dance' when there is none)."""
    right = " ".join(game.expert()["action"].split())
    others = [a for a in answer["available_actions"] if " ".join(a.split()) != right]
    return others[0] if others else "dance"


def wrong_then_expert(game, answer, k):
    return other_than_expert(game, answer, k) if k == 0 else expert(game, answer, k)


def nonsense_then_expert(game, answer, k):
    return NONSENSE[k] if k < len(NONSENSE) else expert(game, answer, k)


def replay(actions):
    return lambda game, answer, k: actions[k] if k < len(actions) else None


def play(game, task, policy, max_steps) -> list:
    """One episode of `policy` (game, last answer, turn -> action, None to stop) on `game`."""
    answer = attempt(game.reset, (task,), f"task {task}: reset({task})")
    episode = [(answer["observation"], answer["reward"], answer["done"])]
    for k in range(max_steps):
        if answer["done"]:
            break
        action = attempt(policy, (game, answer, k), f"task {task}: choosing an action", episode)
        if action is None:
            break
        answer = attempt(game.step, (action,), f"task {task}: step({action!r})", episode)
        episode.append((action, answer["observation"], answer["reward"], answer["done"]))
    return episode


def attempt(fn, args: tuple, what: str, episode=()):
    """fn(*args), a raise named with what was called and the episode so far."""
    try:
        return fn(*args)
    except Exception as e:
        raise RuntimeError(
            f"{what} raised {type(e).__name__}: {e}; the episode so far: {list(episode)}"
        ) from e


def actions_of(episode) -> list[str]:
    return [step[0] for step in episode[1:]]


def rewards_of(episode) -> list:
    return [episode[0][1]] + [step[2] for step in episode[1:]]


# --- the properties ----------------------------------------------------------------------------------


def answers(env, tasks, max_steps) -> str:
    if env.Game().observation() != "":
        return f"a new Game's observation() gave {env.Game().observation()!r} before any reset"
    for task in tasks:
        game = env.Game()
        answer = attempt(game.reset, (task,), f"task {task}: reset({task})")
        for k in range(2):
            wrong = ill_formed(answer)
            if wrong:
                return f"task {task}, {'reset' if k == 0 else 'the first step'} answered {answer!r}: {wrong}"
            if game.observation() != answer["observation"]:
                return f"task {task}: observation() gave {game.observation()!r} after the answer {answer!r}"
            if answer["done"]:
                break
            action = game.expert()["action"]
            if action not in answer["available_actions"]:
                return f"task {task}: the expert said {action!r}, not among {answer['available_actions']!r}"
            answer = game.step(action)
    return AGREES


def ill_formed(answer) -> str:
    if not isinstance(answer, dict):
        return "not a dict"
    for key, kind in ANSWER_KEYS.items():
        if key not in answer:
            return f"no {key!r}"
        if not isinstance(answer[key], kind) or (key == "reward" and isinstance(answer[key], bool)):
            return f"its {key!r} is a {type(answer[key]).__name__}"
    if not all(isinstance(a, str) for a in answer["available_actions"]):
        return "an available action is not a str"
    return ""


def solves(env, tasks, max_steps) -> str:
    for task in tasks:
        episode = play(env.Game(), task, expert, max_steps)
        if not episode[-1][-1]:
            return f"task {task}: the expert's episode is not done after {max_steps} steps: {episode}"
        total = sum(rewards_of(episode))
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            return f"task {task}: the expert's episode is done, its rewards adding up to {total}: {episode}"
    return AGREES


def twice(env, tasks, max_steps) -> str:
    task, other = tasks
    for name, policy in (("the expert", expert), ("the first available action", first), ("the last", last)):
        once = play(env.Game(), task, policy, max_steps)
        again = play(env.Game(), task, replay(actions_of(once)), max_steps)
        if again != once:
            return f"task {task}, {name}: a fresh Game played {once}, and another fresh Game {again}"
        used = env.Game()
        before = play(used, other, policy, max_steps)
        after = play(used, task, replay(actions_of(once)), max_steps)
        if after != once:
            return (
                f"task {task}, {name}: a fresh Game played {once}; a Game that played task {other} "
                f"first ({before}) played {after}"
            )
    return AGREES


def differ(env, tasks, max_steps) -> str:
    for a in tasks:
        own = play(env.Game(), a, expert, max_steps)
        for b in tasks:
            there = play(env.Game(), b, replay(actions_of(own)), max_steps)
            if b != a and there == own:
                return f"tasks {a} and {b} play the same episode with task {a}'s expert actions: {own}"
    return AGREES


def ends(env, tasks, max_steps) -> str:
    policies = (("the first available action", first), ("the last available action", last))
    for task in tasks:
        for name, policy in (*policies, ("'dance', no action", nonsense)):
            episode = play(env.Game(), task, policy, max_steps)
            if not episode[-1][-1]:
                return f"task {task}, {name} each turn: not done after {max_steps} steps: {episode}"
    return AGREES


def rewards(env, tasks, max_steps) -> str:
    policies = {
        "a wrong action, then the expert's": wrong_then_expert,
        "'dance', '', '42', then the expert's": nonsense_then_expert,
        "the first available action": first,
        "the last available action": last,
    }
    for task in tasks:
        for name, policy in policies.items():
            episode = play(env.Game(), task, policy, max_steps)
            got = rewards_of(episode)
            if any(not 0.0 <= r <= 1.0 for r in got) or sum(got) > 1.0 + 1e-9:
                return f"task {task}, {name}: rewards {got}, adding up to {sum(got)}: {episode}"
        episode = play(env.Game(), task, other_than_expert, max_steps)
        if sum(rewards_of(episode)) != 0:
            return (
                f"task {task}, never the expert's action: a failed episode whose rewards add up to "
                f"{sum(rewards_of(episode))}, which the trainer counts a success (more than 0): {episode}"
            )
    return AGREES


def after_done(env, tasks, max_steps) -> str:
    for task in tasks:
        for name, policy in (("the expert", expert), ("the first available action", first)):
            game = env.Game()
            episode = play(game, task, policy, max_steps)
            if not episode[-1][-1]:
                continue  # (an episode that never ends is the 'ends' case's)
            for action in (actions_of(episode) or ["dance"])[-1:] + ["dance"]:
                answer = attempt(game.step, (action,), f"task {task}: step({action!r}) after done", episode)
                wrong = ill_formed(answer)
                if wrong or not answer["done"] or answer["reward"] != 0:
                    return (
                        f"task {task}, {name}: after the episode {episode} was done, step({action!r}) "
                        f"answered {answer!r}" + (f": {wrong}" if wrong else "")
                    )
    return AGREES


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def written_in(action: str, text: str) -> bool:
    """Whether `action`'s words stand in `text`, in order and side by side."""
    a, t = words(action), words(text)
    return bool(a) and any(t[i : i + len(a)] == a for i in range(len(t) - len(a) + 1))


def no_leak(env, tasks, max_steps) -> str:
    """Detectable where the answer is words: the expert's action written in the observation it
    answers, while no other available action is. A leak on every task, with different answers, fails."""
    leaks = {}
    for task in tasks:
        game = env.Game()
        answer = attempt(game.reset, (task,), f"task {task}: reset({task})")
        for _ in range(max_steps):
            if answer["done"]:
                break
            action = attempt(game.expert, (), f"task {task}: expert()")["action"]
            others = [a for a in answer["available_actions"] if words(a) != words(action)]
            if written_in(action, answer["observation"]) and not any(
                written_in(a, answer["observation"]) for a in others
            ):
                leaks[task] = (answer["observation"], action)
                break
            answer = attempt(game.step, (action,), f"task {task}: step({action!r})")
    if len(leaks) == len(tasks) and len({tuple(words(a)) for _, a in leaks.values()}) > 1:
        shown = "; ".join(f"task {t}: {o!r} before the expert's {a!r}" for t, (o, a) in leaks.items())
        return (
            f"on every task an observation writes the expert's next action, and no other available "
            f"action: {shown}. The agent can learn to copy it, and held-out success would measure "
            "copying: keep the answer out of every observation (a clue the agent must work on is the game)"
        )
    return AGREES


# --- the served forms --------------------------------------------------------------------------------


def served(env, tasks, way: str, max_steps) -> str:
    """Both tasks' expert episodes through the app `way` builds, stepped in turn, against Game's:
    a server of this project in its own dialect and in OpenEnv's, OpenEnv's server in its own."""
    from fastapi.testclient import TestClient

    wanted = {t: play(env.Game(), t, expert, max_steps) for t in tasks}
    try:
        app = getattr(env, way)()
    except NotImplementedError:
        return f"{way} is not written yet (it raises NotImplementedError)"
    except ImportError as e:
        return f"{way} could not import {e.name}: pip install --no-deps -r requirements-openenv.txt"
    dialects = {"its own dialect": over_http, "OpenEnv's": over_openenv} if way == "project_app" else {}
    for dialect, talk in (dialects or {"OpenEnv's": over_openenv}).items():
        with TestClient(app) as client:
            got = conversation(talk(client, tasks), wanted)
        for t in tasks:
            if got[t] != wanted[t]:
                return f"task {t}: Game played {wanted[t]}; {way}() served, in {dialect}, {got[t]}"
    return AGREES


def conversation(talk, wanted: dict) -> dict:
    """Each task's episode through `talk`, replaying the actions of `wanted`, the episodes in turn."""
    tasks = list(wanted)
    got = {t: [] for t in tasks}
    for t, answer in zip(tasks, talk.send(None)):
        got[t].append(answer)
    for k in range(max(len(e) for e in wanted.values()) - 1):
        live = [t for t in tasks if k + 1 < len(wanted[t])]
        for t, answer in zip(live, talk.send([(t, wanted[t][k + 1][0]) for t in live])):
            got[t].append((wanted[t][k + 1][0], *answer))
    talk.close()
    return got


def over_http(client, tasks):
    """A conversation with a server of this project: sent [(task, action)], answers (obs, reward, done)."""

    def post(path, body):
        answer = client.post(path, json=body)
        if answer.status_code != 200:
            raise RuntimeError(f"POST {path} {body} answered {answer.status_code}: {answer.text}")
        return answer.json()

    ids = {t: post("/create", {})["id"] for t in tasks}
    plain = lambda a: (a["observation"], a["reward"], a["done"])  # noqa: E731
    steps = yield [plain(post("/reset", {"id": ids[t], "data_idx": t})) for t in tasks]
    while True:
        steps = yield [plain(post("/step", {"id": ids[t], "action": a})) for t, a in steps]


def over_openenv(client, tasks):
    """The same through OpenEnv's WebSocket, read as envs/openenv.py reads it."""
    from envs.openenv import OpenEnvInfo, read_observation, text_fields

    schema = client.get("/schema")
    if schema.status_code != 200:
        raise RuntimeError(f"GET /schema answered {schema.status_code}: the app speaks no OpenEnv")
    schema = schema.json()
    (field,) = text_fields(schema["action"], ("metadata",))
    texts = text_fields(schema.get("observation", {}), ("metadata",))
    info = OpenEnvInfo("", field, texts[0] if len(texts) == 1 else None, "", ())
    sockets = {t: client.websocket_connect("/ws").__enter__() for t in tasks}

    def ask(t, message):
        sockets[t].send_json(message)
        answer = sockets[t].receive_json()
        if answer.get("type") != "observation":
            raise RuntimeError(f"the WebSocket message {message} was answered {answer}")
        a = read_observation(info, answer.get("data", {}))
        return (a["observation"], a["reward"], a["done"])

    try:
        steps = yield [ask(t, {"type": "reset", "data": {"seed": t}}) for t in tasks]
        while True:
            steps = yield [ask(t, {"type": "step", "data": {field: a}}) for t, a in steps]
    finally:
        for ws in sockets.values():
            ws.__exit__(None, None, None)


def sessions(env, tasks, max_steps) -> str:
    """One OpenEnv session per task, all open at once, each reset to its task."""
    from fastapi.testclient import TestClient

    try:
        app = env.openenv_app()
    except NotImplementedError:
        return "openenv_app is not written yet (it raises NotImplementedError)"
    with TestClient(app) as client:
        opened = [client.websocket_connect("/ws") for _ in tasks]
        sockets = [ws.__enter__() for ws in opened]
        try:
            for t, ws in zip(tasks, sockets):
                ws.send_json({"type": "reset", "data": {"seed": t}})
            answers = [ws.receive_json() for ws in sockets]
        finally:
            for ws in sockets:
                ws.__exit__(None, None, None)
    for t, answer in zip(tasks, answers):
        if answer.get("type") != "observation":
            return f"the session reset with {{'seed': {t}}}, of {len(tasks)} open, was answered {answer}"
    return AGREES


JUDGES = {
    "answers": answers,
    "solves": solves,
    "twice": twice,
    "differ": differ,
    "ends": ends,
    "rewards": rewards,
    "after_done": after_done,
    "no_leak": no_leak,
    "project": lambda env, tasks, max_steps: served(env, tasks, "project_app", max_steps),
    "openenv": lambda env, tasks, max_steps: served(env, tasks, "openenv_app", max_steps),
    "sessions": sessions,
}
