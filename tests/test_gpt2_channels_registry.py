"""The GPT-2 channels-and-remedies entries of the registry (after `gpt2_arms`): each pair of arms resolves, parses and
follows gpt2_arms's recipe, horizon, telemetry and rules, at the registered seeds; the injection's rates are the
committed census's; the rules' one computed piece (`lib.studies.gpt2.channels.prevents`) on planted outcomes; and the
cheapest arms train two steps at ci scale."""
import numpy as np
import pytest
import torch

from lib.book import catalogue, registry, results
from lib.book.htmlcheck import name_problems
from lib.studies.gpt2 import arms, channels
from lib.training.model import GPTConfig, build_lm

# In the registry's order, which is the order to run them: the δ channel, O kept in FP32, the β fix, a logit bound,
# the authors' code, the injection; each at seed 0, then its seed-1 twin (and, for the first two, the arm that decides
# at seed 2).
PAIRS = ["gpt2_delta", "gpt2_remedy_o32", "gpt2_remedy_fix", "gpt2_qknorm", "gpt2_authors_compiled",
         "gpt2_authors_eager", "gpt2_inject", "gpt2_inject_low"]
# group: its seed-2 entries and each one's arms, those that decide the prevents rule there (the fix's split into one
# entry an arm, as at seed 1)
SEED2 = {"gpt2_delta": {"gpt2_delta_s2": ("paper_delta_fp32_o",)},
         "gpt2_remedy_o32": {"gpt2_remedy_o32_s2": ("paper_o32",)},
         "gpt2_remedy_fix": {"gpt2_remedy_fix_s2": ("paper_fix_b7_exact",),
                             "gpt2_remedy_fix_b2_s2": ("paper_fix_b2_exact",)},
         "gpt2_qknorm": {"gpt2_qknorm_s2": ("paper_qk",)}}
# group: its seed-1 twin split into one entry an arm (the first keeps the `_s1` name), so that a one-GPU machine can
# decide one arm a campaign: arm labels of each, in order
SPLIT_S1 = {"gpt2_remedy_fix": {"gpt2_remedy_fix_s1": ("paper_fix_b7_exact",),
                                "gpt2_remedy_fix_b2_s1": ("paper_fix_b2_exact",)},
            "gpt2_qknorm": {"gpt2_qknorm_s1": ("paper_qk",), "gpt2_qknorm_fp32_s1": ("fp32_qk",)},
            "gpt2_authors_compiled": {"gpt2_authors_compiled_s1": ("authors_compiled",),
                                      "gpt2_authors_compiled_fix_s1": ("authors_fix_compiled",)}}
# entries whose wall budget is shorter than gpt2_arms's (a machine limit set before their first run, so that one
# one-GPU hold has the GPU suite, the arm and a benchmark): its seconds
SHORT_WALL = {"gpt2_remedy_fix_b2_s1": 900, "gpt2_authors_compiled_s1": 720}
SEED1 = {p: tuple(SPLIT_S1.get(p, {p + "_s1": ()})) for p in PAIRS}
TWIN = {n: p for p in PAIRS for n in (p,) + SEED1[p]}          # an entry of seed 0 or 1: its seed-0 entry
ENTRIES = list(TWIN)
IN_ORDER = [n for p in PAIRS for n in (p,) + SEED1[p] + tuple(SEED2.get(p, {}))]
SEED2_ENTRIES = [(group, name, labels) for group, es in SEED2.items() for name, labels in es.items()]
RECIPE = ("corpus_dir", "gpus", "steps", "batch_size", "lr", "warmup", "census_every", "census_rows", "eval_every",
          "eval_batches", "ckpt_every_s", "max_wall_s", "probe")
RULES = ("failure_window", "failure_rise", "growth_steps")
QK = ("qk_norm", "qk_gain")
ES = registry.entries()


def _cfg(name, scale):
    return ES[name].configs[scale]


def test_registered_in_priority_order_after_gpt2_arms():
    names = list(ES)
    assert names[names.index("gpt2_arms_s2_fa2") + 1:][:len(IN_ORDER)] == IN_ORDER  # after the comparison's seeds
    assert all(ES[n].gpu_min == 24.0 * len(labels) for _, n, labels in SEED2_ENTRIES)   # one GPU an arm


@pytest.mark.parametrize("name", ENTRIES)
def test_entry_resolves_parses_and_follows_gpt2_arms(name):
    e = ES[name]
    split = SPLIT_S1.get(TWIN[name], {}) if name != TWIN[name] else {}
    assert e.base == "lib.studies.gpt2.arms" and e.chapter == "02c"
    if name in SHORT_WALL:      # the suite, compile and the shorter training wall, under the full slot
        assert SHORT_WALL[name] / 60 < e.gpu_min < 24.0
    else:
        # one GPU × 24 minutes an arm; a split-off FP32-attention arm (≈ 7 steps/s against ≈ 9) more, up to 30
        fp32 = split and all(a["attn"].startswith("fp32") for a in _cfg(name, "full")["arms"])
        assert (24.0 < e.gpu_min <= 30.0) if fp32 else e.gpu_min == (24.0 if split else 48.0)
    assert name in catalogue.TITLES and name_problems(e.summary) == []        # the summary in reader words
    ref = _cfg("gpt2_arms", "full")
    for scale in ("ci", "full"):
        cfg = _cfg(name, scale)
        assert 1 <= len(cfg["arms"]) <= 2 and len({a["label"] for a in cfg["arms"]}) == len(cfg["arms"])
        for a in cfg["arms"]:
            specs = GPTConfig(**(cfg["model"] | {"attn": a["attn"]})).layer_specs()
            assert len(specs) == cfg["model"]["n_layer"], a["label"]
        twin = _cfg(TWIN[name], scale)
        assert cfg["model"] == twin["model"]
        if split:       # the twin's arms, one entry each, each with the twin's rules for its arm
            parts = [_cfg(n, scale) for n in split]
            assert [[a["label"] for a in c["arms"]] for c in parts] == [list(v) for v in split.values()]
            assert sorted((a for c in parts for a in c["arms"]), key=str) == sorted(twin["arms"], key=str)
            for c in parts:
                assert c["rules"] == twin["rules"] | {"baseline": {a["label"]: twin["rules"]["baseline"][a["label"]]
                                                                 for a in c["arms"]}}
                assert c["model"] == twin["model"]
        else:
            assert cfg["arms"] == twin["arms"] and cfg["rules"] == twin["rules"]
    cfg = _cfg(name, "full")
    assert cfg["seeds"] == ([0] if name == TWIN[name] else [1])
    assert _cfg(name, "ci")["seeds"] == [0]
    assert cfg["workdir"] == f"/tmp/{name}"
    wall = {"max_wall_s": SHORT_WALL[name]} if name in SHORT_WALL else {}
    assert {k: cfg[k] for k in RECIPE} == {k: ref[k] for k in RECIPE} | wall
    assert {k: v for k, v in cfg["model"].items() if k not in QK} == ref["model"]
    assert {k: cfg["rules"][k] for k in RULES} == {k: ref["rules"][k] for k in RULES}
    assert set(cfg["rules"]["baseline"]) == {a["label"] for a in cfg["arms"]}


def test_workdirs_are_distinct():
    dirs = [e.configs["full"]["workdir"] for e in ES.values()
            if e.configs.get("full", {}).get("workdir")]
    assert len(dirs) == len(set(dirs))


def test_the_dual_output_is_registered_once():
    """δ from an FP32 O (the op's second, FP32 output read only by δ) is the paper's dual output: one arm, seeds 0-1."""
    hits = [n for n in IN_ORDER for a in _cfg(n, "full")["arms"] if "delta_source=fp32_o" in a["attn"]]
    assert hits == ["gpt2_delta", "gpt2_delta_s1", "gpt2_delta_s2"]


@pytest.mark.parametrize("group,name,labels", SEED2_ENTRIES)
def test_the_seed_2_entries_run_the_arms_that_decide(group, name, labels):
    """Seed 2 (where the comparison's paper arm failed, the second such seed): the group's arms that decide its
    claim, exactly as at seeds 0 and 1 (spec, recipe, growth and failure rules), their baseline the paper arm of
    gpt2_arms_s2, read with the group (registry.GROUPS)."""
    e, twin = ES[name], _cfg(group, "full")
    assert e.base == "lib.studies.gpt2.arms" and e.chapter == "02c" and name in catalogue.TITLES
    assert name_problems(e.summary) == [] and \
        registry.GROUPS[group] == (group,) + SEED1[group] + tuple(SEED2[group])
    if group == "gpt2_remedy_fix":      # its entries hold every arm of seed 0 between them
        assert sorted(a for ls in SEED2[group].values() for a in ls) == sorted(a["label"] for a in twin["arms"])
    cfg = _cfg(name, "full")
    assert cfg["seeds"] == [2] and cfg["workdir"] == f"/tmp/{name}"
    assert cfg["arms"] == [a for a in twin["arms"] if a["label"] in labels] and len(cfg["arms"]) == len(labels)
    assert {k: cfg[k] for k in RECIPE} == {k: twin[k] for k in RECIPE} and cfg["model"] == twin["model"]
    assert {k: cfg["rules"][k] for k in RULES + ("reference", "spread_from")} == \
        {k: twin["rules"][k] for k in RULES + ("reference", "spread_from")}
    assert cfg["rules"]["baseline"] == {label: "paper" for label in labels}
    assert cfg["rules"]["baseline_from"] == ["gpt2_arms_s2"]
    if twin["rules"]["reference"] == "fp32":            # the comparison's FP32 arm of seed 2
        assert cfg["rules"]["reference_from"] == ["gpt2_arms_s2"]
    else:                                               # its own group's reference (FP32 attention with the bound)
        assert "reference_from" not in cfg["rules"]
    assert _cfg("gpt2_arms_s2", "full")["seeds"] == [2]


def test_injection_rates_are_the_paper_arms_census():
    """The registered injection specs: the paper arm's window rates of the committed gpt2_arms result (seed 0), layers
    2-4, at 1×, 10×, 0.1× and 0."""
    m = _cfg("gpt2_arms", "full")["model"]
    with np.load(results.RESULTS_DIR / "full" / "gpt2_arms.npz") as z:
        rates = channels.census_rates(z, m["n_embd"] // m["n_head"])["window"]
    got = {a["label"]: a["attn"] for n in ("gpt2_inject", "gpt2_inject_low") for a in _cfg(n, "full")["arms"]}
    for label, f in (("inject_1x", 1), ("inject_10x", 10), ("inject_0p1x", 0.1), ("inject_0x", 0)):
        assert got[label] == channels.injection_spec(rates, m["n_layer"], factor=f), label
    assert got["inject_1x"].split(",")[1:4] == ["inject/r=0.0305/dir=v", "inject/r=0.0548/dir=v",
                                                "inject/r=0.0336/dir=v"]


def test_capped_qk_norm_starts_from_the_same_weights():
    """The QK-norm arms share gpt2_arms's initialisation: the capped gain adds a parameter but no random draw."""
    base = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, attn="sdpa")
    torch.manual_seed(3)
    plain = build_lm(GPTConfig(**base)).state_dict()
    torch.manual_seed(3)
    capped = build_lm(GPTConfig(**base, qk_norm="capped", qk_gain=2.0)).state_dict()
    assert set(capped) - set(plain) == {f"transformer.h.{i}.attn.qk_theta" for i in range(2)}
    assert all(torch.equal(plain[k], capped[k]) for k in plain)


def test_prevents_rule():
    paper = {0: None, 1: 4000}
    assert channels.prevents({0: (None, 9000), 1: (None, 9000)}, paper) is True
    assert channels.prevents({0: (None, 9000), 1: (6000, 9000)}, paper) is False
    assert channels.prevents({0: (2000, 9000), 1: (None, 9000)}, paper) is True     # seed 0: nothing to prevent
    assert channels.prevents({0: (None, 9000), 1: (None, 3000)}, paper) is None     # stopped before step 4,000
    assert channels.prevents({0: (None, 9000), 1: (None, 9000)}, {0: None, 1: None}) is None


@pytest.mark.parametrize("name,label", [("gpt2_inject", "inject_1x"), ("gpt2_qknorm", "fp32_qk")])
def test_cheapest_arms_train_two_steps(name, label):
    cfg = registry.resolve(name, "ci")
    cfg["arms"] = [a for a in cfg["arms"] if a["label"] == label]
    cfg["steps"] = 2
    out = arms.run("ci", cfg)
    loss = out["arrays"][f"{label}:s0__loss"]
    assert len(loss) == 2 and torch.isfinite(torch.as_tensor(loss)).all()
    if name == "gpt2_inject":     # the chain probe read the injected error of the injection layer
        assert f"{label}:s0__probe__layers" in out["arrays"]


def test_a_probe_on_its_own_ties_is_recorded_so():
    """An entry whose chain probe measures each layer's own ties records that in its result (a reader needs it: a
    result without it was probed where BF16 scores tie); one with the default records nothing new."""
    cfg = registry.resolve("gpt2_qknorm", "ci")
    cfg["arms"] = [a for a in cfg["arms"] if a["label"] == "fp32_qk"]
    cfg["steps"] = 2
    assert "placement" not in cfg["probe"] and "probe_placement" not in arms.run("ci", cfg)["data"]
    cfg["probe"] = dict(cfg["probe"], placement="own")
    out = arms.run("ci", cfg)
    assert out["data"]["probe_placement"] == "own" and "fp32_qk:s0__probe__layers" in out["arrays"]


def test_the_dial_entries_follow_gpt2_arms_at_the_seeds_where_the_paper_arm_failed():
    """The precision dial (S in FP32; P̄ and ℓ in FP32) at seeds 1 and 2 — the seeds whose paper arm failed in the
    committed comparison, so the prevents rule can decide — one entry an arm (a one-GPU hold decides one), with
    gpt2_arms's recipe and rules, the paper arm of the same seed as each arm's baseline, and labels in reader words."""
    from lib.studies.gpt2 import reading as g2r
    ref = _cfg("gpt2_arms", "full")
    dial = {"gpt2_dial_s1": (1, "paper_s32"), "gpt2_dial_pl32_s1": (1, "paper_pl32"), "gpt2_dial_s2": (2, "paper_s32"),
            "gpt2_dial_pl32_s2": (2, "paper_pl32")}
    assert registry.GROUPS["gpt2_dial"] == tuple(dial)
    for name, (seed, label) in dial.items():
        assert [a["label"] for a in _cfg(name, "full")["arms"]] == [label] == [a["label"] for a in _cfg(name, "ci")["arms"]]
        e = ES[name]
        assert e.base == "lib.studies.gpt2.arms" and e.chapter == "02c" and name in catalogue.TITLES
        cfg = _cfg(name, "full")
        assert cfg["seeds"] == [seed] and cfg["workdir"] == f"/tmp/{name}"
        assert {k: cfg[k] for k in RECIPE if k != "probe"} == {k: ref[k] for k in RECIPE if k != "probe"}
        assert {k: cfg["rules"][k] for k in RULES} == {k: ref["rules"][k] for k in RULES}
        assert set(cfg["rules"]["baseline"]) == {a["label"] for a in cfg["arms"]}
        assert f"gpt2_arms_s{seed}" in cfg["rules"]["baseline_from"] and f"gpt2_arms_s{seed}" in cfg["rules"]["reference_from"]
        for a in cfg["arms"]:
            nm = GPTConfig(**(cfg["model"] | {"attn": a["attn"]})).layer_specs()[0].numerics
            assert nm.round_block == 512 and (not nm.round_s) != (not nm.round_p and not nm.round_l), a["label"]
        # the chain probe as the comparison's (with its split); the entries registered after seed 1's run of S in
        # FP32 probe each layer's own ties (with S in FP32, the FA2 placement's), which that run did not
        own = {} if name == "gpt2_dial_s1" else {"placement": "own"}
        assert cfg["probe"] == dict(ref["probe"], split=True, **own)
    if results.exists("gpt2_arms_s1", "full") and results.exists("gpt2_arms_s2", "full"):
        oc = g2r.outcomes(g2r.merge_seeds([results.load(n, "full") for n in ("gpt2_arms_s1", "gpt2_arms_s2")]))
        assert all(o[2] is not None for o in oc["paper"])            # the baseline failed in both seeds


@pytest.mark.parametrize("bench,trained_in", [
    ("train_step_remedies", ("gpt2_delta_s2", "gpt2_remedy_o32_s2")),
    ("train_step_fix", ("gpt2_remedy_fix_s1", "gpt2_remedy_fix_b2_s1", "gpt2_remedy_fix_s2",
                        "gpt2_remedy_fix_b2_s2"))])
def test_a_remedy_step_cost_times_what_trained(bench, trained_in):
    """The remedies' (and the exact-rule fix's) training-step benchmark times, in one group (one process, one GPU),
    exactly the specs those arms and their unremedied baseline trained with, compiled as they trained, beside SDPA's
    compiled step, by train_step_gpt2's method."""
    (group,) = _cfg(bench, "full")["groups"]
    trained = {a["attn"]: a["compile"] for n in trained_in for a in _cfg(n, "full")["arms"]}
    trained |= {a["attn"]: a["compile"] for a in _cfg("gpt2_arms", "full")["arms"] if a["label"] == "paper"}
    assert {x["attn"]: x["compile"] for x in group} == trained | {"sdpa": True}
    assert ES[bench].chapter == "08" and bench in catalogue.TITLES
    assert {k: v for k, v in _cfg(bench, "full").items() if k != "groups"} == \
        {k: v for k, v in _cfg("train_step_gpt2", "full").items() if k != "groups"}      # the same method


def test_the_bound_step_cost_times_what_trained():
    """The capped QK-norm's training-step benchmark times, in one group, the paper placement's spec without and with
    exactly the model change the bounded arms trained with (their model over the chain comparison's), compiled as they
    trained, beside SDPA's compiled step, by train_step_gpt2's method."""
    (group,) = _cfg("train_step_qknorm", "full")["groups"]
    base = _cfg("gpt2_arms", "full")["model"]
    for name in ("gpt2_qknorm_s1", "gpt2_qknorm_s2"):
        cfg = _cfg(name, "full")
        (arm,) = cfg["arms"]
        change = {k: v for k, v in cfg["model"].items() if base.get(k) != v}
        assert change == {"qk_norm": "capped", "qk_gain": 2.0}
        assert [(x["attn"], x["compile"], x.get("model")) for x in group] == [
            ("sdpa", True, None), (arm["attn"], arm["compile"], None), (arm["attn"], arm["compile"], change)]
    paper = next(a for a in _cfg("gpt2_arms", "full")["arms"] if a["label"] == "paper")
    assert group[1]["attn"] == paper["attn"]
    assert ES["train_step_qknorm"].chapter == "08" and "train_step_qknorm" in catalogue.TITLES
    assert {k: v for k, v in _cfg("train_step_qknorm", "full").items() if k != "groups"} == \
        {k: v for k, v in _cfg("train_step_gpt2", "full").items() if k != "groups"}      # the same method


def test_the_rerun_towards_the_horizon_changes_only_its_wall_and_workdir():
    """The authors' unfixed compiled code at seed 1 again, read in place of its 720 s run (`remedies.in_place`):
    the same arm, seed, recipe and rules at both scales; only the machine limit (longer) and the workdir differ."""
    first, rerun = "gpt2_authors_compiled_s1", "gpt2_authors_compiled_s1_long"
    assert rerun in registry.GROUPS["gpt2_authors_compiled"] and rerun in catalogue.TITLES
    assert ES[rerun].chapter == "02c" and name_problems(ES[rerun].summary) == []
    for scale in ("ci", "full"):
        a, b = _cfg(first, scale), _cfg(rerun, scale)
        differ = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
        assert differ <= {"workdir", "max_wall_s"}, differ
    a, b = _cfg(first, "full"), _cfg(rerun, "full")
    assert b["max_wall_s"] > a["max_wall_s"] and b["workdir"] != a["workdir"]
    assert b["max_wall_s"] / 60 < ES[rerun].gpu_min <= 30.0
