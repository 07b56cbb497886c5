"""The claims table takes the δ-channel claims from `delta_capture` (the healthy regime), never from the contrast
result `delta_capture_8e3`, whatever the order in which the results are found; Δδ's sign (delta_bias) reads it
together with the healthy headline's whole-batch telemetry where that exists."""
from lib.book import results
from lib.claims import table as claims

DELTA_CLAIMS = ("o_error_v_sign", "delta_bias", "low_rank", "wq_norm_push")


def _save(tmp_path, name, status, evidence):
    results.save(name, "full", {"claims": {c: {"status": status, "evidence": evidence} for c in DELTA_CLAIMS}},
                 depends_on=[], root=tmp_path)


def _rows(tmp_path):
    return {r["id"]: r for r in claims.status_table(root=tmp_path)}


def test_the_8e3_contrast_reports_no_claim(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "ROOT", tmp_path)
    _save(tmp_path, "delta_capture_8e3", "reproduced", "8e-3 contrast")
    rows = _rows(tmp_path)
    for c in DELTA_CLAIMS:
        assert rows[c]["status"] == "not yet tested" and rows[c]["source"] == "" and rows[c]["results"] == []


def test_the_healthy_capture_wins_in_either_order(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "ROOT", tmp_path)
    _save(tmp_path, "delta_capture", "not reproduced", "healthy regime")
    _save(tmp_path, "delta_capture_8e3", "reproduced", "8e-3 contrast")
    found = results.all_results(tmp_path)
    assert {r.name for r in found} == {"delta_capture", "delta_capture_8e3"}
    for order in (found, found[::-1]):          # the contrast first, then last
        monkeypatch.setattr(results, "all_results", lambda root=None, _o=order: list(_o))
        rows = _rows(tmp_path)
        for c in DELTA_CLAIMS:
            assert rows[c]["status"] == "not reproduced", (c, [r.name for r in order])
            assert rows[c]["evidence"] == "healthy regime"
            assert rows[c]["results"] == ["delta_capture"]
            assert rows[c]["source"].startswith("the captures of the healthy run (")     # its title, not its name


def test_the_committed_table_reads_the_healthy_capture():
    """On the committed results: every δ-channel claim the table shows comes from delta_capture, with its evidence."""
    if not results.exists("delta_capture", "full"):
        import pytest
        pytest.skip("no committed full-scale delta_capture")
    rows = _rows(None)
    want = results.load("delta_capture", "full").data["claims"]
    both = results.exists("healthy_headline", "full")        # Δδ's sign: the captures and the whole-batch telemetry
    from lib.studies.gpt2 import reading as g2r
    chain = [results.load(n, "full") for n in g2r.CHAIN_RESULTS if results.exists(n, "full")]
    gpt2 = g2r.link_readings(g2r.merge_seeds(chain)) if chain else {}   # GPT-2's chain probe first, then the proxy
    for c in DELTA_CLAIMS:
        res = rows[c]["results"]
        if c in gpt2:
            assert res[:len(chain)] == [r.name for r in chain], res
            res = res[len(chain):]
            assert rows[c]["evidence"].startswith(claims.readable(gpt2[c]["evidence"]))
        if c == "delta_bias" and both:
            assert res == ["delta_capture", "healthy_headline"], res
            continue
        assert res == ["delta_capture"], res
        assert rows[c]["evidence"].endswith(claims.readable(want[c]["evidence"]))   # its specs in words
