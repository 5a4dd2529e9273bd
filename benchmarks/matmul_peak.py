"""What this CPU's matmuls reach at SmolLM2's shapes: fp32 against bf16, 1 thread against 2.

    python benchmarks/matmul_peak.py

The yardstick for the update and the decode step (docs/speed_smollm2.md): one MLP projection of
SmolLM2-135M (576 -> 1536), for a decode step's 16 rows and for a micro-batch's 2048, timed in
interleaved rounds so that a shared machine's load falls on every variant alike. GFLOP/s = 2 M K N
per second.
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


if __name__ == "__main__":
    main()
