"""CI-scale tests of the chapter-2 helpers (`lib/studies/kernel/checks.py`) and of the `paper_placement` experiment code
on the CPU (CPU autocast; the GPU result is what the chapter shows)."""
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from lib.studies.kernel import checks as ac
from lib.studies.kernel import paper_placement as pp
from lib.book.runner import run_live
from lib.fp.inputs import attention_inputs
from lib.fp.numerics import PROFILES
from tests.precision import attention_rtol


def test_rounding_table_marks_follow_the_profiles():
    t = ac.rounding_table()
    assert list(t.columns) == ["field", "what", "fp32", "fa2", "paper"]
    for prof in ("fp32", "fa2", "paper"):
        nm = PROFILES[prof]
        for _, row in t.iterrows():
            val = getattr(nm, row["field"].strip("`"))
            if isinstance(val, bool):
                assert row[prof] == ("✓" if val else "–")
    rounds = t["field"].str.startswith("`round_") & (t["field"] != "`round_block`")   # the bool switches
    assert (t.loc[rounds, "fp32"] == "–").all()          # fp32 rounds nothing
    assert (t.loc[t["field"] == "`round_block`", ["fp32", "fa2", "paper"]] == "0").all(axis=None)   # per tile


def test_error_vs_fp64_orders_the_profiles_and_plots():
    df = ac.error_vs_fp64(seqs=(33,), d=16, seeds=(0,), causal=(True,), block=16)
    med = df.groupby("profile").rel_err.median()
    # 1e-5 parts FP32-sized errors ((n + d)·eps32 = 5.8e-6 at most here) from BF16-sized ones (~2^-9)
    assert med["fp32"] < 1e-5 < med["fa2"] < med["paper"]
    fig = ac.error_figure(df, title="t")
    assert fig.axes and fig.axes[0].get_yscale() == "log"


@pytest.fixture(scope="module")
def ci_placement():
    return run_live("paper_placement", "ci")["data"]


def test_paper_placement_ci_records_and_tables(ci_placement):
    d = ci_placement
    assert d["autocast_device"] == "cpu" and d["records"]
    tr = ac.dtype_table(d, runs=("random/32/eager_bwd_autocast/plain",))
    assert {"S", "P", "LSE", "O"} <= set(tr.index)
    summ = ac.placement_summary(d, kind="random", mode="eager_bwd_autocast")
    assert "paper (predicted)" in summ.index and summ.values.max() <= 1.0
    assert (summ.mean(axis=1).diff().dropna() <= 1e-12).all()        # sorted best first (FP64 means: ~1e-16)
    tab = ac.placement_table(d)
    assert len(tab) == len(d["records"]) and tab["O identical"].between(0, 1).all()
    clamp = ac.stable_clamp_effect(d)
    assert set(clamp["row-sum floor"]) == {0.0, 1e-10}


def test_agreement_counts_bits():
    a = np.array([1.0, 2.0, -0.0, np.nan], np.float32)
    b = np.array([1.0, np.nextafter(np.float32(2), np.float32(3)), 0.0, np.nan], np.float32)
    r = pp.agreement(a, b)
    assert r["bit_identical"] == 0.75 and r["within_1ulp_bf16"] == 1.0


def test_authors_algorithm_matches_fp64_in_fp32():
    """Without autocast and in FP32, our implementation of the authors' algorithm is plain attention."""
    import torch
    from lib.fp.reference import attention_fp64
    q, k, v, do = (x.float() for x in attention_inputs("random", 1, 2, 40, 16, 0))
    qs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o = pp.authors_attention(*qs, q_tile=16, k_tile=16)
    o.backward(do)
    ref = attention_fp64(q, k, v, do, causal=True)
    for t, key in ((o, "o"), *zip(qs, ("dq", "dk", "dv"))):     # FP32 matmuls: their error bound, any order
        x = (t if key == "o" else t.grad).detach().numpy()
        tol = attention_rtol(40, 16, backward=key != "o") * np.abs(ref[key]).max()
        np.testing.assert_allclose(x, ref[key], rtol=0, atol=tol)


def test_bench_table(tmp_path):
    assert ac.bench_table(tmp_path / "missing.json") is None
    p = tmp_path / "b.json"
    p.write_text(json.dumps({"meta": {}, "data": {"rows": [{"N": 1024, "tflops": 1.0}]}}))
    assert isinstance(ac.bench_table(p), pd.DataFrame) and len(ac.bench_table(p)) == 1


def test_kernel_vs_oracle_small():
    kv = ac.kernel_vs_oracle(profiles=("fa2",), cases=((20, 16, True),), block=16, fixes=(None,))
    if not kv["available"]:
        pytest.skip(kv["note"])
    assert (kv["table"].fraction_identical == 1.0).all()


def test_claim_verdict_follows_the_best_candidate():
    cands = pp.candidates()
    rec = {"kind": "random", "tile": 512, "mode": "eager_bwd_autocast", "stable": False, "error": None,
           "agreement": {c: {"o": {"bit_identical": 0.5}} for c in cands}}
    err = dict(rec, mode="eager", error="RuntimeError: x", agreement={})
    best = {"random/512/eager_bwd_autocast": "paper (predicted)"}
    v = pp._claims([err, rec], best, cands, "cuda")["paper_placement"]
    assert v["status"] == "partly" and "FP32 LSE, δ" in v["evidence"] and "raises" in v["evidence"]
    best = {"random/512/eager_bwd_autocast": "all BF16 (provisional reading)"}
    assert pp._claims([rec], best, cands, "cuda")["paper_placement"]["status"] == "reproduced"
    assert pp._claims([rec], best, cands, "cpu") == {}


def _bench_data():
    """Two head dims × two lengths; section "rows": SDPA 1.5× ours' time, the fix +10 % (fwd and fwd+bwd, plus a bwd
    mode without SDPA); section "round_block_rows": SDPA 0.5× the per-tile paper time, 512-key blocks +20 %, and a
    new kernel mode "paper_rb128" the code does not know by name."""
    rows, rb_rows = [], []
    for D in (64, 128):
        for N in (1024, 4096):
            for mode, base in (("fwd", 1.0), ("fwd+bwd", 3.5)):
                ms = base * N / 1024 * D / 64
                rows.append({"B": 1, "H": 4, "D": D, "N": N, "mode": mode, "ours_ms": ms, "ours_tflops": 100.0 / ms,
                             "sdpa_flash_ms": 1.5 * ms, "sdpa_flash_tflops": 100.0 / (1.5 * ms),
                             "ours_fix_ms": 1.1 * ms, "ours_fix_tflops": 100.0 / (1.1 * ms), "fix_overhead": 0.1})
                rb_rows.append({"B": 1, "H": 4, "D": D, "N": N, "mode": mode, "paper_rb0_ms": 2 * ms,
                                "paper_rb512_ms": 2.4 * ms, "paper_rb128_ms": 2.2 * ms, "sdpa_flash_ms": ms,
                                "rb512_over_rb0": 1.2})
            rows.append({"B": 1, "H": 4, "D": D, "N": N, "mode": "bwd", "ours_ms": 2.5, "ours_fix_ms": 2.5})
    return {"rows": rows, "round_block_rows": rb_rows, "summary": {"complete": True}}


def test_bench_frame_reads_every_section_and_implementation():
    lf = ac.bench_frame(_bench_data())
    assert set(lf["section"]) == {"rows", "round_block_rows"}
    names = list(dict.fromkeys(lf["name"]))
    assert names == ["ours (fa2)", "ours + β fix", "SDPA flash", "paper, per tile", "paper, 512-key blocks",
                     "paper rb128"]
    assert set(lf["mode"]) == {"fwd", "bwd", "fwd+bwd"} and lf["ms"].notna().all()
    assert lf[lf["impl"] == "paper_rb0"]["tflops"].isna().all()          # no TFLOP/s column: NaN, not made up
    assert ac.bench_frame({"rows": []}).empty and ac.bench_frame({"rows": [{"x": 1}]}).empty
    split = ac.bench_frame({"rows": [{"D": 64, "N": 1024, "mode": "fwd", "kind": k, "ours_ms": 1.0} for k in "ab"]})
    assert list(split["name"]) == ["ours (fa2), kind=a", "ours (fa2), kind=b"]


def test_bench_ratios_direction_and_values():
    rat = ac.bench_ratios(_bench_data())
    assert list(rat.index) == ["SDPA flash time / ours (fa2)", "ours + β fix: overhead, time / ours (fa2) − 1",
                               "SDPA flash time / paper, per tile",
                               "paper, 512-key blocks: overhead, time / paper, per tile − 1",
                               "paper rb128: overhead, time / paper, per tile − 1"]
    assert list(rat.columns) == ["fwd", "bwd", "fwd+bwd"]
    assert rat.loc["SDPA flash time / ours (fa2)", "fwd"] == pytest.approx((1.5, 1.5, 1.5))
    assert rat.loc["SDPA flash time / paper, per tile", "fwd+bwd"] == pytest.approx((0.5, 0.5, 0.5))
    assert rat.loc["ours + β fix: overhead, time / ours (fa2) − 1", "bwd"] == pytest.approx((0.0, 0.0, 0.0))
    assert rat.loc["paper rb128: overhead, time / paper, per tile − 1", "fwd"] == pytest.approx((0.1, 0.1, 0.1))
    assert not isinstance(rat.loc["SDPA flash time / ours (fa2)", "bwd"], tuple)     # SDPA's bwd was not timed
    md = ac.bench_ratio_markdown(rat)
    assert "1.50 (1.50–1.50)" in md and "+10.0% (+10.0% to +10.0%)" in md and "0.50 (0.50–0.50)" in md
    assert md.count("\n") == 6 and "| — |" in md


def test_bench_figure_one_panel_per_mode_and_head_dim():
    fig = ac.bench_figure(_bench_data(), meta={"scale": "full", "device": "H100", "git_commit": "a" * 40})
    assert len(fig.axes) == 3 * 2                                           # fwd, bwd, fwd+bwd × two head dims
    ax = fig.axes[0]                                                        # fwd, D = 64
    assert ax.get_xscale() == "log"
    labels = fig.legends[0].get_texts()
    assert [t.get_text() for t in labels] == ["ours (fa2)", "ours + β fix", "SDPA flash", "paper, per tile",
                                              "paper, 512-key blocks", "paper rb128"]      # SDPA drawn once
    np.testing.assert_allclose(ax.lines[0].get_xdata(), [1024, 4096])
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [100.0, 25.0])
    assert [ln.get_linestyle() for ln in ax.lines] == ["-", "-", "-", "--", "--", "--"]
    with pytest.raises(ValueError):
        ac.bench_figure({"rows": []})
    plt.close(fig)


def test_bench_status_missing_stale_ok(tmp_path):
    assert ac.bench_status("attention_bench", root=tmp_path)["status"] == "missing"
    (tmp_path / "full").mkdir()
    meta = {"name": "b", "scale": "full", "device": "H100", "git_commit": "c" * 40, "wall_s": 1.0}
    (tmp_path / "full" / "b.json").write_text(json.dumps({"meta": {**meta, "depends_on": {}}, "data": _bench_data()}))
    assert ac.bench_status("b", root=tmp_path)["status"] == "ok"
    (tmp_path / "full" / "b.json").write_text(json.dumps(
        {"meta": {**meta, "depends_on": {"kernels/attention.py": "0" * 64}}, "data": _bench_data()}))
    st = ac.bench_status("b", root=tmp_path)
    # the note says it is stale in reader's words; the changed file is an internal name the page must not show
    assert st["status"] == "stale" and "code it runs changed" in st["note"] and "kernels/" not in st["note"]
