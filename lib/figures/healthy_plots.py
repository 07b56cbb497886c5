"""Figures of the authors'-code training runs (chapter 7). No experiment imports this module."""
from __future__ import annotations

import numpy as np

from lib.book import plotting
from lib.figures.explosion_plots import _STYLES, _smoothed_curve, _style_legend

__all__ = ["authors_figure"]

_ARM_COLOURS = {"authors": "C0", "authors+fix_b7": "C3", "authors+fix_b2": "C2", "authors+zero_rows_b7": "C4"}


def _colour(arm: str, i: int) -> str:
    return _ARM_COLOURS.get(arm, f"C{5 + i}")


def authors_figure(res_list, window: int = 50):
    """The authors' pure-PyTorch FA2 trained: one column per result of `res_list` (e.g. `authors_code` in the healthy
    regime, `authors_code_8e3`), top: training loss (`window`-step mean), bottom: the share of query rows whose ℓ sat
    at the authors' clamp (for "+zero_rows": the rows the control zeroed) in the most affected layer at each telemetry
    step. Colour = arm, line style = seed."""
    res_list = list(res_list)
    fig, axes = plotting.figure(2, len(res_list), height=4.6, squeeze=False, sharex="col")
    arms = list(dict.fromkeys(r["arm"] for res in res_list for r in res.data["runs"]))
    col = {a: _colour(a, i) for i, a in enumerate(arms)}
    seeds = sorted({r["seed"] for res in res_list for r in res.data["runs"]})
    sty = {s: _STYLES[i % len(_STYLES)] for i, s in enumerate(seeds)}
    for j, res in enumerate(res_list):
        a0, a1 = axes[0, j], axes[1, j]
        for r in res.data["runs"]:
            x, y = _smoothed_curve(res.arrays[f"{r['id']}__loss"], window)
            a0.plot(x, y, color=col[r["arm"]], ls=sty[r["seed"]], lw=1.0)
            u = np.asarray(res.arrays[f"{r['id']}__underflow_rows"], dtype=np.float64)
            st = np.asarray(res.arrays[f"{r['id']}__step"], dtype=np.float64)
            if np.isfinite(u).any():
                a1.plot(st, 100 * np.nanmax(u, axis=1), color=col[r["arm"]], ls=sty[r["seed"]], lw=1.0)
        a0.set_title(f"LR {res.data['lr']:g}, {res.data['steps']:,} steps", fontsize="medium")
        a0.set(ylabel=f"loss, {window}-step mean" if j == 0 else None)
        lo = min(float(np.nanmin(res.arrays[f"{r['id']}__loss"][len(res.arrays[f"{r['id']}__loss"]) // 4:]))
                 for r in res.data["runs"])
        a0.set_ylim(lo - 0.1, lo + 1.6)
        a1.set(xlabel="step", ylabel="rows at ℓ clamp, %" if j == 0 else None)
    _style_legend(fig, col, {f"seed {s}": v for s, v in sty.items()}, ncol=3)
    plotting.label_provenance(fig, [r.meta for r in res_list])
    return fig
