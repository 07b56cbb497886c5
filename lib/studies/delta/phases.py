"""The δ-channel statistics of a `delta_capture` result by phase of training (chapters 4 and 5, issue 16).

Issue 16 asks for the statistics "at early, middle and late points of a healthy run and before the blow-up of an
8e-3 run". The experiment's verdicts (`lib.studies.delta.stats.claims`) pool every captured step; this module
splits the per-step arrays ("st__<stat>", (S, N, L, H)) into phases — consecutive thirds of the captured steps —
and describes each phase, pooled over seeds, per head. Nothing here is a test (a phase holds a handful of steps
per head, too few for the per-head Bonferroni tests of the whole run): the numbers describe, the verdicts stay the
whole-run ones.

* `onsets(res)`: per seed, the step at which `lib.training.outcome.classify` puts the loss's rise (None: none).
* `phase_stats(res, n_phases=3, before=None)`: one dict per phase — its step range, the share of rows with
  Δδ > 0, the per-head normalised bias, the share of O errors with sign(V) and their mean along sign(V) in ULPs,
  the share of dO·ΔO > 0, |Δδ|/|δ|, the share of tied-maximum rows, the rank-1 terms' cosine and coherence ρ², the
  share of (step, head) pushes on ‖W_Q‖₂ that are positive, and the largest σ₁(W_Q^h) at the phase's last step.
  before: {seed: step} — captures at or after that step are left out (the 8e-3 runs' blow-up onsets).
* `per_step(res, before=None)`: the same per-head quantities at every captured step (median and 10–90 % range over
  heads and seeds) — what `lib.studies.delta.figures.phase_figure` draws.
* `curve_identity(res, ref, arm)`: the largest |loss difference| between a capture run and the same seeds of
  another result's arm (0: the captures replayed the other result's trajectories bit for bit).
Values are floats, ints or plain strings, ready for `glue`.
"""
from __future__ import annotations

import warnings

import numpy as np

__all__ = ["PHASES", "onsets", "phase_stats", "per_step", "curve_identity"]

PHASES = ("early", "middle", "late")


def _a(res, name) -> np.ndarray:
    return np.asarray(res.arrays[name], dtype=np.float64)


def _med(x) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmedian(np.asarray(x, dtype=np.float64)))


def _ratio(num, den):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def onsets(res) -> dict:
    """{seed: onset step or None} from each run's loss and gradient-norm curves (`lib.training.outcome.classify`,
    the warm-up of the result's configuration)."""
    from lib.training import outcome
    warmup = int((getattr(res, "meta", {}) or {}).get("config", {}).get("warmup", 0) or
                 res.data.get("config", {}).get("warmup", 0))
    loss, gn = _a(res, "loss"), _a(res, "grad_norm")
    out = {}
    for i, r in enumerate(res.data["runs"]):
        c = outcome.classify(loss[i][np.isfinite(loss[i])], gn[i][np.isfinite(loss[i])], warmup)
        out[int(r["seed"])] = None if c["onset"] is None else int(c["onset"])
    return out


def _mask(res, before) -> np.ndarray:
    """(S, N) True where a captured step exists and lies before the seed's `before` step."""
    steps = _a(res, "steps")
    ok = np.isfinite(steps)
    if before:
        for i, r in enumerate(res.data["runs"]):
            b = before.get(int(r["seed"]))
            if b is not None:
                ok[i] &= steps[i] < b
    return ok


def _phase_index(res, n_phases: int) -> np.ndarray:
    """(S, N) phase of each captured step: consecutive, equal thirds (for n_phases = 3) of each seed's captures."""
    steps = _a(res, "steps")
    idx = np.full(steps.shape, -1)
    for s in range(steps.shape[0]):
        n = int(np.isfinite(steps[s]).sum())
        idx[s, :n] = np.minimum(np.arange(n) * n_phases // max(n, 1), n_phases - 1)
    return idx


def _pooled(res, sel) -> dict:
    """Per head (L, H), pooled over the selected (seed, step) cells `sel` (S, N): the ratio statistics; and over
    cells and heads: the per-step statistics (flattened)."""
    def tot(name):
        return np.nansum(np.where(sel[:, :, None, None], _a(res, f"st__{name}"), 0.0), axis=(0, 1))

    def cells(name):
        x = _a(res, f"st__{name}")
        return x[sel]                                            # (cells, L, H)
    pos, neg = tot("n_pos"), tot("n_neg")
    return dict(
        rows_pos=_ratio(pos, pos + neg),
        nb=_ratio(tot("sum_dd"), tot("sum_abs_dd")),
        os_agree=_ratio(tot("n_os_agree"), tot("n_os_agree") + tot("n_os_disagree")),
        os_ulp=_ratio(tot("sum_os_ulp"), tot("n_os")),
        el_agree=_ratio(tot("n_el_agree"), tot("n_el_agree") + tot("n_el_disagree")),
        rel_dd=_ratio(tot("sum_abs_dd"), tot("sum_abs_delta")),
        tie=_ratio(tot("n_tie"), tot("n_rows")),
        tok_cos=cells("tokq_cos_unsigned"), tok_rho2=cells("tokq_rho2"),
        push_pos=cells("push_adam_q"))


def phase_stats(res, n_phases: int = 3, before: dict | None = None) -> list[dict]:
    """One dict per phase (see the module's docstring): name, step_lo, step_hi, n_steps (captured steps, all
    seeds), rows_pos (share of rows with Δδ > 0, all heads), nb_med / nb_lo / nb_hi (normalised bias per head),
    os_agree_med, os_ulp_med, el_agree_med, rel_dd_med, tie_med (medians over heads), tok_cos_med, tok_rho2_med
    (medians over steps and heads), push_pos (share of (step, head) Adam-scaled pushes > 0), wq_max (largest
    σ₁(W_Q^h) over heads at the phase's last captured step, median over seeds)."""
    names = PHASES if n_phases == 3 else tuple(f"phase {i + 1}" for i in range(n_phases))
    ok, ph = _mask(res, before), _phase_index(res, n_phases)
    steps, wq = _a(res, "steps"), _a(res, "st__wq_sigma1")
    out = []
    for i, name in enumerate(names):
        sel = ok & (ph == i)
        if not sel.any():
            continue
        p = _pooled(res, sel)
        pos = _a(res, "st__n_pos")[sel].sum()
        neg = _a(res, "st__n_neg")[sel].sum()
        push = p["push_pos"][np.isfinite(p["push_pos"]) & (p["push_pos"] != 0)]
        last = [np.nanmax(wq[s, np.nonzero(sel[s])[0][-1]]) for s in range(sel.shape[0]) if sel[s].any()]
        out.append(dict(
            name=name, step_lo=int(np.min(steps[sel])), step_hi=int(np.max(steps[sel])), n_steps=int(sel.sum()),
            rows_pos=float(pos / (pos + neg)) if pos + neg else float("nan"),
            nb_med=_med(p["nb"]), nb_lo=float(np.nanmin(p["nb"])), nb_hi=float(np.nanmax(p["nb"])),
            os_agree_med=_med(p["os_agree"]), os_ulp_med=_med(p["os_ulp"]), el_agree_med=_med(p["el_agree"]),
            rel_dd_med=_med(p["rel_dd"]), tie_med=_med(p["tie"]),
            tok_cos_med=_med(p["tok_cos"]), tok_rho2_med=_med(p["tok_rho2"]),
            push_pos=float((push > 0).mean()) if push.size else float("nan"),
            wq_max=_med(last)))
    return out


PER_STEP = ("rows_pos", "nb", "os_agree", "tok_cos", "wq")
BAND = (10, 90)        # the percentiles over heads and seeds that bound a per-step band


def per_step(res, before: dict | None = None) -> dict:
    """At every captured step index (seeds pooled where their steps coincide): {"step": (N,), stat: (N, 3) —
    10th percentile, median, 90th percentile over heads and seeds} for rows_pos (share of rows with Δδ > 0),
    nb (normalised bias), os_agree (share of O errors with sign(V)), tok_cos (rank-1 terms' mean cosine) and wq
    (σ₁(W_Q^h)); steps at or after a seed's `before` step are NaN for that seed."""
    ok = _mask(res, before)
    steps = _a(res, "steps")
    with np.errstate(invalid="ignore", divide="ignore"):
        per = dict(rows_pos=_ratio(_a(res, "st__n_pos"), _a(res, "st__n_pos") + _a(res, "st__n_neg")),
                   nb=_ratio(_a(res, "st__sum_dd"), _a(res, "st__sum_abs_dd")),
                   os_agree=_ratio(_a(res, "st__n_os_agree"), _a(res, "st__n_os_agree") + _a(res, "st__n_os_disagree")),
                   tok_cos=_a(res, "st__tokq_cos_unsigned"), wq=_a(res, "st__wq_sigma1"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)         # a step no seed reached is NaN
        out = {"step": np.nanmax(np.where(ok, steps, np.nan), axis=0)}
    for k, x in per.items():
        x = np.where(ok[:, :, None, None], x, np.nan)                 # (S, N, L, H)
        x = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)              # (N, S·L·H)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out[k] = np.nanpercentile(x, [BAND[0], 50, BAND[1]], axis=1).T      # (N, 3)
    return out


def curve_identity(res, ref, arm: str) -> float:
    """Largest |loss difference| over the common steps between each run of `res` and the run of `ref` (a training
    result with "<id>__loss" arrays and runs {"id", "arm", "seed"}) of arm `arm` and the same seed; NaN where no
    seed is shared."""
    loss = _a(res, "loss")
    refs = {int(r["seed"]): r["id"] for r in ref.data["runs"] if r["arm"] == arm and not r.get("tag")}
    diffs = []
    for i, r in enumerate(res.data["runs"]):
        rid = refs.get(int(r["seed"]))
        if rid is None or f"{rid}__loss" not in ref.arrays:
            continue
        b = np.asarray(ref.arrays[f"{rid}__loss"], np.float64)
        n = min(len(b), int(np.isfinite(loss[i]).sum()))
        diffs.append(float(np.max(np.abs(loss[i][:n] - b[:n]))))
    return max(diffs) if diffs else float("nan")
