"""The numbers chapters 4 and 5 glue, computed from a `delta_capture` result and from planted layers.

* `planted_numbers()`: predictions of the theory next to the statistics measured on planted layers (ties / no ties,
  paper / FA2 placement, random terms) — chapter 4's and 5's derive → predict → measure.
* `derivation_check()`: E_Q, E_K from the formulas against the emulator's backward run with δ + Δδ.
* `numbers_ch4(res)`, `numbers_ch5(res)`: medians, ranges and counts over heads and seeds of a result.
* `variant_table(res)`: the stored captures replayed now, on this machine, under the result's numerics variants.
* `telemetry_sign(res)`, `telemetry_numbers(reading)`, `telemetry_context(res)`: the sign of Δδ in the per-step
  telemetry of a training result (Σ over the batch per head at every telemetry step), per arm, head and seed.
Values are floats, ints or plain strings (no Markdown), ready for `glue`.
"""
from __future__ import annotations

import warnings

import numpy as np

from lib import stats
from lib.book import catalogue
from lib.studies.delta import stats as ds
from lib.studies.delta import verdicts as dv

__all__ = ["shown_text", "context_text", "variant_words", "planted_numbers", "derivation_check", "numbers_ch4",
           "numbers_ch5", "variant_table", "marchenko_pastur_srank", "telemetry_sign", "telemetry_numbers", "telemetry_context"]


def shown_text(res, full: bool) -> str:
    """One sentence naming the result a chapter shows: the committed full-scale one, or the live CI run."""
    if full:
        return f"the committed full-scale result, {catalogue.cite(res)}"
    c = res.data.get("config", {})
    return (f"the live CI-scale result computed while this page was built (a {c.get('n_layer')}-layer, "
            f"{c.get('n_head')}-head model of width {c.get('n_embd')} trained for {c.get('steps')} steps: it proves "
            f"the code path, not the science). The full-scale result ({catalogue.title(res.name)}) has not been "
            "produced yet")


def marchenko_pastur_srank(m: int, n: int) -> float:
    """Stable rank ‖G‖_F²/‖G‖₂² of a large Gaussian m × n matrix: m·n / (√m + √n)² (the Marchenko–Pastur edge)."""
    return m * n / (np.sqrt(m) + np.sqrt(n)) ** 2


def _layer(P, **kw):
    return ds.layer_stats(P["arr"], P["scale"], **kw)["stats"]


PLANTED = dict(gap=14.0, do_scale=0.01)   # the planted layers' remainder gap (logits) and |dO|


def planted_numbers(n_shuffle: int = 200) -> dict:
    """Planted layers (`lib.studies.delta.planted`): the predicted and measured O error along sign(V) (ULPs), share
    agreeing, mean Δδ and share of rows with Δδ > 0, for ties under the paper placement, the same ties under FA2,
    and no ties under the paper placement; E's stable rank, coherence and push; random terms against their nulls."""
    from lib.studies.delta.planted import NO_TIE_GAPS, planted, random_terms
    out = dict(PLANTED, no_tie_lo=NO_TIE_GAPS[0], no_tie_hi=NO_TIE_GAPS[1])
    cases = {"tp": planted("ties", spec="paper", **PLANTED), "tf": planted("ties", spec="fa2", **PLANTED),
             "np": planted("no_ties", spec="paper", **PLANTED)}
    for tag, P in cases.items():
        st = _layer(P, n_shuffle=n_shuffle)
        t = stats.sign_test(n_pos=st["n_pos"][0], n_neg=st["n_neg"][0])
        out[f"{tag}_os_ulp"] = float(st["sum_os_ulp"][0] / st["n_os"][0])
        out[f"{tag}_os_agree"] = float(st["n_os_agree"][0] / (st["n_os_agree"][0] + st["n_os_disagree"][0]))
        out[f"{tag}_dd_mean"] = float(st["sum_dd"][0] / st["n_rows"][0])
        out[f"{tag}_dd_frac"] = t["frac_pos"]
        out[f"{tag}_dd_p"] = t["p_two"]
        out[f"{tag}_nb"] = float(st["sum_dd"][0] / st["sum_abs_dd"][0])
        out[f"{tag}_tie"] = float(st["n_tie"][0] / st["n_rows"][0])
        out[f"{tag}_srank"] = float(st["eq_srank"][0])
        out[f"{tag}_rho2_share"] = float(st["tokq_rho2"][0] / st["tokq_m"][0])
        out[f"{tag}_rho2"] = float(st["tokq_rho2"][0])
        out[f"{tag}_rho2_q99"] = float(st["tokq_rho2_null_q99"][0])
        out[f"{tag}_push"] = float(st["push_sgd_q"][0])
        if tag == "tp":
            pr = P["pred"]
            out["pred_os_ulp"] = pr["os_mean_ulp"]
            out["pred_os_agree"] = pr["os_frac_agree"]
            out["pred_dd_mean"] = pr["dd_mean"]
            out["pred_push"] = float(P["scale"] * st["sum_dd"][0] * pr["pk0"] * pr["xi_norm"])
            out["planted_n"], out["planted_T"] = P["arr"]["q"].shape[0], P["arr"]["q"].shape[2]
            out["planted_D"] = P["arr"]["q"].shape[3]
    R = random_terms(n=8, H=2, T=32, D=16, C=24, seed=0)
    st = _layer(R, n_shuffle=n_shuffle)
    out["rand_D"], out["rand_C"] = R["arr"]["q"].shape[3], R["arr"]["x"].shape[2]
    out["rand_srank"] = float(np.mean(st["eq_srank"]))
    out["rand_srank_shuf"] = float(np.mean(st["eq_shuf_srank"]))
    out["rand_srank_mp"] = float(marchenko_pastur_srank(16, 24))
    out["rand_rho2"] = float(np.mean(st["tokq_rho2"]))
    out["rand_rho2_q99"] = float(np.mean(st["tokq_rho2_null_q99"]))
    out["rand_cos"] = float(np.mean(st["tokq_cos_unsigned"]))
    out["rand_cos_sd"] = float(1 / np.sqrt(16 * 24))
    return out


def derivation_check(seed: int = 0) -> dict:
    """Largest relative deviation between E_Q (E_K) from the formula and from the emulator's FP32 backward run once
    with δ and once with δ + Δδ (random q, k, v, dO, X, Δδ): {"q": float, "k": float}."""
    import torch

    from lib.fp.numerics import FP32
    from lib.fp.reference import attention_fp64, emulate_backward, emulate_forward
    rng = np.random.default_rng(seed)
    b, H, T, D, C, scale = 2, 2, 24, 16, 12, 0.25
    q, k, v, do = (rng.standard_normal((b, H, T, D)).astype(np.float32) for _ in range(4))
    x = rng.standard_normal((b, T, C)).astype(np.float32)
    delta = attention_fp64(q, k, v, do, scale=scale)["delta"]
    dd = (1e-2 * rng.standard_normal((b, H, T))).astype(np.float32)
    fwd = emulate_forward(q, k, v, FP32, scale=scale)
    g0 = emulate_backward(q, k, v, fwd.o, fwd.lse, do, FP32, scale=scale, delta=delta.astype(np.float32))
    g1 = emulate_backward(q, k, v, fwd.o, fwd.lse, do, FP32, scale=scale, delta=(delta + dd).astype(np.float32))
    t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
    p, _ = ds.reference(t(q), t(k), t(v), scale)
    out = {}
    for side, f, a in (("q", ds.error_q, t(k)), ("k", ds.error_k, t(q))):
        e = f(t(dd), p, a, t(x), scale).numpy()
        want = np.einsum("bhtd,btc->hdc", g0[f"d{side}"].astype(np.float64) - g1[f"d{side}"], x)
        out[side] = float(np.abs(e - want).max() / np.abs(want).max())
    return out


def _med(x) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmedian(np.asarray(x, dtype=np.float64)))


def _rng(x) -> tuple:
    x = np.asarray(x, dtype=np.float64)
    return float(np.nanmin(x)), float(np.nanmax(x))


def _sig(res, name, alpha=ds.ALPHA):
    """Heads (summed over seeds) with p-value array sum__<name> below α / heads."""
    p = np.asarray(res.arrays[f"sum__{name}"], dtype=np.float64)
    n_heads = p[0].size
    return int((p < alpha / n_heads).sum())


def _own_numerics(cfg: dict) -> tuple:
    """(attention spec, rounding block in keys) of the training kernel of a `delta_capture` configuration: "paper"
    rounds per compute tile (cfg "tile", 64 keys by default); "paper/round_block=512" rounds per 512-key block."""
    attn = str(cfg.get("attn", ""))
    spec, _, opt = attn.partition("/")
    if opt.startswith("round_block="):
        return spec, int(opt.split("=", 1)[1])
    return attn, int(cfg.get("tile", 64))


def context_text(res, keys=("regime", "tile", "seeds", "horizon")) -> str:
    """A `delta_capture` result's context (`data["context"]`) as one line, its attention spec in words: regime;
    tile; seeds …; horizon (the `keys` asked for, in that order)."""
    from lib.training.spec import in_words
    ctx = res.data["context"]
    parts = {"regime": in_words(ctx["regime"]), "tile": ctx["tile"],
             "seeds": "seeds " + ", ".join(map(str, ctx["seeds"])), "horizon": ctx["horizon"]}
    return "; ".join(parts[k] for k in keys)


def variant_words(spec: str, block_n) -> str:
    """A replay variant (numerics `spec`, rounding per `block_n` keys) as a label reads it: "paper placement, 512-key
    blocks"; FA2 numerics have no rounding block to name."""
    from lib.training.spec import describe
    return describe(spec) if spec == "fa2" else f"{describe(spec)}, {int(block_n)}-key blocks"


def numbers_ch4(res) -> dict:
    """Chapter 4's numbers from a `delta_capture` result (pooled over seeds: medians and ranges over heads). Text
    the result recorded (regime, verdict evidence) has its attention specs in words (`lib.training.spec.in_words`);
    "var_self" is the training kernel's own variant in words, "var_self_key" its name in the result."""
    from lib.training.spec import in_words
    a, d = res.arrays, res.data
    ctx = d["context"]
    S, L, H = np.asarray(a["sum__rows_frac_pos"]).shape
    runs = d["runs"]
    out = dict(regime=in_words(ctx["regime"]), tile=ctx["tile"], seeds=", ".join(map(str, ctx["seeds"])), horizon=ctx["horizon"],
               n_seeds=S, n_heads=L * H, n_layers=L, n_head=H, label=res.label)
    out["rows_lo"], out["rows_hi"] = _rng(a["sum__rows_frac_pos"])
    out["nb_lo"], out["nb_hi"] = _rng(a["sum__norm_bias"])
    out["nb_med"] = _med(a["sum__norm_bias"])
    out["nb_tie_med"], out["nb_notie_med"] = _med(a["sum__norm_bias_tie"]), _med(a["sum__norm_bias_notie"])
    out["tie_med"] = _med(a["sum__tie_frac"])
    out["rel_dd_med"] = _med(a["sum__rel_dd"])
    out["os_agree_med"], out["os_ulp_med"] = _med(a["sum__os_frac_agree"]), _med(a["sum__os_mean_ulp"])
    out["os_agree_lo"], out["os_agree_hi"] = _rng(a["sum__os_frac_agree"])
    out["mix_ulp_med"] = _med(a["sum__mix_mean_ulp"])
    out["el_agree_med"] = _med(a["sum__el_frac_agree"])
    with np.errstate(invalid="ignore", divide="ignore"):
        nbp = np.asarray(a["sum__norm_bias"], dtype=np.float64)
        out["dd_plus"] = int(((np.asarray(a["sum__dd_step_p_greater"]) < ds.ALPHA / (L * H)) & (nbp > 0)).sum())
        out["dd_minus"] = int(((np.asarray(a["sum__dd_step_p_less"]) < ds.ALPHA / (L * H)) & (nbp < 0)).sum())
    out["os_plus"], out["os_minus"] = _sig(res, "os_step_p_greater"), _sig(res, "os_step_p_less")
    # the (seed, layer, head) cells whose O error leans against sign(V) across steps: where, by how much, how tied
    against = np.asarray(a["sum__os_step_p_less"], np.float64) < ds.ALPHA / (L * H)
    out["os_minus_layers"] = ", ".join(map(str, sorted({int(l) for _, l, _ in np.argwhere(against)}))) or "none"
    out["os_minus_ulp"] = _med(np.asarray(a["sum__os_mean_ulp"], np.float64)[against]) if against.any() else float("nan")
    out["os_minus_tie"] = _med(np.asarray(a["sum__tie_frac"], np.float64)[against]) if against.any() else float("nan")
    out["drift_sig"] = _sig(res, "dd_drift_p")
    out["n_steps_med"] = _med(a["sum__dd_step_n"])
    cfg = d.get("config", {})
    parts, out["var_self"], out["var_self_key"], out["var_self_match"] = [], "none", "none", float("nan")
    for name, spec, bn in d["variants"]:
        sd, sa = np.asarray(a[f"rv__{name}__sum_dd"], np.float64), np.asarray(a[f"rv__{name}__sum_abs_dd"], np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            nb = _med(np.nansum(sd, 1) / np.nansum(sa, 1))
        out[f"var_{name}_nb"] = nb
        out[f"var_{name}_match"] = float(np.nanmean(a[f"rv__{name}__o_match"]))
        parts.append(f"{variant_words(spec, bn)} {nb:+.3f}")
        if (spec, int(bn)) == _own_numerics(cfg):
            out["var_self"], out["var_self_key"] = variant_words(spec, bn), name
            out["var_self_match"] = out[f"var_{name}_match"]
    out["var_line"] = "; ".join(parts)
    out["cap_overhead_pct"] = 100 * max(r["capture_overhead"] for r in runs)
    out["cap_mib"] = max(r["capture_bytes"] for r in runs) / 2 ** 20
    out["cap_every"] = int(res.meta.get("config", {}).get("capture_every", 0) or 0) or None
    verdicts = dv.claims(res)               # a ci-scale result reads "not yet tested"
    for c in ("o_error_v_sign", "delta_bias"):
        out[f"claim_{c}"] = verdicts[c]["status"]
        out[f"claim_{c}_ev"] = in_words(verdicts[c]["evidence"])
    return out


def numbers_ch5(res) -> dict:
    """Chapter 5's numbers from a `delta_capture` result (verdict evidence with its attention specs in words)."""
    from lib.training.spec import in_words
    a, d = res.arrays, res.data
    S, L, H = np.asarray(a["sum__rows_frac_pos"]).shape
    out = dict(label=res.label, n_heads=L * H, n_seeds=S)
    out["tok_rho2_med"], out["tok_beyond_med"] = _med(a["sum__tokq_rho2_med"]), _med(a["sum__tokq_frac_beyond"])
    out["tok_cos_u"], out["tok_cos_s"] = _med(a["sum__tokq_cos_unsigned"]), _med(a["sum__tokq_cos_signed"])
    out["tokk_rho2_med"] = _med(a["sum__tokk_rho2_med"])
    out["srank_med"], out["srank_shuf_med"] = _med(a["sum__eq_srank_med"]), _med(a["sum__eq_shuf_srank_med"])
    out["steps_rho2_med"], out["steps_q99_med"] = _med(a["sum__steps_q_rho2"]), _med(a["sum__steps_q_null_q99"])
    out["steps_rho2_lo"], out["steps_rho2_hi"] = _rng(a["sum__steps_q_rho2"])
    out["steps_sig"] = _sig(res, "steps_q_p")
    out["stepsk_rho2_med"], out["stepsk_sig"] = _med(a["sum__steps_k_rho2"]), _sig(res, "steps_k_p")
    cos = np.asarray(a["sum__steps_q_cos"], np.float64)
    cos_s = np.asarray(a["sum__steps_q_shuf_cos"], np.float64)
    off = ~np.eye(cos.shape[-1], dtype=bool)
    out["steps_cos_med"], out["steps_cos_shuf_med"] = _med(cos[..., off]), _med(cos_s[..., off])
    out["cum_srank_med"] = _med(a["sum__steps_q_cum_srank"])
    if "sum__eq_cos_grad_med" in a:
        out["cos_grad_med"], out["ratio_med"] = _med(a["sum__eq_cos_grad_med"]), _med(a["sum__eq_ratio_med"])
        out["share_tot_med"], out["cos_tot_med"] = _med(a["sum__eq_share_tot_med"]), _med(a["sum__eq_cos_tot_med"])
    out["push_sig"] = _sig(res, "push_p_greater")
    out["push_neg"] = _sig(res, "push_p_less")
    with np.errstate(invalid="ignore", divide="ignore"):
        out["push_share_med"] = _med(np.asarray(a["sum__push_adam_total"], np.float64) / a["sum__wq_growth"])
    out["growth_med"] = _med(a["sum__wq_growth"])
    verdicts = dv.claims(res)               # a ci-scale result reads "not yet tested"
    for c in ("low_rank", "wq_norm_push"):
        out[f"claim_{c}"] = verdicts[c]["status"]
        out[f"claim_{c}_ev"] = in_words(verdicts[c]["evidence"])
    return out


def variant_table(res, n_shuffle: int = 0) -> list[dict]:
    """Each stored capture of `res` replayed now under each numerics variant of the result, one row per (capture,
    head, variant): step, layer, head, variant, Δδ > 0 share, normalised bias, |Δδ|/|δ|, share of O equal to the
    captured O. Runs the emulator on this machine (seconds for one row and two heads)."""
    from lib.training.capture import unpack
    rows = []
    for c in unpack(res.data["keep_index"], res.arrays, prefix="keep"):
        lay = c.layers[0]
        arr = c.layer(lay)
        for name, spec, bn in res.data["variants"]:
            st = ds.variant_stats(arr, c.meta["scale"], spec, block_n=int(bn))
            for i, h in enumerate(c.heads):
                n = st["n_pos"][i] + st["n_neg"][i]
                rows.append(dict(seed=c.meta.get("seed"), step=c.meta["step"], layer=lay, head=h, variant=name,
                                 frac_pos=st["n_pos"][i] / n if n else float("nan"),
                                 norm_bias=st["sum_dd"][i] / st["sum_abs_dd"][i] if st["sum_abs_dd"][i] else
                                 float("nan"),
                                 rel=st["sum_abs_dd"][i] / st["sum_abs_delta"][i] if st["sum_abs_delta"][i] else
                                 float("nan"),
                                 o_match=float(st["o_match"][i])))
    return rows


# ------------------------------------------------------------------------------------------ training telemetry
def telemetry_sign(res, arms=None, alpha: float = ds.ALPHA) -> dict:
    """The sign of Δδ in a training result's telemetry (`lib.training.train.collect_telemetry`): per arm, head and
    seed, how many telemetry steps have Σ Δδ > 0, with exact binomial sign tests.

    res: a result of `lib.studies.explosion.headline` (anything with .data["runs"] — dicts with "id", "arm", "seed",
    "attn", "tag" — and .arrays holding "<id>__delta_err_sum" (N, L, H): Σ over the batch's rows and positions of
    Δδ = rowsum(dO∘(O_lp − O_fp32)) per head at each of N telemetry steps, and "<id>__fix_zero_rows" (N, L): share
    of a layer's rows the exact β rule zeroes, NaN for arms without the fix). arms: the arms to read (default: every
    arm, in the result's order); runs with a tag (repeats) are left out. alpha: per-seed level, Bonferroni-divided by
    the L·H heads.

    Returns {"arms": {arm: {...}}, "meta": res.meta, "alpha": alpha}; per arm (arrays (S, L, H) over seeds S):
    seeds, attn, steps (N,), k (steps with Σ Δδ > 0), n (steps with Σ Δδ ≠ 0, finite), frac (k/n), p_greater,
    p_less (one-sided exact sign tests per head and seed), nb (Σ_t ΣΔδ / Σ_t |ΣΔδ|: the normalised bias over steps),
    ac1 (lag-1 autocorrelation of the ±1 step signs: the sign test assumes independent steps), n_up / n_down (S,)
    (heads passing at α / (L·H) above / below ½), heads_pos / heads_neg (S,) (heads whose frac is above / below ½)
    with heads_p (S,) (two-sided exact sign test of that split across heads), zero_rows (S, L) (mean over steps of
    the share of rows the exact rule zeroes; NaN without the fix), zero_rows_max (S, L)."""
    runs = [r for r in res.data["runs"] if not r.get("tag")]
    if arms is None:
        arms = list(dict.fromkeys(r["arm"] for r in runs))
    out = {"arms": {}, "meta": getattr(res, "meta", {}) or {}, "alpha": alpha}
    for arm in arms:
        rr = sorted((r for r in runs if r["arm"] == arm), key=lambda r: r["seed"])
        if not rr:
            raise ValueError(f"telemetry_sign: no run of arm {arm!r} in the result (arms: "
                             f"{sorted({r['arm'] for r in runs})})")
        dd = np.stack([np.asarray(res.arrays[f"{r['id']}__delta_err_sum"], np.float64) for r in rr])  # (S, N, L, H)
        S, N, L, H = dd.shape
        ok = np.isfinite(dd) & (dd != 0)
        k, n = ((dd > 0) & ok).sum(1), ok.sum(1)
        pg, pl = np.ones((S, L, H)), np.ones((S, L, H))
        for idx in np.ndindex(S, L, H):
            t = stats.sign_test(n_pos=k[idx], n_neg=n[idx] - k[idx])
            pg[idx], pl[idx] = t["p_greater"], t["p_less"]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = k / n
            nb = np.nansum(dd, 1) / np.nansum(np.abs(dd), 1)
        sg = np.where(ok, np.sign(dd), np.nan)
        ac1 = np.full((S, L, H), np.nan)
        for idx in np.ndindex(S, L, H):
            a = sg[idx[0], :, idx[1], idx[2]]
            a0, a1 = a[:-1], a[1:]
            m = np.isfinite(a0) & np.isfinite(a1)
            if m.sum() > 2 and np.std(a0[m]) > 0 and np.std(a1[m]) > 0:
                ac1[idx] = float(np.corrcoef(a0[m], a1[m])[0, 1])
        thr = alpha / (L * H)
        hp = [(int((frac[s] > 0.5).sum()), int((frac[s] < 0.5).sum())) for s in range(S)]
        zr = np.stack([np.asarray(res.arrays.get(f"{r['id']}__fix_zero_rows", np.full((N, L), np.nan)), np.float64)
                       for r in rr])                                                        # (S, N, L)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            zmean, zmax = np.nanmean(zr, 1), np.nanmax(zr, 1)
        out["arms"][arm] = dict(
            seeds=[r["seed"] for r in rr], attn=rr[0].get("attn", arm),
            steps=np.asarray(res.arrays.get(f"{rr[0]['id']}__step", np.arange(N)), np.float64),
            k=k, n=n, frac=frac, p_greater=pg, p_less=pl, nb=nb, ac1=ac1,
            n_up=(pg < thr).sum((1, 2)), n_down=(pl < thr).sum((1, 2)),
            heads_pos=np.array([a for a, _ in hp]), heads_neg=np.array([b for _, b in hp]),
            heads_p=np.array([stats.sign_test(n_pos=a, n_neg=b)["p_two"] for a, b in hp]),
            zero_rows=zmean, zero_rows_max=zmax)
    return out


def telemetry_numbers(reading: dict | None) -> dict:
    """The numbers a chapter glues from a `telemetry_sign` reading of two arms, keyed "<tag>_<name>" with tag "p" for
    the first arm and "f" for the second (the paper placement and its fix): the first and last telemetry steps, shares
    of steps positive per head and seed
    (median, range, per-layer medians as a line), heads passing up / down (per seed, as a line, and in total), the
    split of heads above / below ½ with its p-values, the median lag-1 sign autocorrelation, the normalised bias's
    median and range, and the share of rows the exact rule zeroes (per-layer means as a line, the largest mean and
    maximum, and the rank correlation across layers between that share and the median share of positive steps).

    reading None (the result does not exist): the same keys, every value None."""
    if reading is None:
        return dict.fromkeys(telemetry_numbers(_skeleton_reading()))
    arms = list(reading["arms"])
    if len(arms) != 2:
        raise ValueError(f"telemetry_numbers reads two arms (the placement and its fix), got {len(arms)}")
    out = {"alpha": reading["alpha"]}
    for tag, arm in zip(("p", "f"), arms):
        r = reading["arms"][arm]
        S, L, H = r["k"].shape
        from lib.training.spec import in_words
        out[f"{tag}_arm"], out[f"{tag}_attn"] = arm, in_words(r["attn"])
        out[f"{tag}_S"], out[f"{tag}_L"], out[f"{tag}_H"], out[f"{tag}_heads"] = S, L, H, L * H
        out[f"{tag}_n_steps"] = int(np.max(r["n"]))
        out[f"{tag}_n_steps_min"] = int(np.min(r["n"]))
        out[f"{tag}_step_first"] = int(np.nanmin(r["steps"]))
        out[f"{tag}_step_last"] = int(np.nanmax(r["steps"]))
        out[f"{tag}_step_gap"] = int(np.nanmedian(np.diff(r["steps"]))) if len(r["steps"]) > 1 else 0
        out[f"{tag}_frac_med"] = _med(r["frac"])
        out[f"{tag}_frac_lo"], out[f"{tag}_frac_hi"] = _rng(r["frac"])
        out[f"{tag}_frac_layers"] = ", ".join(f"{_med(r['frac'][:, l]):.2f}" for l in range(L))
        lay = [_med(r["frac"][:, l]) for l in range(L)]
        out[f"{tag}_top_layer"] = int(np.nanargmax(lay))
        out[f"{tag}_top_layer_frac"] = float(np.nanmax(lay))
        out[f"{tag}_above"] = int((r["frac"] > 0.5).sum())
        out[f"{tag}_below"] = int((r["frac"] < 0.5).sum())
        out[f"{tag}_cells"] = int(r["frac"].size)
        out[f"{tag}_up"], out[f"{tag}_down"] = int(r["n_up"].sum()), int(r["n_down"].sum())
        out[f"{tag}_up_line"] = ", ".join(str(int(x)) for x in r["n_up"])
        out[f"{tag}_down_line"] = ", ".join(str(int(x)) for x in r["n_down"])
        out[f"{tag}_up_all"] = int(np.all(r["p_greater"] < reading["alpha"] / (L * H), axis=0).sum())
        out[f"{tag}_heads_line"] = "; ".join(f"{int(a)} above, {int(b)} below (p = {p:.2g})" for a, b, p in
                                             zip(r["heads_pos"], r["heads_neg"], r["heads_p"]))
        out[f"{tag}_heads_p_max"] = float(np.max(r["heads_p"]))
        out[f"{tag}_ac1_med"] = _med(r["ac1"])
        out[f"{tag}_nb_med"] = _med(r["nb"])
        out[f"{tag}_nb_lo"], out[f"{tag}_nb_hi"] = _rng(r["nb"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            zl = np.nanmean(r["zero_rows"], 0)                                   # (L,) over seeds; NaN: no fix
        has = bool(np.isfinite(zl).any())
        out[f"{tag}_zero_layer"] = int(np.nanargmax(zl)) if has else None
        out[f"{tag}_zero_mean_max"] = float(np.nanmax(zl)) if has else float("nan")
        out[f"{tag}_zero_max"] = float(np.nanmax(r["zero_rows_max"])) if has else float("nan")
        out[f"{tag}_zero_line"] = ", ".join(f"{100 * z:.2g}%" for z in zl) if has else "none (no fix)"
        rho = float("nan")
        if has and L > 2:
            from scipy.stats import spearmanr
            rho = float(spearmanr(zl, lay).statistic)
        out[f"{tag}_zero_rank_corr"] = rho
    return out


def _skeleton_reading() -> dict:
    """A reading of two arms of one head and one step (only its keys matter: `telemetry_numbers(None)`)."""
    z = np.ones((1, 1, 1))
    arm = dict(seeds=[0], attn="-", steps=np.zeros(1), k=z, n=z, frac=z, p_greater=z, p_less=z, nb=z, ac1=z,
               n_up=np.zeros(1), n_down=np.zeros(1), heads_pos=np.ones(1), heads_neg=np.zeros(1),
               heads_p=np.ones(1), zero_rows=np.full((1, 1), np.nan), zero_rows_max=np.full((1, 1), np.nan))
    return {"arms": {"a": arm, "b": arm}, "alpha": ds.ALPHA, "meta": {}}


def telemetry_context(res) -> dict:
    """What a chapter says about the training result a `telemetry_sign` reading comes from: lr, steps (the most any
    run reached), seeds (a line), batch and sequence sizes, telemetry interval, outcomes per arm (a line)."""
    from lib.training.runs import arm_label
    d, cfg = res.data, (getattr(res, "meta", {}) or {}).get("config", {})
    runs = [r for r in d["runs"] if not r.get("tag")]
    oc = "; ".join(f"{arm_label(res, arm)}: " + ", ".join(f"{v} {k}" for k, v in o.items())
                   for arm, o in d.get("outcomes", {}).items())
    return dict(lr=d.get("lr"), steps=max(int(r["steps"]) for r in runs),
                seeds=", ".join(str(s) for s in sorted({r["seed"] for r in runs})),
                batch=cfg.get("batch_size"), seq=cfg.get("seq_len"), every=cfg.get("telemetry_every"),
                layers=cfg.get("n_layer"), heads=cfg.get("n_head"), outcomes=oc, label=res.label)


def telemetry_leans(res, arms=None) -> list[dict]:
    """The whole-batch lean of Σ Δδ per arm of a training result with telemetry (`telemetry_sign`), for comparing
    arms: per arm its label (`lib.training.runs.arm_label`), the (head, seed) cells, those whose share of positive
    steps lies above / below ½, the median share, and the one-sided exact sign test of above against below across
    the cells ("p_greater": cells of one seed share weights and batches, so this describes more than it tests), and
    "zero_max": the largest share of a layer's rows the exact rule zeroed at one telemetry step (None without it)."""
    from lib.training import runs as training_runs
    reading = telemetry_sign(res, arms=arms)
    out = []
    for arm, r in reading["arms"].items():
        frac = np.asarray(r["frac"], dtype=np.float64)
        frac = frac[np.isfinite(frac)]
        above, below = int((frac > 0.5).sum()), int((frac < 0.5).sum())
        zmax = np.asarray(r["zero_rows_max"], dtype=np.float64)
        out.append(dict(arm=arm, label=training_runs.arm_label(res, arm), cells=int(frac.size), above=above,
                        below=below, median=float(np.median(frac)) if frac.size else float("nan"),
                        p_greater=stats.sign_test(n_pos=above, n_neg=below)["p_greater"],
                        zero_max=float(np.nanmax(zmax)) if np.isfinite(zmax).any() else None))
    return out


def lean_words(leans: list[dict], alpha: float = 0.05) -> str:
    """`telemetry_leans` rows in words: "<label>: 98 of 108 (head, seed) cells above ½, median share 0.591
    (across cells p = …, leaning positive)"; "" for none."""
    def one(x):
        verdict = "leaning positive" if x["p_greater"] < alpha else "no lean at this level"
        zero = (f"; at most {x['zero_max']:.1%} of a layer's rows zeroed at one step" if x.get("zero_max") is not None
                else "")
        return (f"{x['label']}: {x['above']} of {x['cells']} (head, seed) cells above ½ and {x['below']} below, "
                f"median share {x['median']:.3f} (across cells p = {x['p_greater']:.2g}: {verdict}{zero})")
    return "; ".join(one(x) for x in leans)
