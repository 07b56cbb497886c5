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


def test_retired_claims_say_why_until_a_result_tests_them(tmp_path, monkeypatch):
    """A claim whose only tests were retired reads "not yet tested" with the reason as its evidence; a committed
    verdict replaces both. Every other claim without a result keeps an empty evidence line."""
    from lib.book.htmlcheck import name_problems
    monkeypatch.setattr(results, "ROOT", tmp_path)
    rows = {r["id"]: r for r in claims.status_table(root=tmp_path)}
    assert set(claims.RETIRED) <= set(rows)
    for cid, text in claims.RETIRED.items():
        assert rows[cid]["status"] == "not yet tested" and rows[cid]["evidence"] == text and name_problems(text) == []
    assert all(r["evidence"] == "" for c, r in rows.items() if c not in claims.RETIRED)
    results.save("x", "full", {"claims": {"delta_only_channel": {"status": "partly", "evidence": "gpu"}}},
                 depends_on=[], root=tmp_path)
    row = {r["id"]: r for r in claims.status_table(root=tmp_path)}["delta_only_channel"]
    assert (row["status"], row["evidence"]) == ("partly", "gpu")
