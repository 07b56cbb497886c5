"""The intro's verdict table (`lib.claims.verdicts`) and the claims it merges (`lib.claims.table`): at most 12 rows,
each verdict the claims table's own, every number computed from the committed results, no internal name in it; the
fix's verdict says where it removes the bias and where it adds its own; the preconditions claim reads GPT-2's census."""
import pytest

from lib.book import results
from lib.book.htmlcheck import name_problems
from lib.claims import table as claims, verdicts

HAVE = {n: results.exists(n, "full") for n in ("bias_kernel", "fa_deviation", "gpt2_regime", "paper_placement",
                                              "healthy_headline")}


@pytest.fixture(scope="module")
def rows():
    return verdicts.verdict_rows()


def test_at_most_twelve_rows_each_naming_tracked_claims(rows):
    assert len(verdicts.ROWS) <= verdicts.MAX_ROWS and verdicts.n_rows_ok(rows)
    assert not verdicts.n_rows_ok(rows * 2)                           # the check can fail
    ids = {c.id for c in claims.CLAIMS}
    merged = [c for r in verdicts.ROWS for c in r.claims]
    assert len(merged) == len(set(merged)) and set(merged) <= ids     # each claim in one row at most


def test_each_verdict_is_the_claims_tables(rows):
    table = {r["id"]: r for r in claims.status_table()}
    for r in rows:
        first = table[r["claims"][0]]
        assert r["verdict"] == first["status"] and r["stale"] == first["stale"], r["link"]
        assert r["statuses"] == [table[c]["status"] for c in r["claims"]]


def test_the_table_shows_no_internal_name(rows):
    md = verdicts.markdown(rows, chapter_cell=lambda ch: "ch.")
    assert md.count("\n") == len(rows) + 1
    assert name_problems(md) == [], name_problems(md)
    assert all(r["preconditions"] for r in rows)                      # every row says which applies


@pytest.mark.skipif(not HAVE["bias_kernel"], reason="no committed bias_kernel")
def test_the_tie_bias_number_is_the_results():
    rne, beta, gap = verdicts._bias_cells(None)
    assert verdicts.n_tie_bias().startswith(f"{rne['pv']:+.3f} ± {rne['pv_ci']:.3f} ULP")
    assert f"{beta['pv']:+.3f} ULP" in verdicts.n_fix()


@pytest.mark.skipif(not HAVE["healthy_headline"], reason="no committed healthy headline")
def test_the_explosion_number_agrees_with_its_verdict(rows):
    row = next(r for r in rows if r["claims"][0] == "explosion")
    failed = int(row["number"].split(" of ")[0])
    assert (failed == 0) == (row["verdict"] == "not reproduced")


def test_fix_where_says_where_the_fix_adds_a_bias(monkeypatch):
    from lib.studies.golden import reading as golden
    tied = dict(status="reproduced", evidence="tied rows: -0.25 → 0.00")
    for a, b, want in ((-0.26, -2.4, "partly"), (-0.26, -0.01, "reproduced")):
        monkeypatch.setattr(golden, "key_numbers", lambda data, _a=a, _b=b: {"bias:attention:ours:paper": _a,
                                                                           "bias:attention:ours:paper+fix": _b})
        v = claims.fix_where(tied, {})
        assert v["status"] == want and f"{a:+.3f} to {b:+.3f} ULP" in v["evidence"]
        assert ("adds a bias of its own" in v["evidence"]) == (want == "partly")


@pytest.mark.skipif(not HAVE["gpt2_regime"], reason="no committed gpt2_regime")
def test_preconditions_read_gpt2s_census():
    from lib.studies.census import reading as census
    res = results.load("gpt2_regime", "full")
    n = census.gpt2_numbers(res)
    v = claims.derive_preconditions(res)["preconditions"]
    assert v["status"] == ("partly" if n["authors_present"] else "not reproduced")
    assert f"{n['authors_n_heads']} heads" in v["evidence"] and "absent as far as measured" in v["evidence"]
    row = {r["id"]: r for r in claims.status_table()}["preconditions"]
    assert row["results"] == ["gpt2_regime"]


@pytest.mark.skipif(not HAVE["paper_placement"], reason="no committed paper_placement")
def test_findings_glue_the_results():
    f = verdicts.findings()
    d = results.load("paper_placement", "full").data
    comp = [r for r in d["records"] if r["mode"] == "compiled" and r["agreement"] and r["kind"] == "random"]
    assert f["compiled"] == f"{100 * comp[0]['agreement']['paper (predicted)']['o']['bit_identical']:.1f} %"
    assert all(name_problems(v) == [] for v in f.values() if isinstance(v, str))
