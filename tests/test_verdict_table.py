"""The intro's verdict table (`lib.claims.verdicts`) and the claims it merges (`lib.claims.table`): at most 12 rows,
one status per row (the claims table's own), stale shown as stale, the book's control outside the table and never
"reproduced", every "tested in" label defined under the table, counts that count the rows shown, every number
computed from the committed results, no internal name in it; the fix's verdict says where it removes the bias and where
it adds its own; the preconditions claim reads GPT-2's census and the proxy's captures."""
import re

import pytest

from lib.book import results
from lib.book.htmlcheck import name_problems
from lib.claims import table as claims, verdicts

HAVE = {n: results.exists(n, "full") for n in ("bias_kernel", "fa_deviation", "gpt2_regime", "paper_placement",
                                              "healthy_headline")}


@pytest.fixture(scope="module")
def rows():
    return verdicts.verdict_rows()


@pytest.fixture(scope="module")
def table():
    return {r["id"]: r for r in claims.status_table()}


def test_at_most_thirteen_rows_each_naming_tracked_claims(rows):
    assert len(verdicts.ROWS) <= verdicts.MAX_ROWS and verdicts.n_rows_ok(rows)
    assert not verdicts.n_rows_ok(rows * 2)                           # the check can fail
    ids = {c.id for c in claims.CLAIMS}
    merged = [c for r in verdicts.ROWS for c in r.claims]
    assert len(merged) == len(set(merged)) and set(merged) <= ids     # each claim in one row at most


def test_each_verdict_is_the_claims_tables(rows, table):
    for r in rows:
        assert r["statuses"] == [table[c]["status"] for c in r["claims"]]
        assert r["verdict"] == r["statuses"][0] and r["stale"] == any(table[c]["stale"] for c in r["claims"])


def test_one_status_per_row(rows):
    assert verdicts.one_status(rows)              # no row hides a second verdict (a "partly (stale)" in a "not yet
    mixed = [dict(rows[0], statuses=["not yet tested", "partly"], stales=[False, True])]       # tested" row)
    assert not verdicts.one_status(mixed)         # the check can fail


def test_stale_rows_say_so(rows):
    md = verdicts.markdown(rows, chapter_cell=lambda ch: "ch.")
    lines = md.splitlines()[2:]
    for r, line in zip(rows, lines):
        assert ("(stale)" in line.split(" | ")[1]) == r["stale"], line


def test_the_control_is_not_a_row_and_never_reproduced(rows):
    control_ids = {c for r in verdicts.CONTROLS for c in r.claims}
    assert not control_ids & {c for r in rows for c in r["claims"]}
    controls = verdicts.control_rows()           # built once: each build reads every result again (≈ 4 s)
    for r in controls:
        assert r["verdict"] not in claims_statuses() and "reproduced" not in r["verdict"], r["verdict"]
    s = verdicts.controls_markdown(controls, chapter_cell=lambda ch: "6")
    assert s.startswith("Our own control, not a claim of the paper:") and name_problems(s) == []


def claims_statuses():
    return {"reproduced", "partly", "not reproduced"}


def test_counts_count_the_rows_shown(rows):
    s = verdicts.counts_sentence(rows)
    for status in {r["verdict"] for r in rows}:
        n = sum(r["verdict"] == status for r in rows)
        assert re.search(rf"\b{n} (is|are) {status if status != 'partly' else 'partly reproduced'}\b", s), (status, s)
    n_stale = sum(r["stale"] for r in rows)
    assert (f"{n_stale} of them rest" in s) == bool(n_stale)


def test_every_label_is_defined(rows):
    legend = verdicts.legend()
    defined = [k for k, _ in verdicts.LEGEND]
    for r in rows:
        for part in re.sub(r"\([^)]*\)", "", r["where"]).split("; "):
            head = part.split(",")[0].split(" at LR")[0].strip()
            assert head in defined or head.startswith("GPT-2:"), (head, r["where"])
    for k in defined:
        assert f"*{k[0].upper() + k[1:]}*:" in legend
    assert "*Links* are the numbered boxes of the chain" in legend and "*Stale*:" in legend
    # links are named by the chain figure's numbers, 1 to its length
    from lib.claims.chain import CHAIN
    named = {int(x) for r in rows for m in re.finditer(r"Links? (\d)(?:–(\d))?", r["link"]) for x in m.groups() if x}
    assert named and named <= set(range(1, len(CHAIN) + 1))
    assert "—" not in legend if all(results.exists(n, "full") for n in ("gpt2_regime", "delta_capture",
                                                                         "healthy_headline")) else True


def test_no_typed_number_in_the_definitions():
    """The rows' and legend's fixed text carries no number of a result: those come from `context` (LRs, widths,
    seeds, shares) — only the claims' own numbers (the paper's "≈ 10×", "2–5×") and link numbers are written."""
    for r in (*verdicts.ROWS, *verdicts.CONTROLS):
        text = re.sub(r"Links? \d(–\d)?|≈ 10×|2–5×|W_Q|P̄ = 1|Δδ > 0|β|δ|BF16|FP32|GPT-2", "",
                      r.link + r.where)
        assert not re.search(r"\d", re.sub(r"\{[a-z_0-9]+\}", "", text)), r.link
    for k, v in verdicts.LEGEND:
        text = re.sub(r"\{[a-z_0-9]+\}|GPT-2 124M|BF16|chapters 4–7|chapter (6|2b|2c)|[Ll]ink 1", "", v)
        assert not re.search(r"\d", text), v


def test_the_table_shows_no_internal_name(rows):
    md = verdicts.markdown(rows, chapter_cell=lambda ch: "ch.")
    assert md.count("\n") == len(rows) + 1
    assert name_problems(md) == [], name_problems(md)
    assert name_problems(verdicts.legend()) == []
    assert all(r["where"] for r in rows)                              # every row says where it was tested


@pytest.mark.skipif(not HAVE["bias_kernel"], reason="no committed bias_kernel")
def test_the_tie_bias_number_is_the_results():
    rne, beta, gap = verdicts._bias_cells(None)
    assert verdicts.n_tie_bias().startswith(f"{rne['pv']:+.3f} ± {rne['pv_ci']:.3f} ULP")
    assert f"{beta['pv']:+.3f} ULP" in verdicts.n_fix()


@pytest.mark.skipif(not HAVE["healthy_headline"], reason="no committed healthy headline")
def test_the_explosion_number_agrees_with_its_verdict(rows):
    """The first count the cell gives (GPT-2's exploded seeds when GPT-2 ran, else the proxy's failed seeds) is zero
    exactly when the verdict is "not reproduced"."""
    row = next(r for r in rows if r["claims"][0] == "explosion")
    failed = int(re.search(r"(\d+) of \d+", row["number"]).group(1))
    assert (failed == 0) == (row["verdict"] == "not reproduced")


def test_fix_where_says_where_the_fix_adds_a_bias(monkeypatch):
    from lib.studies.golden import reading as golden
    tied = dict(status="reproduced", evidence="tied rows: -0.25 → 0.00")
    sweep = {"ours:paper": [(1024, -0.1), (4096, -0.26), (8192, 0.01)],
             "ours:paper+fix": [(1024, -0.05), (4096, -2.4), (8192, -4.9)]}
    monkeypatch.setattr(golden, "bias_by_length", lambda data, impl: sweep[impl])
    for a, b, want in ((-0.26, -2.4, "partly"), (-0.26, -0.01, "reproduced")):
        monkeypatch.setattr(golden, "key_numbers", lambda data, _a=a, _b=b: {"bias:attention:ours:paper": _a,
                                                                           "bias:attention:ours:paper+fix": _b,
                                                                           "N": 4096})
        v = claims.fix_where(tied, {})
        assert v["status"] == want and f"at 4,096 keys goes from {a:+.3f} to {b:+.3f} ULP" in v["evidence"]
        assert ("adds a bias of its own" in v["evidence"]) == (want == "partly")
        assert "the larger in size at 2 of 3 lengths (1,024–8,192 keys)" in v["evidence"]


@pytest.mark.skipif(not HAVE["gpt2_regime"], reason="no committed gpt2_regime")
def test_preconditions_read_gpt2s_census(table):
    from lib.studies.census import reading as census
    res = results.load("gpt2_regime", "full")
    n = census.gpt2_numbers(res)
    v = claims.derive_preconditions(res)["preconditions"]
    assert v["status"] == ("partly" if n["authors_present"] else "not reproduced")
    assert f"{n['authors_n_heads']} heads" in v["evidence"] and "absent as far as measured" in v["evidence"]
    assert "fraction of a percent" not in v["evidence"]                # no typed share
    row = table["preconditions"]                                       # claims.status_table(), built once
    assert row["results"][0] == "gpt2_regime"
    if results.exists("delta_capture", "full"):                        # the proxy's share, computed (chapter 4's)
        from lib.studies.delta import reading as delta
        n4 = delta.numbers_ch4(results.load("delta_capture", "full"))
        assert row["results"] == ["gpt2_regime", "delta_capture"]
        assert f"{n4['tie_med']:.1%} of rows with a tied maximum" in row["evidence"]


@pytest.mark.skipif(not HAVE["paper_placement"], reason="no committed paper_placement")
def test_findings_glue_the_results():
    f = verdicts.findings()
    d = results.load("paper_placement", "full").data
    comp = [r for r in d["records"] if r["mode"] == "compiled" and r["agreement"] and r["kind"] == "random"]
    assert f["compiled"] == f"{100 * comp[0]['agreement']['paper (predicted)']['o']['bit_identical']:.1f} %"
    assert all(name_problems(v) == [] for v in f.values() if isinstance(v, str))


def test_the_fix_beta_the_intro_names_is_the_one_the_authors_code_ran(tmp_path):
    from lib.fp.fix import BETA
    from lib.training.spec import AttnSpec
    assert verdicts._fix_beta(tmp_path) == BETA                       # no result: the fix's default, the paper's β
    g = results.load_group("authors_code", "full")
    if not g:
        pytest.skip("no committed authors_code")
    betas = {AttnSpec.parse(r["attn"]).fix.beta for r in g[0].data["runs"] if r["arm"] == "authors+fix_b7"}
    assert len(betas) == 1 and verdicts.findings()["fix_beta"] == f"{betas.pop():g}"


@pytest.mark.skipif(not (results.exists("delta_capture", "full") and HAVE["healthy_headline"]),
                    reason="no committed capture and telemetry")
def test_link_4_reads_both_tests(rows, table):
    """Link 4's verdict is the status of its two tests (the captured rows' and the whole-batch sign test), and its
    evidence names both, each with the share it detects."""
    from lib.studies.delta import two_tests
    v = two_tests.verdict(results.load("delta_capture", "full"), results.load("healthy_headline", "full"))
    row = next(r for r in rows if r["claims"] == ["delta_bias"])
    # GPT-2's chain probe comes first where committed (it reads "partly" at most, as the two tests do here)
    assert row["verdict"] == v["status"] and v["phrase"] in row["number"]
    assert row["number"].startswith("GPT-2") == bool(table["delta_bias"]["results"][:-2])
    for share in (v["batch"]["detectable"], v["row"]["detectable"]):
        assert f"{share:.0%}" in row["number"]
    assert table["delta_bias"]["results"][-2:] == ["delta_capture", "healthy_headline"]
    assert f"{v['batch']['above']} of {v['batch']['cells']}" in table["delta_bias"]["evidence"]


def test_the_gpt2_explosion_clause_reads_the_chain_runs(tmp_path):
    assert verdicts.gpt2_explosion_clause(tmp_path) == "GPT-2 124M has not been trained with these arms yet"
    from lib.studies.gpt2 import reading as g2r
    chain = [results.load(n, "full") for n in g2r.CHAIN_RESULTS if results.exists(n, "full")]
    v = g2r.explosion_verdict(g2r.merge_seeds(chain))
    assert verdicts.gpt2_explosion_clause().startswith(
        f"the paper placement's loss exploded in {v['n_boom']} of {v['n_paper']} seeds while FP32 attention failed in")


def test_gpt2_link_words_read_the_chain_runs_or_say_none(tmp_path):
    """Chapter 5's GPT-2 sentence: the chain reading's words and status when the runs are committed, a plain
    sentence when none is (an empty results root)."""
    assert verdicts.gpt2_link_words("wq_norm_push", tmp_path) == "GPT-2 has not been read this way yet"
    from lib.studies.gpt2 import reading as g2r
    chain = [results.load(n, "full") for n in g2r.CHAIN_RESULTS if results.exists(n, "full")]
    if len(chain) > 1:
        link = g2r.link_readings(g2r.merge_seeds(chain))["wq_norm_push"]
        got = verdicts.gpt2_link_words("wq_norm_push")
        assert got.startswith(link["words"]) and got.endswith(f"reads {link['status']})")


def test_link_5_reads_gpt2_first_where_committed(rows, table):
    """Link 5's row: GPT-2's reading of the dW_Q error's shape first (the chain runs committed), then the proxy's;
    chapter 5's sentence gives its status with the reasons when it is not "partly"."""
    from lib.studies.gpt2 import reading as g2r
    chain = [results.load(n, "full") for n in g2r.CHAIN_RESULTS if results.exists(n, "full")]
    row = next(r for r in rows if r["claims"] == ["low_rank"])
    if not chain:
        assert not row["number"].startswith("GPT-2")
        return
    link = g2r.link_readings(g2r.merge_seeds(chain))["low_rank"]
    assert row["number"].startswith(link["words"]) and row["where"].startswith("GPT-2")
    assert table["low_rank"]["results"][:len(chain)] == [r.name for r in chain]
    words = verdicts.gpt2_link_words("low_rank")
    assert words.startswith(link["words"]) and f"it reads {link['status']}" in words
    if link["status"] != "partly" and link["reasons"]:
        assert words.endswith("; ".join(link["reasons"]) + ")")


def test_every_claim_is_a_row_a_control_or_named_under_the_table(table):
    text = verdicts.untested_markdown()
    shown = {c for r in verdicts.ROWS + verdicts.CONTROLS for c in r.claims}
    for c in claims.CLAIMS:
        named = (c.text[0].lower() + c.text[1:].rstrip(".")) in text
        assert (c.id in shown) != named, c.id                  # in exactly one place
        if named:
            assert f"— {table[c.id]['status']} (chapter" in text
    assert name_problems(text) == []


def test_gpt2_remedy_words_name_what_ran_against_the_unremedied_failure():
    """The fix's and the remedies' GPT-2 arms in a few words, from the committed results (chapter 7 and the verdict
    table read them): every arm that ran with its seeds, the unremedied failure steps, and nothing for an arm that
    has not run."""
    from lib.book import results
    from lib.claims.verdicts import gpt2_remedy_words, n_remedy
    if not (results.exists("gpt2_remedy_o32_s1", "full") and results.exists("gpt2_arms_s1", "full")):
        pytest.skip("the GPT-2 remedy results are not committed")
    words = gpt2_remedy_words(("paper_fix_b2", "paper_never_registered"))
    assert words.startswith("guarded fix (β = 2), seed 1: ") and "(unremedied: failed at step " in words
    assert gpt2_remedy_words(("paper_never_registered",)) == ""
    assert n_remedy(("paper_fix_b2",)).startswith(f"GPT-2: {words}")


@pytest.mark.skipif(not results.exists("bias_montecarlo", "full"), reason="no committed bias_montecarlo")
def test_the_snapback_finding_reads_the_monte_carlo_cell(tmp_path):
    from lib.fp import snapback
    res = results.load("bias_montecarlo", "full")
    cell = next(r for r in res.data["grid"] if (r["k"], r["gap"]) == snapback.SHOWCASE)
    f = verdicts.findings()["snapback"]
    assert f"{cell['rne_pv']:+.3f}" in f and f"{cell['rne_o_rtn']:+.3f}" in f     # the grid's own numbers
    assert verdicts.findings(tmp_path)["snapback"] == "not measured"


def test_the_dose_number_shows_what_partly_rests_on():
    """The dose row's number: the three λ* and, from the same thresholds, the bias's breaking RMS against the smallest
    RMS at which another component stayed stable over three seeds (the potency half of the verdict)."""
    from lib.studies.dose import reading as dr
    dose = verdicts._group("delta_dose", None)
    if not dose:
        pytest.skip("no dose result committed")
    t = dr.unstable_thresholds(dose)
    text = verdicts.n_dose()
    assert text.startswith("λ* = ") and f"breaks at RMS {t['bias']['rms_hi']:.2g}" in text
    lo = min(t[c]["rms_lo"] for c in dr.COMPONENTS if c != "bias" and c in t and t[c].get("rms_lo") is not None
             and t[c]["n_seeds_lo"] >= 3)
    assert f"still stable at {lo:.2g}" in text and t["bias"]["rms_hi"] < lo
