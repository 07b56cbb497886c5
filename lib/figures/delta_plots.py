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
"""
from __future__ import annotations

import numpy as np
import torch

from lib.book import plotting
from lib.readings import delta_stats as ds

FS = 8   # smallest font size (pt)


def _arr(res, name):
    if name not in res.arrays:
        raise KeyError(f"result {getattr(res, 'name', '?')} has no array {name!r}")
    return np.asarray(res.arrays[name], dtype=np.float64)


def _head_labels(L, H):
    return [f"{l}.{h}" for l in range(L) for h in range(H)]


def _stamp(fig, res):
    meta = getattr(res, "meta", {}) or {}
    if meta:
        fig.get_layout_engine().set(rect=(0, 0.045, 1, 0.955))   # keep the corner stamp clear of the x labels
    plotting.label_provenance(fig, meta)


# ------------------------------------------------------------------------------------------------ one capture
def _layer_tensors(arr, head):
    t = {n: torch.from_numpy(np.asarray(arr[n], np.float64))[:, head:head + 1] for n in ("q", "k", "v", "o", "do")}
    t["x"] = torch.from_numpy(np.asarray(arr["x"], np.float64))
    return t


def token_errors(arr: dict, scale: float, head: int = 0, token=None, row: int = 0, one_signed: float = ds.ONE_SIGNED):
    """O_lp − O_ref of one token (ULPs of O, bars) and dO (line, right axis) per feature of `head`; bars coloured by
    the sign of V where V is one-signed (|Σ P·sign V| ≥ `one_signed`), grey where mixed. token=None: the row with the
    largest |Δδ| among rows whose BF16 maximum repeats (any row if none does)."""
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
    col = ["0.7" if abs(si) < one_signed else (pal(0.9) if si > 0 else pal(0.1)) for si in s]
    fig, ax = plotting.figure(1, 1, width=7.0, height=3.2)
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
    ax.set_title(f"head {head}, token {token} ({tie_s}); Δδ = {float(dd[token]):+.2e}; bars: V > 0 red, "
                 f"V < 0 blue, mixed grey", fontsize=FS)
    ax.tick_params(labelsize=FS)
    ax2.tick_params(labelsize=FS)
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
    fig, axes = plotting.figure(1, 3, width=9.6, height=3.4)
    off = ~np.eye(top, dtype=bool)
    for ax, m, ti in zip(axes, mats, titles):
        im = ax.imshow(m, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(f"{ti}\nmean off-diagonal {m[off].mean():+.2f}", fontsize=FS)
        ax.set(xlabel="token (top |Δδ|)", xticks=[], yticks=[])
    axes[0].set_ylabel("token (top |Δδ|)")
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="signed cosine")
    return fig


# ------------------------------------------------------------------------------------------------ one result
def _seed_labels(res):
    return [f"seed {r['seed']}" for r in res.data["runs"]]


def sign_strip(res, alpha: float = ds.ALPHA):
    """Per head (layer.head), per seed: the share of captured steps whose Σ Δδ over the captured rows is > 0,
    with its exact 95% interval (bars), the verdict's Bonferroni threshold (shaded: shares significant at one-sided
    α/heads for the largest step count, above ½ in red, below in blue), and the share of rows with Δδ > 0 (grey
    dots)."""
    pos, n = _arr(res, "sum__dd_step_pos"), _arr(res, "sum__dd_step_n")
    rows = _arr(res, "sum__rows_frac_pos")
    S, L, H = pos.shape
    fig, ax = plotting.figure(1, 1, width=max(6.0, 0.28 * L * H + 2), height=3.4)
    x = np.arange(L * H)
    labels = _seed_labels(res)
    for s in range(S):
        k, m = pos[s].ravel(), n[s].ravel()
        with np.errstate(invalid="ignore", divide="ignore"):
            f = k / m
        lo, hi = ds.clopper_pearson(k, m)
        off = (s - (S - 1) / 2) * 0.6 / S
        ax.errorbar(x + off, f, yerr=[f - lo, hi - f], fmt="o", ms=3.5, lw=0.9, capsize=0, label=labels[s])
        ax.plot(x + off, rows[s].ravel(), ".", color="0.35", ms=3)
    ax.axhline(0.5, color="0.3", lw=0.7, ls=":")
    nmax = int(np.nanmax(n)) if np.isfinite(np.nanmax(n)) else 0
    if nmax > 0:
        from scipy.stats import binom
        # P(X ≥ k) ≤ α/heads, X ~ Bin(n, ½), from k = isf + 1: the share of steps a head needs to pass
        crit = (binom.isf(alpha / (L * H), nmax, 0.5) + 1) / nmax
        if crit <= 1:
            ax.axhspan(crit, 1.02, color="C3", alpha=0.08, lw=0)
            ax.axhspan(-0.02, 1 - crit, color="C0", alpha=0.08, lw=0)
    ax.set_xticks(x, _head_labels(L, H), rotation=90, fontsize=FS)
    ax.set(xlabel="head (layer.head)", ylabel="share with Δδ > 0", ylim=(-0.02, 1.02))
    ax.legend(fontsize=FS, ncol=min(S, 3), loc="lower right", title="steps (bars, 95%); rows: grey dots",
              title_fontsize=FS)
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
    fig, ax = plotting.figure(1, 1, width=6.4, height=3.6)
    n = np.arange(1, N + 1)
    ax.fill_between(steps, -2 * np.sqrt(n / N), 2 * np.sqrt(n / N), color="0.85", lw=0,
                    label="random walk ±2σ")
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
    ax.legend(fontsize=FS, loc="upper left")
    ax.set_title(f"{_seed_labels(res)[seed_index]}: every head (grey), the {highlight} largest |end| in colour",
                 fontsize=FS)
    _stamp(fig, res)
    return fig


def o_error_by_v_sign(res):
    """Per head: share of non-zero O errors with the sign of V in one-signed features (95% interval, pooled over
    steps and rows — rows are not independent, so read it as a description, not a test), and the mean error along
    sign(V) in ULPs, for one-signed and for mixed features."""
    agree, dis = _arr(res, "st__n_os_agree"), _arr(res, "st__n_os_disagree")
    ulp_os, n_os = _arr(res, "st__sum_os_ulp"), _arr(res, "st__n_os")
    ulp_mix, n_mix = _arr(res, "st__sum_mix_ulp"), _arr(res, "st__n_mix")
    S, _, L, H = agree.shape
    fig, (a0, a1) = plotting.figure(1, 2, width=max(8.0, 0.45 * L * H + 3), height=3.4)
    x = np.arange(L * H)
    for s in range(S):
        k, m = np.nansum(agree[s], 0).ravel(), (np.nansum(agree[s], 0) + np.nansum(dis[s], 0)).ravel()
        with np.errstate(invalid="ignore", divide="ignore"):
            f = k / m
        lo, hi = ds.clopper_pearson(k, m)
        off = (s - (S - 1) / 2) * 0.6 / S
        a0.errorbar(x + off, f, yerr=[f - lo, hi - f], fmt="o", ms=3.5, lw=0.9, label=_seed_labels(res)[s])
        with np.errstate(invalid="ignore", divide="ignore"):
            a1.plot(x + off, (np.nansum(ulp_os[s], 0) / np.nansum(n_os[s], 0)).ravel(), "o", ms=3.5,
                    color=f"C{s}")
            a1.plot(x + off, (np.nansum(ulp_mix[s], 0) / np.nansum(n_mix[s], 0)).ravel(), "x", ms=3.5,
                    color=f"C{s}")
    a0.axhline(0.5, color="0.3", lw=0.7, ls=":")
    a1.axhline(0.0, color="0.3", lw=0.7, ls=":")
    for a in (a0, a1):
        a.set_xticks(x, _head_labels(L, H), rotation=90, fontsize=FS)
        a.set_xlabel("head (layer.head)")
    a0.set(ylabel="share of O errors with sign(V)")
    a1.set(ylabel="mean O error along sign(V) (ULPs)")
    a1.set_title("o: one-signed features, x: mixed", fontsize=FS)
    a0.legend(fontsize=FS)
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
    fig, axes = plotting.figure(1, 2, width=7.6, height=3.6)
    off = ~np.eye(n, dtype=bool)
    for ax, m, ti in zip(axes, mats, ("E_Q as measured", "E_Q with shuffled signs of Δδ")):
        im = ax.imshow(m, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        tick = np.linspace(0, n - 1, min(n, 5)).astype(int)
        ax.set_xticks(tick, steps[tick], fontsize=FS)
        ax.set_yticks(tick, steps[tick], fontsize=FS)
        ax.set_title(f"{ti}\nmean off-diagonal {np.nanmean(m[off]) if n > 1 else float('nan'):+.2f}", fontsize=FS)
        ax.set_xlabel("step")
    axes[0].set_ylabel("step")
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="cosine")
    _stamp(fig, res)
    return fig


def push_figure(res):
    """Per head: the push of E_Q on ‖W_Q^h‖₂ summed over the captured steps and extrapolated to every step and the
    whole batch (first order; Adam-scaled, and plain SGD direction), against the measured growth of σ₁(W_Q^h) over
    the run. The line y = 0.1·x is the verdict's threshold for a push that matters."""
    grow = _arr(res, "sum__wq_growth")
    pa, ps = _arr(res, "sum__push_adam_total"), _arr(res, "sum__push_sgd_total")
    fig, (a0, a1) = plotting.figure(1, 2, width=9.0, height=3.8)
    for s in range(grow.shape[0]):
        a0.plot(grow[s].ravel(), pa[s].ravel(), "o", ms=4, label=_seed_labels(res)[s])
        a1.plot(grow[s].ravel(), ps[s].ravel(), "o", ms=4)
    for a, what in ((a0, "Adam-scaled: lr·u₁ᵀ(E ⊘ (√v̂+ε))v₁"), (a1, "SGD direction: lr·u₁ᵀE v₁")):
        xs = np.array(a.get_xlim())
        a.plot(xs, ds.PUSH_SHARE * xs, color="0.4", lw=0.8, ls="--", label=f"{ds.PUSH_SHARE:g} × growth")
        a.axhline(0, color="0.3", lw=0.6)
        a.set(xlabel="measured growth of ‖W_Q^h‖₂", ylabel="extrapolated push")
        a.set_title(what, fontsize=FS)
    a0.legend(fontsize=FS)
    _stamp(fig, res)
    return fig


def variant_strip(res):
    """Per head, the normalised bias mean(Δδ)/mean|Δδ| of the captured steps replayed (`replay_rows` rows) under
    each numerics variant of the result (e.g. the paper placement with 64-key and untiled rounding, FA2)."""
    names = [v[0] for v in res.data["variants"]]
    S, _, L, H = _arr(res, f"rv__{names[0]}__sum_dd").shape
    fig, ax = plotting.figure(1, 1, width=max(6.0, 0.3 * L * H + 2), height=3.4)
    LH = None
    for i, vn in enumerate(names):
        sd, sa = _arr(res, f"rv__{vn}__sum_dd"), _arr(res, f"rv__{vn}__sum_abs_dd")
        with np.errstate(invalid="ignore", divide="ignore"):
            nb = np.nansum(sd, axis=1) / np.nansum(sa, axis=1)          # (S, L, H)
        S, L, H = nb.shape
        LH = L * H
        for s in range(S):
            ax.plot(np.arange(LH) + (i - (len(names) - 1) / 2) * 0.6 / len(names), nb[s].ravel(), "o", ms=3.5,
                    color=f"C{i}", label=vn if s == 0 else None)
    ax.axhline(0, color="0.3", lw=0.6, ls=":")
    ax.set_xticks(np.arange(LH), _head_labels(L, H), rotation=90, fontsize=FS)
    ax.set(xlabel="head (layer.head)", ylabel="mean(Δδ) / mean|Δδ|")
    ax.legend(fontsize=FS, title="replayed under", title_fontsize=FS)
    _stamp(fig, res)
    return fig
