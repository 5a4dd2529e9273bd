"""The mission-binding probe's command line (the probe itself: probe.py).

python benchmarks/binding_probe.py --model runs/default/checkpoint --states 200
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from config import AgentConfig, load_agent  # noqa: E402
from diagnostics.probe import binding, collect_states, probe_tasks  # noqa: E402
from envs import close_pool, open_pool  # noqa: E402

if __name__ == "__main__":
    p = argparse.ArgumentParser(description="The mission-binding probe of a BabyAI policy.")
    p.add_argument("--model", default="tiny", help="tiny or a train.py checkpoint")
    p.add_argument("--states", type=int, default=200, help="held-out GoToLocal test tasks to read")
    args = p.parse_args()
    policy = load_agent(AgentConfig(model=args.model), "cpu")
    pool = open_pool("babyai", size=min(64, args.states))
    try:
        states = collect_states(pool, probe_tasks(args.states))
    finally:
        close_pool(pool)
    print(binding(policy, states))
