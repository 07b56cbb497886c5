"""The precision dial's figure (chapter 6): smoothed training loss per mantissa width, in the book's one style."""
from __future__ import annotations

from lib.book import plotting
from lib.studies.dial import table as dial_reading
from lib.training.outcome import SMOOTH
from lib.training.runs import result_arrays, smoothed_loss

__all__ = ["dial_figure"]


# colour-blind palette; SR (green) kept apart from the fix (vermillion), the RNE variants near RNE's blue or pink
_DIAL_STYLE = {"rne": ("C0", "RNE"), "fix": ("C3", "RNE + fix"), "dfp32o": ("C9", "RNE, δ from FP32 O"),
               "sm32": ("C4", "RNE, S−m FP32"), "fixsm32": ("C5", "fix, S−m FP32"), "sr": ("C2", "SR")}


def dial_figure(res_list, window: int = SMOOTH, horizons: dict | None = None):
    """Smoothed training loss over steps, one panel per mantissa width m of the precision dial, for the per-m arms
    (colour = kind, line style = seed) and the BF16 / FP32 controls (grey) of the same results. SR arms of results
    with the SR backward bug (`lib.studies.dial.table.SR_BACKWARD_BUG`) are left out: they measure a broken gradient.
    horizons: optional {m: step} (`lib.studies.dial.table.at_common_horizon`), drawn as a dotted vertical line.
    One legend above the panels explains colours (kind), line styles (seed) and the controls."""
    t = dial_reading.merged_table(res_list)
    if not t["bits"]:
        raise ValueError("no dial runs in the given results")
    arrays = result_arrays(res_list)
    n = len(t["bits"])
    ncols = 2 if n in (2, 4) else min(n, 3)
    nrows = -(-n // ncols)
    fig, axes = plotting.figure(nrows, ncols, height=1.6 + 2.4 * nrows, sharey=True, squeeze=False)
    axes = axes.ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    seeds = sorted({r["seed"] for r in t["rows"]})
    sty = plotting.seed_styles(seeds)
    kinds_seen, controls_seen = {}, {}

    def curve(r):
        return smoothed_loss(arrays[(r["result"], f"{r['id']}__loss")], window)

    for ax, m in zip(axes, t["bits"]):
        src = {r["result"] for r in t["rows"] if r["m"] == m}     # each panel: the controls run beside that m
        for c in t["controls"]:
            if c["result"] in src:
                x, y = curve(c)
                colour = "0.35" if c["arm"] == "paper" else "0.7"
                ax.plot(x, y, color=colour, lw=1.0, ls=sty.get(c["seed"], "-"))
                controls_seen[f"control: {'BF16 paper' if c['arm'] == 'paper' else 'FP32 attention'}"] = colour
        for r in t["rows"]:
            if r["m"] != m or not r["valid"]:
                continue
            col, name = _DIAL_STYLE[r["kind"]]
            x, y = curve(r)
            ax.plot(x, y, color=col, ls=sty[r["seed"]], lw=1.3)
            kinds_seen[name] = col
        if horizons and horizons.get(m):
            ax.axvline(horizons[m], color="k", ls=":", lw=0.8)
            ax.text(horizons[m], 1.0, f" {horizons[m]}", transform=ax.get_xaxis_transform(), ha="left", va="top")
        ax.set(title=f"m = {m} mantissa bits", xlabel="step", yscale="log")
    for i in range(0, n, ncols):
        axes[i].set_ylabel(f"train loss (nats/byte,\n{window}-step mean)")
    extra = [("common horizon (step)", dict(color="k", ls=":", lw=0.8))] if horizons else []
    plotting.style_legend(fig, {**kinds_seen, **controls_seen}, {f"seed {sd}": sty[sd] for sd in seeds}, extra, ncol=3)
    plotting.label_provenance(fig, [dict(r.meta, name=r.name) for r in res_list])
    return fig
