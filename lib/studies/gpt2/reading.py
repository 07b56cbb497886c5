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

__all__ = ["failure_step", "layer_series", "conjunction_peak", "gap", "fidelity", "numbers", "ARM_WORDS"]

BIG_LOGIT = 1000.0    # a layer whose largest logit ends above this is listed as an outlier layer (chapter 2b's scale)
ARM_WORDS = {"sdpa_eager": "PyTorch flash SDPA, eager", "sdpa_compiled": "PyTorch flash SDPA, compiled",
             "fa2_eager": "our kernel (FA2 placement), eager", "fa2_compiled": "our kernel (FA2 placement), compiled"}


def failure_step(loss, window: int, rise: float):
    """The first step (0-based, the window's last) where the `window`-step mean loss exceeds its running minimum by
    `rise`, or the first non-finite loss; None if neither happens."""
    loss = np.asarray(loss, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(loss))
    first_bad = int(bad[0]) if bad.size else None
    n = len(loss) if first_bad is None else first_bad
    if n >= window:
        c = np.cumsum(np.concatenate([[0.0], loss[:n]]))
        mean = (c[window:] - c[:-window]) / window                 # mean[i] ends at step i + window − 1
        over = np.flatnonzero(mean - np.minimum.accumulate(mean) >= rise)
        if over.size:
            return int(over[0]) + window - 1
    return first_bad


def layer_series(arrays: dict, label: str) -> dict:
    """{"step": (E,), "logit": (E, L) largest |S| per layer (FA2 placement's S, FP32), "wq": (E, L) largest ‖W_Q,h‖₂
    per layer} from a packed run's census."""
    pre = f"{label}__census__"
    return dict(step=np.asarray(arrays[pre + "step"]), logit=np.nanmax(arrays[pre + "fa2/max_logit"], axis=2),
                wq=np.nanmax(arrays[pre + "wq_sigma"], axis=2))


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
    """The resolved configuration a result ran with: provenance's for a saved result, the live run's otherwise."""
    return res.meta.get("provenance", {}).get("cfg") or res.meta["config"]


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
        if ser["logit"].shape[1] > 1:     # layer 2 (1-based), where chapter 2b found the preconditions
            out[f"{arm}_l2_logit"] = f"{ser['logit'][-1, 1]:,.0f}"
            out[f"{arm}_l2_wq"] = f"{ser['wq'][-1, 1]:.1f}"
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
    l2 = [layer_series(arrays, r["label"])["logit"][-1, 1] for r in data["runs"]
          if layer_series(arrays, r["label"])["logit"].shape[1] > 1]
    out["l2_logit_min"] = f"{min(l2):,.0f}" if l2 else "not run"
    out["alike_factor"] = f"{rules['alike_factor']:g}"
    # Compiled against eager at step 0 (same weights, same batch): what fusion alone changes in the loss.
    first = {r["label"].split(":s")[0]: float(arrays[f"{r['label']}__loss"][0]) for r in data["runs"]}
    for k in ("sdpa", "fa2"):
        if f"{k}_eager" in first and f"{k}_compiled" in first:
            out[f"first_loss_gap_{k}"] = f"{abs(first[f'{k}_eager'] - first[f'{k}_compiled']):.2e}"
    if "sdpa_eager" in first and "fa2_eager" in first:
        out["first_loss_gap_kernels"] = f"{abs(first['sdpa_eager'] - first['fa2_eager']):.2e}"
    return out
