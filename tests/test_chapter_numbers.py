"""Chapters 6 and 7 get every number from a tested `numbers()`: each name the prose glues is in the dict the
chapter glues, and the values are the readings of the committed results (checked here against the components that
compute them); each section reads "not run" (or similar) without its result instead of failing."""
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from lib.book import registry, results
from lib.book.htmlcheck import name_problems
from lib.studies.explosion import reading as explosion
from lib.studies.fix import reading as fix
from lib.training import horizon as hz, regime, runs

ROOT = Path(__file__).resolve().parents[1]
LIVE = {"data": {"runs": [dict(id="paper_s0_lr0.01", outcome="stable", steps=5, final=5.04, beta=7.0,
                               max_shift=64.0)]}}


def glued_names(page: str) -> set:
    """Names a page's prose and display cells read: {glue:text}`x`, {glue:figure} x, md("x") and N["x"]."""
    text = (ROOT / "chapters" / page).read_text()
    names = set(re.findall(r"\{glue:(?:text|md)\}`([\w-]+)", text))
    names |= set(re.findall(r"^```\{glue:figure\} ([\w-]+)", text, flags=re.M))
    names |= set(re.findall(r"""(?:md\(|N\[)"([\w-]+)"[\])]""", text))
    return names


def _all(scale_numbers) -> dict:
    out = scale_numbers()
    plt.close("all")
    return out


@pytest.fixture(scope="module")
def ch6(monkeypatch_module):
    monkeypatch_module.setattr("lib.book.runner.run_live", lambda name, scale, overrides=None: LIVE)
    return _all(lambda: explosion.numbers("ci"))


@pytest.fixture(scope="module")
def ch7(monkeypatch_module):
    monkeypatch_module.setattr("lib.book.runner.run_live", lambda name, scale, overrides=None: LIVE)
    return _all(lambda: fix.numbers("ci"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def page_glued(page: str) -> set:
    """Names a page's own cells glue (`glue("x", …)`), beside the loop over numbers()."""
    return set(re.findall(r'\bglue\("([\w-]+)"', (ROOT / "chapters" / page).read_text()))


def test_chapter_6_glues_only_what_numbers_gives(ch6):
    missing = glued_names("06-loss-explosion.md") - set(ch6) - page_glued("06-loss-explosion.md")
    assert missing == set()
    assert all(isinstance(v, (str, int, float)) or k.startswith("fig-") for k, v in ch6.items())


def test_chapter_7_glues_only_what_numbers_gives(ch7):
    assert glued_names("07-the-fix.md") - set(ch7) - page_glued("07-the-fix.md") == set()
    assert page_glued("07-the-fix.md") == {"g7_gpt2"}          # GPT-2's fix arms, from the claims layer


def test_the_name_finder_can_fail():
    # the clause and the three statuses from the claims layer, and GPT-2's logit-bound control beside the proxy's
    assert page_glued("06-loss-explosion.md") == {"gx_text", "ch6_delta", "ch6_o32", "ch6_bias", "ch6_bound",
                                                  "ch6_bound_verdict"}
    assert glued_names("06-loss-explosion.md") >= {"hh_paper", "fig-healthy", "rg_table_md", "hh_table_md"}


def test_chapter_6_values_are_the_readings_of_the_results(ch6):
    pilots = [results.load(n, "full") for n in regime.REGIME_RESULTS]
    refs = explosion.pilot_refs(pilots)
    lr, _ = regime.select_lr(refs.data, refs.arrays)
    assert ch6["rg_chosen"] == f"{lr:g}"
    hh = runs.merge(results.load_group("healthy_headline"))
    h, judged = hz.judge_result(hh)
    assert ch6["hh_steps"] == f"{h:,}" and ch6["hh_lr"] == f"{hh.data['lr']:g}"
    paper = sorted((r for r in hh.data["runs"] if r["arm"] == explosion.PAPER), key=lambda r: r["seed"])
    assert ch6["hh_paper"] == ", ".join(judged[r["id"]]["outcome"] for r in paper)
    assert "paper placement, 512-key blocks, fix β = 7" in ch6["hh_table_md"]      # labels, not arm names
    assert "paper_rb512" not in ch6["hh_table_md"] and "_qknorm" not in ch6["gg_table_md"]


def test_chapter_6_settings_are_the_ones_the_runs_used(ch6):
    """The settings the prose names (rounding block, β of each fix arm, sequence, width, tile, seeds, the controls'
    LR, steps and β) are read from the results' specs and configs, and the row-zeroing levels follow from them."""
    from lib.training.spec import AttnSpec
    from lib.training.zero_rows import OURS_ZERO_AT
    hh = runs.merge(results.load_group("healthy_headline"))
    spec = {r["arm"]: AttnSpec.parse(r["attn"]) for r in hh.data["runs"]}
    assert ch6["hh_rb"] == spec[explosion.PAPER].numerics.round_block == ch6["hh_seq"]      # a block is the row
    assert (ch6["hh_b7"], ch6["hh_b2"]) == (f"{spec[explosion.FIX7].fix.beta:g}", f"{spec[explosion.FIX2].fix.beta:g}")
    assert ch6["hh_b7"] != ch6["hh_b2"]
    # "above zero_level/(β − 1) ≈ zero_at_b7 for β = hh_b7"; "at β = hh_b2 the same level is zero_level"
    assert ch6["zero_at_b7"] == f"{OURS_ZERO_AT / (float(ch6['hh_b7']) - 1):.1f}"
    assert ch6["zero_level"] == f"{OURS_ZERO_AT / (float(ch6['hh_b2']) - 1):.1f}"
    assert ch6["hh_width"] == hh.meta["config"]["n_embd"] != ch6["wd_width"]
    assert ch6["tile_key"] < ch6["hh_seq"]                   # our tiles dilute what one whole-row block does not
    gg = results.load("generic_growth_controls", "full")
    assert (ch6["gg_lr"], ch6["gg_steps"]) == (f"{gg.meta['config']['lr']:g}", f"{gg.meta['config']['steps']:,}")
    assert ch6["gg_lr"] == ch6["h_lr"]                      # the controls ran at the headline's LR
    assert ch6["gg_zr_beta"] == f"{gg.meta['config']['beta']:g}"
    pilots = explosion.pilot_refs([results.load(n, "full") for n in regime.REGIME_RESULTS])
    assert ch6["rg_n_seeds"] == str(len({r["seed"] for r in pilots.data["runs"] if r["arm"] == "fp32"}))


def test_chapter_7_values_are_the_readings_of_the_results(ch7):
    from lib.fp.fix import Fix
    assert ch7["max_shift"] == f"{Fix().max_shift:g}"
    tb = results.load("train_step_bench", "full")
    assert ch7["tb_rb512"] == f"{fix.step_bench(tb.data)['ratio']:.2f}"
    ac = results.load("authors_code", "full")
    assert ch7["ac_lr"] == f"{ac.data['lr']:g}"


def test_chapter_7_settings_are_the_ones_the_runs_used(ch7):
    """The β values the prose names are the paper's (`Fix().beta`) and the authors' current code's, each the one the
    arms named after it ran; the tiles, blocks and tie tolerance are the arms' specs; the levels follow from the β."""
    from lib.fp.fix import Fix
    from lib.training.spec import AttnSpec
    from lib.training.zero_rows import OURS_ZERO_AT, authors_zero_at
    from lib.training.authors_backend import AuthorsOptions
    assert ch7["b_paper"] == f"{Fix().beta:g}" != ch7["b_authors"]
    hh = runs.merge(results.load_group("healthy_headline"))
    spec = {r["arm"]: AttnSpec.parse(r["attn"]) for r in hh.data["runs"]}
    assert (ch7["h7_b7"], ch7["h7_b2"]) == (ch7["b_paper"], ch7["b_authors"]) == (
        f"{spec[fix.FIX7].fix.beta:g}", f"{spec[fix.FIX2].fix.beta:g}")
    assert ch7["h7_rb"] == spec[fix.PAPER].numerics.round_block
    assert ch7["h7_level_b7"] == f"{OURS_ZERO_AT / (float(ch7['h7_b7']) - 1):.1f}"
    assert ch7["thr_beta"] == f"{results.load('headline', 'full').meta['config']['beta']:g}"
    ac, ac8 = results.load_group("authors_code")
    aspec = {r["arm"]: AttnSpec.parse(r["attn"]) for r in ac.data["runs"] + ac8.data["runs"]}
    assert (ch7["ac_b7"], ch7["ac_b2"], ch7["ac8_zb"]) == (ch7["b_paper"], ch7["b_authors"], ch7["b_paper"])
    assert ch7["ac_tie_tol"] == f"{aspec['authors+fix_b7'].fix.tie_tol:g}"
    assert ch7["ac_tile"] == aspec["authors"].opts.tile == ch7["ac_seq"]             # a tile is the whole row
    floor = AuthorsOptions().floor
    assert ch7["ac_level_b7"] == f"{authors_zero_at(floor) / (float(ch7['ac_b7']) - 1):.1f}"
    assert ch7["ac_level_b2"] == f"{authors_zero_at(floor) / (float(ch7['ac_b2']) - 1):.1f}"
    tb = results.load("train_step_bench", "full")
    assert ch7["tb_rb"] == AttnSpec.parse(tb.data["arms"]["paper_rb512"]).numerics.round_block != ch7["tile_n"]


def test_sections_without_their_results():
    assert "not been run" in explosion.generic_numbers(None)["gg_table_md"]
    assert "not been run" in explosion.sweep_numbers(None)["sw_table_md"]
    assert explosion.headline_numbers(None)["h_what_md"] == ""
    assert explosion.wide_numbers([]) == {}
    assert explosion.regime_numbers([])["rg_table_md"].startswith("The regime pilots have not been run")
    assert fix.sweep_fix_numbers(None)["sw_fix"] == "not run"
    assert fix.healthy_fix_numbers([])["h7_gap"] == "—"
    assert fix.cost_numbers(None, None)["tb_rb512"] == "—"


def test_live_numbers_and_step_bench():
    live = explosion.live_numbers(LIVE, "ci")                 # at ci scale a sentence, no table of toy outcomes
    assert live["live_n"] == 1 and live["live_md"] == (
        "This build ran the headline's code at ci scale: 1 run of a tiny CPU model, 5 steps each, 1 stable (final "
        "losses 5.040). That shows the code runs end to end; at this size the outcomes say nothing about stability.")
    full = explosion.live_numbers({"data": {"runs": [dict(LIVE["data"]["runs"][0], attn="paper", seed=0)]}}, "full")
    assert "| paper placement, seed 0 | stable | 5 | 5.040 |" in full["live_md"] and "tiny CPU" not in full["live_md"]
    assert name_problems(live["live_md"] + full["live_md"]) == []
    bs = fix.beta_sweep_numbers([], LIVE, "ci")["bs_live_md"]
    assert bs.startswith("This build ran the β sweep's code at ci scale: 1 run of a tiny CPU model (β 7), 5 steps")
    assert "| `paper_s0_lr0.01` | 7 | 64.0 | stable | 5 |" in fix.beta_sweep_numbers([], LIVE, "full")["bs_live_md"]
    d = {"ratio_to_sdpa": {"paper_rb512": 1.25}, "ratio_to_sdpa_rounds": {"paper_rb512": [1.2, 1.25, 1.4]}}
    s = fix.step_bench(d)
    assert s["met"] and s["every_round"] == "both" and (s["lo"], s["hi"]) == (1.2, 1.4)


def test_kernel_time_is_said_against_the_wall_clock_verdict():
    """"as well" only where kernel time and wall-clock time agree on the step target."""
    assert fix._kernel_time_words(True, True) == "met in kernel time as well"
    assert fix._kernel_time_words(False, False) == "missed in kernel time as well"
    assert fix._kernel_time_words(True, False) == "met in kernel time, unlike in wall-clock time"
    assert fix._kernel_time_words(False, True) == "missed in kernel time, unlike in wall-clock time"


def test_generic_numbers_on_a_planted_result():
    """QK-norm arms are found by the entry's arm_train (not by their names), outcomes judged at the horizon."""
    n = 300
    rows, arrays = [], {}
    for arm, seed, rise in (("a", 0, 0.0), ("a", 1, 0.0), ("b", 0, 3.0)):
        rid = f"{arm}_s{seed}"
        loss = np.full(n, 2.0) + (np.linspace(0, rise, n) if rise else 0.0)
        arrays |= {f"{rid}__loss": loss, f"{rid}__grad_norm": np.ones(n),
                   f"{rid}__max_logit": np.full((6, 2), 10.0 + seed), f"{rid}__step": np.arange(6) * 50.0}
        rows.append(dict(id=rid, arm=arm, seed=seed, attn="paper" if arm == "a" else "naive", lr=8e-3, tag="",
                         steps=n, outcome="stable" if not rise else "exploded", onset=None,
                         val_loss=2.5 + 0.1 * seed + rise))
    meta = dict(config=dict(warmup=10, batch_size=100, seq_len=100),
                provenance=dict(cfg=dict(arm_train={"a": {"qk_norm": True}})),
                scale="full", device="cpu", git_commit="0" * 8, created_utc="2026-01-01")
    out = explosion.generic_numbers(results.Result("generic_growth_controls", "full", meta, dict(runs=rows), arrays))
    assert out["gg_qk"] == "2 of 2" and out["gg_qk_logit"] == "11"
    # validation loss (range over seeds) and tokens seen (steps × batch × sequence) beside the outcome
    assert "| paper placement, QK-norm | 2 | stable, stable | 2.500–2.600 | 3.0 M | 11 |" in out["gg_table_md"]
    assert "| FP32 attention | 1 | exploded | 5.500 | 3.0 M | 10 |" in out["gg_table_md"]
    assert out["gg_label"] == "the QK-norm and row-zeroing controls at LR 8e-3 (CPU, 2026-01-01)"
    assert (out["gg_lr"], out["gg_steps"], out["gg_zr_beta"]) == ("0.008", "300", "—")    # no row-zeroing arm


def test_result_groups_the_chapters_read_exist():
    for g in ("healthy_headline", "width_768", "authors_code", "beta_sweep"):
        assert results.load_group(g), g
        assert all(n in registry.entries() for n in registry.GROUPS[g])
