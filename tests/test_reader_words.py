"""What a reader meets instead of internal names: result titles and provenance in words (`lib.book.catalogue`),
attention specs in words (`lib.training.spec.in_words`, `lib.training.runs.spec_words`), `weight_drift`'s pairs
(`lib.studies.golden.drift.in_words`), replay variants and capture contexts (`lib.studies.delta.reading`), training
tables with validation loss and tokens seen (`lib.training.runs.outcome_table`), and chapter 3's table of
measurements (`lib.studies.golden.reading.measurements_markdown`). Each output is read by the HTML check's own
name finder, so a name that slips through fails here first."""
import pandas as pd
import pytest

from lib.book import catalogue, registry, results
from lib.book.htmlcheck import name_problems
from lib.book.results import Result
from lib.studies.delta import reading as delta_reading
from lib.studies.golden import drift, reading as golden
from lib.training import runs
from lib.training.spec import describe, in_words


def _meta(**kw):
    return dict(scale="full", device="NVIDIA H100 80GB HBM3", git_commit="a1b2c3d4e5", created_utc="2026-11-24T10:00",
                **kw)


# ------------------------------------------------------------------------------------------------ catalogue
def test_every_entry_and_committed_result_has_a_title_without_internal_names():
    names = set(registry.entries()) | {p.stem for p in (results.RESULTS_DIR / "full").glob("*.json")}
    missing = sorted(n for n in names if n not in catalogue.TITLES)
    assert missing == [], f"results without a title in lib.book.catalogue.TITLES: {missing}"
    for n in names:
        assert name_problems(catalogue.title(n)) == [], (n, catalogue.title(n))
    assert len(set(catalogue.TITLES.values())) == len(catalogue.TITLES)       # two results never read alike


def test_title_falls_back_to_the_summary_and_device_in_words():
    assert catalogue.title("no_such_result") == "a result without a title"
    assert catalogue.device({"device": "NVIDIA H100 80GB HBM3"}) == "H100"
    assert catalogue.device({"device": "NVIDIA H200"}) == "H200"
    assert catalogue.device({"device": "cpu (x86_64)"}) == "CPU"


def test_cite_and_stale_line():
    fresh = Result("healthy_headline", "full", _meta(), {})
    stale = Result("headline", "full", _meta(), {}, stale=["code changed: lib.studies.explosion.headline:run"])
    assert catalogue.cite(fresh) == "the healthy headline (paper placement and the fix at β = 7) (H100, 2026-11-24)"
    assert catalogue.cite(stale, with_title=False) == "H100, 2026-11-24, stale"
    assert catalogue.cite(stale, with_title=False, mark_stale=False) == "H100, 2026-11-24"   # said once elsewhere
    assert runs.labelled([fresh, stale], mark_stale=False).count("stale") == 0
    assert catalogue.cite([fresh, stale]).count(";") == 1
    assert catalogue.stale_line([fresh]) == ""
    line = catalogue.stale_line([fresh, stale], why="the kernel changed")
    assert line.startswith("Stale: the LR 8e-3 headline is read as it was committed — the kernel changed;")
    assert name_problems(line) == [] and name_problems(catalogue.cite([fresh, stale])) == []
    sweep = [Result(n, "full", _meta(), {}, stale=["code changed"]) for n in registry.GROUPS["beta_sweep"]]
    line = catalogue.stale_line([stale] + sweep)          # a group read as one is named once
    assert line.startswith(f"Stale: the LR 8e-3 headline and the β sweep ({len(sweep)} results) are read")
    partial = catalogue.stale_line([stale] + sweep[:-1])   # not the whole group: each result by its title
    assert catalogue.title(sweep[0].name) in partial and "results)" not in partial


def test_codify_and_titled():
    text = ("the rule (lib/training/regime.py, lib.studies.dose.reading.stage2_runs) picks; seed 2 is "
            "healthy_headline_w768_s2; TFLOP/s; python -m lib.training.token_corpus build --out /tmp/x")
    out = catalogue.codify(text)
    assert "`lib/training/regime.py`" in out and "`lib.studies.dose.reading.stage2_runs`" in out
    assert "`healthy_headline_w768_s2`" in out and "TFLOP/s" in out and "`TFLOP/s`" not in out
    assert "`python -m lib.training.token_corpus build --out /tmp/x`" in out
    assert catalogue.codify("no code here") == "no code here"
    assert catalogue.titled("regime_sweep (full): largest LR …") == "the healthy regime's pilot at LR 1e-3: largest LR …"
    assert catalogue.titled("`headline` stays code") == "`headline` stays code"


def test_the_appendix_names_results_only_in_code():
    rows = catalogue.rows("full")
    for md in (catalogue.markdown_table(rows), catalogue.markdown_details(rows)):
        prose = "".join(part for i, part in enumerate(md.split("`")) if i % 2 == 0)    # outside code spans
        assert name_problems(prose) == [], name_problems(prose)[:5]


# ------------------------------------------------------------------------------------------------ specs and pairs
@pytest.mark.parametrize("text,words", [
    ("arm paper/round_block=512, LR 0.0005", "arm paper placement, 512-key blocks, LR 0.0005"),
    ("(paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix). Outcomes: paper+fix and paper",
     "(paper placement, 512-key blocks, fix β = 7). Outcomes: paper placement, fix β = 7 and paper"),
    ("fa2 and sdpa stay", "fa2 and sdpa stay"),
])
def test_in_words(text, words):
    assert in_words(text) == words
    assert name_problems(in_words(text)) == []


def test_describe_names_no_numerics_field():
    assert describe("paper/round_o=false") == "paper placement, O in FP32"
    assert describe("paper/normalize_then_round=true") == "paper placement, normalise, then round"
    assert name_problems(describe("paper/round_pv=false/round_acc=false/round_l=false/normalize_then_round=true/"
                                  "round_o=false")) == []


def test_spec_words_per_layer():
    assert runs.spec_words("sdpa,sdpa,paper,sdpa") == "paper placement in layer 2; PyTorch flash SDPA elsewhere"
    assert runs.spec_words(["paper", "paper[heads 0,1: paper/round_o=false]", "paper"]) == \
        "paper placement, heads 0, 1: paper placement, O in FP32 in layer 1; paper placement elsewhere"
    assert runs.spec_words("paper") == "paper placement"


def test_drift_pairs_in_words():
    ev = "seeds [0, 1]: W1(bf16_vs_fp32) / W1(flash_vs_naive): median 0.95; W1(seed) / W1(flash_vs_naive); per seed"
    out = drift.in_words(ev)
    assert out == ("seeds [0, 1]: W1(BF16 vs FP32 training) / W1(flash vs FP32 attention): median 0.95; "
                   "W1(seed vs seed) / W1(flash vs FP32 attention); per seed")
    assert name_problems(out) == []


# ------------------------------------------------------------------------------------------------ tables
def _training_result():
    rows = [dict(id=f"{a}_s{s}_lr0.001", arm=a, attn=spec, seed=s, lr=1e-3, tag="", steps=1000, outcome="stable",
                 onset=None, best=1.0 + s, final=1.1 + s, max_grad_norm=2.0, val_loss=1.2 + s)
            for a, spec in (("paper_rb512", "paper/round_block=512"), ("fp32", "naive")) for s in (0, 1)]
    return Result("healthy_headline", "full", _meta(config=dict(batch_size=32, seq_len=512)), dict(runs=rows), {})


def test_outcome_table_has_words_validation_loss_and_tokens():
    res = _training_result()
    md = runs.outcome_table(res)
    assert "| paper placement, 512-key blocks, seed 1 | stable | 16.4 M | 2.000 / 2.100 | 2.200 | 2 |" in md
    assert name_problems(md) == []
    assert runs.tokens_seen(res, res.data["runs"][0]) == 1000 * 32 * 512
    assert runs.tokens_seen(Result("x", "ci", {}, {}), res.data["runs"][0]) is None
    assert runs.val_loss({"val_loss": float("nan")}) is None
    live = runs.outcome_table(res.data)         # a live run's data: runs in words from their specs; no tokens
    assert "| paper placement, 512-key blocks, seed 0 | stable | — | 1.000 / 1.100 | 1.200 | 2 |" in live
    assert name_problems(live) == []
    assert runs.run_words({"id": "paper_s0"}) == "`paper_s0`"                 # older data without a spec: its id, as code


def test_measurements_markdown_is_narrow_and_in_words():
    recs = [dict(sweep="seq", inputs="attention", d=64, N=128, H=1, fmt="bf16", impl=impl, block=[16, 16],
                 max_abs=1e-3, mean_abs_ulp=0.3, bias_ulp=-0.25, error=None)
            for impl in ("gpu:sdpa_math", "ours:paper+fix")]
    recs.append(dict(recs[0], impl="gpu:sdpa_flash", error="RuntimeError: No available kernel"))
    md = golden.measurements_markdown(golden.frame({"records": recs}), d=64)
    lines = md.split("\n")
    assert len(lines) == 4 and lines[0].replace("\\|", "").count("|") == 7   # 6 columns; the failed cell left out
    assert "| attention, 128 | BF16 | SDPA math (GPU) | 0.001 | 0.30 | -0.250 |" in md
    assert name_problems(md.replace("\\|", "")) == []


def test_delta_context_and_variants_in_words():
    res = Result("delta_capture", "full", _meta(), {"context": {
        "regime": "arm paper/round_block=512, LR 0.0005", "tile": "64-key compute tiles", "seeds": [0, 1],
        "horizon": "steps 0–99"}})
    assert delta_reading.context_text(res) == ("arm paper placement, 512-key blocks, LR 0.0005; 64-key compute tiles; "
                                               "seeds 0, 1; steps 0–99")
    assert delta_reading.context_text(res, ("regime",)) == "arm paper placement, 512-key blocks, LR 0.0005"
    assert delta_reading.variant_words("paper", 512) == "paper placement, 512-key blocks"
    assert delta_reading.variant_words("fa2", 64) == "FA2 placement"


def test_measurements_markdown_of_an_empty_result_is_its_header():
    assert golden.measurements_markdown(pd.DataFrame(), d=64).count("\n") == 1
