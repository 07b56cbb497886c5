"""The GPU tests over N GPUs at once: one pytest process per GPU, the test files split by estimated cost.

    python tests/gpu/run_sharded.py [--gpus N] [--log FILE] [--timeout S]

N = 0 (default) uses every visible GPU; N = 1 is the plain `python -m pytest -m gpu tests`. The log (default
results/full/gpu_tests.log) holds the device, the commit ($BOOK_GIT_COMMIT or `git rev-parse HEAD`), each shard's
files, output and wall time; the exit status is non-zero when any shard fails or runs past --timeout.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Estimated seconds on one H100 (first run: kernel compilation dominates); unknown files count 20.
COST = {"test_gradients_gpu.py": 150, "test_attention_gpu.py": 90, "test_stable_attention_gpu.py": 60,
        "test_train_gpu.py": 60, "test_census_gpu.py": 40, "test_deviation_gpu.py": 40}


def shards(files: list[Path], n: int) -> list[list[Path]]:
    """Greedy split: the costliest file first onto the least loaded shard."""
    out, load = [[] for _ in range(n)], [0.0] * n
    for f in sorted(files, key=lambda f: -COST.get(f.name, 20)):
        i = load.index(min(load))
        out[i].append(f)
        load[i] += COST.get(f.name, 20)
    return [s for s in out if s]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--log", default=str(ROOT / "results" / "full" / "gpu_tests.log"))
    ap.add_argument("--timeout", type=float, default=600.0)
    a = ap.parse_args(argv)
    import torch
    n = a.gpus or max(1, torch.cuda.device_count())
    files = sorted((ROOT / "tests" / "gpu").glob("test_*.py"))
    parts = shards(files, n)
    commit = os.environ.get("BOOK_GIT_COMMIT") or subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown"
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    t0 = time.time()
    procs = []
    for i, part in enumerate(parts):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i % max(1, torch.cuda.device_count())))
        cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
               *[str(f.relative_to(ROOT)) for f in part]]
        procs.append((part, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True)))
    lines, failed = [f"GPU tests: {len(files)} files in {len(parts)} shards on {n} × {device}; commit {commit}"], 0
    for i, (part, p) in enumerate(procs):
        try:
            text = p.communicate(timeout=max(1.0, a.timeout - (time.time() - t0)))[0]
        except subprocess.TimeoutExpired:
            p.kill()
            text = p.communicate()[0] + f"\n(shard {i} stopped at the {a.timeout:.0f} s limit)"
            p.returncode = 124
        failed += p.returncode != 0
        lines += [f"--- shard {i}: {', '.join(f.name for f in part)} (exit {p.returncode}, "
                  f"{time.time() - t0:.0f} s)", text.rstrip()]
    lines.append(f"wall {time.time() - t0:.0f} s; {failed} shard(s) failed")
    Path(a.log).parent.mkdir(parents=True, exist_ok=True)
    Path(a.log).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-1:] + [l for l in lines if l.startswith("---")]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
