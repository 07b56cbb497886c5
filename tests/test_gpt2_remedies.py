"""Reading the GPT-2 channel and remedy arms against their baselines (`lib.studies.gpt2.remedies`) on planted runs:
the registered failure rule, the prevents rule per arm, the claims' status over seeds, the growth kept within FP32
attention's spread, and the table."""
from types import SimpleNamespace

import numpy as np
import pytest

from lib.studies.gpt2 import figures, remedies

STEPS, L, H = 400, 3, 2
CENSUS = np.arange(0, STEPS + 1, 100)
RULES = dict(failure_window=10, failure_rise=0.3, growth_steps=[100, 200, 300, 400], reference="fp32")


def _run(label: str, fail_at=None, logit_scale=1.0, wq_scale=1.0, seed_jitter=1.0):
    """A planted run: a falling loss that jumps by 2 nats at `fail_at` and stays up; census largest logits of
    10·(1 + step/100) in every layer, layer 2's times `logit_scale`."""
    loss = np.linspace(4.0, 2.0, STEPS)
    if fail_at is not None:
        loss[fail_at:] += 2.0
    logit = np.tile((10.0 * (1 + CENSUS / 100))[:, None, None], (1, L, H)) * seed_jitter
    logit[:, 1, :] *= logit_scale
    wq = np.ones((len(CENSUS), L, H)) * wq_scale
    arrays = {f"{label}__loss": loss, f"{label}__census__step": CENSUS, f"{label}__census__fa2/max_logit": logit,
              f"{label}__census__wq_sigma": wq}
    return dict(label=label, steps=STEPS), arrays


def _res(name, runs, arms, rules, seeds):
    data, arrays = {"runs": []}, {}
    for r, a in runs:
        data["runs"].append(r)
        arrays.update(a)
    cfg = dict(arms=[{"label": a, "attn": spec} for a, spec in arms.items()], rules=rules, seeds=seeds)
    return SimpleNamespace(name=name, data=data, arrays=arrays, cfg=cfg, meta={"device": "planted"})


def _chain(paper_fail=(150, 250)):
    """FP32 attention (two seeds, 10 % apart: the spread), and the paper placement failing at `paper_fail` (per
    seed) with layer 2's logits 100× FP32's."""
    runs = []
    for s, f in enumerate(paper_fail):
        runs.append(_run(f"fp32:s{s}", seed_jitter=1.0 + 0.1 * s))
        runs.append(_run(f"paper:s{s}", fail_at=f, logit_scale=100.0))
        runs.append(_run(f"ours_fa2:s{s}", logit_scale=100.0))
    arms = {"fp32": "fp32_flash", "paper": "paper/round_block=512", "ours_fa2": "fa2"}
    return _res("chain", runs, arms, RULES, [0, 1])


def _remedy(name, arm, spec, base, seeds, fail_at=None, logit_scale=1.0):
    runs = [_run(f"{arm}:s{s}", fail_at=fail_at, logit_scale=logit_scale) for s in seeds]
    return _res(name, runs, {arm: spec}, dict(RULES, baseline={arm: base}), seeds)


def test_a_remedy_that_trains_past_the_failure_prevents_it_and_keeps_the_growth_within_the_spread():
    chain = _chain()
    rem = _remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [1])
    rows = remedies.arm_rows([rem], chain)
    (r,) = rows
    assert (r["seed"], r["fail"], r["base"]) == (1, None, "paper")
    assert 250 <= r["base_fail"] < 250 + RULES["failure_window"]     # the rule fires within one window of the jump
    assert r["step"] == 400 and r["ratio"] == pytest.approx(1 / 1.1) and r["base_ratio"] == pytest.approx(100 / 1.1)
    assert r["spread"] == pytest.approx(1.1)
    assert r["grown"] == (4, 4)                 # layer 2 at each of the four growth steps, all kept within
    assert remedies.verdicts(rows) == {"paper_o32": True}
    v = remedies.claim_verdicts(rows)["fp32_o_stabilises"]
    assert v["status"] == "partly"              # one seed decides: not yet a replication
    assert f"failed at step {r['base_fail']:,}" in v["evidence"] and "no failure in 400 steps" in v["evidence"]
    assert v["evidence"].endswith("each kept within it: O in FP32, seed 1: 4 of 4")      # the growth removed here
    part = remedies.claim_verdicts([dict(r, grown=(4, 3))])["fp32_o_stabilises"]["evidence"]
    assert part.endswith("O in FP32, seed 1: 3 of 4 (so none removes the growth by the registered rule)")
    rows2 = remedies.arm_rows([_remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [0, 1])],
                              chain)
    assert remedies.claim_verdicts(rows2)["fp32_o_stabilises"]["status"] == "reproduced"


def test_a_remedy_that_fails_where_its_baseline_fails_does_not_prevent_it():
    rem = _remedy("fix", "paper_fix_b2", "paper/round_block=512/beta=2/tie_tol=0.001+fix", "paper", [1],
                  fail_at=120, logit_scale=300.0)
    rows = remedies.arm_rows([rem], _chain())
    assert 120 <= rows[0]["fail"] < 120 + RULES["failure_window"]
    assert remedies.verdicts(rows) == {"paper_fix_b2": False}
    v = remedies.claim_verdicts(rows)["fix_stabilises"]
    assert v["status"] == "not reproduced"
    assert ("; not run yet: " + ", ".join(remedies.SHORT[a] for a in ("paper_fix_b2_exact", "paper_fix_b7_exact"))
            + ". Of the") in v["evidence"]
    assert v["evidence"].endswith("guarded fix (β = 2), seed 1: 0 of 4 (so none removes the growth by the registered rule)")
    assert rows[0]["grown"] == (4, 0)
    table = remedies.table(rows)
    assert table.count("\n") == 2 and "fix β = 2" in table and "0 of 4" in table


def test_an_arm_whose_baseline_never_fails_decides_nothing():
    rem = _remedy("delta", "fa2_delta_dp_p_norm", "fa2/delta_source=dp_p_norm", "ours_fa2", [1])
    rows = remedies.arm_rows([rem], _chain())
    assert remedies.verdicts(rows) == {"fa2_delta_dp_p_norm": None}
    assert remedies.claim_verdicts(rows)["delta_only_channel"]["status"] == "not yet tested"
    assert rows[0]["grown"] == (4, 4)         # the FA2 baseline grows layer 2 and the exact δ keeps it within
    g = remedies.glue_numbers(rows)
    assert g["fa2_delta_dp_p_norm_prevents"] == "has not yet been shown to prevent, or not to prevent," and g["seeds"] == "1"


def test_a_seed_without_its_baseline_is_not_read_as_one():
    rem = _remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [2])
    rows = remedies.arm_rows([rem], _chain())
    assert rows[0]["base_steps"] is None and rows[0]["step"] is None and rows[0]["grown"] == (0, 0)
    assert remedies.verdicts(rows) == {"paper_o32": None}
    assert "not run" in remedies.table(rows)


def test_the_seed_view_and_its_figure():
    chain = _chain()
    rem = _remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [0, 1])
    view = remedies.seed_view(chain, [rem], 1)
    assert sorted(r["label"] for r in view.data["runs"]) == ["fp32:s1", "paper:s1", "paper_o32:s1"]
    assert all(k.split("__")[0].endswith(":s1") for k in view.arrays)
    fig = figures.remedy_figure(view, remedies.SHORT)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert remedies.SHORT["paper_o32"] in labels
    def styles(f):          # the runs' lines, not the thin dotted failure markers
        return {ln.get_linestyle() for ln in f.axes[1].get_lines() if ln.get_linewidth() > 1}
    assert styles(fig) == {"-", "--"}                 # one seed: the comparison's arms solid, O in FP32 dashed
    assert fig.axes[0].get_legend().get_title().get_text() == "seed 1" and "seed 1" not in labels
    assert styles(figures.chain_figure(chain)) == {"-", "--"}    # seeds 0 and 1 told apart
    assert figures._REMEDY_LS.keys() == remedies.SHORT.keys() == figures._REMEDY_STYLE.keys()
    with pytest.raises(ValueError):
        figures.chain_figure(chain, arm_ls={"paper_o32": "--"})      # two seeds: line style is the seed's


def test_the_advice_names_what_prevented_the_failure_and_what_has_not_run():
    chain = _chain()
    rows = remedies.arm_rows([_remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [1]),
                              _remedy("fix", "paper_fix_b2", "paper/round_block=512/beta=2/tie_tol=0.001+fix",
                                      "paper", [1], fail_at=120)], chain)
    text = remedies.advice_words(rows)
    assert "O in FP32 — prevented it (seed 1: no failure in 400 steps)" in text
    assert "guarded fix (β = 2) — did not prevent it (seed 1: failed at step" in text
    assert text.endswith("Not run yet: δ from an FP32 O, exact-rule fix (β = 2), exact-rule fix (β = 7), capped "
                         "QK-norm.")
    assert remedies.advice_words([]) == "No remedy has been trained in GPT-2 yet."


def test_growth_words_and_the_seeds_still_to_run():
    chain = _chain()
    rows = remedies.arm_rows([_remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [1])],
                             chain)
    text = remedies.growth_words(rows[0])
    r = rows[0]                                      # both ratios below 100: one decimal
    assert text.startswith(f"{r['ratio']:.1f}× FP32 attention's at step {r['step']}, against "
                           f"{r['base_ratio']:.1f}× without the change")
    assert remedies.growth_words(dict(r, base_ratio=1234.4)).split("against ")[1].startswith("1,234× without")
    assert text.endswith("it keeps 4 within it, so by the rule it removes the growth")
    assert remedies.growth_words(dict(rows[0], grown=(4, 3))).endswith("does not remove the growth")
    assert remedies.growth_words(dict(rows[0], step=None)) == "not measured"
    left = remedies.pending(rows, chain)
    (s0,) = left["paper_o32"]                         # seed 0's paper arm failed and this arm did not run there
    assert s0[0] == 0 and 150 <= s0[1] < 150 + RULES["failure_window"]
    assert len(left["paper_fix_b2"]) == 2             # an arm run nowhere: every seed where the paper arm failed
    assert remedies.pending(rows + [dict(rows[0], seed=0)], chain, ("paper_o32",)) == {"paper_o32": []}
    words = remedies.pending_words(rows, chain)
    assert words.startswith(f"O in FP32 at seed 0 (where the paper placement failed at step {s0[1]:,}); "
                            "not run in any seed yet: δ from an FP32 O, guarded fix (β = 2), ")
    assert remedies.pending_words(rows + [dict(rows[0], seed=0)], chain, ("paper_o32",)) == "none"


def test_the_seed_view_keeps_only_that_seeds_provenance():
    chain = _chain()
    chain.meta = [{"provenance": {"cfg": {"seeds": [0]}}, "device": "A"},
                  {"provenance": {"cfg": {"seeds": [1]}}, "device": "B"}]
    view = remedies.seed_view(chain, [], 1)
    assert [m["device"] for m in view.meta] == ["B"]


def test_brief_words_merge_alike_seeds_and_name_the_unremedied_failures():
    chain = _chain()
    o32 = _remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [0, 1])
    fix = _remedy("fix", "paper_fix_b2", "paper/round_block=512/beta=2/tie_tol=0.001+fix", "paper", [1], fail_at=120)
    rows = remedies.arm_rows([o32, fix], chain)
    f0, f1 = (next(r["base_fail"] for r in rows if r["seed"] == s) for s in (0, 1))
    text = remedies.brief_words(rows, ("paper_o32", "paper_fix_b7_exact"))
    assert text == (f"O in FP32, seeds 0 and 1: no failure in 400 steps (unremedied: failed at step {f0:,} in seed 0 "
                    f"and {f1:,} in seed 1)")
    both = remedies.brief_words(rows, ("paper_o32", "paper_fix_b2"))
    assert "; guarded fix (β = 2), seed 1: failed at step " in both
    mixed = remedies.brief_words([dict(rows[0], fail=300, back=None)] + rows[1:], ("paper_o32",))
    assert mixed.startswith("O in FP32: seed 0: failed at step 300, never back; seed 1: no failure in 400 steps")
    assert remedies.brief_words(rows, ("paper_delta_fp32_o",)) == ""


def test_growth_glue_reads_every_seed_measured():
    chain = _chain()
    one = remedies.arm_rows([_remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [1])], chain)
    assert remedies.glue_numbers(one)["paper_o32_at"] == remedies.growth_words(one[0])
    two = remedies.arm_rows([_remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [0, 1])],
                            chain)
    at = remedies.glue_numbers(two)["paper_o32_at"]
    assert at == "; ".join(f"(seed {r['seed']}) {remedies.growth_words(r)}" for r in two) and at.count("(seed ") == 2


def test_the_cost_of_each_change_that_prevented_the_failure():
    """The training-step benchmark's group times each remedy beside its unremedied spec: the ratio of the two medians,
    the cheapest named; a change that did not prevent the failure is not costed; nothing timed says so."""
    chain = _chain()
    o32_spec, fix_spec = "paper/round_block=512/round_o=false", "paper/round_block=512/beta=2/tie_tol=0.001+fix"
    rows = remedies.arm_rows([_remedy("o32", "paper_o32", o32_spec, "paper", [0, 1]),
                              _remedy("d", "paper_delta_fp32_o", "paper/round_block=512/delta_source=fp32_o", "paper",
                                      [0, 1]),
                              _remedy("fix", "paper_fix_b2", fix_spec, "paper", [1], fail_at=120)], chain)
    assert {r["base_spec"] for r in rows} == {"paper/round_block=512"}
    rec = lambda attn, ms: dict(attn=attn, compile=True, ms_median=ms, ratio_to_baseline=ms / 70.0)  # noqa: E731
    bench = dict(device="planted GPU", groups=[[rec("sdpa", 70.0), rec("paper/round_block=512", 90.0),
                                                rec("paper/round_block=512/delta_source=fp32_o", 108.0),
                                                rec(o32_spec, 88.2), rec(fix_spec, 91.0)]])
    cost = remedies.step_costs(rows, bench)
    assert cost["paper_o32"]["vs_base"] == pytest.approx(0.98) and cost["paper_o32"]["vs_sdpa"] == pytest.approx(1.26)
    assert cost["paper_delta_fp32_o"]["vs_base"] == pytest.approx(1.2)
    text = remedies.cost_words(rows, bench)
    assert text.startswith("A compiled GPT-2 124M training step (one planted GPU) with each change that prevented "
                           "the failure takes, against the unremedied paper placement's: O in FP32 0.98× (1.26× ")
    assert text.endswith("Of those that prevented it in two seeds or more, the cheapest: O in FP32.")
    assert "guarded fix" not in text and "rounds" not in text         # no per-round times: no range
    assert set(remedies.established(rows)) == {"paper_o32", "paper_delta_fp32_o"}
    # with per-round times, each ratio's range; a change whose range overlaps the cheapest's is named level with it
    timed = dict(bench, groups=[[dict(x, ms=[x["ms_median"] * f for f in (0.99, 1.0, 1.01)]) for x in g]
                                for g in bench["groups"]])
    text = remedies.cost_words(rows, timed)
    assert "O in FP32 0.98× (rounds 0.96–1.00×; 1.26× SDPA's compiled step)" in text
    assert text.endswith("the cheapest: O in FP32.")           # δ from an FP32 O (1.17–1.22×) is not level
    near = dict(timed, groups=[[dict(x, ms=[89.0, 90.0, 91.0]) if x["attn"].endswith("fp32_o") else x
                                for x in timed["groups"][0]]])
    assert remedies.cost_words(rows, near).endswith(
        "the cheapest: O in FP32, level within the rounds' range with δ from an FP32 O.")
    assert [remedies.series(w) for w in ([], ["a"], ["a", "b"], ["a", "b", "c"])] == ["", "a", "a and b",
                                                                                       "a, b and c"]
    uncompiled = dict(bench, groups=[[dict(x, compile=False) for x in bench["groups"][0]]])
    assert remedies.step_costs(rows, uncompiled) == {}
    assert remedies.cost_words(rows, None) == "What O in FP32 and δ from an FP32 O cost in a training step is not measured yet."
    assert remedies.cost_words([r for r in rows if r["arm"] == "paper_fix_b2"], bench).startswith(
        "No change has prevented")
    # a bound on the logits keeps the unremedied attention spec: a benchmark that times specs on the unchanged model
    # says nothing of its cost
    (qk,) = remedies.arm_rows(_qk(), chain)
    assert qk["spec"] == qk["base_spec"] and "paper_qk" not in remedies.step_costs(rows + [qk], bench)
    assert remedies.cost_words(rows + [qk], bench).endswith(" Not timed yet: capped QK-norm.")
    # one that times the same spec with the same model change beside the unchanged one (bench_train_step_models)
    plain = {k: v for k, v in QK_MODEL.items() if k not in ("qk_norm", "qk_gain")}
    change = {k: QK_MODEL[k] for k in ("qk_norm", "qk_gain")}
    arm = lambda ms, **kw: dict(rec("paper/round_block=512", ms), model_base=plain, **kw)  # noqa: E731
    assert remedies.timed_change(arm(1.0, model=change)) == qk["model"] and remedies.timed_change(arm(1.0)) == ""
    qk_bench = dict(device="planted GPU", groups=[[dict(rec("sdpa", 70.0), model_base=plain), arm(90.0),
                                                   arm(92.7, model=change)]])
    both = remedies.merge_benches([bench, qk_bench])
    got = remedies.step_costs(rows + [qk], both)
    assert got["paper_qk"]["vs_base"] == pytest.approx(1.03) and got["paper_o32"] == cost["paper_o32"]
    assert "capped QK-norm 1.03× (1.32× SDPA's compiled step)" in remedies.cost_words(rows + [qk], both)
    # a timed arm of another change, or the bounded arm alone without its unchanged spec, costs nothing
    other = dict(qk_bench, groups=[[x | ({"model": dict(change, qk_gain=1.0)} if x.get("model") else {})
                                    for x in qk_bench["groups"][0]]])
    assert "paper_qk" not in remedies.step_costs([qk], other)
    assert "paper_qk" not in remedies.step_costs([qk], dict(qk_bench, groups=[[qk_bench["groups"][0][2]]]))


def test_fix_words_say_what_each_form_of_the_fix_did_and_on_how_many_seeds():
    """A fix that prevents the failure in one seed says it rests on one seed where the book asks for two, and the
    growth rule's reading; one that fails earlier than its baseline says so; forms not run are named."""
    chain = _chain()
    b7 = _remedy("b7", "paper_fix_b7_exact", "paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix",
                 "paper", [1], logit_scale=100.0)
    b2 = _remedy("b2", "paper_fix_b2", "paper/round_block=512/beta=2/tie_tol=0.001+fix", "paper", [1], fail_at=120)
    rows = remedies.arm_rows([b7, b2], chain)
    f1 = rows[0]["base_fail"]
    text = remedies.fix_words(rows)
    assert text.startswith(f"In GPT-2 (chapter 2c) the exact-rule fix (β = 7) prevented the paper placement's failure "
                           f"(seed 1: no failure in 400 steps; the unremedied arm failed at step {f1:,}), in one seed "
                           "where the book asks for two; it kept 0 of the 4 grown (step, layer) pairs within FP32 "
                           "attention's spread, so it does not remove the growth. The guarded fix (β = 2) did not "
                           "prevent the paper placement's failure (seed 1: failed at step ")
    assert text.endswith("Not run yet: exact-rule fix (β = 2).")
    two = remedies.arm_rows([_remedy("b7", "paper_fix_b7_exact", "paper/round_block=512/beta=7+fix", "paper",
                                     [0, 1])], chain)
    text2 = remedies.fix_words(two, ("paper_fix_b7_exact",))
    assert "one seed where" not in text2 and " in seed 0 and " in text2 and "removes" not in text2
    assert "it kept 4 of the 4 in seed 0, 4 of the 4 in seed 1 grown" in text2 and "does not remove" not in text2
    assert remedies.fix_words([]) == "In GPT-2 no form of the fix has been trained yet."
    # an arm its wall budget stopped before the registered horizon says so wherever its outcome is told
    cut = _remedy("b2x", "paper_fix_b2_exact", "paper/round_block=512/beta=2/tie_tol=0.001/max_shift=none+fix",
                  "paper", [1])
    cut.cfg["steps"] = 10 * STEPS
    cut.data["runs"][0]["truncated_at"] = STEPS
    (r,) = remedies.arm_rows([cut], chain)
    assert (r["horizon"], r["cut"]) == (10 * STEPS, STEPS)
    said = f"seed 1: no failure in {STEPS} steps, where its wall budget stopped it short of the {10 * STEPS:,}-step horizon"
    assert said in remedies.fix_words([r]) and said in remedies.advice_words([r], ("paper_fix_b2_exact",))
    assert remedies.brief_words([r], ("paper_fix_b2_exact",)).startswith(
        f"exact-rule fix (β = 2), seed 1: no failure in {STEPS} steps, stopped by its wall budget (unremedied")
    # an arm on another GPU model than its unremedied arm says so; the same GPU, or an unknown one, says nothing
    assert remedies.device_words([r]) == ""
    other = dict(r, device="GPU A", base_device="GPU B")
    assert remedies.device_words([other, dict(r, device="GPU B", base_device="GPU B")]).startswith(
        "Not every arm trained on the GPU model of its unremedied arm: exact-rule fix (β = 2), seed 1, on one GPU A "
        "(unremedied: one GPU B).")
    whole = remedies.arm_rows([b7], chain)[0]
    assert whole["cut"] is None and "wall budget" not in remedies.fix_words([whole])
    o32_spec = "paper/round_block=512/round_o=false"
    both = remedies.arm_rows([_remedy("o32", "paper_o32", o32_spec, "paper", [1]), b7], chain)
    rec = lambda attn, ms: dict(attn=attn, compile=True, ms_median=ms, ratio_to_baseline=ms / 70.0)  # noqa: E731
    bench = dict(device="planted GPU", groups=[[rec("sdpa", 70.0), rec("paper/round_block=512", 90.0),
                                                rec(o32_spec, 90.0)]])
    assert remedies.cost_words(both, bench).endswith(
        "None has prevented it in two seeds yet; the cheapest of those timed: O in FP32. Not timed yet: "
        "exact-rule fix (β = 7).")


def test_merged_benchmarks_cost_each_arm_within_its_own_group_and_name_their_gpus():
    chain = _chain()
    o32_spec, b7_spec = "paper/round_block=512/round_o=false", "paper/round_block=512/beta=7+fix"
    rows = remedies.arm_rows([_remedy("o32", "paper_o32", o32_spec, "paper", [1]),
                              _remedy("b7", "paper_fix_b7_exact", b7_spec, "paper", [1])], chain)
    rec = lambda attn, ms: dict(attn=attn, compile=True, ms_median=ms, ratio_to_baseline=ms / 70.0)  # noqa: E731
    one = dict(device="GPU A", groups=[[rec("sdpa", 70.0), rec("paper/round_block=512", 90.0), rec(o32_spec, 90.0)]])
    two = dict(device="GPU A", groups=[[rec("sdpa", 70.0), rec("paper/round_block=512", 80.0), rec(b7_spec, 84.0)]])
    both = remedies.merge_benches([one, two])
    cost = remedies.step_costs(rows, both)
    assert cost["paper_fix_b7_exact"]["vs_base"] == pytest.approx(1.05)     # its own group's baseline, not 90 ms
    assert cost["paper_o32"]["vs_base"] == pytest.approx(1.0)
    assert "(one GPU A)" in remedies.cost_words(rows, both)
    mixed = remedies.merge_benches([one, dict(two, device="GPU B")])
    assert mixed["device"] is None and "(one GPU per benchmark: GPU A, GPU B)" in remedies.cost_words(rows, mixed)
    assert remedies.merge_benches([]) is None


def _probe(res, label, per_pair, along, pairs=10.0, steps=(0, 100, 200, 300)):
    """Plant a chain probe on run `label` of `res`: every event `pairs` conjunction pairs per (layer, head), each
    erring `per_pair` ULP along sign(V), a share `along` of them along it."""
    E = len(steps)
    n = np.full((E, L, H), pairs)
    res.arrays.update({f"{label}__probe__step": np.asarray(steps), f"{label}__probe__n_conj": n,
                       f"{label}__probe__err_v_sum": n * per_pair, f"{label}__probe__err_v_agree": n * along})


def test_o_error_on_the_conjunction_pairs_and_what_zeroed_rows_give():
    """`conj_error` pools the chain probe's O error along sign(V) over events before a step; each arm is read beside
    its unchanged arm over the steps before that arm failed; the exact rule's errors in the range of a zeroed output
    (−2⁸ to −2⁷ ULP) and against sign(V) read as rows set to zero, the guarded fix's as the unremedied sign."""
    assert remedies.zeroed_range() == (128, 256)
    chain = _chain()
    _probe(chain, "paper:s1", 6.0, 0.5)
    chain.arrays["paper:s1__probe__err_v_sum"][-1] = 1e6         # after the failure at ≈ 250: left out
    exact = _remedy("b7", "paper_fix_b7_exact", "paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix",
                    "paper", [1])
    _probe(exact, "paper_fix_b7_exact:s1", -180.0, 0.01)
    guarded = _remedy("b2", "paper_fix_b2", "paper/round_block=512/beta=2/tie_tol=0.001+fix", "paper", [1])
    _probe(guarded, "paper_fix_b2:s1", 5.0, 0.47)
    rows = remedies.arm_rows([exact, guarded], chain)
    r = next(r for r in rows if r["arm"] == "paper_fix_b7_exact")
    f = r["base_fail"]
    assert 250 <= f < 260 and r["base_o_err"] == dict(events=3, n=3 * L * H * 10, mean=pytest.approx(6.0),
                                                       along=pytest.approx(0.5))
    assert r["o_err"]["mean"] == pytest.approx(-180.0) and r["o_err"]["events"] == 3
    assert remedies.conj_error(chain.arrays, "paper:s1")["mean"] > 1e3          # all events: the planted outlier
    assert remedies.conj_error(chain.arrays, "fp32:s1") is None                 # no probe
    words = remedies.o_error_words(rows)
    assert words.startswith(f"exact-rule fix (β = 7), seed 1: −180 ULP, 1.0 % of 180 pairs along sign(V) — "
                            f"unremedied before step {f:,}: +6.0 ULP, 50 % of 180 pairs; guarded fix (β = 2), seed 1")
    said = remedies.zeroed_words(rows)
    assert remedies.claim_verdicts(rows)["fix_stabilises"]["evidence"].endswith(". " + said)
    assert said.startswith("By a reading made after the runs, every exact-rule arm's error is in the range of a zeroed output (between −256 and −128 ULP)")
    assert said.endswith("leaves the error along sign(V) as the unremedied arm had it.")
    _probe(exact, "paper_fix_b7_exact:s1", -60.0, 0.2)
    rows = remedies.arm_rows([exact, guarded], chain)
    assert remedies.zeroed_words(rows).startswith("The exact rule's errors are not all in the range")
    assert remedies.zeroed_words([r for r in rows if r["arm"] == "paper_fix_b2"]) == ""
    assert remedies.zeroed(rows) is False and remedies.zeroed([]) is None


def test_fix_choice_words_set_the_exact_rule_against_the_guard():
    """The exact rule prevented the planted failure by zeroing rows (its error in the zeroed range), the guarded fix
    failed before its baseline: both said, each with its seed; without either form, nothing."""
    chain = _chain()
    exact = _remedy("b7", "paper_fix_b7_exact", "paper/round_block=512/beta=7/tie_tol=0.001/max_shift=none+fix",
                    "paper", [1])
    _probe(exact, "paper_fix_b7_exact:s1", -180.0, 0.01)
    guarded = _remedy("b2", "paper_fix_b2", "paper/round_block=512/beta=2/tie_tol=0.001+fix", "paper", [1],
                      fail_at=100)
    rows = remedies.arm_rows([exact, guarded], chain)
    assert remedies.fix_choice_words(rows) == (
        "In GPT-2 the exact-rule fix (β = 7) prevented the paper placement's failure (seed 1), by zeroing the rows "
        "whose tied maximum underflows rather than by correcting their rounding; the guarded fix (β = 2), whose "
        "capped shift keeps those rows, did not prevent it (seed 1).")
    assert remedies.fix_choice_words(remedies.arm_rows([guarded], chain)) == (
        "In GPT-2 the guarded fix (β = 2) did not prevent the paper placement's failure (seed 1).")
    assert remedies.fix_choice_words([]) == ""


def test_margins_past_the_baseline_failure_against_the_run_to_run_spread():
    """The paper arm of seed 1 fails near step 250 and the remedy trains to 400 (a margin of ~150 steps). A rerun that
    moved a failure step by 100 steps (only one of the two runs failed: a bound) leaves the margin larger; one that
    moved it by 200 makes the margin as much as the spread; without a rerun nothing is said."""
    chain = _chain()
    rows = remedies.arm_rows([_remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [1])],
                             chain)
    margin = 400 - rows[0]["base_fail"]
    assert remedies.margin_words(rows, chain) == ""                       # no rerun: no spread measured
    chain.data["replaced"] = [dict(label="paper:s0", steps=400, set_aside=300, failed_at=200,
                                   set_aside_failed_at=None),
                              dict(label="fp32:s0", steps=400, set_aside=300, failed_at=None,     # neither failed:
                                   set_aside_failed_at=None)]                                      # not counted
    assert remedies.rerun_spread(chain) == (100, True)
    words = remedies.margin_words(rows, chain)
    assert words.startswith(f"The arms that did not fail trained {margin:,}–{margin:,} steps past")
    assert "moved by at least 100 steps (above), less than every margin — but from 1 pair of runs, and a lower bound." in words
    chain.data["replaced"] = [dict(label="paper:s0", steps=400, set_aside=400, failed_at=100,
                                   set_aside_failed_at=300)]
    assert remedies.rerun_spread(chain) == (200, False)
    words = remedies.margin_words(rows, chain)
    assert "moved by 200 steps (above), as much as the margin of paper placement, O in FP32 (seed 1)" in words, words
    assert "(chapter 2c)" in remedies.margin_words(rows, chain, where="chapter 2c")
    # the authors' code without its fix is not a remedy: its margin is not one of the remedies' margins
    theirs = dict(rows[0], arm="authors_compiled", steps=rows[0]["base_fail"] + 50)
    assert remedies.margin_words(rows + [theirs], chain) == remedies.margin_words(rows, chain)


def test_an_earlier_failure_within_the_run_to_run_spread_is_not_called_earlier():
    chain = _chain()
    rem = _remedy("fix", "paper_fix_b2", "paper/round_block=512/beta=2/tie_tol=0.001+fix", "paper", [1],
                  fail_at=120, logit_scale=300.0)
    rows = remedies.arm_rows([rem], chain)
    d = rows[0]["base_fail"] - rows[0]["fail"]                 # ≈ 130 steps earlier than the unremedied arm
    assert remedies.earlier_words(rows, chain) == ""            # no rerun: no spread to compare with
    chain.data["replaced"] = [dict(label="paper:s0", steps=400, set_aside=400, failed_at=100,
                                   set_aside_failed_at=300)]  # a failure that moved 200 steps
    words = remedies.earlier_words(rows, chain)
    assert words == (f"Paper placement, guarded fix (β = 2) failed {d:,} steps before its unremedied arm (seed 1), "
                     "within the 200 steps that a failure step moved between two runs: whether it fails earlier "
                     "is not established."), words
    chain.data["replaced"][0]["set_aside_failed_at"] = 150     # 50 steps: the earlier failure is beyond it
    assert remedies.earlier_words(rows, chain).endswith("beyond the 50 steps that a failure step moved between two "
                                                        "runs.")
    chain.data["replaced"][0]["set_aside_failed_at"] = None   # only one run failed: 300 − 100 = 200, a bound
    chain.data["replaced"][0].update(set_aside=150, failed_at=100)
    assert "beyond the 50 steps or more" in remedies.earlier_words(rows, chain)
    assert remedies.earlier_words(rows, chain).endswith("a lower bound, so not established either.")


QK_MODEL = dict(n_layer=L, n_head=12, n_embd=768, qk_norm="capped", qk_gain=2.0)


def _with_census(run, n_conj: float, max_logit: float, tie: float, window: float | None = None):
    """A planted run with the paper placement's census: `n_conj` conjunction pairs per layer and head per event; with
    `window`, the counts too: 1,000 rows per layer and head per event, `tie` of them tied, `window` of those in the
    window."""
    r, a = run
    lab = r["label"]
    shape = (len(CENSUS), L, H)
    a.update({f"{lab}__census__authors/n_conj": np.full(shape, n_conj),
              f"{lab}__census__authors/max_logit": np.full(shape, max_logit),
              f"{lab}__census__authors/tie_rate": np.full(shape, tie)})
    if window is not None:
        a.update({f"{lab}__census__authors/n_rows": np.full(shape, 1000.0),
                  f"{lab}__census__authors/n_tied": np.full(shape, 1000.0 * tie),
                  f"{lab}__census__authors/n_window": np.full(shape, 1000.0 * tie * window)})
    return r, a


def _qk(seeds=(1,), reference_too=False):
    """The capped QK-norm entry: the paper placement with a bound on the logits, its registered reference FP32
    attention with the same bound (`fp32_qk`), in a separate entry when `reference_too`."""
    runs = [_with_census(_run(f"paper_qk:s{s}", logit_scale=1.0), 2.0, 30.0, 0.3) for s in seeds]
    rules = dict(RULES, reference="fp32_qk", baseline={"paper_qk": "paper"})
    rem = _res("qk", runs, {"paper_qk": "paper/round_block=512"}, rules, list(seeds))
    rem.cfg["model"] = QK_MODEL
    out = [rem]
    if reference_too:
        ref = _res("qk_fp32", [_run(f"fp32_qk:s{s}", seed_jitter=0.5) for s in seeds], {"fp32_qk": "fp32_flash"},
                   dict(rules, baseline={"fp32_qk": "fp32"}), list(seeds))
        ref.cfg["model"] = QK_MODEL
        out.append(ref)
    return out


def test_model_words_name_the_bound_on_the_logits():
    assert (remedies.model_words(QK_MODEL, dict(QK_MODEL, qk_norm=False))
            == "a capped QK-norm that bounds every logit at 32")
    assert remedies.model_words(dict(QK_MODEL, qk_norm="fixed", qk_gain=1.0)) == ("a QK-norm of fixed gain that "
                                                                                 "bounds every logit at 8")
    assert remedies.model_words(QK_MODEL, QK_MODEL) == "" and remedies.model_words(None, None) == ""
    assert remedies.model_words({"pos": "none"}) == "no positional embedding"


def test_a_bounded_arm_is_read_against_its_own_reference_and_its_census():
    chain = _chain()
    base = chain.arrays
    # the unbounded paper placement's census: many conjunction pairs, large logits, more tied rows
    for s in (0, 1):
        _with_census((dict(label=f"paper:s{s}"), base), 5000.0, 7e4, 0.8)
    (r,) = remedies.arm_rows(_qk(), chain)
    assert r["words"].endswith(", a capped QK-norm that bounds every logit at 32") and r["reference"] == "fp32_qk"
    assert r["fail"] is None and remedies.verdicts([r]) == {"paper_qk": True}
    # its reference has not run: the growth is not read against unbounded FP32 attention
    assert not r["ref_ran"] and r["step"] is None and r["grown"] == (0, 0)
    assert remedies.growth_words(r).startswith("not measured yet (its reference, FP32 attention with a capped")
    assert remedies.table([r]).splitlines()[-1].endswith("| — | — |")
    assert remedies.glue_numbers([r])["paper_qk_at"] == remedies.growth_words(r)
    # the census before the unbounded arm failed (step 250 + a window: events 0, 100, 200)
    events = int((CENSUS < r["base_fail"]).sum())
    assert r["census"] == dict(events=events, n_conj=int(2 * L * H * events), max_logit=30.0,
                               tie_rate=pytest.approx(0.3), tied_share=None, window_share=None)
    assert r["base_census"]["n_conj"] == 5000 * L * H * events
    words = remedies.bound_words([r])
    assert words.startswith("With a capped QK-norm that bounds every logit at 32, seed 1, over the 3 census events "
                            "before "
                            f"step {r['base_fail']:,}: {2 * L * H * events:,} conjunction pairs")
    assert "2,500× fewer" in words and "the largest logit 30 against 70,000" in words and "30 % of a head" in words
    assert remedies.bound_removes_conjunction([r]) is True
    assert remedies.bound_removes_conjunction([dict(r, census=dict(r["census"], n_conj=r["base_census"]["n_conj"]))]) \
        is False
    assert remedies.bound_removes_conjunction([dict(r, model="")]) is None and remedies.bound_words([]) == ""
    assert r["census"]["tied_share"] is None and "sticky bit" not in words        # a census without its counts
    # with the counts: the tied rows over all rows, and the share of those in the window, beside the unbounded arm
    for s in (0, 1):
        _with_census((dict(label=f"paper:s{s}"), base), 5000.0, 7e4, 0.8, window=0.074)
    rem = _qk()[0]
    _with_census((dict(label="paper_qk:s1"), rem.arrays), 2.0, 30.0, 0.3, window=1e-5)
    (c,) = remedies.arm_rows([rem], chain)
    assert c["census"]["tied_share"] == pytest.approx(0.3) and c["base_census"]["window_share"] == pytest.approx(0.074)
    assert ("up to 30 % of a head's rows against 80 % (30 % of all rows against 80 %), and of those, the rows whose "
            "other keys' P̄V sets only the sticky bit 0.0010 % against 7.4 %") in remedies.bound_words([c])
    how = remedies.bound_window_words([c])
    assert how == ("Read after the runs: over all rows (seed 1) the bound keeps 37 % of the unbounded arm's share of rows with a repeated "
                   "maximum, but makes the share of those rows in the window 7,400× smaller: the conjunction goes "
                   "mostly with the window — bounded logits leave the other keys' P̄V too large to set only the "
                   "sticky bit — rather than with the ties.")
    assert remedies.bound_window_words([r]) == "" and remedies.bound_window_words([dict(c, model="")]) == ""
    none = dict(c, census=dict(c["census"], window_share=0.0))
    assert "but leaves none of those rows in the window: the conjunction goes mostly with the window" in \
        remedies.bound_window_words([none])
    ties = dict(c, census=dict(c["census"], tied_share=0.8e-4))       # 10,000× fewer ties: not mostly the window
    assert remedies.bound_window_words([ties]).endswith("goes with the ties as much as with the window.")
    # two seeds read as one sentence: only its first word is capitalised
    two = remedies.bound_words([r, dict(r, seed=2)])
    assert two.startswith(words[:-1] + "; with a capped QK-norm") and two.count("With") == 1
    # the book's control, by the prevents rule: one seed where the unbounded arm failed reads "partly"
    v = remedies.claim_verdicts([r])["gpt2_logit_bound"]
    assert v["status"] == "partly" and v["evidence"].endswith(words)
    failed = dict(r, fail=r["base_fail"] - 50)
    assert remedies.claim_verdicts([failed])["gpt2_logit_bound"]["status"] == "not reproduced"
    # with its reference committed (another entry), the growth is read against it
    (r2,) = [x for x in remedies.arm_rows(_qk(reference_too=True), chain) if x["arm"] == "paper_qk"]
    assert r2["ref_ran"] and r2["step"] == 400 and r2["ratio"] == pytest.approx(2.0)
    assert remedies.growth_words(r2).startswith("2.0× FP32 attention's with a capped QK-norm")


def test_the_dial_says_what_each_rounding_taken_away_did_and_which_has_not_run():
    """The precision dial's sentence: per arm run, the change, its outcome, the prevents rule's verdict and its
    growth reading; the arms not run yet named; nothing run, only that."""
    chain = _chain()
    assert remedies.dial_words([]) == "Not run yet: the arm with S in FP32 and the arm with P̄ and ℓ in FP32."
    s32 = remedies.arm_rows([_remedy("s32", "paper_s32", "paper/round_block=512/round_s=false", "paper", [1])], chain)
    text = remedies.dial_words(s32)
    assert text.startswith("With S in FP32 (") and "no failure in 400 steps" in text
    assert "by the rule it prevents the failure, and layer 2's largest logit is " in text
    assert text.endswith(" Not run yet: the arm with P̄ and ℓ in FP32.")
    pl32 = remedies.arm_rows([_remedy("pl32", "paper_pl32", "paper/round_block=512/round_p=false/round_l=false",
                                      "paper", [1], fail_at=260, logit_scale=100.0)], chain)
    both = remedies.dial_words(s32 + pl32)
    assert both.startswith(text.split(" Not run yet")[0][:-1] + "; with P̄ and ℓ in FP32 (")
    assert "by the rule it does not prevent the failure" in both and "Not run yet" not in both
    # other arms in the rows are not the dial's
    o32 = remedies.arm_rows([_remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [1])], chain)
    assert remedies.dial_words(s32 + pl32 + o32) == both
    # with the registered (arm, seed) pairs, each seed still to run is named
    reg = [("paper_s32", 1), ("paper_pl32", 1), ("paper_s32", 2), ("paper_pl32", 2)]
    assert remedies.dial_words(s32, registered=reg).endswith(
        " Not run yet: S in FP32 at seed 2 and P̄ and ℓ in FP32 at seeds 1 and 2.")
    assert remedies.dial_words(s32 + pl32, registered=reg).endswith(
        " Not run yet: S in FP32 at seed 2 and P̄ and ℓ in FP32 at seed 2.")
    assert "Not run yet" not in remedies.dial_words(s32 + pl32, registered=reg[:2])


def test_base_outcome_words_say_whether_the_unchanged_arm_failed_where_the_arm_ran():
    chain = _chain()
    o32 = remedies.arm_rows([_remedy("o32", "paper_o32", "paper/round_block=512/round_o=false", "paper", [1])], chain)
    words = remedies.base_outcome_words(o32, "paper_o32")
    assert words.startswith("Where that arm ran (seed 1), ") and " failed in seed 1 (at step 2" in words
    calm = [dict(r, base_fail=None, base_back=None) for r in o32]
    assert remedies.base_outcome_words(calm, "paper_o32").endswith(" did not fail in seed 1, where that arm ran")
    back = [dict(r, base_back=75) for r in o32]
    assert remedies.base_outcome_words(back, "paper_o32").endswith(", and came back)")
    assert remedies.base_outcome_words(o32, "paper_qk") == ""


def test_the_dial_reading_fixed_before_the_runs_follows_each_pair_of_verdicts():
    """Each pair of the prevents rule's verdicts (S in FP32, P̄ and ℓ in FP32) gets the reading fixed before the
    runs; an arm not run leaves its half open and says which arm will close it; nothing decided, nothing said."""
    chain = _chain()
    assert remedies.dial_reading([]) == ""

    def arm(arm, spec, fails):
        return remedies.arm_rows([_remedy(arm, arm, spec, "paper", [1], fail_at=260 if fails else None)], chain)
    s_ok, s_bad = (arm("paper_s32", "paper/round_block=512/round_s=false", f) for f in (False, True))
    p_ok, p_bad = (arm("paper_pl32", "paper/round_block=512/round_p=false/round_l=false", f) for f in (False, True))
    said = {k: remedies.dial_reading(v) for k, v in {
        "ok,bad": s_ok + p_bad, "bad,ok": s_bad + p_ok, "ok,ok": s_ok + p_ok, "bad,bad": s_bad + p_bad,
        "bad,-": s_bad, "ok,-": s_ok, "-,bad": p_bad, "-,ok": p_ok}.items()}
    assert all(t.startswith("By that reading, in seed 1, the failure ") or t.startswith("By that reading, in seed 1, "
                                                                                      "either") for t in said.values())
    assert "needs the BF16 scores — the rounding that makes large logits tie" in said["ok,bad"]
    assert said["bad,ok"].endswith("the failure needs the rounding of P̄ and ℓ.")
    assert said["ok,ok"].endswith("needs both roundings.")
    assert "that of P̄V, the paper's — carries the failure, or each" in said["bad,bad"]
    assert said["bad,-"].startswith("By that reading, in seed 1, the failure does not need the BF16 scores; the arm "
                                    "with P̄ and ℓ in FP32 will tell")
    assert "will tell whether it needs their rounding too" in said["ok,-"]
    assert said["-,bad"].startswith("By that reading, in seed 1, the failure does not need the rounding of P̄ and ℓ")
    assert "the arm with S in FP32 will tell whether it needs the BF16 scores too" in said["-,ok"]
    assert len(set(said.values())) == 8
    # where the unchanged arm did not fail, nothing is decided, so nothing is read
    calm = [dict(r, base_fail=None, base_steps=400) for r in s_bad]
    assert remedies.dial_reading(calm) == ""


def _split(res, label, tie, ell, pairs=10.0, steps=(0, 100, 200, 300)):
    """Plant the chain probe's split of O's error on run `label`: per pair `tie` ULP from the rounding of P̄V and
    `ell` from the rest, every event and (layer, head)."""
    n = np.full((len(steps), L, H), pairs)
    for part, v in (("tie", tie), ("ell", ell)):
        res.arrays.update({f"{label}__probe__err_{part}_sum": n * v, f"{label}__probe__err_{part}_agree": n * 0.5,
                           f"{label}__probe__err_{part}_nz": n})


def test_the_dial_lean_says_how_much_of_o_s_lean_an_arm_kept_and_how_it_ended():
    """Read after the runs: the dial arm's O error along sign(V) on the conjunction beside its unchanged arm's over
    the steps before that arm failed, the share kept, the P̄V part where split, and (where the arm failed first)
    both again before the arm's own failure."""
    chain = _chain()
    _probe(chain, "paper:s1", 6.0, 0.5)
    s32 = _remedy("s32", "paper_s32", "paper/round_block=512/round_s=false", "paper", [1], fail_at=150)
    assert remedies.dial_lean_words(remedies.arm_rows([s32], chain)) == ""            # no probe on the arm
    _probe(s32, "paper_s32:s1", 0.012, 0.51)
    _split(s32, "paper_s32:s1", -0.01, 0.022)
    _split(chain, "paper:s1", 0.07, 5.93)
    rows = remedies.arm_rows([s32], chain)
    (r,) = rows
    f = r["base_fail"]
    assert 250 <= f < 260 and r["fail"] is not None and 150 <= r["fail"] < 160
    assert r["split"]["tie_mean"] == pytest.approx(-0.01) and r["base_split"]["tie_mean"] == pytest.approx(0.07)
    assert r["early"]["step"] == r["fail"] and r["early"]["o_err"]["events"] == 2
    words = remedies.dial_lean_words(rows)
    assert words == ("By a reading made after the runs (no rule for it was registered before them): with S in FP32, "
                     "seed 1, O's error along sign(V) on the conjunction pairs its chain probe measured over the 3 "
                     f"events before step {f:,} is +0.012 ULP a pair (180 pairs), against +6 ULP (180 pairs) in the "
                     "unchanged arm — 0.2 % of its lean; the rounding of P̄V, the paper's tie bias, gives −0.01 ULP "
                     f"of it (the unchanged arm's: +0.07 ULP); and it failed, at step {r['fail']:,} (over the 2 events "
                     "before that step, +0.012 ULP a pair against +6).")
    # the probe's rows are where BF16 scores tie; with the FA2 placement's census (the arm's own ties) the sentence
    # says how many conjunction pairs those gave and that the probe did not measure O on them
    for res, lab, per_event in ((s32, "paper_s32:s1", 1000.0), (chain, "paper:s1", 3.0)):
        res.arrays.update({f"{lab}__census__fa2/{k}": np.full((len(CENSUS), L, H), v) for k, v in
                           (("n_conj", per_event), ("tie_rate", 0.5))})
    (r,) = remedies.arm_rows([s32], chain)
    assert r["census_fa2"]["n_conj"] == 3 * L * H * 1000 and r["base_census_fa2"]["n_conj"] == 3 * L * H * 3
    assert remedies.dial_lean_words([r]).endswith(
        f"this arm's own ties — FP32 scores whose P̄ rounds to 1 in BF16 — gave {3 * L * H * 1000:,} conjunction "
        f"pairs in the census's FA2 rounding placement over the same steps, against the unchanged arm's "
        f"{3 * L * H * 3}, and the chain "
        "probe did not measure O on them, so whether the tie bias acts there is not measured.")
    # an arm whose probe measured on its own ties (recorded in its result) says that, and not the caveat
    s32.data["probe_placement"] = "own"
    (r,) = remedies.arm_rows([s32], chain)
    assert r["probe_placement"] == "own"
    assert remedies.dial_lean_words([r]).endswith(
        "Its chain probe measured on its own ties, FP32 scores whose P̄ rounds to 1 in BF16 (the unchanged arm's on "
        "its own, where BF16 scores tie).")
    # an arm that did not fail says so, with no second window
    calm = _remedy("s32", "paper_s32", "paper/round_block=512/round_s=false", "paper", [1])
    _probe(calm, "paper_s32:s1", 30.0, 0.6)
    (c,) = remedies.arm_rows([calm], chain)
    assert c["early"] is None and c["split"] is None
    assert remedies.dial_lean_words([c]).endswith("is +30 ULP a pair (180 pairs), against +6 ULP (180 pairs) in the "
                                                  "unchanged arm — 500 % of its lean; and it did not fail in 400 "
                                                  "steps.")


def test_a_seed_with_every_remedy_arm_still_reads():
    """Twelve arms in one seed's figure: the legend above grows, the panels keep their height, so the two-line axis
    labels do not run into each other or into the tick labels (the book's figure check)."""
    from lib.book import plotting
    chain = _chain()
    rems = [_remedy(a, a, "paper/round_block=512", "paper", [1], logit_scale=1e4) for a in remedies.SHORT]
    fig = figures.remedy_figure(remedies.seed_view(chain, rems, 1), remedies.SHORT)
    assert len(fig.axes[0].get_legend().get_texts()) == 3 + len(remedies.SHORT) - 1    # ours_fa2 not in the view
    assert plotting.check_figure(fig) == []
    assert fig.get_size_inches()[1] > 6.6


def test_the_authors_code_reads_with_its_compile_failure_and_what_is_left():
    """An arm registered compiled whose compilation failed (the result's compile_errors) trained eagerly, and every
    reading of it says so; the authors' arms read in one sentence; the registered pairs not run are named."""
    chain = _chain()
    rem = _remedy("authors", "authors_compiled", "authors/tile=512", "paper", [1])
    rem.cfg["arms"][0]["compile"] = True
    (r,) = remedies.arm_rows([rem], chain)
    assert r["compile_failed"] is False and "eagerly" not in remedies.authors_words([r])
    rem.data["compile_errors"] = {"authors_compiled:s1": "AssertionError: …"}
    (r,) = remedies.arm_rows([rem], chain)
    assert r["compile_failed"] is True
    words = remedies.authors_words([r])
    assert words.startswith("The authors' code, compiled (") and words.endswith(".")
    assert ("(registered compiled, its compilation failed at the first step, so it trained eagerly, unlike the "
            "compiled arms it is read against)") in words
    assert "unremedied, our kernel, paper placement" in words
    # their code without its fix is not a remedy: the rule's verdict reads as whether it reproduces the failure
    assert "by the same rule it" in words and "that failure" in words and "prevent" not in words
    assert "without the change" not in words and "remove the growth" not in words
    n, k = r["grown"]
    assert (f"against {remedies._ratio(r['base_ratio'])}× in {r['base_words']}; " in words
            and ("its logits do not grow as" if n and k == n else "its logits grow as") in words)
    assert remedies.glue_numbers([r])["authors_compiled_prevents"] == remedies._REPRODUCES[
        remedies.verdicts([r])["authors_compiled"]]
    fixed = remedies.authors_words([dict(r, arm="authors_fix_compiled")])
    assert "by the rule it" in fixed and "reproduce" not in fixed
    assert "trained eagerly (its compilation failed)" in remedies.brief_words([r], remedies.AUTHORS_ARMS)
    # an eager arm with a compile error recorded (none is compiled) says nothing of it
    rem.cfg["arms"][0]["compile"] = False
    assert remedies.arm_rows([rem], chain)[0]["compile_failed"] is False
    assert remedies.authors_words([]) == "" and remedies.authors_words([dict(r, arm="paper_o32")]) == ""
    reg = [("authors_compiled", 0), ("authors_compiled", 1), ("authors_fix_eager", 0), ("authors_fix_eager", 1)]
    assert remedies.unrun_words([r], reg) == ("the authors' code, compiled at seed 0; the authors' code with their "
                                              "fix, eager at seeds 0 and 1")
    assert remedies.unrun_words([r], [("authors_compiled", 1)]) == "none"


def test_the_authors_setting_is_the_registered_one():
    from lib.book import registry
    spec = registry.resolve("gpt2_authors_compiled", "full")["arms"][0]["attn"]
    got = remedies.authors_setting()
    assert "tile=" + got["tile"].replace(",", "") in spec and float(got["floor"]) > 0
    assert remedies.authors_setting("gpt2_authors_eager") == got          # one setting for every authors' arm


def test_a_rerun_past_the_wall_is_read_in_place_of_the_run_it_cut_short():
    """Two results of one arm and seed: the one its wall stopped (`truncated_at`) is set aside for the rerun that
    ran further, in whichever order they come; a result keeps its other runs; two whole runs of one label refuse."""
    cut = _remedy("cut", "authors_compiled", "authors/tile=512", "paper", [1])
    cut.data["runs"][0].update(steps=200, truncated_at=200)
    both = _remedy("both", "paper_o32", "paper/round_block=512+o32", "paper", [0])
    both.data["runs"].append(dict(label="authors_compiled:s0", steps=100, truncated_at=100))
    rerun = _remedy("rerun", "authors_compiled", "authors/tile=512", "paper", [0, 1])
    for order in ([cut, both, rerun], [rerun, both, cut]):
        read = remedies.in_place(order)
        assert [r.name for r in read] == [r.name for r in order if r is not cut]
        labels = [run["label"] for r in read for run in r.data["runs"]]
        assert sorted(labels) == ["authors_compiled:s0", "authors_compiled:s1", "paper_o32:s0"]
        assert next(r for r in read if r.name == "both").data["runs"] == [both.data["runs"][0]]
        assert both.data["runs"][1]["label"] == "authors_compiled:s0"          # the result itself is not changed
    rows = remedies.arm_rows(remedies.in_place([cut, rerun]), _chain())
    assert sorted((r["arm"], r["seed"], r["steps"]) for r in rows) == [("authors_compiled", 0, STEPS),
                                                                        ("authors_compiled", 1, STEPS)]
    again = _remedy("again", "authors_compiled", "authors/tile=512", "paper", [1])
    with pytest.raises(ValueError, match="neither was cut short"):
        remedies.in_place([rerun, again])


def test_beta_growth_words_compare_the_two_exact_rules_over_the_seeds_both_ran():
    """β = 7 keeping a larger share of the grown pairs says GPT-2 does not support the smaller β; a seed only one
    arm ran, or no growth to judge, is left out; no shared seed gives ""."""
    def row(arm, seed, grown, kept):
        return dict(arm=arm, seed=seed, grown=(grown, kept))
    rows = [row("paper_fix_b7_exact", 1, 34, 13), row("paper_fix_b7_exact", 2, 27, 8),
            row("paper_fix_b2_exact", 1, 34, 2), row("paper_fix_b2_exact", 2, 27, 1), row("paper_fix_b2_exact", 3, 9, 9)]
    assert remedies.beta_growth_words(rows) == (
        "in GPT-2 the exact-rule fix (β = 7) kept more of the layers' growth within FP32 attention's spread than the "
        "exact-rule fix (β = 2) (21 of 61 grown (step, layer) pairs against 3 of 61, seeds 1 and 2): GPT-2 does not "
        "support the proxy's preference for the smaller β (read after the runs; no rule for this comparison was fixed "
        "before them)")
    flipped = [dict(r, grown=(r["grown"][0], r["grown"][0] - r["grown"][1])) for r in rows[:4]]
    assert "kept no more" in remedies.beta_growth_words(flipped) and "does not support" not in \
        remedies.beta_growth_words(flipped)
    assert "(8 of 27 grown (step, layer) pairs against 1 of 27, seed 2)" in remedies.beta_growth_words(
        [rows[1], rows[3], rows[4]])
    assert remedies.beta_growth_words([rows[0], row("paper_fix_b2_exact", 2, 27, 1)]) == ""
