"""The intro's verdict table: the causal chain and the paper's claims in at most 13 rows, each with one verdict, the
one number it rests on, where it was tested (a label the legend under the table defines) and the chapter; the book's
own controls in a sentence below it; the numbers of the intro's boxes and of its list of findings the chapters hold.

Each row merges one or more claims of `lib.claims.table.CLAIMS` (their verdicts come from `status_table`, so the
intro and the chapters say the same thing) that share one status and one staleness (`one_status`: a row never hides a
second verdict), with "(stale)" when that verdict rests on a stale result. Links are named by the numbered boxes of
the chain figure (`lib.claims.chain`). The number, and every number of the "tested in" cells and of the legend
(`context`), is computed from the committed results through the studies' readings when the table is built — never
typed. A row whose result is missing reads "—" there. No provenance strings: the appendix has one line per result.

* `ROWS`, `CONTROLS`, `LEGEND`: the definitions; `verdict_rows(root)`, `control_rows(root)`: as dicts;
  `markdown(rows, chapter_cell)`, `legend(root)`, `controls_markdown(rows, chapter_cell)`, `counts_sentence(rows)`;
* `findings(root)`: the sentences of the intro's boxes and list, each with its numbers glued in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lib.book import results as _results
from lib.claims import table as claims_table


def _load(name: str, root=None):
    return _results.load(name, "full", root) if _results.exists(name, "full", root) else None


def _group(group: str, root=None) -> list:
    return _results.load_group(group, "full", root)


# ------------------------------------------------------------------------------------------- the one number per row
def _bias_cells(root):
    """(native RNE cell, native β cell, gap) of `bias_kernel` at the gap the theory picks (`derive_bias_kernel`)."""
    res = _load("bias_kernel", root)
    if res is None:
        return None
    cells = res.data.get("cells", [])
    native = [c for c in cells if c.get("path") == "native" and c.get("k") == 2 and c.get("method") == "rne"]
    if not native:
        return None
    gap = min(native, key=lambda c: c.get("theory_pv", 0.0))["gap"]
    pick = {c["method"]: c for c in cells if c.get("path") == "native" and c.get("k") == 2 and c["gap"] == gap}
    return pick.get("rne"), pick.get("beta"), gap


def n_tie_bias(root=None) -> str:
    b = _bias_cells(root)
    if b is None or b[0] is None:
        return "—"
    rne, _, gap = b
    res = _load("bias_kernel", root)
    neg = (res.meta.get("config") or res.meta.get("provenance", {}).get("cfg") or {}).get("frac_neg")
    # the sign reads against V's: with every V negative, a negative error is away from zero (the paper's bias)
    way = (" (V < 0: away from zero)" if neg == 1.0 and rne["pv"] < 0 else
           " (V < 0: toward zero)" if neg == 1.0 else "")
    return (f"{rne['pv']:+.3f} ± {rne['pv_ci']:.3f} ULP mean P̄V error{way} (95 % CI, {rne['k']} tied maxima, gap "
            f"{gap:g})")


def _attention_bias(root):
    """(paper, paper + fix) mean O error in ULP on chapter 3's attention-shaped inputs, or None."""
    res = _load("fa_deviation", root)
    if res is None:
        return None
    from lib.studies.golden import reading as golden
    kn = golden.key_numbers(res.data)
    a, b = kn.get("bias:attention:ours:paper"), kn.get("bias:attention:ours:paper+fix")
    return None if a is None or b is None else (a, b, kn["N"])


def n_fix(root=None) -> str:
    b, att = _bias_cells(root), _attention_bias(root)
    parts = []
    if b is not None and b[1] is not None:
        parts.append(f"tied rows {b[0]['pv']:+.3f} → {b[1]['pv']:+.3f} ULP")
    if att is not None:
        parts.append(f"sink ties {att[0]:+.3f} → {att[1]:+.3f} ULP at {att[2]:,} keys")
    return "; ".join(parts) or "—"


def n_placement(root=None) -> str:
    res = _load("paper_placement", root)
    if res is None:
        return "—"
    from lib.studies.kernel import checks
    s = checks.placement_summary(res.data, kind="random", tile=512, mode="eager_bwd_autocast")
    return "—" if s.empty else f"{100 * float(s.loc['paper (predicted)', 'o']):.2f} % of O bit-identical"


def n_preconditions(root=None) -> str:
    res = _load("gpt2_regime", root)
    if res is None:
        return "—"
    from lib.studies.census import reading as census
    n = census.gpt2_numbers(res)
    return (f"all three in up to {n['authors_max_conj']:.1%} of a head's pairs (authors' placement); "
            f"FA2's {n['pairs_ratio']:.0f}× fewer pairs in all")


def n_golden(root=None) -> str:
    dev, dri = _load("fa_deviation", root), _load("weight_drift", root)
    parts = []
    if dev is not None:
        from lib.studies.golden import reading as golden
        kn = golden.key_numbers(dev.data)
        parts.append(f"flash SDPA's max |Δ| {kn['parts:normal:primary']['ratio'][0]:.2g}× eager's")
    if dri is not None:
        from lib.studies.golden import drift
        parts.append(f"drift ratio {drift.key_numbers(dri.data, dri.arrays)['median']:.2g} "
                     f"(claimed ≥ {drift.BOUND_FACTOR:g})")
    return "; ".join(parts) or "—"


def _capture(root):
    res = _load("delta_capture", root)
    if res is None:
        return None
    from lib.studies.delta import reading as delta
    return delta.numbers_ch4(res), delta.numbers_ch5(res)


def _gpt2_link(cid: str, root=None) -> str | None:
    """The GPT-2 chain probe's words for one of links 3 to 6 (`reading.link_readings`), or None."""
    from lib.studies.gpt2 import reading as g2r
    chain = [r for r in (_load(n, root) for n in g2r.CHAIN_RESULTS) if r is not None]
    return g2r.link_readings(g2r.merge_seeds(chain)).get(cid, {}).get("words") if chain else None


def gpt2_link_words(cid: str, root=None) -> str:
    """One of links 3 to 6 as GPT-2's chain measurements read it, with its status and why it is not
    "reproduced" (the reading's reasons where it gives them and is not "partly"; chapter 5 puts it beside the proxy's
    verdict); a plain sentence when nothing is committed."""
    from lib.studies.gpt2 import reading as g2r
    chain = [r for r in (_load(n, root) for n in g2r.CHAIN_RESULTS) if r is not None]
    link = g2r.link_readings(g2r.merge_seeds(chain)).get(cid) if len(chain) > 1 else None
    if link is None:
        return "GPT-2 has not been read this way yet"
    if link["status"] == "partly" or not link.get("reasons"):
        return (f"{link['words']} (chapter 2c; that comparison registered no threshold for this reading, so it reads "
                f"{link['status']})")
    return (f"{link['words']} (chapter 2c; read after the runs, with no threshold registered before them, it reads "
            f"{link['status']}: {'; '.join(link['reasons'])})")


def _with_gpt2(cid: str, proxy: str, root=None) -> str:
    g = _gpt2_link(cid, root)
    return proxy if g is None else g + ("" if proxy == "—" else f"; proxy: {proxy}")


def n_link_3(root=None) -> str:
    c = _capture(root)
    return _with_gpt2("o_error_v_sign", "—" if c is None else
                      f"O's error along sign(V) {c[0]['os_ulp_med']:+.3f} ULP (median)", root)


def n_link_4(root=None) -> str:
    """Both tests of Δδ's sign with their power (`lib.studies.delta.two_tests`): the whole-batch sign test of the
    training telemetry, then the captured rows' test, after the phrase their status follows from."""
    cap, tel = _load("delta_capture", root), _load("healthy_headline", root)
    if cap is None or tel is None:
        return _with_gpt2("delta_bias", "—", root)
    from lib.studies.delta import two_tests
    v = two_tests.verdict(cap, tel)
    r, b = v["row"], v["batch"]
    return _with_gpt2("delta_bias", f"{v['phrase']} — whole batches: {b['above']} of {b['cells']} (head, seed) cells mostly Δδ > 0, p = "
            f"{two_tests.p_text(b['p_greater'])} ({b['power']:.0%} power at a share ≥ {b['detectable']:.0%}); captured "
            f"rows: {r['up']} of {r['cells']} pass ({r['power']:.0%} power only at ≥ {r['detectable']:.0%} positive "
            f"steps a head; whole batches' median {b['share_med']:.0%})" + _lean_controls(root), root)


def _lean_controls(root=None) -> str:
    """The whole-batch lean in the healthy regime's control arms (`lib.studies.delta.reading.telemetry_leans`), as a
    clause for Link 4's row: a fix that removes the tie bias leaning as much says the lean is not the bias's."""
    more = _load("healthy_headline_more", root)
    if more is None:
        return ""
    from lib.studies.delta import reading
    leans = reading.telemetry_leans(more)
    return (" — the same lean in controls (" + "; ".join(f"{x['label']}: {x['above']} of {x['cells']}"
                                                          for x in leans) + ")") if leans else ""


def n_link_5(root=None) -> str:
    c = _capture(root)
    if c is None:
        return _with_gpt2("low_rank", "—", root)
    n4, n5 = c
    return _with_gpt2("low_rank", f"the dW_Q error adds up across steps beyond chance in {n5['steps_sig']} of "
                      f"{n4['n_heads'] * n4['n_seeds']} (head, seed) cells", root)


def n_link_6(root=None) -> str:
    c = _capture(root)
    if c is None:
        return _with_gpt2("wq_norm_push", "—", root)
    n4, n5 = c
    return _with_gpt2("wq_norm_push", f"‖W_Q‖₂ pushed up beyond chance in {n5['push_sig']} of "
                      f"{n4['n_heads'] * n4['n_seeds']} (head, seed) cells", root)


def n_dose(root=None) -> str:
    dose = _group("delta_dose", root)
    if not dose:
        return "—"
    from lib.studies.dose import reading as dose_reading
    d = dose_reading.chapter_numbers(dose)
    out = f"λ* = {d['true_lam']} for the error, {d['bias_lam']} its bias, {d['noise_lam']} its noise"
    # what "partly" rests on: the bias alone breaks training at a smaller size (RMS) than the others stayed stable at
    t = dose_reading.unstable_thresholds(dose)
    lo = [t[c]["rms_lo"] for c in dose_reading.COMPONENTS if c != "bias" and c in t and t[c].get("rms_lo") is not None
          and t[c]["n_seeds_lo"] >= 3]
    if "bias" in t and t["bias"].get("rms_hi") is not None and lo:
        out += (f"; the bias alone breaks at RMS {t['bias']['rms_hi']:.2g}, the others still stable at "
                f"{min(lo):.2g} (rule set after the runs)")
    return out


def _healthy_paper(parts):
    """(failed, seeds, horizon) of the paper placement's runs in a merged headline."""
    from lib.studies.explosion.reading import PAPER
    from lib.training import horizon as hz, outcome, runs
    hh = runs.merge(parts)
    h, judged = hz.judge_result(hh)
    paper = [r for r in hh.data["runs"] if r["arm"] == PAPER and not r.get("tag")]
    return sum(outcome.failed(judged[r["id"]]["outcome"]) for r in paper), len(paper), h


def n_explosion(root=None) -> str:
    from lib.studies.gpt2 import reading as g2r
    parts = []
    chain = [r for r in (_load(n, root) for n in g2r.CHAIN_RESULTS) if r is not None]
    v = g2r.explosion_verdict(g2r.merge_seeds(chain)) if chain else None
    if v:
        parts.append(f"GPT-2: the paper placement exploded in {v['n_boom']} of {v['n_paper']} seeds")
    proxy = []
    for group in ("healthy_headline", "width_768"):
        g = _group(group, root)
        if g:
            f, n, h = _healthy_paper(g)
            proxy.append(f"{f} of {n} seeds failed (width {g[0].meta.get('config', {}).get('n_embd')}, {h:,} steps)")
    if proxy:
        parts.append("proxy: " + "; ".join(proxy))
    return "; ".join(parts) or "—"


def gpt2_explosion_clause(root=None) -> str:
    """Where the paper's setting stands, as chapter 6 says it: the GPT-2 chain runs' explosion verdict (chapter 2c)
    beside FP32 attention's failures, in one clause."""
    from lib.studies.gpt2 import reading as g2r
    chain = [r for r in (_load(n, root) for n in g2r.CHAIN_RESULTS) if r is not None]
    v = g2r.explosion_verdict(g2r.merge_seeds(chain)) if chain else None
    if v is None:
        return "GPT-2 124M has not been trained with these arms yet"
    f = g2r.outcomes(g2r.merge_seeds(chain)).get("fp32", [])
    return (f"the paper placement's loss exploded in {v['n_boom']} of {v['n_paper']} seeds while FP32 attention "
            f"failed in {sum(o[2] is not None for o in f)} of {len(f)}")


def n_prevent(root=None) -> str:
    g = _group("healthy_headline", root)
    if not g:
        return "—"
    f, n, _ = _healthy_paper(g)
    return "proxy: " + ("no failure to prevent" if f == 0 else f"the paper placement failed in {f} of {n} seeds")


def gpt2_remedy_words(arms, root=None) -> str:
    """The GPT-2 arms `arms` (chapter 2c) against the paper placement's failure at the same seed, in a few words
    (`lib.studies.gpt2.remedies.brief_words`); "" when none of them has run."""
    from lib.book import registry
    from lib.studies.gpt2 import reading as g2r, remedies as g2m
    chain = [r for r in (_load(n, root) for n in g2r.CHAIN_RESULTS) if r is not None]
    rem = g2m.in_place([r for r in (_load(n, root) for g in g2m.REMEDY_GROUPS for n in registry.GROUPS[g])
                        if r is not None])
    rows = [r for r in g2m.arm_rows(rem, g2r.merge_seeds(chain)) if r["arm"] in arms] if chain and rem else []
    return g2m.brief_words(rows, arms)


def n_remedy(arms, root=None) -> str:
    """`gpt2_remedy_words`, then the proxy's `n_prevent`."""
    gpt2 = gpt2_remedy_words(arms, root)
    proxy = n_prevent(root)
    return "; ".join(x for x in ((f"GPT-2: {gpt2}" if gpt2 else ""), proxy if proxy != "—" else "") if x) or "—"


def untested_markdown(root=None) -> str:
    """The paper's claims in no row of the table (the table keeps `MAX_ROWS`), as one sentence naming each with its
    status and chapter ("" when every claim has a row)."""
    from lib.claims import table as claims
    shown = {c for r in ROWS + CONTROLS for c in r.claims}
    rest = [c for c in claims.CLAIMS if c.id not in shown]
    if not rest:
        return ""
    status = {r["id"]: r["status"] for r in claims.status_table(root)}
    def chapter(c):      # "chapters/06-loss-explosion" -> "chapter 6"
        return "chapter " + c.chapter.split("/")[-1].split("-")[0].lstrip("0")
    return ("Not in the table: " + "; ".join(f"{c.text[0].lower() + c.text[1:].rstrip('.')} — {status[c.id]} "
                                             f"({chapter(c)})" for c in rest) + ".")


def n_untested(root=None) -> str:
    """The number of a row no committed result tests: none."""
    return "—"


def n_generic(root=None) -> str:
    gg = _load("generic_growth_controls", root)
    if gg is None:
        return "—"
    from lib.training import horizon as hz, outcome
    _, judged = hz.judge_result(gg)
    qk = [r for r in gg.data["runs"] if (gg.meta["provenance"]["cfg"].get("arm_train") or {}).get(r["arm"], {})
          .get("qk_norm")]
    ok = sum(outcome.stayed_stable(judged[r["id"]]["outcome"]) for r in qk)
    return f"{ok} of {len(qk)} QK-norm runs stable"


# ------------------------------------------------------------------------------------------------------- the rows
@dataclass(frozen=True)
class Row:
    link: str                 # the link or claim, in a few words ("links N–M" are the chain figure's numbered boxes)
    claims: tuple             # ids in lib.claims.table.CLAIMS, all with one status (`one_status`)
    number: Callable          # root -> str: the one number
    where: str                # where it was tested: a label of `LEGEND`, with `context` fields ("{proxy_lr}")
    chapter: str              # "chapters/NN-…", the chapter that has it


ROWS = (
    Row("Links 1–2: tied row maxima (P̄ = 1) bias the BF16 rounding of P̄V with the sign of V",
        ("tie_bias_hw", "tie_bias"), n_tie_bias, "planted ({bias_device}, software)", "chapters/01-bf16-rounding"),
    Row("The β fix removes that bias", ("fix_removes_bias",), n_fix, "planted",
        "chapters/01-bf16-rounding"),
    Row("Our emulation rounds where the authors' code rounds under BF16 autocast", ("paper_placement",),
        n_placement, "their code", "chapters/02-flash-attention-kernel"),
    Row("Link 1's preconditions occur in training", ("preconditions",), n_preconditions, "GPT-2; proxy",
        "chapters/02b-where-can-the-chain-start"),
    Row("Golden et al.: at BF16 flash attention deviates ≈ 10× more than baseline attention, yet moves the weights "
        "2–5× less than BF16 training does",
        ("fa_deviation", "weight_drift_bounded"), n_golden, "their benchmark; proxy", "chapters/03-numeric-deviation"),
    Row("Link 3: in training, O errs with the sign of V", ("o_error_v_sign",), n_link_3, "{gpt2_where}",
        "chapters/04-biased-output"),
    Row("Link 4: so Δδ > 0", ("delta_bias",), n_link_4, "{gpt2_where}", "chapters/04-biased-output"),
    Row("Link 5: the dW_Q error is low-rank, alike across steps", ("low_rank",), n_link_5, "{gpt2_where}",
        "chapters/05-low-rank-accumulation"),
    Row("Link 6: it pushes ‖W_Q‖₂ up", ("wq_norm_push",), n_link_6, "{gpt2_where}",
        "chapters/05-low-rank-accumulation"),
    Row("The δ error's bias, not its size, sets the failure threshold", ("delta_bias_dose",), n_dose,
        "proxy, injected δ error", "chapters/05-low-rank-accumulation"),
    Row("Link 7: training with the paper's numerics explodes", ("explosion",), n_explosion,
        "GPT-2; proxy", "chapters/06-loss-explosion"),
    # The channel and the remedies, read in GPT-2 against the paper placement's failure (chapter 2c); the claim no
    # result tests yet (the rounding's bias, not its coarseness) is named under the table (`untested_markdown`).
    Row("δ carries the failure: δ alone from an FP32 O prevents the explosion (and O kept in FP32, which changes more)",
        ("delta_only_channel", "fp32_o_stabilises"), lambda root=None: n_remedy(("paper_delta_fp32_o", "paper_o32"),
                                                                              root),
        "GPT-2; proxy", "chapters/06-loss-explosion"),
    Row("The β fix prevents the explosion", ("fix_stabilises",),
        lambda root=None: n_remedy(("paper_fix_b2", "paper_fix_b2_exact", "paper_fix_b7_exact"), root),
        "GPT-2; proxy", "chapters/07-the-fix"),
)
MAX_ROWS = 13

# The book's own controls: tests of our set-up, not claims of the paper; said below the table, never "reproduced".
CONTROLS = (
    Row("At LR {control_lr} the proxy's failure is generic logit growth", ("generic_8e3",), n_generic,
        "proxy at LR {control_lr}", "chapters/06-loss-explosion"),
    Row("In GPT-2 a bound on the logits prevents the paper placement's failure", ("gpt2_logit_bound",),
        lambda root=None: gpt2_remedy_words(("paper_qk",), root) or "—", "GPT-2",
        "chapters/02c-the-chain-in-gpt2"),
)
CONTROL_WORDS = {"reproduced": "held", "partly": "partly held", "not reproduced": "did not hold"}

# The labels of the "tested in" column, each defined under the table (fields from `context`).
LEGEND = (
    ("planted", "inputs built with tied row maxima and one-signed V"),
    ("their code", "the authors' flash attention under BF16 autocast, eager, compared bit for bit with our emulator"),
    ("GPT-2", "GPT-2 124M at the paper's LR ({gpt2_lr}), trained on Python source code in steps of {gpt2_batch} "
              "tokens after a {gpt2_warmup}-step warm-up (the paper trained on OpenWebText, with larger steps and a "
              "longer warm-up); chapter 2b's census from seed {gpt2_seed}, chapter 2c's comparison from seeds "
              "{gpt2_seeds}"),
    ("their benchmark", "Golden et al.'s deviation benchmark"),
    ("proxy", "the small GPT of chapters 4–7 ({proxy_layers} layers, width {proxy_width}, LR {proxy_lr}; chapter "
              "6 also at width {wide_width}), where link 1's preconditions are absent as far as measured: {tie_med} "
              "of rows have a tied maximum and O's error along sign(V) is {os_ulp_med} ULP (medians over heads, "
              "seeds {proxy_seeds})"),
)


class _Blank(dict):
    def __missing__(self, key):
        return "—"


def context(root=None) -> dict:
    """The numbers the "tested in" cells and the legend name, each read from the result it describes ("—" where the
    result is missing): the devices, LRs, widths, seeds and the proxy's census of ties and O-error lean; and
    `gpt2_pending`, "; GPT-2: not yet run" while the registered GPT-2 comparison has no committed result."""
    from lib.book import catalogue
    c = _Blank()
    bk = _load("bias_kernel", root)
    if bk is not None:
        c["bias_device"] = catalogue.device(bk.meta)
    gr = _load("gpt2_regime", root)
    if gr is not None:
        from lib.studies.census import reading as census
        n = census.gpt2_numbers(gr)
        c["gpt2_lr"], c["gpt2_seed"] = f"{n['lr']:g}", str(n["seed"])
    arms = [r for r in (_load(n, root) for n in ("gpt2_arms", "gpt2_arms_s1", "gpt2_arms_s2")) if r is not None]
    if arms:
        cfg = arms[0].meta.get("provenance", {}).get("cfg") or arms[0].meta.get("config", {})
        if cfg.get("batch_size") and cfg.get("model"):
            c["gpt2_batch"] = f"{cfg['batch_size'] * cfg['model']['block_size']:,}"
        if cfg.get("warmup") is not None:
            c["gpt2_warmup"] = f"{cfg['warmup']:,}"
        seeds = sorted({s for r in arms for s in (r.meta.get("provenance", {}).get("cfg")
                                                 or r.meta.get("config", {})).get("seeds", [])})
        from lib.studies.gpt2.reading import series
        c["gpt2_seeds"] = series([str(x) for x in seeds]) or "—"
    for group, keys in (("healthy_headline", ("proxy_layers", "proxy_width", "proxy_lr")),
                        ("width_768", (None, "wide_width", None))):
        g = _group(group, root)
        if g:
            cfg = g[0].meta.get("config", {})
            for k, v in zip(keys, (cfg.get("n_layer"), cfg.get("n_embd"), cfg.get("lr"))):
                if k and v is not None:
                    c[k] = f"{v:g}" if isinstance(v, float) else str(v)
    cap = _capture(root)
    if cap is not None:
        n4 = cap[0]
        c["tie_med"], c["os_ulp_med"], c["proxy_seeds"] = f"{n4['tie_med']:.1%}", f"{n4['os_ulp_med']:+.3f}", \
            n4["seeds"]
    gg = _load("generic_growth_controls", root)
    if gg is not None and gg.data.get("lr") is not None:
        c["control_lr"] = f"{gg.data['lr']:g}"
    c["gpt2_pending"] = "" if _results.exists("gpt2_arms", "full", root) else "; GPT-2: not yet run"
    c["gpt2_where"] = "GPT-2; proxy" if not c["gpt2_pending"] else "proxy" + c["gpt2_pending"]
    return c


def one_status(rows) -> bool:
    """Whether every row's claims share one status and one staleness (a row never hides a second verdict)."""
    return all(len(set(r["statuses"])) <= 1 and len(set(r["stales"])) <= 1 for r in rows)


def _rows(defs, root, ctx) -> list[dict]:
    by_id = {r["id"]: r for r in claims_table.status_table(root)}
    out = []
    for row in defs:
        cs = [by_id[c] for c in row.claims if c in by_id]
        statuses = [c["status"] for c in cs]
        try:
            number = row.number(root)
        except (KeyError, ValueError, IndexError, FileNotFoundError):
            number = "—"
        out.append(dict(link=row.link.format_map(ctx), verdict=statuses[0] if cs else "not yet tested",
                        stale=any(c["stale"] for c in cs), number=number, where=row.where.format_map(ctx),
                        chapter=row.chapter, claims=list(row.claims), statuses=statuses,
                        stales=[c["stale"] for c in cs]))
    return out


def verdict_rows(root=None) -> list[dict]:
    """The table's rows: link, verdict (the claims' one status), stale (whether it rests on a stale result), number,
    where (tested), chapter, and the claim ids with their statuses and staleness."""
    return _rows(ROWS, root, context(root))


def control_rows(root=None) -> list[dict]:
    """`CONTROLS` as rows, their verdict in `CONTROL_WORDS` ("held", not "reproduced": no claim of the paper)."""
    rows = _rows(CONTROLS, root, context(root))
    for r in rows:
        r["verdict"] = CONTROL_WORDS.get(r["verdict"], r["verdict"])
    return rows


def _verdict_cell(r) -> str:
    """The verdict in bold, its words kept on one line; "(stale)" after it where it rests on a stale result."""
    return f"**{r['verdict'].replace(' ', chr(0xA0))}**" + (" (stale)" if r["stale"] else "")


def markdown(rows: list[dict], chapter_cell=lambda ch: ch) -> str:
    """The rows as a Markdown table: claim · verdict · evidence (the one number) · tested in · chapter
    (`chapter_cell(file)` makes the cell, e.g. a link). A verdict that rests on a stale result reads "(stale)"."""
    lines = ["| claim | verdict | evidence | tested in | ch. |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [r["link"], _verdict_cell(r), r["number"], r["where"], chapter_cell(r["chapter"])]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def legend(root=None, ctx=None) -> str:
    """One paragraph defining the table's words: the links, every "tested in" label of `LEGEND`, and "stale"."""
    ctx = context(root) if ctx is None else ctx
    parts = ["*Links* are the numbered boxes of the chain above"]
    parts += [f"*{k[0].upper() + k[1:]}*: {v.format_map(ctx)}" for k, v in LEGEND]
    parts.append("*Stale*: the result's code changed after it ran")
    return ". ".join(parts) + "."


def controls_markdown(rows: list[dict], chapter_cell=lambda ch: ch) -> str:
    """The controls as sentences: "Our own control, not a claim of the paper: <link> — <verdict> (<number>;
    ch. N)."."""
    return " ".join(f"Our own control, not a claim of the paper: {r['link'][0].lower() + r['link'][1:]} — "
                    f"{_verdict_cell(r)} ({r['number']}; ch. {chapter_cell(r['chapter'])})." for r in rows)


def counts_sentence(rows: list[dict]) -> str:
    """How many of the table's rows have each verdict, and how many rest on a stale result."""
    from lib.claims import counts
    s = counts.sentence([{"status": r["verdict"]} for r in rows])
    n = sum(r["stale"] for r in rows)
    return s + (f"; {n} of them rest{'s' if n == 1 else ''} on a stale result" if n else "")


# --------------------------------------------------------------------------------- the intro's boxes and findings
def findings(root=None) -> dict:
    """Sentences for the intro, each with its numbers from the results (a sentence whose result is missing says so):
    "compiled" (how much of O the compiled authors' code shares with the eager placement), "eager_backward" (the
    eager backward as released), "floor_value" (their floor on ℓ), "fix_beta" (the β their fix ran with), "floor"
    (that floor turns β = 7 into row
    dropping), "row_dropping" (at the unhealthy LR, "row_dropping_lr",
    row dropping alone reproduces the stable fix), "ntr" (normalise-then-round's own bias on tensor cores),
    "snapback" (round-then-normalise keeps the tie bias that P̄V's rounding averaged out)."""
    out = {}
    pp = _load("paper_placement", root)
    if pp is not None:
        comp = [r for r in pp.data["records"] if r["mode"] == "compiled" and r["agreement"]]
        pred = {r["kind"]: r["agreement"]["paper (predicted)"]["o"]["bit_identical"] for r in comp}
        out["compiled"] = (f"{100 * pred['random']:.1f} %" if "random" in pred else "an unmeasured share")
        errs = sorted({r["error"] for r in pp.data["records"] if r["mode"] == "eager" and r["error"]})
        out["eager_backward"] = ("does not run as released: their training script calls the backward outside "
                                 "autocast, where it raises “" + errs[0] + "”"
                                 if errs else "ran as released in this check")
        out["pp_stale"] = pp.stale
    else:
        out |= {"compiled": "an unmeasured share", "eager_backward": "has not been checked (no result)",
                "pp_stale": False}
    from lib.training.authors_backend import AuthorsOptions
    out["floor_value"] = f"{AuthorsOptions().floor:g}"       # the authors' clamp on each tile's row sum ℓ
    out["fix_beta"] = f"{_fix_beta(root):g}"                  # the β of their fix's arm, as it ran
    ac = _group("authors_code", root)
    if len(ac) == 2:
        from lib.training import runs
        s7, s8 = runs.arm_summary(ac[0]), runs.arm_summary(ac[1])

        def uf(v):
            return runs.span([100 * t["layer_mean"] for t in v["underflow_rows"] if t], "{:.1f}") + " %"
        f7 = s7.get("authors+fix_b7")
        out["floor"] = (f"their fix put {uf(f7)} of the rows of the most affected layer at the floor in the "
                        f"healthy regime ({uf(s8['authors+fix_b7'])} at LR 8e-3): rows whose O shrinks towards 0"
                        if f7 else "not measured")
        z, fx, p = s8["authors+zero_rows_b7"], s8["authors+fix_b7"], s8["authors"]
        out["row_dropping_lr"] = f"{ac[1].data.get('lr', ac[1].meta.get('config', {}).get('lr')):g}"
        out["row_dropping"] = (f"the fix stayed stable in {fx['stable']} of {len(fx['seeds'])} seeds, zeroing the same "
                               f"rows with no shift in {z['stable']} of {len(z['seeds'])}, the unfixed code in "
                               f"{p['stable']} of {len(p['seeds'])}")
    else:
        out["floor"] = out["row_dropping"] = "not measured (no committed run of the authors' code)"
        out["row_dropping_lr"] = "the unhealthy LR"
    b = _bias_cells(root)          # at the gap of the tie-bias row: where the theory puts the largest P̄V bias
    if b is not None and b[0] is not None and b[1] is not None:
        rne, beta, gap = b
        out["ntr"] = (f"{rne['o_ntr']:+.3f} ± {rne['o_ntr_ci']:.3f} ULP without the fix and {beta['o_ntr']:+.3f} ± "
                      f"{beta['o_ntr_ci']:.3f} with it (2 tied maxima, gap {gap:g}; all V < 0, so "
                      f"{'toward' if rne['o_ntr'] > 0 else 'away from'} zero)")
    else:
        out["ntr"] = "not measured"
    mc = _load("bias_montecarlo", root)
    if mc is not None:
        from lib.fp import snapback
        c = snapback.grid_cells(mc.data["grid"], mc.meta["config"], [snapback.SHOWCASE])[0]
        out["snapback"] = (f"with {c['k']} tied maxima and a remainder of {c['rho']:.2f} ULP of one V, P̄V's rounding "
                           f"errs by {c['pv'][0]:+.3f} ULP on average, O rounded then normalised by "
                           f"{c['o_rtn'][0]:+.3f} ± {c['o_rtn'][1]:.3f}: the second rounding returns to the tied "
                           f"sum's rounding and drops the remainder")
    else:
        out["snapback"] = "not measured"
    return out


def _fix_beta(root=None) -> float:
    """The β the authors' code ran its fix with (`authors_code`'s fix arm at the paper's β, read from its spec); the
    fix's default (the paper's β) when that result is missing."""
    from lib.fp.fix import BETA
    from lib.training.spec import AttnSpec
    ac = _group("authors_code", root)
    attn = next((r["attn"] for r in (ac[0].data["runs"] if ac else []) if r["arm"] == "authors+fix_b7"), None)
    return AttnSpec.parse(attn).fix.beta if attn else BETA


def n_rows_ok(rows) -> bool:
    """Whether the table keeps to `MAX_ROWS` and every row names at least one tracked claim."""
    ids = {c.id for c in claims_table.CLAIMS}
    return len(rows) <= MAX_ROWS and all(set(r["claims"]) <= ids and r["claims"] for r in rows)

