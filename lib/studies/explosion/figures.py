"""Figures of the loss-explosion results (`lr_sweep`, `headline`): each takes a `lib.book.results.Result` and returns
a matplotlib Figure in the book style, stamped with the result's provenance.

* `loss_curves(res)`: training loss (smoothed) and pre-clip grad norm per run, colour = arm, line style = seed
  (the paper's Fig. 2 at our scale).
* `lr_sweep_figure(res)`: per arm, the loss rise (final − best smoothed loss) against the LR, marker = outcome.
* `qk_norm_figure(res, run_ids, layer)`: ‖W_Q‖₂ per layer over steps, and per head of `layer` (Fig. 3).
* `tie_rate_figure(res, run_ids)`: per-layer tie rate over steps (Fig. 9).
* `delta_error_figure(res, run_ids, layer)`: cumulative Σ Δδ per head of `layer` over telemetry steps.
"""
from __future__ import annotations

import numpy as np

from lib.book import plotting
from lib.training.proxy import ARMS
from lib.training.outcome import SMOOTH
from lib.training.regime import max_logit_curve
from lib.training.runs import arm_label, smoothed_loss

_OUTCOME_MARKERS = {"stable": "o", "degraded": "s", "exploded": "X", "nonfinite": "v", "short": "."}


def _colors(res=None):
    """Arm -> colour: the fixed arms of ARMS first (stable across figures), then any other arm in `res`."""
    import seaborn as sns
    names = list(ARMS) + sorted({r["arm"] for r in (res.data["runs"] if res is not None else [])} - set(ARMS))
    return dict(zip(names, sns.color_palette(plotting.PALETTE, len(names))))


def _runs(res, run_ids=None):
    runs = [r for r in res.data["runs"] if run_ids is None or r["id"] in run_ids]
    if not runs:
        raise ValueError(f"no runs selected from {res.name} (asked for {run_ids!r})")
    return runs


def loss_curves(res, run_ids=None, window: int = SMOOTH):
    """Two panels over optimiser steps: smoothed training loss (nats/byte) and pre-clip grad norm (log)."""
    col, sty = _colors(res), plotting.seed_styles(r["seed"] for r in res.data["runs"])
    fig, (a0, a1) = plotting.figure(1, 2, height=3.8)
    for r in _runs(res, run_ids):
        loss = res.arrays[f"{r['id']}__loss"]
        gn = res.arrays[f"{r['id']}__grad_norm"]
        kw = dict(color=col[r["arm"]], ls=sty[r["seed"]], lw=1.2)
        a0.plot(*smoothed_loss(loss, window), label=f"{r['arm']} s{r['seed']}" + (" (repeat)" if r.get("tag") else ""), **kw)
        a1.plot(np.arange(len(gn)), gn, alpha=0.8, **kw)
    a0.set(xlabel="step", ylabel=f"train loss (nats/byte, {window}-step mean)")
    a1.set(xlabel="step", ylabel="grad norm before clipping", yscale="log")
    a1.axhline(1.0, color="0.5", lw=0.8, ls=":")
    fig.legend(*a0.get_legend_handles_labels(), loc="outside upper center", ncol=4)
    plotting.label_provenance(fig, res.meta)
    return fig


def lr_sweep_figure(res):
    """Loss rise (final − best smoothed loss) against LR per arm; marker shape = outcome."""
    col = _colors(res)
    fig, ax = plotting.figure(height=3.8)
    for arm in res.data["arms"]:
        rs = sorted((r for r in res.data["runs"] if r["arm"] == arm), key=lambda r: r["lr"])
        lrs = [r["lr"] for r in rs]
        rise = [r["rise"] if isinstance(r["rise"], (int, float)) and np.isfinite(r["rise"]) else np.nan for r in rs]
        ax.plot(lrs, rise, color=col[arm], lw=1, label=arm)
        for r, y in zip(rs, rise):
            ax.scatter([r["lr"]], [y if np.isfinite(y) else np.nanmax(rise + [0.0])], color=col[arm],
                       marker=_OUTCOME_MARKERS[r["outcome"]], s=40, zorder=3)
    th = res.data["thresholds"]
    ax.axhline(th["rise_exploded"], color="0.4", ls="--", lw=0.8)
    ax.axhline(th["rise_degraded"], color="0.6", ls=":", lw=0.8)
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="loss rise: final − best (nats/byte)")
    plotting.legend_outside(ax, "right", title="arm")
    ax.set_title("markers: o stable, s degraded, X exploded, v non-finite", loc="left")
    plotting.label_provenance(fig, res.meta)
    return fig


def qk_norm_figure(res, run_ids, layer: int):
    """Left: per-layer ‖W_Q‖₂ over steps (colour = layer, style = run); right: per-head ‖W_Q^h‖₂ of `layer`."""
    from matplotlib.lines import Line2D
    runs = _runs(res, run_ids)
    fig, (a0, a1) = plotting.figure(1, 2, height=4.0)
    for i, r in enumerate(runs):
        st = res.arrays[f"{r['id']}__step"]
        wl = res.arrays[f"{r['id']}__wq_norm_layer"]          # (n_tele, L)
        wh = res.arrays[f"{r['id']}__wq_norm"][:, layer]       # (n_tele, H)
        ls = plotting.LINE_STYLES[i % len(plotting.LINE_STYLES)]
        for l in range(wl.shape[1]):
            a0.plot(st, wl[:, l], color=f"C{l}", ls=ls, label=f"layer {l}" if i == 0 else None)
        for h in range(wh.shape[1]):
            a1.plot(st, wh[:, h], color=f"C{h}", ls=ls, label=f"head {h}" if i == 0 else None)
    a0.set(xlabel="step", ylabel="‖W_Q‖₂ (whole layer)")
    a1.set(xlabel="step", ylabel=f"‖W_Q^h‖₂, layer {layer}")
    plotting.legend_above(a0, ncol=3)
    plotting.legend_above(a1, ncol=3)
    fig.legend(handles=[Line2D([], [], color="0.2", ls=plotting.LINE_STYLES[i % len(plotting.LINE_STYLES)], label=r["id"])
                        for i, r in enumerate(runs)], loc="outside upper center", ncol=min(3, len(runs)),
               title="line style = run")
    plotting.label_provenance(fig, res.meta)
    return fig


def tie_rate_figure(res, run_ids):
    """Per-layer fraction of query rows whose BF16 row max repeats, over telemetry steps, one panel per run."""
    runs = _runs(res, run_ids)
    fig, axes = plotting.figure(1, len(runs), height=3.6, sharey=True, squeeze=False)
    for ax, r in zip(axes[0], runs):
        st = res.arrays[f"{r['id']}__step"]
        tr = res.arrays[f"{r['id']}__tie_rate"]
        for l in range(tr.shape[1]):
            ax.plot(st, tr[:, l], color=f"C{l}", label=f"layer {l}")
        ax.set(xlabel="step", title=r["id"])
    axes[0][0].set_ylabel("tie rate (rows with a\nrepeated BF16 max)")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside upper center", ncol=6)
    plotting.label_provenance(fig, res.meta)
    return fig


def delta_error_figure(res, run_ids, layer: int):
    """Cumulative Σ Δδ = Σ rowsum(dO∘(O_lp − O_hp)) per head of `layer`, summed over telemetry steps only."""
    runs = _runs(res, run_ids)
    fig, axes = plotting.figure(1, len(runs), height=3.6, squeeze=False)
    for ax, r in zip(axes[0], runs):
        st = res.arrays[f"{r['id']}__step"]
        d = np.nan_to_num(res.arrays[f"{r['id']}__delta_err_sum"][:, layer])   # (n_tele, H)
        cum = np.cumsum(d, axis=0)
        for h in range(cum.shape[1]):
            ax.plot(st, cum[:, h], color=f"C{h}", label=f"head {h}")
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set(xlabel="step", title=r["id"])
    axes[0][0].set_ylabel(f"cumulative Σ Δδ, layer {layer}")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside upper center", ncol=6)
    plotting.label_provenance(fig, res.meta)
    return fig


def max_logit_figure(res, run_ids, layer: int | None = None):
    """Largest attention logit (score units, max over the telemetry batch) per run over telemetry steps, log scale:
    one line per run for `layer`, or the max over layers when `layer` is None. The BF16 spacing at the logit's size
    is marked on the right axis, since the tie rate depends on it."""
    runs = _runs(res, run_ids)
    colors = _colors(res)
    styles = plotting.seed_styles(r["seed"] for r in res.data["runs"])
    fig, ax = plotting.figure(height=3.8)
    for r in runs:
        st = res.arrays[f"{r['id']}__step"]
        ml = res.arrays[f"{r['id']}__max_logit"]
        y = ml.max(axis=1) if layer is None else ml[:, layer]
        ax.plot(st, y, color=colors[r["arm"]], ls=styles.get(r["seed"], "-"), label=r["id"])
    ax.set(yscale="log", xlabel="step",
           ylabel="max attention logit" + (" (all layers)" if layer is None else f" (layer {layer})"))
    sec = ax.secondary_yaxis("right", functions=(lambda v: np.maximum(v, 1e-30) * 2.0 ** -8,
                                                  lambda u: np.maximum(u, 1e-30) * 2.0 ** 8))
    sec.set_ylabel("≈ BF16 spacing at that logit")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside upper center", ncol=3)
    plotting.label_provenance(fig, res.meta)
    return fig


def max_logit_at(arrays: dict, run_id: str, step: int) -> float:
    """Largest attention logit over all layers of run `run_id` at the first telemetry step ≥ `step` (the last one
    if the run stopped earlier), from a result's arrays ("<id>__step", "<id>__max_logit" of shape (telemetry steps,
    layers)). Score units (scale·q·k)."""
    st = np.asarray(arrays[f"{run_id}__step"])
    i = min(int(np.searchsorted(st, step)), len(st) - 1)
    return float(np.asarray(arrays[f"{run_id}__max_logit"])[i].max())


# ------------------------------------------------------------------------------------- the healthy regime (chapter 6)
_REF_COLORS = {"fp32": "0.15", "sdpa": "0.55"}


def regime_figure(res_list, bound: float = 100.0):
    """The regime pilots: the largest attention logit over telemetry steps of every FP32 (dark) and SDPA (grey) run,
    line style = seed, one panel per LR, with the health bound. `res_list`: the pilot Results (`regime_sweep*`)."""
    runs = [(res, r) for res in res_list for r in res.data["runs"]]
    lrs = sorted({r["lr"] for _, r in runs}, reverse=True)
    if not lrs:
        raise ValueError("no pilot runs")
    seeds = sorted({r["seed"] for _, r in runs})
    sty = plotting.seed_styles(seeds)
    fig, axes = plotting.figure(1, len(lrs), height=3.2, sharey=True)
    axes = np.atleast_1d(axes)
    top = bound
    for ax, lr in zip(axes, lrs):
        for res, r in runs:
            if r["lr"] != lr:
                continue
            st, ml = max_logit_curve(res.arrays, r["id"])
            top = max(top, float(np.nanmax(ml)))
            ax.plot(st, ml, color=_REF_COLORS.get(r["arm"], "C0"), ls=sty[r["seed"]], lw=1.2)
        ax.axhline(bound, color="C3", lw=1.0, ls="--")
        ax.set(title=f"LR {lr:g}", xlabel="step")
    axes[0].set_ylabel("largest attention logit")
    axes[0].set_ylim(0, top * 1.05)
    plotting.style_legend(fig, {a: c for a, c in _REF_COLORS.items()}, {f"seed {s}": v for s, v in sty.items()},
                  extra=[(f"bound {bound:g}", dict(color="C3", ls="--"))], ncol=6)
    plotting.label_provenance(fig, res_list[0].meta)
    return fig


def healthy_figure(res, refs=None, window: int = 200, bound: float | None = None):
    """The healthy headline: smoothed training loss (left) and the largest attention logit (right) over steps for
    every arm of `res` (colour) and the FP32 / SDPA references of the pilots `refs` at the same LR (greys), line style
    = seed. `res`: the `healthy_headline` Result (or one that holds its own references, such as the width-768
    headline, with `refs` None); `refs`: a Result holding the pilots' runs (`regime.union`); `bound`: draw the regime
    rule's largest-logit bound on the right panel."""
    lr = res.data["lr"]
    rows = [(res, r) for r in res.data["runs"]] + \
        ([(refs, r) for r in refs.data["runs"] if r["lr"] == lr] if refs is not None else [])
    arms = list(dict.fromkeys(r["arm"] for _, r in rows))
    col = {a: _REF_COLORS.get(a, f"C{i}") for i, a in enumerate(arms)}
    seeds = sorted({r["seed"] for _, r in rows})
    sty = plotting.seed_styles(seeds)
    fig, (a0, a1) = plotting.figure(1, 2, height=3.3)
    for src, r in rows:
        loss = src.arrays[f"{r['id']}__loss"]
        x, y = smoothed_loss(loss, window)
        a0.plot(x, y, color=col[r["arm"]], ls=sty[r["seed"]], lw=1.1)
        st, ml = max_logit_curve(src.arrays, r["id"])
        a1.plot(st, ml, color=col[r["arm"]], ls=sty[r["seed"]], lw=1.1)
    extra = []
    if bound is not None:
        a1.axhline(bound, color="C3", lw=1.0, ls="--")
        extra = [(f"bound {bound:g}", dict(color="C3", ls="--"))]
    lo = min(np.nanmin(smoothed_loss(src.arrays[f"{r['id']}__loss"], window)[1][len(src.arrays[f"{r['id']}__loss"])
                                                                                   // 5:]) for src, r in rows)
    a0.set(xlabel="step", ylabel=f"train loss, {window}-step mean", ylim=(lo - 0.05, lo + 0.6))
    a1.set(xlabel="step", ylabel="largest attention logit")
    label = {r["arm"]: arm_label(src, r["arm"]) for src, r in rows}        # arms in words, not their names
    plotting.style_legend(fig, {label[a]: c for a, c in col.items()}, {f"seed {s}": v for s, v in sty.items()},
                          extra=extra, ncol=3)
    plotting.label_provenance(fig, res.meta)
    return fig
