"""Cost model of the fa_deviation grid (a script, not a test): how long the full grid takes on one H100, estimated
without a GPU from the committed full-scale result's per-cell seconds and the compile times it and the GPU test log
recorded, with and without the compile pool.

The model, per cell of `plan(full, "cuda")` in the order `run` takes them:
* compute: the committed result's `seconds` for the same cell (its grid is the same), except our kernel's cells,
  whose seconds there include a Triton compile where the kernel was new: for those the seconds of the same
  profile at the same (d, N) in the sequence sweep, where the kernel was already compiled (at the tile sweep's
  tiles, the 64 × 64 one). Cells another sweep already measured (`reused`) cost nothing.
* per-cell overhead (stats, hash, golden value, FA1 prediction, host syncs), spread evenly: the committed run's
  wall time less its start-up and the sum of its cells' seconds, over its cells.
* compile, once per Triton specialisation (`kernel_specs`): emulated path, per profile at 64 × 64 tiles and d = 64,
  the committed dial cells' seconds (first use of each mantissa width); other tiles the committed tile sweep's
  first cells (128 × 64 was cached there: taken as 64 × 128's); d = 128 the GPU test log's 79 s for its four
  profiles and three native kernels; native kernels the committed tile sweep's (0.6-2.3 s).
* contention (the machine shared with a CPU-heavy job): compiles × `--compile-x` (2.5: the dial's compiles took
  ~17 s each in a shared run against ~6.7 s idle), everything else × `--cpu-x` (1.5; launch-bound Python).
Without the pool the main process compiles each kernel at its first cell. With it, W workers take the specs in
submission order after a start-up of `--spawn-s` (imports and a CUDA context), and the main process waits at a
kernel's first cell until its compile is done.

    python benchmarks/fa_deviation_cost.py [--workers 8] [--compile-x 2.5] [--cpu-x 1.5]
"""
from __future__ import annotations

import argparse
import heapq
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.book import registry  # noqa: E402
from lib.studies.golden import fa_deviation as fd  # noqa: E402

START_S = 15.0          # python start-up, imports, CUDA context, cuBLAS handles (committed run: not separated)
# Emulated-path compiles on an idle H100, seconds (results/full/fa_deviation.json, the first cell of each kernel):
EMU_64 = {"fa2": 5.0, "paper": 6.6, "paper+fix": 8.3, "fp32": 4.0}      # 64 × 64 tiles, d = 64 (dial medians)
EMU_TILE = {(16, 64): 1.6, (32, 64): 2.3, (64, 16): 1.8, (64, 32): 3.0, (64, 128): 14.8, (128, 128): 53.9,
            (128, 64): 14.8, (64, 64): 5.0}                             # profile fa2, d = 64
EMU_D128 = 79.0 / 4.6   # d = 128, 64 × 64: the GPU test log's 79 s for 4 profiles + 3 native kernels (~0.2 each)
NATIVE = {(16, 64): 0.65, (32, 64): 0.8, (64, 16): 0.64, (64, 32): 0.6, (64, 128): 1.4, (128, 128): 2.3,
          (128, 64): 1.4, (64, 64): 1.0}


def compile_s(key) -> float:
    if key[0] == "native":
        _, _, d, block = key
        return NATIVE.get(tuple(block), 1.5) * (1.5 if d > 64 else 1.0)
    _, prof, _, d, block = key
    base = EMU_64.get(prof, 6.0)
    if d > 64:
        return EMU_D128 * base / 6.0
    return base * EMU_TILE.get(tuple(block), 5.0) / 5.0


def committed():
    data = json.loads((ROOT / "results/full/fa_deviation.json").read_text())["data"]
    key = lambda r: (r["sweep"], r["inputs"], r["d"], r["N"], r["fmt"], r["impl"], tuple(r["block"]))  # noqa: E731
    secs = {key(r): r.get("seconds", 0.0) for r in data["records"]}
    ours = {}
    for r in data["records"]:
        if r["sweep"] == "seq" and r["impl"].startswith("ours:") and r.get("seconds", 9) < 1.0:
            ours[(r["impl"], r["d"], r["N"])] = r["seconds"]
    overhead = (data["wall_s"] - START_S - sum(secs.values())) / len(data["records"])
    return secs, ours, overhead, data["wall_s"], sum(secs.values())


def cell_seconds(c, secs, ours):
    k = (c["sweep"], c["inputs"], c["d"], c["N"], c["fmt"], c["impl"], tuple(c["block"]))
    if c["impl"].startswith("ours:"):
        return ours.get((c["impl"], c["d"], c["N"]), ours.get(("ours:fa2", c["d"], c["N"]), 0.01))
    return secs.get(k, 0.01)


def simulate(cfg, *, workers, compile_x, cpu_x, spawn_s, budget=0.0, legacy=False):
    """Estimated seconds of `run` (module docstring). legacy: the code before the pool (groups in plan order, no
    reused cells); budget: `max_wall_s` with the compile reserve (`compile_reserve_s`) of the current code."""
    secs, ours, overhead, _, _ = committed()
    if legacy:
        by_key: dict = {}
        for c in fd.plan(cfg, "cuda"):
            by_key.setdefault((c["inputs"], c["d"], c["N"]), []).append(c)
        groups = list(by_key.items())
    else:
        groups = fd._groups(fd.plan(cfg, "cuda"), cfg)
    specs = fd.kernel_specs(groups)
    done_at = {}
    if workers > 0:
        free = [spawn_s] * workers
        heapq.heapify(free)
        for s in specs:
            t = heapq.heappop(free)
            done_at[s["key"]] = t + compile_s(s["key"]) * compile_x
            heapq.heappush(free, done_at[s["key"]])
    t, seen, waited, comp_main, skipped, n = START_S, set(), 0.0, 0.0, 0, 0
    for _, group in groups:
        by_fmt: dict = {}
        for c in group:
            by_fmt.setdefault(c["fmt"], []).append(c)
        for fcells in by_fmt.values():
            done = set()
            for c in fcells:
                n += 1
                if (c["impl"], tuple(c["block"])) in done and not legacy:
                    continue
                key = fd._kernel_key(c)
                new_kernel = key is not None and key not in seen and key not in done_at
                if budget and (t - START_S > budget or (new_kernel and budget - (t - START_S)
                                                        < cfg.get("compile_reserve_s", 150.0))):
                    skipped += 1
                    continue
                done.add((c["impl"], tuple(c["block"])))
                if key is not None and key not in seen:
                    seen.add(key)
                    if key in done_at:
                        waited += max(0.0, done_at[key] - t)
                        t = max(t, done_at[key])
                    else:
                        comp_main += compile_s(key) * compile_x
                        t += compile_s(key) * compile_x
                t += (cell_seconds(c, secs, ours) + overhead) * cpu_x
    return dict(total_s=t, waited_s=waited, main_compile_s=comp_main, cells=n, skipped=skipped,
                kernels=len(specs), compile_total_s=sum(compile_s(s["key"]) for s in specs) * compile_x,
                longest_compile_s=max(compile_s(s["key"]) for s in specs) * compile_x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--compile-x", type=float, default=2.5)
    ap.add_argument("--cpu-x", type=float, default=1.5)
    ap.add_argument("--spawn-s", type=float, default=10.0)
    a = ap.parse_args(argv)
    cfg = registry.resolve("fa_deviation", "full")
    secs, ours, overhead, wall, csum = committed()
    cells = fd.plan(cfg, "cuda")
    print(f"committed H100 run: wall {wall:.0f} s, cells' seconds {csum:.0f} s, overhead {overhead * 1e3:.0f} ms "
          f"per cell; plan: {len(cells)} cells, {Counter(c['sweep'] for c in cells)}")
    specs = fd.kernel_specs(fd._groups(cells, cfg))
    kinds = Counter((s["key"][0], s["key"][-2]) for s in specs)
    print(f"kernels to compile: {len(specs)} " + ", ".join(f"{k[0]} d={k[1]}: {v}" for k, v in sorted(kinds.items())))
    print(f"{'scenario':44s} {'total':>7s} {'waits':>6s} {'compiles in main':>17s} {'skipped':>8s}")
    rows = [("old code (compiles in the main process), idle", dict(workers=0, compile_x=1, cpu_x=1, legacy=True)),
            ("old code, shared machine", dict(workers=0, compile_x=a.compile_x, cpu_x=a.cpu_x, legacy=True)),
            (f"pool of {a.workers}, idle", dict(workers=a.workers, compile_x=1, cpu_x=1, spawn_s=a.spawn_s)),
            (f"pool of {a.workers}, shared machine", dict(workers=a.workers, compile_x=a.compile_x, cpu_x=a.cpu_x,
                                                           spawn_s=2 * a.spawn_s)),
            ("pool of 4, shared machine", dict(workers=4, compile_x=a.compile_x, cpu_x=a.cpu_x,
                                               spawn_s=2 * a.spawn_s)),
            ("pool of 8, shared, compiles x4", dict(workers=a.workers, compile_x=4.0, cpu_x=2.0,
                                                    spawn_s=3 * a.spawn_s)),
            (f"no pool (it failed), shared, budget {cfg['max_wall_s']:g} s",
             dict(workers=0, compile_x=a.compile_x, cpu_x=a.cpu_x, budget=cfg["max_wall_s"]))]
    for name, kw in rows:
        kw.setdefault("spawn_s", a.spawn_s)
        r = simulate(cfg, **kw)
        print(f"{name:44s} {r['total_s']:6.0f}s {r['waited_s']:5.0f}s {r['main_compile_s']:16.0f}s "
              f"{r['skipped']:8d}")
    r = simulate(cfg, workers=a.workers, compile_x=a.compile_x, cpu_x=a.cpu_x, spawn_s=2 * a.spawn_s)
    print(f"compile work {r['compile_total_s']:.0f} s in all on a shared machine, the longest one "
          f"{r['longest_compile_s']:.0f} s")


if __name__ == "__main__":
    main()
