"""Seeds and random streams: what makes a run repeat exactly, and a resumed run continue exactly.

Where it sits: train.py and sft.py call `seed_everything(--seed)` first; a checkpoint keeps every
process's `rng_state()` (machinery/checkpoint.py) and --resume puts it back with `set_rng_state`.
"""

import random

import numpy as np
import torch


def seed_everything(seed: int):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Every random stream a step draws from: python's (tasks), numpy's, torch's CPU generator and,
    on a GPU, this process's CUDA generator (torch.multinomial samples there)."""
    s = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        s["cuda"] = torch.cuda.get_rng_state()
    return s


def set_rng_state(s: dict):
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state(s["cuda"])
