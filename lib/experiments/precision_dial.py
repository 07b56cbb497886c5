"""Does a *biased* attention rounding make training fail, at a learning rate where BF16 trains? (chapter 6)

At our scale no BF16 learning rate separates the paper placement from the other arms (`lr_sweep`): where it
fails, FP32 attention fails too. This experiment amplifies the paper's mechanism instead of the learning rate.
Chapter 1 measured that the tie bias of P̄V scales with the unit in the last place (×2 per mantissa bit removed);
here every rounding point of the paper placement rounds to m < 7 mantissa bits (the same 8-bit exponent: the
"precision dial"), at an LR where BF16 and FP32 attention train, and three arms per m separate the bias from the
noise:

* ``paper_m{m}``      — the paper placement at m bits, round-to-nearest-even (ties at P̄ = 1, biased P̄V);
* ``paper_m{m}_sr``   — the same rounding points with *stochastic* rounding: as coarse (larger per-element
                        variance than RNE) but unbiased, so it keeps the noise and removes the bias;
* ``paper_m{m}+fix``  — RNE plus the β fix on every repeated row max (``fix_split``: also across our 64-key tiles,
                        which is what the authors' 512-key tiles do on a 512-token row), the paper's cure;
* ``paper_m{m}_dfp32o`` (at the smallest m only) — RNE, but δ from an FP32 recompute of O (the paper's δ-channel
                        ablation);
* ``paper_m{m}_sm32``  — RNE with the forward exponent arguments S − m in FP32 (every other point at m bits);
* ``paper_m{m}+fix_sm32`` — the same plus the fix. Chapter 7 (`lib.fp.fix_error`) measured that in the paper placement
                        the fix's shifted exponent argument S − β·r_m, rounded like S − m, multiplies the forward
                        error of O and the row-sum error of the backward P as r_m grows, and that computing S − m in
                        FP32 removes that excess: this arm is the fix without its own rounding error;
* controls at the same LR, seed and batch order: ``paper`` (BF16, m = 7, native path) and ``fp32`` attention.

Reading: if ``paper_m`` fails while ``_sr`` and ``+fix`` train, the failure is caused by the bias (not by the
coarseness), and the fix removes it; if ``_sr`` fails as well, coarse rounding alone is enough and the test says
nothing about the bias. The dial is our amplification, not the paper's setting: BF16 (m = 7) is what the paper ran.

Results recorded before commit 8b8d26d (`SR_BACKWARD_BUG`) have invalid SR arms: the backward recomputed S with
other random bits than the forward, so its P was not the P that made O. `verdicts(..., sr_valid=False)` ignores them.

* ``full`` (one H100): m in $DIAL_BITS (default 3, 4, 5), seeds $DIAL_SEEDS (default 0; the controls at
  $DIAL_CONTROL_SEEDS, default the first seed; $DIAL_CONTROLS picks them: "paper,fp32" by default, "none" for a
  variant whose controls ran in another result), LR $DIAL_LR (default 5e-3), $DIAL_STEPS steps (default 3000) capped
  by $EXPLOSION_BUDGET_S wall seconds per run; $DIAL_ARMS picks the per-m arm kinds (`KINDS`; default rne, sr, fix,
  dfp32o); all runs concurrent. Every arm runs on the kernel's native path (BF16
  tensor-core operands rounded to m bits; `kernels/attention.py`). The first attempt ran the m < 7 arms on the
  emulated path (FP32 `ieee` matmuls): 0.21 steps/s against 3.59 for the native BF16 control, so in a 400 s budget
  no run left warm-up (results/full/precision_dial_emulated_run.log).
* ``ci`` (CPU): m = 3 only, 3 steps on the tiny proxy (proves the code path; no verdict).
"""
from __future__ import annotations

import os

from lib.training import outcome, proxy

NAME = "precision_dial"
DEPENDS = ["lib/experiments/precision_dial.py", "lib/training/proxy.py", "lib/training/train.py", "lib/training/model.py", "lib/training/data.py",
           "data/corpus/pystdlib.txt.xz", "kernels/*.py", "lib/fp/numerics.py"]

KINDS = ("rne", "sr", "fix", "dfp32o", "sm32", "fixsm32")   # per-m arm kinds (dfp32o only at the smallest m)
DEFAULT_KINDS = ("rne", "sr", "fix", "dfp32o")
# arm name of kind k at m bits: f"paper_m{m}{KIND_SUFFIX[k]}"
KIND_SUFFIX = {"rne": "", "sr": "_sr", "fix": "+fix", "dfp32o": "_dfp32o", "sm32": "_sm32", "fixsm32": "+fix_sm32"}
# Git commits of committed results whose SR arms ran with the SR backward bug (fixed in 8b8d26d): see the docstring.
SR_BACKWARD_BUG = frozenset({"675045d", "697579c076d22d4b7043a2023b0b624d6511b224"})


def sr_valid(meta: dict) -> bool:
    """False for a result recorded at a commit with the SR backward bug (its SR arms measure a broken gradient)."""
    return meta.get("git_commit") not in SR_BACKWARD_BUG


def arm_specs(m: int, kinds=KINDS, smallest: bool = True) -> dict[str, str]:
    """{arm name: attention spec string} of the per-m arms (see the module docstring)."""
    base = f"paper/mantissa_bits={m}"
    spec = {"rne": base, "sr": f"{base}/rounding=sr", "fix": f"{base}+fix_split",
            "dfp32o": f"{base}/delta_source=fp32_o", "sm32": f"{base}/round_s_minus_m=false",
            "fixsm32": f"{base}/round_s_minus_m=false+fix_split"}
    return {f"paper_m{m}{KIND_SUFFIX[k]}": spec[k] for k in kinds if k != "dfp32o" or smallest}


def plan(scale: str) -> dict:
    if scale == "full":
        bits = proxy.env_ints("DIAL_BITS", (3, 4, 5))
        seeds = proxy.env_ints("DIAL_SEEDS", (0,))
        lr = float(os.environ.get("DIAL_LR", "5e-3"))
        steps = int(os.environ.get("DIAL_STEPS", "3000"))
        kinds = tuple(os.environ.get("DIAL_ARMS", ",".join(DEFAULT_KINDS)).split(","))
        controls = {"paper": "paper", "fp32": "naive"}
        pick = os.environ.get("DIAL_CONTROLS", ",".join(controls))
        if pick != "none":
            bad_c = [c for c in pick.split(",") if c not in controls]
            if bad_c:
                raise ValueError(f"precision_dial: DIAL_CONTROLS must be 'none' or a subset of {list(controls)}; "
                                 f"got {pick!r}")
        controls = {} if pick == "none" else {c: controls[c] for c in pick.split(",")}
        cseeds = proxy.env_ints("DIAL_CONTROL_SEEDS", seeds[:1])
    else:
        bits, seeds, lr, steps, kinds = (3,), (0,), 1e-2, 3, KINDS
        controls = {"fp32": "naive"}
        cseeds = seeds
    bad = [k for k in kinds if k not in KINDS]
    if bad or not bits or any(not 1 <= m <= 6 for m in bits):
        raise ValueError(f"precision_dial: bits must lie in 1..6 and arms in {KINDS}; got {bits}, {kinds}")
    missing = proxy.kernel_available()
    if missing is not None:
        raise RuntimeError(f"precision_dial needs kernels.attention: {missing}")
    specs = {}
    for m in sorted(bits):
        specs |= arm_specs(m, kinds, smallest=m == min(bits))
    dial = dict(specs)
    specs |= controls
    return dict(bits=sorted(bits), seeds=list(seeds), control_seeds=list(cseeds), lr=lr, steps=steps,
                kinds=list(kinds), specs=specs, dial_arms=list(dial), control_arms=list(controls))


def verdicts(summaries: list[dict], bits, sr_valid: bool = True) -> dict:
    """Per m: the outcomes over seeds of every arm kind (keys of `KIND_SUFFIX`; empty where not run) and what they
    say (see the module docstring). SR outcomes that measure a broken gradient are reported under "invalid" and not
    used: all of them with sr_valid=False, and any summary carrying "valid": False (`merged_table` marks those)."""
    def ok(s):
        return s.get("valid", True) and (sr_valid or not s["arm"].endswith(KIND_SUFFIX["sr"]))

    def outcomes(arm, good=True):
        return [s["outcome"] for s in summaries if s["arm"] == arm and ok(s) == good]

    def failed(oc):
        return bool(oc) and all(o in ("exploded", "nonfinite") for o in oc)

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


def run(scale: str) -> dict:
    p = plan(scale)
    runs = [dict(arm=a, seed=s, lr=p["lr"], attn=p["specs"][a]) for a in p["dial_arms"] for s in p["seeds"]]
    runs += [dict(arm=a, seed=s, lr=p["lr"], attn=p["specs"][a]) for a in p["control_arms"]
             for s in p["control_seeds"]]
    workers = proxy.default_workers(scale, len(runs))
    summaries, arrays, meta = proxy.run_arms(scale, runs, workers, steps=p["steps"])
    data = dict(runs=summaries, bits=p["bits"], seeds=p["seeds"], control_seeds=p["control_seeds"], lr=p["lr"], steps=p["steps"], kinds=p["kinds"],
                specs=p["specs"], verdicts=verdicts(summaries, p["bits"]), wall_s_all_runs=meta["wall_s"],
                thresholds=dict(smooth=outcome.SMOOTH, rise_exploded=outcome.RISE_EXPLODED,
                                rise_degraded=outcome.RISE_DEGRADED, gn_spike=outcome.GN_SPIKE,
                                onset_rise=outcome.ONSET_RISE))
    return dict(data=data, arrays=arrays, config=dict(meta["base_config"], workers=workers, lr=p["lr"],
                                                      steps=p["steps"], plan=p),
                seeds=dict(torch=p["seeds"], data=[0]))


def merged_table(res_list) -> dict:
    """The dial's per-m outcomes over several results (e.g. `precision_dial` and `precision_dial_fine`).

    res_list: `lib.book.results.Result`s of this experiment. Returns {"bits": sorted m, "lr": [...], "rows": [{"m", "kind",
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


def facts(table: dict) -> dict:
    """From `merged_table`: the widths m (sorted lists) at which every seed of a kind failed or trained —
    {"<kind>_failed", "<kind>_trained" for every kind of `KIND_SUFFIX`, "fix_breaks" (RNE trained, the fix failed),
    "dfp32o_run"} — so prose can state outcomes without typing them. A kind not run at m is in neither list."""
    def failed(oc):
        return bool(oc) and all(o in ("exploded", "nonfinite") for o in oc)

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
