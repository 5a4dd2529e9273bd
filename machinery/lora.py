"""LoRA: train low-rank adapters instead of the policy's weights (Hu et al., 2021, "LoRA: Low-Rank
Adaptation of Large Language Models", eq. 3), through `peft`. The usual way to fit a 7B policy's
RL update on one GPU (see docs/reproduce.md).

Where it sits: `train.py --lora-rank R` wraps the loaded policy with `add_adapters()`; the policy's
optimizer then holds only the adapters. Every linear layer W0 of every block becomes

    h = W0 x + (alpha / r) * B A x,      A: (r, in), B: (out, r), B = 0 at the start,

so the adapted policy starts exactly at the base model, and the frozen reference model of the KL
term is the same network with the adapters switched off (`reference()`): no second copy of the
weights. Checkpoints hold only the adapters (`adapter_config.json`, `adapter_model.safetensors`,
naming the base model); `base_of()` and `load_adapters()` rebuild the policy for `eval.py` and
`--resume`.
"""

import contextlib
import json
import os


def add_adapters(model, rank: int, alpha: float = 0.0, dropout: float = 0.0):
    """Rank-`rank` adapters on every linear layer of the blocks (not the LM head); only they train.
    alpha 0: 2 * rank."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=rank,
        lora_alpha=alpha or 2 * rank,
        lora_dropout=dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, cfg)


def is_adapter(path: str) -> bool:
    """A folder saved from a LoRA-wrapped policy."""
    return os.path.isfile(os.path.join(path, "adapter_config.json"))


def base_of(path: str) -> str:
    """The base model (folder or hub id) that an adapter folder was trained on."""
    with open(os.path.join(path, "adapter_config.json")) as f:
        return json.load(f)["base_model_name_or_path"]


def load_adapters(model, path: str, trainable: bool = False):
    """The base `model` with the adapters saved in `path` (trainable: to continue training)."""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, path, is_trainable=trainable)


def has_adapters(model) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


def reference(model):
    """Context in which `model` is its frozen base (adapters off): the reference policy."""
    return model.disable_adapter() if has_adapters(model) else contextlib.nullcontext()
