"""A test server whose environment misbehaves on request: `step("spin")` loops forever in Python,
`step("sleep")` blocks in a C call for an hour, `step("crash")` raises, a `/create` with
`{"slow": true}` takes 3 s. `GET /threads` counts the environment calls still running."""

import threading
import time

from servers.common import build_app, serve


class HangEnv:
    def __init__(self, slow: bool = False):
        if slow:
            time.sleep(3)

    def reset(self, data_idx):
        return {"observation": f"task {data_idx}", "reward": 0.0, "score": 0.0, "done": False}

    def step(self, action):
        if action == "spin":
            while True:
                pass
        if action == "sleep":
            time.sleep(3600)
        if action == "crash":
            raise RuntimeError("the environment broke")
        if action == "finish":
            return {"observation": "finished", "reward": 1.0, "score": 1.0, "done": True}
        return {"observation": action, "reward": 0.0, "score": 0.0, "done": False}

    def observation(self):
        return ""

    def close(self):
        pass


app = build_app("Hang", HangEnv, create_keys=("slow",))


@app.get("/threads")
def threads():
    return sum(t.name == "env-call" for t in threading.enumerate())


@app.get("/instances")
def instances():
    return len(app.state.table)


if __name__ == "__main__":
    import sys

    if "--inline" in sys.argv:  # steps on the event loop's own thread, under the watchdog (run_inline)
        sys.argv.remove("--inline")
        app.state.table.inline = True
    serve(app)
