"""Reading the census: per run and head, how often the bias's preconditions hold late in training, and the rule.

A census result (`census_regimes`, `gpt2_regime`, and every grid result that carries the census) holds, per run,
arrays "<run>__census__<placement>/<key>" of shape (events, layers, heads) (`lib.training.loop.pack_runs`). Rates
are pooled from the counts (`n_rows`, `n_tied`, `n_window`, `n_zero`, `n_conj`), never averaged as ratios.

The rule (the registry's text, fixed before the runs): a (layer, head) of a run *has the preconditions* when its
conjunction rate over the census events of the last third of the run, pooled, is ≥ `threshold` =
max(`REF_FACTOR` × the healthy proxy's largest pooled last-third conjunction rate over its layers, heads and seeds,
`FLOOR`), and its conjunction is non-zero at ≥ `HELD` of those events. A regime has them when some (layer, head)
has them in every seed.
"""
from __future__ import annotations

import numpy as np

REF_FACTOR = 10.0
FLOOR = 1e-4
HELD = 2.0 / 3.0
KEYS = ("tie_rate", "window_rate", "zero_rate", "conjunction", "one_signed", "sink_rate", "top1", "max_logit")


def runs_of(res) -> list[dict]:
    """The run records of a result that trained (errors left out)."""
    return [r for r in res.data["runs"] if "error" not in r]


def census_of(res, label: str) -> dict:
    """{"step": (E,), "<placement>/<key>": (E, L, H)} of run `label`."""
    pre = f"{label}__census__"
    return {k[len(pre):]: np.asarray(v) for k, v in res.arrays.items() if k.startswith(pre)}


def late(steps: np.ndarray, frac: float = 1.0 / 3.0) -> np.ndarray:
    """Boolean mask of the census events in the last `frac` of the run (by step)."""
    steps = np.asarray(steps)
    if len(steps) == 0:
        return np.zeros(0, dtype=bool)
    cut = steps.max() - frac * (steps.max() - steps.min())
    return steps >= cut


def head_dim(run: dict) -> int:
    m = run["config"]["model"]
    return m["n_embd"] // m["n_head"]


def pooled(c: dict, placement: str, mask: np.ndarray, D: int) -> dict:
    """Pooled rates over the events in `mask`, per (layer, head): tie, window, zero and conjunction rates from the
    counts; the O error along sign(V) on the conjunction (count-weighted); the largest logit (max)."""
    p = lambda k: np.asarray(c[f"{placement}/{k}"], dtype=np.float64)[mask]  # noqa: E731
    rows = p("n_rows").sum(0)
    out = dict(tie_rate=p("n_tied").sum(0) / rows, window_rate=p("n_window").sum(0) / rows,
               zero_rate=p("n_zero").sum(0) / rows, conjunction=p("n_conj").sum(0) / (rows * D),
               max_logit=p("max_logit").max(0), n_conj=p("n_conj").sum(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        w = p("n_conj")
        out["err_ulp"] = np.nansum(np.nan_to_num(p("err_ulp")) * w, 0) / w.sum(0)
        out["err_pred"] = np.nansum(np.nan_to_num(p("err_pred")) * w, 0) / w.sum(0)
        if f"{placement}/err_ell" in c:
            out["err_ell"] = np.nansum(np.nan_to_num(p("err_ell")) * w, 0) / w.sum(0)
    out["held"] = (p("n_conj") > 0).mean(0) if mask.any() else np.zeros_like(rows)
    return out


def regime_of(label: str) -> str:
    return label.rsplit(":s", 1)[0]


def late_table(res, placement: str = "authors") -> dict:
    """{run label: pooled late-third rates (L, H)} for every run of a result."""
    out = {}
    for r in runs_of(res):
        c = census_of(res, r["label"])
        if f"{placement}/n_rows" in c:
            out[r["label"]] = pooled(c, placement, late(c["step"]), head_dim(r))
    return out


def reference_rate(res, regime: str = "proxy", placement: str = "authors") -> float:
    """The healthy proxy's largest pooled last-third conjunction rate over its layers, heads and seeds."""
    vals = [t["conjunction"].max() for lab, t in late_table(res, placement).items() if regime_of(lab) == regime]
    if not vals:
        raise ValueError(f"no run of regime {regime!r} with a census in this result")
    return float(np.nanmax(vals))


def threshold(ref: float) -> float:
    return max(REF_FACTOR * ref, FLOOR)


def has_preconditions(t: dict, thr: float) -> np.ndarray:
    """(L, H) bool: the rule on one run's pooled late-third table."""
    return (t["conjunction"] >= thr) & (t["held"] >= HELD)


def verdicts(results, thr: float, placement: str = "authors") -> dict:
    """{regime: {"present": bool (in every seed), "seeds": n, "heads": [(layer, head), ...] of the first seed that
    has them, "max_conj": largest pooled conjunction rate over runs}} over all runs of `results`."""
    per = {}
    for res in results:
        for lab, t in late_table(res, placement).items():
            per.setdefault(regime_of(lab), []).append(t)
    out = {}
    for reg, tabs in per.items():
        hits = [has_preconditions(t, thr) for t in tabs]
        heads = [tuple(map(int, ij)) for ij in np.argwhere(hits[0])] if hits[0].any() else []
        out[reg] = dict(present=all(h.any() for h in hits), seeds=len(tabs), heads=heads,
                        seeds_with=int(sum(h.any() for h in hits)),
                        max_conj=float(max(np.nanmax(t["conjunction"]) for t in tabs)),
                        max_window=float(max(np.nanmax(t["window_rate"]) for t in tabs)),
                        max_tie=float(max(np.nanmax(t["tie_rate"]) for t in tabs)))
    return out


def over_training(res, label: str, placement: str = "authors", key: str = "conjunction") -> tuple:
    """(steps (E,), per-layer max over heads (E, L)) of a rate computed from the counts at each event."""
    c = census_of(res, label)
    run = next(r for r in runs_of(res) if r["label"] == label)
    n = lambda k: np.asarray(c[f"{placement}/{k}"], dtype=np.float64)  # noqa: E731
    with np.errstate(invalid="ignore", divide="ignore"):
        if key == "conjunction":
            rate = n("n_conj") / (n("n_rows") * head_dim(run))
        else:
            rate = n({"tie_rate": "n_tied", "window_rate": "n_window", "zero_rate": "n_zero"}[key]) / n("n_rows")
    return np.asarray(c["step"]), np.nanmax(rate, axis=2)


def remainder_hist(res, labels, placement: str = "authors", late_only: bool = True) -> tuple:
    """(bin edges of log2(r/n_max), tied rows per bin pooled over the runs' heads, layers and (late) events)."""
    from lib.census import R_EDGES
    tot = np.zeros(len(R_EDGES) - 1)
    for lab in labels:
        c = census_of(res, lab)
        h = np.asarray(c[f"{placement}/r_hist"], dtype=np.float64)
        m = late(c["step"]) if late_only else np.ones(len(c["step"]), dtype=bool)
        tot += h[m].sum(axis=(0, 1, 2))
    return R_EDGES, tot


def pooled_error(t: dict) -> dict:
    """The O error along sign(V) pooled over every (layer, head) of a late table, weighted by conjunction pairs:
    measured, predicted (chapter 1's theory) and the part from rounding ℓ."""
    w = np.nan_to_num(t["n_conj"])
    n = float(w.sum())
    f = lambda k: float(np.nansum(np.nan_to_num(t[k]) * w) / n) if n and k in t else float("nan")  # noqa: E731
    return dict(n_conj=n, err_ulp=f("err_ulp"), err_pred=f("err_pred"), err_ell=f("err_ell"))


def first_step_above(res, label: str, layer: int, thr: float, placement: str = "authors"):
    """The first census step at which `layer`'s conjunction rate (max over heads) reached `thr` (None: never)."""
    steps, rate = over_training(res, label, placement, "conjunction")
    hit = np.nonzero(rate[:, layer] >= thr)[0]
    return int(steps[hit[0]]) if len(hit) else None


def gpt2_numbers(res, thr: float | None = None) -> dict:
    """The chapter's numbers from a `gpt2_regime` result (its first run): corpus, training, and the census late in
    training for both placements; `thr` the rule's threshold (default: the floor, `threshold(0)`)."""
    thr = threshold(0.0) if thr is None else thr
    run = runs_of(res)[0]
    lab = run["label"]
    man = res.data["manifest"]
    out = dict(label=lab, n_files=man["files"]["found"], n_docs=man["n_documents"], n_tok_m=man["n_tokens"] / 1e6,
               n_mb=man["n_bytes"] / 1e6, build_s=man["seconds"]["total"], corpus_sha=man["tokens_sha256"][:12],
               python=man["python"]["version"], n_dists=man.get("n_distributions", 0), steps=run["steps"],
               tokens_m=run["tokens"] / 1e6, tok_per_s_m=run["tokens_per_s"] / 1e6, wall_min=run["wall_s"] / 60,
               val_final=run["val"]["loss"][-1], val_first=run["val"]["loss"][0],
               val_first_step=run["val"]["step"][0], truncated=run["truncated_at"] is not None,
               lr=run["config"]["lr"], batch=run["config"]["batch_size"], seq=run["config"]["model"]["block_size"],
               warmup=run["config"]["warmup"], seed=run["config"]["seed"], threshold=thr)
    c = census_of(res, lab)
    out["n_events"], out["census_every"] = len(c["step"]), run["config"]["census_every"]
    out["census_rows"] = run["config"]["census_rows"]
    from lib.training.regime import MAX_LOGIT
    out["logit_bound"] = float(MAX_LOGIT)              # chapter 6's healthy-regime bound on the largest logit
    out["n_seeds"] = len(runs_of(res))
    out["late_from"] = int(c["step"][late(c["step"])].min())
    for p in ("authors", "fa2"):
        t = late_table(res, p)[lab]
        L, H = t["conjunction"].shape
        li, hi = np.unravel_index(int(np.nanargmax(t["conjunction"])), t["conjunction"].shape)
        e = pooled_error(t)
        hits = has_preconditions(t, thr)
        out.update({f"{p}_max_tie": float(np.nanmax(t["tie_rate"])), f"{p}_max_window": float(np.nanmax(
            t["window_rate"])), f"{p}_max_conj": float(t["conjunction"][li, hi]), f"{p}_conj_layer": int(li) + 1,
            f"{p}_conj_head": int(hi), f"{p}_n_heads": int(hits.sum()), f"{p}_n_layers_with": int(hits.any(1).sum()),
            f"{p}_layers_with": ", ".join(str(i + 1) for i in np.nonzero(hits.any(1))[0]) or "none",
            f"{p}_err": e["err_ulp"], f"{p}_pred": e["err_pred"], f"{p}_ell": e["err_ell"], f"{p}_n_conj": e["n_conj"],
            f"{p}_present": bool(hits.any()), f"{p}_max_logit": float(np.nanmax(t["max_logit"]))})
        out[f"{p}_first_step"] = first_step_above(res, lab, int(li), thr, p)
        out[f"{p}_logit_layer_end"] = float(np.asarray(c[f"{p}/max_logit"])[-1, li].max())
    out["n_layers"], out["n_heads"] = L, H
    from lib.fp.bf16 import ulp
    out["authors_logit_ulp"] = float(ulp(np.float32(out["authors_logit_layer_end"])))
    out["pairs_ratio"] = out["authors_n_conj"] / max(out["fa2_n_conj"], 1.0)
    # ‖W_Q^h‖₂ at the last census event: which layer grew most, and whether, within the layer with the most
    # conjunction, the heads that grew are the heads with the conjunction
    sig = np.asarray(c["wq_sigma"], dtype=np.float64)
    out["sigma_start"] = float(sig[0].max())
    out["sigma_layer"] = int(np.argmax(sig[-1].max(1))) + 1
    out["sigma_max"] = float(sig[-1].max())
    out["sigma_other_max"] = float(np.delete(sig[-1].max(1), out["sigma_layer"] - 1).max())
    li = out["authors_conj_layer"] - 1
    conj = late_table(res, "authors")[lab]["conjunction"][li]
    out["sigma_conj_corr"] = float(np.corrcoef(conj, sig[-1, li])[0, 1])
    out["head_1based"] = out["authors_conj_head"] + 1
    return out


def worked_example_heads(T: int = 64, gaps=(4.0, 10.0, 20.0)):
    """q, k, v (1, len(gaps), T, 16) float32 (BF16 values): one head per gap g, two tied keys (1 and 2) whose V are
    the paper's worked example (−2.40625 and −2.296875 in every feature), every other key g nats below them with
    V = −1. Causal rows i ≥ 2 tie with r = (i − 1)·e^−g: a large remainder for g = 4, the sticky-bit window for g = 10,
    below it for g = 20 (r/n_max < 2⁻²²)."""
    import torch
    from lib.fp.rounding_bias import worked_example
    w = worked_example()
    D, top = 16, 8.0
    H = len(gaps)
    q = torch.zeros(1, H, T, D)
    k = torch.zeros(1, H, T, D)
    v = torch.full((1, H, T, D), -1.0)
    for h, g in enumerate(gaps):
        q[0, h, :, 0], q[0, h, :, 1] = top, top - g          # S_ij = ¼·q·k: class 0 scores 8, class 1 scores 8 − g
        k[0, h, :, 1] = 4.0
        k[0, h, [1, 2], 0], k[0, h, [1, 2], 1] = 4.0, 0.0
        v[0, h, 1], v[0, h, 2] = w["a"], w["b"]
    return q, k, v


def worked_example_numbers() -> dict:
    """The census of `worked_example_heads` in both placements: per gap, window and zero rates and the O error along
    sign(V) measured and predicted (ULP)."""
    from lib import census
    gaps = (4.0, 10.0, 20.0)
    q, k, v = worked_example_heads(gaps=gaps)
    out = dict(gaps=gaps, gaps_text=", ".join(f"{g:g}" for g in gaps[:-1]) + f" and {gaps[-1]:g}",
               n_keys=int(q.shape[2]))
    for p in census.PLACEMENTS:
        c = census.precondition_census(q, k, v, placement=p)
        for i, g in enumerate(gaps):
            tag = f"{p}_g{int(g)}"
            out.update({f"{tag}_tie": float(c["tie_rate"][i]), f"{tag}_window": float(c["window_rate"][i]),
                        f"{tag}_zero": float(c["zero_rate"][i]), f"{tag}_err": float(c["err_ulp"][i]),
                        f"{tag}_pred": float(c["err_pred"][i]), f"{tag}_ell": float(c["err_ell"][i])})
    return out


def model_mparams(cfg: dict) -> float:
    """Parameters (millions) of the GPT a training configuration describes (its n_layer, n_head, n_embd, seq_len;
    the model's defaults for the rest): the proxy's size, from its recorded configuration."""
    from lib.training.model import GPT, GPTConfig
    model = GPTConfig(**{k: cfg[k] for k in ("n_layer", "n_head", "n_embd") if k in cfg},
                      **({"block_size": cfg["seq_len"]} if "seq_len" in cfg else {}))
    return GPT(model).num_params() / 1e6
