"""The intro's verdict table: the causal chain and the book's own claims in at most 12 rows, each with its verdict, the
one number it rests on, the regime it was tested in, whether the first link's preconditions were present there, and
the chapter. Also the numbers of the intro's boxes and of its list of findings that the chapters hold.

Each row merges one or more claims of `lib.claims.table.CLAIMS` (their verdicts come from `status_table`, so the
intro and the chapters say the same thing); a row's verdict is its first claim's (the healthy-regime claim where a
row also holds an LR 8e-3 one), with "(stale result)" when that verdict rests on a stale result. The one
number is computed from the committed results through the studies' readings when the table is built — never typed.
A row whose result is missing reads "—" there. No provenance strings: the appendix has one line per result.

* `ROWS`: the rows' definitions; `verdict_rows(root)`: the rows as dicts; `markdown(rows, chapter_cell)`;
* `findings(root)`: the intro's boxes and list, each a sentence with its numbers glued in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lib.book import results as _results
from lib.claims import table as claims_table

ABSENT = "absent as far as measured"        # the proxy of chapters 4–7 (chapter 2b: its census is registered, not run)
PLANTED = "planted"


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
    return f"{rne['pv']:+.3f} ± {rne['pv_ci']:.3f} ULP mean P̄V error on H100 tensor cores (2 tied maxima, gap {gap:g})"


def _attention_bias(root):
    """(paper, paper + fix) mean O error in ULP on chapter 3's attention-shaped inputs, or None."""
    res = _load("fa_deviation", root)
    if res is None:
        return None
    from lib.studies.golden import reading as golden
    kn = golden.key_numbers(res.data)
    a, b = kn.get("bias:attention:ours:paper"), kn.get("bias:attention:ours:paper+fix")
    return None if a is None or b is None else (a, b)


def n_fix(root=None) -> str:
    b, att = _bias_cells(root), _attention_bias(root)
    parts = []
    if b is not None and b[1] is not None:
        parts.append(f"tied rows: {b[0]['pv']:+.3f} → {b[1]['pv']:+.3f} ULP")
    if att is not None:
        parts.append(f"sink-tie inputs: {att[0]:+.3f} → {att[1]:+.3f} ULP")
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
    return (f"tied, in the window and one-signed in up to {n['authors_max_conj']:.1%} of a head's (row, feature) "
            f"pairs (layer {n['authors_conj_layer']}); FA2's placement: {n['pairs_ratio']:.0f}× fewer")


def n_golden(root=None) -> str:
    dev, dri = _load("fa_deviation", root), _load("weight_drift", root)
    parts = []
    if dev is not None:
        from lib.studies.golden import reading as golden
        kn = golden.key_numbers(dev.data)
        parts.append(f"SDPA flash at {kn['parts:normal:primary']['ratio'][0]:.2g}× eager attention's max |Δ|")
    if dri is not None:
        from lib.studies.golden import drift
        parts.append(f"drift ratio {drift.key_numbers(dri.data, dri.arrays)['median']:.2g} "
                     f"(bound: ≥ {drift.BOUND_FACTOR:g})")
    return "; ".join(parts) or "—"


def _capture(root):
    res = _load("delta_capture", root)
    if res is None:
        return None
    from lib.studies.delta import reading as delta
    return delta.numbers_ch4(res), delta.numbers_ch5(res)


def n_links_2_3(root=None) -> str:
    c = _capture(root)
    if c is None:
        return "—"
    n4 = c[0]
    return (f"rows with Δδ > 0: {n4['rows_lo']:.3f}–{n4['rows_hi']:.3f} per head; O error along sign(V) "
            f"{n4['os_ulp_med']:+.3f} ULP (median)")


def n_links_4_5(root=None) -> str:
    c = _capture(root)
    if c is None:
        return "—"
    n4, n5 = c
    return (f"pushes on ‖W_Q‖₂ positive beyond chance in {n5['push_sig']} of {n4['n_heads'] * n4['n_seeds']} "
            f"(head, seed) cells")


def n_dose(root=None) -> str:
    dose = _group("delta_dose", root)
    if not dose:
        return "—"
    from lib.studies.dose import reading as dose_reading
    d = dose_reading.chapter_numbers(dose)
    return f"λ* = {d['true_lam']} for the true error, {d['bias_lam']} for its bias alone, {d['noise_lam']} for its noise"


def _healthy_paper(parts):
    """(failed, seeds, horizon) of the paper placement's runs in a merged headline."""
    from lib.studies.explosion.reading import PAPER
    from lib.training import horizon as hz, outcome, runs
    hh = runs.merge(parts)
    h, judged = hz.judge_result(hh)
    paper = [r for r in hh.data["runs"] if r["arm"] == PAPER and not r.get("tag")]
    return sum(outcome.failed(judged[r["id"]]["outcome"]) for r in paper), len(paper), h


def n_explosion(root=None) -> str:
    parts = []
    for group, width in (("healthy_headline", 384), ("width_768", 768)):
        g = _group(group, root)
        if g:
            f, n, h = _healthy_paper(g)
            parts.append(f"{f} of {n} seeds failed in {h:,} steps (width {width})")
    return "; ".join(parts) or "—"


def n_prevent(root=None) -> str:
    g = _group("healthy_headline", root)
    if not g:
        return "—"
    f, n, _ = _healthy_paper(g)
    return "no failure to prevent" if f == 0 else f"the paper placement failed in {f} of {n} seeds"


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


def n_dial(root=None) -> str:
    dial = _group("precision_dial", root)
    if not dial:
        return "—"
    from lib.studies.dial import table as dial_table
    f = dial_table.facts(dial_table.at_common_horizon(dial))

    def ms(x):
        return ", ".join(map(str, x)) or "none"
    return f"RNE failed at m = {ms(f['rne_failed'])}; unbiased SR at m = {ms(f['sr_failed'])}"


# ------------------------------------------------------------------------------------------------------- the rows
@dataclass(frozen=True)
class Row:
    link: str                 # the link or claim, in a few words
    claims: tuple             # ids in lib.claims.table.CLAIMS; the first decides the verdict
    number: Callable          # root -> str: the one number
    regime: str
    preconditions: str
    chapter: str              # "chapters/NN-…", the chapter that has it


ROWS = (
    Row("L1–L2: tied maxima (P̄ = 1) bias the BF16 rounding of P̄V with the sign of V", ("tie_bias_hw", "tie_bias"), n_tie_bias,
        "one rounding, software and H100 tensor cores", PLANTED, "chapters/01-bf16-rounding"),
    Row("The β-shifted max removes that bias", ("fix_removes_bias",), n_fix,
        "one rounding; chapter 3's sink-tie inputs", PLANTED, "chapters/01-bf16-rounding"),
    Row("The authors' placement: where their code rounds under BF16 autocast", ("paper_placement",), n_placement,
        "their algorithm, eager, on the H100", "— (a bit-level check)", "chapters/02-flash-attention-kernel"),
    Row("The first link's preconditions occur in training", ("preconditions",), n_preconditions,
        "GPT-2 124M, LR 1e-3, late in training", "present in a few heads (authors' placement)",
        "chapters/02b-where-can-the-chain-start"),
    Row("Golden et al.: flash ≈ 10× less accurate; 2–5× less weight drift", ("fa_deviation", "weight_drift_bounded"),
        n_golden, "their benchmark; the proxy, healthy LR", "planted in half the inputs; " + ABSENT + " in training",
        "chapters/03-numeric-deviation"),
    Row("L3–L4: O errs along sign(V) and Δδ > 0, in training", ("o_error_v_sign", "delta_bias"), n_links_2_3,
        "the proxy, healthy LR (3 seeds)", ABSENT, "chapters/04-biased-output"),
    Row("L5–L7: the dW_Q error is low-rank, accumulates and pushes ‖W_Q‖₂ up", ("low_rank", "wq_norm_push"),
        n_links_4_5, "the proxy, healthy LR (3 seeds)", ABSENT, "chapters/05-low-rank-accumulation"),
    Row("The δ error's bias, not its size, sets the failure threshold", ("delta_bias_dose",), n_dose,
        "the proxy, FP32 attention + the injected δ error", ABSENT + " (the error is injected)",
        "chapters/05-low-rank-accumulation"),
    Row("The end of the chain: training with the paper's numerics explodes", ("explosion",), n_explosion,
        "the proxy, healthy LR, widths 384 and 768", ABSENT, "chapters/06-loss-explosion"),
    Row("The fix, FP32 O or δ without the rounded O prevent it",
        ("fix_stabilises", "fp32_o_stabilises", "delta_only_channel"), n_prevent,
        "the proxy, healthy LR", ABSENT, "chapters/07-the-fix"),
    Row("At LR 8e-3 the failure is generic logit growth (our control)", ("generic_8e3",), n_generic,
        "the proxy, LR 8e-3", ABSENT, "chapters/06-loss-explosion"),
    Row("The rounding's bias, not its coarseness, breaks training", ("bias_not_coarseness",), n_dial,
        "the proxy, LR 5e-3, 3–6 mantissa bits", ABSENT, "chapters/06-loss-explosion"),
)
MAX_ROWS = 12


def verdict_rows(root=None) -> list[dict]:
    """The table's rows: link, verdict (with "(stale result)" where the first claim's verdict rests on one), number,
    regime, preconditions, chapter, and the claim ids and their statuses."""
    by_id = {r["id"]: r for r in claims_table.status_table(root)}
    out = []
    for row in ROWS:
        cs = [by_id[c] for c in row.claims if c in by_id]
        statuses = [c["status"] for c in cs]
        verdict = statuses[0] if cs else "not yet tested"      # the first claim decides (ROWS orders them)
        try:
            number = row.number(root)
        except (KeyError, ValueError, IndexError, FileNotFoundError):
            number = "—"
        out.append(dict(link=row.link, verdict=verdict, stale=bool(cs) and cs[0]["stale"], number=number,
                        regime=row.regime, preconditions=row.preconditions, chapter=row.chapter,
                        claims=list(row.claims), statuses=statuses))
    return out


def markdown(rows: list[dict], chapter_cell=lambda ch: ch) -> str:
    """The rows as a Markdown table: link or claim · verdict · the one number · regime · preconditions present? ·
    chapter (`chapter_cell(file)` makes the cell, e.g. a link)."""
    lines = ["| link or claim | verdict | the one number | regime | pre\u00adconditions present? | ch. |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["link"], f"**{r['verdict']}**" + (" (stale result)" if r["stale"] else ""), r["number"],
                 r["regime"], r["preconditions"], chapter_cell(r["chapter"])]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------- the intro's boxes and findings
def findings(root=None) -> dict:
    """Sentences for the intro, each with its numbers from the results (a sentence whose result is missing says so):
    "compiled" (how much of O the compiled authors' code shares with the eager placement), "eager_backward" (the
    eager backward as released), "floor_value" (their floor on ℓ), "floor" (that floor turns β = 7 into row
    dropping), "row_dropping" (at LR
    8e-3 row dropping alone reproduces the stable fix), "ntr" (normalise-then-round's own bias on tensor cores)."""
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
        out["row_dropping"] = (f"the fix stayed stable in {fx['stable']} of {len(fx['seeds'])} seeds, zeroing the same "
                               f"rows with no shift in {z['stable']} of {len(z['seeds'])}, the unfixed code in "
                               f"{p['stable']} of {len(p['seeds'])}")
    else:
        out["floor"] = out["row_dropping"] = "not measured (no committed run of the authors' code)"
    b = _bias_cells(root)          # at the gap of the tie-bias row: where the theory puts the largest P̄V bias
    if b is not None and b[0] is not None and b[1] is not None:
        rne, beta, gap = b
        out["ntr"] = (f"{rne['o_ntr']:+.3f} ± {rne['o_ntr_ci']:.3f} ULP without the fix and {beta['o_ntr']:+.3f} ± "
                      f"{beta['o_ntr_ci']:.3f} with it (2 tied maxima, gap {gap:g}; all V < 0, so "
                      f"{'toward' if rne['o_ntr'] > 0 else 'away from'} zero)")
    else:
        out["ntr"] = "not measured"
    return out


def n_rows_ok(rows) -> bool:
    """Whether the table keeps to `MAX_ROWS` and every row names at least one tracked claim."""
    ids = {c.id for c in claims_table.CLAIMS}
    return len(rows) <= MAX_ROWS and all(set(r["claims"]) <= ids and r["claims"] for r in rows)

