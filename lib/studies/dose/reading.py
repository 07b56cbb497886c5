"""The δ-dose experiment read: failure thresholds λ* per component, the stage-2 rule, equal-RMS thresholds, the claim.

The runs (`delta_dose`, `delta_dose_seeds`: headline-style results whose arms are dose specs
``dose/<placement>/c=<component>/lam=<λ>``, `lib.training.dose_backend`) train FP32 attention whose backward gets
δ = δ_FP32 + λ·c(Δδ). Per component c this module reads:

* ``outcomes(results)`` — {component: {λ: [outcome per seed]}} over the union of the results' runs;
* ``threshold(by_lam)`` — λ* = the smallest λ at which a majority of the seeds run there *failed*
  (`lib.training.outcome.failed`: exploded or non-finite; "degraded" is not a failure), with the bracket
  (λ_lo, λ*]: λ_lo the next smaller λ tested (None if λ* is the smallest). No failure: censored, λ* > max λ;
* ``stage2_runs(stage1)`` — the rule, fixed before stage 1 ran, for the seeds that make each threshold a
  3-seed one (`SEEDS_MORE` at λ_lo and λ*; a censored component also gets `EXTEND`× its largest λ at every seed; a
  component that failed at its smallest λ also gets that λ / `EXTEND` at every seed);
* ``rms(res, run_id)`` — the size of the injected error of one run: the median over its telemetry steps before the
  loss left its best (the onset; all steps if none) of RMS(λ·c(Δδ)) in the run's δ units, so thresholds of
  components of very different per-row size compare at equal injected size;
* ``claim_delta_bias_dose(results)`` — the verdict on `delta_bias_dose` (rule in the docstring);
* ``unstable_thresholds(results)`` — a second reading, chosen after the data were in and labelled so: the same
  thresholds with "did not stay stable" (degraded, exploded or non-finite) in place of "failed", because a dose that
  breaks training early leaves a run that never reaches a low loss and so cannot *rise* far from its best
  (`lib.training.outcome` calls it "degraded");
* ``run_table(results)`` — one row per run (component, λ, seed, outcome, best and final loss, injected RMS,
  ‖W_Q‖₂ spike), and ``wq_spike(res, run_id)`` — does the failure start as one layer's ‖W_Q‖₂ spike?
"""
from __future__ import annotations

import math
import re

import numpy as np

from lib.training import outcome

COMPONENTS = ("true", "bias", "noise", "random", "flip")
SEEDS_MORE = (1, 2)     # stage 2's seeds (stage 1 ran seed 0): three seeds at each bracketing λ
EXTEND = 10.0           # factor by which stage 2 extends a grid that did not bracket the threshold
_SPEC = re.compile(r"^dose/(?P<body>.*)$")


def parse_dose(spec: str) -> tuple[str, float] | None:
    """(component, λ) of a dose spec string (defaults c = true, λ = 1, as the backend); None if not a dose spec."""
    m = _SPEC.match(spec or "")
    if not m:
        return None
    comp, lam = "true", 1.0
    for item in m.group("body").split("+")[0].split("/"):
        if item.startswith("c="):
            comp = item[2:]
        elif item.startswith("lam="):
            lam = float(item[4:])
    if comp not in COMPONENTS:
        raise ValueError(f"unknown dose component {comp!r} in {spec!r}")
    return comp, lam


def dose_spec(placement: str, comp: str, lam: float) -> str:
    """The spec string of one dose arm (inverse of `parse_dose`)."""
    if comp not in COMPONENTS or not (lam >= 0 and math.isfinite(lam)):
        raise ValueError(f"bad dose arm: component {comp!r}, λ {lam!r}")
    return f"dose/{placement}/c={comp}/lam={lam:g}"


def arm_name(comp: str, lam: float) -> str:
    return f"dose_{comp}_{lam:g}"


def _runs(results) -> list[tuple[dict, object]]:
    out = []
    for res in results:
        for r in res.data["runs"]:
            if not r.get("tag") and parse_dose(r.get("attn", "")) is not None:
                out.append((r, res))
    return out


def outcomes(results) -> dict:
    """{component: {λ: [(seed, outcome, run id)] sorted by seed}} over the dose runs of `results` (Result objects)."""
    out: dict = {}
    for r, _ in _runs(results):
        comp, lam = parse_dose(r["attn"])
        out.setdefault(comp, {}).setdefault(lam, []).append((int(r["seed"]), r["outcome"], r["id"]))
    return {c: {lam: sorted(v) for lam, v in sorted(d.items())} for c, d in out.items()}


def fails_at(cells: list) -> bool:
    """A λ counts as failing when a strict majority of the seeds run there failed."""
    n_fail = sum(outcome.failed(o) for _, o, _ in cells)
    return n_fail * 2 > len(cells)


def threshold(by_lam: dict) -> dict:
    """λ* and its bracket for one component from {λ: [(seed, outcome, id)]}: keys lam_star (None if censored),
    lam_lo (the next smaller λ tested, None if none), censored, n_seeds_lo / n_seeds_hi (seeds run at each end),
    fail_counts {λ: "failed/seeds"}."""
    lams = sorted(by_lam)
    failing = [lam for lam in lams if fails_at(by_lam[lam])]
    counts = {lam: f"{sum(outcome.failed(o) for _, o, _ in by_lam[lam])}/{len(by_lam[lam])}" for lam in lams}
    if not failing:
        top = lams[-1] if lams else None
        return dict(lam_star=None, lam_lo=top, censored=True, n_seeds_lo=len(by_lam.get(top, [])),
                    n_seeds_hi=0, fail_counts=counts)
    hi = failing[0]
    below = [lam for lam in lams if lam < hi]
    lo = below[-1] if below else None
    return dict(lam_star=hi, lam_lo=lo, censored=False, n_seeds_lo=len(by_lam[lo]) if lo is not None else 0,
                n_seeds_hi=len(by_lam[hi]), fail_counts=counts)


def stage2_runs(stage1_outcomes: dict) -> list[tuple[str, float, tuple]]:
    """The stage-2 plan from stage 1's {component: {λ: cells}}: [(component, λ, seeds)].

    Bracketed (λ_lo, λ*]: `SEEDS_MORE` at both. Censored (no failure up to λ_max): `SEEDS_MORE` at λ_max and seeds
    0 + `SEEDS_MORE` at `EXTEND`·λ_max. Failed already at the smallest λ: `SEEDS_MORE` at it and seeds 0 +
    `SEEDS_MORE` at λ_min / `EXTEND`."""
    plan = []
    all_seeds = (0, *SEEDS_MORE)
    for comp in COMPONENTS:
        if comp not in stage1_outcomes:
            continue
        t = threshold(stage1_outcomes[comp])
        lams = sorted(stage1_outcomes[comp])
        if t["censored"]:
            plan += [(comp, lams[-1], SEEDS_MORE), (comp, lams[-1] * EXTEND, all_seeds)]
        elif t["lam_lo"] is None:
            plan += [(comp, t["lam_star"] / EXTEND, all_seeds), (comp, t["lam_star"], SEEDS_MORE)]
        else:
            plan += [(comp, t["lam_lo"], SEEDS_MORE), (comp, t["lam_star"], SEEDS_MORE)]
    return plan


def rms(res, run_id: str) -> float:
    """Median RMS of the injected δ error λ·c(Δδ) of one run over its telemetry steps before the onset and its layers
    (δ units: the loss's gradient w.r.t. the attention output dotted with O, per row); NaN without telemetry."""
    key = f"{run_id}__dose_inj_rms"
    if key not in res.arrays:
        return float("nan")
    x = np.asarray(res.arrays[key], float)
    steps = np.asarray(res.arrays.get(f"{run_id}__step", np.arange(len(x))), float)
    run = next(r for r in res.data["runs"] if r["id"] == run_id)
    if r_onset := run.get("onset"):
        x = x[steps[: len(x)] < r_onset] if np.any(steps[: len(x)] < r_onset) else x[:1]
    x = x[np.isfinite(x) & (x > 0)]
    return float(np.median(x)) if len(x) else float("nan")


def natural_rms(results) -> float:
    """Median RMS of the placement's own Δδ (λ = 1, component true) over every dose run's pre-onset telemetry."""
    vals = []
    for r, res in _runs(results):
        key = f"{r['id']}__dose_dd_rms"
        if key in res.arrays:
            x = np.asarray(res.arrays[key], float)
            vals += list(x[np.isfinite(x) & (x > 0)][:10])   # early steps: every run is still healthy there
    return float(np.median(vals)) if vals else float("nan")


def thresholds(results) -> dict:
    """Per component: `threshold` plus the injected RMS at λ_lo and λ* (median over the seeds run there)."""
    outs = outcomes(results)
    by_id = {r["id"]: res for r, res in _runs(results)}
    table = {}
    for comp in COMPONENTS:
        if comp not in outs:
            continue
        t = threshold(outs[comp])
        for end, lam in (("lo", t["lam_lo"]), ("hi", t["lam_star"])):
            cells = outs[comp].get(lam, []) if lam is not None else []
            vals = [rms(by_id[i], i) for _, _, i in cells]
            vals = [v for v in vals if math.isfinite(v)]
            t[f"rms_{end}"] = float(np.median(vals)) if vals else None
        table[comp] = t
    return table


def _fmt_threshold(c: str, t: dict | None) -> str:
    if t is None:
        return f"{c}: not run"
    lo = "–" if t["lam_lo"] is None else f"{t['lam_lo']:g}"
    hi = f"> {t['lam_lo']:g} (none)" if t["censored"] else f"{t['lam_star']:g}"
    r = ""
    if t.get("rms_hi") is not None or t.get("rms_lo") is not None:
        r = f", injected RMS {_rms_span(t.get('rms_lo'), t.get('rms_hi'))}"
    counts = ", ".join(f"λ {k:g}: {v}" for k, v in t["fail_counts"].items())
    return f"{c} λ* {hi} (below: {lo}; broke/seeds {counts}{r})"


def prereg_verdict(results) -> str | None:
    """The rule committed before stage 1 ran (eca5fd5): with "failed" (exploded / non-finite) thresholds,
    "reproduced" when bias-only fails at an injected RMS below noise-only's largest unfailed λ, else "not
    reproduced"; "inconclusive" without bracketed 3-seed thresholds. Kept to report it beside the rule in use."""
    table = thresholds(results)
    need = ("bias", "noise")
    if not all(c in table and not table[c]["censored"] and table[c]["lam_lo"] is not None
               and table[c]["n_seeds_lo"] >= 3 and table[c]["n_seeds_hi"] >= 3 for c in need):
        return "inconclusive"
    b, n = table["bias"], table["noise"]
    if None in (b["rms_hi"], n["rms_lo"]):
        return "inconclusive"
    return "reproduced" if b["rms_hi"] < n["rms_lo"] else "not reproduced"


def claim_delta_bias_dose(results) -> dict | None:
    """The verdict on `delta_bias_dose` ("the bias of the δ error, not its size, sets the failure threshold").

    Thresholds by "did not stay stable" (`unstable_thresholds`), each end with ≥ 3 seeds where used. Two halves:
    * potency — bias-only breaks training at an injected RMS below the RMS at which every component with a 3-seed
      lower bracket (true, noise-only, random signs, flipped) still stayed stable;
    * the real error's threshold — the true error breaks at a smaller λ than noise-only (its bias removed): only
      then does the bias, rather than the size, set where the real error breaks.
    "reproduced": both; "partly": potency only (the bias is the more harmful part per unit size, but removing it does
    not move the true error's threshold: the size sets it); "not reproduced": no potency; "inconclusive": bias, noise
    or true lack a bracketed 3-seed threshold. This rule replaced the one committed before the runs
    (`prereg_verdict`), after reading them: that rule counted noise-only runs that never reached the FP32 arm's loss
    ("degraded") as surviving, and did not test the "not its size" half; its verdict is quoted in the evidence.
    None when there are no dose runs."""
    table = unstable_thresholds(results)
    if not table:
        return None
    ctx = _context(results)
    pre = prereg_verdict(results)
    evidence = ("thresholds where most seeds did not stay stable: " + "; ".join(
        _fmt_threshold(c, table.get(c)) for c in COMPONENTS if c in table)
        + f". {ctx} The rule fixed before the runs gave '{pre}'.")
    ok = all(c in table and not table[c]["censored"] and table[c]["n_seeds_hi"] >= 3 for c in ("bias", "noise", "true"))
    others = [c for c in COMPONENTS if c != "bias" and c in table and table[c]["lam_lo"] is not None
              and table[c]["n_seeds_lo"] >= 3 and table[c].get("rms_lo") is not None]
    if not ok or not others or table["bias"].get("rms_hi") is None:
        return {"status": "inconclusive", "evidence": "bias-only, noise-only and the true error need a 3-seed "
                                                      "threshold, and one other component a 3-seed λ below it; "
                                                      + evidence}
    potent = all(table["bias"]["rms_hi"] < table[c]["rms_lo"] for c in others)
    moves = table["true"]["lam_star"] < table["noise"]["lam_star"]
    status = "not reproduced" if not potent else ("reproduced" if moves else "partly")
    return {"status": status, "evidence": evidence}


def _g(x):
    return "?" if x is None else f"{x:.3g}"


def _rms_span(lo, hi) -> str:
    """The injected RMS below → at a threshold; only the known end where the other has no run (a threshold at the
    smallest λ tried has nothing below it)."""
    if lo is None or hi is None:
        return "—" if lo is None and hi is None else f"{_g(hi if lo is None else lo)}"
    return f"{_g(lo)} → {_g(hi)}"


def _context(results) -> str:
    runs = [r for r, _ in _runs(results)]
    if not runs:
        return ""
    seeds = sorted({int(r["seed"]) for r in runs})
    steps = max(r["steps"] for r in runs)
    res0 = results[0]
    placement = runs[0]["attn"].split("/c=")[0].removeprefix("dose/")
    return (f"Regime: FP32 attention + dosed δ error of {placement}, LR {res0.data['lr']:g}, {steps} steps, seeds "
            f"{seeds}; a run broke when it did not stay stable (degraded, exploded or non-finite); λ* = smallest λ at which most of its "
            f"seeds broke.")


def unstable_thresholds(results) -> dict:
    """`thresholds` with "did not stay stable" (a majority of seeds not `outcome.stayed_stable`) as the break: the
    post-hoc reading (see the module docstring). Same keys; "lam_star" is the smallest λ at which most seeds broke."""
    outs = outcomes(results)
    relabel = {c: {lam: [(s, "exploded" if not outcome.stayed_stable(o) else o, i) for s, o, i in cells]
                   for lam, cells in d.items()} for c, d in outs.items()}
    table = {}
    by_id = {r["id"]: res for r, res in _runs(results)}
    for comp in COMPONENTS:
        if comp not in relabel:
            continue
        t = threshold(relabel[comp])
        for end, lam in (("lo", t["lam_lo"]), ("hi", t["lam_star"])):
            vals = [rms(by_id[i], i) for _, _, i in (relabel[comp].get(lam, []) if lam is not None else [])]
            vals = [v for v in vals if math.isfinite(v)]
            t[f"rms_{end}"] = float(np.median(vals)) if vals else None
        table[comp] = t
    return table


def wq_spike(res, run_id: str) -> dict:
    """Does a run's ‖W_Q‖₂ growth start in one layer? At the last telemetry step before the onset (or the last step
    if none): per layer the growth g_l = ‖W_Q^l‖₂(t) / ‖W_Q^l‖₂(0) (the layer's concatenated heads); returns
    {"layer": argmax g, "growth_max", "growth_median", "ratio": max g / median g (≫ 1: one layer's spike), "step"}."""
    key = f"{run_id}__wq_norm_layer"
    if key not in res.arrays:
        return dict(layer=None, growth_max=float("nan"), growth_median=float("nan"), ratio=float("nan"), step=None)
    w = np.asarray(res.arrays[key], float)
    steps = np.asarray(res.arrays[f"{run_id}__step"], float)
    run = next(r for r in res.data["runs"] if r["id"] == run_id)
    onset = run.get("onset")
    idx = np.nonzero(steps <= onset)[0][-1] if onset is not None and np.any(steps <= onset) else len(steps) - 1
    g = w[idx] / w[0]
    return dict(layer=int(np.argmax(g)), growth_max=float(g.max()), growth_median=float(np.median(g)),
                ratio=float(g.max() / np.median(g)), step=int(steps[idx]))


def run_table(results) -> list[dict]:
    """One row per dose run of `results`, sorted by component, λ, seed."""
    rows = []
    for r, res in _runs(results):
        comp, lam = parse_dose(r["attn"])
        sp = wq_spike(res, r["id"])
        rows.append(dict(component=comp, lam=lam, seed=int(r["seed"]), outcome=r["outcome"], best=r["best"],
                         final=r["final"], onset=r.get("onset"), rms=rms(res, r["id"]), spike_layer=sp["layer"],
                         spike_ratio=sp["ratio"], wq_growth_max=sp["growth_max"], id=r["id"],
                         result=res.name))
    order = {c: i for i, c in enumerate(COMPONENTS)}
    return sorted(rows, key=lambda x: (order[x["component"]], x["lam"], x["seed"]))


def reference_runs(results) -> list[tuple[dict, object]]:
    """The λ = 0 reference runs (FP32 attention, not dose specs) of `results`: [(run summary, result)]."""
    return [(r, res) for res in results for r in res.data["runs"]
            if not r.get("tag") and parse_dose(r.get("attn", "")) is None]


def chapter_numbers(results) -> dict:
    """The numbers chapter 5 quotes about the dose (every one computed here): thresholds (did-not-stay-stable
    reading) and their injected-RMS brackets per component, the bias component's size per unit λ relative to the
    true error's, the ‖W_Q‖₂ spike ratios of broken runs, the FP32 reference, both verdicts; the δ error's placement
    in words and the seeds of stage 1 (the first result) and stage 2 ("delta_dose_seeds")."""
    t = unstable_thresholds(results)
    rows = run_table(results)
    out = {}
    for c, v in t.items():
        out[f"{c}_lam"] = "none" if v["censored"] else f"{v['lam_star']:g}"
        out[f"{c}_lo"] = "–" if v["lam_lo"] is None else f"{v['lam_lo']:g}"
        out[f"{c}_rms_lo"] = _g(v.get("rms_lo"))
        out[f"{c}_rms_hi"] = _g(v.get("rms_hi"))
        out[f"{c}_counts"] = ", ".join(f"λ {k:g}: {n}" for k, n in v["fail_counts"].items())
    per_lam = {}
    for c in COMPONENTS:   # size per unit λ, from runs that stayed stable (their injected error is the natural one)
        x = [r["rms"] / r["lam"] for r in rows if r["component"] == c and outcome.stayed_stable(r["outcome"])
             and math.isfinite(r["rms"])]
        per_lam[c] = float(np.median(x)) if x else float("nan")
    out["bias_share"] = per_lam["bias"] / per_lam["true"] if per_lam.get("true") else float("nan")
    broke = [r for r in rows if not outcome.stayed_stable(r["outcome"]) and math.isfinite(r["spike_ratio"])]
    out["spike_med"] = float(np.median([r["spike_ratio"] for r in broke])) if broke else float("nan")
    out["spike_max"] = float(max(r["spike_ratio"] for r in broke)) if broke else float("nan")
    out["n_broke"] = len(broke)
    out["n_runs"] = len(rows)
    refs = reference_runs(results)
    out["ref_best"] = float(refs[0][0]["best"]) if refs else float("nan")
    v = claim_delta_bias_dose(results)
    out["verdict"] = v["status"] if v else "not yet tested"
    out["prereg"] = prereg_verdict(results) if rows else "not yet tested"
    steps = [r["steps"] for r, _ in _runs(results)]
    out["steps"] = max(steps) if steps else 0
    out["seeds"] = ", ".join(str(s) for s in sorted({r["seed"] for r in rows}))
    out["lr"] = f"{results[0].data['lr']:g}" if results else "?"
    from lib.training.spec import describe
    out["placement"] = describe(results[0].data.get("placement", "paper")) if results else "?"
    stage = {r.name: r for r in results}             # stage 1 is the registered result, stage 2 its seeds
    out["stage1_seeds"] = ", ".join(map(str, results[0].data.get("seeds", []))) if results else "none"
    s2 = stage.get("delta_dose_seeds")
    out["stage2_seeds"] = ", ".join(map(str, s2.data.get("seeds", []))) if s2 is not None else "none (not run)"
    return out


def threshold_table_md(results) -> str:
    """Markdown table of the thresholds per component, both readings."""
    a, b = unstable_thresholds(results), thresholds(results)
    lines = ["| component | λ* (did not stay stable) | λ below it | broke / seeds per λ | injected RMS below → at λ* "
             "| λ* (failed: exploded or non-finite) |", "|---|---|---|---|---|---|"]
    for c in COMPONENTS:
        if c not in a:
            continue
        u, f = a[c], b[c]
        star = "none" if u["censored"] else f"{u['lam_star']:g}"
        lo = "–" if u["lam_lo"] is None else f"{u['lam_lo']:g}"
        counts = ", ".join(f"{k:g}: {n}" for k, n in u["fail_counts"].items())
        fstar = f"none up to {f['lam_lo']:g}" if f["censored"] else f"{f['lam_star']:g}"
        lines.append(f"| {c} | {star} | {lo} | {counts} | {_rms_span(u.get('rms_lo'), u.get('rms_hi'))} | {fstar} |")
    return "\n".join(lines)
