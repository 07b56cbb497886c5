"""Figures of GPT-2 arms.

* `fidelity_figure(res)`: per arm, the training loss (mean of 100 steps), the largest attention logit over all
  layers and heads, and the largest ‖W_Q,h‖₂ over all layers and heads, against the training step; one colour per
  kernel, solid eager, dashed compiled.
"""
from __future__ import annotations

import numpy as np

from lib.book import plotting
from lib.studies.gpt2.reading import ARM_WORDS, layer_series

_STYLE = {"sdpa": "C0", "fa2": "C3"}


def fidelity_figure(res):
    fig, axes = plotting.figure(3, 1, height=6.6, sharex=True)
    for run in res.data["runs"]:
        if "error" in run:
            continue
        lab = run["label"]
        arm = lab.split(":s")[0]
        kw = dict(color=_STYLE[arm.split("_")[0]], ls="--" if arm.endswith("compiled") else "-", lw=1.1,
                  label=f"{ARM_WORDS.get(arm, arm)}, seed {lab.split(':s')[1]}")
        loss = np.asarray(res.arrays[f"{lab}__loss"], dtype=np.float64)
        w = min(100, max(1, len(loss) // 10))
        axes[0].plot(np.arange(w, len(loss) + 1), np.convolve(loss, np.ones(w) / w, mode="valid"), **kw)
        ser = layer_series(res.arrays, lab)
        axes[1].plot(ser["step"], ser["logit"].max(axis=1), **kw)
        axes[2].plot(ser["step"], ser["wq"].max(axis=1), **kw)
    axes[0].set(ylabel="training loss\n(nats, 100-step mean)")
    axes[1].set(ylabel="largest logit\n(any layer, head)", yscale="log")
    axes[2].set(ylabel="largest ‖W_Q,h‖₂\n(any layer, head)", xlabel="training step")
    plotting.legend_above(axes[0], ncol=2)
    plotting.label_provenance(fig, res.meta)
    return fig
