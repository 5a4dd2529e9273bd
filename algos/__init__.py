"""The algorithm table: name -> `algorithm.Algorithm`, the one place that names them.

Where it sits: `train.py --algo NAME` runs `ALGOS[NAME]`; `view.py --credit` reruns their
advantages on saved episodes. `Settings` is every algorithm's own knobs joined into one dataclass
(`algorithm.settings_class`), which train.Config extends: each field becomes a flag.

Adding an algorithm: write `my_algo.py` that builds an `Algorithm` (its advantages, its loss, and
a `Settings` dataclass for its own knobs, if any), then import it here and give it its line below.
No other file changes (tests/test_house.py adds one this way).

Why a folder of one file: the table imports every algorithm file and each of them imports
`algorithm.py`, so the table cannot sit inside the interface without an import circle; as
`algos/` it stays off the root's reading list of concepts and is still imported as `algos`.
"""

import gigpo
import grpo
import ppo
import reinforce_pp
from algorithm import settings_class

ALGOS = {
    "grpo": grpo.GRPO,
    "rloo": grpo.RLOO,
    "ppo": ppo.PPO,
    "reinforce_pp": reinforce_pp.REINFORCE_PP,
    "gigpo": gigpo.GIGPO,
}

Settings = settings_class(ALGOS.values())
