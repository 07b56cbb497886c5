"""Figures of the loss-explosion results (`lr_sweep`, `headline`): each takes a `lib.book.results.Result` and returns
a matplotlib Figure in the book style, stamped with the result's provenance.

* `loss_curves(res)`: training loss (smoothed) and pre-clip grad norm per run, colour = arm, line style = seed
  (the paper's Fig. 2 at our scale).
* `lr_sweep_figure(res)`: per arm, the loss rise (final − best smoothed loss) at each swept LR, marker = outcome.
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


def _run_words(res, r, width: int | None = None) -> str:
    """A run as a legend or a panel title names it: its arm in words and its seed (wrapped at `width` characters)."""
    import textwrap
    t = f"{arm_label(res, r['arm'])}, seed {r['seed']}" + (" (repeat)" if r.get("tag") else "")
    return textwrap.fill(t, width) if width else t


HEALTHY_WINDOW = 200    # steps: the healthy figures' loss mean (longer than SMOOTH, so the log axis reads)


def loss_curves(res, run_ids=None, window: int = SMOOTH):
    """Two panels over optimiser steps: smoothed training loss (nats/byte) and pre-clip grad norm (log)."""
    col, sty = _colors(res), plotting.seed_styles(r["seed"] for r in res.data["runs"])
    fig, (a0, a1) = plotting.figure(1, 2, height=3.8)
    for r in _runs(res, run_ids):
        loss = res.arrays[f"{r['id']}__loss"]
        gn = res.arrays[f"{r['id']}__grad_norm"]
        kw = dict(color=col[r["arm"]], ls=sty[r["seed"]], lw=1.2)
        a0.plot(*smoothed_loss(loss, window), **kw)
        a1.plot(np.arange(len(gn)), gn, alpha=0.8, **kw)
    a0.set(xlabel="step", ylabel=f"train loss (nats/byte, {window}-step mean)")
    a1.set(xlabel="step", ylabel="grad norm before clipping", yscale="log")
    a1.axhline(1.0, color="0.5", lw=0.8, ls=":")
    shown = list(dict.fromkeys(r["arm"] for r in _runs(res, run_ids)))     # arms in words, seeds by line style
    plotting.style_legend(fig, {arm_label(res, a): col[a] for a in shown},
                          {f"seed {s}": v for s, v in sty.items()}, ncol=3)
    plotting.label_provenance(fig, res.meta)
    return fig


def lr_sweep_figure(res):
    """Loss rise (final − best smoothed loss) per arm (rows, in words) at each swept LR (colour), one marker per run,
    its shape the run's outcome; no lines join the LRs, which are only the few that were run."""
    import textwrap
    lrs = sorted({r["lr"] for r in res.data["runs"]})
    arms = list(res.data["arms"])
    fig, ax = plotting.figure(height=0.45 * len(arms) + 1.6)
    off = {lr: (i - (len(lrs) - 1) / 2) * 0.25 for i, lr in enumerate(lrs)}
    for y, arm in enumerate(arms):
        for r in (r for r in res.data["runs"] if r["arm"] == arm):
            rise = r["rise"] if isinstance(r["rise"], (int, float)) and np.isfinite(r["rise"]) else np.nan
            ax.scatter([rise], [y + off[r["lr"]]], color=f"C{lrs.index(r['lr'])}",
                       marker=_OUTCOME_MARKERS[r["outcome"]], s=45, zorder=3)
    th = res.data["thresholds"]
    ax.axvline(th["rise_exploded"], color="0.4", ls="--", lw=0.8)
    ax.axvline(th["rise_degraded"], color="0.6", ls=":", lw=0.8)
    ax.set_yticks(range(len(arms)), [textwrap.fill(arm_label(res, a), 34) for a in arms])
    ax.invert_yaxis()
    ax.set(xlabel="loss rise: final − best smoothed loss (nats/byte)")
    from matplotlib.lines import Line2D
    hs = [Line2D([], [], color=f"C{i}", marker="o", ls="", label=f"LR {lr:g}") for i, lr in enumerate(lrs)]
    seen = dict.fromkeys(r["outcome"] for r in res.data["runs"])
    hs += [Line2D([], [], color="0.3", marker=_OUTCOME_MARKERS[o], ls="", label=o) for o in seen]
    fig.legend(handles=hs, loc="outside upper center", ncol=min(len(hs), 5))
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
    fig.legend(handles=[Line2D([], [], color="0.2", ls=plotting.LINE_STYLES[i % len(plotting.LINE_STYLES)], label=_run_words(res, r))
                        for i, r in enumerate(runs)], loc="outside upper center", ncol=min(2, len(runs)),
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
        ax.set(xlabel="step", title=_run_words(res, r, 24))
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
        ax.set(xlabel="step", title=_run_words(res, r, 24))
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
        ax.plot(st, y, color=colors[r["arm"]], ls=styles.get(r["seed"], "-"), label=_run_words(res, r))
    ax.set(yscale="log", xlabel="step",
           ylabel="max attention logit" + (" (all layers)" if layer is None else f" (layer {layer})"))
    sec = ax.secondary_yaxis("right", functions=(lambda v: np.maximum(v, 1e-30) * 2.0 ** -8,
                                                  lambda u: np.maximum(u, 1e-30) * 2.0 ** 8))
    sec.set_ylabel("≈ BF16 spacing at that logit")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside upper center", ncol=2)
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


def _seed_mean(curves):
    """(x, mean, lo, hi) over seeds of (x, y) curves, on the steps all of them have."""
    n = min(len(x) for x, _ in curves)
    ys = np.array([y[:n] for _, y in curves], dtype=np.float64)
    return curves[0][0][:n], ys.mean(0), ys.min(0), ys.max(0)


def healthy_figure(res, refs=None, window: int = HEALTHY_WINDOW, bound: float | None = None):
    """The healthy headline, one line per arm (the mean over its seeds, shaded: the range over seeds): (a) the
    smoothed training loss on a log axis, so that the first steps show; (b) each arm's loss minus FP32 attention's,
    where the arms differ; (c) the largest attention logit. `res`: the `healthy_headline` Result (or one that holds
    its own references, such as the width-768 headline, with `refs` None); `refs`: a Result holding the pilots'
    runs (`regime.union`), whose FP32 and SDPA runs at the same LR are drawn in greys; `bound`: the regime rule's
    largest-logit bound, drawn on (c)."""
    lr = res.data["lr"]
    rows = [(res, r) for r in res.data["runs"] if not r.get("tag")] + \
        ([(refs, r) for r in refs.data["runs"] if r["lr"] == lr and not r.get("tag")] if refs is not None else [])
    arms = list(dict.fromkeys(r["arm"] for _, r in rows))
    col = {a: _REF_COLORS.get(a, f"C{i}") for i, a in enumerate(arms)}
    loss, logit, label = {}, {}, {}
    for src, r in rows:
        loss.setdefault(r["arm"], []).append(smoothed_loss(src.arrays[f"{r['id']}__loss"], window))
        logit.setdefault(r["arm"], []).append(max_logit_curve(src.arrays, r["id"]))
        label[r["arm"]] = arm_label(src, r["arm"])        # arms in words, not their names
    fig, axd = plotting.figure(1, 1, height=6.0)
    fig.clear()
    axd = fig.subplot_mosaic([["loss", "gap"], ["logit", "logit"]])
    ref = _seed_mean(loss["fp32"]) if "fp32" in loss else None
    for arm in arms:
        x, m, lo, hi = _seed_mean(loss[arm])
        axd["loss"].plot(x, m, color=col[arm], lw=1.2)
        if ref is not None:
            n = min(len(m), len(ref[1]))
            axd["gap"].plot(x[:n], m[:n] - ref[1][:n], color=col[arm], lw=1.2)
            axd["gap"].fill_between(x[:n], lo[:n] - ref[1][:n], hi[:n] - ref[1][:n], color=col[arm], alpha=0.15,
                                    lw=0)
        st, mm, l2, h2 = _seed_mean(logit[arm])
        axd["logit"].plot(st, mm, color=col[arm], lw=1.2)
        axd["logit"].fill_between(st, l2, h2, color=col[arm], alpha=0.15, lw=0)
    extra = [("range over seeds (shaded)", dict(color="0.6", lw=6, alpha=0.3))]
    if bound is not None:
        axd["logit"].axhline(bound, color="C3", lw=1.0, ls="--")
        extra.append((f"bound {bound:g}", dict(color="C3", ls="--")))
    axd["loss"].set(xlabel="step", ylabel=f"train loss, {window}-step mean", yscale="log")
    axd["gap"].axhline(0, color="0.3", lw=0.6)
    axd["gap"].set(xlabel="step", ylabel="loss − FP32 attention's")
    axd["logit"].set(xlabel="step", ylabel="largest attention logit")
    plotting.style_legend(fig, {label[a]: c for a, c in col.items()}, {}, extra=extra, ncol=2)
    plotting.label_provenance(fig, res.meta)
    return fig
