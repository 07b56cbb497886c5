"""Reading the channel and remedy arms of GPT-2 against the comparison they change one thing of.

Every channel or remedy entry (`gpt2_delta`, `gpt2_remedy_o32`, `gpt2_remedy_fix`, … and their seed-1 twins)
trains GPT-2 124M exactly as the comparison (`gpt2_arms` and its seeds) does, so each of its arms has a *baseline*:
the comparison's arm it differs from in one thing, at the same seed (the registry's `rules["baseline"]`). This
module reads them by the rules the registry fixed before the runs:

* `arm_rows`: one row per arm and seed — its steps and failure (the comparison's failure rule, `outcomes`), its
  baseline's, and layer 2's largest logit as a ratio to FP32 attention of the same seed at the last growth step
  the three runs reached, beside the baseline's ratio and FP32 attention's own seed-to-seed spread there;
* `verdicts`: per arm, whether it prevents its baseline's failure (`channels.prevents`);
* `claim_verdicts`: the paper's claims these arms test (δ is the channel; O in FP32 stabilises; the β fix
  stabilises), "reproduced" only when the arm prevents the failure in two or more seeds where the baseline fails
  (the book's seeds ≥ 2), "partly" in one;
* `table`, `glue_numbers`: what chapter 2c shows.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from lib.studies.gpt2 import channels
from lib.studies.gpt2.reading import (CHAIN_ARMS, FOCUS_LAYER, at_step, cfg_of, fp32_spread, layer_series,
                                      outcomes, probe_split, rerun_pair, series, share_words)

__all__ = ["REMEDY_GROUPS", "CLAIM_ARMS", "SHORT", "PAPER_REMEDIES", "FIX_ARMS", "advice_words", "pending_words",
           "beta_growth_words",
           "model_words", "census_totals", "bound_words", "bound_removes_conjunction",
           "EXACT_ARMS", "step_costs", "established", "merge_benches", "conj_error", "o_error_words", "zeroed_range",
           "zeroed", "zeroed_words", "dial_reading", "dial_lean_words", "cost_words", "fix_words", "device_words",
           "brief_words", "outcome_words", "AUTHORS_ARMS", "authors_words", "unrun_words",
           "authors_setting",
           "growth_words", "pending", "in_place", "arm_rows", "verdicts", "claim_verdicts", "table", "glue_numbers", "seed_view"]

# The registry's groups of channel and remedy entries this module reads (the injection is read by its own rule).
REMEDY_GROUPS = ("gpt2_delta", "gpt2_remedy_o32", "gpt2_remedy_fix", "gpt2_qknorm", "gpt2_authors_compiled",
                 "gpt2_authors_eager", "gpt2_dial")
# The paper's claims and the arms that test each: an arm decides a claim in the seeds where its baseline fails.
CLAIM_ARMS = {"delta_only_channel": ("paper_delta_fp32_o", "fa2_delta_dp_p_norm"),
              "fp32_o_stabilises": ("paper_o32",),
              "fix_stabilises": ("paper_fix_b2", "paper_fix_b2_exact", "paper_fix_b7_exact"),
              "gpt2_logit_bound": ("paper_qk",)}       # the book's control, read by the same rule

# The forms of the β fix, the paper's exact rule first (fix_words, o_error_words), and those by the exact rule.
FIX_ARMS = ("paper_fix_b7_exact", "paper_fix_b2_exact", "paper_fix_b2")
EXACT_ARMS = FIX_ARMS[:2]

# Short names for a figure's legend (the tables use the full description of each arm's spec).
SHORT = {"paper_delta_fp32_o": "paper placement, δ from an FP32 O", "fa2_delta_dp_p_norm": "FA2 placement, exact δ",
         "paper_o32": "paper placement, O in FP32", "paper_fix_b2": "paper placement, guarded fix (β = 2)",
         "paper_fix_b2_exact": "paper placement, exact-rule fix (β = 2)",
         "paper_fix_b7_exact": "paper placement, exact-rule fix (β = 7)",
         "paper_qk": "paper placement, capped QK-norm", "paper_s32": "paper placement, S in FP32",
         "paper_pl32": "paper placement, P̄ and ℓ in FP32",
         "authors_compiled": "the authors' code, compiled", "authors_fix_compiled": "the authors' code with their fix, "
         "compiled", "authors_eager": "the authors' code, eager", "authors_fix_eager": "the authors' code with their "
         "fix, eager"}
# The precision dial (dial_words): the paper placement with one of the roundings before the P̄V product taken away.
DIAL_ARMS = ("paper_s32", "paper_pl32")


def model_words(model: dict | None, base: dict | None = None) -> str:
    """What an arm's model (its configuration's ``model``) changes against the comparison's `base`, in words ("" where
    nothing a reader needs): the QK-norm, with the bound it puts on every logit (√D·g² for head dim D and gain or cap
    g: `lib.training.model`), and the positional code."""
    model, base = model or {}, base or {}
    out = []
    qk = model.get("qk_norm", False)
    if qk != base.get("qk_norm", False):
        bound = None
        if qk in ("fixed", "capped") and model.get("n_embd") and model.get("n_head"):
            bound = (model["n_embd"] // model["n_head"]) ** 0.5 * float(model.get("qk_gain", 1.0)) ** 2
        out.append({"capped": "a capped QK-norm", "fixed": "a QK-norm of fixed gain", True: "QK-norm (LayerNorm on q "
                    "and k)", False: "no QK-norm"}.get(qk, f"QK-norm {qk}")
                   + (f" that bounds every logit at {bound:g}" if bound else ""))
    pos = model.get("pos", "learned")
    if pos != base.get("pos", "learned"):
        out.append({"none": "no positional embedding", "rope": "rotary positions"}.get(pos, f"positions {pos}"))
    return ", ".join(out)


def _change(arm: str) -> str:
    """A change to the paper placement, named without it ("O in FP32"): every arm of `PAPER_REMEDIES` changes it."""
    return SHORT.get(arm, arm).removeprefix("paper placement, ")


def _words(spec: str) -> str:
    from lib.training.spec import describe
    if spec == "fp32_flash":        # a model-level spec (`lib.training.model.parse_spec`) the spec grammar lacks
        return CHAIN_ARMS["fp32"]
    return describe(spec, detail=True)


def _ratios(arrays: dict, label: str, ref: str, step: int) -> np.ndarray | None:
    """Every layer's largest logit of run `label` over that of run `ref` at census step `step`: (L,), or None."""
    a, b = layer_series(arrays, label), layer_series(arrays, ref)
    if step not in set(a["step"].tolist()) or step not in set(b["step"].tolist()):
        return None
    return a["logit"][at_step(a, step)] / b["logit"][at_step(b, step)]


def _ratio_at(arrays: dict, label: str, ref: str, step: int, layer: int) -> float | None:
    """Layer `layer`'s (1-based) largest logit of run `label` over that of run `ref` at census step `step`."""
    r = _ratios(arrays, label, ref, step)
    return None if r is None else float(r[layer - 1])


def _growth(arrays: dict, lab: str, blab: str, ref: str, steps, spread) -> tuple[int, int]:
    """The registered "removes the growth" reading of one seed: (how many (growth step, layer) pairs the baseline
    grows beyond FP32 attention's spread, in how many of those the arm stays within it), largest logits."""
    grown = within = 0
    for st in steps:
        a, b = _ratios(arrays, lab, ref, st), _ratios(arrays, blab, ref, st)
        if a is None or b is None or not spread or st not in spread:
            continue
        over = b > spread[st]["logit"]
        grown += int(over.sum())
        within += int((a[over] <= spread[st]["logit"][over]).sum())
    return grown, within


def conj_error(arrays: dict, label: str, until: int | None = None) -> dict | None:
    """O's error along sign(V) on the conjunction pairs that the chain probe of run `label` measured in its own
    training forward (`lib.training.chain_probe`: "err_v_sum", "err_v_agree", "n_conj" per event, probed layer and
    head), pooled over the events at steps below `until` (None: all): {"events", "n" (pairs), "mean" (ULP of O;
    positive along sign(V), away from zero), "along" (share of pairs whose error lies along sign(V))}; None without
    the probe or without a pair."""
    pre = f"{label}__probe__"
    if pre + "err_v_sum" not in arrays:
        return None
    steps = np.asarray(arrays[pre + "step"])
    keep = steps < until if until is not None else np.ones(len(steps), dtype=bool)
    ev, ag, n = (np.asarray(arrays[pre + k], dtype=np.float64)[keep] for k in ("err_v_sum", "err_v_agree", "n_conj"))
    ok = np.isfinite(ev) & np.isfinite(ag)
    total = float(n[ok].sum())
    if not total:
        return None
    return dict(events=int(keep.sum()), n=int(total), mean=float(ev[ok].sum()) / total,
                along=float(ag[ok].sum()) / total)


def census_totals(arrays: dict, label: str, until: int | None = None, placement: str = "authors") -> dict | None:
    """The census of run `label` in `placement` ("authors": the paper's rounding placement; "fa2") pooled over its
    events at steps below `until` (None: all): {"events", "n_conj" (conjunction pairs — tied maximum, the other keys'
    P̄V only in the sticky bit, V one-signed over the tied keys — summed over events, layers and heads), "max_logit"
    (the largest |S| any layer and head had), "tie_rate" (the largest share of a head's rows with a repeated
    maximum), "tied_share" (rows with a repeated maximum over all rows) and "window_share" (of those, the rows whose
    other keys' P̄V sets only the sticky bit: the window), pooled over layers and heads from the census's counts (None
    where it has none)}; None without a census or an event."""
    pre = f"{label}__census__"
    if pre + f"{placement}/n_conj" not in arrays:
        return None
    steps = np.asarray(arrays[pre + "step"])
    keep = steps < until if until is not None else np.ones(len(steps), dtype=bool)
    if not keep.any():
        return None
    n, big, tie = (np.asarray(arrays[pre + f"{placement}/{k}"], dtype=np.float64)[keep]
                   for k in ("n_conj", "max_logit", "tie_rate"))
    count = {k: float(np.nansum(np.asarray(arrays[pre + f"{placement}/{k}"], dtype=np.float64)[keep]))
             if pre + f"{placement}/{k}" in arrays else None for k in ("n_rows", "n_tied", "n_window")}
    return dict(events=int(keep.sum()), n_conj=int(np.nansum(n)), max_logit=float(np.nanmax(big)),
                tie_rate=float(np.nanmax(tie)),
                tied_share=count["n_tied"] / count["n_rows"] if count["n_tied"] is not None and count["n_rows"]
                else None,
                window_share=count["n_window"] / count["n_tied"] if count["n_window"] is not None and count["n_tied"]
                else None)


def _with(arrays: dict, label: str, results) -> dict:
    """`arrays` with run `label`'s arrays from the first of `results` that has them, where `arrays` lacks them (an
    entry's own reference arm may be another entry's: the QK-norm's FP32 attention with the same bound)."""
    key = f"{label}__census__step"
    if key in arrays:
        return arrays
    for res in results:
        if key in res.arrays:
            return arrays | {k: v for k, v in res.arrays.items() if k.split("__")[0] == label}
    return arrays


def in_place(remedies: list) -> list:
    """The channel and remedy results (`Result`s, each with `data["runs"]` labelled "<arm>:s<seed>") as the book reads
    them: where two results ran one arm at one seed, the run its wall budget stopped short of the horizon
    (`truncated_at`) is set aside and the one that ran further is read in its place (a rerun: same initialisation,
    batches and rules), as `reading.merge_seeds` does for the comparison. A result left without runs is dropped, one
    left with some is read with those only (a shallow copy; its arrays as they were); the order is kept. Two runs of
    one label of which the shorter was not cut short are refused (ValueError): neither is a rerun of the other."""
    import copy
    keep: dict = {}                      # label -> (index of its result, run)
    for i, res in enumerate(remedies):
        for run in res.data["runs"]:
            if "error" in run:
                continue
            old = keep.get(run["label"])
            if old is None:
                keep[run["label"]] = (i, run)
                continue
            keep[run["label"]] = old if rerun_pair(old[1], run)[0] is old[1] else (i, run)
    out = []
    for i, res in enumerate(remedies):
        runs = [r for r in res.data["runs"] if "error" in r or keep[r["label"]][0] == i]
        if len(runs) == len(res.data["runs"]):
            out.append(res)
        elif runs:
            view = copy.copy(res)
            view.data = dict(res.data, runs=runs)
            out.append(view)
    return out


def arm_rows(remedies, chain, layer: int = FOCUS_LAYER) -> list[dict]:
    """One row per arm and seed of the channel and remedy results `remedies` (`Result`s), read against `chain` (the
    comparison, a `merge_seeds` reading of every seed): {"entry", "arm", "words" (its spec in words), "spec" (the
    attention spec), "base_spec" (the baseline's, None when the comparison lacks it), "seed",
    "steps", "fail" (first failure step or None), "back" (steps until the loss was back, None when it never was),
    "base" (the baseline arm), "base_words", "base_steps", "base_fail", "base_back", "step" (the last registered
    growth step the arm, its baseline and FP32 attention all reached, or None), "ratio" and "base_ratio" (layer
    `layer`'s largest logit over FP32 attention's at that step), "spread" (FP32 attention's own seed-to-seed spread
    of that ratio there, None with one FP32 seed), "grown" ((n, k): the baseline grows n (growth step, layer) pairs'
    largest logits beyond that spread, the arm stays within it in k of them: it removes the growth when k = n > 0),
    "horizon" (the registered steps, None where the configuration has none), "cut" (the step its wall budget
    stopped it at, before the horizon, or None), "device" and "base_device" (the GPU each trained on, None unknown),
    "o_err" and "base_o_err" (`conj_error` of the arm and of its baseline over the steps before the baseline failed,
    or all steps where it did not), "census" and "base_census" (`census_totals` over the same steps, ties as BF16
    scores make them), "census_fa2" and "base_census_fa2" (the same in the FA2 placement: ties where FP32 scores give
    P̄ = 1 in BF16), "split" and
    "base_split" (`probe_split`, the error's part from the rounding of P̄V and the rest, over the same steps; None
    without the probe's split), "early" (where the arm failed before its baseline: {"step": its failure step,
    "o_err", "base_o_err"} over the steps before it; else None), "model"
    (`model_words`: what the arm's model changes, "" where nothing), "reference" (the FP32-attention arm its growth
    is read against: its entry's registered reference, the comparison's by default — a QK-norm arm's is FP32
    attention with the same bound), "ref_ran" (whether that reference ran at this seed)}.
    Arms whose baseline or reference run of the same seed is absent get
    None in those fields."""
    base_oc = outcomes(chain)
    base_gpu = {r["label"]: (r.get("versions") or {}).get("device") for r in chain.data["runs"]}
    crules = cfg_of(chain)["rules"]
    spread = fp32_spread(chain.arrays, chain.data["runs"], crules)
    base_spec = {a["label"]: a["attn"] for a in cfg_of(chain)["arms"]}
    rows = []
    for res in remedies:
        cfg = cfg_of(res)
        rules, spec = cfg["rules"], {a["label"]: a["attn"] for a in cfg["arms"]}
        oc = outcomes(res)
        cut = {r["label"]: r.get("truncated_at") for r in res.data["runs"]}
        gpu = {r["label"]: (r.get("versions") or {}).get("device") for r in res.data["runs"]}
        # an arm registered compiled whose compilation failed trained eagerly (`lib.training.loop`), and says so
        compiled = {a["label"]: bool(a.get("compile")) for a in cfg["arms"]}
        broke = res.data.get("compile_errors") or {}
        model = model_words(cfg.get("model"), cfg_of(chain).get("model"))
        reference = rules.get("reference", crules["reference"])
        for arm in spec:
            base = rules["baseline"][arm]
            for seed, steps, fail, back in oc.get(arm, []):
                b = next((o for o in base_oc.get(base, []) if o[0] == seed), None)
                lab, blab, ref = f"{arm}:s{seed}", f"{base}:s{seed}", f"{reference}:s{seed}"
                arrays = _with(dict(chain.arrays) | dict(res.arrays), ref, remedies)
                have = [x for x in (lab, blab, ref) if f"{x}__census__step" in arrays]
                ref_ran = f"{ref}__census__step" in arrays
                step = None
                if len(have) == 3:
                    reached = min(int(np.max(arrays[f"{x}__census__step"])) for x in have)
                    done = [s for s in crules["growth_steps"] if s <= reached]
                    step = done[-1] if done else None
                rows.append(dict(
                    entry=getattr(res, "name", cfg.get("_entry", "")), arm=arm, seed=seed, model=model,
                    words=_words(spec[arm]) + (f", {model}" if model else ""), reference=reference,
                    ref_ran=ref_ran,
                    spec=spec[arm], base_spec=base_spec.get(base),
                    steps=steps, fail=fail, back=back, base=base, horizon=cfg.get("steps"), cut=cut.get(lab),
                    compile_failed=compiled.get(arm, False) and bool(broke.get(lab)),
                    device=gpu.get(lab), base_device=base_gpu.get(blab),
                    base_words=CHAIN_ARMS.get(base, _words(base_spec[base]) if base in base_spec else base),
                    base_steps=b and b[1], base_fail=b and b[2], base_back=b and b[3], step=step,
                    ratio=_ratio_at(arrays, lab, ref, step, layer) if step else None,
                    base_ratio=_ratio_at(arrays, blab, ref, step, layer) if step else None,
                    spread=(float(spread[step]["logit"][layer - 1]) if spread and step in spread else None),
                    grown=_growth(arrays, lab, blab, ref, crules["growth_steps"], spread) if len(have) == 3
                    else (0, 0),
                    # both over the steps before the unchanged arm failed (after it, another regime)
                    o_err=conj_error(arrays, lab, b and b[2]), base_o_err=conj_error(arrays, blab, b and b[2]),
                    census=census_totals(arrays, lab, b and b[2]),
                    base_census=census_totals(arrays, blab, b and b[2]),
                    census_fa2=census_totals(arrays, lab, b and b[2], placement="fa2"),
                    base_census_fa2=census_totals(arrays, blab, b and b[2], placement="fa2"),
                    split=probe_split(arrays, [lab], b and b[2]),
                    base_split=probe_split(arrays, [blab], b and b[2]),
                    # whose ties the arm's chain probe measured on (`SideProbe`: "authors" unless recorded)
                    probe_placement=res.data.get("probe_placement", "authors"),
                    # where the arm failed first: both again over the steps before the arm's own failure
                    early=({"step": fail, "o_err": conj_error(arrays, lab, fail),
                            "base_o_err": conj_error(arrays, blab, fail)}
                           if fail is not None and b and b[2] is not None and fail < b[2] else None)))
    return sorted(rows, key=lambda r: (r["seed"], r["entry"], r["arm"]))


def verdicts(rows: list[dict]) -> dict:
    """{arm: True (prevents its baseline's failure), False (fails in a seed where the baseline fails) or None
    (undecided)} by the registered rule (`channels.prevents`), over every seed the arm ran."""
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        out[arm] = channels.prevents({r["seed"]: (r["fail"], r["steps"]) for r in mine},
                                     {r["seed"]: r["base_fail"] for r in mine if r["base_steps"] is not None})
    return out


def outcome_words(fail, back, steps) -> str:
    """A run's outcome in words: "no failure in N steps" or "failed at step F, back B steps later" / ", never
    back"."""
    if fail is None:
        return f"no failure in {steps:,} steps"
    return f"failed at step {fail:,}" + (f", back {back:,} steps later" if back is not None else ", never back")


def _cut_short(r: dict) -> bool:
    """Whether an `arm_rows` row's wall budget stopped it before its horizon."""
    return r.get("cut") is not None and bool(r.get("horizon")) and r["cut"] < r["horizon"]


def arm_outcome(r: dict) -> str:
    """`outcome_words` of an `arm_rows` row, saying when its wall budget stopped it short of the horizon and when an
    arm registered compiled trained eagerly because its compilation failed."""
    return (outcome_words(r["fail"], r["back"], r["steps"])
            + (f", where its wall budget stopped it short of the {r['horizon']:,}-step horizon" if _cut_short(r)
               else "")
            + (" (registered compiled, its compilation failed at the first step, so it trained eagerly, unlike the "
               "compiled arms it is read against)"
               if r.get("compile_failed") else ""))


def device_words(rows: list[dict]) -> str:
    """For a reader: each arm and seed that trained on another GPU model than its unremedied arm of the same seed
    (same code for the same chip generation, but not the same machine); "" when none did or it is unknown."""
    odd = [r for r in rows if r.get("device") and r.get("base_device") and r["device"] != r["base_device"]]
    if not odd:
        return ""
    return ("Not every arm trained on the GPU model of its unremedied arm: " + "; ".join(
        f"{_change(r['arm'])}, seed {r['seed']}, on one {r['device']} (unremedied: one {r['base_device']})"
        for r in odd) + ". The code and the compiled kernels are the same; which launch configurations the "
        "autotuner picks, and so the order of some FP32 sums, may not be.")


def _run_words(r: dict) -> str:
    return (f"seed {r['seed']}: {arm_outcome(r)} — unremedied, "
            f"{r['base_words']}: {outcome_words(r['base_fail'], r['base_back'], r['base_steps'])}"
            if r["base_steps"] is not None else f"seed {r['seed']}: {arm_outcome(r)} "
                                                f"(its baseline not run at this seed)")


def claim_verdicts(rows: list[dict]) -> dict:
    """{claim id: {"status", "evidence"}} for the claims of `CLAIM_ARMS` some row tests. An arm decides in the seeds
    where its baseline failed (`verdicts`). Status: "not reproduced" when every deciding arm failed where its
    baseline failed; "partly" when arms disagree, or when they prevent the failure in only one seed; "reproduced"
    when every deciding arm prevents it in two or more seeds; "not yet tested" when no arm decides (no failure to
    prevent in the seeds run). Evidence per arm and seed, in words, and the claim's arms not run yet; for the β fix,
    what its arms did to O on the conjunction pairs (`zeroed_words`)."""
    v = verdicts(rows)
    out = {}
    for cid, arms in CLAIM_ARMS.items():
        mine = [r for r in rows if r["arm"] in arms]
        if not mine:
            continue
        deciding = {a: v[a] for a in dict.fromkeys(r["arm"] for r in mine) if v[a] is not None}
        seeds = {r["seed"] for r in mine if r["arm"] in deciding and r["base_fail"] is not None}
        if not deciding:
            status = "not yet tested"
        elif not any(deciding.values()):
            status = "not reproduced"
        elif all(deciding.values()) and len(seeds) >= 2:
            status = "reproduced"
        else:
            status = "partly"
        per_arm = {}
        for r in mine:
            per_arm.setdefault(r["words"], []).append(_run_words(r))
        missing = [SHORT.get(a, a) for a in arms if a not in {r["arm"] for r in mine}]
        # The verdict is the prevents rule's; the growth rule's reading goes beside it, so that a change that
        # prevents the failure but leaves part of the growth is not read as removing it.
        grown = [f"{_change(r['arm'])}, seed {r['seed']}: {r['grown'][1]} of {r['grown'][0]}" for r in mine
                 if r["grown"][0]]
        ev = ("GPT-2 124M at the paper's recipe, each arm against the same seed's unremedied arm (same "
              "initialisation and batches): " + "; ".join(f"{w} — {'; '.join(x)}" for w, x in per_arm.items())
              + (f"; not run yet: {', '.join(missing)}" if missing else "")
              + (". Of the (growth step, layer) pairs where the unremedied arm's largest logit grows beyond FP32 "
                 "attention's seed-to-seed spread, each kept within it: " + "; ".join(grown)
                 + (" (so none removes the growth by the registered rule)"
                    if all(r["grown"][1] < r["grown"][0] for r in mine if r["grown"][0]) else "") if grown else ""))
        # how the fix that held the failure off did it; what the bound did to the preconditions
        how = zeroed_words(mine) if cid == "fix_stabilises" else bound_words(mine) if cid == "gpt2_logit_bound" else ""
        if how:
            ev += ". " + how
        out[cid] = dict(status=status, evidence=ev)
    return out


def _ratio(x) -> str:
    return "—" if x is None else f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def table(rows: list[dict], layer: int = FOCUS_LAYER) -> str:
    """A Markdown table, one row per arm and seed: the arm, its seed, its outcome (its baseline's at that seed in
    brackets), layer `layer`'s largest logit over FP32 attention's at the last growth step reached (the baseline's in
    brackets), and of the (growth step, layer) pairs where the baseline grows beyond FP32 attention's seed-to-seed
    spread, how many the arm keeps within it."""
    out = [f"| arm | seed | outcome (unremedied) | layer {layer}'s largest logit ÷ FP32's (unremedied) | "
           "growth kept within FP32's spread |", "|---|---|---|---|---|"]
    for r in rows:
        base = (outcome_words(r["base_fail"], r["base_back"], r["base_steps"]) if r["base_steps"] is not None
                else "not run")
        at = f"{_ratio(r['ratio'])} ({_ratio(r['base_ratio'])}) at step {r['step']:,}" if r["step"] else "—"
        n, k = r["grown"]
        out.append(f"| {r['words']} | {r['seed']} | {outcome_words(r['fail'], r['back'], r['steps'])} ({base}) | {at} | "
                   + (f"{k} of {n}" if n else "nothing to keep" if r["step"] else "—") + " |")
    return "\n".join(out)


# The prevents rule's verdict (`verdicts`) in words; for an arm that is not a remedy — the authors' code without its
# fix beside our paper placement, which fails wherever it is read — whether it reproduces that failure.
_PREVENTS = {True: "prevents", False: "does not prevent", None: "has not yet been shown to prevent, or not to prevent,"}
_REPRODUCES = {True: "does not reproduce", False: "reproduces",
               None: "has not yet been shown to reproduce, or not to reproduce,"}


def glue_numbers(rows: list[dict]) -> dict:
    """Glue for chapter 2c: per arm "<arm>_outcome" (per seed, in words), "<arm>_prevents" (`_PREVENTS`, or for the
    authors' code without its fix `_REPRODUCES`), "<arm>_words", "<arm>_at" (`growth_words` per seed
    where measured, else "not measured"); "n_arms", "seeds"."""
    v = verdicts(rows)
    out = {"n_arms": str(len(v)), "seeds": ", ".join(map(str, sorted({r["seed"] for r in rows})))}
    for arm in v:
        mine = [r for r in rows if r["arm"] == arm]
        out[f"{arm}_words"] = mine[0]["words"]
        out[f"{arm}_outcome"] = "; ".join(_run_words(r) for r in mine)
        out[f"{arm}_prevents"] = (_REPRODUCES if arm in AUTHORS_UNFIXED else _PREVENTS)[v[arm]]
        at = [r for r in mine if r["step"]]
        # where no seed was read, the first row says why (a reference not run yet, or nothing measured)
        remedy = arm not in AUTHORS_UNFIXED
        out[f"{arm}_at"] = ("; ".join(f"(seed {r['seed']}) {growth_words(r, remedy)}" for r in at) if len(at) > 1
                            else growth_words(at[0], remedy) if at else growth_words(mine[0], remedy))
    return out


def base_outcome_words(rows: list[dict], arm: str) -> str:
    """Whether arm `arm`'s unchanged arm failed in the seeds `arm` ran, as the start of a sentence ("Our kernel, FA2
    placement did not fail in seed 1, where that arm ran"; "… failed in seed 0 (at step 9,334, and came back)"); ""
    when `arm` has not run."""
    mine = sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["seed"])
    if not mine:
        return ""
    who = mine[0]["base_words"]
    failed = [r for r in mine if r["base_fail"] is not None]
    ran = _seeds_words(r["seed"] for r in mine)
    if not failed:
        text = f"{who} did not fail in {ran}, where that arm ran"
    else:
        text = (f"Where that arm ran ({ran}), {who} failed in " + " and ".join(
            f"seed {r['seed']} (at step {r['base_fail']:,}" + (", and came back)" if r["base_back"] is not None
                                                                 else ", never back)") for r in failed))
    return text[:1].upper() + text[1:]


def dial_words(rows: list[dict], arms=DIAL_ARMS, layer: int = FOCUS_LAYER, registered=None) -> str:
    """For chapter 2c: what each arm of the precision dial did — per arm run, the change, its spec in words, its
    outcome per seed, the prevents rule's verdict and its growth reading (`glue_numbers`) — then what has not run
    yet: with `registered` (the (arm, seed) pairs the registry holds for the dial), each arm's registered seeds
    without a run; without it, the arms run in no seed. "" when `arms` is empty."""
    g = glue_numbers([r for r in rows if r["arm"] in arms])
    parts = [f"with {_change(a)} ({g[a + '_words']}): {g[a + '_outcome']}; by the rule it {g[a + '_prevents']} the "
             f"failure, and layer {layer}'s largest logit is {g[a + '_at']}" for a in arms if a + "_words" in g]
    text = "; ".join(parts)
    text = text[:1].upper() + text[1:] + "." if parts else ""
    if registered is None:
        missing = [f"the arm with {_change(a)}" for a in arms if a + "_words" not in g]
    else:
        left = _unrun_seeds(rows, registered)
        missing = [f"{_change(a)} at {_seeds_words(left[a])}" for a in arms if a in left]
    return (text + (" " if text and missing else "")
            + (f"Not run yet: {' and '.join(missing)}." if missing else ""))


# The dial's reading, fixed before its runs (chapter 2c), per pair of the prevents rule's verdicts (S in FP32, P̄ and ℓ
# in FP32): True prevents the failure, False does not, None not decided (not run, or no seed where the paper failed).
_DIAL_READING = {
    (True, False): "the failure needs the BF16 scores — the rounding that makes large logits tie — and the rounding "
                   "the fix corrects is not enough without them",
    (False, True): "the failure needs the rounding of P̄ and ℓ",
    (True, True): "the failure needs both roundings",
    (False, False): "either the rounding the two arms share — that of P̄V, the paper's — carries the failure, or each "
                    "of the two roundings is enough alone, and a further arm must tell which",
    (False, None): "the failure does not need the BF16 scores; the arm with P̄ and ℓ in FP32 will tell whether it "
                   "needs their rounding (if that arm prevents it) or whether the rounding of P̄V — the paper's — or "
                   "either rounding alone carries it (if not)",
    (True, None): "the failure needs the BF16 scores; the arm with P̄ and ℓ in FP32 will tell whether it needs their "
                  "rounding too",
    (None, False): "the failure does not need the rounding of P̄ and ℓ; the arm with S in FP32 will tell whether it "
                   "needs the BF16 scores",
    (None, True): "the failure needs the rounding of P̄ and ℓ; the arm with S in FP32 will tell whether it needs the "
                  "BF16 scores too",
}


def dial_reading(rows: list[dict], arms=DIAL_ARMS) -> str:
    """The precision dial's reading fixed before its runs, applied to the prevents rule's verdicts (`verdicts`) on
    its two arms (S in FP32, then P̄ and ℓ in FP32) over the seeds each ran: one sentence, naming the seeds that
    decided; "" while neither arm is decided."""
    mine = [r for r in rows if r["arm"] in arms]
    v = verdicts(mine)
    key = tuple(v.get(a) for a in arms)
    if key not in _DIAL_READING:
        return ""
    seeds = {r["seed"] for r in mine if v.get(r["arm"]) is not None and r["base_fail"] is not None}
    text = f"By that reading, in {_seeds_words(seeds)}, {_DIAL_READING[key]}."
    return text[:1].upper() + text[1:]


def _ulp(x: float) -> str:
    """A mean error in ULP with its sign: two significant digits below 10, whole ULPs above."""
    return (f"{x:+.0f}" if abs(x) >= 10 else f"{x:+.2g}").replace("-", "−")


def dial_lean_words(rows: list[dict], arms=DIAL_ARMS) -> str:
    """For a reader, a reading made after the runs: per dial arm and seed with the chain probe, O's error along
    sign(V) on the conjunction pairs (`conj_error`, over the steps before the unchanged arm failed) beside the
    unchanged arm's over the same steps, the share of that lean the arm kept, the part of it from the rounding of P̄V
    (the paper's tie bias; `probe_split`) where measured, and the arm's outcome; "" when no row has both probes.

    By default the probe picks its rows where BF16 scores tie (`lib.training.chain_probe.default_classes`: the paper
    placement's ties, the unchanged arm's). For the arm with S in FP32 those are not its own tied rows — its ties are
    FP32 scores whose P̄ rounds to 1 in BF16, the census's FA2 placement — so where its probe ran so, the sentence
    gives that census's conjunction pairs for both arms over the same steps and says that those rows were not
    probed; where its probe measured on its own ties (the row's "probe_placement" is "own"), it says that instead."""
    parts = []
    for r in sorted((r for r in rows if r["arm"] in arms and r.get("o_err") and r.get("base_o_err")),
                    key=lambda r: (arms.index(r["arm"]), r["seed"])):
        a, b = r["o_err"], r["base_o_err"]
        until = f" before step {r['base_fail']:,}" if r["base_fail"] is not None else ""
        pct = 100 * a["mean"] / b["mean"] if b["mean"] > 0 else None
        kept = "" if pct is None else f" — {pct:.2g} % of its lean" if abs(pct) < 10 else f" — {pct:,.0f} % of its lean"
        tie = ""
        if r.get("split"):
            tie = f"; the rounding of P̄V, the paper's tie bias, gives {_ulp(r['split']['tie_mean'])} ULP of it"
            if r.get("base_split"):
                tie += f" (the unchanged arm's: {_ulp(r['base_split']['tie_mean'])} ULP)"
        end = (f"it failed, at step {r['fail']:,}" if r["fail"] is not None
               else f"it did not fail in {r['steps']:,} steps")
        e = r.get("early")
        if e and e["o_err"] and e["base_o_err"]:
            end += (f" (over the {e['o_err']['events']} events before that step, {_ulp(e['o_err']['mean'])} ULP a pair "
                    f"against {_ulp(e['base_o_err']['mean'])})")
        own = ""
        if r["arm"] == "paper_s32" and r.get("probe_placement") == "own":
            own = (". Its chain probe measured on its own ties, FP32 scores whose P̄ rounds to 1 in BF16 (the "
                   "unchanged arm's on its own, where BF16 scores tie)")
        elif r["arm"] == "paper_s32" and r.get("census_fa2") and r.get("base_census_fa2"):
            own = (f". Those are the rows where BF16 scores tie, the unchanged arm's; this arm's own ties — FP32 "
                   f"scores whose P̄ rounds to 1 in BF16 — gave {r['census_fa2']['n_conj']:,} conjunction pairs in "
                   f"the census's FA2 rounding placement over the same steps, against the unchanged arm's "
                   f"{r['base_census_fa2']['n_conj']:,}, and the chain probe did not measure O on them, so whether "
                   "the tie bias acts there is not measured")
        parts.append(f"with {_change(r['arm'])}, seed {r['seed']}, O's error along sign(V) on the conjunction pairs "
                     f"its chain probe measured over the {a['events']} events{until} is {_ulp(a['mean'])} ULP a pair "
                     f"({a['n']:,} pairs), against {_ulp(b['mean'])} ULP ({b['n']:,} pairs) in the unchanged arm"
                     f"{kept}{tie}; and {end}{own}")
    if not parts:
        return ""
    return "By a reading made after the runs (no rule for it was registered before them): " + "; ".join(parts) + "."


AUTHORS_ARMS = ("authors_compiled", "authors_fix_compiled", "authors_eager", "authors_fix_eager")
AUTHORS_UNFIXED = ("authors_compiled", "authors_eager")   # their attention as it stands, without their fix


def authors_words(rows: list[dict], arms=AUTHORS_ARMS, layer: int = FOCUS_LAYER) -> str:
    """For chapter 2c: what the authors' own code did in training, per arm run — its spec in words, its outcome per
    seed beside the unremedied paper placement's (`glue_numbers`), the prevents rule's verdict (for their code
    without its fix, read as whether it reproduces our paper placement's failure), layer `layer`'s growth reading;
    "" when none ran."""
    g = glue_numbers([r for r in rows if r["arm"] in arms])

    def verdict(a: str) -> str:
        if a in AUTHORS_UNFIXED:
            return f"by the same rule it {g[a + '_prevents']} that failure"
        return f"by the rule it {g[a + '_prevents']} the failure"

    parts = [f"{SHORT[a]} ({g[a + '_words']}): {g[a + '_outcome']}; {verdict(a)}, and layer {layer}'s largest "
             f"logit is {g[a + '_at']}" for a in arms if a + "_words" in g]
    if not parts:
        return ""
    text = "; ".join(parts) + "."
    return text[:1].upper() + text[1:]


def authors_setting(entry: str = "gpt2_authors_compiled") -> dict:
    """The authors' attention as `entry` registers it, for a reader: {"tile": its q- and k-tile in keys,
    "floor": the clamp of each tile's row sum} (the first arm's spec, whose options every arm of the entry shares)."""
    from lib.book import registry
    from lib.training.spec import AttnSpec
    opts = AttnSpec.parse(registry.resolve(entry, "full")["arms"][0]["attn"]).opts
    return {"tile": f"{opts.tile:,}", "floor": f"{opts.floor:g}"}


def _unrun_seeds(rows: list[dict], registered) -> dict:
    """{arm: sorted seeds} of the registered (arm, seed) pairs `registered` that no row ran, arms in their order."""
    ran = {(r["arm"], r["seed"]) for r in rows}
    left: dict = {}
    for arm, seed in registered:
        if (arm, seed) not in ran:
            left.setdefault(arm, set()).add(seed)
    return {a: sorted(v) for a, v in left.items()}


def unrun_words(rows: list[dict], registered) -> str:
    """The registered (arm, seed) pairs `registered` that no row ran, in reader words, by arm ("the authors' code,
    compiled at seeds 0 and 1; …"); "none" when every one ran."""
    return "; ".join(f"{SHORT.get(a, a)} at {_seeds_words(s)}"
                     for a, s in _unrun_seeds(rows, registered).items()) or "none"


def _seeds_words(seeds) -> str:
    """[1] -> "seed 1"; [1, 2] -> "seeds 1 and 2"; [0, 1, 2] -> "seeds 0, 1 and 2"."""
    s = [str(x) for x in sorted(seeds)]
    return f"seed {s[0]}" if len(s) == 1 else f"seeds {', '.join(s[:-1])} and {s[-1]}"


def brief_words(rows: list[dict], arms) -> str:
    """The arms `arms` in a few words for a table cell: per arm its outcome over the seeds it ran (one phrase when
    every seed's is the same; "stopped by its wall budget" where that cut it short of the horizon), then the
    unremedied arm's failure step in each of those seeds; "" when none ran."""
    parts, fails = [], {}
    for a in arms:
        mine = sorted((r for r in rows if r["arm"] == a), key=lambda r: r["seed"])
        if not mine:
            continue
        words = [outcome_words(r["fail"], r["back"], r["steps"]) + (", stopped by its wall budget" if _cut_short(r)
                                                                     else "")
                 + (", trained eagerly (its compilation failed)" if r.get("compile_failed") else "") for r in mine]
        name = _change(a)
        parts.append(f"{name}, {_seeds_words(r['seed'] for r in mine)}: {words[0]}" if len(set(words)) == 1
                     else f"{name}: " + "; ".join(f"seed {r['seed']}: {w}" for w, r in zip(words, mine)))
        fails.update({r["seed"]: r["base_fail"] for r in mine if r["base_fail"] is not None})
    if not parts:
        return ""
    return "; ".join(parts) + ("" if not fails else " (unremedied: failed at step " + " and ".join(
        f"{f:,} in seed {s}" for s, f in sorted(fails.items())) + ")")


def growth_words(row: dict, remedy: bool = True) -> str:
    """One row's growth reading in words: its layer's largest logit over FP32 attention's at the row's step, the
    baseline's, and the registered "removes the growth" rule over every grown (step, layer) pair. `remedy` False:
    the row is not a change meant to remedy its baseline (the authors' code without its fix beside our paper
    placement), so the rule reads as whether it grows the logits as that baseline does."""
    ref = "FP32 attention's" + (f" with {row['model']}" if row.get("model") else "")
    if not row["step"]:
        if row.get("model") and row.get("ref_ran") is False:
            return f"not measured yet (its reference, FP32 attention with {row['model']}, has not run at this seed)"
        return "not measured"
    n, k = row["grown"]
    removes = bool(n) and k == n
    base = "without the change" if remedy else f"in {row['base_words']}"
    rule = ("by the rule it " + ("removes" if removes else "does not remove") + " the growth" if remedy else
            "by the same rule its logits " + ("do not grow" if removes else "grow") + " as that arm's do")
    return (f"{_ratio(row['ratio'])}× {ref} at step {row['step']:,}, against {_ratio(row['base_ratio'])}× {base}; "
            f"of the {n} (growth step, layer) pairs where {'the unchanged arm' if remedy else 'that arm'} grows "
            f"beyond FP32 attention's spread it keeps {k} within it, so {rule}")


# The changes to the paper placement a practitioner would choose between (advice_words, pending_words): the
# paper's own, then the generic bound on the logits.
PAPER_REMEDIES = ("paper_o32", "paper_delta_fp32_o", "paper_fix_b2", "paper_fix_b2_exact", "paper_fix_b7_exact",
                  "paper_qk")


def pending(rows: list[dict], chain, arms=PAPER_REMEDIES, base: str = "paper") -> dict:
    """{arm: [(seed, failure step), …]} for each of `arms` (changes to the comparison's `base` arm): the seeds where
    `base` failed and that arm has not run; an arm run in no seed gets every such seed."""
    fails = [(o[0], o[2]) for o in outcomes(chain).get(base, []) if o[2] is not None]
    return {a: [(s, f) for s, f in fails if s not in {r["seed"] for r in rows if r["arm"] == a}] for a in arms}


def pending_words(rows: list[dict], chain, arms=PAPER_REMEDIES) -> str:
    """`pending` in words: per arm run in some seed, the seeds still to run (with the paper placement's failure step
    there), then the arms run in no seed; "none" when every arm has run in every seed where the paper placement
    failed."""
    left = pending(rows, chain, arms)
    ran = {r["arm"] for r in rows}
    some = [f"{_change(a)} at " + " and ".join(f"seed {s} (where the paper placement failed at step {f:,})"
                                                    for s, f in v) for a, v in left.items() if v and a in ran]
    never = [_change(a) for a in arms if a not in ran]
    out = "; ".join(some + ([f"not run in any seed yet: {', '.join(never)}"] if never else []))
    return out or "none"


def rerun_spread(chain) -> tuple[int, bool] | None:
    """The widest run-to-run difference of one seed's failure step that the comparison `chain` (a `merge_seeds`
    reading) holds, in steps, and whether it is only a lower bound: for each arm read from a rerun, |rerun's failure −
    first run's| where both failed (exact), or the other run's steps − the failure where only one run failed before
    the other stopped (a bound: the other might have failed later); None when no rerun shows one."""
    out = []
    for rep in chain.data.get("replaced", []):
        fa, fb = rep.get("failed_at"), rep.get("set_aside_failed_at")
        if fa is not None and fb is not None:
            out.append((abs(fa - fb), False))
        elif fa is not None and fa < rep["set_aside"]:
            out.append((rep["set_aside"] - fa, True))
        elif fb is not None and fb < rep["steps"]:
            out.append((rep["steps"] - fb, True))
    return max(out) if out else None


def margin_words(rows: list[dict], chain, where: str = "above") -> str:
    """How far each change to the paper placement that did not fail (the authors' code without its fix is not one)
    trained past its unremedied arm's failure in the same seed, beside the
    run-to-run spread of a failure step (`rerun_spread`; `where` the reader finds the two runs): which margins exceed
    it. "" when no arm outlived a failing baseline or no rerun measured a spread."""
    got = rerun_spread(chain)
    # the changes to the paper placement, not the authors' own code run without its fix (not a remedy)
    past = [(r, r["steps"] - r["base_fail"]) for r in rows if r["arm"] not in AUTHORS_UNFIXED
            and r["fail"] is None and r.get("base_fail") is not None and r["steps"] > r["base_fail"]]
    if got is None or not past:
        return ""
    spread, bound = got
    lo, hi = min(m for _, m in past), max(m for _, m in past)
    short = [r for r, m in past if m <= spread]
    out = (f"The arms that did not fail trained {lo:,}–{hi:,} steps past the step where their unremedied arm failed "
           f"in the same seed; between two runs of one seed, the failure step moved by "
           f"{'at least ' if bound else ''}{spread:,} steps ({where})")
    # only the pairs in which a run failed say anything about where a failure step falls
    pairs = sum(1 for rep in chain.data.get("replaced", [])
                if rep.get("failed_at") is not None or rep.get("set_aside_failed_at") is not None)
    if not short:
        return out + (f", less than every margin — but from {pairs} pair{'s' if pairs > 1 else ''} of runs"
                      + (", and a lower bound." if bound else "."))
    names = ", ".join(f"{SHORT.get(r['arm'], r['arm'])} (seed {r['seed']})" for r in short)
    return out + f", as much as the margin of {names}: there, surviving could be run-to-run variation."


def earlier_words(rows: list[dict], chain) -> str:
    """For each arm that failed where its unremedied arm failed too, whether it failed earlier or later by more than
    the run-to-run spread of a failure step (`rerun_spread`): "" without such an arm or without a measured spread."""
    got = rerun_spread(chain)
    both = [r for r in rows if r["fail"] is not None and r.get("base_fail") is not None]
    if got is None or not both:
        return ""
    spread, bound = got
    out = []
    for r in both:
        d = r["fail"] - r["base_fail"]
        when = f"{abs(d):,} steps {'before' if d < 0 else 'after'} its unremedied arm (seed {r['seed']})"
        inside = abs(d) <= spread
        out.append(f"{SHORT.get(r['arm'], r['arm'])} failed {when}, " + ("within" if inside else "beyond")
                   + f" the {spread:,} steps{' or more' if bound else ''} that a failure step moved between two runs"
                   + (f": whether it fails {'earlier' if d < 0 else 'later'} is not established" if inside else
                      " — a lower bound, so not established either" if bound else ""))
    return "; ".join(o[:1].upper() + o[1:] for o in out) + "."


def advice_words(rows: list[dict], arms=PAPER_REMEDIES) -> str:
    """One sentence for a practitioner: against the paper placement's failure in GPT-2, which of `arms` prevented
    it and which did not (the registered rule, `verdicts`), in how many seeds, and which have not run."""
    v = verdicts(rows)
    ran = [a for a in arms if a in v]
    if not ran:
        return "No remedy has been trained in GPT-2 yet."
    seeds = sorted({r["seed"] for r in rows if r["arm"] in ran})
    word = {True: "prevented it", False: "did not prevent it", None: "not yet judged"}
    parts = []
    for a in ran:
        mine = [r for r in rows if r["arm"] == a]
        parts.append(f"{_change(a)} — {word[v[a]]} (" + "; ".join(
            f"seed {r['seed']}: {arm_outcome(r)}" for r in mine) + ")")
    fails = sorted({(r["seed"], r["base_fail"]) for r in rows if r["arm"] in ran and r["base_fail"] is not None})
    out = (f"In GPT-2 124M at the paper's recipe ({_seeds_words(seeds)}), where the paper placement failed ("
           + "; ".join(f"seed {s}: at step {f:,}" for s, f in fails) + "), each change to it: " + "; ".join(parts)
           + ".")
    missing = [_change(a) for a in arms if a not in v]
    return out + (f" Not run yet: {', '.join(missing)}." if missing else "")


def seed_view(chain, remedies, seed: int, chain_arms=("fp32", "paper")) -> SimpleNamespace:
    """One seed's runs for a figure: `chain_arms` of the comparison and every channel and remedy arm of that seed,
    as a reading with `data["runs"]`, `arrays`, `cfg` (the comparison's rules) and `meta` (every result's)."""
    labels = [f"{a}:s{seed}" for a in chain_arms]
    runs = [r for r in chain.data["runs"] if r["label"] in labels and "error" not in r]
    arrays = {k: v for k, v in chain.arrays.items() if k.split("__")[0] in labels}
    # the provenance of the results this seed's runs come from (a merged comparison lists every seed's)
    metas = [m for m in (chain.meta if isinstance(chain.meta, list) else [chain.meta])
             if seed in ((m.get("provenance") or {}).get("cfg") or m.get("config") or {}).get("seeds", [seed])]
    for res in remedies:
        mine = [r for r in res.data["runs"] if r["label"].endswith(f":s{seed}") and "error" not in r]
        if not mine:
            continue
        runs += mine
        arrays.update({k: v for k, v in res.arrays.items() if k.split("__")[0] in {r["label"] for r in mine}})
        metas.append(res.meta)
    return SimpleNamespace(data=dict(runs=runs), arrays=arrays, meta=metas, cfg=cfg_of(chain))


def step_costs(rows: list[dict], bench: dict | None) -> dict:
    """{arm: {"vs_base": its compiled training step's median time over its unremedied baseline's, "vs_sdpa": over
    SDPA's compiled step, "range": (lowest, highest) ratio any two of their rounds give, or None}} for every arm of
    `rows` that a group of the training-step benchmark `bench` (its data: {"groups": [[{"attn", "compile",
    "ms_median", "ratio_to_baseline", "ms" (ms per round, optional)}, …], …]}) times compiled beside its baseline's
    spec; the two in one group, so one process on one GPU. An arm that changes the model (`model_words`, a QK-norm)
    is read only from a timed arm that makes the same change (`timed_change`: a benchmark of
    `benchmarks/bench_train_step_models.py`), its baseline from one that makes none."""
    out = {}
    for r in rows:
        if r["arm"] in out or not bench or r.get("base_spec") is None:
            continue
        change = r.get("model") or ""
        for g in bench["groups"]:
            mine = next((x for x in g if x["attn"] == r["spec"] and x["compile"] and timed_change(x) == change), None)
            base = next((x for x in g if x["attn"] == r["base_spec"] and x["compile"] and not timed_change(x)), None)
            if mine and base:
                # the rounds alternate the specs, so any round of one against any of the other bounds the ratio
                span = ((min(mine["ms"]) / max(base["ms"]), max(mine["ms"]) / min(base["ms"]))
                        if mine.get("ms") and base.get("ms") else None)
                out[r["arm"]] = dict(vs_base=mine["ms_median"] / base["ms_median"],
                                     vs_sdpa=mine["ratio_to_baseline"], range=span)
                break
    return out


def timed_change(arm: dict) -> str:
    """What a timed arm of a training-step benchmark changes in the model, in `model_words`' terms ("" for none): its
    ``model`` (GPTConfig fields) over its group's ``model_base``."""
    if not arm.get("model"):
        return ""
    base = arm.get("model_base") or {}
    return model_words(base | arm["model"], base)


def established(rows: list[dict]) -> list[str]:
    """The arms that prevented their baseline's failure (`verdicts`) in two seeds or more where it failed: the
    book's seeds ≥ 2, so the remedies a practitioner can be pointed to."""
    v = verdicts(rows)
    return [a for a in v if v[a] and len({r["seed"] for r in rows
                                          if r["arm"] == a and r["base_fail"] is not None}) >= 2]


def merge_benches(datas: list[dict]) -> dict | None:
    """Several training-step benchmarks' data as one for `step_costs` and `cost_words`: their groups one after
    another (an arm and its baseline are still read within one group, so within one process on one GPU); "device"
    their common GPU, or None with "devices" listing each one's when they differ; None when there is none."""
    if not datas:
        return None
    devices = list(dict.fromkeys(d.get("device") or "GPU" for d in datas))
    return dict(groups=[g for d in datas for g in d["groups"]], device=devices[0] if len(devices) == 1 else None,
                devices=devices)


def cost_words(rows: list[dict], bench: dict | None) -> str:
    """For a practitioner: what each change that prevented the paper placement's failure (`verdicts`) costs in a
    compiled GPT-2 training step (`step_costs`, with the range its rounds give), and which is the cheapest of those
    that prevented it in two seeds or more (`established`; of all of them, saying so, while none has) — with the
    others whose range overlaps its own, since their order is then the rounds' noise."""
    v = verdicts(rows)
    ok = sorted((a for a in v if v[a]), key=lambda a: (PAPER_REMEDIES + (a,)).index(a))     # in the advice's order
    if not ok:
        return "No change has prevented the failure yet, so there is no remedy to cost."
    cost = step_costs(rows, bench)
    timed = sorted((a for a in ok if a in cost), key=lambda a: cost[a]["vs_base"])
    untimed = [_change(a) for a in ok if a not in cost]
    if not timed:
        return f"What {series(untimed)} cost in a training step is not measured yet."
    where = (f"one {bench['device']}" if bench.get("device") else
             f"one GPU per benchmark: {', '.join(bench['devices'])}" if bench.get("devices") else "one GPU")

    def one(a):
        span = cost[a]["range"]
        return (f"{_change(a)} {cost[a]['vs_base']:.2f}× ("
                + (f"rounds {span[0]:.2f}–{span[1]:.2f}×; " if span else "")
                + f"{cost[a]['vs_sdpa']:.2f}× SDPA's compiled step)")

    out = ("A compiled GPT-2 124M training step (" + where
           + ") with each change that prevented the failure takes, against the unremedied paper placement's"
           + (" (the median over the rounds, and the range any two rounds give)"
              if any(cost[a]["range"] for a in timed) else "") + ": " + "; ".join(one(a) for a in timed) + ". ")
    sure = [a for a in timed if a in established(rows)]
    pool = sure or timed
    best = pool[0]
    level = [_change(a) for a in pool[1:] if cost[best]["range"] and cost[a]["range"]
             and cost[a]["range"][0] <= cost[best]["range"][1]]
    out += (("Of those that prevented it in two seeds or more, the cheapest" if sure else
             "None has prevented it in two seeds yet; the cheapest") + (" of those timed" if untimed else "")
            + f": {_change(best)}"
            + (f", level within the rounds' range with {series(level)}" if level else "") + ".")
    return out + (f" Not timed yet: {', '.join(untimed)}." if untimed else "")


def o_error_words(rows: list[dict], arms=FIX_ARMS) -> str:
    """For a reader: per arm of `arms` and seed, O's error along sign(V) on the conjunction pairs its chain probe
    measured in training (`conj_error`), beside its unchanged arm's over the same steps (before that arm failed);
    "" when no row has both."""
    parts = []
    for r in sorted((r for r in rows if r["arm"] in arms and r.get("o_err") and r.get("base_o_err")),
                    key=lambda r: ((arms + (r["arm"],)).index(r["arm"]), r["seed"])):
        a, b = r["o_err"], r["base_o_err"]
        until = f" before step {r['base_fail']:,}" if r["base_fail"] is not None else ""
        am, bm = (f"{x:+.{d}f}".replace("-", "−") for x, d in ((a["mean"], 0), (b["mean"], 1)))
        parts.append(f"{_change(r['arm'])}, seed {r['seed']}: {am} ULP, {100 * a['along']:.1f} % of "
                     f"{a['n']:,} pairs along sign(V) — unremedied{until}: {bm} ULP, "
                     f"{100 * b['along']:.0f} % of {b['n']:,} pairs")
    return "; ".join(parts)


def zeroed_range() -> tuple[int, int]:
    """(lo, hi): an output of zero errs by −|O|, and |O| is between `lo` and `hi` ULPs of itself in BF16 (2^7 to
    2^8 for its 7 stored mantissa bits), so a zeroed output errs between −hi and −lo ULP along sign(V)."""
    from lib.fp.bf16 import MANTISSA_BF16
    return 2 ** MANTISSA_BF16, 2 ** (MANTISSA_BF16 + 1)


def zeroed(rows: list[dict], exact=EXACT_ARMS, against: float = 0.05) -> bool | None:
    """Whether every exact-rule arm of `rows` with a chain probe erred on the conjunction pairs as outputs set to
    zero do: its mean error (`conj_error`) within −hi … −lo ULP (`zeroed_range`) and fewer than `against` of its
    pairs along sign(V); None when no such arm has a probe."""
    lo, hi = zeroed_range()
    ex = [r for r in rows if r["arm"] in exact and r.get("o_err")]
    if not ex:
        return None
    return all(-hi <= r["o_err"]["mean"] <= -lo and r["o_err"]["along"] < against for r in ex)


def zeroed_words(rows: list[dict], exact=EXACT_ARMS, guarded=("paper_fix_b2",), against: float = 0.05) -> str:
    """For a reader: whether O's error on the conjunction pairs (`conj_error`) says the exact rule zeroed those
    rows — every exact-rule arm's mean error within the range of a zeroed output (`zeroed_range`) and fewer than
    `against` of its pairs along sign(V) — while the guarded fix kept the unremedied arm's sign (its mean along
    sign(V), as its baseline's). The sentence says what the numbers show, and nothing when there are none; it
    says too that this is a reading made after the runs (no rule for it was registered before them)."""
    lo, hi = zeroed_range()
    gu = [r for r in rows if r["arm"] in guarded and r.get("o_err") and r.get("base_o_err")]
    z = zeroed(rows, exact, against)
    if z is None:
        return ""
    kept = bool(gu) and all(r["o_err"]["mean"] > 0 and r["base_o_err"]["mean"] > 0 for r in gu)
    if not z:
        return ("The exact rule's errors are not all in the range of a zeroed output, so these numbers do not say "
                "whether it drops rows.")
    out = (f"By a reading made after the runs, every exact-rule arm's error is in the range of a zeroed output (between −{hi} and −{lo} ULP), against "
           f"sign(V) on more than {100 * (1 - against):.0f} % of its pairs: what rows set to zero give — when β·max "
           "is so large that every P̄ of a tied row underflows, ℓ = 0 and our kernel returns O = 0 for the row — "
           "rather than a corrected rounding.")
    if kept:
        out += (" The guarded fix, whose capped shift keeps those rows, leaves the error along sign(V) as the "
                "unremedied arm had it.")
    return out


def fix_words(rows: list[dict], arms=FIX_ARMS) -> str:
    """For a practitioner: what each form of the β fix in `arms` that trained in GPT-2 did to the paper placement's
    failure (the registered rule, `verdicts`), per seed against the unremedied arm, whether that rests on fewer seeds
    than the book's two, and the growth rule's reading; then the forms not run yet."""
    v = verdicts(rows)
    ran = [a for a in arms if a in v]
    if not ran:
        return "In GPT-2 no form of the fix has been trained yet."
    word = {True: "prevented", False: "did not prevent", None: "has not yet been judged against"}
    parts = []
    for a in ran:
        mine = sorted((r for r in rows if r["arm"] == a), key=lambda r: r["seed"])
        decided = [r for r in mine if r["base_fail"] is not None]
        text = (f"{_change(a)} {word[v[a]]} the paper placement's failure ("
                + "; ".join(f"seed {r['seed']}: {arm_outcome(r)}" for r in mine)
                + ("; the unremedied arm failed at step " + " and ".join(
                    f"{r['base_fail']:,}" + (f" in seed {r['seed']}" if len(decided) > 1 else "") for r in decided)
                   if decided else "") + ")")
        if v[a] and len(decided) < 2:
            text += ", in one seed where the book asks for two"
        grown = [r for r in mine if r["grown"][0]]
        if grown:
            text += ("; it kept " + ", ".join(f"{r['grown'][1]} of the {r['grown'][0]}"
                                              + (f" in seed {r['seed']}" if len(grown) > 1 else "") for r in grown)
                     + " grown (step, layer) pairs within FP32 attention's spread"
                     + (", so it does not remove the growth" if all(r["grown"][1] < r["grown"][0] for r in grown)
                        else ""))
        parts.append(text)
    missing = [_change(a) for a in arms if a not in v]
    return ("In GPT-2 (chapter 2c) the " + ". The ".join(parts) + "."
            + (f" Not run yet: {', '.join(missing)}." if missing else ""))


def beta_growth_words(rows: list[dict], big: str = EXACT_ARMS[0], small: str = EXACT_ARMS[1]) -> str:
    """For a practitioner choosing β: which of two exact-rule fixes kept more of the grown (step, layer) pairs within
    FP32 attention's spread, summed over the seeds both ran ("" when they share no seed with growth to judge), and
    whether that supports the proxy's preference for the smaller β (`small`) — a reading made after the runs."""
    seeds = ({r["seed"] for r in rows if r["arm"] == big and r["grown"][0]}
             & {r["seed"] for r in rows if r["arm"] == small and r["grown"][0]})
    if not seeds:
        return ""
    kept = {a: [sum(r["grown"][i] for r in rows if r["arm"] == a and r["seed"] in seeds) for i in (1, 0)]
            for a in (big, small)}
    more = kept[big][0] / kept[big][1] > kept[small][0] / kept[small][1]
    seed_words = ("seed " if len(seeds) == 1 else "seeds ") + " and ".join(map(str, sorted(seeds)))
    return (f"in GPT-2 the {_change(big)} kept {'more' if more else 'no more'} of the layers' growth within FP32 "
            f"attention's spread than the {_change(small)} ({kept[big][0]} of {kept[big][1]} grown (step, layer) "
            f"pairs against {kept[small][0]} of {kept[small][1]}, {seed_words})"
            + (": GPT-2 does not support the proxy's preference for the smaller β" if more else "")
            + " (read after the runs; no rule for this comparison was fixed before them)")


def fix_choice_words(rows: list[dict], exact=EXACT_ARMS, guarded=("paper_fix_b2",)) -> str:
    """For a practitioner choosing the fix's form: what the paper's exact rule (no guard) and the guarded fix did to
    the paper placement's failure in GPT-2 (`verdicts`, with the seeds where the unremedied arm failed), and whether
    the exact rule did it by zeroing rows (`zeroed`); "" when neither form has trained."""
    v = verdicts(rows)

    def seeds(arms) -> str:
        s = sorted({r["seed"] for r in rows if r["arm"] in arms and r["base_fail"] is not None})
        return ("seed " if len(s) == 1 else "seeds ") + series([str(x) for x in s]) if s else "no seed decided"

    word = {True: "prevented", False: "did not prevent", None: "has not yet been judged against"}
    parts = []
    ex = [a for a in exact if a in v]
    for verdict in (True, False, None):
        arms = [a for a in ex if v[a] is verdict]
        if arms:
            parts.append(f"{series([_change(a) for a in arms])} {word[verdict]} the paper placement's failure "
                         f"({seeds(arms)})" + (", by zeroing the rows whose tied maximum underflows rather than by "
                                               "correcting their rounding" if verdict and zeroed(rows) else ""))
    for a in (a for a in guarded if a in v):
        parts.append(f"the {_change(a)}, whose capped shift keeps those rows, {word[v[a]]} it ({seeds([a])})"
                     if parts else f"{_change(a)} {word[v[a]]} the paper placement's failure ({seeds([a])})")
    if not parts:
        return ""
    return "In GPT-2 the " + "; ".join(parts) + "."


def bound_words(rows: list[dict]) -> str:
    """For a reader: what each arm that changes the model (`model_words`: a bound on the logits) did to the census
    of the first link's preconditions — conjunction pairs, largest logit, share of tied rows (the largest of a head,
    and over all), and of the tied rows the share in the window — beside its unchanged arm over the same steps
    (`census_totals`, before that arm failed); "" when no such arm has both censuses."""
    parts = []
    for r in (r for r in rows if r.get("model") and r.get("census") and r.get("base_census")):
        a, b = r["census"], r["base_census"]
        until = f" before step {r['base_fail']:,}" if r["base_fail"] is not None else ""
        fewer = (f", {b['n_conj'] / a['n_conj']:,.0f}× fewer" if a["n_conj"] else ", none at all")
        parts.append(f"with {r['model']}, seed {r['seed']}, over the {a['events']} census events{until}: "
                     f"{a['n_conj']:,} conjunction pairs in the paper's rounding placement against {b['n_conj']:,} "
                     f"without it{fewer}; the largest logit {a['max_logit']:,.0f} against {b['max_logit']:,.0f}; "
                     f"rows with a repeated maximum up to {100 * a['tie_rate']:.0f} % of a head's rows against "
                     f"{100 * b['tie_rate']:.0f} %"
                     + (f" ({share_words(a['tied_share'])} of all rows against {share_words(b['tied_share'])}), and of those, the "
                        f"rows whose other keys' P̄V sets only the sticky bit {share_words(a['window_share'])} against "
                        f"{share_words(b['window_share'])}" if None not in (a.get("tied_share"), b.get("tied_share"),
                                                                    a.get("window_share"), b.get("window_share"))
                        else ""))
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + ("." if parts else "")


def bound_window_words(rows: list[dict]) -> str:
    """Through which of the first link's preconditions a bound on the logits took the conjunction away, from the
    census's counts (`census_totals`): how much of its unchanged arm's share of tied rows each arm that changes the
    model kept, and how many times smaller it made the share of those rows in the window (the other keys' P̄V only in
    the sticky bit); "mostly with the window" when every arm's window factor exceeds every arm's ties factor. ""
    without such an arm or without the counts."""
    keys = ("tied_share", "window_share")
    got = [r for r in rows if r.get("model") and r.get("census") and r.get("base_census")
           and None not in [r["census"].get(k) for k in keys] + [r["base_census"].get(k) for k in keys]
           and r["base_census"]["tied_share"] and r["census"]["tied_share"]]
    if not got:
        return ""
    kept = [r["census"]["tied_share"] / r["base_census"]["tied_share"] for r in got]
    cut = [r["base_census"]["window_share"] / r["census"]["window_share"] if r["census"]["window_share"]
           else float("inf") for r in got]

    def span(xs, fmt):
        lo, hi = min(xs), max(xs)
        return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"
    window = min(cut) > max(1 / k for k in kept)
    seeds = _seeds_words(r["seed"] for r in got)
    finite = [c for c in cut if np.isfinite(c)]
    smaller = ("leaves none of those rows in the window" if not finite else
               f"makes the share of those rows in the window {span(finite, lambda x: f'{x:,.0f}')}× smaller"
               + (" (in one seed, none left)" if len(finite) < len(cut) else ""))
    return (f"Read after the runs: over all rows ({seeds}) the bound keeps {span([100 * k for k in kept], lambda x: f'{x:.0f}')} % of the "
            f"unbounded arm's share of rows with a repeated maximum, but {smaller}: the conjunction goes "
            + ("mostly with the window — bounded logits leave the other keys' P̄V too large to set only the sticky "
               "bit — rather than with the ties." if window else "with the ties as much as with the window."))


# "Takes the conjunction away": at least this many times fewer conjunction pairs than the unchanged arm. An order of
# magnitude, chosen after the first bounded run (no rule for it was registered before it): the chapter says so.
BOUND_FEWER = 10.0


def bound_removes_conjunction(rows: list[dict], factor: float = BOUND_FEWER) -> bool | None:
    """Whether every arm that changes the model (`bound_words`) had at least `factor` times fewer conjunction pairs
    than its unchanged arm over the same census events; None when no such arm has both censuses."""
    got = [r for r in rows if r.get("model") and r.get("census") and r.get("base_census")]
    if not got:
        return None
    return all(r["census"]["n_conj"] * factor <= r["base_census"]["n_conj"] for r in got)
