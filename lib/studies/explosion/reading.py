"""The numbers chapter 6 glues: does the proxy GPT explode, and is it the paper's mechanism?

`numbers(scale)` loads the committed results and returns one dict, {glue name: value}, that the chapter glues in a
loop: a value is a string or number (`{glue:text}`), a Markdown block (keys ending in "_md", shown where the prose
puts them) or a matplotlib Figure (keys starting with "fig-"). One function per section, each on the results it
reads, so each can be tested on its own:

* `setup_numbers()`: the proxy's recipe;
* `regime_numbers(pilots, headline)`: the rule that picks the healthy LR, applied to the pilots;
* `healthy_numbers(parts, refs)`: the healthy headline (width 384) against the pilots' references;
* `wide_numbers(parts, refs, healthy)`: the same at width 768;
* `generic_numbers(gg)`: the LR 8e-3 controls (QK-norm, row zeroing);
* `headline_numbers(res, sm)`: the LR 8e-3 headline and the fix with S − m in FP32;
* `sweep_numbers(sw)`: the LR sweep;
* `live_numbers(live, scale)`: this build's live run;
* `stale_line(res_list)`: the one sentence on the section's stale results.

Verdicts are derived here, when results are read; no run recorded them.
"""
from __future__ import annotations

import numpy as np

from lib.book import catalogue, results
from lib.fp.bf16 import ulp
from lib.fp.fix import Fix
from lib.studies.explosion import figures as ep
from lib.stats import top_of_p
from lib.training import horizon as hz, outcome, proxy, regime, runs
from lib.training.zero_rows import OURS_ZERO_AT

__all__ = ["numbers", "arm_spec", "setup_numbers", "regime_numbers", "pilot_refs", "healthy_numbers", "wide_numbers",
           "generic_numbers", "headline_numbers", "sweep_numbers", "live_numbers", "stale_line"]

PAPER, FIX7, FIX2 = "paper_rb512", "paper_rb512+fix_b7", "paper_rb512+fix_b2"   # the healthy headline's arms
EARLY = 250       # steps: a quarter of the way to the first explosion onsets at LR 8e-3
SW_STEP = 300     # steps: where the LR sweep's stable runs' logits are read
FIG_SEED = 0      # the seed the LR 8e-3 headline's logit, ‖W_Q‖₂ and tie-rate figures show
WQ_LAYER = 1      # the layer (counting from 0) whose heads' ‖W_Q^h‖₂ the ‖W_Q‖₂ figure shows


def arm_spec(res, arm: str):
    """The attention spec (`lib.training.spec.AttnSpec`) an arm of a training result ran: its β, rounding block…"""
    from lib.training.spec import AttnSpec
    return AttnSpec.parse(next(r["attn"] for r in res.data["runs"] if r["arm"] == arm))


def numbers(scale: str) -> dict:
    """Every number, table and figure of chapter 6 from the committed full-scale results (and the live run of
    `headline` at `scale`)."""
    from lib.book.runner import run_live
    full = lambda name: results.load(name, "full") if results.exists(name, "full") else None   # noqa: E731
    pilots = [results.load(n, "full") for n in regime.REGIME_RESULTS if results.exists(n, "full")]
    headline, sm = full("headline"), full("headline_fix_sm32")
    out = setup_numbers() | regime_numbers(pilots, headline)
    refs = pilot_refs(pilots) if pilots else None
    hh_parts = results.load_group("healthy_headline")
    healthy = runs.merge(hh_parts, name="healthy headline") if hh_parts and refs is not None else None
    if healthy is not None:
        out |= healthy_numbers(hh_parts, refs)
    out |= wide_numbers(results.load_group("width_768"), refs, healthy)
    out |= generic_numbers(full("generic_growth_controls"))
    out |= headline_numbers(headline, sm)
    more = [full(n) for n in SWEEP_SEEDS if full(n) is not None]
    out |= sweep_numbers(full("lr_sweep"), more)
    hi_lr = [r for r in (headline, sm, full("lr_sweep"), *more) if r is not None]
    out["stale_line"] = stale_line(hi_lr)
    out["h_stale_note"] = ("These results are stale (above)." if any(r.stale for r in hi_lr)
                           else "These results are up to date with the code.")
    return out | live_numbers(run_live("headline", scale), scale)


def stale_line(res_list) -> str:
    """The one sentence chapter 6 gives to its stale results (`lib.book.catalogue.stale_line`), with the reason
    they share: their code changed after they ran."""
    return catalogue.stale_line(res_list, why="the code their runs reach has changed since they ran (for the LR 8e-3 "
                                              "runs, the kernel's rounding-block change), and re-running them needs a "
                                              "GPU") or "Every result of this section is up to date."


def setup_numbers() -> dict:
    """The proxy's recipe at full scale, the outcome smoothing, our kernel's key tile and its row-zeroing level."""
    from kernels.attention import native_config
    cfg = proxy.proxy_config("full")
    m = cfg.model
    return {"p_layers": m.n_layer, "p_width": m.n_embd, "p_heads": m.n_head, "p_batch": cfg.batch_size,
            "p_seq": m.block_size, "p_warm": cfg.warmup, "p_tokens": f"{cfg.batch_size * m.block_size:,}",
            "p_hd": m.head_dim, "p_betas": f"({cfg.beta1:g}, {cfg.beta2:g})",
            "p_wd": f"{cfg.weight_decay:g}", "p_clip": f"{cfg.grad_clip:g}", "p_smooth": outcome.SMOOTH,
            "zero_level": f"{OURS_ZERO_AT:.1f}", "zero_at_b7": f"{OURS_ZERO_AT / (Fix().beta - 1):.1f}",
            "tile_key": native_config(m.head_dim, "fwd")["BLOCK_N"]}


def pilot_refs(pilots) -> results.Result:
    """The regime pilots as one Result: the FP32 and SDPA references of every later comparison."""
    data, arrays = runs.union(pilots)
    return results.Result("regime pilots", "full", dict(pilots[0].meta), data, arrays)


def regime_numbers(pilots, headline=None) -> dict:
    """The healthy-regime rule (`lib.training.regime`) on the pilots: per LR the reference runs' health
    ("rg_table_md"), the chosen LR, the figure; `headline` (LR 8e-3) for the logits of the generic failure."""
    out = {"rg_bound": f"{regime.MAX_LOGIT:g}", "rg_horizon": f"{regime.HORIZON:,}",
           "rg_trend": f"{regime.TREND_STEPS:,}"}
    if not pilots:
        return out | {"rg_table_md": "The regime pilots have not been run at full scale yet "
                                     "(`python -m lib.experiments regime_sweep`)."}
    out["rg_warm"] = pilots[0].meta["provenance"]["cfg"]["train"]["warmup"]
    out["rg_first_lr"] = f"{pilots[0].meta['provenance']['cfg']['lrs'][0]:g}"
    refs = pilot_refs(pilots)
    health = regime.health(refs.data, refs.arrays, horizon=regime.HORIZON)
    lr, _ = regime.select_lr(refs.data, refs.arrays)
    out["rg_lrs"] = ", ".join(f"{x:g}" for x in sorted(health, reverse=True))
    out["rg_chosen"] = f"{lr:g}" if lr is not None else "none"
    n_seeds = {len({r["seed"] for r in refs.data["runs"] if r["arm"] == a}) for a in regime.REFERENCE_ARMS}
    out["rg_n_seeds"] = "–".join(str(n) for n in sorted(n_seeds))      # seeds per reference arm
    by_id = {r["id"]: r for r in refs.data["runs"]}
    rows = ["| LR | arm | seed | outcome | tokens | val loss | largest logit | healthy |",
            "|---|---|---|---|---|---|---|---|"]
    for x in sorted(health, reverse=True):
        rows += [f"| {x:g} | {runs.arm_label(refs, h['arm'])} | {h['seed']} | {h['outcome']} | "
                 f"{runs.tokens_words(runs.tokens_seen(refs, by_id[h['id']]))} | {_val(by_id[h['id']])} | "
                 f"{h['max_logit']:.0f} | {'yes' if h['healthy'] else 'no'} |" for h in health[x]["runs"]]
    out["rg_table_md"] = "\n".join(rows)
    hi = health[max(health)]["runs"]
    out["rg_hi"] = f"{max(health):g}"
    out["rg_hi_over"] = f"{sum(h['max_logit'] > regime.MAX_LOGIT for h in hi)} of {len(hi)}"
    out["rg_hi_range"] = runs.span([h["max_logit"] for h in hi], "{:.0f}")
    out["rg_hi_stable"] = f"{sum(h['outcome'] == 'stable' for h in hi)} of {len(hi)}"
    if lr is not None:
        out["rg_ch_range"] = runs.span([h["max_logit"] for h in health[lr]["runs"]], "{:.0f}")
        out["rg_ch_n"] = len(health[lr]["runs"])
    if headline is not None:
        top = [float(np.nanmax(headline.arrays[f"{r['id']}__max_logit"])) for r in headline.data["runs"]]
        out["rg_8e3_logit"] = runs.span(top, "{:,.0f}")
    else:
        out["rg_8e3_logit"] = "10³–10⁴ (committed result missing)"
    out["fig-regime"] = ep.regime_figure(pilots, bound=regime.MAX_LOGIT)
    out["rg_label"] = runs.labelled(pilots)
    return out


def _val(run) -> str:
    v = runs.val_loss(run)
    return "—" if v is None else f"{v:.3f}"


def _vals(res, arm, lr=None) -> str:
    """The range over seeds of an arm's validation loss at the end of its runs."""
    return runs.span([runs.val_loss(r) for r in res.data["runs"] if r["arm"] == arm and not r.get("tag")
                      and (lr is None or r["lr"] == lr)])


def _tokens(res, arm, lr=None) -> str:
    """Tokens an arm's runs saw (their range, when they ran different numbers of steps)."""
    ns = [runs.tokens_seen(res, r) for r in res.data["runs"] if r["arm"] == arm and not r.get("tag")
          and (lr is None or r["lr"] == lr)]
    ns = [n for n in ns if n is not None]
    if not ns:
        return "—"
    lo, hi = runs.tokens_words(min(ns)), runs.tokens_words(max(ns))
    return lo if lo == hi else f"{lo[:-2]}–{hi}"


def _arms_words(res, arms) -> str:
    """Arm names of `res` as a list in words ("none" when empty)."""
    return "; ".join(runs.arm_label(res, a) for a in arms) or "none"


def _stable_with_seeds(res, rs, stable) -> str:
    """The arms that stayed stable in words, with how many seeds each ran: "PyTorch flash SDPA and FP32 attention
    (one seed each)"."""
    if not stable:
        return "no arm"
    n = {a: sum(1 for r in rs if r["arm"] == a) for a in stable}
    count = {1: "one seed", 2: "two seeds", 3: "three seeds"}
    names = " and ".join(runs.arm_label(res, a) for a in stable)
    if len(set(n.values())) == 1:
        k = next(iter(n.values()))
        return f"{names} ({count.get(k, f'{k} seeds')}{' each' if len(stable) > 1 else ''})"
    return f"{names} (" + "; ".join(f"{count.get(k, f'{k} seeds')} of {runs.arm_label(res, a)}"
                                    for a, k in n.items()) + ")"


def _words(arm, src_runs, judged) -> str:
    return outcome.words(judged[r["id"]]["outcome"] for r in sorted(src_runs, key=lambda r: r["seed"])
                              if r["arm"] == arm)


def _tel(summary, arm, key, stat="layer_mean") -> str:
    """The range over seeds of one telemetry share (`runs.arm_summary`), in per cent."""
    return runs.span([100 * t[stat] for t in summary.get(arm, {}).get(key, []) if t], "{:.1f}") + " %"


def healthy_numbers(parts, refs) -> dict:
    """The healthy headline (`parts`: its results, merged) against the pilots' FP32 and SDPA runs at its LR
    (`refs`): outcomes at the common horizon, best losses, the fix's row telemetry, the per-arm table
    ("hh_table_md"), the logit comparison and the figure."""
    hh = runs.merge(parts, name="healthy headline")     # one headline: same LR, steps, warm-up and batch order
    h, judged = hz.judge_result(hh)
    summ = runs.arm_summary(hh)
    lr = hh.data["lr"]
    ref_runs = [r for r in refs.data["runs"] if r["lr"] == lr]
    _, ref_j = hz.judge_result(refs)
    out = {"hh_lr": f"{lr:g}", "hh_steps": f"{h:,}",
           "hh_seeds": ", ".join(str(x) for x in sorted({r["seed"] for r in hh.data["runs"]})),
           "hh_paper": _words(PAPER, hh.data["runs"], judged), "hh_fix": _words(FIX7, hh.data["runs"], judged),
           "hh_fix2": _words(FIX2, hh.data["runs"], judged) or "not run",
           "hh_fa2": _words("fa2", hh.data["runs"], judged) or "not run",
           "hh_fp32": _words("fp32", ref_runs, ref_j), "hh_sdpa": _words("sdpa", ref_runs, ref_j)}

    def bests(arm, src):
        return [r["best"] for r in src.data["runs"] if r["arm"] == arm and r["lr"] == lr]
    for key, arm in (("paper", PAPER), ("fix", FIX7), ("fix2", FIX2), ("fa2", "fa2")):
        out[f"hh_{key}_best"] = runs.span(bests(arm, hh))
    out["hh_ref_best"] = runs.span(bests("fp32", refs) + bests("sdpa", refs))

    def mean_best(arm):
        return float(np.mean(bests(arm, hh))) if bests(arm, hh) else float("nan")
    out["hh_gap7"] = f"{mean_best(FIX7) - mean_best(PAPER):+.3f}"
    out["hh_gap2"] = f"{mean_best(FIX2) - mean_best(PAPER):+.3f}"
    for key, arm, tel in (("fix_zero", FIX7, "fix_zero_rows"), ("fix_rows", FIX7, "fix_rows"),
                          ("fix2_rows", FIX2, "fix_rows"), ("fix2_zero", FIX2, "fix_zero_rows"),
                          ("tie_paper", PAPER, "tie_rate"), ("tie_fix", FIX7, "tie_rate"),
                          ("tie_fix2", FIX2, "tie_rate")):
        out[f"hh_{key}"] = _tel(summ, arm, tel)
    out["hh_fix2_logit"] = runs.span(summ.get(FIX2, {}).get("max_logit", []), "{:.0f}")
    # the per-arm table: seeds are in the caption's text (every arm ran the same three), to keep the column narrow
    rows = ["| arm | outcomes | best loss | val loss | tokens | largest logit | rows shifted | rows zeroed |",
            "|---|---|---|---|---|---|---|---|"]
    for arm, v in ((a, v) for a, v in summ.items() if a is not None):
        rows.append(f"| {runs.arm_label(hh, arm)} | {outcome.words(v['outcomes'], compact=True)} | "
                    f"{runs.span(v['best'])} | {_vals(hh, arm)} | {_tokens(hh, arm)} | "
                    f"{runs.span(v['max_logit'], '{:.0f}')} | "
                    + (f"{_tel(summ, arm, 'fix_rows')} | {_tel(summ, arm, 'fix_zero_rows')} |"
                       if any(v["fix_rows"]) else "— | — |"))
    for arm in ("fp32", "sdpa"):
        rs = sorted((r for r in ref_runs if r["arm"] == arm), key=lambda r: r["seed"])
        top = [float(np.nanmax(refs.arrays[r["id"] + "__max_logit"])) for r in rs]
        rows.append(f"| {runs.arm_label(refs, arm)} (pilot) | "
                    f"{outcome.words((ref_j[r['id']]['outcome'] for r in rs), compact=True)} | "
                    f"{runs.span([r['best'] for r in rs])} | {_vals(refs, arm, lr)} | {_tokens(refs, arm, lr)} | "
                    f"{runs.span(top, '{:.0f}')} | — | — |")
    out["hh_table_md"] = "\n".join(rows)

    def last_logit(src, rid):     # the largest logit over layers at the run's last telemetry step
        return float(regime.max_logit_curve(src.arrays, rid)[1][-1])
    comp = []
    for seed in sorted({r["seed"] for r in hh.data["runs"]}):
        p = next(r for r in hh.data["runs"] if r["arm"] == PAPER and r["seed"] == seed)
        comp.append((seed, last_logit(hh, p["id"]),
                     max(last_logit(refs, r["id"]) for r in ref_runs if r["seed"] == seed)))
    out["hh_logit_cmp"] = "; ".join(f"seed {s}: {a:.0f} against {b:.0f}" for s, a, b in comp)
    pos = [float((hh.arrays[f"{r['id']}__delta_err_sum"] > 0).mean()) for r in hh.data["runs"] if r["arm"] == PAPER]
    out["hh_dd_pos"] = f"{100 * min(pos):.0f}–{100 * max(pos):.0f} %"
    out["fig-healthy"] = ep.healthy_figure(hh, refs)
    out["hh_label"] = runs.labelled(parts)
    out["hh_rb"] = arm_spec(hh, PAPER).numerics.round_block
    out["hh_b7"] = f"{arm_spec(hh, FIX7).fix.beta:g}"
    out["hh_b2"] = f"{arm_spec(hh, FIX2).fix.beta:g}" if any(r["arm"] == FIX2 for r in hh.data["runs"]) else "—"
    out["hh_seq"], out["hh_width"] = hh.meta["config"]["seq_len"], hh.meta["config"]["n_embd"]
    out["hh_window"] = ep.HEALTHY_WINDOW
    out["hh_wall"] = f"{sum(r.meta['wall_s'] for r in parts) / 60:.1f}"
    return out


def wide_numbers(parts, refs=None, healthy=None) -> dict:
    """The headline at width 768 (`parts`, merged) with its own FP32 and SDPA references, judged by the regime rule;
    the paper arm's logits against them per seed, with a one-sided sign test over seeds; `refs` (the width-384
    pilots) and `healthy` (the width-384 headline) for the comparison across widths."""
    if not parts:
        return {}
    wd = runs.merge(parts, name="width 768")    # seeds 0-1 and seed 2 ran on two machines: one headline
    h, _ = hz.judge_result(wd)
    summ = runs.arm_summary(wd)
    cfg = wd.meta["config"]
    health = regime.health(wd.data, wd.arrays).get(wd.data["lr"], {"healthy": False, "runs": []})
    paper = summ[PAPER]
    out = {"wd_width": cfg["n_embd"], "wd_heads": cfg["n_head"], "wd_lr": f"{wd.data['lr']:g}",
           "wd_steps": f"{h:,}", "wd_seeds": ", ".join(str(x) for x in sorted({r["seed"] for r in wd.data["runs"]})),
           "wd_healthy": "healthy" if health["healthy"] else "not healthy",
           "wd_ref_logit": runs.span([x["max_logit"] for x in health["runs"]], "{:.0f}"),
           "wd_ref_out": ", ".join(sorted({x["outcome"] for x in health["runs"]})),
           "wd_paper_out": outcome.words(paper["outcomes"]),
           "wd_paper_logit": runs.span(paper["max_logit"], "{:.0f}"),
           "wd_paper_best": runs.span(paper["best"]),
           "wd_ref_best": runs.span(summ.get("fp32", {}).get("best", []) + summ.get("sdpa", {}).get("best", [])),
           "wd_runs": len([r for r in wd.data["runs"] if not r.get("tag")]), "wd_layers": cfg["n_layer"],
           "wd_hd": cfg["n_embd"] // cfg["n_head"], "wd_rb": arm_spec(wd, PAPER).numerics.round_block}
    per_seed = []       # the paper arm's largest logit against the larger of the two references of that seed
    for seed in sorted({r["seed"] for r in wd.data["runs"]}):
        top = {a: max(float(np.nanmax(wd.arrays[r["id"] + "__max_logit"])) for r in wd.data["runs"]
                      if r["arm"] == a and r["seed"] == seed) for a in (PAPER, "fp32", "sdpa")}
        per_seed.append((seed, top[PAPER], max(top["fp32"], top["sdpa"])))
    n_hot = sum(p > q for _, p, q in per_seed)
    out["wd_hot"] = f"{n_hot} of {len(per_seed)}"
    out["wd_logit_cmp"] = "; ".join(f"seed {s}: {p:.0f} against {q:.0f}" for s, p, q in per_seed)
    # stated only as what it is: the chance of this many or more seeds with the paper arm above both references if
    # the three arms were exchangeable (each the hottest with chance 1/3, not a coin's 1/2)
    out["wd_hot_p"] = f"{top_of_p(n_hot, len(per_seed), 3):.3f}"
    ref384 = regime.health(refs.data, refs.arrays).get(wd.data["lr"], {"runs": []})["runs"] if refs else []
    out["wd_ref384_logit"] = runs.span([x["max_logit"] for x in ref384], "{:.0f}")
    n_fail = sum(outcome.failed(o) for o in paper["outcomes"])
    out["wd_close"] = (f"So at width {cfg['n_embd']} the paper placement failed in {n_fail} of "
                       f"{len(paper['outcomes'])} seeds within {h:,} steps"
                       + ("" if health["healthy"] else ", and the references' largest logits left the range this "
                          "chapter calls healthy, so a failure here would not have been the paper's alone") + ".")
    out["wd_384_best"] = (runs.span([b for rid, b in runs.best_within(healthy, h).items()
                                     if rid.startswith(PAPER + "_")]) if healthy is not None else "—")
    out["fig-wide"] = ep.healthy_figure(wd, None, bound=regime.MAX_LOGIT)
    out["wd_label"] = runs.labelled(parts)
    out["wd_wall"] = f"{sum(r.meta['wall_s'] for r in parts) / 60:.0f}"
    return out


def generic_numbers(gg) -> dict:
    """The LR 8e-3 controls (`generic_growth_controls`): QK-norm in every arm, and row zeroing without a shift."""
    if gg is None:
        return {"gg_table_md": "The generic-growth controls have not been run at full scale yet."}
    _, judged = hz.judge_result(gg)
    rows = ["| arm | seeds | outcome | val loss | tokens | largest logit |", "|---|---|---|---|---|---|"]
    for arm in dict.fromkeys(r["arm"] for r in gg.data["runs"]):
        rs = sorted((r for r in gg.data["runs"] if r["arm"] == arm), key=lambda r: r["seed"])
        top = max(float(np.nanmax(gg.arrays[f"{r['id']}__max_logit"])) for r in rs)
        rows.append(f"| {runs.arm_label(gg, arm)} | {len(rs)} | "
                    f"{outcome.words(judged[r['id']]['outcome'] for r in rs)} | {_vals(gg, arm)} | "
                    f"{_tokens(gg, arm)} | {top:,.0f} |")
    qk = [r for r in gg.data["runs"] if (gg.meta["provenance"]["cfg"].get("arm_train") or {}).get(r["arm"], {})
          .get("qk_norm")]
    zr = sorted((r for r in gg.data["runs"] if r["arm"] == "paper+zero_rows"), key=lambda r: r["seed"])
    return {"gg_table_md": "\n".join(rows), "gg_lr": ", ".join(f"{x:g}" for x in sorted({r["lr"] for r in gg.data["runs"]})),
            "gg_steps": f"{max(r['steps'] for r in gg.data['runs']):,}",
            "gg_zr_beta": f"{arm_spec(gg, 'paper+zero_rows').fix.beta:g}" if zr else "—",
            "gg_qk": f"{sum(judged[r['id']]['outcome'] == 'stable' for r in qk)} of {len(qk)}",
            "gg_qk_logit": f"{max(float(np.nanmax(gg.arrays[r['id'] + '__max_logit'])) for r in qk):.0f}",
            "gg_zr": outcome.words(judged[r["id"]]["outcome"] for r in zr),
            "gg_label": runs.labelled([gg])}


def _repeat_prefix(res, rep: dict, q: str) -> tuple[int, bool]:
    """(shared steps, bit-identical?) of a result's repeat run and its original for per-step quantity `q`."""
    a, b = res.arrays[f"{rep['original']}__{q}"], res.arrays[f"{rep['repeat']}__{q}"]
    n = min(len(a), len(b))
    return n, n > 0 and a[:n].tobytes() == b[:n].tobytes()


def lr_source_words(source: str) -> str:
    """Where a training result's LR came from (its `lr_source`), in words: an environment variable (`$NAME`) is an LR
    set by hand for the run, "registry" one fixed in the experiment's configuration; a pilot's choice
    ("regime_sweep (full): …") is named by its result's title."""
    from lib.book import catalogue
    if source.startswith("$"):
        return "set by hand for this run"
    if source == "registry":
        return "fixed in the experiment's configuration"
    if source.startswith("default"):
        return "the default, no LR sweep having chosen one"
    return catalogue.titled(source)


def headline_numbers(res, sm=None) -> dict:
    """The LR 8e-3 headline (`res`) and the fix with S − m in FP32 run apart at its LR and steps (`sm`,
    `headline_fix_sm32`): outcomes at the common horizon, the repeats, logits, ‖W_Q‖₂, tie rates, the outcome tables
    ("h_table_md"), what happened ("h_what_md"), figures."""
    if res is None:
        return {"h_table_md": "**The headline has not been run on the GPU yet**: no committed "
                              "`results/full/headline.json`.", "h_what_md": ""}
    d = res.data
    rs = [r for r in d["runs"] if not r["tag"]]
    trunc = [r for r in rs if r["truncated_at"]]
    out = {"h_label": runs.labelled([res], False), "h_lr": f"{d['lr']:g}", "h_lr_source": lr_source_words(d["lr_source"]),
           "h_steps_span": runs.span([r["steps"] for r in rs], "{:,.0f}"),
           "h_budget": f"{res.meta['config'].get('max_wall_s', float('nan')):.0f}",
           "h_workers": res.meta["config"]["workers"], "h_steps_cap": d["steps"],
           "h_stop": ("every run ended on its step count, none on the budget" if not trunc else
                      f"{len(trunc)} of {len(rs)} runs stopped at the budget"),
           "h_wall": f"{res.meta['wall_s']:.0f}", "h_wall_min": f"{res.meta['wall_s'] / 60:.1f}",
           "h_n_runs": len(d["runs"]), "h_beta": f"{res.meta['config']['beta']:g}"}
    sm_note = ""
    if sm is not None and (sm.data["lr"], sm.data["steps"]) != (d["lr"], d["steps"]):   # a headline re-run since
        sm_note = (f"\n\n{runs.labelled([sm], False)} ran at LR {sm.data['lr']:g} for {sm.data['steps']} steps, "
                   f"not at this headline's {d['lr']:g} and {d['steps']}: it is left out until it is re-run.")
        sm = None
    for key, arm in (("paper", "paper"), ("fix", "paper+fix"), ("fa2", "fa2")):
        out[f"h_onset_{key}"] = ", ".join(str(r["onset"]) for r in rs if r["arm"] == arm
                                          and r["onset"] is not None) or "none"
    h, judged = hz.judge_result(res)
    out["h_horizon"] = h
    out["h_also_failed"] = _arms_words(res, [a for a in dict.fromkeys(r["arm"] for r in rs) if a != "paper" and all(
        outcome.failed(judged[x["id"]]["outcome"]) for x in rs if x["arm"] == a)]).replace("none", "no other arm")
    out["h_stable_arms"] = _arms_words(res, hz.stable_arms(rs, judged))
    out["h_stable_seeds"] = _stable_with_seeds(res, rs, hz.stable_arms(rs, judged))
    out["h_also_clause"] = ("no other arm failed in every seed" if out["h_also_failed"] == "no other arm"
                            else f"so did {out['h_also_failed']}")
    out["h_device"] = catalogue.device(res.meta)
    out["h_contrast_words"] = contrast_words(res, rs, judged)
    out["h_fp32_outcome"] = "; ".join(judged[r["id"]]["outcome"] for r in rs if r["arm"] == "fp32") or "not run"
    rep = d["repeat"] or {}
    (rn, rl), (_, rg) = ((_repeat_prefix(res, rep, "loss"), _repeat_prefix(res, rep, "grad_norm"))
                         if rep.get("repeat") else ((0, False), (0, False)))
    out["h_repeat"] = (f"bit-identical (over the {rn} steps both ran)" if rl and rg
                       else f"NOT identical (first differing step {rep.get('first_differing_step')})")
    ids = [r["id"] for r in rs]
    out["h_early"], out["h_fig_seed"], out["h_wq_layer"] = EARLY, FIG_SEED, WQ_LAYER
    early = [ep.max_logit_at(res.arrays, rid, EARLY) for rid in ids]
    out["h_ml250_min"], out["h_ml250_max"] = f"{min(early):,.0f}", f"{max(early):,.0f}"
    fp32 = next(r["id"] for r in rs if r["arm"] == "fp32")
    out["h_ml_fp32_end"] = f"{float(res.arrays[f'{fp32}__max_logit'][-1].max()):,.0f}"
    ends = [float(res.arrays[f"{rid}__max_logit"][-1].max()) for rid in ids]
    out["h_ml_end_lo"], out["h_ml_end_hi"] = f"{min(ends):,.0f}", f"{max(ends):,.0f}"
    out["h_ulp_lo"], out["h_ulp_hi"] = f"{float(ulp(min(ends))):g}", f"{float(ulp(max(ends))):g}"
    wq = {r["arm"]: float(res.arrays[f"{r['id']}__wq_norm_layer"][-1].max()) for r in rs if r["seed"] == FIG_SEED}
    out["h_wq_paper"], out["h_wq_fp32"] = f"{wq['paper']:.0f}", f"{wq['fp32']:.0f}"
    tr = {r["arm"]: float(res.arrays[f"{r['id']}__tie_rate"].max()) for r in rs if r["seed"] == FIG_SEED}
    out["h_tie_paper"], out["h_tie_fp32"], out["h_tie_fix"] = (f"{tr[a]:.0%}" for a in ("paper", "fp32", "paper+fix"))
    seed0 = [f"{a}_s{FIG_SEED}_lr{d['lr']:g}" for a in ("paper", "paper+fix", "fp32")]
    out["fig-loss"] = ep.loss_curves(res)
    out["fig-logit"] = ep.max_logit_figure(res, [r["id"] for r in rs if r["seed"] == FIG_SEED])
    out["fig-wq"] = ep.qk_norm_figure(res, seed0, WQ_LAYER)
    out["fig-tie"] = ep.tie_rate_figure(res, seed0)
    h_sm, judged_sm = hz.judge_result(sm) if sm is not None else (None, {})
    out["h_table_md"] = (f"Committed GPU result: {runs.labelled([res], False)}.\n\n" + runs.outcome_table(res, judged)
                         + (f"\n\nThe fix with S − m in FP32, run apart ({runs.labelled([sm], False)}; same LR, "
                            "steps and batch order, with FP32 attention again as a control and a repeat of its first "
                            "run).\n\n" + runs.outcome_table(sm, judged_sm) if sm is not None else sm_note))
    out["h_what_md"] = _what_happened(res, sm, rs, judged, h, h_sm, judged_sm, rn, rl and rg)
    return out


def _what_happened(res, sm, rs, judged, h, h_sm, judged_sm, rn, identical) -> str:
    """The LR 8e-3 headline in one paragraph: outcomes per arm at the horizon, the repeats within and across
    results."""
    sm_arm = "paper+fix_split_sm32"
    rs = rs + ([r for r in sm.data["runs"] if r["arm"] == sm_arm and not r["tag"]] if sm is not None else [])
    judged = judged | ({r["id"]: judged_sm[r["id"]] for r in rs if r["arm"] == sm_arm} if sm is not None else {})
    arms = [a for a in ("paper", "paper+fix", sm_arm, "fa2", "sdpa", "fp32") if any(r["arm"] == a for r in rs)]
    stable = hz.stable_arms(rs, judged)
    diff = [j for j in judged.values() if j["outcome"] != j["full_outcome"]]
    reps = runs.repeats([res] + ([sm] if sm is not None else []))
    reps = list({(x["arm"], x["seed"], x["results"]): x for x in reps
                 if x["results"][0] != x["results"][1]}.values())        # across results, one per run pair
    sm_rep = (sm.data["repeat"] or {}) if sm is not None else {}
    src = {r["arm"]: (sm if sm is not None and r["arm"] == sm_arm else res) for r in rs}

    def w(a):
        return runs.arm_label(src.get(a, res), a)
    from lib.book import catalogue
    return (f"**What happened.** Judged on the first {h} steps (the fewest any run reached; the last column of the "
            "tables, onset step in brackets, seeds in order"
            + (f"; the fix with S − m in FP32 on its own result's {h_sm}" if sm is not None and h_sm != h else "")
            + "): " + "; ".join(f"{w(a)}: " + hz.arm_words(rs, judged, a) for a in arms) + ". "
            + (f"Only {'; '.join(w(a) for a in stable)} stayed stable in every seed. " if stable else
               "No arm stayed stable. ")
            + ("Over the whole runs " + "; ".join(f"{w(j['id'].rsplit('_s', 1)[0])} ended {j['full_outcome']}"
                                                  for j in diff) + ". " if diff else "")
            + f"Rerunning the paper placement at seed 0 in the same result gave a "
            f"{'bit-identical' if identical else 'DIFFERENT'} loss and gradient-norm curve over the {rn} steps both ran"
            + (f" (so did the fix with S − m in FP32 at seed 0 in its own result: "
               + ("bit-identical" if sm_rep.get("loss_bit_identical") and sm_rep.get("grad_norm_bit_identical")
                  else f"NOT identical, first differing step {sm_rep.get('first_differing_step')}") + ")"
               if sm_rep.get("repeat") else "")
            + ("; the same arm and seed run in another result: " + "; ".join(
                f"{w(x['arm'])}, seed {x['seed']}, in {catalogue.title(x['results'][0])} and "
                f"{catalogue.title(x['results'][1])} ("
                + ("the same version of the code" if x["commits"][0] == x["commits"][1] else
                   "two versions of the code") + f") over {x['steps']} shared steps, "
                + ("bit-identical" if x["identical"] else f"first difference at step {x['first_diff']}")
                for x in reps) if reps else "")
            + ". Same seed, same curve, on the GPU, for our kernel. PyTorch's flash SDPA backward adds dQ with atomics in a non-deterministic order unless "
            "deterministic algorithms are required, which these runs did not, so its curve is not repeatable bit for bit and its single run here is one draw "
            "of several possible outcomes.")


CONTRASTS = ("fa2", "sdpa", "fp32")      # the arms without the paper's rounding placement


def contrast_words(res, rs, judged) -> str:
    """What the contrast arms did at the common horizon, in words with their seeds: "FA2 placement degraded (seed 0);
    …" ("not run" when none ran)."""
    parts = []
    for a in CONTRASTS:
        mine = sorted((r for r in rs if r["arm"] == a), key=lambda r: r["seed"])
        if mine:
            oc = [judged[r["id"]]["outcome"] for r in mine]
            what = oc[0] if len(set(oc)) == 1 else ", ".join(oc)
            seeds = ", ".join(str(r["seed"]) for r in mine)
            parts.append(f"{runs.arm_label(res, a)} {what} (seed{'s' * (len(mine) > 1)} {seeds})")
    return "; ".join(parts) or "not run"


def window_lrs(sw, judged) -> list:
    """The swept LRs where the sweep finds a window: every paper-placement run failed (`outcome.failed`) and every
    run of every contrast arm (FA2 placement, SDPA, FP32 attention) stayed stable, at the common horizon."""
    out = []
    for lr in sorted(sw.data["lrs"]):
        at = [r for r in sw.data["runs"] if r["lr"] == lr and not r.get("tag")]
        paper = [judged[r["id"]]["outcome"] for r in at if r["arm"] == "paper"]
        contrast = [judged[r["id"]]["outcome"] for r in at if r["arm"] in CONTRASTS]
        if paper and contrast and all(outcome.failed(o) for o in paper) and all(o == "stable" for o in contrast):
            out.append(lr)
    return out


def seed_repeat_words(res, judged, h) -> tuple[str, bool]:
    """(one sentence, whether it finds a window): what a repeat of the sweep at another seed (`lr_sweep_s1`, …)
    found on its own common horizon `h` — the paper placement's failures and every contrast arm that did not stay
    stable, per LR."""
    seeds = sorted({r["seed"] for r in res.data["runs"]})
    win = window_lrs(res, judged)
    lrs = sorted(res.data["lrs"])
    own = [r for r in res.data["runs"] if not r.get("tag")]
    paper = {lr: [judged[r["id"]]["outcome"] for r in own if r["arm"] == "paper" and r["lr"] == lr] for lr in lrs}
    failed = [lr for lr in lrs if paper[lr] and all(outcome.failed(o) for o in paper[lr])]
    bad = [f"{runs.arm_label(res, r['arm'])} {judged[r['id']]['outcome']} at {r['lr']:g}"
           for r in sorted(own, key=lambda r: (r["lr"], CONTRASTS.index(r["arm"]) if r["arm"] in CONTRASTS else 9))
           if r["arm"] in CONTRASTS and judged[r["id"]]["outcome"] != "stable"]
    ok = [runs.arm_label(res, a) for a in CONTRASTS
          if any(r["arm"] == a for r in own) and all(judged[r["id"]]["outcome"] == "stable"
                                                     for r in own if r["arm"] == a)]
    both = lambda xs: " and ".join(f"{x:g}" for x in xs)   # noqa: E731
    head = (f"At seed {', '.join(map(str, seeds))} (the same LRs, judged on its own first {h:,} steps) the paper "
            f"placement failed at {('LR ' + both(failed)) if failed else 'no LR'}")
    if win:
        return f"{head}, and the window holds at LR {both(win)}" + (f" ({'; '.join(bad)})" if bad else "") + ".", True
    return (f"{head}, but there is no window: " + ("; ".join(bad) if bad else "no contrast arm trained")
            + (f", while {'; '.join(ok)} trained at every LR" if ok else "") + "."), False


def sweep_shape(sw, judged, hi, more=()) -> tuple[str, str]:
    """(the sentence after the sweep's table, the takeaway's clause): a window (`window_lrs`) or a cliff, in words,
    with the seeds it rests on. `more`: repeats at other seeds as (result, judged, horizon), read by
    `seed_repeat_words`."""
    win = window_lrs(sw, judged)
    seeds = sorted({r["seed"] for r in sw.data["runs"]})
    one = len(seeds) == 1
    seed_words = f"seed {seeds[0]}" if one else f"seeds {', '.join(map(str, seeds))}"
    reps = [seed_repeat_words(*m) for m in more]
    n_win = sum(w for _, w in reps) + bool(win)
    if win:
        lrs = " and ".join(f"{x:g}" for x in win)
        tail = ("The same sweep at two more seeds, registered with the same rule, tests whether the window holds."
                if not reps else " ".join(t for t, _ in reps)
                + f" So the window holds in {n_win} of {len(reps) + 1} seeds"
                + (" so far (a third is registered)." if len(reps) < 2 else "."))
        return ((f"So in {seed_words} the sweep finds a window: at LR {lrs} the paper placement failed while FA2 "
                 "numerics, PyTorch's SDPA and FP32 attention all trained. "
                 + ("It rests on one seed, " if one and not reps else "")
                 + ("in a proxy where link 1's preconditions are absent as far as measured: were it to hold, the "
                    "paper placement would fail here by a route other than tied maxima. " if not reps else "")
                 + "An earlier run of the same "
                   "sweep, on an H100 with earlier code, found a cliff instead (FP32 attention and FA2 numerics "
                   "failing beside the paper placement at the higher LR): at this edge one seed's outcome changed "
                   "with the device or the code, and these two runs cannot say which. " + tail),
                f"The LR sweep finds a window in {seed_words} (LR {lrs}: the paper placement failed, every contrast "
                f"arm trained)" + (f", and in {n_win} of {len(reps) + 1} seeds in all" if reps else "")
                + ", in a proxy without the preconditions; an earlier run of the sweep on another GPU found a cliff.")
    nots = [r["arm"] for r in sw.data["runs"] if r["lr"] == hi and not r.get("tag")
            and judged[r["id"]]["outcome"] != "stable"]
    return ((f"So at our scale ({seed_words}) there is a cliff, not a window: no swept LR fails the paper placement "
             "while every contrast arm trains, and which arm survives at the cliff (compare the surviving arms here "
             "and in the headline above) looks like chance, not numerics."),
            f"The LR sweep finds a cliff rather than a window: at the highest LR "
            f"{_arms_words(sw, list(dict.fromkeys(nots))).replace('none', 'no arm')} exploded or degraded.")


SWEEP_SEEDS = ("lr_sweep_s1", "lr_sweep_s2")     # the sweep repeated at other seeds, same LRs and rule


def sweep_numbers(sw, more=()) -> dict:
    """The LR sweep (`lr_sweep`): outcomes at its common horizon at the lowest and highest LR, the rule's choice,
    the logits of the stable runs, the table ("sw_table_md", with a table per repeat in `more`, the sweep at other
    seeds, each judged on its own common horizon) and the figure."""
    if sw is None:
        return {"sw_table_md": "**The LR sweep has not been run on the GPU yet.**"}
    sd = sw.data
    lo, hi = min(sd["lrs"]), max(sd["lrs"])
    h, judged = hz.judge_result(sw)       # runs of unequal length (wall budget): judged on a common horizon
    reps = [(m, *hz.judge_result(m)[::-1]) for m in more]     # (result, judged, horizon): each on its own horizon

    def outs(lr):
        return {r["arm"]: judged[r["id"]]["outcome"] for r in sd["runs"] if r["lr"] == lr}
    fail_hi = [a for a, o in outs(hi).items() if outcome.failed(o)]
    deg_hi = [a for a, o in outs(hi).items() if o == "degraded"]
    fp32_hi = judged.get(f"fp32_s0_lr{hi:g}", {})
    mls = [ep.max_logit_at(sw.arrays, r["id"], SW_STEP) for r in sd["runs"] if r["lr"] == lo
           and r["outcome"] == "stable"]
    notok_lo = [f"{runs.arm_label(sw, a)} ({o})" for a, o in outs(lo).items() if o != "stable"]
    return {"sw_label": runs.labelled([sw], False), "sw_lrs": ", ".join(f"{x:g}" for x in sd["lrs"]),
            "sw_n": len(sd["runs"]), "sw_horizon": h, "sw_lo": f"{lo:g}", "sw_hi": f"{hi:g}",
            "sw_fail_hi": _arms_words(sw, fail_hi), "sw_deg_hi": _arms_words(sw, deg_hi),
            "sw_notstable_hi": _arms_words(sw, fail_hi + deg_hi).replace("none", "no arm"),
            "sw_fp32_hi": outs(hi).get("fp32", "not run") + (f" (onset step {fp32_hi['onset']})"
                                                             if fp32_hi.get("onset") is not None else ""),
            "sw_ok_hi": _arms_words(sw, [a for a, o in outs(hi).items() if o == "stable"]),
            "sw_lo_clause": f"every arm trained except {'; '.join(notok_lo)}" if notok_lo else "every arm trained",
            "sw_choice": (f"{sd['chosen_lr']:g} ({sd['chosen_lr_reason']})" if sd["chosen_lr"] is not None
                          else f"none ({sd['chosen_lr_reason']})"),
            "sw_step": SW_STEP, "sw_ml_lo": f"{min(mls):,.0f}", "sw_ml_hi": f"{max(mls):,.0f}",
            "sw_steps": f"{min(r['steps'] for r in sd['runs'])}–{max(r['steps'] for r in sd['runs'])}",
            "fig-sweep": ep.lr_sweep_figure(sw),
            "sw_table_md": (f"Committed GPU result: {runs.labelled([sw], False)}, seed 0, data seed 0.\n\n"
                            + runs.outcome_table(sw, judged)
                            + "".join(f"\n\n{runs.labelled([m], False)}, judged on its first {mh:,} steps:\n\n"
                                      + runs.outcome_table(m, mj) for m, mj, mh in reps)),
            "sw_shape": sweep_shape(sw, judged, hi, reps)[0], "sw_takeaway": sweep_shape(sw, judged, hi, reps)[1]}


def live_numbers(live: dict, scale: str) -> dict:
    """The headline run live at this build's `scale` (`lib.book.runner.run_live`): at ci scale one sentence (a tiny
    CPU model for a few steps proves the code path, its outcomes mean nothing), else its runs as a table in words."""
    rs = live["data"]["runs"]
    out = {"live_scale": scale, "live_n": len(rs)}
    if scale == "ci":
        counts = {}
        for r in rs:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        return out | {"live_md": (
            f"This build ran the headline's code at ci scale: {len(rs)} run{'s' * (len(rs) != 1)} of a tiny CPU model, "
            f"{runs.span([r['steps'] for r in rs], '{:.0f}')} steps each, "
            f"{', '.join(f'{n} {o}' for o, n in counts.items())} (final losses "
            f"{runs.span([r['final'] for r in rs])}). That shows the code runs end to end; at this size the outcomes "
            "say nothing about stability.")}
    rows = ["| run | outcome | steps | final loss |", "|---|---|---|---|"] + [
        f"| {runs.run_words(r)} | {r['outcome']} | {r['steps']} | {r['final']:.3f} |" for r in rs]
    return out | {"live_md": f"At scale {scale} the headline experiment ran {len(rs)} arms:\n\n" + "\n".join(rows)}
