"""lib/studies/practice/kernel_bias_table.py and its intervals (lib.stats.t_interval, bootstrap_interval): coverage
on planted distributions of problem means (and the undercoverage of an interval over correlated elements, which the
same check catches), the per-problem statistics on a hand-made error, and the ci run with a planted GPT-2 capture."""
import hashlib

import numpy as np
import pytest
import torch

from lib import stats
from lib.book.runner import live_result
from lib.studies.practice import kernel_bias_table as kbt, kernel_table as kt, reading as rd

REPS = 400           # intervals per coverage check: the binomial sd of a 95 % coverage is 0.011


def _skewed(rng, size):
    """Problem means like a tie bias's: a point mass at 0 (no carry tie) and a skewed positive part; mean 0.24."""
    return np.where(rng.random(size) < 0.4, 0.0, rng.exponential(0.4, size))


def _covers(intervals, truth) -> float:
    lo, hi = np.array(intervals).T
    return float(np.mean((lo <= truth) & (truth <= hi)))


def test_t_interval_covers_the_mean_of_independent_problems():
    rng = np.random.default_rng(0)
    ivs = [(c["lo"], c["hi"]) for c in (stats.t_interval(_skewed(rng, 200)) for _ in range(REPS))]
    assert 0.92 <= _covers(ivs, 0.24) <= 0.98
    # few problems: still 95 % for normal draws (exact), where ± 1.96 s/√n is too narrow
    normal = [rng.normal(-0.1, 0.05, 4) for _ in range(REPS)]
    assert 0.92 <= _covers([(stats.t_interval(x)["lo"], stats.t_interval(x)["hi"]) for x in normal], -0.1) <= 0.98
    naive = [(x.mean() - 1.96 * x.std(ddof=1) / 2, x.mean() + 1.96 * x.std(ddof=1) / 2) for x in normal]
    assert _covers(naive, -0.1) < 0.90
    c = stats.t_interval([1.0, 2.0, np.nan, 3.0])
    assert (c["n"], c["dof"], c["mean"]) == (3, 2, 2.0) and c["hi"] - 2.0 == pytest.approx(4.302653 / np.sqrt(3))
    assert np.isnan(stats.t_interval([1.0])["lo"]) and stats.t_interval([])["n"] == 0


def test_bootstrap_interval_covers_and_is_seeded():
    rng = np.random.default_rng(1)
    ivs = [stats.bootstrap_interval(_skewed(rng, 100), n_boot=1000, seed=i) for i in range(200)]
    assert 0.90 <= _covers(ivs, 0.24) <= 0.99                  # 200 intervals: binomial sd 0.015
    x = _skewed(rng, 50)
    assert stats.bootstrap_interval(x, seed=3) == stats.bootstrap_interval(x, seed=3)
    lo, hi = stats.bootstrap_interval(x, seed=3)
    assert lo < x.mean() < hi and np.isnan(stats.bootstrap_interval([1.0])[0])


def test_an_interval_over_correlated_elements_undercovers():
    """Elements of one problem share its draw (its tied sum): the normal interval over all elements is far too narrow,
    the t interval over the problem means is right. The coverage check tells them apart."""
    rng = np.random.default_rng(2)
    over_elements, over_problems = [], []
    for _ in range(REPS):
        e = rng.normal(0.1, 0.2, (20, 1)) + rng.normal(0.0, 0.2, (20, 64))   # 20 problems × 64 elements
        m, s = e.mean(), e.std(ddof=1) / np.sqrt(e.size)
        over_elements.append((m - 1.96 * s, m + 1.96 * s))
        c = stats.t_interval(e.mean(1))
        over_problems.append((c["lo"], c["hi"]))
    assert _covers(over_elements, 0.1) < 0.5 and 0.92 <= _covers(over_problems, 0.1) <= 0.98


def test_problem_stats_on_a_hand_made_error():
    e = torch.tensor([[[-1.0, -1.0], [2.0, 0.0], [0.0, 0.0]],       # problem 0: rows toward, away, exact
                      [[5.0, 5.0], [5.0, 5.0], [5.0, 5.0]]], dtype=torch.float64)
    sel = torch.tensor([[[1, 1], [1, 0], [1, 1]], [[0, 0], [0, 0], [0, 0]]], dtype=torch.bool)
    p = kbt.problem_stats(e, sel)              # problem 1 has no selected pair: dropped
    assert p["mean"].tolist() == [0.0] and p["pairs"].tolist() == [5.0] and p["rows"].tolist() == [3.0]
    assert p["toward"][0] == p["away"][0] == p["exact"][0] == pytest.approx(1 / 3)
    e[0, 1, 1] = np.nan                        # outside the selection: ignored
    assert kbt.problem_stats(e, sel)["mean"].tolist() == [0.0]
    c = kbt.summarize([p, kbt.problem_stats(e + 1, sel)], 0.95, 200)
    assert c["n_problems"] == 2 and c["mean"] == pytest.approx(0.5) and c["dof"] == 1 and c["n_rows"] == 6
    assert c["widen"] == pytest.approx(12.706 / 1.96, abs=1e-3) and c["toward_lo"] >= 0.0


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """A GPT-2-shaped capture file of planted concentrated ties (causal: row 1 is tied with no remainder, rows ≥ 2
    have theirs in the sticky-bit window)."""
    q, k, v, _ = kt.planted(2, 2, 64, 16, 14.0, 3, "cpu")
    path = tmp_path_factory.mktemp("cap") / "cap.pt"
    torch.save(dict(q=q, k=k, v=v, do=torch.zeros_like(q), arm="planted:s0", step=7, layer=2), path)
    return path


def test_ci_run_reads_the_capture(capture, monkeypatch):
    monkeypatch.setenv(kbt.CAPTURE_ENV, str(capture))
    res = live_result("kernel_bias_table", "ci", {"kernels": ["sdpa_math", "ours_paper"]})
    d = res.data
    assert d["skipped"] == {} and d["gpt2"]["step"] == 7 and d["gpt2"]["layer"] == 2
    assert d["gpt2"]["sha256"] == hashlib.sha256(capture.read_bytes()).hexdigest()
    assert d["gpt2"]["max_logit"] == pytest.approx(14.0, abs=0.5)      # the planted gap over logits near 0
    for row in d["table"].values():
        g, w = row["gpt2"], row["gpt2_window"]
        assert g["n_problems"] == w["n_problems"] == 4                  # (window, head)
        assert g["n_rows"] == 4 * 63 and w["n_rows"] == 4 * 62          # row 0 untied; row 1 tied, r = 0
    paper = d["table"]["ours_paper"]["gpt2_window"]
    assert paper["lo"] > 0 and paper["away"] > 0.9                      # round, then normalise: away from zero
    n = rd.kernel_table_numbers(res)
    assert "GPT-2 layer 2, tied rows in the sticky-bit window" in n["kt_md"].split("\n")[0]
    assert n["kt_gpt2"] and "layer 2 of 2 training windows from the planted run" in n["kt_gpt2_from"]
    assert "at step 7" in n["kt_gpt2_from"]
    assert "paper" in n["kt_gpt2_away"] and n["kt_gpt2_paper"].startswith("+") and n["kt_gpt2_fa2"] == "—"
    assert n["kt_gpt2_authors_fix_way"] == "—" and n["kt_gpt2_fix_label"] == "—"     # kernels not in this run
    assert n["kt_gpt2_paper_size"] == ("more than one ULP" if abs(d["table"]["ours_paper"]["gpt2"]["mean"]) > 1
                                       else "within one ULP")


def test_moved_says_where_a_fix_moves_the_mean():
    assert rd._moved({"mean": 36.0}, {"mean": -180.0}) == "to the other side of zero and further from zero"
    assert rd._moved({"mean": 0.23}, {"mean": 0.05}) == "on the same side, closer to zero"
    assert rd._moved(None, {"mean": 1.0}) == "—"


def test_ci_run_without_a_capture_says_why(kernel_bias_table_ci):
    res = kernel_bias_table_ci
    d = res.data
    assert list(d["table"]) == ["sdpa_math", "ours_fa2", "ours_paper"] and list(d["skipped"]) == ["gpt2"]
    assert set(d["problem"]) == {"concentrated", "diffuse"} and d["gpt2"] is None
    assert rd.kernel_table_numbers(res)["kt_gpt2"] is False
    for name, row in d["table"].items():
        c = row["concentrated"]
        assert c["n_problems"] == 8 and c["interval"] == "student-t" and c["n_rows"] == 8 * 64
        assert c["lo"] <= c["mean"] <= c["hi"] and abs(row["diffuse"]["mean"]) < 0.05
        if name == "ours_paper":                 # round, then normalise: away from zero in every row
            assert c["lo"] > 0 and c["away"] == 1.0
        else:                                    # normalise, then round: toward zero, most rows
            assert c["hi"] < 0 and c["toward"] > 0.5
