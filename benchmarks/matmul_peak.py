"""What this CPU's matmuls reach at SmolLM2's shapes: fp32 against bf16, 1 thread against 2.

    python benchmarks/matmul_peak.py

The yardstick for the update and the decode step (docs/studies/speed_smollm2.md): one MLP projection of
SmolLM2-135M (576 -> 1536), for a decode step's 16 rows and for a micro-batch's 2048, timed in
interleaved rounds so that a shared machine's load falls on every variant alike. GFLOP/s = 2 M K N
per second.

Then what a decode step's matmuls meet: 16 rows through 30 different bf16 weights of each of
SmolLM2's block shapes (as its 30 layers: the weights come from memory, not from the cache), by
`F.linear` and by oneDNN on weights packed once (`torch.ops.mkldnn._reorder_linear_weight`, the
private op torch.compile's freezing uses), in GB/s of weights read; beside it, the memory's speed
for a plain streaming read (the sum of 300 MB of float32). And fewer bytes: the same matmuls on
int8 weights (fbgemm's dynamic quantization, `torch.ops.quantized.linear_dynamic`: float32 rows,
each weight's int8 copy at one scale), in GB/s of int8 weights read and as times faster than
`F.linear` on the bf16 weights; and weight-only int8 (`aten._weight_int8pack_mm`: bf16 rows, int8
weights with one scale per output row, the model's activations left as they are), the same way.
"""

import os
import statistics
import time

import torch
import torch.nn.functional as F

K, N = 576, 1536


def rate(M: int, dtype, threads: int) -> float:
    torch.set_num_threads(threads)
    x, w = torch.randn(M, K, dtype=dtype), torch.randn(N, K, dtype=dtype)
    F.linear(x, w)
    n = max(3, 20000 // M)
    t0 = time.perf_counter()
    for _ in range(n):
        F.linear(x, w)
    return 2 * M * K * N * n / (time.perf_counter() - t0) / 1e9


def timed(f, *args, n: int = 10) -> float:
    f(*args)
    t0 = time.perf_counter()
    for _ in range(n):
        f(*args)
    return (time.perf_counter() - t0) / n


def plain_linears(x, ws):
    return [F.linear(x, w) for w in ws]


def packed_linears(x, ws):
    return [torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "") for w in ws]


def int8_linears(x, ws):
    return [torch.ops.quantized.linear_dynamic(x, w, True) for w in ws]  # 7-bit inputs, as decode_step.Int8


def int8_weight_only(x, ws):
    return [torch.ops.aten._weight_int8pack_mm(x, q, scales) for q, scales in ws]


def int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`w` as int8 with one bf16 scale per output row."""
    scales = w.float().abs().amax(dim=1) / 127
    return torch.round(w.float() / scales[:, None]).to(torch.int8), scales.bfloat16()


def int8_weight(w: torch.Tensor):
    """`w` quantized to int8 at one scale and packed for fbgemm's dynamic linear."""
    w = w.float()
    q = torch.quantize_per_tensor(w, w.abs().max().item() / 127, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None)


def decode_rates(threads: int) -> dict:
    """GB/s of weights read by 16-row bf16 matmuls over 30 weights per shape, plain and packed,
    by the same matmuls on int8 weights (and how many times faster than plain), and of a streaming
    read."""
    torch.set_num_threads(threads)
    out = {}
    for n_out, n_in in ((1536, 576), (576, 1536), (576, 576)):
        ws = [torch.randn(n_out, n_in).bfloat16() for _ in range(30)]
        x, nbytes = torch.randn(16, n_in).bfloat16(), 30 * n_out * n_in * 2
        plain = timed(plain_linears, x, ws)
        out[f"{n_in}->{n_out} F.linear"] = nbytes / plain / 1e9
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():  # oneDNN packs bf16 only with AVX512 (or NE-CONVERT)
            packed = [torch.ops.mkldnn._reorder_linear_weight(w, 16) for w in ws]
            out[f"{n_in}->{n_out} packed"] = nbytes / timed(packed_linears, x, packed) / 1e9
        int8 = timed(int8_linears, x.float(), [int8_weight(w) for w in ws])
        out[f"{n_in}->{n_out} int8"] = nbytes / 2 / int8 / 1e9
        out[f"{n_in}->{n_out} int8, x F.linear"] = plain / int8
        weight_only = timed(int8_weight_only, x, [int8_rows(w) for w in ws])
        out[f"{n_in}->{n_out} int8 weight-only"] = nbytes / 2 / weight_only / 1e9
        out[f"{n_in}->{n_out} weight-only, x F.linear"] = plain / weight_only
    big = torch.randn(75_000_000)
    out["streaming read (sum)"] = big.numel() * 4 / timed(big.sum, n=5) / 1e9
    return out


def main(rounds: int = 3):
    ways = [(M, dt, th) for M in (16, 2048) for dt in (torch.float32, torch.bfloat16) for th in (1, 2)]
    got: dict = {w: [] for w in ways}
    for _ in range(rounds):
        for w in ways:
            got[w].append(rate(*w))
    print(f"load average {os.getloadavg()[0]:.2f}; GFLOP/s per round, median")
    for (M, dt, th), v in got.items():
        print(
            f"  M={M:5d} {str(dt)[6:]:9s} threads {th}: {' '.join(f'{x:5.1f}' for x in v)}  "
            f"median {statistics.median(v):5.1f}"
        )
    print("a decode step's matmuls: GB/s of bf16 weights read, 16 rows, 30 weights per shape")
    for th in (1, 2):
        for name, v in decode_rates(th).items():
            unit = "" if name.endswith("x F.linear") else " GB/s"
            print(f"  threads {th}  {name:30s} {v:5.1f}{unit}")


if __name__ == "__main__":
    main()
