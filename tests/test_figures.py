"""Every figure of the book, drawn through the functions and with the data its chapter uses, passes
`lib.book.plotting.check_figure` (text ≥ 8 pt at the rendered size, no overlapping text, no legend over data); and
the check itself catches a planted small label, planted overlapping labels and a legend planted over a line.

Chapters show the committed full-scale result where it exists and a live CI-scale run otherwise; the builders below
do the same, so that the figure checked is the figure in the book."""
from __future__ import annotations

import functools

import matplotlib.pyplot as plt
import numpy as np
import pytest

from lib.book import plotting, results

STAMP = {"scale": "full", "device": "NVIDIA H100 80GB HBM3", "git_commit": "0123456789abcdef" * 2, "name": "x"}


# ------------------------------------------------------------------------------------------------ the data
@functools.lru_cache(maxsize=None)
def _result_or_live(name: str):
    """(data, meta or None) as a chapter reads it: the committed full result, else the live CI-scale run."""
    if results.exists(name, "full"):
        r = results.load(name, "full")
        return r.data, r.meta
    from lib.book.runner import run_live
    return run_live(name, "ci")["data"], None


@functools.lru_cache(maxsize=None)
def _full(name: str):
    return results.load(name, "full") if results.exists(name, "full") else None


# ------------------------------------------------------------------------------------------------ the figures
def fig_intro_chain():
    from lib.claims.chain import causal_chain_figure
    return causal_chain_figure()


def fig_ch1_heatmaps():
    from lib.fp import rounding_bias as rb
    from lib.studies.rounding import figures as rfig
    data, meta = _result_or_live("bias_montecarlo")
    return rfig.fig_heatmaps(data["grid"], meta=meta)


def fig_ch1_theory():
    from fractions import Fraction

    from lib.fp import rounding_bias as rb
    from lib.studies.rounding import figures as rfig
    from lib.fp import theory
    data, _ = _result_or_live("bias_montecarlo")
    table = theory.theory_table(range(1, 9))
    marks = [{"k": k, "mean_ulps": rb.enumerate_bias(k, m, Fraction(1, 1024))["mean_ulps"]}
             for k, m in ((2, 7), (3, 7))]
    saw = [(r["rho_mean"], -r["rne_pv"], r["rne_pv_ci"]) for r in data["grid"]
           if r["k"] == 2 and 0 < r["rho_mean"] < 3 and r["rho_lost"] < 0.01]
    return rfig.fig_theory(table, marks, saw)


def fig_ch1_dial():
    from lib.fp import rounding_bias as rb
    from lib.studies.rounding import figures as rfig
    data, _ = _result_or_live("bias_montecarlo")
    return rfig.fig_precision_dial(data["dial"])


def fig_ch1_kernel():
    from lib.fp import rounding_bias as rb
    from lib.studies.rounding import figures as rfig
    data, meta = _result_or_live("bias_kernel")
    gaps = sorted({c["gap"] for c in data["cells"]} & {14.0, 16.0}) or None
    return rfig.fig_kernel_compare(data["cells"], k=2, gaps=gaps, meta=meta)


def fig_ch2_error():
    from lib.studies.kernel import checks as ac
    err = ac.error_vs_fp64(profiles=("fp32", "fa2", "paper"), seqs=(40, 97), d=32, seeds=(0, 1), causal=(True, False))
    return ac.error_figure(err, title="emulator, ci scale")


def fig_ch2_bench():
    from lib.studies.kernel import checks as ac
    st = ac.bench_status("attention_bench")
    if st["result"] is None:
        pytest.skip("no committed attention benchmark: chapter 2 shows a placeholder")
    return ac.bench_figure(st["result"].data, meta=st["result"].meta)


def fig_ch6_headline(which: str):
    from lib.studies.explosion import figures as ep
    res = _full("headline")
    if res is None:
        pytest.skip("no committed headline result: chapter 6 shows no headline figures")
    d = res.data
    runs = [r for r in d["runs"] if not r["tag"]]
    ids = [f"{a}_s0_lr{d['lr']:g}" for a in ("paper", "paper+fix", "fp32")]
    if which == "loss":
        return ep.loss_curves(res)
    if which == "logit":
        return ep.max_logit_figure(res, [r["id"] for r in runs if r["seed"] == 0])
    if which == "wq":
        return ep.qk_norm_figure(res, ids, 1)
    return ep.tie_rate_figure(res, ids)


def fig_ch6_sweep():
    from lib.studies.explosion import figures as ep
    sw = _full("lr_sweep")
    if sw is None:
        pytest.skip("no committed lr_sweep result")
    return ep.lr_sweep_figure(sw)


def fig_ch6_regime():
    from lib.studies.explosion import figures as ep
    from lib.training import regime
    pilots = [r for r in (_full(n) for n in regime.REGIME_RESULTS) if r is not None]
    if not pilots:
        pytest.skip("no committed regime pilots")
    return ep.regime_figure(pilots, bound=regime.MAX_LOGIT)


def fig_ch6_healthy():
    """The healthy headline as chapter 6 draws it: healthy_headline merged with healthy_headline_more (every arm)."""
    from lib.studies.explosion import figures as ep
    from lib.training import runs as healthy_reading, regime
    parts = results.load_group("healthy_headline")
    pilots = [r for r in (_full(n) for n in regime.REGIME_RESULTS) if r is not None]
    if not parts or not pilots:
        pytest.skip("no committed healthy headline")
    data, arrays = healthy_reading.union(pilots)
    refs = results.Result("regime pilots", "full", dict(pilots[0].meta), data, arrays)
    return ep.healthy_figure(healthy_reading.merge(parts), refs)


def fig_ch6_wide():
    """The width-768 headline as chapter 6 draws it: its two parts merged, its own references, the logit bound."""
    from lib.studies.explosion import figures as ep
    from lib.training import runs as healthy_reading, regime
    parts = results.load_group("width_768")
    if not parts:
        pytest.skip("no committed width-768 headline")
    return ep.healthy_figure(healthy_reading.merge(parts), None, bound=regime.MAX_LOGIT)


def fig_ch7_authors(live: bool = False):
    """Chapter 7's authors'-code figure: the committed results, else (or with `live`) CI-scale runs of the same two
    experiments."""
    from lib.book import registry
    from lib.studies.fix import figures as healthy_plots
    res = [] if live else results.load_group("authors_code")
    if not res:
        from lib.book.runner import live_result
        res = [live_result(n, "ci") for n in registry.GROUPS["authors_code"]]
    return healthy_plots.authors_figure(res)


def fig_ch7_beta_window():
    from lib.studies.fix import figures as fix_figures
    return fix_figures.beta_window_figure()


def fig_ch7_fix_error():
    from lib.fp import fix_error
    from lib.studies.fix import figures as fix_figures
    return fix_figures.fix_error_figure(fix_error.fix_error_profile())


def fig_ch7_beta_sweep():
    from lib.studies.fix import figures as fix_figures
    bres = results.load_group("beta_sweep")
    if not bres:
        pytest.skip("no committed β-sweep result")
    return fix_figures.beta_sweep_figure(bres)


def _fa_deviation():
    data, _ = _result_or_live("fa_deviation")
    return data


@functools.lru_cache(maxsize=None)
def _weight_drift():
    """(data, arrays) as chapter 3 reads them: the committed full result, else the live CI-scale run."""
    if results.exists("weight_drift", "full"):
        r = results.load("weight_drift", "full")
        return r.data, r.arrays
    from lib.book.runner import run_live
    out = run_live("weight_drift", "ci")
    return out["data"], out["arrays"]


def fig_ch3(which: str):
    from lib.studies.golden import figures as dp
    from lib.studies.golden import reading as dr
    if which in ("drift", "drift_ratio"):
        data, arrays = _weight_drift()
        return (dp.drift_figure if which == "drift" else dp.drift_ratio_figure)(data, arrays)
    dev = _fa_deviation()
    if which == "format":
        return dp.format_figure(dev)
    if which == "seq":
        return dp.seq_figure(dev, d=dr.key_numbers(dev)["d"], inputs="normal")
    if which == "pred":
        return dp.prediction_figure(dev)
    return dp.tile_figure(dev, impl="fa1")


@functools.lru_cache(maxsize=None)
def _delta_capture():
    """The `delta_capture` result chapters 4 and 5 show: the committed full one, else the live CI-scale run."""
    if results.exists("delta_capture", "full"):
        return results.load("delta_capture", "full")
    from lib.book.runner import live_result
    return live_result("delta_capture", "ci")


def _last_capture():
    from lib.training.capture import unpack
    R = _delta_capture()
    return unpack(R.data["keep_index"], R.arrays, prefix="keep")[-1]


def fig_ch45(which: str):
    """The figures of chapters 4 and 5, drawn by the calls the chapters make."""
    from lib.studies.delta import figures as dp
    R = _delta_capture()
    if which == "planted_token":
        from lib.studies.delta.planted import planted
        P = planted("ties", spec="paper")
        return dp.token_errors(P["arr"], P["scale"], head=0, row=7)
    if which in ("real_token", "terms"):
        c = _last_capture()
        lay = c.layer(c.layers[0])
        if which == "real_token":
            return dp.token_errors(lay, c.meta["scale"], head=0)
        return dp.term_heatmaps(lay, c.meta["scale"], head=0, side="q")
    if which == "steps":
        rho = np.asarray(R.arrays["sum__steps_q_rho2"][0], dtype=np.float64)
        l_best, h_best = np.unravel_index(np.nanargmax(rho), rho.shape)
        return dp.step_heatmaps(R, 0, int(l_best), int(h_best))
    if which == "cum":
        return dp.cumulative_delta(R, 0)
    return {"sign_strip": dp.sign_strip, "o_v": dp.o_error_by_v_sign, "variants": dp.variant_strip,
            "push": dp.push_figure}[which](R)


@functools.lru_cache(maxsize=None)
def _delta_capture_8e3():
    """Chapter 4's contrast: the committed full `delta_capture_8e3`, else its live CI-scale run (as the chapter)."""
    if results.exists("delta_capture_8e3", "full"):
        return results.load("delta_capture_8e3", "full")
    from lib.book.runner import live_result
    return live_result("delta_capture_8e3", "ci")


def fig_ch45_contrast(which: str):
    """The 8e-3 contrast of chapters 4 and 5, drawn by the calls the chapters make."""
    from lib.studies.delta import figures as dp
    R8 = _delta_capture_8e3()
    if which == "phases":
        return dp.contrast_figure(_delta_capture(), R8)
    return {"sign_strip": dp.sign_strip, "o_v": dp.o_error_by_v_sign, "push": dp.push_figure}[which](R8)


def fig_ch4_telemetry():
    from lib.studies.delta import figures as dp
    from lib.studies.delta import reading as dr
    res = _full("healthy_headline")
    return dp.telemetry_sign_strip(dr.telemetry_sign(res) if res is not None else None)


def fig_ch5_dose():
    """Chapter 5's dose figure: the committed full results, or the ci stage 1 run live (what the chapter shows)."""
    from lib.studies.dose import figures as dose_plots
    full = [r for r in (_full("delta_dose"), _full("delta_dose_seeds")) if r is not None]
    if full:
        return dose_plots.dose_figure(full)
    from lib.book.runner import live_result
    return dose_plots.dose_figure([live_result("delta_dose", "ci")])


FIGURES = {
    "intro: causal chain": fig_intro_chain,
    "ch1: bias heat-maps": fig_ch1_heatmaps,
    "ch1: theory": fig_ch1_theory,
    "ch1: precision dial": fig_ch1_dial,
    "ch1: kernel": fig_ch1_kernel,
    "ch2: error vs FP64": fig_ch2_error,
    "ch2: benchmark": fig_ch2_bench,
    "ch3: format": functools.partial(fig_ch3, "format"),
    "ch3: sequence length": functools.partial(fig_ch3, "seq"),
    "ch3: FA1 prediction": functools.partial(fig_ch3, "pred"),
    "ch3: tiles": functools.partial(fig_ch3, "tile"),
    "ch3: weight drift": functools.partial(fig_ch3, "drift"),
    "ch3: drift ratio": functools.partial(fig_ch3, "drift_ratio"),
    "ch4: planted token": functools.partial(fig_ch45, "planted_token"),
    "ch4: real token": functools.partial(fig_ch45, "real_token"),
    "ch4: sign strip": functools.partial(fig_ch45, "sign_strip"),
    "ch4: cumulative Δδ": functools.partial(fig_ch45, "cum"),
    "ch4: O error vs sign(V)": functools.partial(fig_ch45, "o_v"),
    "ch4: variants": functools.partial(fig_ch45, "variants"),
    "ch4: telemetry sign strip": fig_ch4_telemetry,
    "ch4: phases, healthy vs 8e-3": functools.partial(fig_ch45_contrast, "phases"),
    "ch4: 8e-3 sign strip": functools.partial(fig_ch45_contrast, "sign_strip"),
    "ch4: 8e-3 O error vs sign(V)": functools.partial(fig_ch45_contrast, "o_v"),
    "ch5: 8e-3 push": functools.partial(fig_ch45_contrast, "push"),
    "ch5: term heat-maps": functools.partial(fig_ch45, "terms"),
    "ch5: step heat-maps": functools.partial(fig_ch45, "steps"),
    "ch5: push": functools.partial(fig_ch45, "push"),
    "ch5: δ dose": fig_ch5_dose,
    "ch6: loss curves": functools.partial(fig_ch6_headline, "loss"),
    "ch6: max logit": functools.partial(fig_ch6_headline, "logit"),
    "ch6: W_Q norms": functools.partial(fig_ch6_headline, "wq"),
    "ch6: tie rate": functools.partial(fig_ch6_headline, "tie"),
    "ch6: LR sweep": fig_ch6_sweep,
    "ch6: regime pilots": fig_ch6_regime,
    "ch6: healthy headline (all arms)": fig_ch6_healthy,
    "ch6: width 768 (own references, logit bound)": fig_ch6_wide,
    "ch7: authors' code trained": fig_ch7_authors,
    "ch7: authors' code trained (live, ci)": functools.partial(fig_ch7_authors, live=True),
    "ch7: β window": fig_ch7_beta_window,
    "ch7: fix error": fig_ch7_fix_error,
    "ch7: β sweep": fig_ch7_beta_sweep,
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_book_figure_is_readable_at_the_column_width(name):
    fig = FIGURES[name]()
    try:
        problems = plotting.check_figure(fig)
    finally:
        plt.close(fig)
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


class _Synthetic:
    """A stand-in for a full-scale `delta_capture` result (its array names and shapes, random values): the per-head
    figures must stay readable with every head of the full model, not only with the CI model's two."""

    def __init__(self, S=3, N=40, L=6, H=6, seed=0):
        rng = np.random.default_rng(seed)
        n = np.full((S, L, H), float(N))
        self.data = {"runs": [{"seed": s} for s in range(S)],
                     "variants": [["paper", "paper", 64], ["paper_untiled", "paper", 512], ["fa2", "fa2", 64]]}
        a = {"sum__dd_step_pos": rng.binomial(N, 0.55, (S, L, H)).astype(float), "sum__dd_step_n": n,
             "sum__rows_frac_pos": rng.uniform(0.4, 0.7, (S, L, H)), "st__sum_dd": rng.normal(size=(S, N, L, H)),
             "steps": np.tile(np.arange(N) * 50.0, (S, 1)),
             "sum__steps_q_cos": rng.uniform(-1, 1, (S, L, H, N, N)),
             "sum__steps_q_shuf_cos": rng.uniform(-1, 1, (S, L, H, N, N)),
             "sum__wq_growth": rng.uniform(0.5, 3, (S, L, H)), "sum__push_adam_total": rng.normal(0, 0.1, (S, L, H)),
             "sum__push_sgd_total": rng.normal(0, 1e-3, (S, L, H))}
        for k in ("n_os_agree", "n_os_disagree", "n_os", "n_mix"):
            a[f"st__{k}"] = rng.integers(50, 100, (S, N, L, H)).astype(float)
        for k in ("sum_os_ulp", "sum_mix_ulp"):
            a[f"st__{k}"] = rng.normal(0, 5, (S, N, L, H))
        for name, _, _ in self.data["variants"]:
            a[f"rv__{name}__sum_dd"] = rng.normal(size=(S, 8, L, H))
            a[f"rv__{name}__sum_abs_dd"] = np.abs(a[f"rv__{name}__sum_dd"]) + 1
        self.arrays, self.meta = a, STAMP


@pytest.mark.parametrize("name", ["sign_strip", "cumulative_delta", "o_error_by_v_sign", "variant_strip",
                                  "push_figure", "step_heatmaps"])
def test_delta_figures_stay_readable_with_36_heads_and_3_seeds(name):
    from lib.studies.delta import figures as dp
    fig = getattr(dp, name)(_Synthetic())
    try:
        problems = plotting.check_figure(fig)
    finally:
        plt.close(fig)
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


# ------------------------------------------------------------------------------------------ the check itself
def _clean_figure():
    fig, ax = plotting.figure(height=3.0)
    x = np.linspace(0, 1, 50)
    ax.plot(x, x ** 2, label="x²")
    ax.set(xlabel="step", ylabel="value", title="a clean figure")
    plotting.legend_outside(ax)
    plotting.label_provenance(fig, STAMP)
    return fig, ax


def test_the_stamp_names_devices_and_commits_not_results():
    """Readers see the device and the commit, never a result's code name; several results: each device and commit
    once; a reduced-size run says so."""
    two = [STAMP, dict(STAMP, name="gpt2_arms_s1", device="NVIDIA H200", git_commit="fedcba98" * 5), STAMP]
    assert plotting.provenance_text(STAMP) == "NVIDIA H100 80GB HBM3 · commit 01234567"
    assert plotting.provenance_text(two) == "NVIDIA H100 80GB HBM3, NVIDIA H200 · commits 01234567, fedcba98"
    assert "gpt2_arms" not in plotting.provenance_text(two)
    assert plotting.provenance_text(dict(STAMP, scale="ci")).startswith("reduced-size run · ")
    assert plotting.provenance_text([]) == plotting.provenance_text([None]) == ""


def test_check_passes_a_clean_figure_with_a_stamp():
    fig, _ = _clean_figure()
    assert plotting.check_figure(fig) == []
    plt.close(fig)


def test_check_catches_a_planted_5pt_label():
    fig, ax = _clean_figure()
    ax.text(0.1, 0.8, "tiny", fontsize=5, transform=ax.transAxes)
    probs = plotting.check_figure(fig)
    assert len(probs) == 1 and "'tiny'" in probs[0] and "5 pt render at" in probs[0]
    plt.close(fig)


def test_check_counts_the_column_scaling():
    """9-pt text passes in a full-width figure but fails once the figure is so wide that the column shrinks it."""
    fig, ax = plotting.figure(width=14, height=3)
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("step", fontsize=9.1)
    assert any("'step'" in p for p in plotting.check_figure(fig))
    assert not any("'step'" in p for p in plotting.check_figure(fig, column_px=1400))
    plt.close(fig)


def test_check_catches_two_planted_overlapping_labels():
    fig, ax = _clean_figure()
    ax.text(0.3, 0.5, "first label", fontsize=9, transform=ax.transAxes)
    ax.text(0.33, 0.52, "second label", fontsize=9, transform=ax.transAxes)
    probs = plotting.check_figure(fig)
    assert len(probs) == 1 and "'first label' overlaps text 'second label'" in probs[0]
    plt.close(fig)


def test_check_sees_multi_line_text():
    """A two-line label is drawn line by line; it must still be seen (and here overlaps a legend)."""
    fig, ax = plotting.figure(height=3.0)
    ax.plot([0, 1], [0, 1], label="a line")
    plotting.legend_outside(ax)
    ax.text(1.0, 0.9, "two\nlines", transform=ax.transAxes, fontsize=9)
    assert any("'two lines' overlaps legend" in p for p in plotting.check_figure(fig))
    plt.close(fig)


def test_check_catches_the_stamp_over_an_axis_label():
    """The old stamp (a corner fig.text) sat on the x label; the check must see that kind of overlap."""
    fig, ax = plotting.figure(height=3.0)
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("step")
    lab = ax.xaxis.label
    fig.canvas.draw()
    bb = lab.get_window_extent().transformed(fig.transFigure.inverted())
    fig.text(bb.x0, bb.y0, "full · H100 · 01234567", fontsize=9)
    assert any("'step'" in p and "01234567" in p for p in plotting.check_figure(fig))
    plt.close(fig)


def test_check_catches_a_legend_over_a_line():
    fig, ax = plotting.figure(height=3.0)
    x = np.linspace(0, 1, 50)
    ax.plot(x, np.full_like(x, 0.5), label="flat line")
    ax.legend(loc="center")
    probs = plotting.check_figure(fig)
    assert len(probs) == 1 and "covers plotted data" in probs[0] and "flat line" in probs[0]
    plt.close(fig)


def test_provenance_stamp_is_below_the_axes_and_covers_nothing():
    fig, ax = _clean_figure()
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    stamp = fig._supxlabel.get_window_extent(r)
    assert stamp.y1 <= ax.xaxis.label.get_window_extent(r).y0 + 0.5
    assert "0123456" in fig._supxlabel.get_text()
    plt.close(fig)


def test_png_record_round_trip():
    fig, ax = _clean_figure()
    ax.text(0.1, 0.8, "small", fontsize=6, transform=ax.transAxes)
    png = plotting.png_bytes(fig)
    rec = plotting.read_png_record(png)
    assert rec["min_text_pt"] == 6 and rec["dpi"] == fig.dpi and rec["problems"] == []
    w, h = rec["natural_px"]
    pw, ph = plotting.png_size_px(fig)
    assert abs(w - pw) <= 2 and abs(h - ph) <= 2
    plt.close(fig)
