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
* ``claim_delta_bias_dose(results)`` — the verdict on `delta_bias_dose` (rule in the docstring).
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
    """Median RMS of the injected δ error λ·c(Δδ) of one run over its telemetry steps before the onset (δ units:
    the loss's gradient w.r.t. the attention output dotted with O, per row); NaN without telemetry."""
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


def claim_delta_bias_dose(results) -> dict | None:
    """The verdict on `delta_bias_dose` ("the bias of the δ error, not its size, sets the failure threshold").

    Needs the bias-only and noise-only thresholds bracketed (a failure and a λ below it) with ≥ 3 seeds at each end.
    Then, at equal injected RMS: "reproduced" when bias-only fails at an RMS below the one at which noise-only still
    stays up (rms_hi(bias) < rms_lo(noise)); "not reproduced" otherwise (noise fails at an equal or smaller size, or
    the two intervals overlap: at this grid's resolution size alone explains the thresholds). Censored or
    under-seeded: "inconclusive". None when there are no dose runs."""
    table = thresholds(results)
    if not table:
        return None
    ctx = _context(results)

    def fmt(c):
        t = table.get(c)
        if t is None:
            return f"{c}: not run"
        lo = "–" if t["lam_lo"] is None else f"{t['lam_lo']:g}"
        hi = f"> {t['lam_lo']:g} (no failure)" if t["censored"] else f"{t['lam_star']:g}"
        r = ""
        if t.get("rms_hi") is not None or t.get("rms_lo") is not None:
            r = f", RMS {_g(t.get('rms_lo'))}–{_g(t.get('rms_hi'))}"
        return f"{c}: λ* {hi} (below: {lo}; failed/seeds {', '.join(f'{k:g}:{v}' for k, v in t['fail_counts'].items())}{r})"

    evidence = "; ".join(fmt(c) for c in COMPONENTS if c in table) + f". {ctx}"
    need = ("bias", "noise")
    ok = all(c in table and not table[c]["censored"] and table[c]["lam_lo"] is not None
             and table[c]["n_seeds_lo"] >= 3 and table[c]["n_seeds_hi"] >= 3 for c in need)
    if not ok:
        return {"status": "inconclusive", "evidence": "bias-only and noise-only need a bracketed threshold with ≥ 3 "
                                                      "seeds at each end; " + evidence}
    b, n = table["bias"], table["noise"]
    if None in (b["rms_hi"], n["rms_lo"]):
        return {"status": "inconclusive", "evidence": "no injected-RMS telemetry; " + evidence}
    status = "reproduced" if b["rms_hi"] < n["rms_lo"] else "not reproduced"
    return {"status": status, "evidence": evidence}


def _g(x):
    return "?" if x is None else f"{x:.3g}"


def _context(results) -> str:
    runs = [r for r, _ in _runs(results)]
    if not runs:
        return ""
    seeds = sorted({int(r["seed"]) for r in runs})
    steps = max(r["steps"] for r in runs)
    res0 = results[0]
    placement = runs[0]["attn"].split("/c=")[0].removeprefix("dose/")
    return (f"Regime: FP32 attention + dosed δ error of {placement}, LR {res0.data['lr']:g}, {steps} steps, seeds "
            f"{seeds}; failed = exploded or non-finite; λ* = smallest λ failing in a majority of its seeds.")
