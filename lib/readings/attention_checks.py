"""Tables and figures of chapter 2 (the flash-attention kernel): rounding points, correctness against FP64, the
kernel-vs-oracle bit check, the autocast placement finding, and the benchmark table.

Every function returns plain data (a pandas DataFrame or a dict) or a matplotlib figure; nothing here knows about
Jupyter. The kernels are imported lazily: when `kernels/attention.py` is missing or fails to import, the functions
that need it return a note saying so instead of numbers.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from lib.fp.numerics import PROFILES, get_profile, rounding_point_table
from lib.fp.reference import attention_fp64, emulate_attention

__all__ = ["rounding_table", "make_inputs", "error_vs_fp64", "error_figure", "kernel_vs_oracle",
           "placement_table", "placement_summary", "bench_table", "load_kernel", "dtype_table",
           "stable_clamp_effect"]

ROOT = Path(__file__).resolve().parents[2]
QUANTITIES = ("o", "dq", "dk", "dv")


def rounding_table(profiles=("fp32", "fa2", "paper")) -> pd.DataFrame:
    """The rounding points of `lib.fp.numerics.Numerics` as a table: one row per field, one column per profile
    ("✓" = rounded to the low-precision format there, "–" = FP32)."""
    rows = []
    for name, desc, *vals in rounding_point_table(profiles):
        rows.append([f"`{name}`", desc, *[("✓" if v else "–") if isinstance(v, bool) else str(v) for v in vals]])
    return pd.DataFrame(rows, columns=["field", "what", *profiles])


def make_inputs(B: int, H: int, N: int, d: int, seed: int):
    """BF16-valued float32 torch tensors q, k, v, dO of shape (B, H, N, d), N(0, 1)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, d, generator=g).bfloat16().float() for _ in range(4)]


def load_kernel():
    """`kernels.attention.attention` or None (with the reason) when it cannot be imported."""
    try:
        import lib.book.setup  # noqa: F401  (interpreter mode before the kernels are decorated)
        from kernels.attention import attention
        return attention, ""
    except Exception as e:  # the chapter shows the reason
        return None, f"{type(e).__name__}: {e}"


def _rel_err(x, ref) -> float:
    """max |x − ref| / max |ref| (dimensionless)."""
    return float(np.max(np.abs(np.asarray(x, np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-300))


def error_vs_fp64(profiles=("fp32", "fa2", "paper"), seqs=(40, 97), d: int = 32, seeds=(0, 1), causal=(True, False),
                  block: int = 32, source: str = "emulator") -> pd.DataFrame:
    """Relative max error vs the FP64 reference of O, dQ, dK, dV per profile, sequence length, causality, seed.

    `source`: "emulator" (lib.fp.reference) or "kernel" (kernels.attention on the emulated path, tiles `block`).
    Returns a long DataFrame (profile, N, causal, seed, quantity, rel_err, source)."""
    att = None
    if source == "kernel":
        att, why = load_kernel()
        if att is None:
            raise RuntimeError(f"kernel unavailable: {why}")
    rows = []
    for N in seqs:
        for c in causal:
            for seed in seeds:
                q, k, v, do = make_inputs(1, 2, N, d, seed)
                ref = attention_fp64(q, k, v, do, causal=c)
                for prof in profiles:
                    if source == "emulator":
                        out = emulate_attention(q, k, v, do, prof, causal=c, block_m=block, block_n=block)
                    else:
                        out = _kernel_attention(att, q, k, v, do, prof, c, block)
                    for key in QUANTITIES:
                        rows.append((prof, N, c, seed, key, _rel_err(out[key], ref[key]), source))
    return pd.DataFrame(rows, columns=["profile", "N", "causal", "seed", "quantity", "rel_err", "source"])


def _kernel_attention(att, q, k, v, do, prof, causal, block):
    import torch
    qs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    kw = dict(causal=causal, numerics=prof, path="emulated")
    try:
        o = att(*qs, block=(block, block), **kw)
    except TypeError:   # a kernel API without `block=`: its own emulated tiles
        o = att(*qs, **kw)
    o.backward(do)
    return {"o": o.detach().numpy(), "dq": qs[0].grad.numpy(), "dk": qs[1].grad.numpy(),
            "dv": qs[2].grad.numpy()} if isinstance(o, torch.Tensor) else None


def error_figure(df: pd.DataFrame, title: str = ""):
    """Strip plot of relative error vs FP64 (log scale) per quantity, coloured by profile. Returns the figure."""
    import seaborn as sns

    from lib.book import plotting
    fig, ax = plotting.figure(width=6.4, height=3.4)
    sns.stripplot(data=df, x="quantity", y="rel_err", hue="profile", dodge=True, ax=ax, size=4, jitter=0.15)
    ax.set_yscale("log")
    ax.set_xlabel("gradient / output")
    ax.set_ylabel("max |error| / max |FP64|")
    ax.axhline(2.0 ** -8, color="0.6", lw=0.8, ls="--")
    ax.text(3.45, 2.0 ** -8, "BF16 unit roundoff 2⁻⁸", fontsize=7, color="0.4", ha="right", va="bottom")
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(title="profile", fontsize=8, title_fontsize=8, loc="lower right")
    return fig


def kernel_vs_oracle(profiles=("fp32", "fa2", "paper"), cases=((45, 24, True), (45, 24, False), (64, 16, True)),
                     block: int = 32, seed: int = 0, fixes=(None, "beta")) -> dict:
    """Bit-identity of the Triton kernel (emulated path; in the CPU interpreter) and the emulator.

    Returns {"available": bool, "note": str, "table": DataFrame (profile, fix, N, d, causal, quantity,
    fraction_identical)}. Uses the kernel's lower-level launchers so that the tiles are the same as the oracle's."""
    try:
        import lib.book.setup  # noqa: F401
        import torch

        from kernels.attention import attention_bwd, attention_fwd
    except Exception as e:
        return {"available": False, "note": f"kernels/attention.py not importable ({type(e).__name__}: {e})",
                "table": pd.DataFrame()}
    rows = []
    for prof in profiles:
        nm = get_profile(prof)
        for fix in fixes:
            for N, d, causal in cases:
                q, k, v, do = make_inputs(1, 2, N, d, seed)
                if fix == "beta":   # ties: identical keys
                    k[..., 3, :] = k[..., 0, :]
                    k[..., 7, :] = k[..., 0, :]
                sc = d ** -0.5
                o, lse, _ = attention_fwd(q, k, v, causal=causal, scale=sc, nm=nm, fix=fix, beta=7.0, tie_tol=0.0,
                                          path="emulated", block=(block, block))
                dq, dk, dv, delta = attention_bwd(do, q, k, v, o, lse, causal=causal, scale=sc, nm=nm,
                                                  path="emulated", block=(block, block))
                emu = emulate_attention(q, k, v, do, nm, causal=causal, scale=sc, block_m=block, block_n=block,
                                        fix=fix, beta=7.0)
                got = {"o": o, "lse": lse, "delta": delta, "dq": dq, "dk": dk, "dv": dv}
                for key, val in got.items():
                    a = val.detach().float().numpy() if isinstance(val, torch.Tensor) else np.asarray(val)
                    frac = float(np.mean(a.view(np.uint32) == np.asarray(emu[key], np.float32).view(np.uint32)))
                    rows.append((prof, fix or "none", N, d, causal, key, frac))
    df = pd.DataFrame(rows, columns=["profile", "fix", "N", "d", "causal", "quantity", "fraction_identical"])
    return {"available": True, "note": "", "table": df}


def placement_summary(data: dict, kind: str = "random", tile=None, mode: str = "eager_bwd_autocast") -> pd.DataFrame:
    """From a `paper_placement` result: per candidate placement, the fraction of bit-identical elements of each
    compared quantity (columns), for one input kind / tile / run mode. Rows sorted by mean agreement."""
    recs = [r for r in data["records"] if r["kind"] == kind and r["mode"] == mode and not r["stable"]
            and (tile is None or r["tile"] == tile) and r["agreement"]]
    if not recs:
        return pd.DataFrame()
    rec = recs[0]
    rows = []
    for cand, agr in rec["agreement"].items():
        rows.append({"candidate": cand, **{q: agr[q]["bit_identical"] for q in agr}})
    df = pd.DataFrame(rows).set_index("candidate")
    order = [c for c in ("o", "lse", "delta", "dq", "dk", "dv") if c in df.columns]
    df = df[order]
    return df.loc[df.mean(axis=1).sort_values(ascending=False).index]


def placement_table(data: dict) -> pd.DataFrame:
    """One row per run of the authors' algorithm: input kind, tile, run mode, fix, error (if it failed), the
    best-matching candidate and its bit-identical fractions for O and dQ."""
    rows = []
    for r in data["records"]:
        best, o_frac, dq_frac = "", np.nan, np.nan
        if r["agreement"]:
            score = {c: float(np.mean([v["bit_identical"] for v in a.values()])) for c, a in r["agreement"].items()}
            best = max(score, key=score.get)
            o_frac = r["agreement"][best]["o"]["bit_identical"]
            dq_frac = r["agreement"][best].get("dq", {}).get("bit_identical", np.nan)
        fix = "–"
        if r["stable"]:
            fix = "β=2" + (", ℓ-tile clamp 1e-10" if r.get("row_sum_floor", 1e-10) else ", no clamp")
        rows.append({"inputs": r["kind"], "tile": r["tile"], "run": r["mode"], "fix": fix,
                     "error": (r["error"] or "")[:80], "best candidate": best, "O identical": o_frac,
                     "dQ identical": dq_frac})
    return pd.DataFrame(rows)


def dtype_table(data: dict, runs=("random/512/eager_bwd_autocast/plain",)) -> pd.DataFrame:
    """The dtype of every named intermediate of the authors' algorithm, as recorded by `paper_placement`
    (one column per recorded run; first key of `runs` that exists is used when a run is missing)."""
    traces = data.get("traces", {})
    cols = {r: traces[r] for r in runs if r in traces}
    if not cols and traces:
        first = sorted(traces)[0]
        cols = {first: traces[first]}
    return pd.DataFrame(cols).fillna("–")


def stable_clamp_effect(data: dict) -> pd.DataFrame:
    """Bit-identical fraction of O between the authors' stabilised forward (β = 2, tol 1e-3) and the emulator with
    the same fix, with and without the authors' 1e-10 floor on each tile's row sum."""
    rows = []
    for r in data["records"]:
        if r["stable"] and r["agreement"]:
            (agr,) = r["agreement"].values()
            rows.append({"inputs": r["kind"], "tile": r["tile"], "row-sum floor": r.get("row_sum_floor", 1e-10),
                         "O identical": agr["o"]["bit_identical"]})
    return pd.DataFrame(rows)


def bench_table(path=None):
    """The benchmark written by KERNEL (`results/full/attention_bench.json`) as a DataFrame, or None if absent.

    Accepts a list of row dicts under data["rows"] / data["results"] or a list at the top level of data."""
    path = Path(path) if path else ROOT / "results" / "full" / "attention_bench.json"
    if not path.exists():
        return None
    blob = json.loads(path.read_text())
    data = blob.get("data", blob)
    rows = data.get("rows") or data.get("results") if isinstance(data, dict) else data
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows)
