"""Figures of the census chapter ("Where can the chain start?").

* `training_figure(res, label)`: training loss (smoothed) and validation loss against tokens seen.
* `conjunction_figure(res, label)`: per layer, the largest conjunction rate over its heads at each census event,
  for the authors' placement (top) and the FA2 placement (bottom), as heat maps (layer × step); the largest attention
  logit of the layer with the most conjunction drawn beside.
* `remainder_figure(res, labels)`: tied rows by log2(r / n_max) late in training, both placements, the sticky-bit
  window shaded.
* `error_figure(res, label)`: per (layer, head) with conjunction pairs late in training (marker area ∝ √pairs), the
  measured O error along sign(V) against chapter 1's prediction and against the prediction plus the rounding of ℓ.
"""
from __future__ import annotations

import numpy as np

from lib.book import plotting
from lib.studies.census import reading as rd

PLACEMENT_LABELS = {"authors": "authors' placement (BF16 S, P̄V rounded per 512-key block)",
                    "fa2": "FA2 placement (FP32 S and accumulators, one final cast)"}


def training_figure(res, label: str):
    run = next(r for r in rd.runs_of(res) if r["label"] == label)
    loss = np.asarray(res.arrays[f"{label}__loss"], dtype=np.float64)
    tok = np.arange(1, len(loss) + 1) * run["tokens_per_step"] / 1e6
    fig, ax = plotting.figure(height=2.8)
    w = max(1, len(loss) // 100)
    sm = np.convolve(loss, np.ones(w) / w, mode="valid")
    ax.plot(tok[w - 1:], sm, lw=1.2, label=f"training loss (mean of {w} steps)")
    vs, vl = run["val"]["step"], run["val"]["loss"]
    ax.plot(np.asarray(vs) * run["tokens_per_step"] / 1e6, vl, "o-", ms=3, lw=1, label="validation loss")
    ax.set(xlabel="tokens seen (millions)", ylabel="loss (nats per token)")
    ax.set_ylim(top=min(float(np.nanmax(sm)), 4.0))
    plotting.legend_above(ax, ncol=2)
    plotting.label_provenance(fig, res.meta)
    return fig


def conjunction_figure(res, label: str):
    fig, axes = plotting.figure(2, 1, height=5.2, sharex=True)
    for ax, p in zip(axes, ("authors", "fa2")):
        steps, rate = rd.over_training(res, label, p, "conjunction")
        L = rate.shape[1]
        im = ax.imshow(rate.T, aspect="auto", origin="lower", cmap="magma", vmin=0,
                       vmax=max(1e-3, float(np.nanmax(rate))),
                       extent=(steps[0], steps[-1] + (steps[1] - steps[0] if len(steps) > 1 else 1), 0.5, L + 0.5))
        ax.set(ylabel="layer (1 = first)", title=PLACEMENT_LABELS[p])
        ax.set_yticks(range(1, L + 1, max(1, L // 6)))
        fig.colorbar(im, ax=ax, label="conjunction rate\n(max over heads)")
    axes[-1].set_xlabel("training step")
    plotting.label_provenance(fig, res.meta)
    return fig


def remainder_figure(res, labels):
    fig, ax = plotting.figure(height=2.8)
    for p, c in (("authors", "C0"), ("fa2", "C1")):
        edges, h = rd.remainder_hist(res, labels, p)
        mids = np.arange(len(h)) + edges[1] - 0.5
        mids[0], mids[-1] = edges[1] - 1, edges[-2] + 0.5
        ax.step(mids, h / max(h.sum(), 1), where="mid", color=c, lw=1.2, label=PLACEMENT_LABELS[p].split(" (")[0])
    from lib.census import WINDOW_HI, WINDOW_LO
    ax.axvspan(np.log2(WINDOW_LO), np.log2(WINDOW_HI), color="0.85", zorder=0, label="sticky-bit window")
    ax.set(xlabel="log₂(r / n_max): the other keys' P̄ mass per tied key", ylabel="share of tied rows")
    plotting.legend_above(ax, ncol=3)
    plotting.label_provenance(fig, res.meta)
    return fig


def error_figure(res, label: str):
    fig, axes = plotting.figure(1, 2, height=3.0)
    for ax, p in zip(axes, ("authors", "fa2")):
        t = rd.late_table(res, p)[label]
        ok = t["n_conj"] > 0
        lim = [-0.5, 0.5]
        if ok.any():
            size = 10 + 30 * np.sqrt(t["n_conj"][ok] / t["n_conj"][ok].max())
            x, y = t["err_pred"][ok], t["err_ulp"][ok]
            ax.scatter(x, y, s=size, alpha=0.7, label="predicted by the tie theory")
            pts = [x, y]
            if "err_ell" in t:
                x2 = x + t["err_ell"][ok]
                ax.scatter(x2, y, s=size, alpha=0.7, marker="s", label="… plus the rounding of ℓ")
                pts.append(x2)
            allv = np.concatenate(pts)
            lim = [min(0.0, float(np.nanmin(allv))) - 0.05, float(np.nanmax(allv)) + 0.05]
        else:
            ax.text(0.5, 0.5, "no conjunction pairs", transform=ax.transAxes, ha="center", va="center")
        ax.plot(lim, lim, color="0.5", lw=0.8, ls="--", label="measured = predicted")
        ax.set(xlabel="predicted (ULP)", ylabel="measured (ULP)" if p == "authors" else "",
               title=PLACEMENT_LABELS[p].split(" (")[0])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=3)
    plotting.label_provenance(fig, res.meta)
    return fig
