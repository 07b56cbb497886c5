"""The paper's ablations (its §3.2, §3.3.2) at proxy scale: which change to the paper placement stabilises training?

All arms use the headline's LR, steps, seeds and recorded batch order (data seed 0). Arms (spec strings of
`lib.training.model`; `P` = the paper placement of our kernel):

* ``paper``            — P itself (the baseline, re-run here so every arm shares one process pool);
* ``delta_dp_p``       — P with δ = rowsum(dP∘P) instead of rowsum(dO∘O) (paper: stable);
* ``delta_fp32_o``     — P with δ from an FP32 recompute of O in the backward (paper: stable);
* ``fp32_o``           — P with O computed in FP32 in the forward (P̄V, accumulator, ℓ, normalisation and the
                         saved O unrounded; S, P̄, LSE, backward as P) (paper: stable);
* ``fp32_pv``          — P with only the unnormalised P̄V (per tile and across tiles) in FP32 (paper: stable);
* ``paper_layer_only`` — P in layer L only, SDPA elsewhere (paper: fails);
* ``paper_except_layer`` — SDPA in layer L only, P elsewhere (paper: stable);
* ``fp32_o_heads``     — P everywhere, but FP32-O for the outlier heads of layer L (paper: stable).

cfg: lr, steps, seeds, arms, first_seed_only (arms run at the first seed only, to spend GPU time on more seeds of
the arms that decide a claim), layer and heads (explicit, or "from:headline": the layer whose largest per-head
‖W_Q‖₂ grew most in the paper arm of the committed full `headline`'s first seed, and the heads of that layer whose
‖W_Q‖₂ grew by more than half the largest head's growth, at least one; without that result layer index 1 — the
paper's layer 2 — and head 0). Each arm's outcome uses `lib.training.outcome.classify`. At full scale the runs
share one GPU as concurrent processes.
"""
from __future__ import annotations

import numpy as np

from lib.training import outcome, proxy

FP32_O = "paper/round_pv=false/round_acc=false/round_l=false/normalize_then_round=true/round_o=false"
FP32_PV = "paper/round_pv=false/round_acc=false/normalize_then_round=true"
SPECS = {
    "paper": "paper",
    "delta_dp_p": "paper/delta_source=dp_p",
    "delta_fp32_o": "paper/delta_source=fp32_o",
    "fp32_o": FP32_O,
    "fp32_pv": FP32_PV,
}
PAPER_EXPECTS = {"paper": "fails", "delta_dp_p": "stable", "delta_fp32_o": "stable", "fp32_o": "stable",
                 "fp32_pv": "stable", "paper_layer_only": "fails", "paper_except_layer": "stable",
                 "fp32_o_heads": "stable"}


def outlier_layer_and_heads(headline_data: dict | None, arrays: dict | None, n_layer: int) -> tuple[int, tuple, str]:
    """(layer, heads, why) from a headline result (see module docstring); (1, (0,), reason) without one."""
    if not headline_data or not arrays:
        return min(1, n_layer - 1), (0,), "default: no headline result (layer index 1 = the paper's layer 2)"
    runs = [r for r in headline_data["runs"] if r["arm"] == "paper" and not r["tag"]]
    if not runs or f"{runs[0]['id']}__wq_norm" not in arrays:
        return min(1, n_layer - 1), (0,), "default: headline has no paper-arm ‖W_Q‖ telemetry"
    wq = arrays[f"{runs[0]['id']}__wq_norm"]          # (telemetry steps, layers, heads)
    growth = wq[-1].max(axis=1) - wq[0].max(axis=1)
    layer = int(np.argmax(growth))
    head_growth = wq[-1, layer] - wq[0, layer]
    heads = tuple(int(h) for h in np.nonzero(head_growth > 0.5 * head_growth.max())[0]) \
        or (int(np.argmax(wq[-1, layer])),)
    return layer, heads, f"from headline run {runs[0]['id']}: layer {layer} grew most (Δ max ‖W_Q‖₂ = {growth[layer]:.3g})"


def plan(scale: str, cfg: dict) -> dict:
    base = proxy.proxy_config(scale)
    if cfg["layer"] == "from:headline" or cfg["heads"] == "from:headline":
        from lib.book import results
        hl_data = hl_arrays = None
        if scale == "full" and results.exists("headline", "full"):
            r = results.load("headline", "full")
            hl_data, hl_arrays = r.data, r.arrays
        layer, heads, why = outlier_layer_and_heads(hl_data, hl_arrays, base.n_layer)
    else:
        layer, heads, why = int(cfg["layer"]), tuple(cfg["heads"]), "registry"
    heads = tuple(h for h in heads if h < base.n_head) or (0,)
    seeds, lr, steps, arms = tuple(cfg["seeds"]), float(cfg["lr"]), int(cfg["steps"]), list(cfg["arms"])
    first_only = list(cfg.get("first_seed_only", []))
    bad = [a for a in first_only if a not in PAPER_EXPECTS]
    if bad:
        raise ValueError(f"ablations: unknown arm(s) {bad} in first_seed_only; known: {', '.join(PAPER_EXPECTS)}")
    from lib.training.spec import AttnSpec
    specs = dict(SPECS)
    n = base.n_layer
    specs["paper_layer_only"] = ",".join("paper" if i == layer else "sdpa" for i in range(n)) if n > 1 else "paper"
    specs["paper_except_layer"] = ",".join("sdpa" if i == layer else "paper" for i in range(n)) if n > 1 else "sdpa"
    specs["fp32_o_heads"] = [AttnSpec.parse("paper", heads=(heads, FP32_O)) if i == layer else AttnSpec.parse("paper")
                             for i in range(n)]
    arm_seeds = {a: list(seeds[:1]) if a in first_only else list(seeds) for a in arms}
    return dict(seeds=list(seeds), arm_seeds=arm_seeds, lr=lr, steps=steps, arms=arms, specs=specs, layer=layer,
                heads=list(heads), layer_why=why)


def verdicts(summaries: list[dict]) -> dict:
    """Per arm: outcomes over seeds, whether the arm stabilised, and agreement with the paper's report."""
    out = {}
    for arm in dict.fromkeys(s["arm"] for s in summaries):
        oc = [s["outcome"] for s in summaries if s["arm"] == arm]
        stable = all(o == "stable" for o in oc)
        failed = all(outcome.failed(o) for o in oc)
        ours = "stable" if stable else "fails" if failed else "mixed"
        out[arm] = dict(outcomes=oc, ours=ours, paper=PAPER_EXPECTS.get(arm), agrees=ours == PAPER_EXPECTS.get(arm))
    return out


def claims_from(v: dict) -> dict:
    c = {}
    if "fp32_o" in v and "paper" in v:
        base_failed = v["paper"]["ours"] == "fails"
        st = v["fp32_o"]["ours"]
        status = ("reproduced" if st == "stable" and base_failed else
                  "not reproduced" if st == "fails" else "partly")
        c["fp32_o_stabilises"] = dict(status=status, evidence=(
            f"ablations: paper arm {v['paper']['outcomes']}, FP32-O arm {v['fp32_o']['outcomes']}"
            + ("" if base_failed else " (the baseline did not fail at these seeds, so the test is weak)")))
    return c


def run(scale: str, cfg: dict) -> dict:
    p = plan(scale, cfg)
    runs = [dict(arm=a, seed=s, lr=p["lr"], attn=p["specs"][a]) for a in p["arms"] for s in p["arm_seeds"][a]]
    workers = proxy.default_workers(scale, len(runs))
    summaries, arrays, meta = proxy.run_arms(scale, runs, workers, steps=p["steps"])
    for s in summaries:                         # AttnSpec lists are not JSON: keep their labels
        if not isinstance(s["attn"], str):
            s["attn"] = [a.label if hasattr(a, "label") else str(a) for a in s["attn"]]
    v = verdicts(summaries)
    specs = {k: (val if isinstance(val, str) else [a.label for a in val]) for k, val in p["specs"].items()}
    data = dict(runs=summaries, verdicts=v, lr=p["lr"], steps=p["steps"], seeds=p["seeds"], arm_seeds=p["arm_seeds"],
                layer=p["layer"],
                heads=p["heads"], layer_why=p["layer_why"], specs=specs, claims=claims_from(v) if scale == "full" else {})
    return dict(data=data, arrays=arrays, config=dict(meta["base_config"], workers=workers, lr=p["lr"],
                                                      steps=p["steps"]),
                seeds=dict(torch=p["seeds"], data=[0]))
