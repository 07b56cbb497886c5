"""Profile (a script, not a test): where one training step of the proxy GPT spends its GPU time, GPU only.

For each attention arm: the wall time of plain steps and of a telemetry step (`lib.training.train.collect_telemetry`:
spectral norms, score statistics, Σ Δδ), and the CUDA kernels that take the most time over a few plain steps
(`torch.profiler`), grouped by name. Then the aggregate throughput of N concurrent training processes sharing the
GPU (`lib.training.train.run_many`), which is how the experiments run. Prints tables; writes nothing else.

    python benchmarks/profile_train_step.py [--arms sdpa,paper,fp32] [--concurrency 1,4,8] [--steps 150]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lib.book.setup  # noqa: E402,F401
import torch  # noqa: E402

from benchmarks.bench_backends import step_fn  # noqa: E402  (one training step on a fixed batch, with telemetry)
from lib.training.proxy import ARMS, proxy_config  # noqa: E402
from lib.training.train import run_many  # noqa: E402


def _time(fn, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


def profile_arm(arm: str, top: int = 12) -> None:
    step = step_fn(ARMS.get(arm, arm))
    for _ in range(5):
        step()
    plain = _time(step, 30)
    tele = _time(lambda: step(tele=True), 3)
    print(f"\n=== {arm}: plain step {plain:.2f} ms; telemetry step {tele:.1f} ms "
          f"(every 50 steps adds {(tele - plain) / 50:.2f} ms per step)", flush=True)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    rows = {}
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if t and ev.key and not ev.key.startswith(("aten::", "autograd", "Optimizer", "cudaLaunch", "Memcpy")):
            rows[ev.key] = rows.get(ev.key, 0) + t
    total = sum(rows.values())
    print(f"GPU kernel time {total / 5e3:.2f} ms per step (of {plain:.2f} ms wall); top kernels:")
    for k, t in sorted(rows.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {t / 5e3:7.3f} ms  {100 * t / total:5.1f}%  {k[:90]}")


def concurrency(arm: str, ns, steps: int) -> None:
    print(f"\n=== {arm}: N concurrent training processes ({steps} steps each, telemetry every 50)", flush=True)
    for n in ns:
        cfgs = [proxy_config("full", attn=ARMS.get(arm, arm), steps=steps, lr=1e-3, seed=i, label=f"{arm}_{i}",
                             max_wall_s=0.0)
                for i in range(n)]
        t0 = time.perf_counter()
        res = run_many(cfgs, workers=n, status_every_s=1e9)
        wall = time.perf_counter() - t0
        rates = [r["steps_per_s"] for r in res if "error" not in r]
        print(f"  N={n:2d}: per run {sum(rates) / max(1, len(rates)):6.2f} steps/s, aggregate {sum(rates):6.1f} "
              f"steps/s (wall {wall:.0f} s incl. start-up)", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arms", default="sdpa,paper,fp32")
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--concurrency-arm", default="sdpa")
    ap.add_argument("--steps", type=int, default=150)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_train_step needs a CUDA GPU", file=sys.stderr)
        return 2
    for arm in a.arms.split(","):
        profile_arm(arm)
    if a.concurrency:
        concurrency(a.concurrency_arm, [int(n) for n in a.concurrency.split(",")], a.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
