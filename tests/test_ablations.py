"""lib/studies/explosion/ablations.py: layer/head selection, verdict logic, and one tiny CI run through the real harness."""
import numpy as np
import pytest

from lib.book import registry
from lib.studies.explosion import ablations
from lib.book.runner import run_live


def test_outlier_selection_from_headline_telemetry():
    wq = np.ones((5, 3, 4))
    wq[-1, 2] = [1.0, 6.0, 1.2, 5.0]          # layer 2 grows most; heads 1 and 3 are outliers
    data = {"runs": [{"arm": "paper", "tag": "", "id": "paper_s0"}, {"arm": "sdpa", "tag": "", "id": "x"}]}
    layer, heads, why = ablations.outlier_layer_and_heads(data, {"paper_s0__wq_norm": wq}, 3)
    assert layer == 2 and heads == (1, 3) and "paper_s0" in why
    assert ablations.outlier_layer_and_heads(None, None, 6)[:2] == (1, (0,))


def test_verdicts_and_claim():
    s = [dict(arm="paper", outcome="exploded"), dict(arm="paper", outcome="nonfinite"),
         dict(arm="fp32_o", outcome="stable"), dict(arm="fp32_o", outcome="exploded")]
    v = ablations.verdicts(s)
    assert v["paper"]["ours"] == "fails" and v["paper"]["agrees"]
    assert v["fp32_o"]["ours"] == "mixed" and not v["fp32_o"]["agrees"]
    assert ablations.claims_from(v)["fp32_o_stabilises"]["status"] == "partly"
    v2 = ablations.verdicts([dict(arm="paper", outcome="exploded"), dict(arm="fp32_o", outcome="exploded")])
    assert ablations.claims_from(v2)["fp32_o_stabilises"]["status"] == "not reproduced"


def test_ci_run_covers_kernel_and_layer_arms():
    r = run_live("ablations", "ci")
    d = r["data"]
    assert {x["arm"] for x in d["runs"]} == {"paper", "delta_dp_p", "fp32_o", "paper_layer_only"}
    assert all(np.isfinite(r["arrays"][f"{x['id']}__loss"]).all() for x in d["runs"])
    assert d["claims"] == {}                   # no verdict on the paper's claims from a 3-step CPU run


def test_full_plan_runs_chosen_arms_at_first_seed_only():
    cfg = registry.resolve("ablations", "full", dict(first_seed_only=["fp32_pv", "paper_layer_only"], steps=1300))
    p = ablations.plan("full", cfg)
    assert p["steps"] == 1300 and (p["layer"], p["heads"], p["layer_why"]) == (2, [0, 1, 2, 3, 4, 5], "registry")
    assert p["arm_seeds"]["fp32_pv"] == [0] and p["arm_seeds"]["paper_layer_only"] == [0]
    assert p["arm_seeds"]["delta_fp32_o"] == [0, 1, 2] and p["arm_seeds"]["paper"] == [0, 1, 2]
    with pytest.raises(ValueError, match="nonsense"):
        ablations.plan("full", dict(cfg, first_seed_only=["fp32_o", "nonsense"]))
