"""Figures of chapter 7: the β window (`beta_window_figure`, from `lib.fp.beta_theory`), the fix's own rounding
error (`fix_error_figure`, a `lib.fp.fix_error` profile), the authors'-code training runs (`authors_figure`) and the
β sweep in training (`beta_sweep_figure`), each training figure stamped with its results' provenance."""
from __future__ import annotations

import numpy as np

from lib.book import plotting
from lib.fp.beta_theory import underflow_x, x_round_to_one
from lib.fp.fix_error import VARIANTS, shift_spacing
from lib.training.outcome import SMOOTH
from lib.training.runs import arm_label, result_arrays, smoothed_loss

__all__ = ["authors_figure", "beta_sweep_figure", "beta_window_figure", "fix_error_figure"]

AUTHORS_WINDOW = 50     # steps: the loss mean of the authors' code figure (their runs are short)

_ARM_COLOURS = {"authors": "C0", "authors+fix_b7": "C3", "authors+fix_b2": "C2", "authors+zero_rows_b7": "C4"}


def _colour(arm: str, i: int) -> str:
    return _ARM_COLOURS.get(arm, f"C{5 + i}")


def authors_figure(res_list, window: int = AUTHORS_WINDOW):
    """The authors' pure-PyTorch FA2 trained: one column per result of `res_list` (e.g. `authors_code` in the healthy
    regime, `authors_code_8e3`), top: training loss (`window`-step mean), bottom: the share of query rows whose ℓ sat
    at the authors' clamp (for "+zero_rows": the rows the control zeroed) in the most affected layer at each telemetry
    step. Colour = arm, line style = seed."""
    res_list = list(res_list)
    fig, axes = plotting.figure(2, len(res_list), height=4.6, squeeze=False, sharex="col")
    arms = list(dict.fromkeys(r["arm"] for res in res_list for r in res.data["runs"]))
    col = {a: _colour(a, i) for i, a in enumerate(arms)}
    seeds = sorted({r["seed"] for res in res_list for r in res.data["runs"]})
    sty = plotting.seed_styles(seeds)
    for j, res in enumerate(res_list):
        a0, a1 = axes[0, j], axes[1, j]
        for r in res.data["runs"]:
            x, y = smoothed_loss(res.arrays[f"{r['id']}__loss"], window)
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
    label = {r["arm"]: arm_label(res, r["arm"]) for res in res_list for r in res.data["runs"]}   # arms in words
    plotting.style_legend(fig, {label[a]: c for a, c in col.items()}, {f"seed {s}": v for s, v in sty.items()},
                          ncol=2)
    plotting.label_provenance(fig, [r.meta for r in res_list])
    return fig


def beta_sweep_figure(res_list, window: int = SMOOTH):
    """The β sweep (`beta_sweep`, `beta_sweep_seeds`) judged by `lib.studies.fix.beta.table`. Left: smoothed training
    loss per run (colour = β with the exact rule, black = the guarded arm; line style = seed) and the common horizon
    (dotted). Right: the largest attention logit of any layer (score units, log scale) per run, with the tied-max
    level above which each exact β underflows a BF16 row (dashed, same colour). One legend above both panels."""
    import seaborn as sns
    from lib.studies.fix import beta as beta_reading
    t = beta_reading.table(res_list)
    arrays = result_arrays(res_list)
    exact = sorted({r["beta"] for r in t["rows"] if not r["guarded"]})
    guarded = sorted({r["beta"] for r in t["rows"] if r["guarded"]})
    col = dict(zip(exact, sns.color_palette("viridis", len(exact))))
    seeds = sorted({r["seed"] for r in t["rows"]})
    sty = plotting.seed_styles(seeds)
    fig, (ax, bx) = plotting.figure(1, 2, height=4.2)
    for r in t["rows"]:
        c = "k" if r["guarded"] else col[r["beta"]]
        ax.plot(*smoothed_loss(arrays[(r["result"], f"{r['id']}__loss")], window), color=c, ls=sty[r["seed"]],
                lw=1.2)
        st = arrays[(r["result"], f"{r['id']}__step")]
        ml = arrays[(r["result"], f"{r['id']}__max_logit")].reshape(len(st), -1).max(axis=1)
        bx.plot(st, ml, color=c, ls=sty[r["seed"]], lw=1.1)
    for b in exact:
        xu = next(r["underflow_r"] for r in t["rows"] if r["beta"] == b and not r["guarded"])
        if xu < 1e5:                    # β → 1 puts the level far above any logit: leave it off the axis
            bx.axhline(xu, color=col[b], ls="--", lw=0.8)
    if t["horizon"]:
        ax.axvline(t["horizon"], color="k", ls=":", lw=0.8)
    ax.set(xlabel="step", ylabel=f"train loss (nats/byte, {window}-step mean)", yscale="log")
    bx.set(xlabel="step", ylabel="largest attention logit (score units)", yscale="log")
    colours = {f"β = {b:g} exact": col[b] for b in exact}
    colours.update({f"β = {b:g} guarded": "k" for b in guarded})
    extra = [("underflow level of an exact β (its colour)", dict(color="0.4", ls="--", lw=0.8))]
    if t["horizon"]:
        extra.append((f"common horizon ({t['horizon']} steps)", dict(color="k", ls=":", lw=0.8)))
    plotting.style_legend(fig, colours, {f"seed {sd}": sty[sd] for sd in seeds}, extra, ncol=3)
    plotting.label_provenance(fig, [dict(r.meta, name=r.name) for r in res_list])
    return fig


def beta_window_figure(m: int = 7, r_range=(1e-4, 200.0), betas=(2.0, 7.0)):
    """Regions of (positive repeated max r_m, β): 'ineffective' (shifted max still rounds to 1), 'ok', 'underflow'
    (row vanishes in BF16; dashed: in FP32). Horizontal lines at the paper's β values (7 in the paper, 2 in its code).
    Returns the matplotlib figure."""
    r = np.geomspace(*r_range, 400)
    lo = 1 + x_round_to_one(m) / r
    hi_bf16 = 1 + underflow_x("bf16") / r
    hi_fp32 = 1 + underflow_x("fp32") / r
    top = 1e3
    fig, ax = plotting.figure(width=6.4, height=3.8)
    ax.fill_between(r, 1, np.minimum(lo, top), color="#e9c46a", alpha=0.6, label="ineffective: max P̄ still rounds to 1")
    ax.fill_between(r, np.minimum(lo, top), np.minimum(hi_bf16, top), color="#cfe8e4", alpha=0.8, label="fix works")
    ax.fill_between(r, np.minimum(hi_bf16, top), top, color="#e76f51", alpha=0.45, label="row underflows (BF16 P̄, ℓ)")
    ax.plot(r, np.minimum(hi_fp32, top), "k--", lw=1, label="underflow with FP32 P̄, ℓ")
    for b in betas:
        ax.axhline(b, color="#264653", lw=1)
        ax.text(r_range[0] * 1.3, b * 1.08, f"β = {b:g}", fontsize=8, color="#264653")
    ax.set(xscale="log", yscale="log", xlim=r_range, ylim=(1.0, top), xlabel="repeated row max $r_m$ (score units)",
           ylabel="β")
    ax.legend(fontsize=7.5, loc="upper right", frameon=True)
    return fig


def fix_error_figure(profile: dict):
    """Two panels against the tied maximum r_m (log-log): RMS relative error of O, and the backward P's row-sum
    error, per variant, with half the BF16 spacing at the (capped) shift on the right. One legend above both panels;
    its title carries the configuration."""
    fig, (a0, a1) = plotting.figure(1, 2, height=3.8)
    r = np.asarray(profile["r"])
    styles = dict(zip(VARIANTS, ("-o", "-s", "--^", ":v")))
    for name, m in profile["variants"].items():
        a0.plot(r, m["o_rms"], styles.get(name, "-"), label=name, ms=4)
        a1.plot(r, np.maximum(m["psum_err"], 1e-9), styles.get(name, "-"), label=name, ms=4)
    c = profile["config"]
    a0.set(xscale="log", yscale="log", xlabel="tied row maximum $r_m$ (score units)",
           ylabel="RMS relative error of O vs FP64")
    a1.set(xscale="log", yscale="log", xlabel="tied row maximum $r_m$ (score units)",
           ylabel="mean |Σ exp(S − LSE) − 1|\n(backward P)")
    sp = shift_spacing(r, c["beta"], c["max_shift"])
    a1.plot(r, sp / 2, color="0.5", lw=0.8, ls="-.", label="½ BF16 spacing at the shift")
    fig.legend(*a1.get_legend_handles_labels(), loc="outside upper center", ncol=3,
               title=f"β = {c['beta']:g}, max_shift = {c['max_shift']}, {c['rows_per_r']} rows per $r_m$ "
                     f"(≥ 2 tied maxima, gaps Exp({c['gap']:g})), seed {c['seed']}")
    return fig
