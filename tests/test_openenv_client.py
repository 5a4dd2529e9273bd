"""envs/openenv.py's pool keeps its slots usable: a session the server closed while it waited is
opened afresh at the slot's next reset. A pool holds a slot per evaluation episode, so most of its
sessions wait through the whole training run, longer than a server's idle limit (servers/openenv.py,
`--idle-limit`, 600 s by default)."""

import time

from envs import EnvServer
from envs.openenv import OpenEnvPool


def test_a_session_closed_for_idling_is_reopened_at_the_next_reset():
    server = EnvServer("exercises.find_it", args=["project", "--idle-limit", "0.5"]).start()
    pool = OpenEnvPool(server.url.replace("http", "ws"), size=1)
    try:
        first = pool.reset([0], [5])[0]
        time.sleep(1.5)  # the server closes the silent session (SESSION_ERROR, then 1008)
        again = pool.reset([0], [5])[0]
    finally:
        pool.close()
        server.stop()
    assert "error" not in first and "error" not in again, again.get("error")
    assert again["observation"] == first["observation"] == "Find the coin. It is in the red box."
