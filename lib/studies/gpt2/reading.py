"""Reading GPT-2 arms: the failure rule, per-layer logit and ‖W_Q‖₂ trajectories, and the kernel-fidelity verdict.

Every rule is read from the result's recorded configuration (`cfg["rules"]`), fixed in the registry before the run:

* **failure** — the first step at which the `failure_window`-step mean training loss is `failure_rise` nats above
  its running minimum, or the loss is not finite (`failure_step`);
* **alike** — two arms (ours, SDPA in one compile mode) train alike when, at every census step both reached, for
  each layer's largest logit and largest ‖W_Q,h‖₂, |log(ours / SDPA)| ≤ `alike_factor` × the *spread*: the largest
  such gap between the two `spread` arms (SDPA eager and compiled: rounding differences alone) over the run and the
  layers; and both have the same outcome (failed or not) at their common horizon (`fidelity`).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["failure_step", "replaced_words", "layer_series", "conjunction_peak", "gap", "fidelity", "numbers", "ARM_WORDS", "arms_numbers",
           "arms_table", "growth_ratios", "fp32_spread", "growth_verdict", "growth_words", "growth_onset", "before_failure", "merge_seeds", "probe_signs", "seeds_words", "split_glue", "focus_growth_words", "CHAIN_ARMS",
           "link_readings", "low_rank_seeds", "low_rank_verdict", "low_rank_table", "low_rank_glue",
           "low_rank_headline"]

BIG_LOGIT = 1000.0    # a layer whose largest logit ends above this is listed as an outlier layer (chapter 2b's scale)
FOCUS_LAYER = 2       # 1-based: the layer where chapter 2b's census finds the preconditions most often
ARM_WORDS = {"sdpa_eager": "PyTorch flash SDPA, eager", "sdpa_compiled": "PyTorch flash SDPA, compiled",
             "fa2_eager": "our kernel (FA2 placement), eager", "fa2_compiled": "our kernel (FA2 placement), compiled"}


def failure_step(loss, window: int, rise: float):
    """The first step (0-based, the window's last) where the `window`-step mean loss exceeds its running minimum by
    `rise`, or the first non-finite loss; None if neither happens (`failure_episodes`' first failure)."""
    ep = failure_episodes(loss, window, rise)
    return ep[0][0] if ep else None


def recovery_steps(loss, window: int, rise: float):
    """After the failure step (`failure_step`), how many steps until the `window`-step mean loss is back within
    `rise` of the running minimum it had at the failure: a transient spike recovers, an explosion does not (None:
    no failure, or no recovery by the end). Only the first failure: `failure_episodes` has the later ones."""
    ep = failure_episodes(loss, window, rise)
    return ep[0][1] - ep[0][0] if ep and ep[0][1] is not None else None


def failure_episodes(loss, window: int, rise: float) -> list[tuple[int, int | None]]:
    """Every failure of a run and when it ended: [(failure step, step the loss was back, or None)], steps 0-based.
    The first failure is `failure_step`'s; a failure is over at the first later step whose `window`-step mean is
    back within `rise` of the running minimum it had at the failure (`recovery_steps`); the next one is the first
    step after that where the rule fires again (against the running minimum of the whole run so far). A non-finite
    loss ends the list with (its step, None). A run whose last failure has no end ends failed: it exploded, where
    one that spiked and came back for good did not (a reading made after the runs, not a registered rule)."""
    loss = np.asarray(loss, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(loss))
    n = len(loss) if not bad.size else int(bad[0])
    out: list[tuple[int, int | None]] = []
    if n >= window:
        c = np.cumsum(np.concatenate([[0.0], loss[:n]]))
        mean = (c[window:] - c[:-window]) / window                 # mean[i] ends at step i + window − 1
        runmin = np.minimum.accumulate(mean)
        over = mean - runmin >= rise
        i = 0
        while True:
            hit = np.flatnonzero(over[i:])
            if not hit.size:
                break
            j = i + int(hit[0])
            back = np.flatnonzero(mean[j:] < runmin[j] + rise)
            if not back.size:
                out.append((j + window - 1, None))
                return out
            i = j + int(back[0])
            out.append((j + window - 1, i + window - 1))
    if bad.size:
        out.append((int(bad[0]), None))
    return out


def episode_words(ep: list) -> str:
    """How a run's failures (`failure_episodes`) ended, after the first one's step: "80 steps later", "not by the
    end of the run", or "245 steps later, then failed again at step 7,381 and not back by the end of the run"."""
    if not ep:
        return "—"
    first = "not by the end of the run" if ep[0][1] is None else f"{ep[0][1] - ep[0][0]:,} steps later"
    if len(ep) == 1:
        return first
    last = ("not back by the end of the run" if ep[-1][1] is None
            else f"back {ep[-1][1] - ep[-1][0]:,} steps after that")
    again = ", ".join(f"{f:,}" for f, _ in ep[1:])
    return f"{first}, then failed again at step{'s' if len(ep) > 2 else ''} {again} and {last}"


def layer_series(arrays: dict, label: str) -> dict:
    """{"step": (E,), "logit": (E, L) largest |S| per layer (FA2 placement's S, FP32), "wq": (E, L) largest ‖W_Q,h‖₂
    per layer} from a packed run's census."""
    pre = f"{label}__census__"
    return dict(step=np.asarray(arrays[pre + "step"]), logit=np.nanmax(arrays[pre + "fa2/max_logit"], axis=2),
                wq=np.nanmax(arrays[pre + "wq_sigma"], axis=2))


def growth_onset(arrays: dict, label: str, big: float = BIG_LOGIT):
    """The first census step at which some layer's largest logit exceeds `big`, and those layers (1-based): (step,
    [layers]), or None when no layer ever does."""
    ser = layer_series(arrays, label)
    over = np.flatnonzero((ser["logit"] > big).any(axis=1))
    if not over.size:
        return None
    e = int(over[0])
    return int(ser["step"][e]), [int(i) + 1 for i in np.flatnonzero(ser["logit"][e] > big)]


def before_failure(arrays: dict, label: str, step: int) -> dict:
    """The last census at or before `step` (a failure step): its step, the largest logit with its layer (1-based),
    and the largest ‖W_Q,h‖₂ with its layer."""
    ser = layer_series(arrays, label)
    e = int(np.flatnonzero(ser["step"] <= step)[-1])
    li, wi = int(np.argmax(ser["logit"][e])), int(np.argmax(ser["wq"][e]))
    return dict(step=int(ser["step"][e]), logit=float(ser["logit"][e, li]), logit_layer=li + 1,
                wq=float(ser["wq"][e, wi]), wq_layer=wi + 1)


def conjunction_peak(arrays: dict, label: str, placement: str) -> str:
    """The census's largest conjunction rate over the run, layers and heads, in `placement`, as "x.x % (layer L,
    step S)" (layer 1-based), or "none" when no census event found a conjunction pair."""
    pre = f"{label}__census__"
    c = np.nan_to_num(np.asarray(arrays[f"{pre}{placement}/conjunction"], dtype=np.float64))
    if not c.size or c.max() <= 0:
        return "none"
    e, layer, _ = np.unravel_index(int(np.argmax(c)), c.shape)
    return f"{100 * c.max():.1f} % (layer {layer + 1}, step {int(arrays[pre + 'step'][e]):,})"


def gap(a: dict, b: dict, key: str) -> np.ndarray:
    """|log(a / b)| per (common census step, layer) of series `key` ("logit" or "wq")."""
    common, ia, ib = np.intersect1d(a["step"], b["step"], return_indices=True)
    return np.abs(np.log(a[key][ia] / b[key][ib]))


def fidelity(arrays: dict, runs: list[dict], rules: dict) -> dict:
    """The alike rule for each pair of `rules["pairs"]` ([ours, sdpa] labels without seed): {"spread": {key: largest
    gap of the spread pair}, "pairs": [{ours, sdpa, gaps {key: largest gap}, ratio {key: gap / spread}, outcomes,
    horizon, alike}], "seeds"}."""
    labels = [r["label"] for r in runs if "error" not in r]
    seeds = sorted({lab.split(":s")[1] for lab in labels})
    out = dict(spread={}, pairs=[], seeds=seeds)
    for s in seeds:
        ser = {lab.split(":s")[0]: layer_series(arrays, lab) for lab in labels if lab.endswith(f":s{s}")}
        loss = {lab.split(":s")[0]: arrays[f"{lab}__loss"] for lab in labels if lab.endswith(f":s{s}")}
        sa, sb = rules["spread"]
        spread = {k: float(gap(ser[sa], ser[sb], k).max()) for k in ("logit", "wq")}
        out["spread"][s] = spread
        for ours, ref in rules["pairs"]:
            horizon = min(len(loss[ours]), len(loss[ref]))
            fails = {lab: failure_step(loss[lab][:horizon], rules["failure_window"], rules["failure_rise"])
                     for lab in (ours, ref)}
            gaps = {k: float(gap(ser[ours], ser[ref], k).max()) for k in ("logit", "wq")}
            ratio = {k: gaps[k] / spread[k] if spread[k] > 0 else math.inf for k in gaps}
            same = (fails[ours] is None) == (fails[ref] is None)
            out["pairs"].append(dict(seed=s, ours=ours, sdpa=ref, gaps=gaps, ratio=ratio, failed_at=fails,
                                     horizon=horizon, same_outcome=same,
                                     alike=same and all(r <= rules["alike_factor"] for r in ratio.values())))
    return out


def cfg_of(res) -> dict:
    """The resolved configuration a result ran with: provenance's for a saved result, the live run's otherwise (a
    `merge_seeds` reading carries its own)."""
    if getattr(res, "cfg", None) is not None:
        return res.cfg
    return res.meta.get("provenance", {}).get("cfg") or res.meta["config"]


def recipe(cfg: dict) -> dict:
    """What must agree for GPT-2 results to be one comparison: the configuration without its arms, seeds, working
    directory and wall budget, and without the probe's `split` (it adds measurements beside the step, changing
    none)."""
    # max_wall_s is a machine limit, not a rule: a run it stops records truncated_at, and a rerun with a longer one
    # is read in its place (`merge_seeds`).
    out = {k: v for k, v in cfg.items() if k not in ("arms", "seeds", "workdir", "_entry", "max_wall_s")}
    if isinstance(out.get("probe"), dict):
        out["probe"] = {k: v for k, v in out["probe"].items() if k != "split"}
    return out


def rerun_pair(a: dict, b: dict) -> tuple[dict, dict]:
    """Two runs of one label (`data["runs"]` entries with "steps"): (the one read, the one set aside). The run that
    ran further is read in place of one its wall budget stopped short of the horizon (`truncated_at`): a rerun, same
    initialisation, batches and rules. ValueError when the shorter was not cut short: neither is a rerun of the
    other."""
    short, full = (a, b) if a["steps"] < b["steps"] else (b, a)
    if short.get("truncated_at") is None:
        raise ValueError(f"run {a['label']} appears twice and neither was cut short")
    return full, short


def merge_seeds(results) -> "SimpleNamespace":
    """Several results of the GPT-2 comparison (one per seed, or a seed's two entries of two arms each) read as one:
    `data["runs"]` and `data["telemetry"]` joined, `arrays` joined (labels "<arm>:s<seed>" are unique across them),
    `cfg` the first's configuration with every arm and seed, `meta` the list of their metas (the provenance stamp
    lists each). Refuses results whose recipe or rules differ (`recipe`), and two runs with one label unless one
    was stopped short of the horizon by its wall budget (`truncated_at`) and the other ran further: that one is read
    in its place (a rerun of the arm, same initialisation and batches), and `data["replaced"]` names it (label, steps
    of the run read, steps of the run set aside, their results' devices, and `rerun_compare`'s fields); `set_aside`
    holds the per-step loss of each run set aside ({label: loss}), for `figures.rerun_figure`."""
    from types import SimpleNamespace
    chosen: dict = {}                    # label -> (run, result)
    arms, seeds = [], []
    base = recipe(cfg_of(results[0]))
    replaced, set_aside = [], {}
    for r in results:
        cfg = cfg_of(r)
        if recipe(cfg) != base:
            raise ValueError("results with different recipes or rules are not one comparison")
        for run in r.data["runs"]:
            old = chosen.get(run["label"])
            if old is not None:
                full, short = rerun_pair(old[0], run)
                keep, drop = (old, (run, r)) if full is old[0] else ((run, r), old)
                replaced.append(dict(label=run["label"], steps=full["steps"], set_aside=short["steps"],
                                     device=keep[1].meta.get("device"), set_aside_device=drop[1].meta.get("device"),
                                     **rerun_compare(keep[1].arrays.get(f"{run['label']}__loss"),
                                                     drop[1].arrays.get(f"{run['label']}__loss"), cfg["rules"])))
                set_aside[run["label"]] = drop[1].arrays.get(f"{run['label']}__loss")
                chosen[run["label"]] = keep
            else:
                chosen[run["label"]] = (run, r)
        arms += [a for a in cfg["arms"] if a not in arms]
        seeds += [s for s in cfg["seeds"] if s not in seeds]
    runs = [run for run, _ in chosen.values()]
    arrays, tel = {}, {}
    for label, (run, r) in chosen.items():     # each run's arrays and telemetry from its own result
        arrays.update({k: v for k, v in r.arrays.items() if k.split("__")[0] == label})
        if label in r.data.get("telemetry", {}):
            tel[label] = r.data["telemetry"][label]
    return SimpleNamespace(data=dict(runs=runs, telemetry=tel, replaced=replaced), arrays=arrays,
                           meta=[r.meta for r in results], cfg=dict(base, arms=arms, seeds=sorted(seeds)),
                           set_aside=set_aside)


def moving_mean(loss, w: int):
    """The `w`-step moving mean of per-step losses (nats), one value per full window."""
    return np.convolve(np.asarray(loss, dtype=np.float64), np.ones(w) / w, mode="valid")


def rerun_compare(kept, set_aside, rules: dict) -> dict:
    """How a rerun of one arm (same initialisation, batches and rules) compares with the run it replaces, from their
    per-step losses (nats, 0-based steps): `first_diff`, the first step whose losses are not bit-identical (None:
    identical over the steps both ran); `upto`, the steps both ran before either failed; `gap_steps`, the first half
    of those (a run's loss may already climb towards its failure in the second: chapter 2c's seed-0 rerun does);
    `gap`, the median over the first `gap_steps` steps of the difference of their `failure_window`-step mean losses
    (nats; None when that is shorter than the window); `failed_at` and `set_aside_failed_at`, each run's first
    failure (`failure_step`; None: none in its steps). Every value None without both losses."""
    out = dict(first_diff=None, upto=None, gap_steps=None, gap=None, failed_at=None, set_aside_failed_at=None)
    if kept is None or set_aside is None:
        return out
    a, b = np.asarray(kept, dtype=np.float64), np.asarray(set_aside, dtype=np.float64)
    w, rise = rules["failure_window"], rules["failure_rise"]
    out["failed_at"], out["set_aside_failed_at"] = failure_step(a, w, rise), failure_step(b, w, rise)
    n = min(len(a), len(b))
    # Bitwise: equal floats, or NaN in both at one step.
    same = (a[:n] == b[:n]) | (np.isnan(a[:n]) & np.isnan(b[:n]))
    if not same.all():
        out["first_diff"] = int(np.flatnonzero(~same)[0])
    out["upto"] = upto = min([n] + [f for f in (out["failed_at"], out["set_aside_failed_at"]) if f is not None])
    out["gap_steps"] = half = upto // 2
    if half >= w:
        out["gap"] = float(np.nanmedian(np.abs(moving_mean(a[:half], w) - moving_mean(b[:half], w))))
    return out


def arm_gaps(arrays: dict, seed: str, upto: int, window: int) -> list[float]:
    """The median over steps 0…`upto` − 1 of the difference of two arms' `window`-step mean losses (nats), for every
    pair of arms of one seed in `arrays` (labels "<arm>:s<seed>") that ran that far without a non-finite loss."""
    series = [moving_mean(v[:upto], window) for k, v in sorted(arrays.items())
              if k.endswith("__loss") and k.split("__")[0].split(":s")[-1] == str(seed) and len(v) >= upto]
    return [float(np.nanmedian(np.abs(x - y))) for i, x in enumerate(series) for y in series[i + 1:]
            if len(x) and np.isfinite(x).all() and np.isfinite(y).all()]


def replaced_words(res) -> str:
    """One sentence per run a rerun replaced in a `merge_seeds` reading ("" when none): which arm, the steps of the
    run read and of the run set aside, and both devices (a rerun shares the initialisation and batches, not the
    device)."""
    out = []
    for rep in getattr(res, "data", {}).get("replaced", []):
        arm, seed = rep["label"].split(":s")
        out.append(f"Seed {seed}, {CHAIN_ARMS.get(arm, arm)}: read from its rerun ({rep['steps']:,} steps on "
                   f"{rep['device'] or 'an unrecorded device'}) in place of its first run, which the wall budget "
                   f"stopped at {rep['set_aside']:,} steps on {rep['set_aside_device'] or 'an unrecorded device'}; "
                   "same initialisation, batches and rules.")
        if rep.get("first_diff") is not None:
            w = cfg_of(res)["rules"]["failure_window"]
            gaps = arm_gaps(res.arrays, seed, rep["gap_steps"], w) if rep.get("gap_steps") else []
            out.append(rerun_words(rep, gaps, w))
    return " ".join(out)


def rerun_words(rep: dict, gaps: list[float] | None = None, window: int = 100) -> str:
    """What a rerun and the run it replaced show about run-to-run variation (`rerun_compare`'s fields in a
    `merge_seeds` replacement): where their losses part, how far apart their moving mean losses are before either
    fails beside the differences between arms of that seed (`gaps`, `arm_gaps`), and whether they failed at
    different steps."""
    first = rep["first_diff"]
    agree = f"agree bit for bit to step {first - 1:,} and " if first else ""
    words = (f"The two runs (compared here in a reading made after the runs) are one experiment but not one "
             f"trajectory: their losses {agree}differ from step "
             f"{first:,} on (the training asks for no deterministic algorithms on the GPU, and the two were made by "
             "versions of the code shown identical only on the CPU)")
    if rep.get("gap") is not None:
        words += (f"; over the first {rep['gap_steps']:,} steps (the first half of those before either failed: a loss "
                  f"may already climb towards its failure in the second) their {window}-step mean losses differ by "
                  f"{rep['gap']:.3f} nats (median)")
        if gaps:
            lo, hi = min(gaps), max(gaps)
            size = ("larger than" if rep["gap"] > hi else "as large as" if rep["gap"] >= lo else "smaller than")
            words += (f", where two different arms of that seed differ by {lo:.3f}–{hi:.3f} nats (median per pair): "
                      f"in this pair, run-to-run variation is {size} the differences between arms")
    fa, fb = rep.get("failed_at"), rep.get("set_aside_failed_at")
    if fa is not None and fb is None and fa < rep["set_aside"]:
        words += (f". The rerun failed at step {fa:,}, where the first run had not failed by step "
                  f"{rep['set_aside']:,}: the step at which one seed fails varies from run to run by "
                  f"{rep['set_aside'] - fa:,} steps or more, so the arms are compared on whether they fail over seeds, "
                  "not on the step of one run")
    elif fa is not None and fb is not None:
        words += f". They failed at steps {fb:,} (first run) and {fa:,} (rerun)"
    elif fa is not None:
        words += f". The rerun failed at step {fa:,}, after the {rep['set_aside']:,} steps of the first run"
    elif fb is not None:
        words += f". The first run failed at step {fb:,}; the rerun did not fail in its {rep['steps']:,} steps"
    return words + "."


def numbers(res) -> dict:
    """Glue for the chapter from a `kernel_fidelity` result (`lib.book.results.Result`, committed or live). Every key
    of the full arm set is present: an arm or pair the result lacks (the toy run has eager arms only) reads "not run"."""
    data, arrays = res.data, res.arrays
    rules = cfg_of(res)["rules"]
    fid = fidelity(arrays, data["runs"], rules)
    out = {f"{arm}_{k}": "not run" for arm in ARM_WORDS
           for k in ("steps", "tokens_per_s", "failed_at", "val_loss", "l2_logit", "l2_wq", "big_layers",
                     "conj_authors", "conj_fa2")}
    out |= {f"{k}_{mode}": "not run" for mode in ("eager", "compiled")
            for k in ("alike", "gap_logit", "gap_wq", "ratio_logit", "ratio_wq")}
    out |= {f"first_loss_gap_{k}": "not run" for k in ("sdpa", "fa2", "kernels")}
    for r in data["runs"]:
        arm = r["label"].split(":s")[0]
        out[f"{arm}_steps"] = f"{r['steps']:,}"
        out[f"{arm}_tokens_per_s"] = f"{r['tokens_per_s'] / 1e6:.2f} M"
        fs = failure_step(arrays[f"{r['label']}__loss"], rules["failure_window"], rules["failure_rise"])
        out[f"{arm}_failed_at"] = "no failure" if fs is None else f"step {fs:,}"
        if r.get("val", {}).get("loss"):
            out[f"{arm}_val_loss"] = f"{r['val']['loss'][-1]:.3f}"
        ser = layer_series(arrays, r["label"])
        if ser["logit"].shape[1] >= FOCUS_LAYER:     # chapter 2b's layer
            out[f"{arm}_l2_logit"] = f"{ser['logit'][-1, FOCUS_LAYER - 1]:,.0f}"
            out[f"{arm}_l2_wq"] = f"{ser['wq'][-1, FOCUS_LAYER - 1]:.1f}"
        for pl in ("authors", "fa2"):    # the census of the bias's preconditions in this run
            out[f"{arm}_conj_{pl}"] = conjunction_peak(arrays, r["label"], pl)
        big = [str(i + 1) for i in np.flatnonzero(ser["logit"][-1] > BIG_LOGIT)]
        out[f"{arm}_big_layers"] = ", ".join(big) if big else "none"
    for p in fid["pairs"]:
        mode = p["ours"].split("_")[-1]
        out[f"alike_{mode}"] = "alike" if p["alike"] else "not alike"
        for k in ("logit", "wq"):
            out[f"gap_{k}_{mode}"] = f"{p['gaps'][k]:.3f}"
            out[f"ratio_{k}_{mode}"] = f"{p['ratio'][k]:.2f}"
    for s, sp in fid["spread"].items():
        for k, v in sp.items():
            out[f"spread_{k}"] = f"{v:.3f}"
            out[f"spread_{k}_factor"] = f"{math.exp(v):,.0f}"
    l2 = [layer_series(arrays, r["label"])["logit"][-1, FOCUS_LAYER - 1] for r in data["runs"]
          if layer_series(arrays, r["label"])["logit"].shape[1] >= FOCUS_LAYER]
    out["l2_logit_min"] = f"{min(l2):,.0f}" if l2 else "not run"
    out["focus_layer"] = FOCUS_LAYER
    out["alike_factor"] = f"{rules['alike_factor']:g}"
    # Compiled against eager at step 0 (same weights, same batch): what fusion alone changes in the loss.
    first = {r["label"].split(":s")[0]: float(arrays[f"{r['label']}__loss"][0]) for r in data["runs"]}
    for k in ("sdpa", "fa2"):
        if f"{k}_eager" in first and f"{k}_compiled" in first:
            out[f"first_loss_gap_{k}"] = f"{abs(first[f'{k}_eager'] - first[f'{k}_compiled']):.2e}"
    if "sdpa_eager" in first and "fa2_eager" in first:
        out["first_loss_gap_kernels"] = f"{abs(first['sdpa_eager'] - first['fa2_eager']):.2e}"
    return out


# ---------------------------------------------------------------------------------------------------------------
# gpt2_arms: FP32 attention, flash SDPA, our FA2 placement, the paper placement from one initialisation per seed
# ---------------------------------------------------------------------------------------------------------------
# The comparison's arms as the chapter's prose names them in a list.
SHORT_ARMS = {"fp32": "FP32 attention", "sdpa": "flash SDPA", "ours_fa2": "our FA2 placement",
              "paper": "the paper placement"}
CHAIN_ARMS = {"fp32": "FP32 attention", "sdpa": "PyTorch flash SDPA (BF16)", "ours_fa2": "our kernel, FA2 placement",
              "paper": "our kernel, paper placement (512-key blocks)"}


def common_step(arrays: dict, labels) -> int:
    """The last census step every run in `labels` reached (the step at which arms are compared side by side)."""
    return int(min(np.asarray(arrays[f"{lab}__census__step"]).max() for lab in labels))


def at_step(ser: dict, step: int) -> int:
    """Index of census step `step` in a `layer_series`."""
    return int(np.flatnonzero(ser["step"] == step)[0])


def growth_ratios(arrays: dict, runs: list[dict], rules: dict) -> dict:
    """Per seed, arm and registered growth step the arm reached (and the reference reached): the largest logit and the
    largest ‖W_Q,h‖₂ of each layer as a ratio to the reference arm (FP32 attention) of the same seed, and the largest
    over layers: {seed: {arm: {step: {"logit": (L,), "wq": (L,)}}}}. The registered verdict also needs the FP32 arm's
    own seed-to-seed spread (`fp32_spread`), so it is read only when two or more seeds exist."""
    out = {}
    labels = [r["label"] for r in runs if "error" not in r]
    for s in sorted({lab.split(":s")[1] for lab in labels}):
        ser = {lab.split(":s")[0]: layer_series(arrays, lab) for lab in labels if lab.endswith(f":s{s}")}
        ref = ser.get(rules["reference"])
        if ref is None:
            continue
        out[s] = {}
        for arm, a in ser.items():
            if arm == rules["reference"]:
                continue
            out[s][arm] = {}
            for step in rules["growth_steps"]:
                if step in set(a["step"].tolist()) and step in set(ref["step"].tolist()):
                    i, j = at_step(a, step), at_step(ref, step)
                    out[s][arm][step] = {k: a[k][i] / ref[k][j] for k in ("logit", "wq")}
    return out


def fp32_spread(arrays: dict, runs: list[dict], rules: dict):
    """The reference arm's own seed-to-seed spread per growth step and layer (largest ratio between two seeds), or
    None with fewer than two seeds."""
    ref = [r["label"] for r in runs if r["label"].split(":s")[0] == rules["reference"] and "error" not in r]
    if len(ref) < 2:
        return None
    ser = [layer_series(arrays, lab) for lab in ref]
    out = {}
    for step in rules["growth_steps"]:
        have = [s for s in ser if step in set(s["step"].tolist())]
        if len(have) >= 2:
            out[step] = {k: np.max([a[k][at_step(a, step)] / b[k][at_step(b, step)] for a in have for b in have],
                                   axis=0) for k in ("logit", "wq")}
    return out


def _cap(text: str) -> str:
    """`text` with its first letter in upper case (an arm's name opening a sentence)."""
    return text[:1].upper() + text[1:]


def grown_from(by_step: dict, k: str) -> dict:
    """{layer: the first growth step from which `layer` is grown (`growth_verdict`'s lists under key `k`) at that
    step and every later one judged}, for the layers grown at the last step judged."""
    steps = sorted(by_step)
    out = {}
    for layer in (by_step[steps[-1]][k] if steps else []):
        first = steps[-1]
        for st in reversed(steps):
            if layer not in by_step[st][k]:
                break
            first = st
        out[layer] = first
    return out


def growth_words(verdict: dict | None, spread: dict | None, ratios: dict) -> dict:
    """Glue for the registered growth verdict (`growth_verdict`, `fp32_spread`, `growth_ratios` of a `merge_seeds`
    reading): per arm judged, "<arm>_grown_logit"/"_grown_wq" — the layers grown at every growth step judged
    ("layers 2, 3, 4" or "none at every step"), then those grown from a later step to the last (`grown_from`:
    "; from a later step on: layer 2 from 4,000"; "<arm>_grown_logit_every" and "_wq_every": the first part alone,
    "none" when empty), "<arm>_grown_steps" — the steps judged, "<arm>_grown_min_ratio" (and "_max_ratio") — the
    smallest (largest) logit ratio to FP32 attention over the grown (step, layer) pairs (a layer grown from a later
    step counted from that step on) and seeds; "spread_max" — the reference's largest seed-to-seed spread over
    those steps and layers; "judged_arms" — how many arms the verdict covers."""
    out = {"judged_arms": str(len(verdict or {}))}
    if not verdict:
        return out
    for arm, by_step in verdict.items():
        steps = sorted(by_step)
        if not steps:
            continue
        out[f"{arm}_grown_steps"] = ", ".join(f"{st:,}" for st in steps)
        for k in ("logit", "wq"):
            every = sorted(set.intersection(*(set(by_step[st][k]) for st in steps)))
            later = {ly: st for ly, st in sorted(grown_from(by_step, k).items()) if st != steps[0]}
            out[f"{arm}_grown_{k}_every"] = ("layers " + ", ".join(map(str, every))) if every else "none"
            out[f"{arm}_grown_{k}"] = ((("layers " + ", ".join(map(str, every))) if every else "none at every step")
                                       + ("; from a later step on: " + ", ".join(
                                           f"layer {ly} from {st:,}" for ly, st in later.items()) if later else ""))
            if k == "logit":
                # over every grown (step, layer): the layers grown at every step, and the others from their onset on
                onset = {i: steps[0] for i in every} | later
                vals = [ratios[s][arm][st][k][i - 1] for s in ratios for st in steps for i, st0 in onset.items()
                        if st >= st0 and arm in ratios[s] and st in ratios[s][arm]]
                fmt = lambda v: f"{v:,.1f}" if v < 10 else f"{v:,.0f}"     # noqa: E731
                out[f"{arm}_grown_min_ratio"] = fmt(min(vals)) if vals else "—"
                out[f"{arm}_grown_max_ratio"] = fmt(max(vals)) if vals else "—"
    judged = sorted({st for by_step in verdict.values() for st in by_step})
    if judged:
        out["spread_max"] = f"{max(float(np.max(spread[st][k])) for st in judged for k in ('logit', 'wq')):.1f}"
    return out


def focus_growth_words(verdict: dict | None, failed: dict, layer: int = FOCUS_LAYER, spiked: dict | None = None) -> str:
    """One sentence on which arms grow layer `layer`'s largest logit beyond the reference at every growth step judged
    (`growth_verdict`), and whether that includes arms that never exploded. `failed`: {arm: True when the arm
    exploded (failed without recovering) in some seed} (`outcomes`). `spiked` (optional): {arm: [seeds where it
    failed by the registered rule and came back]}, said beside "never exploded" so that the word is not read as
    "never failed"."""
    spiked = spiked or {}

    def calm_words(arms) -> str:
        seeds = sorted({s for a in arms for s in spiked.get(a, [])})
        if not seeds:
            return ""
        return (f" (ended no run failed; {'it' if len(arms) == 1 else 'each'} failed by the registered rule in "
                f"seed{'s' if len(seeds) > 1 else ''} {' and '.join(map(str, seeds))} and came back)")
    if not verdict:
        return "No arm can be judged yet: the rule needs two seeds of FP32 attention."
    judged = [a for a, by in verdict.items() if by]
    grow = [a for a in judged if all(layer in by["logit"] for by in verdict[a].values())]
    name = lambda arms: " and ".join(CHAIN_ARMS.get(a, a) for a in arms)     # noqa: E731
    # the arms that grow it from a later growth step to the last, not from the first
    late = {a: grown_from(verdict[a], "logit")[layer] for a in judged if a not in grow
            and layer in grown_from(verdict[a], "logit")}
    late_words = ""
    for st in sorted(set(late.values())):
        arms = [a for a in late if late[a] == st]
        calm_late = [a for a in arms if not failed.get(a)]
        late_words += (f" {_cap(name(arms))} {'grows' if len(arms) == 1 else 'grow'} it from step {st:,} on, in every seed "
                       f"{'it' if len(arms) == 1 else 'each'} ran, though not at the steps before"
                       + (f"; {'its' if len(arms) == 1 else 'their'} loss never exploded" if calm_late == arms else
                          f"; the loss of {name(calm_late)} never exploded" if calm_late else "")
                       + calm_words(calm_late) + ".")
    if not grow:
        return f"No arm grows layer {layer}'s logits beyond FP32 attention at every growth step judged." + late_words
    who = f"All {len(judged)} arms judged" if len(grow) == len(judged) > 1 else name(grow)
    calm = [a for a in grow if not failed.get(a)]
    tail = (f", including {name(calm)}, whose loss never exploded{calm_words(calm)}: that growth is BF16 attention's, not only the "
            f"exploding placement's" if calm and len(calm) < len(grow) else
            ", and none of them exploded" if calm else "")
    verb = "grows" if len(grow) == 1 else "grow"
    return (f"{_cap(who)} {verb} layer {layer}'s logits beyond FP32 attention at every growth step judged, in every seed "
            f"{'it' if len(grow) == 1 else 'each'} ran{tail}." + late_words)


def growth_verdict(arrays: dict, runs: list[dict], rules: dict):
    """The registered growth rule: per arm run in two or more of the seeds that have the reference arm, per growth
    step that all of those runs reached, the layers (1-based) whose largest logit (and largest ‖W_Q,h‖₂) exceeds the
    reference's of the same seed by more than the reference's own seed-to-seed spread over all its seeds
    (`fp32_spread`), in every seed the arm ran (`verdict_seeds`): {arm: {step: {"logit": [layers], "wq": [layers]}}}.
    None with fewer than two reference seeds."""
    spread = fp32_spread(arrays, runs, rules)
    if spread is None:
        return None
    ratios = growth_ratios(arrays, runs, rules)
    # Each arm over the seeds it ran (two or more): an entry not yet run for one seed leaves that seed out of its
    # arms' verdict rather than leaving the arms unjudged; `verdict_seeds` says which seeds each arm's reads.
    by_arm = {arm: [s for s in sorted(ratios) if arm in ratios[s]] for s0 in ratios for arm in ratios[s0]}
    out = {}
    for arm, seeds in sorted(by_arm.items()):
        if len(seeds) < 2:
            continue
        out[arm] = {}
        for step in rules["growth_steps"]:
            if step in spread and all(step in ratios[s][arm] for s in seeds):
                out[arm][step] = {k: [int(i) + 1 for i in np.flatnonzero(np.all(
                    [ratios[s][arm][step][k] > spread[step][k] for s in seeds], axis=0))] for k in ("logit", "wq")}
    return out


def verdict_seeds(runs: list[dict], rules: dict) -> dict:
    """{arm: [seeds]}: the seeds `growth_verdict` reads for each arm (those it ran with the reference arm beside it)."""
    labels = [r["label"] for r in runs if "error" not in r]
    ref = {lab.split(":s")[1] for lab in labels if lab.split(":s")[0] == rules["reference"]}
    out: dict = {}
    for lab in labels:
        arm, seed = lab.split(":s")
        if arm != rules["reference"] and seed in ref:
            out.setdefault(arm, []).append(int(seed))
    return {a: sorted(v) for a, v in out.items()}


def probe_signs(arrays: dict, label: str) -> dict:
    """The side chain probe's sign counts over every event and probed layer of a run: Δδ > 0 among tied rows with
    Δδ ≠ 0, and the dW_Q error's push on ‖W_Q,h‖₂ through Adam's denominator > 0 among (event, layer, head), each
    with its count and a two-sided binomial p-value against ½ (normal approximation with continuity correction;
    the counts are thousands)."""
    pre = f"{label}__probe__"
    pos, nz = float(np.sum(arrays[pre + "dd_pos_tied"])), float(np.sum(arrays[pre + "dd_nz_tied"]))
    push = np.asarray(arrays[pre + "push_adam"], dtype=np.float64)
    push = push[np.isfinite(push) & (push != 0)]

    def p2(k, n):
        if n == 0:
            return float("nan")
        z = (abs(k - n / 2) - 0.5) / math.sqrt(n / 4)
        return float(math.erfc(max(z, 0.0) / math.sqrt(2)))
    return dict(dd_share=pos / nz if nz else float("nan"), dd_n=int(nz), dd_p=p2(pos, nz),
                push_share=float((push > 0).mean()) if push.size else float("nan"), push_n=int(push.size),
                push_p=p2(float((push > 0).sum()), push.size), n_events=int(len(arrays[pre + "step"])))


LEAN_LEVEL = 0.05      # a seed's chain probe "leans" when its sign test's p is below this (a reading after the runs)


FA2_SHORT = {"sdpa": "flash SDPA", "ours_fa2": "our FA2 placement"}     # the FA2-numerics arms in a verdict's words


def lean_seeds(res, arm: str, level: float = LEAN_LEVEL) -> dict:
    """In how many seeds of a (merged) comparison an arm's chain probe leans upward (`probe_signs`): "dd" — Δδ > 0
    on more than half of the tied rows — and "push" — the dW_Q error pushes ‖W_Q,h‖₂ up in more than half of the
    cases — each with its sign test's p < `level`: {"dd": (k, n), "push": (k, n)}, n the seeds with the probe."""
    labs = [r["label"] for r in res.data["runs"]
            if "error" not in r and r["label"].split(":s")[0] == arm and f"{r['label']}__probe__step" in res.arrays]
    signs = [probe_signs(res.arrays, lab) for lab in labs]
    return {k: (sum(s[f"{k}_share"] > 0.5 and s[f"{k}_p"] < level for s in signs), len(signs)) for k in ("dd", "push")}


def probe_split(arrays: dict, labels, until: int | None = None) -> dict | None:
    """The side probe's split of O's error along sign(V) on the conjunction (`lib.training.chain_probe.o_error_split`),
    pooled over every event (those at steps below `until` where given), probed layer and head of the runs `labels`
    (one label or several: an arm's seeds); None when none of them recorded it (a run without the probe's `split`),
    when no event is left, or when it is NaN throughout (no placement models the arm's attention).

    Returns "n" (conjunction pairs), "n_entries" ((event, layer, head) entries with pairs), "seeds" (those whose
    runs it pools) and per part ("tie": the
    rounding of P̄V; "ell": the placement's P̄ and ℓ): its mean along sign(V) in ULP of O ("<part>_mean"); the
    entries whose sum lies along sign(V) and against it ("<part>_along", "<part>_against") and the exact two-sided
    sign test of those counts ("<part>_p"; `lib.stats.sign_test`) — entries, not pairs: pair by pair the tie part
    is about as often against V as along it (a tied sum that needs no rounding drops its tiny remainder), its bias
    is in the sizes; and the share of pairs ≠ 0 along sign(V) ("<part>_pair_share"). Then the total mean
    ("total_mean" = tie_mean + ell_mean) and the tie part's share of it ("tie_share" = tie_mean / total_mean: beyond
    [0, 1] when the parts have opposite signs; NaN when the total is 0)."""
    from lib.stats import sign_test
    labels = [labels] if isinstance(labels, str) else list(labels)
    # (prefix, the (event, layer, head) entries the split was measured on) of every run that recorded it
    def kept(pre):     # the (event, layer, head) entries measured, at the events before `until`
        ok = np.isfinite(np.asarray(arrays[pre + "err_tie_sum"], dtype=np.float64))
        if until is not None:
            ok &= (np.asarray(arrays[pre + "step"]) < until).reshape((-1,) + (1,) * (ok.ndim - 1))
        return ok
    got = [(pre, kept(pre)) for pre in (f"{lab}__probe__" for lab in labels) if pre + "err_tie_sum" in arrays]
    if not any(ok.any() for _, ok in got):
        return None
    cat = {key: np.concatenate([np.asarray(arrays[pre + key], dtype=np.float64)[ok] for pre, ok in got])
           for key in ("n_conj", "err_tie_sum", "err_tie_agree", "err_tie_nz", "err_ell_sum", "err_ell_agree",
                       "err_ell_nz")}
    n = float(cat["n_conj"].sum())
    out = {"n": int(n), "n_entries": int((cat["n_conj"] > 0).sum()),
           "seeds": sorted({int(pre.split(":s")[1].split("__")[0]) for pre, ok in got if ok.any()})}
    for part in ("tie", "ell"):
        sums, nz = cat[f"err_{part}_sum"], float(cat[f"err_{part}_nz"].sum())
        st = sign_test(sums[cat["n_conj"] > 0])
        out[f"{part}_mean"] = float(sums.sum()) / n if n else float("nan")
        out[f"{part}_along"], out[f"{part}_against"] = st["n_pos"], st["n_neg"]
        out[f"{part}_p"] = st["p_two"] if st["n"] else float("nan")
        out[f"{part}_pair_share"] = float(cat[f"err_{part}_agree"].sum()) / nz if nz else float("nan")
    out["total_mean"] = out["tie_mean"] + out["ell_mean"]
    out["tie_share"] = out["tie_mean"] / out["total_mean"] if out["total_mean"] else float("nan")
    return out


def arms_split(res) -> dict | None:
    """`probe_split` per arm of a (merged) GPT-2 comparison, pooled over the arm's seeds: {arm: dict}, arms without
    the split left out; None when no arm has it."""
    by_arm = {}
    for r in res.data["runs"]:
        if "error" not in r:
            by_arm.setdefault(r["label"].split(":s")[0], []).append(r["label"])
    out = {arm: probe_split(res.arrays, labs) for arm, labs in by_arm.items()}
    out = {arm: v for arm, v in out.items() if v is not None}
    return out or None


def split_glue(split: dict | None, level: float = 0.05) -> dict:
    """Glue for one arm's `probe_split` (None: every key "—"): "n" pairs, "entries", "seeds" ("seeds 1 and 2"), and
    per part ("tie", "ell") its
    mean in ULP of O ("<part>_mean", signed, 2 significant digits), the entries along and against sign(V), the sign
    test's p and "<part>_reads": "indistinguishable from zero" when p ≥ `level`, else "along sign(V)" or "against
    sign(V)" by the majority of entries."""
    keys = ["n", "entries", "seeds"] + [f"{p}_{k}" for p in ("tie", "ell")
                                        for k in ("mean", "along", "against", "p", "reads")]
    if split is None:
        return {k: "—" for k in keys}
    seeds = [str(x) for x in split["seeds"]]
    out = {"n": f"{split['n']:,}", "entries": f"{split['n_entries']:,}",
           "seeds": ("seed " if len(seeds) == 1 else "seeds ") + series(seeds)}
    for p in ("tie", "ell"):
        out[f"{p}_mean"] = f"{split[p + '_mean']:+.2g}"
        out[f"{p}_along"], out[f"{p}_against"] = f"{split[p + '_along']:,}", f"{split[p + '_against']:,}"
        out[f"{p}_p"] = f"{split[p + '_p']:.2g}"
        way = "along sign(V)" if split[p + "_along"] > split[p + "_against"] else "against sign(V)"
        # the sign test counts entries; where their majority and the pooled mean disagree, say both
        mean_way = "along sign(V)" if split[p + "_mean"] > 0 else "against sign(V)"
        out[f"{p}_reads"] = ("indistinguishable from zero" if not split[p + "_p"] < level
                             else way if way == mean_way or split[p + "_mean"] == 0
                             else f"most entries {way}, though the pooled mean is {mean_way}")
    return out


def series(words: list[str]) -> str:
    """Words as a reader lists them: "", "a", "a and b", "a, b and c"."""
    return "" if not words else words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def wall_words(res) -> str:
    """The wall budgets (training seconds) a GPT-2 result's runs had, in words: "1,320 s", "1,320 s or 1,620 s" (a
    `merge_seeds` reading: each merged result's own, which `recipe` leaves out of the merged configuration) or "no
    limit"."""
    metas = res.meta if isinstance(res.meta, list) else [res.meta]
    cfgs = [m.get("provenance", {}).get("cfg") or m.get("config") or {} for m in metas]
    if not isinstance(res.meta, list) and getattr(res, "cfg", None) is not None:
        cfgs = [res.cfg]
    walls = sorted({float(c["max_wall_s"]) for c in cfgs if c.get("max_wall_s")})
    return " or ".join(f"{w:,.0f} s" for w in walls) if walls else "no limit"


# The training loss the tables and prose compare at a step: the mean over this many steps before it (one step's loss
# moves by ≈ 0.1 nats from batch to batch).
LOSS_MEAN_STEPS = 500


def arms_numbers(res) -> dict:
    """Glue for the GPT-2 chain chapter from a `gpt2_arms` result: per arm (keys "<arm>_..."): steps run and whether
    the wall limit cut it, throughput, failure step, last validation loss, the 500-step mean training loss at the
    common step, the largest logit and ‖W_Q,h‖₂ at the common step and at the arm's last census (with their layer),
    outlier layers, census conjunction peaks, probe signs, telemetry cost; and the run's settings."""
    from lib.studies.gpt2.telemetry import telemetry_cost
    data, arrays = res.data, res.arrays
    cfg = cfg_of(res)
    rules = cfg["rules"]
    runs = [r for r in data["runs"] if "error" not in r]
    labels = [r["label"] for r in runs]
    common = common_step(arrays, labels)
    out = {"common_step": f"{common:,}", "seeds": ", ".join(str(s) for s in cfg["seeds"]),
           "n_seeds": str(len(cfg["seeds"])), "steps": f"{cfg['steps']:,}",
           "max_wall_s": wall_words(res),
           "census_every": f"{cfg['census_every']:,}", "census_rows": str(cfg["census_rows"]),
           "probe_every": f"{cfg['probe']['every']:,}", "probe_rows": str(cfg["probe"]["rows"]),
           "probe_top": str(cfg["probe"]["top"]), "window": str(rules["failure_window"]),
           "rise": f"{rules['failure_rise']:g}", "lr": f"{cfg['lr']:g}", "warmup": f"{cfg['warmup']:,}",
           "batch": f"{cfg['batch_size']} × {cfg['model']['block_size']:,}", "big_logit": f"{BIG_LOGIT:,.0f}",
           "n_arms": str(len(cfg["arms"]))}
    rb = [a["attn"].split("round_block=")[1].split("/")[0] for a in cfg["arms"] if "round_block=" in a["attn"]]
    out["paper_rb"] = f"{int(rb[0]):,}" if rb else "64"
    from lib.studies.gpt2.telemetry import TARGET_SHARE
    out["telemetry_target"] = f"{100 * TARGET_SHARE:.0f} %"
    out["loss_mean_steps"] = f"{LOSS_MEAN_STEPS:,}"
    for r in runs:
        lab = r["label"]
        arm = lab.split(":s")[0]
        loss = np.asarray(arrays[f"{lab}__loss"], dtype=np.float64)
        out[f"{arm}_steps"] = f"{r['steps']:,}"
        out[f"{arm}_cut"] = "cut by the wall limit" if r.get("truncated_at") else "the whole horizon"
        out[f"{arm}_tokens_per_s"] = f"{r['tokens_per_s'] / 1e6:.2f} M"
        fs = failure_step(loss, rules["failure_window"], rules["failure_rise"])
        out[f"{arm}_failed_at"] = "none" if fs is None else f"step {fs:,}"
        ep = failure_episodes(loss, rules["failure_window"], rules["failure_rise"])
        out[f"{arm}_recovered"] = "—" if fs is None else episode_words(ep)
        out[f"{arm}_n_failures"] = str(len(ep))
        out[f"{arm}_ends"] = ("never failed" if not ep else "failed" if ep[-1][1] is None else "back within the margin")
        out[f"{arm}_val_loss"] = f"{r['val']['loss'][-1]:.3f}" if r.get("val", {}).get("loss") else "—"
        on = growth_onset(arrays, lab)
        out[f"{arm}_onset_step"] = "never" if on is None else f"step {on[0]:,}"
        out[f"{arm}_onset_layers"] = "none" if on is None else ", ".join(map(str, on[1]))
        pre = before_failure(arrays, lab, fs) if fs is not None else None
        out[f"{arm}_prefail_step"] = "—" if pre is None else f"{pre['step']:,}"
        out[f"{arm}_prefail_logit"] = "—" if pre is None else f"{pre['logit']:,.0f}"
        out[f"{arm}_prefail_logit_layer"] = "—" if pre is None else str(pre["logit_layer"])
        out[f"{arm}_prefail_wq"] = "—" if pre is None else f"{pre['wq']:.1f}"
        lo = max(0, common - LOSS_MEAN_STEPS)
        out[f"{arm}_loss_common"] = f"{loss[lo:common].mean():.3f}"
        ser = layer_series(arrays, lab)
        for tag, i in (("common", at_step(ser, common)), ("last", len(ser["step"]) - 1)):
            for k in ("logit", "wq"):
                layer = int(np.argmax(ser[k][i]))
                v = ser[k][i, layer]
                out[f"{arm}_{k}_{tag}"] = f"{v:,.0f}" if k == "logit" else f"{v:.1f}"
                out[f"{arm}_{k}_{tag}_layer"] = str(layer + 1)
        out[f"{arm}_logit_common_value"] = float(ser["logit"][at_step(ser, common)].max())
        big = [str(i + 1) for i in np.flatnonzero(ser["logit"][at_step(ser, common)] > BIG_LOGIT)]
        out[f"{arm}_big_layers"] = ", ".join(big) if big else "none"
        for pl in ("authors", "fa2"):
            out[f"{arm}_conj_{pl}"] = conjunction_peak(arrays, lab, pl)
        if f"{lab}__probe__step" in arrays:
            ps = probe_signs(arrays, lab)
            out[f"{arm}_dd_share"] = f"{100 * ps['dd_share']:.1f} %"
            out[f"{arm}_dd_n"] = f"{ps['dd_n']:,}"
            out[f"{arm}_dd_p"] = f"{ps['dd_p']:.2g}"
            out[f"{arm}_push_share"] = f"{100 * ps['push_share']:.1f} %"
            out[f"{arm}_push_n"] = f"{ps['push_n']:,}"
            out[f"{arm}_push_p"] = f"{ps['push_p']:.2g}"
        tel = data.get("telemetry", {}).get(lab)
        if tel and tel.get("step_times"):
            evals = range(cfg["eval_every"] - 1, cfg["steps"], cfg["eval_every"]) if cfg.get("eval_every") else []
            ev = sorted(set(np.asarray(arrays[f"{lab}__census__step"]).tolist()) | set(evals))
            c = telemetry_cost(tel["step_times"], ev)
            out[f"{arm}_telemetry"] = f"{100 * c['share']:.0f} %"
            out[f"{arm}_probe_s"] = f"{np.median(tel['probe_s']):.2f} s" if tel.get("probe_s") else "—"
    # Every other arm's largest logit at the paper placement's last census before its failure: logits compared at
    # one step, not an arm's late value against the paper placement's early one.
    if out.get("paper_prefail_step", "—") != "—":
        st = int(out["paper_prefail_step"].replace(",", ""))
        for r in runs:
            arm, ser = r["label"].split(":s")[0], layer_series(arrays, r["label"])
            hit = np.flatnonzero(ser["step"] == st)
            if arm != "paper" and hit.size:
                v = float(ser["logit"][int(hit[0])].max())
                out[f"{arm}_logit_at_paper_prefail"] = f"{v:,.0f}"
                out[f"{arm}_logit_at_paper_prefail_vs"] = ("below" if v < float(out["paper_prefail_logit"].replace(
                    ",", "")) else "not below")
    bf16 = [out[f"{a}_logit_common_value"] for a in ("sdpa", "ours_fa2", "paper") if f"{a}_logit_common_value" in out]
    if bf16 and "fp32_logit_common_value" in out:
        out["bf16_over_fp32_lo"] = f"{min(bf16) / out['fp32_logit_common_value']:,.0f}"
        out["bf16_over_fp32_hi"] = f"{max(bf16) / out['fp32_logit_common_value']:,.0f}"
    for k in [k for k in out if k.endswith("_logit_common_value")]:
        del out[k]
    return out


def seeds_words(res) -> str:
    """Which arms each seed of a (merged) GPT-2 comparison ran, in words: "Seeds 0 and 1 ran all 4 arms; seed 2
    FP32 attention and our kernel, paper placement (512-key blocks)". Seeds with the same arms are grouped; a seed
    with every arm of the comparison reads "all N arms"."""
    every = [a["label"] for a in cfg_of(res)["arms"]]
    by_seed: dict[int, list[str]] = {}
    for r in res.data["runs"]:
        if "error" not in r:
            arm, seed = r["label"].split(":s")
            by_seed.setdefault(int(seed), []).append(arm)
    groups: dict[tuple, list[int]] = {}
    for seed, arms in sorted(by_seed.items()):
        groups.setdefault(tuple(a for a in every if a in arms), []).append(seed)
    parts = []
    for arms, seeds in groups.items():
        who = (f"seed {seeds[0]}" if len(seeds) == 1
               else "seeds " + ", ".join(map(str, seeds[:-1])) + f" and {seeds[-1]}")
        what = (f"all {len(every)} arms" if len(arms) == len(every)
                else " and ".join([", ".join(CHAIN_ARMS.get(a, a) for a in arms[:-1]), CHAIN_ARMS.get(arms[-1], arms[-1])]
                                  if len(arms) > 1 else [CHAIN_ARMS.get(arms[0], arms[0])]))
        parts.append(f"{who} ran {what}" if not parts else f"{who} {what}")
    out = "; ".join(parts)
    return out[:1].upper() + out[1:]


def _names(arms) -> str:
    xs = [CHAIN_ARMS.get(a, a) for a in arms]
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def failure_words(n: dict, arms) -> tuple[str, str]:
    """The failure rule's outcome in one seed, from `arms_numbers` glue `n` for the arms in `arms` (in that order):
    (a heading — which arms end their run failed, which failed and came back, which never failed — and one clause
    per arm). Whether a run *ended* failed is a reading made after the runs (`failure_episodes`), not a registered
    rule."""
    groups = {"failed": [], "back within the margin": [], "never failed": []}
    clauses = []
    for a in arms:
        if f"{a}_ends" not in n:
            continue
        groups[n[f"{a}_ends"]].append(a)
        name = CHAIN_ARMS.get(a, a)
        if n[f"{a}_ends"] == "never failed":
            cut = " (cut by its wall limit)" if n[f"{a}_cut"] == "cut by the wall limit" else ""
            clauses.append(f"{name} did not fail in its {n[f'{a}_steps']} steps{cut}")
        elif n[f"{a}_ends"] == "failed":
            more = int(n[f"{a}_n_failures"]) - 1
            clauses.append(f"{name} failed at {n[f'{a}_failed_at']} and was not back by the end of its run"
                           + (f" ({more} later failure{'s' if more > 1 else ''} after coming back once)"
                              if more > 0 and n[f"{a}_recovered"] != "not by the end of the run" else ""))
        else:
            clauses.append(f"{name} failed at {n[f'{a}_failed_at']} and was back within the rule's margin "
                           f"{n[f'{a}_recovered']}, a spike")
    parts = []
    for key, one, many in (("failed", "ends its run failed", "end their runs failed"),
                           ("back within the margin", "fails and comes back", "fail and come back"),
                           ("never failed", "never fails", "never fail")):
        if groups[key]:
            parts.append(f"{_names(groups[key])} {one if len(groups[key]) == 1 else many}")
    head = "; ".join(parts)
    head = head[:1].upper() + head[1:] + "."
    body = "; ".join(clauses)
    return head, body[:1].upper() + body[1:] + "."


def failure_reading(n: dict) -> str:
    """What one seed's failures say of the paper's attribution (`arms_numbers` glue `n`): its placement ending its
    run failed where FP32 attention never failed agrees with it; anything else neither supports nor refutes it."""
    ends = {a: n.get(f"{a}_ends") for a in CHAIN_ARMS}
    if ends["paper"] == "failed" and ends["fp32"] == "never failed":
        spiked = [a for a in ("sdpa", "ours_fa2") if ends[a] == "back within the margin"]
        exploded = [a for a in ("sdpa", "ours_fa2") if ends[a] == "failed"]
        out = ("In this seed the paper placement's run ends failed where FP32 attention's does not, as the paper's "
               "attribution to its placement's rounding expects")
        if exploded:
            out += f"; but {_names(exploded)} end{'s' if len(exploded) == 1 else ''} failed too"
        elif spiked:
            out += (f"; {_names(spiked)} {'fails' if len(spiked) == 1 else 'fail'} later and "
                    f"{'comes' if len(spiked) == 1 else 'come'} back")
        return out + "."
    return ("The paper attributes the failure to its placement's biased rounding; this seed neither supports nor "
            "refutes that.")


def arms_table(res) -> str:
    """A Markdown table of `arms_numbers`: one row per arm (readable names)."""
    n = arms_numbers(res)
    rows = [f"| arm | steps | failure | mean loss (nats), {n['loss_mean_steps']} steps before step {n['common_step']} | "
            "largest logit (layer) | "
            "largest ‖W_Q,h‖₂ (layer) |", "|---|---:|---|---:|---:|---:|"]
    for r in res.data["runs"]:
        arm = r["label"].split(":s")[0]
        if f"{arm}_steps" not in n:
            continue
        rows.append(f"| {CHAIN_ARMS.get(arm, arm)} | {n[arm + '_steps']} | {n[arm + '_failed_at']} | "
                    f"{n[arm + '_loss_common']} | {n[arm + '_logit_common']} ({n[arm + '_logit_common_layer']}) | "
                    f"{n[arm + '_wq_common']} ({n[arm + '_wq_common_layer']}) |")
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------------------------
# The explosion claim in GPT-2: what the registered comparison's seeds say, read together
# ---------------------------------------------------------------------------------------------------------------
CHAIN_RESULTS = ("gpt2_arms", "gpt2_arms_s1", "gpt2_arms_s1_fa2", "gpt2_arms_s2", "gpt2_arms_s2_fa2",
                 "gpt2_arms_s0_paper", "gpt2_arms_s0_fp32", "gpt2_arms_s1_fp32")


def outcomes(res) -> dict:
    """Per arm of a (merged) GPT-2 comparison: {arm: [(seed, steps, first failure step or None, steps from it to
    the loss being back or None)]}, seeds ascending. The last is None unless every failure of the run ended
    (`failure_episodes`): an explosion is a run that ends failed, also after coming back once."""
    rules = cfg_of(res)["rules"]
    out = {}
    for r in sorted((r for r in res.data["runs"] if "error" not in r), key=lambda r: r["label"]):
        arm, seed = r["label"].split(":s")
        loss = res.arrays[f"{r['label']}__loss"]
        ep = failure_episodes(loss, rules["failure_window"], rules["failure_rise"])
        # Recovered only when the last failure ended: a run that came back and failed again for good exploded.
        rec = ep[0][1] - ep[0][0] if ep and ep[-1][1] is not None else None
        out.setdefault(arm, []).append((int(seed), int(r["steps"]), ep[0][0] if ep else None, rec))
    return {a: sorted(v) for a, v in out.items()}


def explosion_verdict(res) -> dict | None:
    """The paper's explosion claim in GPT-2 from a `merge_seeds` reading (None without the paper and FP32 arms):
    "reproduced" when the paper placement explodes (its run ends failed: `outcomes`) in every seed and FP32 attention
    fails in none; "partly" when it explodes in some seeds; "not reproduced" when in none. Evidence in words, per
    arm and seed."""
    oc = outcomes(res)
    if "paper" not in oc or "fp32" not in oc:
        return None
    rules = cfg_of(res)["rules"]
    o_arm = {id(o): a for a, v in oc.items() for o in v}
    boom = lambda o: o[2] is not None and o[3] is None        # noqa: E731  failed, never back
    n_paper, n_boom = len(oc["paper"]), sum(boom(o) for o in oc["paper"])
    fp32_ok = all(o[2] is None for o in oc["fp32"])
    status = ("reproduced" if n_boom == n_paper and fp32_ok else "partly" if n_boom else "not reproduced")

    def one(o):
        seed, steps, fs, rec = o
        if fs is None:
            return f"seed {seed}: no failure in {steps:,} steps"
        ep = failure_episodes(res.arrays[f"{o_arm[id(o)]}:s{seed}__loss"], rules["failure_window"],
                              rules["failure_rise"])
        return f"seed {seed}: failed at step {fs:,}, " + ("not recovered by the end of the run" if ep[0][1] is None
                                                         else "back within the margin " + episode_words(ep))
    words = {a: f"{CHAIN_ARMS.get(a, a)} — " + "; ".join(one(o) for o in oc[a]) for a in oc}
    ev = (f"GPT-2 124M at the paper's recipe: the paper placement exploded (the registered failure rule fired and the "
          f"run ended failed — that second part read after the runs) in {n_boom} of {n_paper} seeds, "
          f"FP32 attention failed in {sum(o[2] is not None for o in oc['fp32'])} of {len(oc['fp32'])} ("
          + "; ".join(words[a] for a in ("paper", "fp32", "sdpa", "ours_fa2") if a in words) + ")")
    return dict(status=status, evidence=ev, n_boom=n_boom, n_paper=n_paper)


def wq_growth_verdict(res, layer: int = FOCUS_LAYER) -> dict | None:
    """The claim that BF16 attention grows layer `layer`'s ‖W_Q‖₂ beyond FP32 attention's, by the registered growth
    rule (`growth_verdict` of a `merge_seeds` reading): an arm grows it when that layer's largest ‖W_Q,h‖₂ exceeds
    FP32 attention's by more than FP32 attention's own seed-to-seed spread, in every seed the arm ran, at the last
    growth step judged and at every one before it back to some step (`grown_from`). "reproduced" when every arm
    judged grows it at every growth step judged (the chapter's table's "grown in"), "partly" when some arm grows it
    at every step or from a later step on, "not reproduced" when none does; None when no arm can be judged (fewer
    than two seeds). Evidence: per arm, the step from which and the seeds; the ratio to FP32 attention at the last step
    judged, per arm over its seeds; FP32 attention's own spread there ("words": that part alone)."""
    rules = cfg_of(res)["rules"]
    verdict = growth_verdict(res.arrays, res.data["runs"], rules)
    judged = {a: by for a, by in (verdict or {}).items() if by}
    if not judged:
        return None
    seeds = verdict_seeds(res.data["runs"], rules)
    ratios = growth_ratios(res.arrays, res.data["runs"], rules)
    spread = fp32_spread(res.arrays, res.data["runs"], rules)
    since = {a: grown_from(by, "wq").get(layer) for a, by in judged.items()}
    grow = [a for a in judged if since[a] is not None]
    every = [a for a in grow if since[a] == min(judged[a])]
    status = "reproduced" if len(every) == len(judged) else "partly" if grow else "not reproduced"
    name = lambda a: SHORT_ARMS.get(a, a)      # noqa: E731
    order = list(SHORT_ARMS)
    judged = dict(sorted(judged.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    fmt = lambda v: f"{v:,.1f}" if v < 10 else f"{v:,.0f}"      # noqa: E731

    def at_last(a):
        last = max(judged[a])
        vals = [float(ratios[str(s)][a][last]["wq"][layer - 1]) for s in seeds[a]
                if a in ratios.get(str(s), {}) and last in ratios[str(s)][a]]
        return last, (fmt(min(vals)) if fmt(min(vals)) == fmt(max(vals)) else f"{fmt(min(vals))}–{fmt(max(vals))}")
    parts = []
    for a in judged:
        last, span = at_last(a)
        s = ", ".join(map(str, seeds[a]))
        parts.append(f"{name(a)}: from step {since[a]:,} to {last:,} (seeds {s}; {span}× FP32 attention's at "
                     f"step {last:,})" if since[a] is not None else
                     f"{name(a)}: not at the last step judged, {last:,} (seeds {s}; {span}× FP32 attention's there)")
    last_all = max(max(by) for by in judged.values())
    words = (f"layer {layer} grown at every growth step judged in {len(every)} of {len(judged)} BF16 arms, and "
             f"from some step on to the last in {len(grow)} — " + "; ".join(parts)
             + (f"; FP32 attention's seeds differ there by at most {float(spread[last_all]['wq'][layer - 1]):.2f}×"
                if spread and last_all in spread else ""))
    ev = (f"GPT-2 124M at the paper's recipe, the registered growth rule (an arm grows a layer when its largest "
          f"‖W_Q,h‖₂ exceeds FP32 attention's by more than FP32 attention's own seed-to-seed spread, in every seed "
          f"it ran): " + words)
    return dict(status=status, evidence=ev, words=words, grown=grow, every=every, since=since)


def precondition_shares(res, placement: str = "authors") -> dict:
    """Per arm of a (merged) comparison, the census's counts pooled over every event of every seed it ran, in
    `placement`: {arm: {"tied": rows with a repeated maximum over all rows, "window": of those, the rows whose other
    keys' P̄V sets only the sticky bit (the window), "seeds": [seeds]}}; arms whose census lacks the counts are left
    out."""
    sums: dict = {}
    for r in res.data["runs"]:
        if "error" in r:
            continue
        arm, seed = r["label"].split(":s")
        pre = f"{r['label']}__census__{placement}/"
        if pre + "n_rows" not in res.arrays:
            continue
        acc = sums.setdefault(arm, {"n_rows": 0.0, "n_tied": 0.0, "n_window": 0.0, "seeds": []})
        for k in ("n_rows", "n_tied", "n_window"):
            acc[k] += float(np.nansum(np.asarray(res.arrays[pre + k], dtype=np.float64)))
        acc["seeds"].append(int(seed))
    return {a: {"tied": v["n_tied"] / v["n_rows"], "window": v["n_window"] / v["n_tied"] if v["n_tied"] else 0.0,
                "seeds": sorted(v["seeds"])} for a, v in sums.items() if v["n_rows"]}


def share_words(x: float) -> str:
    """A share as a percentage: whole from 10 % up, else two significant figures ("7.4 %", "0.10 %")."""
    v = 100 * x
    return f"{v:.0f} %" if v >= 10 else f"{v:#.2g} %"


def precondition_words(res, reference: str = "fp32", placement: str = "authors") -> str:
    """For chapter 2c: `precondition_shares` of every arm beside the `reference` arm's — how often rows tie, and how
    many of the tied rows are in the window — and, read after the runs, which of the two sets the arms apart: "mostly
    through the window" when every other arm's window share exceeds the reference's by a larger factor than any
    arm's share of tied rows does. "" without the reference's counts or another arm's."""
    sh = precondition_shares(res, placement)
    if reference not in sh or len(sh) < 2:
        return ""
    others = [a for a in ("sdpa", "ours_fa2", "paper") if a in sh] + sorted(a for a in sh if a not in
                                                                           ("sdpa", "ours_fa2", "paper", reference))
    ref = sh[reference]
    name = lambda a: SHORT_ARMS.get(a, a)       # noqa: E731
    tie_f = [sh[a]["tied"] / ref["tied"] for a in others]
    win_f = [sh[a]["window"] / ref["window"] if ref["window"] else float("inf") for a in others]
    seeds = sorted({s for v in sh.values() for s in v["seeds"]})
    fmt = lambda x: f"{x:,.0f}" if x >= 10 else f"{x:.1f}"      # noqa: E731
    span = lambda xs: fmt(min(xs)) if fmt(min(xs)) == fmt(max(xs)) else f"{fmt(min(xs))}–{fmt(max(xs))}"  # noqa: E731
    listed = lambda k: (", ".join(f"{share_words(sh[a][k])} in {name(a)}" for a in others[:-1])      # noqa: E731
                        + (" and " if len(others) > 1 else "") + f"{share_words(sh[others[-1]][k])} in {name(others[-1])}")
    text = (f"Over every census event of every seed ({', '.join(map(str, seeds))}), in the paper's rounding placement, "
            f"rows with a repeated maximum are {share_words(ref['tied'])} of the rows under {name(reference)}, against "
            f"{listed('tied')}; of those tied rows, the ones in the window — the other keys' P̄V only in the sticky "
            f"bit — are {share_words(ref['window'])} under {name(reference)}, against {listed('window')}. ")
    if all(np.isfinite(win_f)) and min(win_f) > max(tie_f):
        text += (f"Read after the runs, the preconditions follow the logit growth mostly through the window "
                 f"({span(win_f)}× {name(reference)}'s share), much less through the ties ({span(tie_f)}×).")
    else:
        finite = [x for x in win_f if np.isfinite(x)] or [0.0]
        text += (f"Read after the runs, the arms differ from {name(reference)} by {span(tie_f)}× in their share of "
                 f"tied rows and by {span(finite)}× in their share in the window.")
    return text


def wq_beyond_failure_words(res, layer: int = FOCUS_LAYER, failing: str = "paper",
                            calm=("sdpa", "ours_fa2")) -> str:
    """Read after the runs (no rule registered): in each seed where the `failing` arm failed, its layer-`layer`
    ‖W_Q,h‖₂ over FP32 attention's (`growth_ratios`) at its last growth step before the failure, beside the largest
    such ratio over the growth steps of each `calm` arm that ran that seed without failing; and whether every calm
    arm went beyond the failing arm's in every such seed — a growth of ‖W_Q‖₂ that large, then, does not by itself
    make the failure. "" without a seed to compare."""
    oc = outcomes(res)
    ratios = growth_ratios(res.arrays, res.data["runs"], cfg_of(res)["rules"])
    fails = {str(o[0]): o[2] for o in oc.get(failing, []) if o[2] is not None}
    quiet = {a: {str(o[0]) for o in oc.get(a, []) if o[2] is None} for a in calm}
    rows, beyond, left = [], True, []
    for seed, f in sorted(fails.items(), key=lambda x: int(x[0])):
        mine = ratios.get(seed, {}).get(failing, {})
        before = [st for st in mine if st < f]
        ran = [a for a in calm if ratios.get(seed, {}).get(a)]
        loud = [a for a in ran if seed not in quiet[a]]
        if loud:                                        # a "calm" arm failed there too: no contrast in that seed
            at = {a: next(o for o in oc[a] if str(o[0]) == seed) for a in loud}
            said = [f"{SHORT_ARMS.get(a, a)} (at step {o[2]:,}" + (", and came back)" if o[3] is not None else ")")
                    for a, o in at.items()]
            left.append(f"seed {seed} left out: there {said[0].replace(' (at', ' failed by the rule too (at', 1)}"
                        + "".join(f", as did {x}" for x in said[1:]))
            continue
        others = {a: max(float(r["wq"][layer - 1]) for r in ratios[seed][a].values()) for a in ran}
        if not before or not others:
            continue
        pre = float(mine[max(before)]["wq"][layer - 1])
        beyond &= all(v > pre for v in others.values())
        rows.append(f"seed {seed}: {pre:.1f}× at step {max(before):,}, before its failure at {f:,}, against up to "
                    + " and ".join(f"{v:.1f}× in {SHORT_ARMS.get(a, a)}" for a, v in others.items()))
    if not rows:
        return ""
    who = " and ".join(SHORT_ARMS.get(a, a) for a in calm)
    return (f"Read after the runs: layer {layer}'s largest ‖W_Q,h‖₂, as a multiple of FP32 attention's, in "
            f"{SHORT_ARMS.get(failing, failing)} at its last growth step before it failed, and in {who}, which did "
            f"not fail — " + "; ".join(rows) + (f" ({'; '.join(left)})" if left else "")
            + ". " + ("In every seed compared, then, the arms that did not fail grew it further than the one that "
                      "failed had before failing: a growth of ‖W_Q‖₂ that large does not by itself make the failure."
                      if beyond else "The arms that did not fail did not grow it further in every seed compared."))


# ---------------------------------------------------------------------------------------------------------------
# Links 3 to 6 in GPT-2: what the chain probe of the registered comparison says (read after the runs)
# ---------------------------------------------------------------------------------------------------------------
def link_readings(res, level: float = LEAN_LEVEL) -> dict:
    """The chain's links 3 to 6 from a (merged) GPT-2 comparison's chain probe, in the paper placement against
    FP32 attention: {claim id: {"status", "evidence", "words"}} for "o_error_v_sign" (O's error along sign(V) on the
    conjunction, `arms_split`), "delta_bias" (Δδ > 0 on tied rows, `lean_seeds`), "low_rank" (the dW_Q error is
    nearly rank one and alike across steps: `low_rank_seeds`, its rule in `low_rank_verdict`) and "wq_norm_push"
    (the dW_Q error pushes ‖W_Q,h‖₂ up); a claim is left out when the paper arm has no such
    record. No threshold was registered for
    these readings before the runs, so none is called "reproduced": "partly" when the paper placement shows the
    link (link 3: both parts of the split along sign(V), sign test p < `level`; links 4 and 6: a lean with p <
    `level` in every seed with the probe, two or more) and FP32 attention does not; else "not reproduced". "words"
    is the evidence without the status's reasons (for the verdict table's number column)."""
    out = {}
    sp = arms_split(res) or {}
    paper, fp32 = sp.get("paper"), sp.get("fp32")
    if paper:
        seeds = sorted({int(r["label"].split(":s")[1]) for r in res.data["runs"] if r["label"].startswith("paper:s")
                        and f"{r['label']}__probe__err_tie_sum" in res.arrays})
        both = all(paper[f"{p}_along"] > paper[f"{p}_against"] and paper[f"{p}_p"] < level for p in ("tie", "ell"))
        calm = fp32 is None or not any(fp32[f"{p}_p"] < level for p in ("tie", "ell"))
        words = (f"GPT-2, paper placement (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}): O's "
                 f"error along sign(V) on the conjunction's (row, feature) pairs of tied rows "
                 f"{paper['total_mean']:+.2g} ULP, of which P̄V's rounding {paper['tie_mean']:+.2g} (along in "
                 f"{paper['tie_along']:,} of {paper['tie_along'] + paper['tie_against']:,} (event, layer, head) "
                 "entries)"
                 + (f"; FP32 attention {fp32['total_mean']:+.2g}" if fp32 else ""))
        out["o_error_v_sign"] = dict(status="partly" if both and calm else "not reproduced", words=words,
                                     evidence=words + " (read after the runs)")
    lean, lean32 = lean_seeds(res, "paper", level), lean_seeds(res, "fp32", level)
    # the FA2-numerics arms beside FP32 attention: a lean there too says it is not the paper placement's alone
    lean_fa2 = {a: lean_seeds(res, a, level) for a in FA2_SHORT}
    signs = [probe_signs(res.arrays, r["label"]) for r in res.data["runs"]
             if r["label"].startswith("paper:s") and f"{r['label']}__probe__step" in res.arrays]
    for cid, k, what in (("delta_bias", "dd", "Δδ > 0 on {} of tied rows"),
                         ("wq_norm_push", "push", "the dW_Q error pushes ‖W_Q,h‖₂ up in {} of (step, layer, head) cases")):
        up, n = lean[k]
        if not n:
            continue
        lo, hi = (f"{100 * v:.1f}" for v in (min(s[f"{k}_share"] for s in signs), max(s[f"{k}_share"] for s in signs)))
        words = (f"GPT-2, paper placement: {what.format(lo + ' %' if lo == hi else f'{lo}–{hi} %')}, p < {level:g} "
                 f"in {up} of {n} seeds; FP32 attention in {lean32[k][0]} of {lean32[k][1]}"
                 + "".join(f", {FA2_SHORT[a]} in {v[k][0]} of {v[k][1]}" for a, v in lean_fa2.items()
                           if v[k][1]))
        ok = up == n >= 2 and lean32[k][0] == 0
        out[cid] = dict(status="partly" if ok else "not reproduced", words=words,
                        evidence=words + " (read after the runs)")
    lr = low_rank_seeds(res, level)
    v = low_rank_verdict(lr, level) if lr else None
    if v:
        out["low_rank"] = v
    return out


# ---------------------------------------------------------------------------------------------------------------
# Link 5 in GPT-2: is the δ-caused dW_Q error rank one and alike across steps? (read after the runs)
# ---------------------------------------------------------------------------------------------------------------
SRANK_NEAR_ONE = 2.0   # G is "nearly rank one" when its top singular direction holds more than half of ‖G‖_F²


def low_rank_seeds(res, level: float = LEAN_LEVEL) -> dict | None:
    """The chain probe's record of the δ-caused dW_Q error G (D × C per head; `lib.training.chain_probe`) per arm and
    seed of a (merged) GPT-2 comparison; None when no run recorded it.

    Returns "d", "c" (the head's G is D × C: head dimension × width), "max_rank" (min(D, C): the largest stable rank
    G can have), "random_cos" (1/√(D·C): the typical size of the cosine between two independent random D × C
    matrices), "every" (steps between two measurements) and "arms": {arm: {seed: entry}}, each entry over the
    (event, layer, head) cases of that run where G is not zero (a zero G — no error of O reached δ in that head, as
    when each row attends a single key — has no stable rank and no cosine: left out): "n" cases; "srank_med", the median
    stable rank ‖G‖_F² / ‖G‖₂² (1 = rank one); "cos_med", the median cosine of G with the same layer and head's G at
    the previous measurement (cases whose layer was not measured then, or whose G was zero then, have none; a
    cosine of exactly 0 is taken as such), "cos_abs_med" its median size whatever its sign, "n_cos", "cos_pos"
    (share of cosines > 0) and "cos_p" (two-sided exact sign test of the cosines' signs, cases counted as
    independent, which they are not: heads of one layer and event share their inputs); "rank_one" (srank_med <
    `SRANK_NEAR_ONE`) and "alike" (cos_med > random_cos and cos_pos > ½ with cos_p < `level`: successive errors
    point the same way more often than not, so they add up instead of cancelling)."""
    from lib.stats import sign_test
    labs = [r["label"] for r in res.data["runs"]
            if "error" not in r and f"{r['label']}__probe__dg_srank" in res.arrays]
    if not labs:
        return None
    cfg = cfg_of(res)
    c = int(cfg["model"]["n_embd"])
    d = c // int(cfg["model"]["n_head"])
    out = dict(d=d, c=c, max_rank=min(d, c), random_cos=1.0 / math.sqrt(d * c), every=int(cfg["probe"]["every"]),
               arms={})
    for lab in labs:
        arm, seed = lab.split(":s")
        sr = np.asarray(res.arrays[f"{lab}__probe__dg_srank"], dtype=np.float64).ravel()
        nm = np.asarray(res.arrays[f"{lab}__probe__dg_norm"], dtype=np.float64).ravel()
        cs = np.asarray(res.arrays[f"{lab}__probe__dg_cos_prev"], dtype=np.float64).ravel()
        sr, cs = sr[np.isfinite(sr) & (nm > 0)], cs[np.isfinite(cs) & (cs != 0)]
        st = sign_test(cs)
        e = dict(n=int(sr.size), srank_med=float(np.median(sr)) if sr.size else float("nan"), n_cos=int(cs.size),
                 cos_med=float(np.median(cs)) if cs.size else float("nan"),
                 cos_abs_med=float(np.median(np.abs(cs))) if cs.size else float("nan"),
                 cos_pos=st["frac_pos"], cos_p=st["p_two"] if st["n"] else float("nan"))
        e["rank_one"] = bool(e["srank_med"] < SRANK_NEAR_ONE)
        e["alike"] = bool(e["cos_med"] > out["random_cos"] and e["cos_pos"] > 0.5 and e["cos_p"] < level)
        out["arms"].setdefault(arm, {})[int(seed)] = e
    out["arms"] = {a: dict(sorted(v.items())) for a, v in out["arms"].items()}
    return out


def low_rank_verdict(lr: dict, level: float = LEAN_LEVEL) -> dict | None:
    """Link 5 from `low_rank_seeds`, the paper placement against FP32 attention: {"status", "words", "reasons",
    "evidence"} ("reasons": why the status is what it is, and what is generic; "evidence": the words, then the
    reasons), None without the paper arm.

    What "rank one and alike across steps" looks like: a median stable rank near 1 — below `SRANK_NEAR_ONE` (the top
    singular direction holds more than half of ‖G‖_F²), against a largest possible min(D, C) — and successive errors
    pointing the same way: a median cosine with the previous measurement above the random-matrix size 1/√(D·C), with
    more positive cosines than chance ("alike"). No threshold was registered before the runs, so the link is never
    "reproduced": "partly" when the paper placement's error is nearly rank one and alike across steps in every seed
    with the probe (two or more) and FP32 attention's is alike across steps in none of its seeds; "not reproduced"
    otherwise — when the paper placement does not show the link in every seed, or FP32 attention shows it too (then
    the structure is generic, not caused by the bias). Where FP32 attention's error is nearly rank one as well, the
    reasons say that that part is generic."""
    from lib.training.runs import span
    paper, fp32 = lr["arms"].get("paper"), lr["arms"].get("fp32")
    if not paper:
        return None
    sr = lambda seeds: span([e["srank_med"] for e in seeds.values()], "{:.3f}")           # noqa: E731
    cs = lambda seeds: span([e["cos_med"] for e in seeds.values()], "{:+.3f}", " to ")     # noqa: E731
    alike = lambda seeds: sum(e["alike"] for e in seeds.values())                           # noqa: E731
    words = (f"GPT-2, paper placement: the δ-caused dW_Q error's median stable rank {sr(paper)} per seed (1 = rank "
             f"one, at most {lr['max_rank']}), its median cosine with the error {lr['every']:,} steps earlier "
             f"{cs(paper)} (random matrices ≈ {lr['random_cos']:.2g}), more often positive than chance (p < "
             f"{level:g}) in {alike(paper)} of {len(paper)} seeds"
             + (f"; FP32 attention {sr(fp32)}, {cs(fp32)}, in {alike(fp32)} of {len(fp32)}" if fp32 else ""))
    rank_one = all(e["rank_one"] for e in paper.values())
    shows = rank_one and alike(paper) == len(paper) >= 2
    generic = fp32 is not None and alike(fp32) > 0
    why = []
    if not rank_one:
        why.append("the paper placement's error is not nearly rank one in every seed")
    if alike(paper) < len(paper):
        why.append("the paper placement's errors are not alike across steps in every seed")
    elif len(paper) < 2:
        why.append("one seed only")
    if fp32 is not None and all(e["rank_one"] for e in fp32.values()):
        why.append("FP32 attention's error is nearly rank one too: that part is generic, not caused by the bias")
    if generic:
        why.append("FP32 attention's errors are alike across steps as well: the structure is generic, not caused by "
                   "the bias")
    status = "partly" if shows and not generic else "not reproduced"
    return dict(status=status, words=words, reasons=why,
                evidence=words + "".join(f"; {w}" for w in why) + " (read after the runs)")


def low_rank_table(lr: dict | None) -> str:
    """A Markdown table of `low_rank_seeds`: one row per arm and seed (readable names), the arms in `CHAIN_ARMS`'s
    order; a sentence when nothing was recorded."""
    if not lr:
        return "The chain measurements recorded no dW_Q error."
    # Medians over the seed's cases (said in the text above the table); narrow headers keep it within the column.
    rows = ["| arm | seed | cases | stable rank | cosine, previous | \\|cosine\\| | > 0 | p | alike |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    order = [a for a in CHAIN_ARMS if a in lr["arms"]] + [a for a in lr["arms"] if a not in CHAIN_ARMS]
    for arm in order:
        for seed, e in lr["arms"][arm].items():
            rows.append(f"| {CHAIN_ARMS.get(arm, arm)} | {seed} | {e['n']:,} | {e['srank_med']:.3f} | "
                        f"{e['cos_med']:+.3f} | {e['cos_abs_med']:.2f} | {100 * e['cos_pos']:.0f} % | "
                        f"{e['cos_p']:.2g} | {'yes' if e['alike'] else 'no'} |")
    return "\n".join(rows)


def low_rank_glue(lr: dict | None, level: float = LEAN_LEVEL) -> dict:
    """Glue for the GPT-2 chain chapter's reading of link 5 (`low_rank_seeds`; None: every key "—"): the shape ("d",
    "c", "max_rank", "random_cos", "every", "near_one": `SRANK_NEAR_ONE`, "level"), per arm of `CHAIN_ARMS`
    ("<arm>_srank", "<arm>_cos", "<arm>_abs_cos": the range of the per-seed medians over seeds; "<arm>_alike":
    "k of n" seeds alike across steps), and "status", "reason" (the verdict's reasons, `low_rank_verdict`)."""
    from lib.training.runs import span
    keys = ["d", "c", "max_rank", "random_cos", "every", "near_one", "level", "status", "reason"] + [
        f"{a}_{k}" for a in CHAIN_ARMS for k in ("srank", "cos", "abs_cos", "alike")]
    out = {k: "—" for k in keys}
    if not lr:
        return out
    out |= {"d": str(lr["d"]), "c": str(lr["c"]), "max_rank": str(lr["max_rank"]),
            "random_cos": f"{lr['random_cos']:.2g}", "every": f"{lr['every']:,}", "near_one": f"{SRANK_NEAR_ONE:g}",
            "level": f"{level:g}"}
    for arm, seeds in lr["arms"].items():
        es = list(seeds.values())
        out[f"{arm}_srank"] = span([e["srank_med"] for e in es], "{:.3f}")
        out[f"{arm}_cos"] = span([e["cos_med"] for e in es], "{:+.3f}", " to ")
        out[f"{arm}_abs_cos"] = span([e["cos_abs_med"] for e in es], "{:.2f}")
        out[f"{arm}_alike"] = f"{sum(e['alike'] for e in es)} of {len(es)}"
    v = low_rank_verdict(lr, level)
    if v:
        out["status"] = v["status"]
        out["reason"] = "; ".join(v["reasons"]) or "—"
    out["headline"] = low_rank_headline(lr)
    return out


def low_rank_headline(lr: dict) -> str:
    """One sentence on `low_rank_seeds`: which arms' dW_Q error is nearly rank one in every seed, and in which arms
    successive errors point the same way more often than chance ("alike") in some seed, with in how many."""
    arms = [a for a in CHAIN_ARMS if a in lr["arms"]] + [a for a in lr["arms"] if a not in CHAIN_ARMS]
    name = lambda a: CHAIN_ARMS.get(a, a)                                                   # noqa: E731
    join = lambda xs: xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]      # noqa: E731
    one = [a for a in arms if all(e["rank_one"] for e in lr["arms"][a].values())]
    rank = ("Every arm's dW_Q error is nearly rank one" if len(one) == len(arms) else
            f"The dW_Q error is nearly rank one in every seed only in {join([name(a) for a in one])}" if one else
            "No arm's dW_Q error is nearly rank one in every seed")
    al = [a for a in arms if any(e["alike"] for e in lr["arms"][a].values())]
    k = lambda a: f"{sum(e['alike'] for e in lr['arms'][a].values())} of {len(lr['arms'][a])} seeds"  # noqa: E731
    alike = (f"successive errors point the same way more often than chance only in "
             f"{join([f'{k(a)} of {name(a)}' for a in al])}" if al and len(al) < len(arms) else
             "successive errors point the same way more often than chance in some seed of every arm" if al else
             "in no arm do successive errors point the same way more often than chance")
    return f"{rank}; {alike}."
