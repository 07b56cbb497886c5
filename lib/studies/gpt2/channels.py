"""The channels and remedies of the chain in GPT-2: the injection's rates, its per-layer specs and the rule a remedy
is read by.

The registry's entries after `gpt2_arms` (`gpt2_delta` … `gpt2_inject_low`, each with a seed-1 twin) train GPT-2 124M
with `lib.studies.gpt2.arms` exactly as `gpt2_arms` does (same initialisation and batch order per seed, recipe,
horizon, census and chain probe), two arms per entry, one per GPU. Their rules are written beside them in the
registry, fixed before any run; this module holds the two pieces that are computed:

* `census_rates`: per layer, the share of rows in the tie bias's window and the conjunction rate the census found in
  an arm of a committed `gpt2_arms` result, pooled over its census events and heads; the injection arms run at the
  paper arm's window rates (rows; `lib.training.inject`'s "dir=v" puts the error on those rows' one-signed
  features, the conjunction's pairs) and at 0.1× and 10× them. `injection_spec` writes the per-layer spec string.
* `prevents`: the registered rule "a remedy prevents the failure when its arm does not fail in any seed where the
  unremedied paper arm fails".
"""
from __future__ import annotations

import numpy as np

__all__ = ["INJECT_LAYERS", "census_rates", "injection_spec", "prevents"]

INJECT_LAYERS = (1, 2, 3)      # 0-based: layers 2-4, where the paper arm's census found the conjunction


def census_rates(arrays: dict, head_dim: int, label: str = "paper:s0", layers=INJECT_LAYERS,
                 placement: str = "authors") -> dict:
    """{"window": [...], "conjunction": [...], "one_signed": [...]} per layer of `layers` for run `label` of a
    `gpt2_arms` result's arrays: rows in the window / rows, conjunction pairs / (rows × head dim), conjunction pairs /
    (window rows × head dim), each pooled over every census event and head."""
    pre = f"{label}__census__{placement}/"
    rows, win, conj = (np.asarray(arrays[pre + k], dtype=np.float64) for k in ("n_rows", "n_window", "n_conj"))
    out = {"window": [], "conjunction": [], "one_signed": []}
    for layer in layers:                                  # arrays: (events, layers, heads)
        r, w, c = rows[:, layer].sum(), win[:, layer].sum(), conj[:, layer].sum()
        out["window"].append(float(w / r))
        out["conjunction"].append(float(c / (r * head_dim)))
        out["one_signed"].append(float(c / (w * head_dim)) if w else float("nan"))
    return out


def injection_spec(rates, n_layer: int, layers=INJECT_LAYERS, factor: float = 1.0, rest: str = "fp32_flash") -> str:
    """One attention spec per layer, comma-separated: `rest` everywhere but `layers`, which inject the tie bias's
    error along sign(V) on tied rows first (`lib.training.inject`, dir=v) at `factor` × their rate (rates rounded to
    three significant digits before the factor)."""
    specs = [rest] * n_layer
    for layer, r in zip(layers, rates):
        specs[layer] = f"inject/r={float(f'{r:.3g}') * factor:.3g}/dir=v"
    return ",".join(specs)


def prevents(remedy: dict, paper: dict):
    """The registered rule. `paper`: {seed: the unremedied paper arm's failure step or None}; `remedy`: {seed:
    (failure step or None, last step trained)}. True when, in every seed where the paper arm fails at step f, the
    remedy arm trains past f and does not fail; False when it fails in one of those seeds; None (undecided) when the
    paper arm fails in no seed, or a remedy arm that did not fail stopped before the paper arm's failure step."""
    decided = []
    for seed, f in paper.items():
        if f is None or seed not in remedy:
            continue
        fail, last = remedy[seed]
        if fail is not None:
            return False
        decided.append(last > f)
    return None if not decided or not all(decided) else True
