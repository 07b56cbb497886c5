"""Book infrastructure: the claims table, the causal-chain figure, and the headless-browser HTML check itself."""
import shutil

import matplotlib.pyplot as plt
import pytest

from lib.claims import table as claims
from lib.book import results
from lib.claims.chain import CHAIN, causal_chain_figure


def test_chain_figure_draws_every_link():
    fig = causal_chain_figure()
    texts = [t.get_text() for t in fig.axes[0].texts]
    for label, _ in CHAIN:
        assert label in texts
    plt.close(fig)


def test_claims_status_comes_from_results(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "ROOT", tmp_path)
    rows = claims.status_table(root=tmp_path)
    assert {r["status"] for r in rows} == {"not yet tested"}
    results.save("x", "ci", {"claims": {"tie_bias": {"status": "partly", "evidence": "ci"}}}, depends_on=[],
                 root=tmp_path)
    results.save("x", "full", {"claims": {"tie_bias": {"status": "reproduced", "evidence": "gpu"}}}, depends_on=[],
                 root=tmp_path)
    row = {r["id"]: r for r in claims.status_table(root=tmp_path)}["tie_bias"]
    assert row["status"] == "reproduced" and row["evidence"] == "gpu"   # full scale wins over ci


@pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")), reason="needs chromium + chromedriver")
def test_htmlcheck_detects_broken_pages(tmp_path):
    from lib.book import htmlcheck
    (tmp_path / "ok.html").write_text('<html><body><p id="a">fine</p><a href="#a">x</a></body></html>')
    (tmp_path / "bad.html").write_text(
        '<html><body><img src="missing.png"><a href="nowhere.html">y</a><a href="ok.html#zz">z</a>'
        '<figure id="f1"><pre>&lt;Figure size 640x480 with 1 Axes&gt;</pre></figure>'
        '<p>&lt;IPython.core.display.Markdown object&gt;</p>'
        '<span class="math">\\(x^2\\)</span></body></html>')
    problems, stats = htmlcheck.check(tmp_path, timeout_s=1.0)
    joined = "\n".join(problems)
    assert stats["pages"] == 2
    assert "image failed to load: missing.png" in joined
    assert "broken link nowhere.html" in joined and "broken anchor ok.html#zz" in joined
    assert "figure f1 has no image" in joined and "rendered as text" in joined
    assert "MathJax did not load" in joined
    assert "rendered as its repr" in joined
    assert not any(p.startswith("ok.html") for p in problems)


def test_derived_claims_from_bias_kernel_and_headline():
    def cell(path, method, gap, pv, ci, theory):
        return dict(path=path, method=method, k=2, gap=gap, pv=pv, pv_ci=ci, theory_pv=theory)
    data = {"cells": [cell("native", "rne", 10, -0.01, 0.01, -0.05), cell("native", "rne", 14, -0.25, 0.01, -0.24),
                      cell("native", "beta", 14, 0.002, 0.005, 0.0), cell("numpy", "rne", 14, -0.24, 0.01, -0.24)]}
    c = claims.derive_bias_kernel(data)
    assert c["tie_bias_hw"]["status"] == "reproduced" and "gap 14" in c["tie_bias_hw"]["evidence"]
    assert c["fix_removes_bias"]["status"] == "reproduced" and c["tie_bias"]["status"] == "reproduced"
    data["cells"][1]["pv"] = 0.001                     # no bias measured at the predicted cell
    assert claims.derive_bias_kernel(data)["tie_bias_hw"]["status"] == "not reproduced"
    assert claims.derive_bias_kernel({"cells": []}) == {}

    h = {"lr": 8e-3, "outcomes": {"paper": {"exploded": 3}, "paper+fix": {"stable": 3}, "fa2": {"stable": 1},
                                  "sdpa": {"stable": 1}, "fp32": {"stable": 1}}}
    c = claims.derive_headline(h)
    assert c["explosion"]["status"] == "reproduced" and c["fix_stabilises"]["status"] == "reproduced"
    h["outcomes"]["fa2"] = {"exploded": 1}
    h["outcomes"]["paper+fix"] = {"exploded": 2, "nonfinite": 1}
    c = claims.derive_headline(h)
    assert c["explosion"]["status"] == "partly" and c["fix_stabilises"]["status"] == "not reproduced"


def test_ablation_claims_count_seeds_and_treat_degraded_as_not_stable():
    from lib.claims import table as claims

    def data(paper, fp32_o, dp_p, dfp32o):
        oc = dict(paper=paper, fp32_o=fp32_o, delta_dp_p=dp_p, delta_fp32_o=dfp32o)
        fails = ("exploded", "nonfinite")
        return {"lr": 8e-3, "verdicts": {a: dict(outcomes=o, ours="stable" if all(x == "stable" for x in o) else
                                                 "fails" if all(x in fails for x in o) else "mixed")
                                         for a, o in oc.items()},
                "specs": {"paper": "paper", "delta_fp32_o": "paper/delta_source=fp32_o"}}   # fp32_o, dp_p: no spec
    c = claims.derive_ablations(data(["exploded"] * 3, ["exploded", "degraded", "exploded"], ["exploded"],
                                     ["exploded", "stable", "exploded"]))
    assert c["fp32_o_stabilises"]["status"] == "not reproduced"        # no seed stayed stable
    assert c["delta_only_channel"]["status"] == "partly"
    assert "paper placement, δ from an FP32 O exploded, stable, exploded" in c["delta_only_channel"]["evidence"]
    assert "`delta_dp_p` exploded" in c["delta_only_channel"]["evidence"]      # no spec recorded: its name, as code
    assert "1 of 4 runs stable" in c["delta_only_channel"]["evidence"]
    c = claims.derive_ablations(data(["exploded"], ["stable"] * 2, ["stable"], ["stable"]))
    assert c["fp32_o_stabilises"]["status"] == "reproduced" and c["delta_only_channel"]["status"] == "reproduced"
    c = claims.derive_ablations(data(["stable"], ["stable"], ["stable"], ["stable"]))   # baseline did not fail
    assert c["fp32_o_stabilises"]["status"] == "partly" and "weak" in c["fp32_o_stabilises"]["evidence"]
    assert claims.derive_ablations({"verdicts": {}}) == {}
