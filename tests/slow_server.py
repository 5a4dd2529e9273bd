"""A test server whose every step takes 0.3 s: shows whether the pool's round trips overlap."""

import time

from servers.common import build_app, serve


class SlowEnv:
    def reset(self, data_idx):
        return {"observation": f"task {data_idx}", "reward": 0.0, "score": 0.0, "done": False}

    def step(self, action):
        time.sleep(0.3)
        return {"observation": action, "reward": 0.0, "score": 0.0, "done": False}

    def observation(self):
        return ""

    def close(self):
        pass


app = build_app("Slow", SlowEnv)

if __name__ == "__main__":
    serve(app)
