"""Reading the precision dial across its results: runs of unequal length compared at a common step horizon, and
repeated runs checked bit for bit (chapters 6 and 7, and the claims table).

The dial's results (`precision_dial`, `precision_dial_fine`, `precision_dial_sr`, `precision_dial_seeds`) ran under a
wall-clock budget with different numbers of processes sharing the GPU (and SR runs several times slower per step), so
their runs reached different step counts. A run that "trained" for its shorter time and one that "exploded" after
that time are not comparable. `at_common_horizon` re-judges every run of one width m on its first H_m
steps, H_m = the fewest steps of any finite run at that m, with the same rule (`lib.training.outcome.classify`).

* `at_common_horizon(res_list)`: `merged_table` with every row re-judged at its width's horizon.
* `facts(table)`: `_facts` of such a table plus the widths where SR failed first, and counts.
* `repeats(res_list)`: runs with the same arm, seed and LR in several results, and whether their loss curves are
  bit-identical over the steps they share.
* `sr_error_ratio(m)`: RMS rounding error of SR over RNE at m mantissa bits (how much noisier SR is).
"""
from __future__ import annotations

from lib.training import outcome  # noqa: E402  (one definition of a failed run)


import numpy as np

from lib.training import horizon as horizon_
from lib.training import runs
from lib.training.runs import result_arrays

__all__ = ["KIND_SUFFIX", "SR_BACKWARD_BUG", "at_common_horizon", "facts", "merged_table", "repeats",
           "sr_error_ratio", "sr_valid", "verdicts"]


# arm name of kind k at m bits: f"paper_m{m}{KIND_SUFFIX[k]}"
KIND_SUFFIX = {"rne": "", "sr": "_sr", "fix": "+fix", "dfp32o": "_dfp32o", "sm32": "_sm32", "fixsm32": "+fix_sm32"}
# Git commits of committed results whose SR arms ran with the SR backward bug (fixed in 8b8d26d): see the docstring.
SR_BACKWARD_BUG = frozenset({"675045d", "697579c076d22d4b7043a2023b0b624d6511b224"})


def sr_valid(meta: dict) -> bool:
    """False for a result recorded at a commit with the SR backward bug (its SR arms measure a broken gradient)."""
    return meta.get("git_commit") not in SR_BACKWARD_BUG


def verdicts(summaries: list[dict], bits, sr_valid: bool = True) -> dict:
    """Per m: the outcomes over seeds of every arm kind (keys of `KIND_SUFFIX`; empty where not run) and what they
    say (see `lib.studies.dial.precision_dial`'s docstring). SR outcomes that measure a broken gradient are reported under "invalid" and not
    used: all of them with sr_valid=False, and any summary carrying "valid": False (`merged_table` marks those)."""
    def ok(s):
        return s.get("valid", True) and (sr_valid or not s["arm"].endswith(KIND_SUFFIX["sr"]))

    def outcomes(arm, good=True):
        return [s["outcome"] for s in summaries if s["arm"] == arm and ok(s) == good]

    def failed(oc):
        return bool(oc) and all(outcome.failed(o) for o in oc)

    def trained(oc):
        return bool(oc) and all(o in ("stable", "degraded") for o in oc)

    def words(oc):
        return "failed" if failed(oc) else "trained" if trained(oc) else "was mixed"

    def fix_words(fix):
        return "the fix did not prevent it" if failed(fix) else "the fix trained" if trained(fix) else \
            "the fix was not run" if not fix else "the fix was mixed"

    out = {}
    for m in bits:
        oc = {k: outcomes(f"paper_m{m}{suf}") for k, suf in KIND_SUFFIX.items()}
        bad = {k: outcomes(f"paper_m{m}{suf}", good=False) for k, suf in KIND_SUFFIX.items()}
        rne, sr, fix = oc["rne"], oc["sr"], oc["fix"]
        if not failed(rne):
            reading = "RNE did not fail: no test of the bias at this m"
            if failed(fix):
                reading += "; the fix itself failed"
        elif not sr:
            reading = f"RNE failed and {fix_words(fix)}; SR {'invalid' if bad['sr'] else 'not run'}: bias vs " \
                      "coarseness undecided"
        elif failed(sr):
            reading = "SR failed too: coarseness alone suffices, the bias is not isolated"
        elif trained(sr) and trained(fix):
            reading = "only RNE failed: the bias, not the coarseness, made it fail, and the fix removed it"
        elif trained(sr):
            reading = "RNE failed, SR trained (bias), but the fix did not help"
        else:
            reading = "mixed"
        if oc["sm32"]:
            reading += f"; RNE with S − m in FP32 {words(oc['sm32'])}"
        if oc["fixsm32"]:
            reading += f"; the fix with S − m in FP32 {words(oc['fixsm32'])}"
        out[str(m)] = dict(oc, invalid={k: v for k, v in bad.items() if v}, sr_valid=not bad["sr"], reading=reading)
    return out


def merged_table(res_list) -> dict:
    """The dial's per-m outcomes over several results (e.g. `precision_dial` and `precision_dial_fine`).

    res_list: `lib.book.results.Result`s of the dial experiments. Returns {"bits": sorted m, "lr": [...], "rows": [{"m", "kind",
    "id", "arm", "seed", "outcome", "onset", "steps", "final", "valid", "result"}], "controls": [...same keys, m None...],
    "verdicts": {m: verdict (see `verdicts`) over all the results' runs, SR ignored where a result has the SR backward
    bug}}."""
    rows, controls = [], []
    for res in res_list:
        ok_sr = sr_valid(res.meta)
        bits = res.data["bits"]
        by_arm = {f"paper_m{m}{suf}": (m, kind) for m in bits for kind, suf in KIND_SUFFIX.items()}
        for r in res.data["runs"]:
            rec = dict(id=r["id"], arm=r["arm"], seed=r["seed"], outcome=r["outcome"], onset=r["onset"], steps=r["steps"],
                       final=r["final"], result=res.name, lr=r["lr"])
            if r["arm"] in by_arm:
                m, kind = by_arm[r["arm"]]
                rows.append(dict(rec, m=m, kind=kind, valid=ok_sr or kind != "sr"))
            else:
                controls.append(dict(rec, m=None, kind="control", valid=True))
    bits = sorted({r["m"] for r in rows})
    # one reading per m over every result (e.g. RNE from one result, SR from another)
    verdicts_ = verdicts([dict(arm=r["arm"], outcome=r["outcome"], valid=r["valid"]) for r in rows], bits)
    return dict(bits=bits, lr=sorted({r["lr"] for r in rows + controls}), rows=rows, controls=controls,
                verdicts=verdicts_)


def _facts(table: dict) -> dict:
    """From `merged_table`: the widths m (sorted lists) at which every seed of a kind failed or trained —
    {"<kind>_failed", "<kind>_trained" for every kind of `KIND_SUFFIX`, "fix_breaks" (RNE trained, the fix failed),
    "dfp32o_run"} — so prose can state outcomes without typing them. A kind not run at m is in neither list."""
    def failed(oc):
        return bool(oc) and all(outcome.failed(o) for o in oc)

    def trained(oc):
        return bool(oc) and all(o in ("stable", "degraded") for o in oc)

    v = {int(m): x for m, x in table["verdicts"].items()}
    pick = lambda cond: sorted(m for m, x in v.items() if cond(x))  # noqa: E731
    out = {}
    for k in KIND_SUFFIX:
        out[f"{k}_failed"] = pick(lambda x: failed(x.get(k, [])))
        out[f"{k}_trained"] = pick(lambda x: trained(x.get(k, [])))
    out["fix_breaks"] = pick(lambda x: trained(x["rne"]) and failed(x["fix"]))
    out["dfp32o_run"] = pick(lambda x: bool(x.get("dfp32o")))
    return out


def at_common_horizon(res_list) -> dict:
    """`merged_table(res_list)` with every dial row re-judged on its first H_m steps.

    res_list: `lib.book.results.Result`s of the dial experiments (with arrays). H_m is the fewest steps of any valid run
    at width m whose loss stayed finite (`lib.training.horizon`; a run stopped by non-finite values keeps its outcome: it failed
    before H_m; an invalid SR run keeps its whole-run outcome: it is in no verdict). Returns the merged table with,
    per row, "outcome"/"onset" at the horizon, "full_outcome"/"full_steps"/"full_onset" over the whole run and
    "horizon"; the table gains "horizon": {m: H_m} and its "verdicts" are recomputed from the re-judged rows.
    Controls are left whole (they are not part of any verdict)."""
    t = merged_table(res_list)
    arr = result_arrays(res_list)
    warm = {res.name: int(res.meta["config"]["warmup"]) for res in res_list}
    horizon = {m: horizon_.common_horizon([r for r in t["rows"] if r["m"] == m and r["valid"]]) for m in t["bits"]}
    rows = [horizon_.rejudge(r, arr[(r["result"], f"{r['id']}__loss")], arr[(r["result"], f"{r['id']}__grad_norm")],
                             warm[r["result"]], horizon[r["m"]] if r["valid"] else None) for r in t["rows"]]
    v = verdicts([dict(arm=r["arm"], outcome=r["outcome"], valid=r["valid"]) for r in rows],
                                t["bits"])
    # `verdicts` reads SR only where RNE failed; where SR failed in a larger share of its seeds than RNE, the
    # unbiased rounding did worse than the biased one (the opposite of the bias hypothesis), so say so
    cnt = _counts(v)
    for m in _sr_worse(cnt):
        sr, rne = cnt[m]["sr"], cnt[m]["rne"]
        v[str(m)]["reading"] += (f"; SR failed in {sr['failed']} of {sr['n']} seeds where RNE failed in "
                                 f"{rne['failed']} of {rne['n']}: the unbiased but noisier rounding failed more often")
    return dict(t, rows=rows, horizon=horizon, verdicts=v)


def _counts(verdicts: dict) -> dict:
    """{m: {kind: {"n": runs, "failed": exploded or non-finite}}} over the kinds run at m, from `verdicts`."""
    return {int(m): {k: dict(n=len(x[k]), failed=sum(outcome.failed(o) for o in x[k]))
                     for k in KIND_SUFFIX if x.get(k)} for m, x in verdicts.items()}


def _sr_worse(count: dict) -> list[int]:
    """Widths where SR failed in a larger fraction of its seeds than RNE did, from `_counts`."""
    return sorted(m for m, c in count.items() if "sr" in c and "rne" in c
                  and c["sr"]["failed"] / c["sr"]["n"] > c["rne"]["failed"] / c["rne"]["n"])


def facts(table: dict) -> dict:
    """`_facts` of an `at_common_horizon` table, plus per m and kind the counts {"n", "failed"}
    ("count": {m: {kind: ...}}), "sr_fails_first": the widths where every SR seed failed and every RNE seed
    trained, and "sr_worse": the widths where SR failed in a larger fraction of its seeds than RNE."""
    f = _facts(table)
    f["count"] = _counts(table["verdicts"])
    f["sr_fails_first"] = sorted(set(f["rne_trained"]) & set(f["sr_failed"]))
    f["sr_worse"] = _sr_worse(f["count"])
    return f


def repeats(res_list) -> list[dict]:
    """`lib.training.runs.repeats` over dial results, SR runs with the SR backward bug left out (a run with the bug
    is not a repeat of a fixed one)."""
    return runs.repeats(res_list, skip=lambda res, r: r["arm"].endswith(KIND_SUFFIX["sr"]) and not sr_valid(res.meta))


def sr_error_ratio(m: int, n: int = 1 << 20, seed: int = 0) -> dict:
    """RMS rounding error of stochastic rounding over round-to-nearest-even, to m mantissa bits, in units of the
    ulp at m bits, on n log-uniform positive FP32 values in [1, 2) (the error in ulps does not depend on the binade).

    Returns {"m", "rms_rne_ulp", "rms_sr_ulp", "ratio", "bits_equiv" = log2(ratio): how many mantissa bits SR's
    extra noise costs}. Theory: RNE error is uniform on ±½ ulp (RMS 1/√12 ≈ 0.289), SR's has variance f(1−f) for
    a value f ulp above the grid point below (RMS 1/√6 ≈ 0.408), a ratio of √2 (half a bit)."""
    from lib.fp.reference import round_rne, round_stochastic
    if not 1 <= m <= 22:
        raise ValueError(f"m must lie in 1..22 mantissa bits, got {m}")
    rng = np.random.default_rng(seed)
    x = np.exp2(rng.random(n)).astype(np.float32)
    ulp = 2.0 ** -m
    e_rne = (round_rne(x, m).astype(np.float64) - x) / ulp
    e_sr = (round_stochastic(x, m, rng=rng).astype(np.float64) - x) / ulp
    a, b = float(np.sqrt(np.mean(e_rne ** 2))), float(np.sqrt(np.mean(e_sr ** 2)))
    return dict(m=m, rms_rne_ulp=a, rms_sr_ulp=b, ratio=b / a, bits_equiv=float(np.log2(b / a)))
