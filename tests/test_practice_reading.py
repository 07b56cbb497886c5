"""lib/studies/practice/reading.py and figures.py: the development log parsed to the values it holds, the ci kernel
table's shape and signs, the remainder-sign check, the monitor demo recording its planted tie, the GPT-2 run read
through the monitor's own warning rule, the fix's settings read from the code, and both figures' readability."""
import json

import matplotlib.pyplot as plt
import numpy as np
import pytest

from lib.book import plotting, results
from lib.monitor import AttentionMonitor
from lib.studies.practice import figures, kernel_table as kt, lead_time, reading as rd


# ------------------------------------------------------------------------------------------------ the dev log
@pytest.fixture(scope="module")
def log():
    return rd.dev_log()


def test_dev_log_values_as_written(log):
    """Values read off the log by hand: the JSON's first shape, the ratios it printed, the dQ line."""
    assert "not a registered result" in log["header"].lower() and log["bench"]["meta"]["rounds"] == 2
    s0, s1 = log["bench"]["shapes"]
    assert s0["shape"] == [32, 12, 1024, 64] and s1["shape"] == [1, 32, 16384, 64]
    assert s0["stable fwd+bwd"]["ms"] == pytest.approx(0.8182879984378815)
    assert s0["ratios"]["stable over sdpa_cudnn fwd+bwd (speed-up)"] == pytest.approx(0.877, abs=5e-4)   # bench.log
    assert s1["ratios"]["stable over sdpa_flash fwd+bwd (speed-up)"] == pytest.approx(1.342, abs=5e-4)
    assert log["tests"] == "....F.F."
    dq = log["dq"]
    assert dq["counts"]["dq"] == (19906, 32768) and dq["counts"]["dk"] == (0, 32768) and dq["counts"]["lse"] == (0, 512)
    assert dq["counts_their_fwd"]["dq"] == (19906, 32768) and "o" not in dq["counts_their_fwd"]
    assert dq["examples"][0] == ((0, 0, 25, 0), -0.49294281005859375, -0.44972991943359375)
    assert dq["rows_head0"] == list(range(25, 64)) + [89] and dq["rows_total"] == 156


def test_dev_numbers_against_the_targets(log):
    n = rd.dev_log_numbers(log)
    per = [rd.dev_shape_numbers(s) for s in log["bench"]["shapes"]]
    # medians over two rounds, from the raw times: 0.7175839841365814 / 0.8182879984378815 = 0.877 < 0.9
    assert per[0]["cudnn"]["value"] == pytest.approx(0.7175839841365814 / 0.8182879984378815)
    assert not per[0]["cudnn"]["met"] and per[1]["cudnn"]["met"] and per[0]["flash"]["met"] and per[1]["flash"]["met"]
    # round 0 of the first shape: cuDNN 0.7171199917793274 ms, ours 0.7610560059547424 ms
    assert per[0]["cudnn"]["hi"] == pytest.approx(0.7171199917793274 / 0.7610560059547424)
    assert per[1]["fix fwd+bwd"]["value"] == pytest.approx(10.817647695541382 / 10.0939359664917 - 1)
    assert per[1]["fix fwd+bwd"]["lo"] == pytest.approx(10.28825569152832 / 10.076767921447754 - 1)
    assert not per[1]["fix fwd+bwd"]["met"] and not per[0]["fix fwd"]["met"]
    assert per[0]["tflops stable"] == pytest.approx(220.44637924100488)
    assert n["dev_cudnn_ok"] == "met at 1·32·16384·64 only" and n["dev_flash_ok"] == "met at every shape"
    assert n["dq_agree"] == "O, LSE, δ, dK, dV" and n["dq_rows_head0"] == "25–63, 89" and n["dq_diff"] == "19,906"
    assert n["dq_their_fwd_diff"] == "19,906" and n["dev_n_verdicts"] == 8
    assert n["dq_ex_diff"] == f"{0.49294281005859375 - 0.44972991943359375:.3f}"
    assert n["dq_tests_failed"] == 2 and n["dq_tests_n"] == 8
    assert n["dev_md"].count("\n") == 7 and "not met" in n["dev_md"]
    # utilisation against the H100 SXM datasheet's dense BF16 peak, not the log's own 790 TFLOP/s
    assert rd.H100_SXM_DENSE_BF16_TFLOPS == pytest.approx(rd.H100_SXM_SPARSE_BF16_TFLOPS / 2, abs=0.2)
    assert per[0]["peak stable"] == pytest.approx(220.44637924100488 / 989.4)
    assert "fraction of 989.4 TFLOP/s" in n["dev_md"] and "790" not in n["dev_md"]
    assert n["dev_peak"] == "989.4" and n["dev_hd"] == "64" and n["dev_t_fix"] == "2 %"
    assert n["dev_intro"].startswith("A development measurement on one ") and "not a registered result" in n["dev_intro"]
    assert n["dev_ceiling"].startswith("No matmul ceiling was measured") and "matmul ceiling (" not in n["dev_md"]


def test_split_words_place_the_gap_in_each_direction(log):
    """The forward's speed-up over cuDNN is the record's ratio; the backward's is from the medians of forward +
    backward less forward; the forward's tiles come from the autotuner's config string; a record without forward
    timings gives nothing."""
    s0 = json.loads(json.dumps(log["bench"]["shapes"][0]))
    text = rd.split_words([s0])
    fwd = s0["ratios"]["stable over sdpa_cudnn fwd (speed-up)"]
    bwd = ((s0["sdpa_cudnn fwd+bwd"]["ms"] - s0["sdpa_cudnn fwd"]["ms"])
           / (s0["stable fwd+bwd"]["ms"] - s0["stable fwd"]["ms"]))
    assert f"32·12·1024·64: forward {fwd:.2f}×, backward {bwd:.2f}×" in text
    assert text.endswith("for the forward, tiles of 64 query rows × 64 keys at 4 warps at every shape.")
    s0["stable fwd"]["ms"] /= 2                      # a faster forward leaves more of the total to the backward
    bwd2 = ((s0["sdpa_cudnn fwd+bwd"]["ms"] - s0["sdpa_cudnn fwd"]["ms"])
            / (s0["stable fwd+bwd"]["ms"] - s0["stable fwd"]["ms"]))
    assert bwd2 < bwd and f"backward {bwd2:.2f}×" in rd.split_words([s0])
    s1 = dict(s0, configs={"fwd": ["BLOCK_M: 128, BLOCK_N: 64, num_warps: 8"]})
    assert rd.split_words([s0, s1]).endswith("tiles of 64 query rows × 64 keys at 4 warps; tiles of 128 query rows "
                                             "× 64 keys at 8 warps.")
    assert rd.split_words([{k: v for k, v in s0.items() if k != "stable fwd"}]) == ""
    n = rd.dev_log_numbers(log)
    assert n["dev_split"] == rd.split_words(log["bench"]["shapes"])
    device = log["bench"]["meta"]["device"]
    assert n["dq_run"] == f"the development run of the user kernel's speed (2026-11-25, one {device})"


def test_dev_log_parser_reads_a_changed_log(tmp_path, log):
    """The parser reads the values, not constants: a log with other numbers gives other results."""
    bench = json.loads(json.dumps(log["bench"]))
    bench["shapes"][0]["ratios"]["stable over sdpa_cudnn fwd+bwd (speed-up)"] = 0.95
    text = rd.DEV_LOG.read_text()
    head, _, rest = text.partition("## stable_attention_bench.json\n")
    _, _, tail = rest.partition("## bench.log\n")
    tail = tail.replace("dq 19906/32768 dk", "dq 7/32768 dk", 1)
    p = tmp_path / "log"
    p.write_text(head + "## stable_attention_bench.json\n" + json.dumps(bench) + "\n## bench.log\n" + tail)
    other = rd.dev_log(p)
    assert other["dq"]["counts"]["dq"] == (7, 32768) and other["dq"]["counts_their_fwd"]["dq"] == (19906, 32768)
    assert rd.dev_shape_numbers(other["bench"]["shapes"][0])["cudnn"]["met"]


# ------------------------------------------------------------------------------------------------ kernel table
def test_ci_kernel_table_numbers(kernel_bias_table_ci):
    """The ci table as the chapter reads it (the run's own checks: tests/test_kernel_bias_table.py)."""
    res = kernel_bias_table_ci
    n = rd.kernel_table_numbers(res)
    assert n["kt_md"].count("\n") == 4 and n["kt_n_missing"] == len(kt.KERNELS) - 3 and not n["kt_on_gpu"]
    # eight problems per cell: Student's t with 7 degrees of freedom, 1.2× the normal approximation; the cells carry
    # their t interval already, which the reading keeps
    assert n["kt_n_problems"] == "8" and n["kt_dof"] == "7" and n["kt_widen"] == "1.2"
    assert n["kt_dof_words"] == "7 degrees of freedom"
    assert n["kt_level"] == "95%"                    # the level of the normal quantile the intervals widen (Z95)
    cell = res.data["table"]["ours_fa2"]["concentrated"]
    assert rd.student_interval(cell) == cell
    assert n["kt_toward"] == "PyTorch SDPA, math backend; research kernel, FA2 numerics"
    assert n["kt_away"] == "research kernel, paper placement (512-key blocks)" and n["kt_unresolved"] == "none"
    assert "user kernel, guarded fix β = 2" in n["kt_missing"] and "stable_attention" not in n["kt_missing"]
    assert n["kt_shape"] == "2·4·64·16"
    assert n["kt_fa2_fix"] == ""            # the ci table has no FA2 kernel with the fix


def test_fa2_fix_words_read_both_kinds_of_rows():
    """The fix in FA2 numerics, before and after, on planted ties and GPT-2's rows, each cell with its interval and
    direction; the user kernel first, else the research kernel's FA2 numerics, else nothing."""
    cell = lambda m: dict(mean=m, lo=m - 0.01, hi=m + 0.01, n_problems=8, widen=1.2)      # noqa: E731
    d = dict(gaps={"concentrated": 14}, labels={},
             table={"ours_fa2": {"concentrated": cell(-0.13)}, "ours_fa2+fix": {"concentrated": cell(0.23)}})
    assert rd.fa2_fix_words(d) == ("In the kernel table the fix moved the error of the research kernel, FA2 numerics on "
                                   "the planted concentrated ties (gap 14 nats) from −0.13 [−0.14, −0.12] ULP (toward "
                                   "zero) to +0.23 [+0.22, +0.24] ULP (away from zero).")
    d["table"] |= {"stable": {"concentrated": cell(-0.1), "gpt2": cell(0.0)},
                   "stable+fix": {"concentrated": cell(0.2), "gpt2": cell(0.0)}}
    w = rd.fa2_fix_words(d)
    assert w.startswith("In the kernel table the fix moved the error of the user kernel on the planted") and \
        "on GPT-2's tied rows from +0.00 [−0.01, +0.01] ULP (not resolved from zero)" in w, w
    assert rd.fa2_fix_words(dict(d, table={"stable": {"concentrated": cell(0.1)}})) == ""


@pytest.fixture(scope="module")
def check():
    return rd.remainder_sign_check(shape=(1, 4, 128, 16), seeds=(0,))


def test_the_remainder_sign_decides_the_paper_placements_bias(check):
    """A remainder of random sign leaves the paper placement's rounding almost unbiased; of the tied sign, it is
    biased away from zero, well apart. The FA2 order stays toward zero either way."""
    assert check["n_problems"] == 4
    r, t = check["random"], check["tied"]
    assert abs(r["ours_paper"]["mean"]) < 0.05 and t["ours_paper"]["lo"] > max(0.1, r["ours_paper"]["hi"])
    for name in ("ours_fa2", "sdpa_math"):
        assert r[name]["hi"] < 0 and t[name]["hi"] < 0


def test_student_interval_is_the_t_interval_over_problems():
    """From a cell of `kernel_table.summarize` (normal approximation), the Student-t interval of the same problem
    means, as scipy computes it; too few problems give no interval; applying it twice changes nothing."""
    from scipy import stats
    rng = np.random.default_rng(0)
    for n in (2, 3, 8, 128):
        means = rng.normal(-0.1, 0.05, n)
        cell = rd.student_interval(kt.summarize(means))
        lo, hi = stats.t.interval(0.95, n - 1, loc=means.mean(), scale=stats.sem(means))
        assert cell["lo"] == pytest.approx(lo) and cell["hi"] == pytest.approx(hi) and cell["dof"] == n - 1
        assert rd.student_interval(cell) == cell
    assert rd.student_interval(kt.summarize(np.array([0.1, 0.3])))["widen"] == pytest.approx(12.706 / 1.96, abs=1e-3)
    one = rd.student_interval(kt.summarize(np.array([0.1])))
    assert np.isnan(one["lo"]) and rd._interval(one) == "+0.10"


def test_ntr_numbers_are_chapter_1s_cells():
    """The FA2 order on chapter 1's planted rows, read from the committed result: at gap 16 the tensor cores err
    toward zero with and without the β shift (all V < 0: a positive error), numpy's sequential FP32 away from zero."""
    res = results.load("bias_kernel", "full")
    n = rd.ntr_numbers(res)
    cell = {(c["gap"], c["method"], c["path"]): c for c in res.data["cells"] if c["k"] == 2}
    assert n["o1_gap"] == "16" and n["o1_keys"] == res.meta["config"]["n_keys"] and n["o1_positive"] == "toward zero"
    assert n["o1_native"] == f"{cell[(16.0, 'rne', 'native')]['o_ntr']:+.3f}" == "+0.230"
    assert n["o1_native_fix"] == "+0.224" and n["o1_native_way"] == n["o1_native_fix_way"] == "toward zero"
    assert n["o1_numpy"] == "−0.192" and n["o1_numpy_way"] == "away from zero"
    assert n["o1_numpy_fix_way"] == "not resolved from zero"          # +0.008 within its ± 0.008


# ------------------------------------------------------------------------------------------------ the monitor
def test_the_monitor_demo_records_the_planted_tie(tmp_path):
    path = tmp_path / "m.jsonl"
    mon = rd.run_monitor_demo(path)
    assert [(r["step"], r["layer"]) for r in mon.records] == [(s, l) for s in (0, 2, 4) for l in (0, 1)]
    n = rd.monitor_demo_numbers(path)
    conj, window, tie = n["md_max_conj"], n["md_max_window"], n["md_max_tie"]
    planted = (n["md_plant_layer"], n["md_plant_head"])           # the (layer, head) the prose names, as planted
    assert planted == (rd.PLANT_LAYER, rd.PLANT_HEAD) and conj[planted] == max(conj.values())
    assert (n["md_other_layer"], n["md_other_head"]) == (1 - rd.PLANT_LAYER, 1 - rd.PLANT_HEAD)
    assert n["md_planted_tie"] == f"{tie[planted]:.2f}"
    assert conj[(0, 0)] > 0.01 and window[(0, 0)] > 0              # the planted head: ties in the window
    assert tie[(0, 1)] > 0.5 and window[(0, 1)] == 0               # the other head ties as often, all diffuse
    assert max(conj[(1, 0)], conj[(1, 1)]) == 0
    assert n["md_n_warn"] >= 1 and "head 0's conjunction rate" in n["md_warnings"]
    assert [m for r in mon.records for m in r["warnings"]] == n["md_warnings"].split("\n")[1:-1]
    # the monitor's rule replayed on its own records (lead_time.replay) gives back the warnings it raised live
    d = AttentionMonitor.read(path)
    replayed = lead_time.replay(d["step"], d["conjunction"], d["max_logit"], mon.placement, mon.every, d["layer"])
    assert [(s, l, m) for s, l, _, m in replayed] == d["warnings"] != []
    # equal tied V (copies of one token): no carry-tie bias predicted; the error is the rounding of ℓ
    assert abs(float(n["md_pred"].replace("−", "-"))) < 0.05 and float(n["md_ell"].replace("−", "-")) > 0.1


@pytest.fixture(scope="module")
def gpt2():
    return results.load("gpt2_regime", "full")


def test_gpt2_read_through_the_monitors_rule(gpt2):
    layer = rd.watched_layer(gpt2)
    v = rd.monitor_view(gpt2, layer, "authors")
    th = v["thresholds"]
    first = v["first"]["conjunction"]
    i = list(v["step"]).index(first)
    assert v["conjunction"][i].max() > th.conjunction and (v["conjunction"][:i].max(1) <= th.conjunction).all()
    j = list(v["step"]).index(v["first"]["logit"])
    assert v["max_logit"][j].max() > th.max_logit and (v["max_logit"][:j] <= th.max_logit).all()
    n = rd.gpt2_monitor_numbers(gpt2)
    assert n["g2_layer"] == layer + 1 and n["g2_md"].count("\n") + 1 == 2 + 12 - len(n["g2_quiet"].split(", "))
    fa2 = rd.monitor_view(gpt2, layer, "fa2")
    assert fa2["conjunction"].max() < v["conjunction"].max()       # FA2 numerics: far fewer pairs
    # no lead: in that layer the logit warning fires at the conjunction warning's event, and earlier in other layers
    lead = rd.monitor_lead_numbers(gpt2)
    assert lead["g2_lead_steps"] == v["first"]["logit"] - first == 0 and lead["g2_lead_words"] == "at the same event as"
    assert lead["g2_lead_claim"] == "It gave no earlier notice" and lead["g2_lead_any_logit"] == n["g2_first_logit"]
    # the tenfold rise: its first firing over the layers, against the first logit warning's
    rises = [(f["rise"], l) for (p, l), f in rd.first_warnings(gpt2).items() if p == "authors" and f["rise"] is not None]
    assert n["g2_n_rise_layers"] == len(rises) and n["g2_first_rise"] == f"{min(rises)[0]:,}"
    first_logit = int(n["g2_first_logit"].replace(",", ""))
    assert (n["g2_rise_vs_logit"] == "before any logit warning") == (min(rises)[0] < first_logit)


def test_fix_settings_come_from_the_code():
    n = rd.fix_numbers()
    assert n["fx_beta"] == "2" and n["fx_cap"] == "64" and n["fx_paper_beta"] == "7"
    # printed numbers (23.0 and 3.84): half their last printed digit
    assert float(n["fx_floor_level"]) == pytest.approx(-np.log(1e-10), abs=0.05)
    assert float(n["fx_floor_b7"]) == pytest.approx(-np.log(1e-10) / 6, abs=0.005)
    assert n["fx_uf_gpu"] == f"{126 * np.log(2) / 1:.0f}" and n["fx_uf"] == f"{150 * np.log(2) / 1:.0f}"


# ------------------------------------------------------------------------------------------------ figures
def test_figures_are_readable(gpt2, check, kernel_bias_table_ci):
    res = kernel_bias_table_ci
    layer = rd.watched_layer(gpt2)
    views = {p: rd.monitor_view(gpt2, layer, p) for p in ("authors", "fa2")}
    for fig in (figures.kernel_table_figure(res, check), figures.gpt2_monitor_figure(views, gpt2.meta)):
        assert plotting.check_figure(fig) == []
        plt.close(fig)


def test_the_cost_of_delta_from_the_fp32_o_against_its_target():
    """stable_attention(delta="fp32_o")'s extra forward + backward time per shape, from the speed benchmark's data,
    against the 3 % target; a missing result says so."""
    from lib.studies.practice.reading import delta_cost_words
    shape = lambda sh, x: {"shape": sh, "delta_fp32_o_cost": {"fwd": 0.05, "fwd+bwd": x}}  # noqa: E731
    data = {"device": "planted GPU", "rounds": 5, "shapes": [shape([32, 12, 1024, 64], 0.021),
                                                             shape([1, 32, 16384, 64], 0.034)]}
    text = delta_cost_words(data)
    assert text == ("On one planted GPU it adds to a forward + backward, over the user kernel without it (medians of 5 "
                    "rounds): +2.1 % at 32·12·1024·64; +3.4 % at 1·32·16384·64 (target ≤ 3 %: met at 1 of 2 shapes).")
    data["shapes"][1]["delta_fp32_o_cost"]["fwd+bwd"] = -0.004
    assert delta_cost_words(data).endswith("−0.4 % at 1·32·16384·64 (target ≤ 3 %: met at every shape).")
    assert delta_cost_words(None) == delta_cost_words({"shapes": []}) == "What it costs in time is not measured yet."


def test_the_registered_benchmark_replaces_the_development_figures(log):
    """A registered benchmark record (the development log's shapes, relabelled, with a matmul ceiling measured beside
    them) is read against the registered targets (cuDNN's speed or better), with the ceiling in the table and the
    words, and its provenance in place of "not a registered result"."""
    from types import SimpleNamespace
    import benchmarks.bench_stable_attention as bench
    shapes = json.loads(json.dumps(log["bench"]["shapes"]))
    bench.of_ceiling(shapes, 600.0)
    meta = log["bench"]["meta"]
    matmul = dict(size=8192, tflops=600.0, fraction_of_peak=600.0 / rd.H100_SXM_DENSE_BF16_TFLOPS)
    res = SimpleNamespace(name="stable_attention_bench", scale="full", stale=False,
                          meta=dict(device=meta["device"], created_utc="2026-12-07T00:00:00+00:00"),
                          data=dict(shapes=shapes, device=meta["device"], torch=meta["torch"], rounds=5, matmul=matmul))
    n = rd.bench_numbers(res)
    assert n["dev_intro"].startswith("The registered benchmark (") and "over 5 interleaved rounds" in n["dev_intro"]
    assert n["dev_t_cudnn"] == "1" and n["dev_cudnn_ok"] == "met at no shape"        # 0.88× and 0.94× < 1.0×
    assert "fraction of the measured matmul ceiling (600 TFLOP/s)" in n["dev_md"]
    assert n["dev_ceiling"].startswith(f"A BF16 matmul of 8192³ on the same GPU reached 600 TFLOP/s, "
                                       f"{100 * 600 / rd.H100_SXM_DENSE_BF16_TFLOPS:.0f} % of that peak")
    assert f"{220.44637924100488 / 600 * 100:.0f} %" in n["dev_md"]
    # four shapes: two tables of two shape columns each, every row in both (the column of the book holds two)
    four = rd.speed_numbers(meta, shapes + json.loads(json.dumps(shapes)), "2026-12-07", cite="x", matmul=matmul)
    tables = four["dev_md"].split("\n\n")
    assert len(tables) == 2 and all(t.splitlines()[0].count("|") == 4 for t in tables)
    assert [t.count("\n") for t in tables] == [n["dev_md"].count("\n")] * 2


def test_the_gpu_dq_check_is_read_from_the_test_log(tmp_path):
    """The GPU test log's causal-ties dQ lines (first printing of each kernel build), its device and date; a planted
    log with other counts gives other words, and a log without the lines gives none."""
    head = ("# GPU tests, 2031-01-02 03:04 UTC: passed in 9 s wall\n# device: Test GPU (shard 0: Test GPU)\n")
    line = ("[causal ties dQ] {lab}: {d} rows differ from the research kernel (max 0.1; tile-local rows []…), "
            "{f} rows > 0.02 from the oracle (max {m})\n")
    text = head + line.format(lab="research (4 warps)", d=0, f=3, m="0.05") + \
        line.format(lab="EMULATE default", d=2, f=3, m="0.05") + line.format(lab="research (4 warps)", d=0, f=0, m="0")
    p = tmp_path / "gpu_tests.log"
    p.write_text(text)
    c = rd.gpu_dq_check(p)
    assert c["device"] == "Test GPU" and c["date"] == "2031-01-02" and c["passed"]
    assert c["rows"]["research (4 warps)"] == dict(differ=0, far=3, tol=0.02, max=0.05)       # the first printing
    words = rd.gpu_dq_numbers(c)["dqg_words"]
    assert "has 3 rows more than 0.02 from the CPU oracle (largest difference 0.05)" in words
    assert words.endswith("gives dQ differing in 2 rows.") and "2031-01-02 (one Test GPU)" in words
    p.write_text(head)
    assert rd.gpu_dq_check(p) is None and "has not run yet" in rd.gpu_dq_numbers(None)["dqg_words"]
    committed = rd.gpu_dq_check()                     # the committed log: the research kernel agrees with the oracle
    assert committed is not None and committed["rows"]["EMULATE default"]["differ"] == 0
