"""Reading the `fa_deviation` result: tables, ratios along one axis at a time, and the verdict on Golden et al.'s claim.

The claim (Golden et al. 2024): at BF16, flash attention deviates from an FP64 golden value about an order of
magnitude more than baseline attention does, the deviation grows with the sequence length, and larger tiles lower
it. `claim_fa_deviation` judges it with these rules (fixed before any GPU run):

* ratio — max |Δ| of flash over max |Δ| of baseline at BF16, at the claim's (N, d, inputs) and Golden's tile rule:
  holds if ≥ RATIO_MIN = √10 ≈ 3.16 ("about an order of magnitude": within a factor √10 of 10×, or more).
* growth — mean |Δ| in ULPs of the output (u = mean ULP at the golden values) at the largest N over that at the
  smallest N of the sweep: holds if ≥ GROWTH_MIN = 1.5. ULP-scaled because the absolute scale of O changes with N
  in a way that depends on the input distribution, which Golden et al. do not state (|O| ~ N^−1/2 for N(0, 1)
  inputs, constant for inputs with a mean).
* tile — max |Δ| at the smallest square tile over that at the largest (BF16, the tile sweep's N): holds if ≥
  TILE_MIN = 1.5.

"Flash" is the production kernel: PyTorch SDPA's flash backend (vs PyTorch eager in BF16) where the result has it
(GPU), else the simulator's FA2 with FP32 state (vs the simulated baseline; the same numerics); the tile part always
uses the simulator's FA2 (the real kernel's tiles are fixed). Status: "reproduced" if all three parts hold for it;
"partly" if at least one does, or if all three hold for one of the per-tile-rounding variants (FA1-style storage,
or every intermediate in BF16); "not reproduced" otherwise.
"""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pandas as pd

SKIPPED = "skipped: wall-clock budget"      # the `error` of a cell the run's max_wall_s left unmeasured
RATIO_MIN = math.sqrt(10.0)
GROWTH_MIN = 1.5
TILE_MIN = 1.5
VARIANTS = ("fa1", "fa1-lowp", "fa2-lowp")

IMPL_LABELS = {
    "baseline": "baseline (materialised)", "fa2": "FA2, FP32 state", "fa1": "FA1, FP32 state",
    "fa2-lowp": "FA2, all in format", "fa1-lowp": "FA1, all in format",
    "ours:fp32": "our kernel, fp32 profile", "ours:fa2": "our kernel, fa2 profile",
    "ours:paper": "our kernel, paper profile", "ours:paper+fix": "our kernel, paper + β fix",
    "gpu:eager": "PyTorch eager (GPU)", "gpu:sdpa_math": "SDPA math (GPU)", "gpu:sdpa_flash": "SDPA flash (GPU)",
    "gpu:sdpa_efficient": "SDPA mem-efficient (GPU)", "gpu:ours_fa2": "our kernel, native fa2 (GPU)",
    "gpu:ours_paper": "our kernel, native paper (GPU)", "gpu:ours_paper+fix": "our kernel, native paper + fix (GPU)",
}
FORMAT_LABELS = {"fp64": "FP64", "fp32": "FP32", "fp16": "FP16", "bf16": "BF16"}


def format_label(fmt: str) -> str:
    return FORMAT_LABELS.get(fmt, f"m = {fmt[1:]}" if fmt.startswith("m") else fmt)


def frame(data: dict) -> pd.DataFrame:
    """The records as a DataFrame (one row per measurement; block split into Br, Bc; failed cells keep `error`)."""
    df = pd.DataFrame(data["records"])
    if df.empty:
        return df
    df["Br"] = df["block"].map(lambda b: int(b[0]))
    df["Bc"] = df["block"].map(lambda b: int(b[1]))
    if "error" not in df:
        df["error"] = None
    return df


def _ok(df):
    return df[df["error"].isna()] if "error" in df else df


def select(df: pd.DataFrame, **key) -> pd.DataFrame:
    """Rows matching every key=value (values compared as given), errors dropped."""
    m = np.ones(len(df), bool)
    for k, v in key.items():
        m &= (df[k] == v).to_numpy()
    return _ok(df[m])


def one(df: pd.DataFrame, **key) -> pd.Series | None:
    """The single row matching `key`, or None."""
    s = select(df, **key)
    if len(s) > 1:
        raise ValueError(f"{len(s)} rows match {key}")
    return None if s.empty else s.iloc[0]


def setup(data: dict) -> dict:
    return data.get("claim_setup", {})


def flash_and_baseline(df: pd.DataFrame) -> tuple[str, str]:
    """(flash impl, its baseline) for the claim: the real SDPA flash kernel vs PyTorch eager if measured, else the
    simulator's FA2 (FP32 state) vs the simulated baseline."""
    real = select(df, impl="gpu:sdpa_flash", fmt="bf16")
    if not real.empty and not select(df, impl="gpu:eager", fmt="bf16").empty:
        return "gpu:sdpa_flash", "gpu:eager"
    return "fa2", "baseline"


def seq_ratio(df, impl, base, *, N, d, inputs, fmt="bf16", metric="max_abs") -> float:
    """metric(impl) / metric(base) in the sequence sweep at one (N, d, inputs, fmt); NaN if either is missing."""
    a = one(df, sweep="seq", impl=impl, N=N, d=d, inputs=inputs, fmt=fmt)
    b = one(df, sweep="seq", impl=base, N=N, d=d, inputs=inputs, fmt=fmt)
    return float(a[metric] / b[metric]) if a is not None and b is not None else float("nan")


def seq_growth(df, impl, *, d, inputs, fmt="bf16", metric="mean_abs_ulp") -> tuple[float, int, int]:
    """(metric at the largest N / at the smallest N, smallest N, largest N) of `impl` in the sequence sweep."""
    s = select(df, sweep="seq", impl=impl, d=d, inputs=inputs, fmt=fmt).sort_values("N")
    if len(s) < 2:
        return float("nan"), 0, 0
    return float(s[metric].iloc[-1] / s[metric].iloc[0]), int(s["N"].iloc[0]), int(s["N"].iloc[-1])


def tile_shrink(df, impl, *, inputs, fmt="bf16", metric="max_abs") -> tuple[float, int, int]:
    """(metric at the smallest square tile / at the largest, smallest, largest tile) in the tile sweep."""
    s = select(df, sweep="tile", impl=impl, inputs=inputs, fmt=fmt)
    s = s[s["Br"] == s["Bc"]].sort_values("Bc")
    if len(s) < 2:
        return float("nan"), 0, 0
    return float(s[metric].iloc[0] / s[metric].iloc[-1]), int(s["Bc"].iloc[0]), int(s["Bc"].iloc[-1])


def golden_parts(df: pd.DataFrame, impl: str, base: str, st: dict, tile_impl: str | None = None) -> dict:
    """The three parts of the claim for one implementation: {part: (value, holds)} plus their axes."""
    N, d, inputs = st["claim_seq_len"], st["claim_head_dim"], st["claim_inputs"]
    r = seq_ratio(df, impl, base, N=N, d=d, inputs=inputs)
    g, n0, n1 = seq_growth(df, impl, d=d, inputs=inputs)
    t, b0, b1 = tile_shrink(df, tile_impl or impl, inputs=st["tile_inputs"][0])
    return {"ratio": (r, bool(r >= RATIO_MIN)), "growth": (g, bool(g >= GROWTH_MIN)),
            "tile": (t, bool(t >= TILE_MIN)), "N": N, "d": d, "inputs": inputs, "n_range": (n0, n1),
            "tile_range": (b0, b1)}


def _verdict(primary: dict, variants: dict) -> str:
    held = [primary[p][1] for p in ("ratio", "growth", "tile")]
    if all(held):
        return "reproduced"
    if any(held) or any(all(v[p][1] for p in ("ratio", "growth", "tile")) for v in variants.values()):
        return "partly"
    return "not reproduced"


def claim_fa_deviation(data: dict) -> dict:
    """{"status", "evidence"} for the claim `fa_deviation` (module docstring: the rule)."""
    df = frame(data)
    st = setup(data)
    if df.empty or not st:
        return {"status": "not yet tested", "evidence": "no records"}
    impl, base = flash_and_baseline(df)
    primary = golden_parts(df, impl, base, st, tile_impl="fa2")
    variants = {v: golden_parts(df, v, "baseline", st) for v in VARIANTS}
    status = _verdict(primary, variants)

    def parts(p):
        return (f"ratio {p['ratio'][0]:.2g}× ({'≥' if p['ratio'][1] else '<'} {RATIO_MIN:.2f}), "
                f"mean |Δ| in ULPs ×{p['growth'][0]:.2g} from N = {p['n_range'][0]} to {p['n_range'][1]}, "
                f"max |Δ| ×{p['tile'][0]:.2g} from tile {p['tile_range'][0]}² to {p['tile_range'][1]}²")

    who = "SDPA flash vs PyTorch eager" if impl.startswith("gpu:") else "FA2 numerics (simulated) vs baseline"
    ev = (f"{data.get('device', '?')}, BF16, N = {primary['N']}, d = {primary['d']}, {primary['inputs']} inputs, "
          f"seed {st.get('seed', '?')}: {who}: {parts(primary)}; "
          + "; ".join(f"{IMPL_LABELS[v]}: {parts(p)}" for v, p in variants.items()))
    return {"status": status, "evidence": ev}


# ------------------------------------------------------------------------------------------- chapter tables
def summary_table(df: pd.DataFrame, *, sweep="seq", N, d, inputs, impls, fmts) -> pd.DataFrame:
    """A narrow table: one row per (format, implementation) at one cell: max |Δ|, mean ± std |Δ|, mean |Δ| and the
    signed mean in ULPs."""
    rows = []
    for fmt in fmts:
        for impl in impls:
            r = one(df, sweep=sweep, N=N, d=d, inputs=inputs, fmt=fmt, impl=impl)
            if r is None:
                continue
            rows.append({"format": format_label(fmt), "implementation": IMPL_LABELS.get(impl, impl),
                         "max |Δ|": f"{r['max_abs']:.2e}",
                         "mean ± std |Δ|": f"{r['mean_abs']:.1e} ± {r['std_abs']:.1e}",
                         "mean |Δ| (ULP)": f"{r['mean_abs_ulp']:.2f}", "bias (ULP)": f"{r['bias_ulp']:+.3f}"})
    return pd.DataFrame(rows)


INPUT_LABELS = {"normal": "N(0, 1)", "attention": "attention"}   # short: the table must fit the column


def measurements_markdown(df: pd.DataFrame, *, sweep: str = "seq", d: int) -> str:
    """Every measured cell of one sweep at head dim `d` as a Markdown table narrow enough for the text column:
    inputs and N, format, implementation (in words), max |Δ|, mean |Δ| and the signed mean in ULPs. Cells that raised
    are left out (`failed_cells` says which)."""
    rows = ["| inputs, N | format | implementation | max \\|Δ\\| | mean \\|Δ\\|, ULP | bias, ULP |",
            "|---|---|---|---|---|---|"]
    if df.empty:
        return "\n".join(rows)
    sel = _ok(df[(df["sweep"] == sweep) & (df["d"] == d)])
    for _, r in sel.iterrows():
        rows.append(f"| {INPUT_LABELS.get(r['inputs'], r['inputs'])}, {int(r['N']):,} | {format_label(r['fmt'])} | "
                    f"{IMPL_LABELS.get(r['impl'], r['impl'])} | {r['max_abs']:.2g} | {r['mean_abs_ulp']:.2f} | "
                    f"{r['bias_ulp']:+.3f} |")
    return "\n".join(rows)


def failed_cells(df: pd.DataFrame) -> list[dict]:
    """The measurements that raised instead of returning O, grouped: [{"impl", "fmt", "error", "n"}] sorted by
    implementation and format (empty when every cell ran). Cells the wall-clock budget skipped are not failures
    (`skipped_note`)."""
    if df.empty or "error" not in df:
        return []
    bad = df[df["error"].notna() & (df["error"] != SKIPPED)]
    return [dict(impl=i, fmt=f, error=e, n=int(n)) for (i, f, e), n in
            bad.groupby(["impl", "fmt", "error"]).size().items()]


def skipped_note(df: pd.DataFrame) -> str:
    """One sentence on the cells a run's wall-clock budget (`max_wall_s`) left unmeasured: how many, and which
    (inputs, d, N) groups lost all or part of their cells; they are absent from every table and figure. Empty
    string when the run measured every cell."""
    if df.empty or "error" not in df:
        return ""
    sk = df[df["error"] == SKIPPED]
    if sk.empty:
        return ""
    parts = []
    for (inp, d), g in sk.groupby(["inputs", "d"], sort=False):
        ns = []
        for n, gn in g.groupby("N"):
            whole = len(gn) == int(((df["inputs"] == inp) & (df["d"] == d) & (df["N"] == n)).sum())
            ns.append(f"{n:,}" + ("" if whole else f" ({len(gn)} of its cells)"))
        parts.append(f"{inp} inputs at d = {d}, N = {', '.join(ns)}")
    return (f"The run's wall-clock budget stopped it before {len(sk)} of its {len(df)} cells were measured ("
            f"{'; '.join(parts)}); they are absent from the tables and figures.")


def gpu_note(df: pd.DataFrame, *, N: int, d: int, inputs: str = "normal") -> str:
    """One or two sentences on the real GPU kernels of a result, computed from its records: which (kernel, format)
    measurements failed and with what error, whether any real kernel ran at BF16 (if none did, the BF16 comparison
    and the verdict use the simulator), and, at the lowest precision where SDPA flash and eager both ran, the ratio
    of their max |Δ| at cell (N, d, inputs) beside the simulator's FA2 / baseline ratio there. Empty string when the
    result has no GPU cell."""
    gpu = df[df["impl"].astype(str).str.startswith("gpu:")] if not df.empty else df
    if gpu.empty:
        return ""
    fails = [f for f in failed_cells(df) if f["impl"].startswith("gpu:")]
    parts = []
    bf16_ok = _ok(gpu[gpu["fmt"] == "bf16"])
    bf16_bad = [f for f in fails if f["fmt"] == "bf16"]
    if bf16_ok.empty and bf16_bad:
        errs = sorted({f["error"] for f in bf16_bad})
        why = (" — raised by the hash of each output, which goes through NumPy, and NumPy has no BF16 type: the "
               "kernels ran, their measurement was not recorded" if any("ScalarType BFloat16" in e for e in errs)
               else "")
        parts.append(f"In this result every BF16 measurement of a real GPU kernel failed "
                     f"({sum(f['n'] for f in bf16_bad)} cells; error: {'; '.join(errs)}{why}), so at BF16 the "
                     "tables below and the verdict use the simulator's FA2 with FP32 state for flash attention.")
    other = [f for f in fails if f["fmt"] != "bf16"]
    # PyTorch answers "No available kernel" where a backend has no kernel for the dtype (SDPA flash has none for
    # FP32 or FP64): a format the backend does not offer, not a measurement that broke. Said apart from failures.
    absent = [f for f in other if "No available kernel" in f["error"]]
    other = [f for f in other if f not in absent]
    if absent:
        words = {}
        for f in absent:
            words.setdefault(IMPL_LABELS.get(f["impl"], f["impl"]), []).append(format_label(f["fmt"]))
        parts.append("PyTorch has no kernel (\"No available kernel\") for " +
                     "; ".join(f"{k} at {', '.join(sorted(v))}" for k, v in words.items()) + ".")
    if other:
        words = {}
        for f in other:
            words.setdefault((IMPL_LABELS.get(f["impl"], f["impl"]), f["error"]), []).append(format_label(f["fmt"]))
        parts.append(("Also failed: " if parts else "Failed: ") +
                     "; ".join(f"{k} at {', '.join(sorted(v))} ({e})" for (k, e), v in words.items()) + ".")
    for fmt in ("bf16", "fp16"):
        fl, eg = one(df, sweep="seq", N=N, d=d, inputs=inputs, fmt=fmt, impl="gpu:sdpa_flash"), \
            one(df, sweep="seq", N=N, d=d, inputs=inputs, fmt=fmt, impl="gpu:eager")
        sim, base = one(df, sweep="seq", N=N, d=d, inputs=inputs, fmt=fmt, impl="fa2"), \
            one(df, sweep="seq", N=N, d=d, inputs=inputs, fmt=fmt, impl="baseline")
        if fl is not None and eg is not None and sim is not None and base is not None and eg["max_abs"] > 0:
            parts.append(f"At {format_label(fmt)}, where the real kernels ran, SDPA flash's max |Δ| is "
                         f"{fl['max_abs'] / eg['max_abs']:.2g}× PyTorch eager's (mean {fl['mean_abs_ulp']:.2f} ULP "
                         f"against {eg['mean_abs_ulp']:.2f}); the simulator gives {sim['max_abs'] / base['max_abs']:.2g}× "
                         f"(mean {sim['mean_abs_ulp']:.2f} ULP against {base['mean_abs_ulp']:.2f}) on the same inputs.")
            break
    return " ".join(parts)


def fa1_prediction_table(df: pd.DataFrame, *, d, inputs, fmt="bf16", sweep="seq") -> pd.DataFrame:
    """Measured excess mean-square error of FA1-style storage over FA2 (FP32 state), rms²(FA1) − rms²(FA2) in u²,
    next to the prediction stored with the FA1 record (`lib.fp.deviation.fa1_excess_prediction`), per cell."""
    rows = []
    # each FA1 cell against the first FA2 row of its N (and its Bc in the tile sweep): one pass over the FA2 rows
    # instead of one selection per cell (the chapters' claims tables call this hundreds of times)
    by = ("N", "Bc") if sweep == "tile" else ("N",)
    f2s, fa2 = select(df, sweep=sweep, impl="fa2", d=d, inputs=inputs, fmt=fmt), {}
    for k, rms in zip(zip(*(f2s[c] for c in by)), f2s["rms_ulp"]):
        fa2.setdefault(k, rms)
    for _, r in select(df, sweep=sweep, impl="fa1", d=d, inputs=inputs, fmt=fmt).iterrows():
        f2 = fa2.get(tuple(r[c] for c in by))
        if f2 is None or "pred_excess_ms" not in r or pd.isna(r["pred_excess_ms"]):
            continue
        rows.append({"N": int(r["N"]), "Br": int(r["Br"]), "Bc": int(r["Bc"]), "tiles": -(-int(r["N"]) // int(r["Bc"])),
                     "measured": r["rms_ulp"] ** 2 - f2 ** 2,
                     "predicted": float(r["pred_excess_ms"])})
    return pd.DataFrame(rows)


def br_invariance(df: pd.DataFrame) -> tuple[int, int]:
    """(groups whose outputs are bit-identical across Br, groups) over the tile sweep's (impl, format, inputs, Bc)
    groups with more than one Br."""
    t = select(df, sweep="tile")
    g = t.groupby(["impl", "fmt", "inputs", "Bc"])
    sizes = g["Br"].nunique()
    same = g["hash"].nunique()
    multi = sizes[sizes > 1].index
    return int((same.loc[multi] == 1).sum()), int(len(multi))


def prediction_accuracy(df: pd.DataFrame, inputs: str) -> float:
    """Median of measured / predicted FA1 excess over every FA1 cell with a prediction > 0 (NaN if none)."""
    rows = []
    for sweep in ("seq", "tile"):
        for fmt in sorted(set(df["fmt"])):
            for d in sorted(set(df["d"])):
                t = fa1_prediction_table(df, d=d, inputs=inputs, fmt=fmt, sweep=sweep)
                if len(t):
                    rows.append(t[t["predicted"] > 0])
    if not rows:
        return float("nan")
    t = pd.concat(rows)
    return float(np.median(t["measured"] / t["predicted"])) if len(t) else float("nan")


_KEY_NUMBERS: dict = {}   # the result's content (canonical JSON) -> its key numbers


def key_numbers(data: dict) -> dict:
    """The numbers chapter 3 quotes from one `fa_deviation` result (floats, ints and short strings). Computed once
    per process for the same content: the claims tables of several chapters ask for them (≈ 0.8 s a time)."""
    key = json.dumps(data, sort_keys=True, default=str)
    if key not in _KEY_NUMBERS:
        _KEY_NUMBERS[key] = _key_numbers(data)
    return copy.deepcopy(_KEY_NUMBERS[key])


def _key_numbers(data: dict) -> dict:
    df = frame(data)
    st = setup(data)
    N, d, inputs = st["claim_seq_len"], st["claim_head_dim"], st["claim_inputs"]
    out = {"N": N, "d": d, "inputs": inputs, "tile": tuple(data["tiles"][str(d)])}
    seq = select(df, sweep="seq", d=d)
    out["n_min"], out["n_max"] = int(seq["N"].min()), int(seq["N"].max())
    impl, base = flash_and_baseline(df)
    out["primary"], out["primary_base"] = impl, base
    for inp in sorted(set(df["inputs"])):
        s = dict(st, claim_inputs=inp)
        out[f"parts:{inp}:primary"] = golden_parts(df, impl, base, s, tile_impl="fa2")
        for v in ("fa2", *VARIANTS):
            out[f"parts:{inp}:{v}"] = golden_parts(df, v, "baseline", s)
        for i in ("baseline", "fa2", "fa1", "fa2-lowp", "fa1-lowp", "ours:fa2", "ours:paper", "ours:paper+fix",
                  "gpu:eager", "gpu:sdpa_math", "gpu:sdpa_flash", "gpu:ours_fa2", "gpu:ours_paper",
                  "gpu:ours_paper+fix"):
            r = one(df, sweep="seq", impl=i, N=N, d=d, inputs=inp, fmt="bf16")
            if r is not None:
                out[f"ulp:{inp}:{i}"] = float(r["mean_abs_ulp"])
                out[f"bias:{inp}:{i}"] = float(r["bias_ulp"])
                out[f"max:{inp}:{i}"] = float(r["max_abs"])
            elif not i.startswith("gpu:"):      # measured by every run unless its wall-clock budget skipped it: NaN
                for k in ("ulp", "bias", "max"):
                    out[f"{k}:{inp}:{i}"] = float("nan")
        out[f"pred_acc:{inp}"] = prediction_accuracy(df, inp)
        dial = select(df, sweep="dial", inputs=inp)
        for i in ("baseline", "fa2", "fa1"):
            t = dial[dial["impl"] == i]["mean_abs_ulp"]
            out[f"dial:{inp}:{i}"] = (float(t.min()), float(t.max())) if len(t) else (float("nan"), float("nan"))
    out["dial_N"] = int(select(df, sweep="dial")["N"].iloc[0]) if len(select(df, sweep="dial")) else 0
    out["tile_N"] = int(select(df, sweep="tile")["N"].iloc[0]) if len(select(df, sweep="tile")) else 0
    out["br_same"], out["br_groups"] = br_invariance(df)
    return out


def bias_by_length(data: dict, impl: str, inputs: str = "attention", fmt: str = "bf16") -> list[tuple[int, float]]:
    """[(N, mean signed error along sign(V) in ULP)] of implementation `impl` over the sequence-length sweep of one
    `fa_deviation` result, at the claim's head dim, sorted by N."""
    df, st = frame(data), setup(data)
    s = select(df, sweep="seq", impl=impl, d=st["claim_head_dim"], inputs=inputs, fmt=fmt)
    return sorted((int(n), float(b)) for n, b in zip(s["N"], s["bias_ulp"]))


def bias_length_words(rows: list[tuple[int, float]]) -> str:
    """`bias_by_length` in words: the range of the signed error over the lengths and the lengths where it is
    negative and positive ("" for no rows)."""
    if not rows:
        return ""
    lo, hi = min(rows, key=lambda r: r[1]), max(rows, key=lambda r: r[1])
    neg = [f"{n:,}" for n, b in rows if b < 0]
    pos = [f"{n:,}" for n, b in rows if b > 0]
    side = "; ".join(x for x in (f"negative at N = {', '.join(neg)}" if neg else "",
                                 f"positive at N = {', '.join(pos)}" if pos else "") if x)
    return (f"over the {len(rows)} lengths from N = {rows[0][0]:,} to {rows[-1][0]:,} it runs from {lo[1]:+.3f} "
            f"(N = {lo[0]:,}) to {hi[1]:+.3f} ULP (N = {hi[0]:,}): {side}")
