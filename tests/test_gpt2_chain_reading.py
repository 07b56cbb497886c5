"""Reading the GPT-2 chain arms (gpt2_arms) on the toy run: the numbers the chapter glues, its table, the growth
ratios against FP32 attention, the probe's sign counts and the figure."""
import re
from types import SimpleNamespace

import numpy as np
import pytest

from lib.studies.gpt2 import figures, reading


@pytest.fixture(scope="module")
def toy(gpt2_arms_ci):
    return gpt2_arms_ci


def test_numbers_cover_every_arm(toy):
    n = reading.arms_numbers(toy)
    for arm in ("fp32", "paper"):
        for k in ("steps", "failed_at", "loss_common", "logit_common", "wq_common", "conj_authors", "dd_share",
                  "push_share", "telemetry"):
            assert f"{arm}_{k}" in n, (arm, k)
    assert n["common_step"] == "3" and n["n_seeds"] == "1"
    table = reading.arms_table(toy)
    assert table.count("\n") == 3 and "FP32 attention" in table


def test_growth_ratios_are_against_the_reference(toy):
    cfg = reading.cfg_of(toy)
    g = reading.growth_ratios(toy.arrays, toy.data["runs"], cfg["rules"])
    r = g["0"]["paper"][2]
    a, b = (reading.layer_series(toy.arrays, f"{arm}:s0") for arm in ("paper", "fp32"))
    i = reading.at_step(a, 2)
    assert np.allclose(r["logit"], a["logit"][i] / b["logit"][reading.at_step(b, 2)])
    assert reading.fp32_spread(toy.arrays, toy.data["runs"], cfg["rules"]) is None     # one seed: no verdict


def test_probe_signs_count_what_the_probe_recorded(toy):
    ps = reading.probe_signs(toy.arrays, "paper:s0")
    assert ps["n_events"] == 3
    assert ps["dd_n"] == int(np.sum(toy.arrays["paper:s0__probe__dd_nz_tied"]))
    assert 0.0 <= ps["push_share"] <= 1.0 or np.isnan(ps["push_share"])


def test_chain_figure_draws_every_arm(toy):
    fig = figures.chain_figure(toy)
    assert len(fig.axes[1].lines) == 2
    # The legend names each arm once and each seed once, not every run.
    labels = [r["label"].split(":s") for r in toy.data["runs"]]
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(texts) == len({a for a, _ in labels}) + len({s for _, s in labels}), texts
    assert all(f"seed {s}" in texts for _, s in labels)


def _planted(seed: int, arm: str, logit_l2: float, steps=(0, 2000, 4000)) -> tuple[dict, dict]:
    """One planted run: 3 layers × 2 heads, every logit 10 and ‖W_Q,h‖₂ 2 except layer 2's, which is `logit_l2`
    (and its ‖W_Q,h‖₂ a tenth of it) from step 2,000 on."""
    E = len(steps)
    logit = np.full((E, 3, 2), 10.0)
    logit[1:, 1, :] = logit_l2
    lab = f"{arm}:s{seed}"
    arrays = {f"{lab}__census__step": np.asarray(steps), f"{lab}__census__fa2/max_logit": logit,
              f"{lab}__census__wq_sigma": np.where(logit > 10, logit / 10, 2.0), f"{lab}__loss": np.ones(4001)}
    return dict(label=lab, steps=4001), arrays


class _Res:
    def __init__(self, parts, seed, rules):
        self.data = dict(runs=[p[0] for p in parts], telemetry={})
        self.arrays = {k: v for p in parts for k, v in p[1].items()}
        self.meta = {"config": dict(rules=rules, seeds=[seed], arms=[{"label": p[0]["label"].split(":")[0]}
                                                                        for p in parts], steps=4001)}


RULES = dict(failure_window=100, failure_rise=0.3, growth_steps=[2000, 4000], reference="fp32")


def test_growth_verdict_needs_growth_beyond_the_reference_spread_in_every_seed():
    """FP32 seeds differ by 1.5× in layer 2 (the spread). An arm 100× FP32 in layer 2 in both seeds grows layer 2; an
    arm 100× in one seed and 1.2× (inside the spread) in the other grows nothing; one seed gives no verdict."""
    s0 = _Res([_planted(0, "fp32", 20.0), _planted(0, "paper", 2000.0), _planted(0, "sdpa", 2000.0)], 0, RULES)
    s1 = _Res([_planted(1, "fp32", 30.0), _planted(1, "paper", 3000.0), _planted(1, "sdpa", 36.0)], 1, RULES)
    M = reading.merge_seeds([s0, s1])
    assert reading.cfg_of(M)["seeds"] == [0, 1] and len(M.data["runs"]) == 6
    v = reading.growth_verdict(M.arrays, M.data["runs"], RULES)
    assert v["paper"] == {2000: {"logit": [2], "wq": [2]}, 4000: {"logit": [2], "wq": [2]}}
    assert v["sdpa"][2000] == {"logit": [], "wq": []}
    words = reading.growth_words(v, reading.fp32_spread(M.arrays, M.data["runs"], RULES),
                                 reading.growth_ratios(M.arrays, M.data["runs"], RULES))
    assert words["paper_grown_logit"] == "layers 2" and words["sdpa_grown_logit"] == "none at every step"
    assert words["paper_grown_min_ratio"] == words["paper_grown_max_ratio"] == "100" and words["spread_max"] == "1.5"
    assert reading.growth_verdict(s0.arrays, s0.data["runs"], RULES) is None
    with pytest.raises(ValueError):                       # one run twice is not two seeds
        reading.merge_seeds([s0, s0])


def test_growth_verdict_judges_each_arm_over_the_seeds_it_ran():
    """A third seed with FP32 attention and the paper placement only: the paper arm is judged over three seeds, flash
    SDPA over its two (the reference's spread still over all three FP32 seeds); an arm run in one seed is not judged."""
    s0 = _Res([_planted(0, "fp32", 20.0), _planted(0, "paper", 2000.0), _planted(0, "sdpa", 2000.0)], 0, RULES)
    s1 = _Res([_planted(1, "fp32", 30.0), _planted(1, "paper", 3000.0), _planted(1, "sdpa", 3000.0),
               _planted(1, "ours_fa2", 3000.0)], 1, RULES)
    s2 = _Res([_planted(2, "fp32", 40.0), _planted(2, "paper", 30.0)], 2, RULES)
    M = reading.merge_seeds([s0, s1, s2])
    v = reading.growth_verdict(M.arrays, M.data["runs"], RULES)
    assert set(v) == {"paper", "sdpa"}
    assert v["sdpa"][2000]["logit"] == [2]                 # 100× in both of its seeds, beyond the 2× spread
    assert v["paper"][2000]["logit"] == []                 # inside the spread in seed 2
    assert reading.verdict_seeds(M.data["runs"], RULES) == {"paper": [0, 1, 2], "sdpa": [0, 1], "ours_fa2": [1]}


def test_growth_onset_and_the_census_before_a_failure():
    _, arrays = _planted(1, "paper", 5000.0)
    assert reading.growth_onset(arrays, "paper:s1") == (2000, [2])
    assert reading.growth_onset(arrays, "paper:s1", big=1e4) is None
    pre = reading.before_failure(arrays, "paper:s1", 3999)
    assert pre["step"] == 2000 and pre["logit"] == 5000.0 and pre["logit_layer"] == 2 and pre["wq"] == 500.0


def test_explosion_verdict_counts_failures_that_never_recover():
    """The paper placement exploding in one seed of two (a step up that stays) and spiking in the other (a step up
    that comes back) is "partly"; exploding in both is "reproduced"; a FP32 failure makes it no longer so."""
    def run(seed, arm, jump_at=None, back_at=None):
        meta, arrays = _planted(seed, arm, 20.0)
        loss = np.full(4001, 3.0)
        if jump_at is not None:
            loss[jump_at:back_at] = 4.0
        arrays[f"{arm}:s{seed}__loss"] = loss
        return meta, arrays
    s0 = _Res([run(0, "fp32"), run(0, "paper", 1000, 1200)], 0, RULES)
    s1 = _Res([run(1, "fp32"), run(1, "paper", 2000)], 1, RULES)
    v = reading.explosion_verdict(reading.merge_seeds([s0, s1]))
    assert (v["status"], v["n_boom"], v["n_paper"]) == ("partly", 1, 2)
    assert re.search(r"seed 1: failed at step 2,0[23]\d, not recovered", v["evidence"]), v["evidence"]
    s0b = _Res([run(0, "fp32"), run(0, "paper", 1000)], 0, RULES)
    assert reading.explosion_verdict(reading.merge_seeds([s0b, s1]))["status"] == "reproduced"
    s0c = _Res([run(0, "fp32", 500), run(0, "paper", 1000)], 0, RULES)
    assert reading.explosion_verdict(reading.merge_seeds([s0c, s1]))["status"] == "partly"


def _split_arrays(lab, n_conj, tie, ell, agree=None, nz=None) -> dict:
    n_conj = np.asarray(n_conj, dtype=np.float64)
    pre = f"{lab}__probe__"
    out = {pre + "n_conj": n_conj, pre + "err_tie_sum": np.asarray(tie, dtype=np.float64),
           pre + "err_ell_sum": np.asarray(ell, dtype=np.float64)}
    for part in ("tie", "ell"):
        out[pre + f"err_{part}_agree"] = np.asarray(agree if agree is not None else n_conj / 2)
        out[pre + f"err_{part}_nz"] = np.asarray(nz if nz is not None else n_conj)
    return out


def test_probe_split_pools_an_arms_seeds_on_planted_records():
    """Two seeds of one arm (events × 1 layer × 2 heads), sums by hand: 60 pairs, tie part 10 ULP, ℓ part 1 ULP;
    entries with pairs: 5, tie sums along V in 4 (3, 4, 2, 2; against: −1), ℓ sums along V in 2, against in 1, two
    zero (dropped)."""
    from types import SimpleNamespace
    arrays = _split_arrays("paper:s0", [[[10, 0]], [[20, 10]]], [[[3, 0]], [[4, -1]]], [[[1, 0]], [[-0.5, 0.5]]],
                           agree=[[[6, 0]], [[12, 4]]], nz=[[[8, 0]], [[20, 10]]])
    arrays |= _split_arrays("paper:s1", [[[10, 10]]], [[[2, 2]]], [[[0, 0]]], agree=[[[5, 5]]], nz=[[[10, 10]]])
    arrays |= _split_arrays("fp32:s0", [[[10, 10]]], [[[np.nan, np.nan]]], [[[np.nan, np.nan]]])  # not modelled
    sp = reading.probe_split(arrays, ["paper:s0", "paper:s1"])
    assert sp["n"] == 60 and sp["n_entries"] == 5 and sp["seeds"] == [0, 1]
    assert sp["tie_mean"] == pytest.approx(10 / 60) and sp["ell_mean"] == pytest.approx(1 / 60)
    assert (sp["tie_along"], sp["tie_against"], sp["ell_along"], sp["ell_against"]) == (4, 1, 2, 1)
    assert sp["tie_p"] == pytest.approx(12 / 32) and sp["ell_p"] == pytest.approx(1.0)   # exact binomial, two-sided
    assert sp["tie_pair_share"] == pytest.approx(32 / 58)
    assert sp["total_mean"] == pytest.approx(11 / 60) and sp["tie_share"] == pytest.approx(10 / 11)
    assert reading.probe_split(arrays, "paper:s1")["tie_mean"] == pytest.approx(0.2)
    assert reading.probe_split(arrays, "fp32:s0") is None                    # NaN throughout
    assert reading.probe_split(arrays, "sdpa:s0") is None                    # never recorded
    runs = [dict(label=lab) for lab in ("paper:s0", "paper:s1", "fp32:s0", "sdpa:s0")]
    by_arm = reading.arms_split(SimpleNamespace(data=dict(runs=runs), arrays=arrays))
    assert set(by_arm) == {"paper"} and by_arm["paper"] == sp
    assert reading.arms_split(SimpleNamespace(data=dict(runs=runs[2:]), arrays=arrays)) is None


def test_probe_split_is_none_on_a_result_without_it(toy):
    assert reading.arms_split(toy) is None


def test_seeds_words_groups_seeds_by_the_arms_they_ran():
    """Two seeds with all three arms are grouped; a third with two of them is named with its arms; merging a seed's
    two entries (as the book does) counts that seed as complete."""
    full = lambda s: _Res([_planted(s, a, 20.0) for a in ("fp32", "paper", "sdpa")], s, RULES)  # noqa: E731
    part = _Res([_planted(2, a, 20.0) for a in ("fp32", "paper")], 2, RULES)
    words = reading.seeds_words(reading.merge_seeds([full(0), full(1), part]))
    assert words == ("Seeds 0 and 1 ran all 3 arms; seed 2 FP32 attention and our kernel, paper placement "
                     "(512-key blocks)"), words
    half = _Res([_planted(1, "sdpa", 20.0)], 1, RULES)
    other = _Res([_planted(1, a, 20.0) for a in ("fp32", "paper")], 1, RULES)
    assert reading.seeds_words(reading.merge_seeds([full(0), other, half])) == "Seeds 0 and 1 ran all 3 arms"
    assert reading.seeds_words(full(0)) == "Seed 0 ran all 3 arms"


def test_split_glue_reads_the_sign_test():
    """A part whose entries lean along sign(V) with p < 0.05 reads "along sign(V)"; an even part reads
    "indistinguishable from zero"; no split gives dashes."""
    sp = dict(n=12345, n_entries=40, seeds=[1, 2], tie_mean=0.0123, tie_along=35, tie_against=5, tie_p=1e-6,
              ell_mean=-0.0004, ell_along=19, ell_against=21, ell_p=0.87)
    g = reading.split_glue(sp)
    assert (g["n"], g["tie_mean"], g["tie_reads"], g["ell_reads"]) == ("12,345", "+0.012", "along sign(V)",
                                                                       "indistinguishable from zero")
    assert g["seeds"] == "seeds 1 and 2" and reading.split_glue(dict(sp, seeds=[0]))["seeds"] == "seed 0"
    mixed = reading.split_glue(dict(sp, tie_mean=-0.0002))          # entries mostly along, the pooled mean against
    assert mixed["tie_reads"] == "most entries along sign(V), though the pooled mean is against sign(V)"
    assert reading.split_glue(dict(sp, tie_along=5, tie_against=35, tie_mean=-0.0123))["tie_reads"] == "against sign(V)"
    assert set(reading.split_glue(None).values()) == {"—"}


def test_focus_growth_words_names_growers_that_never_exploded():
    v = {"paper": {2000: {"logit": [2, 3], "wq": [2]}}, "sdpa": {2000: {"logit": [2], "wq": []}},
         "ours_fa2": {2000: {"logit": [6], "wq": []}}}
    words = reading.focus_growth_words(v, {"paper": True, "sdpa": False, "ours_fa2": False})
    assert words.startswith("Our kernel, paper placement (512-key blocks) and PyTorch flash SDPA (BF16) grow layer 2")
    assert "including PyTorch flash SDPA (BF16), whose loss never exploded" in words
    v["ours_fa2"][2000]["logit"] = [2]
    assert reading.focus_growth_words(v, {"paper": True}).startswith("All 3 arms judged grow layer 2")
    assert "No arm grows" in reading.focus_growth_words(v, {}, layer=5)
    assert "two seeds" in reading.focus_growth_words(None, {})


def test_growth_from_a_later_step_is_named_with_that_step():
    """An arm that grows a layer from the second growth step to the last, not at the first (flash SDPA in a seed that
    stays within FP32 attention's spread early): the column names the layer and the step; the sentence says the arm
    grows it from that step on, and whether its loss exploded."""
    v = {"paper": {2000: {"logit": [2], "wq": [2]}, 4000: {"logit": [2], "wq": [2]}, 6000: {"logit": [2], "wq": [2]}},
         "sdpa": {2000: {"logit": [], "wq": []}, 4000: {"logit": [2, 8], "wq": []}, 6000: {"logit": [2], "wq": []}}}
    assert reading.grown_from(v["sdpa"], "logit") == {2: 4000}
    spread = {st: {"logit": np.ones(12), "wq": np.ones(12)} for st in (2000, 4000, 6000)}
    ratios = {0: {a: {st: {"logit": np.full(12, 5.0), "wq": np.ones(12)} for st in (2000, 4000, 6000)} for a in v}}
    w = reading.growth_words(v, spread, ratios)
    assert w["sdpa_grown_logit"] == "none at every step; from a later step on: layer 2 from 4,000"
    assert w["paper_grown_logit"] == "layers 2" and w["sdpa_grown_wq"] == "none at every step"
    words = reading.focus_growth_words(v, {"paper": True, "sdpa": False})
    assert words.startswith("Our kernel, paper placement (512-key blocks) grows layer 2")
    assert "PyTorch flash SDPA (BF16) grows it from step 4,000 on" in words and "its loss never exploded" in words
    assert "never exploded" not in reading.focus_growth_words(v, {"paper": True, "sdpa": True})
    # a run that failed by the rule and came back is named beside "never exploded"
    spiked = reading.focus_growth_words(v, {"paper": True, "sdpa": False}, spiked={"sdpa": [0], "paper": []})
    assert ("its loss never exploded (ended no run failed; it failed by the registered rule in seed 0 and came back)"
            in spiked)
    assert "came back" not in words


def test_lean_seeds_counts_the_seeds_whose_probe_leans_up():
    """Seed 0: 600 of 1,000 tied rows with Δδ > 0 and 70 of 100 pushes up (both p < 0.05); seed 1: 500 and 50 (no
    lean); an arm without the probe counts no seeds."""
    arrays, runs = {}, []
    for seed, (dd, push) in enumerate([(600, 70), (500, 50)]):
        lab = f"paper:s{seed}"
        runs.append({"label": lab})
        arrays.update({f"{lab}__probe__step": np.arange(10), f"{lab}__probe__dd_pos_tied": np.full(10, dd / 10),
                       f"{lab}__probe__dd_nz_tied": np.full(10, 100.0),
                       f"{lab}__probe__push_adam": np.r_[np.ones(push), -np.ones(100 - push)]})
    runs.append({"label": "fp32:s0"})
    res = SimpleNamespace(data={"runs": runs}, arrays=arrays)
    assert reading.lean_seeds(res, "paper") == {"dd": (1, 2), "push": (1, 2)}
    assert reading.lean_seeds(res, "fp32") == {"dd": (0, 0), "push": (0, 0)}


def test_link_readings_call_a_lean_in_every_seed_partly_and_never_reproduced():
    """The paper placement leans in both seeds, FP32 attention in neither: links 4 and 6 read "partly" (no threshold
    was registered, so never "reproduced"); with one of the two seeds flat, "not reproduced"; without the split's
    records, no link-3 reading."""
    def probe(lab, dd, push):
        return {f"{lab}__probe__step": np.arange(10), f"{lab}__probe__dd_pos_tied": np.full(10, dd / 10),
                f"{lab}__probe__dd_nz_tied": np.full(10, 100.0),
                f"{lab}__probe__push_adam": np.r_[np.ones(push), -np.ones(100 - push)]}

    def res(paper_1):
        arrays = {**probe("paper:s0", 600, 70), **probe("paper:s1", *paper_1),
                  **probe("fp32:s0", 500, 50), **probe("fp32:s1", 500, 50)}
        runs = [{"label": lab} for lab in ("paper:s0", "paper:s1", "fp32:s0", "fp32:s1")]
        return SimpleNamespace(data={"runs": runs}, arrays=arrays)
    lean = reading.link_readings(res((600, 70)))
    assert set(lean) == {"delta_bias", "wq_norm_push"}
    assert all(v["status"] == "partly" and "2 of 2 seeds" in v["words"] for v in lean.values())
    flat = reading.link_readings(res((500, 50)))
    assert all(v["status"] == "not reproduced" for v in flat.values())


# ------------------------------------------------------------------------------------- link 5: the dW_Q error's shape
def _g_records(kind: str, rng, events: int = 20, layers: int = 2, heads: int = 4, d: int = 8, c: int = 32) -> dict:
    """Planted chain-probe records of the dW_Q error G (d × c per head), as the probe keeps them: per (event, layer,
    head) its norm, stable rank and cosine with the previous event's G (NaN at the first event). `kind`: "alike" —
    one fixed rank-one direction per head, scaled by a positive random size each event, plus a little noise (rank one,
    alike across steps); "flip" — the same with a random sign each event (rank one, not alike); "random" — Gaussian
    matrices (neither)."""
    u, v = rng.standard_normal((layers, heads, d)), rng.standard_normal((layers, heads, c))
    base = np.einsum("lhd,lhc->lhdc", u, v)
    out = {k: np.full((events, layers, heads), np.nan) for k in ("dg_norm", "dg_srank", "dg_cos_prev")}
    prev = None
    for e in range(events):
        if kind == "random":
            g = rng.standard_normal((layers, heads, d, c))
        else:
            size = rng.uniform(0.5, 2.0, (layers, heads, 1, 1))
            sign = rng.choice([-1.0, 1.0], (layers, heads, 1, 1)) if kind == "flip" else 1.0
            g = sign * size * base + 0.05 * rng.standard_normal((layers, heads, d, c))
        fro = np.sqrt((g ** 2).sum(axis=(2, 3)))
        out["dg_norm"][e] = fro
        out["dg_srank"][e] = fro ** 2 / np.linalg.norm(g, ord=2, axis=(2, 3)) ** 2
        if prev is not None:
            out["dg_cos_prev"][e] = (g * prev).sum(axis=(2, 3)) / (fro * np.sqrt((prev ** 2).sum(axis=(2, 3))))
        prev = g
    return out


def _g_result(kinds: dict, seed: int = 0):
    """A merged comparison whose runs ("<arm>:s<seed>") carry only `_g_records` of the given kinds, with the
    configuration `low_rank_seeds` reads (width 32, 4 heads: G is 8 × 32)."""
    rng = np.random.default_rng(seed)
    arrays, runs = {}, []
    for lab, kind in kinds.items():
        runs.append({"label": lab})
        arrays.update({f"{lab}__probe__{k}": a for k, a in _g_records(kind, rng).items()})
    return SimpleNamespace(data={"runs": runs}, arrays=arrays,
                           cfg={"model": {"n_embd": 32, "n_head": 4}, "probe": {"every": 200}})


def test_low_rank_reading_tells_planted_rank_one_alike_errors_from_random_ones():
    """Rank-one errors alike across steps in the paper placement, Gaussian ones under FP32 attention: link 5 reads
    "partly" (never "reproduced": no registered threshold). The same rank-one errors with random signs, or FP32
    attention's errors alike too, or one seed only, read "not reproduced", each for its stated reason."""
    two = lambda paper, fp32: {"paper:s0": paper, "paper:s1": paper, "fp32:s0": fp32, "fp32:s1": fp32}  # noqa: E731
    lr = reading.low_rank_seeds(_g_result(two("alike", "random")))
    assert (lr["d"], lr["c"], lr["max_rank"], lr["every"]) == (8, 32, 8, 200)
    assert lr["random_cos"] == pytest.approx(1 / 16)
    for seed in (0, 1):
        p, f = lr["arms"]["paper"][seed], lr["arms"]["fp32"][seed]
        assert p["rank_one"] and p["alike"] and p["srank_med"] < 1.1 and p["cos_med"] > 0.9
        assert not f["rank_one"] and not f["alike"] and f["srank_med"] > 2.5 and abs(f["cos_med"]) < 0.2
        assert p["n"] == 160 and p["n_cos"] == 152                     # the first event has no previous G
    v = reading.link_readings(_g_result(two("alike", "random")))["low_rank"]
    assert v["status"] == "partly" and "in 2 of 2 seeds" in v["words"] and v["reasons"] == []

    flip = reading.link_readings(_g_result(two("flip", "random")))["low_rank"]
    lr = reading.low_rank_seeds(_g_result(two("flip", "random")))
    assert all(e["rank_one"] and not e["alike"] for e in lr["arms"]["paper"].values())
    assert flip["status"] == "not reproduced" and "not alike across steps in every seed" in flip["evidence"]

    generic = reading.link_readings(_g_result(two("alike", "alike")))["low_rank"]
    assert generic["status"] == "not reproduced"
    assert "nearly rank one too" in generic["evidence"] and "alike across steps as well" in generic["evidence"]

    one = reading.link_readings(_g_result({"paper:s0": "alike", "fp32:s0": "random"}))["low_rank"]
    assert one["status"] == "not reproduced" and "one seed only" in one["reasons"]

    rand = reading.link_readings(_g_result(two("random", "random")))["low_rank"]
    assert rand["status"] == "not reproduced" and "not nearly rank one in every seed" in rand["evidence"]


def test_low_rank_reading_leaves_out_zero_errors_and_runs_without_the_record():
    """A zero G (a head whose rows each attend one key: no O error) has no stable rank and no cosine: left out, not
    counted as rank zero. A comparison without the record gives no reading, and link_readings no link-5 claim."""
    res = _g_result({"paper:s0": "alike", "paper:s1": "alike"})
    for k in ("dg_norm", "dg_srank", "dg_cos_prev"):
        res.arrays[f"paper:s0__probe__{k}"][5:, 0, 0] = 0.0
    e = reading.low_rank_seeds(res)["arms"]["paper"][0]
    assert e["n"] == 160 - 15 and e["n_cos"] == 152 - 15 and e["srank_med"] >= 1.0
    assert reading.low_rank_seeds(SimpleNamespace(data={"runs": [{"label": "paper:s0"}]}, arrays={})) is None
    assert set(reading.low_rank_glue(None).values()) == {"—"}


def test_low_rank_table_glue_and_headline_on_planted_errors():
    lr = reading.low_rank_seeds(_g_result({"fp32:s0": "random", "paper:s0": "alike", "paper:s1": "alike",
                                           "sdpa:s0": "flip"}))
    table = reading.low_rank_table(lr)
    assert table.count("\n") == 1 + 4 and "| FP32 attention | 0 |" in table.splitlines()[2]
    g = reading.low_rank_glue(lr)
    assert (g["d"], g["c"], g["max_rank"], g["every"], g["paper_alike"], g["fp32_alike"]) == (
        "8", "32", "8", "200", "2 of 2", "0 of 1")
    assert g["status"] == "partly" and g["reason"] == "—" and g["ours_fa2_srank"] == "—"
    assert g["headline"] == ("The dW_Q error is nearly rank one in every seed only in PyTorch flash SDPA (BF16) and "
                             "our kernel, paper placement (512-key blocks); successive errors point the same way more "
                             "often than chance only in 2 of 2 seeds of our kernel, paper placement (512-key blocks).")


def test_low_rank_reading_on_the_toy_run(toy):
    """The live toy run records G: every arm and seed has a row, stable ranks lie in [1, min(D, C)]."""
    lr = reading.low_rank_seeds(toy)
    assert set(lr["arms"]) == {r["label"].split(":s")[0] for r in toy.data["runs"]}
    for seeds in lr["arms"].values():
        for e in seeds.values():
            assert e["n"] == 0 or 1 - 1e-6 <= e["srank_med"] <= lr["max_rank"] + 1e-6
    assert reading.low_rank_table(lr).count("\n") == 1 + sum(len(s) for s in lr["arms"].values())


def test_low_rank_reading_on_the_committed_runs():
    """On the committed GPT-2 comparison: every arm's numbers are in range and the status is the stated rule applied
    to the per-seed numbers."""
    from lib.book import results
    chain = [results.load(n, "full") for n in reading.CHAIN_RESULTS if results.exists(n, "full")]
    if not chain:
        pytest.skip("no committed GPT-2 comparison")
    m = reading.merge_seeds(chain)
    lr = reading.low_rank_seeds(m)
    paper, fp32 = lr["arms"]["paper"], lr["arms"]["fp32"]
    for seeds in lr["arms"].values():
        for e in seeds.values():
            assert 1 - 1e-3 <= e["srank_med"] <= lr["max_rank"] and -1 <= e["cos_med"] <= 1 and e["n_cos"] <= e["n"]
            assert e["alike"] == (e["cos_med"] > lr["random_cos"] and e["cos_pos"] > 0.5 and e["cos_p"] < 0.05)
    want = ("partly" if len(paper) >= 2 and all(e["rank_one"] and e["alike"] for e in paper.values())
            and not any(e["alike"] for e in fp32.values()) else "not reproduced")
    assert reading.link_readings(m)["low_rank"]["status"] == want
    # (the claims table's link-5 evidence starting with this reading: tests/test_claims_contrast.py)


def _ends(**ends):
    """`arms_numbers`-style glue for the four arms: `ends` maps an arm to "failed", "back within the margin" or
    "never failed"."""
    n = {}
    for a, e in ends.items():
        n.update({f"{a}_ends": e, f"{a}_steps": "10,000", f"{a}_cut": "the whole horizon",
                  f"{a}_failed_at": "—" if e == "never failed" else "step 6,302",
                  f"{a}_recovered": "80 steps later" if e == "back within the margin" else "not by the end of the run",
                  f"{a}_n_failures": "0" if e == "never failed" else "1"})
    return n


def test_failure_words_group_the_arms_by_how_their_runs_ended():
    n = _ends(fp32="never failed", sdpa="back within the margin", ours_fa2="back within the margin", paper="failed")
    n["fp32_cut"], n["fp32_steps"] = "cut by the wall limit", "9,090"
    head, body = reading.failure_words(n, reading.CHAIN_ARMS)
    assert head == ("Our kernel, paper placement (512-key blocks) ends its run failed; PyTorch flash SDPA (BF16) and "
                    "our kernel, FA2 placement fail and come back; FP32 attention never fails.")
    assert body.startswith("FP32 attention did not fail in its 9,090 steps (cut by its wall limit); ")
    assert "paper placement (512-key blocks) failed at step 6,302 and was not back by the end of its run." in body
    assert "FA2 placement failed at step 6,302 and was back within the rule's margin 80 steps later, a spike" in body
    assert reading.failure_reading(n).startswith("In this seed the paper placement's run ends failed where FP32")
    assert "fail later and come back" in reading.failure_reading(n)


def test_failure_reading_is_neutral_unless_only_the_bf16_arms_end_failed():
    assert "neither supports nor refutes" in reading.failure_reading(_ends(fp32="never failed", paper="never failed"))
    assert "neither supports" in reading.failure_reading(_ends(fp32="failed", paper="failed"))
    both = reading.failure_reading(_ends(fp32="never failed", sdpa="failed", paper="failed"))
    assert "but PyTorch flash SDPA (BF16) ends failed too" in both


def test_the_wq_growth_claim_reads_the_registered_growth_rule_in_the_focus_layer():
    """Layer 2's ‖W_Q,h‖₂ beyond FP32 attention's seed-to-seed spread in every seed, from a growth step to the last:
    every BF16 arm so is "reproduced", some "partly", none "not reproduced"; one seed gives no verdict."""
    def seeds(sdpa_l2):
        return [_Res([_planted(0, "fp32", 20.0), _planted(0, "paper", 2000.0), _planted(0, "sdpa", sdpa_l2[0])], 0,
                     RULES),
                _Res([_planted(1, "fp32", 30.0), _planted(1, "paper", 3000.0), _planted(1, "sdpa", sdpa_l2[1])], 1,
                     RULES)]
    v = reading.wq_growth_verdict(reading.merge_seeds(seeds((2000.0, 3000.0))))
    assert v["status"] == "reproduced" and sorted(v["grown"]) == ["paper", "sdpa"] and v["since"]["paper"] == 2000
    assert "layer 2 grown at every growth step judged in 2 of 2 BF16 arms, and from some step on to the last in 2" \
        in v["evidence"]
    assert "from step 2,000 to 4,000 (seeds 0, 1; 100× FP32 attention's at step 4,000)" in v["evidence"]
    assert v["evidence"].endswith("FP32 attention's seeds differ there by at most 1.50×")
    assert v["evidence"].endswith(": " + v["words"]) and v["words"].startswith("layer 2 grown at every growth step")
    # an arm grown only from a later step on: "partly", as the chapter's table reads "from a later step on"
    late = reading.merge_seeds([
        _Res([_planted(0, "fp32", 20.0), _planted(0, "paper", 2000.0),
              _planted(0, "sdpa", 2000.0, steps=(0, 2000, 4000))], 0, RULES),
        _Res([_planted(1, "fp32", 30.0), _planted(1, "paper", 3000.0), _planted(1, "sdpa", 36.0)], 1, RULES)])
    for k in ("sdpa:s1__census__fa2/max_logit", "sdpa:s1__census__wq_sigma"):     # seed 1 grows only at step 4,000
        late.arrays[k] = late.arrays[k].copy()
        late.arrays[k][2, 1, :] = 3000.0 if k.endswith("max_logit") else 300.0
    lv = reading.wq_growth_verdict(late)
    assert lv["status"] == "partly" and lv["every"] == ["paper"] and lv["since"]["sdpa"] == 4000
    assert "flash SDPA: from step 4,000 to 4,000" in lv["evidence"]
    part = reading.wq_growth_verdict(reading.merge_seeds(seeds((2000.0, 36.0))))    # seed 1 inside the spread
    assert part["status"] == "partly" and part["grown"] == ["paper"]
    assert "flash SDPA: not at the last step judged, 4,000 (seeds 0, 1; 1.2–100×" in part["evidence"]
    s0 = seeds((2000.0, 3000.0))[0]
    assert reading.wq_growth_verdict(reading.merge_seeds([s0])) is None
    none = [_Res([_planted(s, "fp32", f), _planted(s, "paper", f)], s, RULES) for s, f in ((0, 20.0), (1, 30.0))]
    assert reading.wq_growth_verdict(reading.merge_seeds(none))["status"] == "not reproduced"


def test_wq_beyond_failure_compares_the_failing_arm_before_its_failure_with_the_arms_that_did_not_fail():
    """The paper arm's layer-2 ‖W_Q,h‖₂ (over FP32's) at its last growth step before failing, beside the largest the
    arms that did not fail reached; a seed where such an arm failed too is left out and named."""
    def run(seed, arm, l2, jump_at=None, back_at=None):
        meta, arrays = _planted(seed, arm, l2)
        loss = np.full(4001, 3.0)
        if jump_at is not None:
            loss[jump_at:back_at] = 4.0
        arrays[f"{arm}:s{seed}__loss"] = loss
        return meta, arrays

    def two(sdpa_l2, sdpa_fail0=None):
        return reading.merge_seeds([
            _Res([run(0, "fp32", 20.0), run(0, "paper", 2000.0, 3000), run(0, "sdpa", sdpa_l2, *(sdpa_fail0 or ()))],
                 0, RULES),
            _Res([run(1, "fp32", 30.0), run(1, "paper", 3000.0, 3000), run(1, "sdpa", sdpa_l2)], 1, RULES)])
    words = reading.wq_beyond_failure_words(two(5000.0), calm=("sdpa",))
    assert "seed 0: 100.0× at step 2,000, before its failure at 3,0" in words
    assert "against up to 250.0× in flash SDPA" in words and "seed 1: 100.0×" in words
    assert words.endswith("a growth of ‖W_Q‖₂ that large does not by itself make the failure.")
    less = reading.wq_beyond_failure_words(two(500.0), calm=("sdpa",))
    assert less.endswith("The arms that did not fail did not grow it further in every seed compared.")
    left = reading.wq_beyond_failure_words(two(5000.0, (3500, 3700)), calm=("sdpa",))
    assert "(seed 0 left out: there flash SDPA failed by the rule too (at step 3,5" in left
    assert ", and came back))." in left and "seed 1: 100.0×" in left and "seed 0: 100" not in left
    calm = reading.merge_seeds([_Res([run(s, "fp32", 20.0 + 10 * s), run(s, "paper", 2000.0)], s, RULES)
                                for s in (0, 1)])
    assert reading.wq_beyond_failure_words(calm) == ""           # the paper arm never failed: nothing to compare


def _counted(seed, arm, rows, tied, window):
    """A planted run whose census has only the counts: per event, layer and head `rows` rows, `tied` of them tied,
    `window` of those in the window (two events, 1 layer, 2 heads)."""
    lab = f"{arm}:s{seed}"
    full = lambda x: np.full((2, 1, 2), float(x))        # noqa: E731
    return dict(label=lab, steps=10), {f"{lab}__census__authors/n_rows": full(rows),
                                      f"{lab}__census__authors/n_tied": full(tied),
                                      f"{lab}__census__authors/n_window": full(window)}


def test_precondition_words_tell_the_ties_from_the_window():
    """Pooled over events and seeds: the share of tied rows and, of those, the share in the window, per arm beside
    FP32 attention; "mostly through the window" only when every arm's window factor beats every arm's ties factor."""
    res = SimpleNamespace(arrays={}, data={"runs": []})
    for seed in (0, 1):
        for run in (_counted(seed, "fp32", 1000, 50, 0.05), _counted(seed, "paper", 1000, 100, 10),
                    _counted(seed, "sdpa", 1000, 75, 1.5)):
            res.data["runs"].append(run[0])
            res.arrays.update(run[1])
    sh = reading.precondition_shares(res)
    assert sh["fp32"] == {"tied": pytest.approx(0.05), "window": pytest.approx(0.001), "seeds": [0, 1]}
    words = reading.precondition_words(res)
    assert words.startswith("Over every census event of every seed (0, 1), in the paper's rounding placement, rows "
                            "with a repeated maximum are 5.0 % of the rows under FP32 attention, against 7.5 % in "
                            "flash SDPA and 10 % in the paper placement; of those tied rows, the ones in the window")
    assert "are 0.10 % under FP32 attention, against 2.0 % in flash SDPA and 10 % in the paper placement." in words
    assert words.endswith("mostly through the window (20–100× FP32 attention's share), much less through the ties "
                          "(1.5–2.0×).")
    # a BF16 arm whose window share is no further from FP32's than the ties are: no "mostly through the window"
    res.arrays["sdpa:s0__census__authors/n_window"] = np.full((2, 1, 2), 0.1)
    res.arrays["sdpa:s1__census__authors/n_window"] = np.full((2, 1, 2), 0.1)
    assert "differ from FP32 attention by 1.5–2.0× in their share of tied rows" in reading.precondition_words(res)
    assert reading.precondition_words(SimpleNamespace(arrays={}, data={"runs": []})) == ""


def test_wall_words_names_each_merged_results_budget():
    """A merged reading keeps each result's wall budget (the merged configuration drops it): both are named; one
    result names its own; none gives "no limit", never "none s"."""
    from types import SimpleNamespace
    meta = lambda w: {"provenance": {"cfg": {"max_wall_s": w}}}     # noqa: E731
    assert reading.wall_words(SimpleNamespace(meta=[meta(1320.0), meta(1620.0), meta(1320.0)])) == "1,320 s or 1,620 s"
    assert reading.wall_words(SimpleNamespace(meta=meta(1320.0), cfg=None)) == "1,320 s"
    assert reading.wall_words(SimpleNamespace(meta=meta(0.0), cfg=None)) == "no limit"
