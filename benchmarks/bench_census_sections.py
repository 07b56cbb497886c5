"""Benchmark (a script, not a test): where `lib.census.precondition_census`'s time goes, section by section, and how
it grows with the window rows; the current census beside the frozen copy of the one before its speed-up
(`tests.test_census_identity.old_precondition_census`), on the same inputs, interleaved.

Shape (B, H, T, D) = (4, 12, 1024, 64), causal, BF16, chunk 8 (one GPT-2-small layer as the census observer sees
it). Inputs:

* "random": q, k, v ~ N(0, 1) (`bench_census.attention_shaped`, diffuse): no window rows;
* "peaked": `bench_census.attention_shaped(peaked=True)`: keys 0 and 1 tied and far above, ≈ 76 % window rows;
* "planted": `planted_heads`: planted ties (2, 3, 4 or 8 tied keys among the first 64, the other keys 13 to 19.5
  below in half steps, V ~ N(0, 1) with one sign over the tied keys in half the heads), a fraction `--frac` of the
  query rows planted (the others N(0, 1)), so that the window rows scale with it.

Sections (seconds, summed over the call): placement_scores, _classify, _window_errors (which holds forward_rows,
also shown alone), theory_error, and the rest. On the CPU (torch threads as given), best of `--reps`:

    python -m benchmarks.bench_census_sections [--inputs peaked random planted] [--frac 1 0.5 0.25]

`--op-model` adds, per call, a count of the torch ops (views left out), the bytes they read and write, the matmul
FLOPs and the host syncs (nonzero, boolean indexing, .item()), and from them a rough eager-mode GPU estimate:
Σ_ops max(6 µs issue, bytes / 2.5 TB/s + FLOPs / 40 TFLOP/s) + 20 µs per sync (H100-like figures, not a
measurement; the host's numpy work, theory_error above all, comes on top).
"""
from __future__ import annotations

import argparse
import collections
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lib.book.setup  # noqa: E402,F401
import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.bench_census import attention_shaped  # noqa: E402
from lib import census as cs  # noqa: E402

SECTIONS = ("placement_scores", "_classify", "_window_errors", "forward_rows", "theory_error")


def planted_heads(B: int, H: int, T: int, D: int = 64, *, frac: float = 1.0, seed: int = 0):
    """BF16 q, k, v (B, H, T, D) with planted ties (module docstring); every S exact when √D is a power of 2.
    Per (b, h): n ∈ {2, 3, 4, 8} tied keys among the first 64 (score 8), the other keys 8 − g − u/2 (g ∈ 13 … 19.5,
    u ∈ 0 … 8 per key), so that a causal row past the last tied key has r/n ≈ i·e^−g/n, mostly in the window; a
    fraction 1 − frac of the query rows is replaced by N(0, 1) noise (no ties)."""
    if D < 3:
        raise ValueError(f"planted_heads needs D ≥ 3, got {D}")
    rng = np.random.default_rng(seed)
    q = np.zeros((B, H, T, D), np.float32)
    k = np.zeros((B, H, T, D), np.float32)
    v = rng.standard_normal((B, H, T, D)).astype(np.float32)
    unit = D ** 0.5                                          # k's class entries: S = q·k/√D = Σ q_c
    for b in range(B):
        for h in range(H):
            n = int(rng.choice([2, 3, 4, 8]))
            tied = rng.choice(min(64, T), n, replace=False)
            g = float(rng.integers(26, 40)) / 2
            q[b, h, :, :3] = [8.0, 8.0 - g, -0.5]
            k[b, h, :, 1] = unit
            k[b, h, :, 2] = unit * rng.integers(0, 9, T)
            k[b, h, tied] = 0
            k[b, h, tied, 0] = unit
            if rng.random() < 0.5:
                v[b, h, tied] = np.abs(v[b, h, tied]) * np.sign(rng.standard_normal(D))[None]
            noise = rng.random(T) >= frac
            q[b, h, noise] = rng.standard_normal((int(noise.sum()), D))
    return tuple(torch.from_numpy(x).to(torch.bfloat16) for x in (q, k, v))


def make_inputs(kind: str, shape, frac: float = 1.0):
    if kind in ("random", "peaked"):
        return attention_shaped(*shape, peaked=kind == "peaked", device="cpu")
    if kind == "planted":
        return planted_heads(*shape, frac=frac)
    raise ValueError(kind)


class SectionTimer:
    """Wraps the census's sections (in `lib.census` and, with prefix "old_", in the frozen copy's module) with
    perf_counter accumulators; `times[label]` in seconds."""

    def __init__(self):
        self.times = collections.defaultdict(float)
        self._undo = []

    def wrap(self, mod, tag: str, old: bool):
        for name in SECTIONS:
            attr = ("old_" + name.lstrip("_")) if old else name
            if not hasattr(mod, attr):
                continue
            f = getattr(mod, attr)

            @functools.wraps(f)
            def timed(*a, _f=f, _key=f"{tag} {name}", **kw):
                t0 = time.perf_counter()
                try:
                    return _f(*a, **kw)
                finally:
                    self.times[_key] += time.perf_counter() - t0
            setattr(mod, attr, timed)
            self._undo.append((mod, attr, f))

    def restore(self):
        for mod, attr, f in reversed(self._undo):
            setattr(mod, attr, f)
        self._undo.clear()


def op_model(fn, *args, **kwargs) -> dict:
    """Ops, GB, GFLOP, syncs and the eager GPU estimate (ms) of one call of fn (module docstring)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    ops = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            seen = {t.untyped_storage().data_ptr() for t in ins}
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            new = [t for t in outs if t.untyped_storage().data_ptr() not in seen]
            if outs and not new and not func._schema.is_mutable:
                return out                                   # a view: no kernel
            name = func._schema.name
            nbytes = sum(t.numel() * t.element_size() for t in ins + new)
            flops = 2 * args[0].numel() * args[1].shape[-1] if name in ("aten::bmm", "aten::mm") else 0
            sync = name in ("aten::nonzero", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal") or (
                name == "aten::index" and any(isinstance(t, torch.Tensor) and t.dtype == torch.bool
                                              for t in tree_leaves(args[1:])))
            ops.append((nbytes, flops, sync))
            return out

    with Log():
        fn(*args, **kwargs)
    est = sum(max(6e-6, b / 2.5e12 + f / 40e12) for b, f, _ in ops) + 20e-6 * sum(s for *_, s in ops)
    return dict(ops=len(ops), gb=sum(b for b, _, _ in ops) / 1e9, gflop=sum(f for _, f, _ in ops) / 1e9,
                syncs=sum(s for *_, s in ops), est_ms=1e3 * est)


def run(kind: str, placement: str, frac: float, reps: int, shape, with_old: bool = True,
        model: bool = False) -> dict:
    """Best-of-`reps` section times (s) of the current census (and the frozen one) on one input and placement."""
    q, k, v = make_inputs(kind, shape, frac)
    impls = [("new", cs.precondition_census, cs, False)]
    if with_old:
        import tests.test_census_identity as frozen
        impls.append(("old", frozen.old_precondition_census, frozen, True))
    best: dict = {}
    out = {}
    for _ in range(reps):
        for tag, fn, mod, old in impls:
            timer = SectionTimer()
            timer.wrap(mod, tag, old)
            try:
                t0 = time.perf_counter()
                c = fn(q, k, v, causal=True, placement=placement)
                total = time.perf_counter() - t0
            finally:
                timer.restore()
            t = dict(timer.times)
            t[f"{tag} total"] = total
            if f"{tag} total" not in best or total < best[f"{tag} total"]:
                for key in [x for x in best if x.startswith(tag + " ")]:
                    del best[key]
                best.update(t)
            out[tag] = c
    row = dict(inputs=kind, placement=placement, frac=frac,
               window_rate=float(out["new"]["window_rate"].mean()), n_conj=float(out["new"]["n_conj"].sum()))
    for tag in [i[0] for i in impls]:
        tot = best[f"{tag} total"]
        sec = {name: best.get(f"{tag} {name}", 0.0) for name in SECTIONS}
        sec["rest"] = tot - sum(v_ for n_, v_ in sec.items() if n_ != "forward_rows")
        row[tag] = dict(total=tot, **sec)
    if model:
        for tag, fn, _, _ in impls:
            row[tag]["model"] = op_model(fn, q, k, v, causal=True, placement=placement)
    if with_old:
        row["identical"] = all(np.array_equal(out["old"][x], out["new"][x], equal_nan=True)
                               and np.asarray(out["old"][x]).dtype == np.asarray(out["new"][x]).dtype
                               for x in out["old"])
    return row


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", nargs="+", default=["peaked", "planted", "random"])
    ap.add_argument("--placements", nargs="+", default=list(cs.PLACEMENTS))
    ap.add_argument("--frac", nargs="+", type=float, default=[1.0], help="planted: fractions of planted rows")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--no-old", action="store_true", help="time the current census only")
    ap.add_argument("--op-model", action="store_true", help="also the op count and GPU estimate (docstring)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (checks the script)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = (1, 2, 128, 64) if args.smoke else (4, 12, 1024, 64)
    print(f"census sections, (B, H, T, D) = {shape}, causal, chunk 8, CPU, {torch.get_num_threads()} threads, "
          f"best of {args.reps}; seconds")
    cols = ("total", "placement_scores", "_classify", "_window_errors", "forward_rows", "theory_error", "rest")
    print(f"{'inputs':8s} {'frac':>4s} {'place':7s} {'win%':>5s} {'pairs':>8s} impl " + " ".join(f"{c[:12]:>12s}"
                                                                                        for c in cols))
    rows = []
    for kind in args.inputs:
        for frac in (args.frac if kind == "planted" else [1.0]):
            for placement in args.placements:
                row = run(kind, placement, frac, args.reps, shape, with_old=not args.no_old, model=args.op_model)
                rows.append(row)
                for tag in ("old", "new"):
                    if tag in row:
                        print(f"{kind:8s} {frac:4.2f} {placement:7s} {100 * row['window_rate']:5.1f} "
                              f"{row['n_conj']:8.0f} {tag:4s} " + " ".join(f"{row[tag][c]:12.3f}" for c in cols))
                        if "model" in row[tag]:
                            m = row[tag]["model"]
                            print(f"{'':45s} {m['ops']} ops, {m['gb']:.2f} GB, {m['gflop']:.1f} GFLOP, "
                                  f"{m['syncs']} syncs: ≈ {m['est_ms']:.1f} ms eager GPU (model)")
                if "old" in row:
                    print(f"{'':45s} speed-up ×{row['old']['total'] / row['new']['total']:.1f}, "
                          f"outputs identical: {row['identical']}", flush=True)
    return rows


if __name__ == "__main__":
    main()
