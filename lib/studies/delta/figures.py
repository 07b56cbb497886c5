"""Figures of the δ channel (chapters 4, 5), in the spirit of Qiu & Yao's Figs. 4–6 plus the statistics they lack.

Each function returns a matplotlib Figure in the book style. Inputs are a `delta_capture` result (anything with
.data, .arrays, .meta: `lib.book.results.Result`) or one layer of a stored capture (`Capture.layer(l)`).

* `token_errors(arr, scale, head, token)`: one token's O error per feature (ULPs) against dO, coloured by the
  sign of V where it is one-signed (Fig. 5(b, c) of the paper).
* `o_error_by_v_sign(res)`: per head, the share of O errors with the sign of V in one-signed features, and the
  mean error along sign(V), with 95% intervals (the statistics behind L3).
* `sign_strip(res)`: per head, the share of captured steps with Σ Δδ > 0 (exact 95% bands) and of rows with Δδ > 0.
* `cumulative_delta(res, seed)`: cumulative Σ Δδ over steps per head, in units of its own random-walk scale, with
  the ±2σ envelope of a random walk (Fig. 5(a), with the band the paper lacks).
* `term_heatmaps(arr, scale, head, side)`: signed cosines between the rank-1 terms of the tokens with the largest
  |Δδ|, beside shuffled signs and random directions (Fig. 4).
* `step_heatmaps(res, seed, layer, head)`: cosines between E_Q at different steps, beside shuffled signs.
* `push_figure(res)`: L7 — the extrapolated push of E_Q on ‖W_Q^h‖₂ against the measured growth, per head.
* `variant_strip(res)`: the normalised bias of Δδ per head when the captures are replayed under other numerics.
* `phase_figure(entries)`: the δ-channel statistics at every captured step of several results (a healthy run
  beside the 8e-3 run before its blow-up), median over heads and seeds with a 10–90 % band.
* `contrast_figure(healthy, contrast)`: `phase_figure` of the healthy `delta_capture` beside `delta_capture_8e3`
  cut at each seed's blow-up onset (chapter 4).
* `telemetry_sign_strip(reading)`: per head and seed, the share of a training run's telemetry steps whose Σ Δδ over
  the batch is > 0 (`lib.studies.delta.reading.telemetry_sign`), one panel per arm.

Every figure is one column wide (`lib.book.plotting.figure` defaults) with the book's font sizes; per-head strips put
the heads of a layer side by side and label the layers, not every head, so that 36 heads stay readable.
"""
from __future__ import annotations

import numpy as np
import torch

from lib.book import plotting
from lib import stats
from lib.studies.delta import stats as ds
from lib.studies.delta import verdicts as dv

CI_LEVEL = 0.95          # the level of the exact intervals drawn on shares
ENVELOPE_SIGMAS = 2.0    # the random-walk envelope of the cumulative Σ Δδ, in standard deviations


def _arr(res, name):
    if name not in res.arrays:
        raise KeyError(f"result {getattr(res, 'name', '?')} has no array {name!r}")
    return np.asarray(res.arrays[name], dtype=np.float64)


def _head_axis(ax, L: int, H: int, xlabel: bool = True) -> np.ndarray:
    """x axis of a per-head strip: heads at 0 … L·H − 1, layer-major; one tick label per layer (a head's own index
    is its place in the group), thin lines between layers. Returns the head positions."""
    x = np.arange(L * H)
    ax.set_xticks([l * H + (H - 1) / 2 for l in range(L)], [f"layer {l}" for l in range(L)])
    ax.set_xticks(x, minor=True)
    ax.tick_params(axis="x", which="major", length=0)
    for l in range(1, L):
        ax.axvline(l * H - 0.5, color="0.8", lw=0.6)
    ax.set_xlim(-0.5, L * H - 0.5)
    if xlabel:
        ax.set_xlabel(f"head (heads 0–{H - 1} of each layer, left to right)")
    return x


def _stamp(fig, res):
    plotting.label_provenance(fig, getattr(res, "meta", {}) or {})


# ------------------------------------------------------------------------------------------------ one capture
def _layer_tensors(arr, head):
    t = {n: torch.from_numpy(np.asarray(arr[n], np.float64))[:, head:head + 1] for n in ("q", "k", "v", "o", "do")}
    t["x"] = torch.from_numpy(np.asarray(arr["x"], np.float64))
    return t


def token_errors(arr: dict, scale: float, head: int = 0, token=None, row: int = 0, one_signed: float = ds.ONE_SIGNED):
    """O_lp − O_ref of one token (ULPs of O, bars) and dO (line, right axis) per feature of `head`; bars coloured by
    the sign of V where V is one-signed (|Σ P·sign V| ≥ `one_signed`), grey where mixed. token=None: the row with the
    largest |Δδ| among rows whose BF16 maximum repeats (any row if none does)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    t = _layer_tensors(arr, head)
    p, o_ref = ds.reference(t["q"], t["k"], t["v"], scale)
    dd = ds.delta_delta(t["o"], o_ref, t["do"])[row, 0]
    tie, _ = ds.ties(t["q"], t["k"], scale)
    if token is None:
        cand = torch.where(tie[row, 0], dd.abs(), torch.zeros_like(dd))
        token = int(torch.argmax(cand if cand.max() > 0 else dd.abs()))
    err = (t["o"] - o_ref)[row, 0, token]
    ulp = ds.ulp_bf16(o_ref[row, 0, token])
    e_ulp = torch.where(torch.isfinite(ulp), err / ulp, torch.zeros_like(err)).numpy()
    s = ds.v_sign(p, t["v"])[row, 0, token].numpy()
    do = t["do"][row, 0, token].numpy()
    pal = plotting.plt.get_cmap("coolwarm")
    c_pos, c_neg, c_mix = pal(0.9), pal(0.1), "0.7"
    col = [c_mix if abs(si) < one_signed else (c_pos if si > 0 else c_neg) for si in s]
    fig, ax = plotting.figure(1, 1, height=3.3)
    i = np.arange(len(e_ulp))
    ax.bar(i, e_ulp, color=col, width=0.8)
    ax.axhline(0, color="0.3", lw=0.6)
    ax.set(xlabel="feature i of the head", ylabel="O error (ULPs of O)")
    ax2 = ax.twinx()
    ax2.plot(i, do, color="k", lw=1.0, marker=".", ms=3)
    ax2.axhline(0, color="k", lw=0.4, ls=":")
    ax2.set_ylabel("dO (line)")
    lim = np.abs(do).max() or 1.0
    ax2.set_ylim(-1.1 * lim, 1.1 * lim)
    elim = np.abs(e_ulp).max() or 1.0
    ax.set_ylim(-1.1 * elim, 1.1 * elim)        # both axes symmetric: their zeros coincide
    tie_s = "its BF16 maximum repeats" if bool(tie[row, 0, token]) else "no repeated maximum"
    handles = [Patch(color=c_pos, label="V > 0"), Patch(color=c_neg, label="V < 0"),
               Patch(color=c_mix, label="V mixed"), Line2D([], [], color="k", marker=".", ms=3, label="dO")]
    plotting.legend_above(ax, ncol=4, handles=handles,
                          title=f"head {head}, token {token} ({tie_s}); Δδ = {float(dd[token]):+.2e}")
    return fig


def term_heatmaps(arr: dict, scale: float, head: int = 0, side: str = "q", top: int = 48, row=None, seed: int = 0):
    """Three (top × top) panels of signed cosines between the rank-1 terms Δδ[T]·a_T b_Tᵀ (side "q": a = (PK)[T],
    b = X[T]; side "k": a = Q[T], b = (PX)[T]) of the `top` tokens with the largest |Δδ|: the terms as measured,
    with shuffled signs of Δδ, and with random directions a, b of the same shapes."""
    if side not in ("q", "k"):
        raise ValueError(f"side must be 'q' or 'k', got {side!r}")
    t = _layer_tensors(arr, head)
    rows = slice(None) if row is None else slice(row, row + 1)
    t = {n: v[rows] for n, v in t.items()}
    p, o_ref = ds.reference(t["q"], t["k"], t["v"], scale)
    dd = ds.delta_delta(t["o"], o_ref, t["do"])[:, 0].reshape(-1)
    if side == "q":
        a, b = (p @ t["k"])[:, 0], t["x"]
    else:
        a, b = t["q"][:, 0], (p @ t["x"][:, None])[:, 0]
    w, ah, bh, _ = ds.term_factors(dd, a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), scale)
    top = min(top, int(w.numel()))
    mats = [ds.term_cos_matrix(w, ah, bh, top=top),
            ds.term_cos_matrix(w, ah, bh, top=top, baseline="shuffled", seed=seed),
            ds.term_cos_matrix(w, ah, bh, top=top, baseline="random", seed=seed)]
    titles = ["measured", "shuffled signs of Δδ", "random directions"]
    fig, axes = plotting.figure(1, 3, height=2.9)
    off = ~np.eye(top, dtype=bool)
    for ax, m, ti in zip(axes, mats, titles):
        im = ax.imshow(m, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(f"{ti}\nmean off-diagonal {m[off].mean():+.2f}")
        ax.set(xticks=[], yticks=[])
    axes[0].set_ylabel("token")
    fig.supxlabel(f"the {top} tokens of largest |Δδ|, in token order (both axes)", fontsize=plotting.FONT["label"])
    fig.colorbar(im, ax=list(axes), shrink=0.85, ticks=[-1, -0.5, 0, 0.5, 1], label="signed cosine")
    return fig


# ------------------------------------------------------------------------------------------------ one result
def _seed_labels(res):
    return [f"seed {r['seed']}" for r in res.data["runs"]]


def _offsets(S: int) -> np.ndarray:
    """x offsets of S seeds inside one head's slot."""
    return (np.arange(S) - (S - 1) / 2) * 0.6 / max(S, 1)


def _pass_shares(n: int, heads: int, alpha: float):
    """The share of n steps a head needs above ½ (and below) to pass a one-sided exact sign test at α / heads:
    (hi, lo), or None when no share passes."""
    from scipy.stats import binom
    if n <= 0:
        return None
    crit = (binom.isf(alpha / heads, n, 0.5) + 1) / n      # P(X ≥ k) ≤ α/heads, X ~ Bin(n, ½), from k = isf + 1
    return (crit, 1 - crit) if crit <= 1 else None


def _share_strip(ax, k, n, alpha: float, labels, L: int, H: int, xlabel: bool = True):
    """Shares k/n per seed (rows of k, n: (S, L, H)) with exact 95% bars, and the shaded shares that pass the sign
    test at α / (L·H) for the largest n (red: above ½, blue: below)."""
    S = k.shape[0]
    x = _head_axis(ax, L, H, xlabel=xlabel)
    for s, off in enumerate(_offsets(S)):
        ks, ns = k[s].ravel(), n[s].ravel()
        with np.errstate(invalid="ignore", divide="ignore"):
            f = ks / ns
        lo, hi = stats.clopper_pearson(ks, ns, level=CI_LEVEL)
        ax.errorbar(x + off, f, yerr=[f - lo, hi - f], fmt="o", ms=3.5, lw=0.9, capsize=0, color=f"C{s}",
                    label=labels[s])
    ax.axhline(0.5, color="0.3", lw=0.7, ls=":")
    nmax = int(np.nanmax(n)) if np.isfinite(np.nanmax(n)) else 0
    band = _pass_shares(nmax, L * H, alpha)
    if band is not None:
        ax.axhspan(band[0], 1.02, color="C3", alpha=0.08, lw=0)
        ax.axhspan(-0.02, band[1], color="C0", alpha=0.08, lw=0)
    ax.set_ylim(-0.02, 1.02)


def sign_strip(res, alpha: float = ds.ALPHA):
    """Per head (layer.head), per seed: the share of captured steps whose Σ Δδ over the captured rows is > 0,
    with its exact 95% interval (bars), the verdict's Bonferroni threshold (shaded: shares significant at one-sided
    α/heads for the largest step count, above ½ in red, below in blue), and the share of rows with Δδ > 0 (grey
    dots)."""
    from matplotlib.lines import Line2D
    pos, n = _arr(res, "sum__dd_step_pos"), _arr(res, "sum__dd_step_n")
    rows = _arr(res, "sum__rows_frac_pos")
    S, L, H = pos.shape
    fig, ax = plotting.figure(1, 1, height=3.4)
    _share_strip(ax, pos, n, alpha, _seed_labels(res), L, H)
    x = np.arange(L * H)
    for s, off in enumerate(_offsets(S)):
        ax.plot(x + off, rows[s].ravel(), ".", color="0.35", ms=3)
    ax.set_ylabel("share with Δδ > 0")
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], ls="", marker=".", color="0.35", label="rows (all seeds)"))
    plotting.legend_above(ax, ncol=min(S + 1, 4), handles=handles, title="captured steps (95% bars), per seed; rows")
    _stamp(fig, res)
    return fig


def cumulative_delta(res, seed_index: int = 0, highlight: int = 3):
    """Cumulative Σ Δδ over captured steps for every head of one seed, each divided by its own random-walk scale
    √(Σ_all x²), with the ±2σ envelope of a sum of independent symmetric increments of equal size (±2√(n/N)).
    The `highlight` heads with the largest |z| are drawn in colour."""
    inc = _arr(res, "st__sum_dd")[seed_index]                   # (N, L, H)
    steps = _arr(res, "steps")[seed_index]
    ok = np.isfinite(steps)
    inc, steps = inc[ok], steps[ok]
    N, L, H = inc.shape
    fig, ax = plotting.figure(1, 1, height=3.4)
    n = np.arange(1, N + 1)
    ax.fill_between(steps, -ENVELOPE_SIGMAS * np.sqrt(n / N), ENVELOPE_SIGMAS * np.sqrt(n / N), color="0.85", lw=0,
                    label=f"random walk ±{ENVELOPE_SIGMAS:g}σ")
    zs = []
    for l in range(L):
        for h in range(H):
            x = inc[:, l, h]
            tot = np.sqrt((x * x).sum())
            path = np.cumsum(x) / tot if tot > 0 else np.zeros(N)
            zs.append((abs(path[-1]), l, h, path))
    zs.sort(key=lambda z: -z[0])
    for i, (_, l, h, path) in enumerate(zs):
        if i < highlight:
            ax.plot(steps, path, lw=1.4, label=f"head {l}.{h}")
        else:
            ax.plot(steps, path, color="0.55", lw=0.6, alpha=0.7)
    ax.axhline(0, color="0.3", lw=0.6)
    ax.set(xlabel="step", ylabel="Σ Δδ / √(Σ (per-step Δδ)²)")
    plotting.legend_above(ax, ncol=min(highlight, len(zs)) + 1,
                          title=f"{_seed_labels(res)[seed_index]}: every head (grey), the "
                                f"{min(highlight, len(zs))} of largest |end| (layer.head) in colour")
    _stamp(fig, res)
    return fig


def o_error_by_v_sign(res):
    """Per head: share of non-zero O errors with the sign of V in one-signed features (95% interval, pooled over
    steps and rows — rows are not independent, so read it as a description, not a test), and the mean error along
    sign(V) in ULPs, for one-signed and for mixed features. Two panels, one above the other, on one head axis."""
    from matplotlib.lines import Line2D
    agree, dis = _arr(res, "st__n_os_agree"), _arr(res, "st__n_os_disagree")
    ulp_os, n_os = _arr(res, "st__sum_os_ulp"), _arr(res, "st__n_os")
    ulp_mix, n_mix = _arr(res, "st__sum_mix_ulp"), _arr(res, "st__n_mix")
    S, _, L, H = agree.shape
    fig, (a0, a1) = plotting.figure(2, 1, height=5.2, sharex=True)
    k = np.nansum(agree, 1)                                     # (S, L, H)
    m = k + np.nansum(dis, 1)
    x = _head_axis(a0, L, H, xlabel=False)
    _head_axis(a1, L, H)
    for s, off in enumerate(_offsets(S)):
        ks, ms_ = k[s].ravel(), m[s].ravel()
        with np.errstate(invalid="ignore", divide="ignore"):
            f = ks / ms_
            lo, hi = stats.clopper_pearson(ks, ms_, level=CI_LEVEL)
            a0.errorbar(x + off, f, yerr=[f - lo, hi - f], fmt="o", ms=3.5, lw=0.9, color=f"C{s}",
                        label=_seed_labels(res)[s])
            a1.plot(x + off, (np.nansum(ulp_os[s], 0) / np.nansum(n_os[s], 0)).ravel(), "o", ms=3.5, color=f"C{s}")
            a1.plot(x + off, (np.nansum(ulp_mix[s], 0) / np.nansum(n_mix[s], 0)).ravel(), "x", ms=4, color=f"C{s}")
    a0.axhline(0.5, color="0.3", lw=0.7, ls=":")
    a1.axhline(0.0, color="0.3", lw=0.7, ls=":")
    a0.set(ylabel="share with sign(V)")
    a1.set(ylabel="mean along sign(V)\n(ULPs of O)")
    plotting.legend_above(a0, ncol=min(S, 4), title="O errors in one-signed features, per seed (95% bars)")
    plotting.legend_above(a1, ncol=2, handles=[
        Line2D([], [], ls="", marker="o", ms=3.5, color="0.3", label="one-signed features"),
        Line2D([], [], ls="", marker="x", ms=4, color="0.3", label="mixed features")])
    _stamp(fig, res)
    return fig


def step_heatmaps(res, seed_index: int = 0, layer: int = 0, head: int = 0):
    """Cosines between E_Q at the captured steps of one head (steps × steps), beside the same for E_Q recomputed
    with shuffled signs of Δδ at every step."""
    steps = _arr(res, "steps")[seed_index]
    steps = steps[np.isfinite(steps)].astype(int)
    n = len(steps)
    mats = [_arr(res, "sum__steps_q_cos")[seed_index, layer, head, :n, :n],
            _arr(res, "sum__steps_q_shuf_cos")[seed_index, layer, head, :n, :n]]
    fig, axes = plotting.figure(1, 2, height=3.3)
    off = ~np.eye(n, dtype=bool)
    tick = np.unique(np.linspace(0, n - 1, min(n, 5)).astype(int))
    for ax, m, ti in zip(axes, mats, ("E_Q as measured", "E_Q, shuffled signs of Δδ")):
        im = ax.imshow(m, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_xticks(tick, steps[tick])
        ax.set_yticks(tick, steps[tick] if ax is axes[0] else [])
        ax.set_title(f"{ti}\nmean off-diagonal {np.nanmean(m[off]) if n > 1 else float('nan'):+.2f}")
        ax.set_xlabel("step")
    axes[0].set_ylabel("step")
    fig.colorbar(im, ax=list(axes), shrink=0.85, ticks=[-1, -0.5, 0, 0.5, 1], label="cosine")
    _stamp(fig, res)
    return fig


def push_figure(res):
    """Per head: the push of E_Q on ‖W_Q^h‖₂ summed over the captured steps and extrapolated to every step and the
    whole batch (first order), as a share of the measured growth of σ₁(W_Q^h) over the run, against that growth:
    Adam-scaled (left) and the plain SGD direction (right). The share spans orders of magnitude of both signs, so the
    y axis is symmetric-log (linear within ±`linthresh`); the dashed line is the verdict's share for a push that
    matters (`lib.studies.delta.verdicts.PUSH_SHARE`), the solid line 0."""
    grow = _arr(res, "sum__wq_growth")
    pa, ps = _arr(res, "sum__push_adam_total"), _arr(res, "sum__push_sgd_total")
    fig, (a0, a1) = plotting.figure(1, 2, height=3.6, sharey=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = [pa / grow, ps / grow]
    finite = np.concatenate([np.abs(x[np.isfinite(x) & (x != 0)]).ravel() for x in shares])
    lin = float(10 ** np.floor(np.log10(np.percentile(finite, 5)))) if finite.size else 1e-3
    for ax, share, what in ((a0, shares[0], "Adam-scaled: lr·u₁ᵀ(E ⊘ (√v̂+ε))v₁"),
                            (a1, shares[1], "SGD direction: lr·u₁ᵀE v₁")):
        for s in range(grow.shape[0]):
            ax.plot(grow[s].ravel(), share[s].ravel(), "o", ms=4, color=f"C{s}",
                    label=_seed_labels(res)[s] if ax is a0 else None)
        ax.axhline(dv.PUSH_SHARE, color="0.4", lw=0.8, ls="--",
                   label=f"share {dv.PUSH_SHARE:g}" if ax is a0 else None)
        ax.axhline(0, color="0.3", lw=0.6)
        ax.set_yscale("symlog", linthresh=lin)
        ax.set(xlabel="growth of ‖W_Q^h‖₂ over the run", title=what)
    # a few decades per side as ticks (symlog's default labels every decade, which crowds the axis)
    top = np.nanmax(np.abs(np.concatenate([x.ravel() for x in shares]))) if finite.size else 1.0
    k0, k1 = int(np.log10(lin)), int(np.ceil(np.log10(max(top, lin))))
    step = max(1, -(-(k1 - k0) // 3))
    ks = list(range(k1, k0, -step)) or [k1]       # not the linear decade: its ticks would touch 0
    a0.set_yticks([-(10.0 ** k) for k in ks] + [0.0] + [10.0 ** k for k in reversed(ks)])
    a0.set_ylabel("push / growth")
    fig.legend(loc="outside upper center", ncol=min(grow.shape[0] + 1, 4),
               title="extrapolated push of E_Q on ‖W_Q^h‖₂, one dot per head")
    _stamp(fig, res)
    return fig


def variant_strip(res):
    """Per head, the normalised bias mean(Δδ)/mean|Δδ| of the captured steps replayed (`replay_rows` rows) under
    each numerics variant of the result (e.g. the paper placement with 64-key and untiled rounding, FA2)."""
    names = [v[0] for v in res.data["variants"]]
    S, _, L, H = _arr(res, f"rv__{names[0]}__sum_dd").shape
    fig, ax = plotting.figure(1, 1, height=3.4)
    x = _head_axis(ax, L, H)
    for i, vn in enumerate(names):
        sd, sa = _arr(res, f"rv__{vn}__sum_dd"), _arr(res, f"rv__{vn}__sum_abs_dd")
        with np.errstate(invalid="ignore", divide="ignore"):
            nb = np.nansum(sd, axis=1) / np.nansum(sa, axis=1)          # (S, L, H)
        for s in range(nb.shape[0]):
            ax.plot(x + (i - (len(names) - 1) / 2) * 0.6 / len(names), nb[s].ravel(), "o", ms=3.5,
                    color=f"C{i}", label=vn if s == 0 else None)
    ax.axhline(0, color="0.3", lw=0.6, ls=":")
    ax.set(ylabel="mean(Δδ) / mean|Δδ|")
    plotting.legend_above(ax, ncol=min(len(names), 4), title="captured steps replayed under (all seeds)")
    _stamp(fig, res)
    return fig


def telemetry_sign_strip(reading: dict, alpha: float = ds.ALPHA):
    """One panel per arm of a `lib.studies.delta.reading.telemetry_sign` reading: per head and seed, the share of
    telemetry steps whose Σ Δδ over the batch is > 0, with its exact 95% interval, and shaded the shares that pass a
    one-sided exact sign test at α / heads (red: above ½, blue: below). reading None (no result yet): one empty
    panel that says so, so that a chapter's figure slot stays filled."""
    if reading is None:
        fig, ax = plotting.figure(1, 1, height=1.2)
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no training telemetry result yet", ha="center", va="center", transform=ax.transAxes)
        return fig
    arms = list(reading["arms"])
    fig, axes = plotting.figure(len(arms), 1, height=1.0 + 2.4 * len(arms), sharex=True, squeeze=False)
    axes = axes[:, 0]
    for i, (ax, arm) in enumerate(zip(axes, arms)):
        r = reading["arms"][arm]
        S, L, H = r["k"].shape
        _share_strip(ax, r["k"], r["n"], alpha, [f"seed {s}" for s in r["seeds"]], L, H,
                     xlabel=i == len(arms) - 1)
        ax.set_ylabel("share of steps\nwith Σ Δδ > 0")
        plotting.legend_above(ax, ncol=min(S, 4), title=f"{arm}: per seed, 95% bars")
    plotting.label_provenance(fig, reading.get("meta") or {})
    return fig


def phase_figure(entries):
    """Issue 16's contrast: the δ-channel statistics at every captured step of several `delta_capture` results
    (`lib.studies.delta.phases.per_step`), one line per result (median over heads and seeds, band: 10th–90th
    percentile), in four panels on a shared step axis: the share of rows with Δδ > 0, the share of O errors with
    sign(V) in one-signed features, the rank-1 terms' mean cosine (sign ignored) and σ₁(W_Q^h) (log scale).

    entries: [(label, result, before)] with before {seed: step} or None — a seed's captures at or after its step
    are left out (the 8e-3 runs' blow-up onsets), so a line ends where its last run's captures end."""
    from lib.studies.delta import phases as ph
    panels = (("rows_pos", "rows with Δδ > 0", 0.5), ("os_agree", "O errors with\nsign(V)", 0.5),
              ("tok_cos", "rank-1 terms'\nmean cosine", 0.0), ("wq", "σ₁(W_Q) per head", None))
    fig, axes = plotting.figure(2, 2, height=4.8, sharex=True)
    for i, (label, res, before) in enumerate(entries):
        p = ph.per_step(res, before)
        for ax, (key, _, _) in zip(axes.flat, panels):
            q = p[key]
            ax.fill_between(p["step"], q[:, 0], q[:, 2], color=f"C{i}", alpha=0.2, lw=0)
            ax.plot(p["step"], q[:, 1], "o-", ms=2.5, lw=1.1, color=f"C{i}", label=label)
    for ax, (key, ylab, ref) in zip(axes.flat, panels):
        if ref is not None:
            ax.axhline(ref, color="0.3", lw=0.7, ls=":")
        ax.set_ylabel(ylab)
    axes[1, 1].set_yscale("log")
    for ax in axes[1]:
        ax.set_xlabel("step")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=max(1, len(entries)), frameon=False,
               title=f"median over heads and seeds; band: {ph.BAND[0]}th–{ph.BAND[1]}th percentile")
    plotting.label_provenance(fig, [getattr(r, "meta", {}) or {} for _, r, _ in entries])
    return fig


def contrast_figure(healthy, contrast):
    """`phase_figure` of chapter 4's contrast: a healthy-regime `delta_capture` result beside `delta_capture_8e3`,
    whose captures are cut at each seed's blow-up onset (`lib.studies.delta.phases.onsets`)."""
    from lib.studies.delta import phases as ph

    def lr(r):
        return (getattr(r, "meta", {}) or {}).get("config", {}).get("lr", r.data.get("config", {}).get("lr"))
    return phase_figure([(f"healthy regime, LR {lr(healthy):g}", healthy, None),
                         (f"LR {lr(contrast):g}, before the blow-up", contrast, ph.onsets(contrast))])
