"""`lib.studies.delta.phases`: the δ-channel statistics by phase of training, on synthetic results whose answers are
known by construction, and the phase figure's readability with a full model's heads."""
import matplotlib.pyplot as plt
import numpy as np
import pytest

from lib.studies.delta import phases as ph

ST = ("n_pos", "n_neg", "sum_dd", "sum_abs_dd", "n_os_agree", "n_os_disagree", "sum_os_ulp", "n_os", "n_el_agree",
      "n_el_disagree", "sum_abs_delta", "n_tie", "n_rows", "tokq_cos_unsigned", "tokq_rho2", "push_adam_q",
      "wq_sigma1")


class _Res:
    """S seeds × N captured steps (every 100 steps) × L layers × H heads; in phase i (thirds of the steps) every
    head has n_pos = POS[i], n_neg = 10 − POS[i], Δδ sums ±1 per row accordingly, O errors agreeing OS[i] of 10."""
    POS, OS = (8, 5, 2), (6, 5, 9)

    def __init__(self, S=2, N=9, L=2, H=3, steps=1000):
        shape = (S, N, L, H)
        a = {f"st__{k}": np.zeros(shape) for k in ST}
        for n in range(N):
            i = n * 3 // N
            a["st__n_pos"][:, n], a["st__n_neg"][:, n] = self.POS[i], 10 - self.POS[i]
            a["st__sum_dd"][:, n] = self.POS[i] - (10 - self.POS[i])
            a["st__sum_abs_dd"][:, n] = 10
            a["st__n_os_agree"][:, n], a["st__n_os_disagree"][:, n] = self.OS[i], 10 - self.OS[i]
            a["st__sum_os_ulp"][:, n], a["st__n_os"][:, n] = 0.5 * (2 * self.OS[i] - 10), 10
            a["st__n_el_agree"][:, n] = a["st__n_el_disagree"][:, n] = 4
            a["st__sum_abs_delta"][:, n], a["st__n_rows"][:, n], a["st__n_tie"][:, n] = 1000, 10, i
            a["st__tokq_cos_unsigned"][:, n], a["st__tokq_rho2"][:, n] = 0.1 * (i + 1), 1.0
            a["st__push_adam_q"][:, n] = 1.0 if i == 2 else -1.0
            a["st__wq_sigma1"][:, n] = 1.0 + n
        a["steps"] = np.tile(np.arange(N) * 100.0, (S, 1))
        a["loss"] = np.tile(np.linspace(3.0, 1.0, steps), (S, 1))
        a["grad_norm"] = np.ones((S, steps))
        self.arrays = a
        self.data = {"runs": [{"seed": s, "id": f"r{s}"} for s in range(S)], "config": {"warmup": 10}}
        self.meta = {"config": {"warmup": 10}, "scale": "full", "device": "x", "git_commit": "0" * 40, "name": "x"}


def test_phase_stats_read_each_third_of_the_captures():
    out = ph.phase_stats(_Res())
    assert [p["name"] for p in out] == list(ph.PHASES)
    assert [(p["step_lo"], p["step_hi"]) for p in out] == [(0, 200), (300, 500), (600, 800)]
    assert [p["n_steps"] for p in out] == [6, 6, 6]                     # 3 steps × 2 seeds
    for p, pos, os_ in zip(out, _Res.POS, _Res.OS):
        assert p["rows_pos"] == pytest.approx(pos / 10)
        assert p["nb_med"] == pytest.approx((2 * pos - 10) / 10) and p["nb_lo"] == p["nb_hi"] == p["nb_med"]
        assert p["os_agree_med"] == pytest.approx(os_ / 10)
        assert p["os_ulp_med"] == pytest.approx(0.05 * (2 * os_ - 10))
        assert p["el_agree_med"] == pytest.approx(0.5) and p["rel_dd_med"] == pytest.approx(0.01)
    assert [p["tie_med"] for p in out] == pytest.approx([0.0, 0.1, 0.2])
    assert [p["tok_cos_med"] for p in out] == pytest.approx([0.1, 0.2, 0.3])
    assert [p["push_pos"] for p in out] == [0.0, 0.0, 1.0]
    assert [p["wq_max"] for p in out] == [3.0, 6.0, 9.0]                 # σ₁ at each phase's last captured step


def test_before_leaves_out_the_captures_from_a_seeds_onset():
    r = _Res()
    out = ph.phase_stats(r, before={0: 300})                             # seed 0 keeps steps 0–200 only
    assert [p["n_steps"] for p in out] == [6, 3, 3]
    assert out[1]["step_lo"] == 300 and out[2]["step_hi"] == 800
    ps = ph.per_step(r, before={0: 300, 1: 600})
    assert np.all(np.isnan(ps["rows_pos"][6:])) and ps["rows_pos"][4, 1] == pytest.approx(0.5)
    assert list(ps["step"][:6]) == [0, 100, 200, 300, 400, 500]
    all_out = ph.phase_stats(r, before={0: 0, 1: 0})                     # nothing before step 0: no phase at all
    assert all_out == []


def test_onsets_find_a_rise_and_only_a_rise():
    r = _Res()
    assert ph.onsets(r) == {0: None, 1: None}                            # falling loss: no onset
    r.arrays["loss"][1, 600:] = 3.0                                      # seed 1 jumps up at step 600
    o = ph.onsets(r)
    assert o[0] is None and o[1] is not None and 590 <= o[1] <= 620


def test_curve_identity_is_zero_for_the_same_curves_and_sees_a_difference():
    r = _Res()

    class _Ref:
        data = {"runs": [{"id": f"a{s}", "arm": "paper", "seed": s} for s in range(2)]
                + [{"id": "b0", "arm": "other", "seed": 0}]}
        arrays = {f"a{s}__loss": r.arrays["loss"][s].copy() for s in range(2)} | {"b0__loss": np.zeros(1000)}
    assert ph.curve_identity(r, _Ref, "paper") == 0.0
    _Ref.arrays["a1__loss"][500] += 0.25
    assert ph.curve_identity(r, _Ref, "paper") == pytest.approx(0.25)
    assert np.isnan(ph.curve_identity(r, _Ref, "missing"))


def test_phase_figure_stays_readable_with_36_heads_and_two_results():
    from lib.book import plotting
    from lib.studies.delta import figures as dp
    fig = dp.phase_figure([("healthy", _Res(S=3, N=30, L=6, H=6), None),
                           ("8e-3, before the onset", _Res(S=3, N=20, L=6, H=6), {0: 1500})])
    try:
        problems = plotting.check_figure(fig)
    finally:
        plt.close(fig)
    assert not problems, "\n".join(problems)


def test_the_training_kernels_own_variant_follows_its_rounding_block():
    """numbers_ch4 names the replay variant with the training kernel's numerics: the paper placement with 512-key
    rounding blocks is the 512-key variant, not the 64-key one (the healthy regime's delta_capture)."""
    from lib.studies.delta.reading import _own_numerics
    assert _own_numerics({"attn": "paper/round_block=512", "tile": 64}) == ("paper", 512)
    assert _own_numerics({"attn": "paper", "tile": 64}) == ("paper", 64)
    assert _own_numerics({"attn": "paper"}) == ("paper", 64)
    assert _own_numerics({"attn": "fa2", "tile": 128}) == ("fa2", 128)
