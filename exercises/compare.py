"""How the checker says what is wrong: compare what came back with what was expected, in words.

Where it sits: `check.py` runs each case twice (the project's function, the student's) and asks
`difference(expected, got)` for the first place they part, as one sentence, its values in full;
None when they agree. Tensors agree to 1e-5 (an all-equal GRPO group must give 0 to 1e-5, not float32 noise).
"""

import math
from dataclasses import fields, is_dataclass

import torch

ATOL = RTOL = 1e-5
WINDOW = 8  # items shown on each side of a difference in a long list


def show(x) -> str:
    """A readable form of a value, in full (a message or a row cut short hides what differs):
    tensors and floats to 6 digits."""
    if torch.is_tensor(x):
        return f"tensor({show(x.tolist())}, dtype={x.dtype})" if x.dim() else f"{x.item():.6g}"
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(show(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {show(v)}" for k, v in x.items()) + "}"
    if hasattr(x, "__dict__") and not callable(x):  # a minibatch stand-in: its fields
        return f"{type(x).__name__}({', '.join(f'{k}={show(v)}' for k, v in vars(x).items())})"
    return repr(x)


def difference(expected, got, where: str = "") -> str | None:
    """The first place `got` differs from `expected`, as a sentence; None when they agree."""
    at = f"{where}: " if where else ""
    if torch.is_tensor(expected):
        return _tensors(expected, got, at)
    if is_dataclass(expected):
        if type(got).__name__ != type(expected).__name__:
            return f"{at}expected a {type(expected).__name__}, got {show(got)}"
        for f in fields(expected):
            found = difference(
                getattr(expected, f.name), getattr(got, f.name), f"{where}.{f.name}".lstrip(".")
            )
            if found:
                return found
        return None
    if isinstance(expected, dict):
        for key in expected:
            if not isinstance(got, dict) or key not in got:
                return f"{at}expected {key!r} in {show(got)}"
            found = difference(expected[key], got[key], f"{where} {key}".strip())
            if found:
                return found
        return None
    if isinstance(expected, (list, tuple)):
        return _sequences(expected, got, where, at)
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        ok = isinstance(got, (int, float)) and math.isclose(got, expected, rel_tol=RTOL, abs_tol=ATOL)
        return None if ok else f"{at}expected {show(expected)}, got {show(got)}"
    return None if got == expected else f"{at}expected {show(expected)}, got {show(got)}"


def _sequences(expected, got, where: str, at: str) -> str | None:
    if torch.is_tensor(got):
        got = got.tolist()
    if not isinstance(got, (list, tuple)):
        return f"{at}expected a {type(expected).__name__} {show(expected)}, got {show(got)}"
    if len(got) != len(expected):
        i = next(
            (k for k, (e, g) in enumerate(zip(expected, got)) if difference(e, g)),
            min(len(got), len(expected)),
        )
        a, b = max(0, i - WINDOW), i + WINDOW + 1
        return (
            f"{at}expected {len(expected)} items, got {len(got)}; they part at [{i}]: "
            f"{where or 'result'}[{a}:{b}] "
            f"expected {show(list(expected[a:b]))}, got {show(list(got[a:b]))}"
        )
    for i, (e, g) in enumerate(zip(expected, got)):
        found = difference(e, g, f"{where}[{i}]")
        if found and not isinstance(e, (list, tuple)) and len(expected) > 1:  # the list around it helps
            a, b = max(0, i - WINDOW), min(len(expected), i + WINDOW + 1)
            part = f"{where}[{a}:{b}]" if (a, b) != (0, len(expected)) else (where or "the whole result")
            return f"{found} ({part}: expected {show(expected[a:b])}, got {show(list(got[a:b]))})"
        if found:
            return found
    return None


def _tensors(expected: torch.Tensor, got, at: str) -> str | None:
    if not torch.is_tensor(got):
        return f"{at}expected a tensor {show(expected)}, got {show(got)}"
    if got.shape != expected.shape:
        return f"{at}expected shape {tuple(expected.shape)}, got {tuple(got.shape)}: {show(got)}"
    if got.dtype != expected.dtype:
        return f"{at}expected dtype {expected.dtype}, got {got.dtype}"
    e, g = expected.detach().double(), got.detach().double()
    bad = ~torch.isclose(g, e, rtol=RTOL, atol=ATOL, equal_nan=True)
    if not bad.any():
        return None
    i = tuple(int(k) for k in bad.nonzero()[0])
    place = f" at index {list(i)}" if expected.dim() else ""
    whole = f" (whole: expected {show(expected)}, got {show(got)})" if expected.dim() == 1 else ""
    if expected.dim() == 2:  # a (B, T) tensor: the row the difference is in
        r = i[0]
        whole = f" (row {r}: expected {show(expected[r])}, got {show(got[r])})"
    return f"{at}expected {e[i].item():.6g}{place}, got {g[i].item():.6g}{whole}"
