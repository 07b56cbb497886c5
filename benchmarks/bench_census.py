"""Benchmark (a script, not a test): the cost of `lib.census.precondition_census` on one layer's q, k, v.

Shape (B, H, T, D) = (4, 12, 1024, 64) in BF16, as the attention monitor sees one GPT-2-small layer (4 sequences of
the batch), causal. Two inputs, because the census's cost grows with its window rows (their errors are computed on
a gathered block):

* "diffuse": q, k, v ~ N(0, 1) — almost no tied rows, the census is its row statistics only;
* "peaked": keys 0 and 1 identical and aligned with every query, about 16 ± 4 above the other scores
  (`attention_shaped`): nearly every row is tied and most sit in the sticky-bit window (the worst case).

For each input and placement ("authors", "fa2") it prints the `triton.testing.do_bench` median (ms) per layer and
the window rate the call saw. GPU:

    python -m benchmarks.bench_census [--chunk 8]

`--smoke` runs tiny shapes on whatever device there is (on the CPU a perf_counter median), to check the script.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lib.book.setup  # noqa: E402,F401
import torch  # noqa: E402

from lib.census import PLACEMENTS, precondition_census  # noqa: E402


def attention_shaped(B: int, H: int, T: int, D: int, *, peaked: bool, device, seed: int = 0, top: float = 16.0,
                     spread: float = 4.0):
    """BF16 q, k, v (B, H, T, D), causal-attention shaped. Diffuse: all N(0, 1). Peaked: with u a unit vector per
    head, q = n⊥ + (2 + s·z)·u (n⊥ the N(0, 1) noise minus its u component, z ~ N(0, 1)) and keys 0 and 1 both
    (top/2)·√D·u, so every row from 1 on has an exactly tied pair scoring top + spread·z, the other keys ≈ N(0, 1)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    if peaked:
        u = torch.randn(1, H, 1, D, generator=g)
        u = u / u.norm(dim=-1, keepdim=True)
        a, beta = 2.0, top / 2.0                             # tied score β·(a + s·z): β·a = top, β·s = spread
        q = q - (q * u).sum(-1, keepdim=True) * u + (a + spread / beta * torch.randn(B, H, T, 1, generator=g)) * u
        k[:, :, :2] = beta * D ** 0.5 * u
    return tuple(t.to(device=device, dtype=torch.bfloat16) for t in (q, k, v))


def _median_ms(fn, reps: int) -> float:
    if torch.cuda.is_available():
        from triton.testing import do_bench
        return float(do_bench(fn, return_mode="median"))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk", type=int, default=8, help="(b, h) matrices per pass of the census")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on any device (checks the script)")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = (1, 2, 128, 64) if args.smoke else (4, 12, 1024, 64)
    print(f"census of one layer, (B, H, T, D) = {shape}, causal, BF16, chunk {args.chunk}, on {device} "
          f"({torch.cuda.get_device_name() if device == 'cuda' else 'CPU'})")
    rows = []
    for peaked in (False, True):
        q, k, v = attention_shaped(*shape, peaked=peaked, device=device)
        for placement in PLACEMENTS:
            def run():
                return precondition_census(q, k, v, placement=placement, chunk=args.chunk)
            c = run()
            ms = _median_ms(run, reps=3)
            row = dict(inputs="peaked" if peaked else "diffuse", placement=placement, ms=ms,
                       tie_rate=float(c["tie_rate"].mean()), window_rate=float(c["window_rate"].mean()),
                       conjunction=float(c["conjunction"].mean()))
            rows.append(row)
            print(f"  {row['inputs']:8s} {placement:8s} {ms:9.2f} ms   tie rate {row['tie_rate']:.3f}   "
                  f"window rate {row['window_rate']:.3f}   conjunction {row['conjunction']:.3f}")
    return rows


if __name__ == "__main__":
    main()
