"""Figures of the chapter "Using this in your training".

* `kernel_table_figure(res, check)`: the kernel bias table as a dot plot — per kernel (rows) and kind of input
  (markers), the mean signed O error along sign(V) in ULP with its 95 % interval over problems; with the CPU check of
  the remainder's sign (`reading.remainder_sign_check`) beside the planted rows.
* `gpt2_monitor_figure(views, meta)`: one layer of the GPT-2 124M run as the monitor would show it
  (`reading.monitor_view` of both placements) — the conjunction rate (largest over heads), the largest logit, σ₁ of
  W_Q per head — with the monitor's default thresholds and the events at which it would have warned.

The reading module calls these (never the other way round): they take what it computed.
"""
from __future__ import annotations

import textwrap

import numpy as np

from lib.book import plotting

KINDS = {"concentrated": "concentrated ties", "diffuse": "diffuse ties", "gpt2": "GPT-2 layer 2, tied rows",
         "gpt2_window": "GPT-2 layer 2, tied rows in the sticky-bit window",
         "random": "concentrated, other keys' V of random sign (CPU check)"}
_MARKERS = {"concentrated": "o", "diffuse": "s", "gpt2": "D", "gpt2_window": "v", "random": "^"}


def kernel_table_figure(res, check: dict | None = None):
    d = res.data
    names = list(d["table"])
    kinds = [k for k in KINDS if any(k in row for row in d["table"].values())]
    series = [(k, {n: d["table"][n].get(k) for n in names}) for k in kinds]
    if check is not None:
        series.append(("random", {n: check["random"].get(n) for n in names}))
    fig, ax = plotting.figure(height=1.3 + 0.42 * len(names) * max(1, len(series) / 3))
    step = 0.7 / max(1, len(series))
    for j, (kind, cells) in enumerate(series):
        y, x, lo, hi = [], [], [], []
        for i, n in enumerate(names):
            c = cells.get(n)
            if c and c.get("n_problems", 0):
                y.append(i + (j - (len(series) - 1) / 2) * step)
                x.append(c["mean"])
                lo.append(c["mean"] - c["lo"] if np.isfinite(c["lo"]) else 0.0)
                hi.append(c["hi"] - c["mean"] if np.isfinite(c["hi"]) else 0.0)
        ax.errorbar(x, y, xerr=[lo, hi], fmt=_MARKERS[kind], ms=5, capsize=2, lw=1, color=f"C{j}",
                    label=KINDS[kind])
    ax.axvline(0.0, color="0.5", lw=0.8, zorder=0)
    ax.set_yticks(range(len(names)), [textwrap.fill(d["labels"].get(n, n), 26) for n in names])
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlabel("O error along sign(V), ULP (mean over problems, 95 % interval)")
    plotting.legend_above(ax, ncol=1)
    plotting.label_provenance(fig, res.meta)
    return fig


def gpt2_monitor_figure(views: dict, meta):
    """views: {"authors": monitor_view, "fa2": monitor_view} of one layer; meta: the result's, for the stamp."""
    layer = views["authors"]["layer"]
    th = views["authors"]["thresholds"]
    fig, axes = plotting.figure(3, 1, height=5.6, sharex=True)
    ax = axes[0]
    for j, (p, name) in enumerate((("authors", "authors' placement"), ("fa2", "FA2 placement"))):
        v = views[p]
        top = v["conjunction"].max(1)
        ax.plot(v["step"], top, "-", color=f"C{j}", lw=1.2, label=f"{name}, largest over heads")
        warned = sorted({s for s, k, _ in v["warnings"] if k != "logit"})
        at = np.isin(v["step"], warned)
        ax.plot(v["step"][at], top[at], "v", color=f"C{j}", ms=5, label=f"{name}: the monitor warns")
    ax.axhline(th.conjunction, color="0.4", lw=0.8, ls=":", label="warning threshold")
    ax.set_yscale("symlog", linthresh=th.floor)
    ax.set_ylim(0, 1)
    ax.set_ylabel("conjunction rate")
    plotting.legend_above(ax, ncol=2, title=f"layer {layer + 1} of GPT-2 124M (counting from 1)")
    v = views["authors"]
    ax = axes[1]
    ax.plot(v["step"], v["max_logit"].max(1), "-", color="C2", lw=1.2)
    ax.axhline(th.max_logit, color="0.4", lw=0.8, ls=":")
    if v["first"]["logit"] is not None:
        i = int(np.nonzero(v["step"] == v["first"]["logit"])[0][0])
        ax.plot(v["step"][i], v["max_logit"][i].max(), "v", color="C2", ms=5)
    ax.set_yscale("log")
    ax.set_ylabel("largest logit")
    ax = axes[2]
    ax.plot(v["step"], v["sigma"], "-", color="0.7", lw=0.6)
    ax.plot(v["step"], v["sigma"].max(1), "-", color="C3", lw=1.2)
    ax.set(ylabel="σ₁(W_Q) per head", xlabel="training step")
    plotting.label_provenance(fig, meta)
    return fig
