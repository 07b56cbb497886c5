"""One figure style for the whole book (seaborn 'ticks', colour-blind palette, 150 dpi)."""
from __future__ import annotations

import sys

import matplotlib

# Headless everywhere; but inside a Jupyter kernel keep the inline backend, which is what gives a glued figure its
# PNG representation (under Agg the book would show "<Figure size ...>" instead of the image).
if "ipykernel" in sys.modules:
    matplotlib.use("module://matplotlib_inline.backend_inline")
else:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

PALETTE = "colorblind"
_applied = False


def apply_style() -> None:
    """Set the book's matplotlib/seaborn style (idempotent)."""
    global _applied
    sns.set_theme(style="ticks", context="notebook", palette=PALETTE,
                  rc={"figure.dpi": 110, "savefig.dpi": 150, "axes.spines.top": False,
                      "axes.spines.right": False, "figure.autolayout": False})
    _applied = True


def figure(nrows: int = 1, ncols: int = 1, width: float = 6.4, height: float = 3.6, **kw):
    """`plt.subplots` in the book style. Returns (fig, axes)."""
    if not _applied:
        apply_style()
    return plt.subplots(nrows, ncols, figsize=(width, height), layout="constrained", **kw)


def label_provenance(fig, meta: dict) -> None:
    """Stamp a small 'scale · device · commit' note in the figure corner, from a result's provenance."""
    if not meta:
        return
    txt = f"{meta.get('scale', '?')} · {meta.get('device', '?')} · {str(meta.get('git_commit', '?'))[:8]}"
    fig.text(0.995, 0.005, txt, ha="right", va="bottom", fontsize=7, color="0.45")
