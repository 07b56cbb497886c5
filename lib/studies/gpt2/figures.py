"""Figures of GPT-2 arms.

* `fidelity_figure(res)`: per arm, the training loss (mean of 100 steps), the largest attention logit over all
  layers and heads, and the largest ‖W_Q,h‖₂ over all layers and heads, against the training step; one colour per
  kernel, solid eager, dashed compiled.
* `chain_figure(res)`: the same three panels for the arms of `gpt2_arms` (FP32 attention, flash SDPA, our FA2 and
  paper placements), one colour per arm, one line style per seed, the failure step marked.
* `remedy_figure(view, words)`: the same for one seed, with the channel and remedy arms beside FP32 attention and
  the paper placement, each kind of change in its own line style.
"""
from __future__ import annotations

import numpy as np

from lib.book import plotting
from lib.studies.gpt2.reading import ARM_WORDS, CHAIN_ARMS, cfg_of, failure_step, layer_series, moving_mean, rerun_compare

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


# FA2 numerics in blues (flash SDPA, our FA2 placement), FP32 attention green, the paper placement orange.
_CHAIN_STYLE = {"fp32": "C2", "sdpa": "C0", "ours_fa2": "C9", "paper": "C1"}
# The channel and remedy arms beside them (`remedy_figure`): colours not used by the comparison's arms, and, since a
# remedy figure shows one seed, a line style per kind of change — dashed for where δ or O is computed, dash-dot for
# the β fix — so that two arms of near colours (the colour-blind palette has ten) are told apart by their line.
_REMEDY_STYLE = {"paper_delta_fp32_o": "C4", "fa2_delta_dp_p_norm": "C5", "paper_o32": "C3", "paper_fix_b2": "C6",
                 "paper_fix_b2_exact": "C8", "paper_fix_b7_exact": "C7", "paper_qk": "k",
                 "paper_s32": "0.5", "paper_pl32": "saddlebrown", "authors_compiled": "darkcyan",
                 "authors_fix_compiled": "darkmagenta", "authors_eager": "darkcyan", "authors_fix_eager": "darkmagenta"}
# ... dotted black for a bound on the logits (the palette's ten colours are taken; no other arm is black), and the
# precision dial, which changes how O is computed, dashed in grey and brown (colours outside the palette); the authors'
# code in cyan (without their fix) and magenta (with it), dashed compiled and dotted eager.
_REMEDY_LS = {"paper_delta_fp32_o": "--", "fa2_delta_dp_p_norm": "--", "paper_o32": "--", "paper_fix_b2": "-.",
              "paper_fix_b2_exact": "-.", "paper_fix_b7_exact": "-.", "paper_qk": ":", "paper_s32": "--",
              "paper_pl32": "--", "authors_compiled": "--", "authors_fix_compiled": "--", "authors_eager": ":",
              "authors_fix_eager": ":"}
_SEED_LS = ("-", "--", ":")


def _seed_ls(seed: int, seeds) -> str:
    """A seed's line style; solid when the figure has one seed (a dotted line for the only seed hides the data)."""
    return _SEED_LS[int(seed) % len(_SEED_LS)] if len(seeds) > 1 else "-"


def _arm_seed_legend(ax, res, words=None, colours=None, arm_ls=None):
    """One legend entry per arm (colour) and per seed (line style), not per run: with every arm in several seeds a
    run-by-run legend is wider than the column and shrinks the figure's text. With `arm_ls` ({arm: line style}, one
    seed) the arms' entries carry their own line styles and the seed goes into the legend's title."""
    from matplotlib.lines import Line2D
    ok = [r["label"].split(":s") for r in res.data["runs"] if "error" not in r]
    arms = list(dict.fromkeys(a for a, _ in ok))
    seeds = sorted({int(s) for _, s in ok})
    words, colours = words or CHAIN_ARMS, colours or _CHAIN_STYLE
    handles = [Line2D([], [], color=colours.get(a, "C7"), lw=1.1, ls=(arm_ls or {}).get(a, "-"), label=words.get(a, a))
               for a in arms]
    title = None
    if arm_ls:
        title = f"seed {seeds[0]}"
    else:
        handles += [Line2D([], [], color="0.3", lw=1.1, ls=_seed_ls(s, seeds), label=f"seed {s}") for s in seeds]
    plotting.legend_above(ax, ncol=1 if max(map(len, (h.get_label() for h in handles))) > 40 else 2,
                          handles=handles, title=title)


LEGEND_ROW_IN = 0.22       # inches a legend row takes at the book's text size (chain_figure)


def chain_figure(res, words=None, arm_ls=None):
    """`words`: {arm: its label} for arms outside the comparison (`remedy_figure`); `arm_ls`: {arm: line style} in
    place of the seed's, for a figure of one seed (`remedy_figure`)."""
    rules = cfg_of(res)["rules"]
    colours = _CHAIN_STYLE | _REMEDY_STYLE
    words = CHAIN_ARMS | (words or {})
    seeds = {int(r["label"].split(":s")[1]) for r in res.data["runs"] if "error" not in r}
    # the legend above (one entry a row past 40 characters) grows with the arms and seeds; the panels keep their
    # height, so that two-line axis labels still fit beside them
    entries = len({r["label"].split(":s")[0] for r in res.data["runs"] if "error" not in r}) + (
        0 if arm_ls else len(seeds))
    fig, axes = plotting.figure(3, 1, height=6.6 + LEGEND_ROW_IN * max(0, entries - 9), sharex=True)
    if arm_ls and len(seeds) > 1:
        raise ValueError("chain_figure: line styles per arm need a figure of one seed")
    for run in res.data["runs"]:
        if "error" in run:
            continue
        lab = run["label"]
        arm, seed = lab.split(":s")
        kw = dict(color=colours.get(arm, "C7"), ls=(arm_ls or {}).get(arm, _seed_ls(seed, seeds)), lw=1.1,
                  label=f"{words.get(arm, arm)}, seed {seed}")
        loss = np.asarray(res.arrays[f"{lab}__loss"], dtype=np.float64)
        w = min(100, max(1, len(loss) // 10))
        axes[0].plot(np.arange(w, len(loss) + 1), np.convolve(loss, np.ones(w) / w, mode="valid"), **kw)
        fs = failure_step(loss, rules["failure_window"], rules["failure_rise"])
        if fs is not None:
            for ax in axes:      # in the run's own line style, so that the seed (or the remedy) can be told
                ax.axvline(fs, color=kw["color"], lw=0.8, ls=kw["ls"], alpha=0.7)
        ser = layer_series(res.arrays, lab)
        axes[1].plot(ser["step"], ser["logit"].max(axis=1), **kw)
        axes[2].plot(ser["step"], ser["wq"].max(axis=1), **kw)
    axes[0].set(ylabel="training loss\n(nats, 100-step mean)")
    axes[1].set(ylabel="largest logit\n(any layer, head)", yscale="log")
    axes[2].set(ylabel="largest ‖W_Q,h‖₂\n(any layer, head)", xlabel="training step", yscale="log")
    _arm_seed_legend(axes[0], res, words, colours, arm_ls)
    plotting.label_provenance(fig, res.meta)
    return fig


def remedy_figure(view, words: dict):
    """`chain_figure` for one seed's comparison arms (solid) and its channel and remedy arms (`remedies.seed_view`;
    dashed where δ or O is computed otherwise, dash-dot for the β fix), each remedy arm named by `words` ({arm: its
    label})."""
    return chain_figure(view, words, arm_ls=_REMEDY_LS)


def _mean(loss, w: int):
    """(steps, `moving_mean`): each window's mean placed at its last step (1-based, as `chain_figure` draws)."""
    return np.arange(w, len(loss) + 1), moving_mean(loss, w)


def rerun_figure(res):
    """Two runs of one arm and seed (a `merge_seeds` reading with a run set aside for its rerun): above, the
    `failure_window`-step mean training loss of the first run (dashed) and the rerun (solid) with each failure step
    (dotted), and the seed's other arms (thin); below, the difference of each from the rerun's mean, up to the steps
    both ran before either failed (`rerun_compare`'s `upto`) — the rerun's first run beside the other arms. One
    column per run set aside; None when none was."""
    rules = cfg_of(res)["rules"]
    w = rules["failure_window"]
    reps = [rep for rep in res.data.get("replaced", []) if res.set_aside.get(rep["label"]) is not None]
    if not reps:
        return None
    fig, axes = plotting.figure(2, len(reps), height=5.2, sharex="col", squeeze=False)
    for j, rep in enumerate(reps):
        lab = rep["label"]
        arm, seed = lab.split(":s")
        colour = _CHAIN_STYLE.get(arm, "C7")
        rerun, first = res.arrays[f"{lab}__loss"], res.set_aside[lab]
        cmp = rerun_compare(rerun, first, rules)
        top, bottom = axes[0][j], axes[1][j]
        x, m_re = _mean(rerun, w)
        others = [r["label"] for r in res.data["runs"] if r["label"].endswith(f":s{seed}") and r["label"] != lab
                  and "error" not in r]
        for olab in others:
            ox, om = _mean(res.arrays[f"{olab}__loss"], w)
            top.plot(ox, om, color=_CHAIN_STYLE.get(olab.split(":s")[0], "C7"), lw=0.7, alpha=0.6,
                     label=f"{CHAIN_ARMS.get(olab.split(':s')[0], olab)}")
            n = min(len(om), len(m_re), max(0, (cmp["upto"] or 0) - w + 1))
            bottom.plot(ox[:n], om[:n] - m_re[:n], color=_CHAIN_STYLE.get(olab.split(":s")[0], "C7"), lw=0.7,
                        alpha=0.6)
        fx, m_first = _mean(first, w)
        top.plot(fx, m_first, color=colour, ls="--", lw=1.1, label=f"{CHAIN_ARMS.get(arm, arm)}, first run")
        top.plot(x, m_re, color=colour, lw=1.1, label=f"{CHAIN_ARMS.get(arm, arm)}, rerun")
        for f, ls in ((cmp["failed_at"], ":"), (cmp["set_aside_failed_at"], "-.")):
            if f is not None:
                top.axvline(f, color=colour, lw=0.8, ls=ls)
        n = min(len(m_first), len(m_re), max(0, (cmp["upto"] or 0) - w + 1))
        bottom.plot(fx[:n], m_first[:n] - m_re[:n], color=colour, ls="--", lw=1.1)
        bottom.axhline(0.0, color="0.5", lw=0.6)
        # the first steps' losses (up to ≈ 10 nats) would flatten the rest: the axis starts at step 500's scale
        late = [m[min(len(m) - 1, 500):] for m in (m_re, m_first)]
        top.set_ylim(0.97 * min(float(np.nanmin(m)) for m in late), 1.03 * max(float(np.nanmax(m)) for m in late))
        top.set(ylabel=f"training loss\n(nats, {w}-step mean)")
        bottom.set(ylabel="minus the rerun's\n(nats)", xlabel="training step")
        plotting.legend_above(top, ncol=1, handles=top.get_legend_handles_labels()[0], title=f"seed {seed}")
    plotting.label_provenance(fig, res.meta)
    return fig
