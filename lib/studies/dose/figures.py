"""Figures of the δ-dose experiment (chapter 5): where does an amplified δ error break training?

* `dose_figure(results)`: per run, the best loss it reached against the dose λ (top) and against the injected
  error's RMS (bottom), one colour per component of Δδ, the marker by outcome; the FP32-attention run (λ = 0) as a
  dashed line. Inputs: `delta_dose` / `delta_dose_seeds` results (`lib.book.results.Result`).
"""
from __future__ import annotations

import numpy as np

from lib.book import plotting
from lib.studies.dose import reading as d

COLOURS = {"true": "#1b9e77", "bias": "#d95f02", "noise": "#7570b3", "random": "#e7298a", "flip": "#66a61e"}
MARKERS = {"stable": ("o", True), "degraded": ("o", False), "exploded": ("X", True), "nonfinite": ("X", True),
           "error": ("s", False)}
LABELS = {"true": "true Δδ", "bias": "bias only", "noise": "noise only", "random": "random signs",
          "flip": "flipped"}


def dose_figure(results):
    """Best loss reached per dose run against λ and against the injected RMS (log axes); see the module docstring."""
    rows = d.run_table(results)
    fig, axes = plotting.figure(2, 1, height=5.8)
    # a small horizontal jitter per component keeps seeds and components at one λ apart
    comps = [c for c in d.COMPONENTS if any(r["component"] == c for r in rows)]
    jit = {c: 1.0 + 0.06 * (i - (len(comps) - 1) / 2) for i, c in enumerate(comps)}
    for ax, key in zip(axes, ("lam", "rms")):
        for r in rows:
            x = r["lam"] * jit[r["component"]] if key == "lam" else r["rms"]
            if not np.isfinite(x) or x <= 0:
                continue
            m, filled = MARKERS.get(r["outcome"], ("s", False))
            col = COLOURS[r["component"]]
            ax.scatter([x], [r["best"]], s=34, marker=m, linewidths=1.2,
                       facecolors=col if filled else "none", edgecolors=col, zorder=3)
        for ref, _ in d.reference_runs(results):
            ax.axhline(ref["best"], color="0.3", ls="--", lw=1.0, zorder=1)
        ax.set_xscale("log")
        ax.set_ylabel("best loss reached")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_xlabel("dose λ (δ = δ_FP32 + λ·c(Δδ))")
    axes[1].set_xlabel("injected RMS of λ·c(Δδ) per row (median over steps before the onset)")
    # legend: colours = components, markers = outcomes, dashed = FP32 reference
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], ls="", marker="o", color=COLOURS[c], label=LABELS[c]) for c in comps]
    handles += [Line2D([], [], ls="", marker="o", mfc="0.4", mec="0.4", label="stable"),
                Line2D([], [], ls="", marker="o", mfc="none", mec="0.4", label="degraded"),
                Line2D([], [], ls="", marker="X", color="0.4", label="exploded"),
                Line2D([], [], ls="--", color="0.3", label="FP32 (λ = 0)")]
    axes[0].legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.01), ncol=3, frameon=False,
                   borderaxespad=0.2)
    plotting.label_provenance(fig, [getattr(r, "meta", {}) for r in results])
    return fig
