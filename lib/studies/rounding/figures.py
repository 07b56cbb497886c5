"""Figures of chapter 1: the exact theory of the tie bias against enumeration and Monte Carlo, the Monte Carlo grid
as heat maps, the precision dial, and the kernel's bias beside the emulator's — each from `lib.fp.rounding_bias`
and `lib.fp.theory` values, in the book's one style."""
from __future__ import annotations

import numpy as np

from lib.book import plotting
from lib.fp import theory
from lib.fp.rounding_bias import METHODS

# The level of every interval the chapter draws and quotes: the Student-t half-widths of
# `lib.fp.rounding_bias.cluster_ci` (which writes the level inline; a test checks that they agree).
CI_LEVEL = 0.95

_METHOD_NAMES = {"rne": "RNE", "beta": "β shift", "sr": "SR"}
_PATHS = (("numpy", "numpy emulation"), ("emulated", "kernel, emulated path"), ("native", "kernel, tensor cores"))


def fig_theory(table, enum_rows=None, mc_points=None, k_saw=(2, 3, 4)):
    """Left: exact mean error vs k (r = 0 and r → 0⁺), with enumeration marks. Right: the sawtooth in ρ.
    Legends sit above the panels (their titles name the panels), so they cover no curve."""
    fig, (a1, a2) = plotting.figure(1, 2, height=3.6)
    ks = [r["k"] for r in table]
    a1.plot(ks, [float(r["A"]) for r in table], "o-", label="theory, r → 0⁺ (sticky)")
    a1.plot(ks, [float(r["mean_r0"]) for r in table], "s-", label="theory, r = 0 (ties to even)")
    a1.plot(ks, [1 / (2 * k) for k in ks], ":", color="0.5", label="1/(2k)")
    if enum_rows:
        a1.plot([e["k"] for e in enum_rows], [float(e["mean_ulps"]) for e in enum_rows], "x", color="k", ms=9,
                label="exhaustive enumeration")
    a1.set(xlabel="k tied terms", ylabel="mean error (ULP of the sum)")
    plotting.legend_above(a1, title="positive terms")
    rho = np.linspace(0, 3, 601)[1:]
    for k in k_saw:
        a2.plot(rho, theory.expected_error_float(k, rho), label=f"k = {k}")
    if mc_points:
        a2.errorbar([p[0] for p in mc_points], [p[1] for p in mc_points], yerr=[p[2] for p in mc_points], fmt="o",
                    color="k", ms=3, label="Monte Carlo, −P̄V error")
    a2.axhline(0, color="0.6", lw=0.8)
    a2.set(xlabel="remainder ρ = r / ULP(tied terms)", ylabel="mean error (ULP)")
    plotting.legend_above(a2, title="exact mean vs remainder", ncol=2)
    return fig


def fig_heatmaps(recs, value="pv", k_list=None, gaps=None, frac_neg=1.0, n_keys=256, meta=None):
    """Heat-maps of the mean signed error vs (k, gap): rows = methods (RNE, β shift, SR), columns = P̄V and O in
    both orders; k across, the score gap up. Each cell prints its mean in hundredths of an ULP (the colour scale's
    unit), so that the numbers fit the cells at the column width."""
    sel = [r for r in recs if r["frac_neg"] == frac_neg and r["n_keys"] == n_keys]
    k_list = sorted({r["k"] for r in sel}) if k_list is None else k_list
    gaps = sorted({r["gap"] for r in sel}) if gaps is None else gaps
    cols = [("pv", "unnormalised P̄V"), ("o_rtn", "O, round → normalise"), ("o_ntr", "O, normalise → round")]
    fig, axes = plotting.figure(len(METHODS), 3, height=1.0 + len(METHODS) * (0.5 + 0.155 * len(gaps)),
                                sharex=True, sharey=True, squeeze=False)
    vmax = 100 * max(0.05, max(abs(r[f"rne_{c}"]) for r in sel for c, _ in cols))
    for i, meth in enumerate(METHODS):
        for j, (c, title) in enumerate(cols):
            grid = np.full((len(gaps), len(k_list)), np.nan)
            for r in sel:
                grid[gaps.index(r["gap"]), k_list.index(r["k"])] = 100 * r[f"{meth}_{c}"]
            ax = axes[i, j]
            im = ax.imshow(grid, cmap="RdBu", vmin=-vmax, vmax=vmax, aspect="auto", origin="lower")
            for (a, b), v in np.ndenumerate(grid):
                if np.isfinite(v):
                    ax.text(b, a, f"{v:.0f}".replace("-", "−") if round(v) != 0 else "0", ha="center",
                            va="center", fontsize=8, color="w" if abs(v) > 0.6 * vmax else "0.15")
            ax.set_xticks(range(len(k_list)), k_list)
            ax.set_yticks(range(len(gaps)), [f"{g:g}" for g in gaps])
            ax.tick_params(length=2)
            if i == 0:
                ax.set_title(title)
            if i == len(METHODS) - 1:
                ax.set_xlabel("k tied maxima")
            if j == 0:
                ax.set_ylabel(f"{_METHOD_NAMES[meth]}: score gap g")
    fig.colorbar(im, ax=axes, shrink=0.5, aspect=30, label="mean signed error (0.01 ULP)")
    if meta:
        plotting.label_provenance(fig, meta)
    return fig


def fig_precision_dial(dial, meta=None):
    """Mean P̄V error in ULPs (flat, theory line) and relative error (∝ 2**-m) vs mantissa width m."""
    fig, (a1, a2) = plotting.figure(1, 2, height=3.3)
    ms = [d["m"] for d in dial]
    a1.errorbar(ms, [d["rne_pv"] for d in dial], yerr=[d["rne_pv_ci"] for d in dial], fmt="o-", label="RNE")
    a1.errorbar(ms, [d["sr_pv"] for d in dial], yerr=[d["sr_pv_ci"] for d in dial], fmt="s-", label="stochastic")
    a1.plot(ms, [d["theory_pv"] for d in dial], "k--", label="theory")
    a1.set(xlabel="mantissa bits m", ylabel="mean P̄V error (ULP)")
    plotting.legend_above(a1, ncol=3)
    rel = np.array([abs(d["rne_pv_rel"]) for d in dial])
    a2.semilogy(ms, rel, "o-", label="|mean relative error|, RNE")
    a2.semilogy(ms, rel[0] * 2.0 ** -(np.array(ms) - ms[0]), "k:", label="∝ $2^{-m}$")
    a2.set(xlabel="mantissa bits m", ylabel="|relative bias|")
    plotting.legend_above(a2, ncol=1)
    if meta:
        plotting.label_provenance(fig, meta)
    return fig


def fig_kernel_compare(cells, k: int = 2, gaps=None, meta=None):
    """Bars of the mean signed error (ULPs, 95 % CI) of `bias_kernel` cells with `k` ties: one row of panels per
    output (P̄V, O round → normalise, O normalise → round), one column per score gap (`gaps`: default every gap of
    the cells), methods along x, one bar per path (numpy emulation / kernel emulated / kernel native, when
    present)."""
    cells = [c for c in cells if c["k"] == k and (gaps is None or c["gap"] in gaps)]
    if not cells:
        raise ValueError(f"fig_kernel_compare: no cells with k = {k} and gaps {gaps}")
    gaps = sorted({c["gap"] for c in cells})
    paths = [(p, name) for p, name in _PATHS if any(c["path"] == p for c in cells)]
    methods = [m for m in METHODS if any(c["method"] == m for c in cells)]
    by = {(c["gap"], c["method"], c["path"]): c for c in cells}
    outs = (("pv", "P̄V"), ("o_rtn", "O, round → norm."), ("o_ntr", "O, norm. → round"))
    fig, axes = plotting.figure(len(outs), len(gaps), height=1.2 + 1.45 * len(outs), sharex=True, sharey=True,
                                squeeze=False)
    w = 0.8 / len(paths)
    x = np.arange(len(methods))
    for i, (key, oname) in enumerate(outs):
        for j, g in enumerate(gaps):
            ax = axes[i, j]
            for n, (p, pname) in enumerate(paths):
                cs = [by.get((g, m, p)) for m in methods]
                ax.bar(x + (n - (len(paths) - 1) / 2) * w, [c[key] if c else np.nan for c in cs], w,
                       yerr=[c[key + "_ci"] if c else np.nan for c in cs], capsize=2, color=f"C{n}",
                       label=pname if (i, j) == (0, 0) else None)
            ax.axhline(0, color="0.5", lw=0.8)
            ax.set_xticks(x, [_METHOD_NAMES[m] for m in methods])
            if i == 0:
                ax.set_title(f"k = {k}, score gap g = {g:g}")
            if j == 0:
                ax.set_ylabel(f"{oname}\n(ULP)")
    fig.legend(loc="outside upper center", ncol=len(paths), title=f"mean signed error, {CI_LEVEL:.0%} CI")
    if meta:
        plotting.label_provenance(fig, meta)
    return fig
