"""Tables and figures of chapter 2 (the flash-attention kernel): rounding points, correctness against FP64, the
kernel-vs-oracle bit check, the autocast placement finding, and the benchmark (TFLOP/s figure and time ratios).

Every function returns plain data (a pandas DataFrame or a dict) or a matplotlib figure; nothing here knows about
Jupyter. The kernels are imported lazily: when `kernels/attention.py` is missing or fails to import, the functions
that need it return a note saying so instead of numbers.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from lib.fp.fix import BETA, TIE_TOL
from lib.fp.numerics import PROFILES, get_profile, rounding_point_table
from lib.fp.reference import attention_fp64, emulate_attention

__all__ = ["rounding_table", "make_inputs", "error_vs_fp64", "error_figure", "kernel_vs_oracle",
           "placement_table", "placement_summary", "bench_table", "load_kernel", "dtype_table",
           "stable_clamp_effect", "bench_status", "bench_frame", "bench_figure", "bench_ratios",
           "bench_ratio_markdown", "BENCH_NAMES"]

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
    fig, ax = plotting.figure(height=3.4)
    sns.stripplot(data=df, x="quantity", y="rel_err", hue="profile", dodge=True, ax=ax, size=4, jitter=0.15)
    ax.set_yscale("log")
    ax.set_xlabel("gradient / output")
    ax.set_ylabel("max |error| / max |FP64|")
    ax.axhline(2.0 ** -8, color="0.6", lw=0.8, ls="--", label="BF16 unit\nroundoff 2⁻⁸")
    if title:
        ax.set_title(title)
    plotting.legend_outside(ax, "right", title="profile")
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
                o, lse, _ = attention_fwd(q, k, v, causal=causal, scale=sc, nm=nm, fix=fix, beta=BETA, tie_tol=TIE_TOL,
                                          path="emulated", block=(block, block))
                dq, dk, dv, delta = attention_bwd(do, q, k, v, o, lse, causal=causal, scale=sc, nm=nm,
                                                  path="emulated", block=(block, block))
                emu = emulate_attention(q, k, v, do, nm, causal=causal, scale=sc, block_m=block, block_n=block,
                                        fix=fix, beta=BETA)
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
    """The rows of the attention benchmark (`results/full/attention_bench.json`) as a DataFrame, or None if absent.

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


# Implementations of the benchmark, by the prefix of their "<prefix>_ms" / "<prefix>_tflops" columns; a prefix not
# listed here (a new mode of the kernel) is shown under its own name.
BENCH_NAMES = {"ours": "ours (fa2)", "ours_fix": "ours + β fix", "sdpa_flash": "SDPA flash",
               "paper_rb0": "paper, per tile", "paper_rb512": "paper, 512-key blocks",
               "paper_rb-1": "paper, whole-row blocks", "paper_rb512_fix": "paper, 512-key blocks + β fix"}
# Sections of the result ("<name>rows": lists of row dicts) and the implementation each section's ratios are taken
# against; a section not listed here uses its first implementation.
BENCH_SECTIONS = {"rows": "ours", "round_block_rows": "paper_rb0"}
BENCH_BASELINE = "sdpa_flash"  # the outside baseline: its time / the reference (> 1: the reference is faster)
_KEYS = ("B", "H", "D", "N", "mode")


def bench_status(name: str = "attention_bench", root=None) -> dict:
    """{"status": "missing" | "stale" | "ok", "result": Result or None, "note": one sentence for the chapter}."""
    from lib.book import results
    if not results.exists(name, "full", root):
        return {"status": "missing", "result": None,
                "note": f"**Not yet measured**: `results/full/{name}.json` does not exist in this checkout."}
    res = results.load(name, "full", root)
    if res.stale:
        from lib.book import catalogue
        return {"status": "stale", "result": res,
                "note": f"**This benchmark is stale** ({catalogue.cite(res, with_title=False, mark_stale=False)}): "
                        "code it runs changed after it ran. The numbers below are from the kernel as it was then, "
                        "not as it is now."}
    from lib.book import catalogue
    return {"status": "ok", "result": res, "note": f"Benchmark: {catalogue.cite(res)}; it is up to date with the "
                                                   "code."}


def _sections(data) -> dict:
    """{section name: list of row dicts} for every list of rows in `data` that has D, N and mode keys."""
    if isinstance(data, list):
        return {"rows": data}
    out = {}
    for key, val in (data or {}).items():
        if (key.endswith("rows") or key == "results") and isinstance(val, list) and val and isinstance(val[0], dict) \
                and {"D", "N", "mode"} <= set(val[0]):
            out[key] = val
    return out


def bench_frame(data) -> pd.DataFrame:
    """Long form of the benchmark: one row per (section, head dim D, sequence length N, mode, implementation) with
    columns section, D, N, mode, impl (prefix), name (readable), ms, tflops. Every list of rows in the result
    (`rows`, `round_block_rows`, …) is read and implementations come from the "<prefix>_ms" columns, so a section or
    a kernel mode added later appears without code changes; a non-numeric column other than the keys splits an
    implementation into variants named "<name>, <col>=<value>"."""
    out = []
    for section, rows in _sections(data).items():
        df = pd.DataFrame(rows)
        prefixes = [c[:-3] for c in df.columns if c.endswith("_ms")]
        known = [p for p in BENCH_NAMES if p in prefixes]
        prefixes = known + [p for p in prefixes if p not in known]      # known implementations first
        variant_cols = [c for c in df.columns if c not in _KEYS and not c.endswith(("_ms", "_tflops"))
                        and not pd.api.types.is_numeric_dtype(df[c])]
        for _, r in df.iterrows():
            suffix = "".join(f", {c}={r[c]}" for c in variant_cols if pd.notna(r[c]))
            for p in prefixes:
                if pd.isna(r.get(f"{p}_ms")):
                    continue
                out.append({"section": section, "D": int(r["D"]), "N": int(r["N"]), "mode": r["mode"],
                            "impl": p + suffix.replace(", ", "|"), "name": BENCH_NAMES.get(p, p.replace("_", " "))
                            + suffix, "ms": float(r[f"{p}_ms"]),
                            "tflops": float(r[f"{p}_tflops"]) if pd.notna(r.get(f"{p}_tflops")) else np.nan})
    return pd.DataFrame(out, columns=["section", "D", "N", "mode", "impl", "name", "ms", "tflops"])


_MODES = ("fwd", "bwd", "fwd+bwd")


def bench_figure(data, meta=None):
    """TFLOP/s against sequence length N (log 2 axis): one row of panels per mode (forward, backward, both), one
    column per head dim, one line per implementation (solid: the first section's, dashed: later sections'; the
    baseline drawn once, from the first section that has it). Returns the figure."""
    from lib.book import plotting
    lf = bench_frame(data)
    if lf.empty:
        raise ValueError("bench_figure: the benchmark has no rows with D, N, mode and <impl>_ms columns")
    sections = list(dict.fromkeys(lf["section"]))
    base_sec = next((s for s in sections if (lf[(lf["section"] == s)]["impl"] == BENCH_BASELINE).any()), None)
    lf = lf[(lf["impl"] != BENCH_BASELINE) | (lf["section"] == base_sec)]
    modes = [m for m in _MODES if m in set(lf["mode"])] + sorted(set(lf["mode"]) - set(_MODES))
    dims = sorted(set(lf["D"]))
    lines = list(dict.fromkeys(zip(lf["section"], lf["name"])))
    ns = sorted(set(lf["N"]))
    fig, axes = plotting.figure(len(modes), len(dims), height=1.6 + 1.9 * len(modes), sharex=True, sharey="row",
                                squeeze=False)
    markers = "os^vDP*X"
    labelled = set()                     # each line gets its legend entry where it is first drawn
    for i, mode in enumerate(modes):
        for j, d in enumerate(dims):
            ax = axes[i, j]
            for k, (sec, name) in enumerate(lines):
                sel = lf[(lf["mode"] == mode) & (lf["D"] == d) & (lf["name"] == name) & (lf["section"] == sec)]
                sel = sel.sort_values("N")
                if len(sel):
                    ax.plot(sel["N"], sel["tflops"], marker=markers[k % len(markers)], ms=4, color=f"C{k}",
                            ls="-" if sec == sections[0] else "--",
                            label=None if (sec, name) in labelled else name)
                    labelled.add((sec, name))
            ax.set_xscale("log", base=2)
            ax.set_xticks(ns, [f"{n // 1024}k" if n >= 1024 else str(n) for n in ns])
            ax.minorticks_off()
            if i == 0:
                ax.set_title(f"head dim {d}")
            if i == len(modes) - 1:
                ax.set_xlabel("sequence length N")
            if j == 0:
                ax.set_ylabel(f"{mode}\nTFLOP/s")
    handles = [h for ax in axes.ravel() for h in ax.get_legend_handles_labels()[0]]
    names = [name for _, name in lines]
    handles.sort(key=lambda h: names.index(h.get_label()))        # legend in line order, whichever panel came first
    fig.legend(handles=handles, loc="outside upper center", ncol=min(3, len(handles)))
    if meta:
        plotting.label_provenance(fig, meta)
    return fig


def bench_ratios(data) -> pd.DataFrame:
    """Per mode (columns) and comparison (rows), the median, min and max over (D, N), per section of the result:
    * `BENCH_BASELINE` time / the section's reference (`BENCH_SECTIONS`): above 1 means the reference is faster;
    * every other implementation's overhead, its time / the reference − 1 (above 0: slower than the reference).
    Cells are (median, min, max) tuples (NaN where a mode was not measured); comparisons without data are left out."""
    lf = bench_frame(data)
    if lf.empty:
        return pd.DataFrame()
    out = {}
    for section in dict.fromkeys(lf["section"]):
        sf = lf[lf["section"] == section]
        ref_impl = BENCH_SECTIONS.get(section, sf["impl"].iloc[0])
        if not (sf["impl"] == ref_impl).any():
            continue
        ref_name = sf.loc[sf["impl"] == ref_impl, "name"].iloc[0]
        ref = sf[sf["impl"] == ref_impl].set_index(["D", "N", "mode"])["ms"]
        others = sf[sf["impl"] != ref_impl]
        order = sorted(dict.fromkeys(others["impl"]), key=lambda i: i != BENCH_BASELINE)   # the baseline first
        for impl in order:
            g = others[others["impl"] == impl]
            both = pd.concat({"x": g.set_index(["D", "N", "mode"])["ms"], "ref": ref}, axis=1, join="inner")
            if both.empty:
                continue
            name = g["name"].iloc[0]
            if impl == BENCH_BASELINE:
                label, v = f"{name} time / {ref_name}", both["x"] / both["ref"]
            else:
                label, v = f"{name}: overhead, time / {ref_name} − 1", both["x"] / both["ref"] - 1
            out[label] = {m: (float(v.xs(m, level="mode").median()), float(v.xs(m, level="mode").min()),
                              float(v.xs(m, level="mode").max())) for m in set(v.index.get_level_values("mode"))}
    if not out:
        return pd.DataFrame()
    modes = [m for m in _MODES if any(m in r for r in out.values())] + \
        sorted({m for r in out.values() for m in r} - set(_MODES))
    return pd.DataFrame.from_dict(out, orient="index").reindex(columns=modes)


def bench_ratio_markdown(ratios: pd.DataFrame) -> str:
    """`bench_ratios` as a Markdown table: ratios as ×1.23 (1.05–1.50), overheads as +3.6 % (−0.2 %–+9.9 %)."""
    if ratios.empty:
        return ""
    lines = ["| comparison: median (range) over N and head dims | " + " | ".join(ratios.columns) + " |",
             "|---|" + "---|" * len(ratios.columns)]
    for label, row in ratios.iterrows():
        overhead = "overhead" in label
        cells = []
        for m in ratios.columns:
            if not isinstance(row[m], tuple):
                cells.append("—")            # not measured in this mode
                continue
            med, lo, hi = row[m]
            cells.append((f"{med:+.1%} ({lo:+.1%} to {hi:+.1%})" if overhead else
                          f"{med:.2f} ({lo:.2f}–{hi:.2f})").replace("-", "−"))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
