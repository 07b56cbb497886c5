"""The causal chain of Qiu & Yao as a figure (intro), drawn from a list so the chapter numbers stay in one place."""
from __future__ import annotations

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from lib.book.plotting import figure

# (label, chapter that derives/measures it)
CHAIN = [
    ("row of S has its max ≥ 2×\n→ several P̄ = exp(S − m) = 1", "ch. 1–2"),
    ("BF16 rounding of P̄V is biased\n(carry tie + sticky bit → away from 0)", "ch. 1"),
    ("O biased in features where\nV is mostly one sign", "ch. 4"),
    ("Δδ = rowsum(dO∘ΔO) > 0\n(δ is the only channel)", "ch. 4"),
    ("dW_Q error = α Σ Δδ[T] (PK)[T]ᵀX[T]\nrank-1 terms that align", "ch. 5"),
    ("‖W_Q‖₂, ‖W_K‖₂ grow along\none direction", "ch. 5–6"),
    ("larger logits → more ties\n(vicious circle) → loss explodes", "ch. 6"),
]


def causal_chain_figure():
    """Boxes for each link, arrows between them, the feedback loop, and where the β fix cuts the chain."""
    fig, ax = figure(width=7.2, height=6.4)
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, len(CHAIN) + 0.2)
    ax.axis("off")
    ys = [len(CHAIN) - 0.5 - i for i in range(len(CHAIN))]
    for i, ((label, ch), y) in enumerate(zip(CHAIN, ys)):
        ax.add_patch(FancyBboxPatch((1.2, y - 0.34), 6.0, 0.68, boxstyle="round,pad=0.02,rounding_size=0.12",
                                    fc="#eef3fb" if i < 2 else "#f7f7f7", ec="#3b5b92", lw=1.2))
        ax.text(4.2, y, label, ha="center", va="center", fontsize=9)
        ax.text(7.45, y, ch, ha="left", va="center", fontsize=8, color="#555555")
        if i + 1 < len(CHAIN):
            ax.add_patch(FancyArrowPatch((4.2, y - 0.36), (4.2, ys[i + 1] + 0.36), arrowstyle="-|>",
                                         mutation_scale=12, color="#3b5b92"))
    ax.add_patch(FancyArrowPatch((1.15, ys[-1]), (1.15, ys[0]), connectionstyle="arc3,rad=-0.35",
                                 arrowstyle="-|>", mutation_scale=12, color="#b23a48", lw=1.3))
    ax.text(0.05, (ys[0] + ys[-1]) / 2, "feedback", rotation=90, va="center", fontsize=8, color="#b23a48")
    yf = (ys[0] + ys[1]) / 2
    ax.plot([3.3, 5.1], [yf, yf], color="#2a9d8f", lw=3)
    ax.text(5.25, yf, "β fix (ch. 7): shift m so that no P̄ = 1", va="center", fontsize=8.5, color="#2a7d72")
    return fig
