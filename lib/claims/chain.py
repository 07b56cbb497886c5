"""The causal chain of Qiu & Yao as a figure (intro). Each link is numbered (1–7, the numbers the intro's verdict
table names links by) and names the chapters of the book that derive and measure it, read from `_toc.yml` when the
figure is drawn (`lib.book.toc`): a link whose chapter is not in the book says so instead of pointing to a page that
does not exist. The figure is short (`HEIGHT`), so that it starts on the intro's first screen."""
from __future__ import annotations

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from lib.book import toc as _toc
from lib.book.plotting import figure

# (label, numbers of the chapters that derive / measure the link)
CHAIN = [
    ("row of S has its max ≥ 2×\n→ several P̄ = exp(S − m) = 1", (1, 2)),
    ("BF16 rounding of P̄V is biased\n(carry tie + sticky bit → away from 0)", (1,)),
    ("O biased in features where\nV is mostly one sign", (4,)),
    ("Δδ = rowsum(dO∘ΔO) > 0\n(δ is the only channel)", (4,)),
    ("dW_Q error = α Σ Δδ[T] (PK)[T]ᵀX[T]\nrank-1 terms that align", (5,)),
    ("‖W_Q‖₂, ‖W_K‖₂ grow along\none direction", (5, 6)),
    ("larger logits → more ties\n(vicious circle) → loss explodes", (6,)),
]
FIX_CHAPTERS = (7,)
HEIGHT = 4.6          # in: the seven links, each two lines of text, at the book's smallest readable size
NOT_IN_BOOK = "no chapter yet"


def chain_labels(toc_file=None) -> list[tuple[str, str]]:
    """[(link label, 'ch. …' or NOT_IN_BOOK)] for the chapters present in the toc."""
    present = set(_toc.by_number(toc_file or _toc.TOC_FILE))
    return [(label, _toc.chapter_span(chs, present) or NOT_IN_BOOK) for label, chs in CHAIN]


def causal_chain_figure(toc_file=None):
    """Boxes for each link, arrows between them, the feedback loop, and where the β fix cuts the chain; each link
    is labelled with the chapters of `toc_file` (default: the book's `_toc.yml`) that treat it."""
    links = chain_labels(toc_file)
    present = set(_toc.by_number(toc_file or _toc.TOC_FILE))
    fix_ch = _toc.chapter_span(FIX_CHAPTERS, present) or NOT_IN_BOOK
    fig, ax = figure(height=HEIGHT)
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, len(links) + 0.2)
    ax.axis("off")
    ys = [len(links) - 0.5 - i for i in range(len(links))]
    for i, ((label, ch), y) in enumerate(zip(links, ys)):
        ax.add_patch(FancyBboxPatch((1.2, y - 0.34), 6.0, 0.68, boxstyle="round,pad=0.02,rounding_size=0.12",
                                    fc="#eef3fb" if i < 2 else "#f7f7f7", ec="#3b5b92", lw=1.2))
        ax.text(1.45, y, str(i + 1), ha="center", va="center", fontsize=9.5, fontweight="bold", color="#3b5b92")
        ax.text(4.3, y, label, ha="center", va="center", fontsize=9)
        ax.text(7.45, y, ch, ha="left", va="center", fontsize=8.5,
                color="#555555" if ch != NOT_IN_BOOK else "#999999", style="normal" if ch != NOT_IN_BOOK else "italic")
        if i + 1 < len(links):
            ax.add_patch(FancyArrowPatch((4.2, y - 0.36), (4.2, ys[i + 1] + 0.36), arrowstyle="-|>",
                                         mutation_scale=12, color="#3b5b92"))
    ax.add_patch(FancyArrowPatch((1.15, ys[-1]), (1.15, ys[0]), connectionstyle="arc3,rad=-0.35",
                                 arrowstyle="-|>", mutation_scale=12, color="#b23a48", lw=1.3))
    ax.text(0.45, (ys[0] + ys[-1]) / 2, "feedback", rotation=90, va="center", fontsize=8.5, color="#b23a48")
    yf = (ys[0] + ys[1]) / 2
    ax.plot([3.3, 5.1], [yf, yf], color="#2a9d8f", lw=3)
    ax.text(5.25, yf, f"β fix ({fix_ch}): shift m so that no P̄ = 1", va="center", fontsize=8.5, color="#2a7d72")
    return fig
