"""Figures of chapter 3: Golden et al.'s deviation plots at our scale, and weight drift over training.

Every function takes a result's data (and arrays) and returns a matplotlib Figure in the book style
(`lib.book.plotting`); legends sit outside the axes.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from lib.book import plotting
from lib.studies.golden import reading as dr
from lib.studies.golden import drift

SIM_ORDER = ("baseline", "fa2", "fa1", "fa2-lowp", "fa1-lowp")
_STYLE = {"baseline": dict(ls="-", marker="s"), "fa2": dict(ls="-", marker="o"), "fa1": dict(ls="--", marker="^"),
          "fa2-lowp": dict(ls=":", marker="o"), "fa1-lowp": dict(ls=":", marker="^"),
          "ours:paper": dict(ls="-.", marker="D"), "ours:paper+fix": dict(ls="-.", marker="x"),
          "gpu:eager": dict(ls="-", marker="P"), "gpu:sdpa_flash": dict(ls="-", marker="*"),
          "gpu:sdpa_math": dict(ls="--", marker="v"), "gpu:ours_paper": dict(ls="-.", marker="d")}


def _colors(keys):
    pal = sns.color_palette(plotting.PALETTE, max(10, len(keys)))
    return {k: pal[i % len(pal)] for i, k in enumerate(keys)}


_IMPL_COLORS = _colors(list(_STYLE))


def _legend(fig, axes, ncol=3):
    handles, labels = {}, {}
    for ax in np.atleast_1d(axes).flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=ncol, fontsize=9,
                   frameon=False)


def _line(ax, x, y, impl, **kw):
    ax.plot(x, y, color=_IMPL_COLORS.get(impl), label=dr.IMPL_LABELS.get(impl, impl), ms=4, lw=1.3,
            **(_STYLE.get(impl, {}) | kw))


def format_figure(data: dict, *, inputs: str = "normal", impls=None):
    """Golden's Figs. 3–4 along the precision dial: max |Δ| and mean |Δ| (ULP) against mantissa bits (8-bit
    exponent; 7 = BF16), one line per implementation, at the dial's N."""
    df = dr.frame(data)
    s = dr.select(df, sweep="dial", inputs=inputs)
    impls = impls or [i for i in (*SIM_ORDER, "ours:paper", "ours:paper+fix") if i in set(s["impl"])]
    s = s.assign(bits=s["fmt"].map(lambda f: 7 if f == "bf16" else int(f[1:])))
    fig, axes = plotting.figure(1, 2, width=6.8, height=3.4)
    for impl in impls:
        t = s[s["impl"] == impl].sort_values("bits")
        _line(axes[0], t["bits"], t["max_abs"], impl)
        _line(axes[1], t["bits"], t["mean_abs_ulp"], impl)
    b = np.array(sorted(set(s["bits"])))
    base = s[(s["impl"] == "baseline")].sort_values("bits")
    if len(base):
        ref = base["max_abs"].iloc[0] * 2.0 ** (-(b - b[0]))
        axes[0].plot(b, ref, color="0.6", lw=0.8, ls="--", label="∝ 2⁻ᵐ (one ULP)")
    axes[0].set(yscale="log", xlabel="mantissa bits m", ylabel="max |Δ| from FP64")
    axes[1].set(yscale="log", xlabel="mantissa bits m", ylabel="mean |Δ| (ULPs)")
    n = int(s["N"].iloc[0]) if len(s) else 0
    fig.suptitle(f"Deviation vs format ({inputs} inputs, N = {n})", fontsize=10)
    _legend(fig, axes)
    return fig


def seq_figure(data: dict, *, inputs: str = "normal", d: int = 64, fmt: str = "bf16", impls=None):
    """Golden's Fig. 5 at one format: (a) max |Δ|, (b) mean |Δ| ± std in ULPs, (c) max |Δ| over baseline's, all
    against the sequence length, at Golden's tile for this head dim."""
    df = dr.frame(data)
    s = dr.select(df, sweep="seq", inputs=inputs, d=d, fmt=fmt)
    have = set(s["impl"])
    impls = impls or [i for i in (*SIM_ORDER, "ours:paper", "gpu:eager", "gpu:sdpa_flash", "gpu:sdpa_math",
                                  "gpu:ours_paper") if i in have]
    fig, axes = plotting.figure(1, 3, width=6.8, height=3.4)
    for impl in impls:
        t = s[s["impl"] == impl].sort_values("N")
        _line(axes[0], t["N"], t["max_abs"], impl)
        sd = t["std_abs"] / t["ulp"]
        _line(axes[1], t["N"], t["mean_abs_ulp"], impl)
        axes[1].fill_between(t["N"], (t["mean_abs_ulp"] - sd).clip(lower=1e-3), t["mean_abs_ulp"] + sd,
                             color=_IMPL_COLORS.get(impl), alpha=0.08, lw=0)
        if impl != "baseline":
            base = "gpu:eager" if impl.startswith("gpu:") else "baseline"
            b = s[s["impl"] == base].set_index("N")["max_abs"]
            r = t.set_index("N")["max_abs"] / b
            _line(axes[2], r.index, r.values, impl)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
    axes[0].set(yscale="log", ylabel="max |Δ|")
    axes[1].set(yscale="log", ylabel="mean ± std |Δ| (ULPs)")
    axes[2].set(yscale="log", ylabel="max |Δ| / baseline's")
    axes[2].axhline(1, color="0.6", lw=0.8)
    tile = data.get("tiles", {}).get(str(d))
    fig.suptitle(f"{dr.format_label(fmt)}, d = {d}, tile (Br, Bc) = {tuple(tile) if tile else '?'}, {inputs} inputs",
                 fontsize=10)
    _legend(fig, axes)
    return fig


def tile_figure(data: dict, *, fmt: str = "bf16", impl: str = "fa1", inputs: str = "normal"):
    """Golden's Fig. 6 for one implementation: max |Δ| against the tile area Br·Bc (their axis; points coloured by
    Br) and against the key-tile width Bc alone (where the points of one Bc coincide)."""
    df = dr.frame(data)
    s = dr.select(df, sweep="tile", inputs=inputs, fmt=fmt, impl=impl)
    brs = sorted(set(s["Br"]))
    cols = _colors(brs)
    fig, axes = plotting.figure(1, 2, width=6.8, height=3.3, sharey=True)
    for br in brs:
        t = s[s["Br"] == br].sort_values("Bc")
        axes[0].plot(t["Br"] * t["Bc"], t["max_abs"], "o", color=cols[br], ms=5, label=f"Br = {br}")
        axes[1].plot(t["Bc"], t["max_abs"], "o-", color=cols[br], ms=5, lw=1, alpha=0.8, label=f"Br = {br}")
    axes[0].set(xscale="log", yscale="log", xlabel="tile area Br·Bc", ylabel="max |Δ|")
    axes[1].set(xscale="log", xlabel="key-tile width Bc")
    axes[0].set_xscale("log", base=2)
    axes[1].set_xscale("log", base=2)
    n = int(s["N"].iloc[0]) if len(s) else 0
    same = s.groupby("Bc")["hash"].nunique()
    verdict = "Br changes nothing" if len(same) and (same == 1).all() else "Br changes O"
    fig.suptitle(f"{dr.IMPL_LABELS.get(impl, impl)}, {dr.format_label(fmt)}, N = {n}: {verdict}", fontsize=10)
    _legend(fig, axes, ncol=6)
    return fig


def prediction_figure(data: dict):
    """Measured excess mean-square error of FA1-style storage over FA2 (u²) against the derivation's prediction,
    every FA1 cell of the sweeps, by input distribution."""
    df = dr.frame(data)
    fig, ax = plotting.figure(1, 1, width=4.6, height=3.6)
    cols = _colors(["normal", "attention"])
    lo, hi = np.inf, 0.0
    for inputs in ("normal", "attention"):
        rows = []
        for sweep in ("seq", "tile"):
            for fmt in ("bf16", "fp16"):
                for d in sorted(set(df["d"])):
                    t = dr.fa1_prediction_table(df, d=d, inputs=inputs, fmt=fmt, sweep=sweep)
                    if len(t):
                        rows.append(t)
        if not rows:
            continue
        t = pd.concat(rows)
        t = t[(t["predicted"] > 0) & (t["measured"] > 0)]
        ax.plot(t["predicted"], t["measured"], "o", ms=4, alpha=0.7, color=cols[inputs], label=f"{inputs} inputs")
        if len(t):
            lo, hi = min(lo, t["predicted"].min(), t["measured"].min()), max(hi, t["predicted"].max(),
                                                                              t["measured"].max())
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, ls="--", label="measured = predicted")
    ax.set(xscale="log", yscale="log", xlabel="predicted excess (ULP²)", ylabel="measured excess (ULP²)")
    ax.legend(fontsize=9, frameon=False, loc="upper left")
    return fig


# ------------------------------------------------------------------------------------------------------ drift
PAIR_LABELS = {"flash_vs_naive": "SDPA flash vs FP32 attn", "fa2_vs_naive": "fa2 kernel vs FP32 attn",
               "paper_vs_naive": "paper kernel vs FP32 attn", "paper_vs_fa2": "paper vs fa2 kernel",
               "seed": "seed 0 vs seed 1", "bf16_vs_fp32": "BF16 vs FP32 training"}


def drift_figure(data: dict, arrays: dict, *, matrix: str | None = None, pairs=None):
    """W1 and max |ΔW| over training steps for every pair: at one matrix (default: the claim's focus, the paper's
    layer-2 W_Q) and the median over all matrices of W1 relative to mean |W|."""
    matrix = matrix or data["claim_setup"]["focus_matrix"]
    pairs = pairs or data["pairs"]
    steps = arrays["steps"]
    cols = _colors(list(PAIR_LABELS) + [p for p in pairs if p not in PAIR_LABELS])
    fig, axes = plotting.figure(1, 3, width=6.8, height=3.4, sharex=True)
    for p in pairs:
        kw = dict(color=cols[p], lw=1.3, label=PAIR_LABELS.get(p, p))
        for ax, y in ((axes[0], drift.series(data, arrays, p, matrix, "w1")),
                      (axes[1], drift.series(data, arrays, p, matrix, "max_abs"))):
            ax.plot(steps, np.where(y > 0, y, np.nan), **kw)
        rel = np.stack([drift.series(data, arrays, p, m, "rel_w1") for m in data["matrices"]])
        axes[2].plot(steps, np.where(np.nanmedian(rel, 0) > 0, np.nanmedian(rel, 0), np.nan), **kw)
    axes[0].set(yscale="log", ylabel=f"W1 at {matrix}")
    axes[1].set(yscale="log", ylabel=f"max |ΔW| at {matrix}")
    axes[2].set(yscale="log", ylabel="median W1 / mean|W|")
    for ax in axes:
        ax.set_xlabel("step")
    _legend(fig, axes)
    return fig


def drift_ratio_figure(data: dict, arrays: dict, *, num: str | None = None, dens=None):
    """Heatmaps per layer × matrix kind of log10(W1(num) / W1(den)) at the horizon: how many times more the
    low-precision pair (default) drifts than each pair in `dens`; < 0 (red) means the pair drifts more."""
    st = data["claim_setup"]
    num = num or st["lowprec_pair"]
    dens = dens or [p for p in (st["flash_pair"], *st.get("placement_pairs", [])) if p in data["pairs"]]
    fig, axes = plotting.figure(1, len(dens), width=min(6.8, 2.4 * len(dens) + 0.6), height=3.2, sharey=True)
    axes = np.atleast_1d(axes)
    for ax, den in zip(axes, dens):
        tbl = drift.layer_table(data, arrays, num, den)
        with np.errstate(divide="ignore", invalid="ignore"):
            val = np.log10(tbl)
        sns.heatmap(val, ax=ax, cmap="RdBu", center=0, vmin=-1.5, vmax=1.5, cbar=ax is axes[-1],
                    annot=np.round(tbl, 1), fmt="g", annot_kws={"fontsize": 9},
                    xticklabels=["Q", "K", "V", "O", "fc", "proj"], yticklabels=range(tbl.shape[0]),
                    cbar_kws={"label": "log10 ratio"} if ax is axes[-1] else None)
        ax.set_title(PAIR_LABELS.get(den, den), fontsize=9)
        ax.set_xlabel("matrix")
    axes[0].set_ylabel("layer (0-based)")
    return fig
