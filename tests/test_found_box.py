"""The intro's "What we found" box (`lib.claims.found`): every number is the committed results' (read through the
chapters' own readings), a finding that rests on a stale result says so, a missing result reads "not measured yet",
the GPT-2 comparison is said to be untested while it has no result, and the box is an admonition of the class the
HTML check looks for, with no internal name in it."""
import dataclasses
import re

import pytest

from lib.book import htmlcheck, registry, results
from lib.claims import found, verdicts

HAVE = {n: results.exists(n, "full") for n in ("bias_kernel", "fa_deviation", "gpt2_regime", "delta_capture",
                                              "kernel_fidelity", "gradient_checks", "train_step_gpt2")}


@pytest.fixture(scope="module")
def items():
    return found.findings()


def test_the_box_is_an_admonition_with_one_bullet_per_finding(items):
    md = found.markdown(items, chapter_cell=lambda ch: ch.split("/")[-1].split("-")[0].lstrip("0"))
    lines = md.splitlines()
    assert lines[0] == "```{admonition} " + found.TITLE and lines[1] == f":class: {found.BOX_CLASS}"
    assert lines[-1] == "```" and len(lines) == len(items) + 3
    assert found.BOX_CLASS == htmlcheck.FIRST_SCREEN_BOX               # the class the first-screen check looks for
    assert all(line.startswith("* **") for line in lines[2:-1])


def test_no_internal_name_or_working_word(items):
    for f in items:
        text = f.head + " " + f.text
        assert htmlcheck.name_problems(text) == [], text
        assert htmlcheck.process_problems(text) == [], text


@pytest.mark.skipif(not HAVE["bias_kernel"], reason="no committed bias_kernel")
def test_the_bias_numbers_are_the_results(items):
    rne, beta, _ = verdicts._bias_cells(None)
    assert f"{rne['pv']:+.3f} ± {rne['pv_ci']:.3f} ULP" in items[0].text and f"({beta['pv']:+.3f})" in items[0].text
    if HAVE["fa_deviation"]:
        a, b, n = verdicts._attention_bias(None)
        assert f"{a:+.3f} → {b:+.3f} ULP, {n:,} keys" in items[0].text
        assert ("adds its own" in items[0].text) == (abs(b) > abs(a))


@pytest.mark.skipif(not HAVE["gpt2_regime"], reason="no committed gpt2_regime")
def test_the_gpt2_census_numbers_are_the_results(items):
    from lib.studies.census import reading as census
    n = census.gpt2_numbers(results.load("gpt2_regime", "full"))
    f = items[1]
    assert f"{n['authors_max_conj']:.1%}" in f.text and f"{n['pairs_ratio']:.0f}× fewer" in f.text
    assert f"seed {n['seed']}" in f.text and f"{n['steps']:,} steps" in f.text


@pytest.mark.skipif(not HAVE["delta_capture"], reason="no committed delta_capture")
def test_the_proxy_numbers_are_the_results(items):
    from lib.studies.delta import reading as delta
    n4 = delta.numbers_ch4(results.load("delta_capture", "full"))
    assert f"{n4['os_ulp_med']:+.3f} ULP" in items[2].text and f"seeds {n4['seeds']}" in items[2].text
    for group in ("healthy_headline", "width_768"):
        g = results.load_group(group, "full")
        if g:
            failed, n, h = verdicts._healthy_paper(g)
            assert re.search(rf"\b{failed} of {n}( seeds)? at width {g[0].meta['config']['n_embd']} \({h:,} steps\)",
                             items[2].text), items[2].text


@pytest.mark.skipif(not (HAVE["kernel_fidelity"] and HAVE["gradient_checks"]), reason="no committed GPT-2 checks")
def test_the_gpt2_kernel_numbers_are_chapter_twos(items):
    from lib.studies.gpt2 import reading as g2r
    kf = results.load("kernel_fidelity", "full")
    n = g2r.numbers(kf)
    f = items[3]
    assert f"over {n['sdpa_eager_steps']} steps" in f.text and f"{n['spread_logit_factor']}-fold" in f.text
    assert "weak test" in f.text      # the layer-2 growth is the GPT-2 comparison's finding now
    both = n["alike_eager"] == n["alike_compiled"] == "alike"
    assert ("alike with PyTorch's flash SDPA, eager and compiled" in f.text) == both
    assert {r.name for r in f.results} >= {"kernel_fidelity", "gradient_checks"}
    if HAVE["train_step_gpt2"]:
        ts = results.load("train_step_gpt2", "full")
        rec = next(r for g in ts.data["groups"] for r in g if r["label"] == "fa2_compiled")
        assert f"{rec['ratio_to_baseline']:.2f}× PyTorch's time" in f.text


def test_gpt2_scale_is_said_untested_until_its_result_exists(items, tmp_path):
    cfg = registry.resolve(found.GPT2_ARMS, "full")
    f = items[-1] if not results.exists(found.GPT2_ARMS, "full") else found.gpt2_untested(tmp_path)
    assert f.head.startswith("Not yet tested at GPT-2 scale")
    assert "has not run" in f.text and f"{cfg['steps']:,} steps" in f.text
    assert ("no β-fix arm" in f.text) == (not any("+fix" in a["attn"] for a in cfg["arms"]))
    assert "FP32 attention" in f.text


def test_a_stale_result_is_said_stale(monkeypatch, items):
    real = found._res

    def stale(name, root):
        r = real(name, root)
        return None if r is None else dataclasses.replace(r, stale=["code changed: planted for the test"])
    monkeypatch.setattr(found, "_res", stale)
    now = found.findings()
    md = found.markdown(now)
    for f in now:
        assert f.stale == any(r.name in ("bias_kernel", "fa_deviation", "gpt2_regime", "delta_capture",
                                         "kernel_fidelity", "gradient_checks", "train_step_gpt2", "gpt2_arms")
                                  for r in f.results)
    assert md.count(found.STALE) == sum(f.stale for f in now)
    assert found.STALE not in found.markdown(items) or any(f.stale for f in items)


def test_missing_results_read_not_measured(tmp_path):
    (tmp_path / "full").mkdir()
    items = found.findings(root=tmp_path)
    assert len(items) == len(found.FINDINGS)
    for f in items[:-1]:
        assert "not measured yet" in f.text and not f.results, f.text
    assert "has not run" in items[-1].text


def test_gpt2_chain_reads_the_committed_comparison():
    """With the GPT-2 comparison committed, the box reads it (the numbers of chapter 2c's reading); without it, it says
    what is not yet tested."""
    from lib.book import results
    from lib.studies.gpt2 import reading as g2r
    if not results.exists(found.GPT2_ARMS, "full"):
        assert found.gpt2_chain().head == found.gpt2_untested().head
        return
    f = found.gpt2_chain()
    chain = [results.load(n, "full") for n in g2r.CHAIN_RESULTS if results.exists(n, "full")]
    M = g2r.merge_seeds(chain)
    if g2r.growth_verdict(M.arrays, M.data["runs"], g2r.cfg_of(M)["rules"]):     # two or more seeds
        oc = g2r.outcomes(M)
        fp32_max = max(float(g2r.layer_series(M.arrays, f"fp32:s{o[0]}")["logit"].max()) for o in oc["fp32"])
        assert f"≤ {fp32_max:,.0f}" in f.text, f.text
        booms = [o for o in oc["paper"] if o[2] is not None and o[3] is None]
        assert all(f"{o[2]:,}" in f.text for o in booms) and f"exploded in {len(booms)} seed" in f.head
        # every seed exploded: the head counts them, the text gives only the steps (the box's first screen is short)
        steps_only = "first fails at steps" in f.text
        assert steps_only == (1 < len(booms) == len(oc["paper"])), f.text
        fa2 = [o for a in ("sdpa", "ours_fa2") for o in oc.get(a, [])]
        if fa2 and all(o[2] is None or o[3] is not None for o in fa2):     # none of them exploded: said in short
            spiked = sorted({o[0] for o in fa2 if o[2] is not None})
            assert "our FA2 placement never exploded" in f.text
            if spiked:
                assert f"seed{'s' if len(spiked) > 1 else ''} {found._list(spiked)}: spikes" in f.text
    else:
        n = g2r.arms_numbers(results.load(found.GPT2_ARMS, "full"))
        assert n["fp32_logit_common"] in f.text and n["sdpa_logit_common"] in f.text
    assert f.chapters == ("chapters/02c-the-chain-in-gpt2",)


def test_gpt2_chain_with_one_seed_reads_its_arms(tmp_path):
    """One committed seed: the box gives the largest logits at the common step (no growth verdict without two)."""
    import shutil
    from lib.book import results
    from lib.studies.gpt2 import reading as g2r
    src = results.RESULTS_DIR / "full"
    if not (src / "gpt2_arms.json").exists():
        pytest.skip("needs the committed seed-0 comparison")
    (tmp_path / "full").mkdir(parents=True)
    for ext in ("json", "npz"):
        shutil.copy(src / f"gpt2_arms.{ext}", tmp_path / "full" / f"gpt2_arms.{ext}")
    f = found.gpt2_chain(tmp_path)
    n = g2r.arms_numbers(results.load(found.GPT2_ARMS, "full"))
    assert n["fp32_logit_common"] in f.text and n["sdpa_logit_common"] in f.text, f.text


def test_gpt2_chain_without_a_result_says_untested(tmp_path):
    assert found.gpt2_chain(tmp_path).head == found.gpt2_untested(tmp_path).head


def test_fates_say_what_each_seed_did():
    """(seed, steps, failure step, steps to recover): a failure without recovery is an explosion."""
    assert found._fates([(0, 9000, 8632, 80), (1, 10000, None, None)]) == ("spikes that recovered in seed 0; "
                                                                           "no failure in seed 1")
    assert found._fates([(0, 9000, 500, None), (1, 100, 50, None)]) == "exploded in seeds 0 and 1"


def test_gpt2_chain_names_the_changes_that_prevented_the_failure(tmp_path):
    """The box's GPT-2 finding ends with the changes to the paper placement that prevented its failure by the
    registered rule, and the seeds; without the channel and remedy results it does not, and it rests on those holding
    the arms it names."""
    from lib.book import results
    from lib.studies.gpt2 import reading as g2r, remedies as g2m
    if not (results.exists("gpt2_delta_s1", "full") and results.exists("gpt2_arms_s1", "full")):
        pytest.skip("the GPT-2 remedy results are not committed")
    f = found.gpt2_chain()
    chain = g2r.merge_seeds([results.load(n, "full") for n in g2r.CHAIN_RESULTS if results.exists(n, "full")])
    rem = g2m.in_place([results.load(n, "full") for g in g2m.REMEDY_GROUPS for n in registry.GROUPS[g]
                        if results.exists(n, "full")])
    rows = g2m.arm_rows(rem, chain)
    v = g2m.verdicts(rows)
    ok = [a for a in found.REMEDY_WORDS if v.get(a)]
    seeds = sorted({r["seed"] for r in rows if r["arm"] in ok and r["base_fail"] is not None})
    booms = [o[0] for o in g2r.outcomes(chain)["paper"] if o[2] is not None and o[3] is None]
    assert ok and all(found.REMEDY_WORDS[a] in f.text for a in ok) and len(seeds) >= 2
    assert (f", where {found.REMEDY_WORDS[ok[0]]}" in f.text if sorted(booms) == seeds
            else f"prevents it in seeds {found._list(seeds)}" in f.text)
    # it rests on the results holding the arms it names, and on no other channel or remedy result
    named = {r["entry"] for r in rows if r["arm"] in found.REMEDY_WORDS}
    assert named and {r.name for r in rem} & {r.name for r in f.results} == named
    import shutil
    (tmp_path / "full").mkdir()
    for n in g2r.CHAIN_RESULTS:                      # the comparison alone: no sentence on remedies
        for ext in ("json", "npz"):
            if (results.RESULTS_DIR / "full" / f"{n}.{ext}").exists():
                shutil.copy(results.RESULTS_DIR / "full" / f"{n}.{ext}", tmp_path / "full" / f"{n}.{ext}")
    assert "prevented" not in found.gpt2_chain(tmp_path).text


def test_compiled_in_training_reads_the_authors_compiled_runs(tmp_path):
    """The placement box's GPT-2 sentence: each committed run of the authors' compiled code, with its failure step
    or steps run and our eager-placement arm's failure at the same seed; empty without those results."""
    assert found.compiled_in_training(root=tmp_path) == ""
    if not any(results.exists(n, "full") for n in registry.GROUPS["gpt2_authors_compiled"]):
        return
    from lib.studies.gpt2 import reading as g2r
    text = found.compiled_in_training()
    M = g2r.merge_seeds([results.load(n, "full") for n in g2r.CHAIN_RESULTS if results.exists(n, "full")])
    for res in (results.load(n, "full") for n in registry.GROUPS["gpt2_authors_compiled"]
                if results.exists(n, "full")):
        for run in (r for r in res.data["runs"] if r["label"].startswith("authors_compiled:s")):
            seed = int(run["label"].split(":s")[1])
            assert f"seed {seed}: " in text and f"{run['steps']:,}" in text, text
            paper = [o for o in g2r.outcomes(M)["paper"] if o[0] == seed]
            if paper and paper[0][2] is not None:
                assert f"failed at step {paper[0][2]:,}" in text, text
