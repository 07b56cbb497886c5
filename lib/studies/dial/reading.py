"""The numbers chapters 6 and 7 glue about the precision dial, from its results read as one (`lib.studies.dial.table`).

* `chapter6_numbers(res_list, live)`: RNE against stochastic rounding per width, the controls, the repeats, the
  variants (S − m in FP32, δ from an FP32 O, the fix), the SR bug's runs left out: "dl_*" values, the table
  ("dl_table_md"), the reading ("dl_text_md") and the figure; `live` (the ci run) when nothing is committed.
* `chapter7_numbers(res_list)`: the fix's arms of the dial against no fix and the fix with S − m in FP32 ("d7_*",
  "fe_dial").
"""
from __future__ import annotations

from lib.studies.dial import figures as dial_figures, table
from lib.training import outcome, runs

__all__ = ["chapter6_numbers", "chapter7_numbers", "KINDS"]

KINDS = (("rne", "RNE"), ("sr", "SR"), ("fix", "RNE + fix"), ("fixsm32", "fix, S − m FP32"),
         ("sm32", "RNE, S − m FP32"), ("dfp32o", "δ from FP32 O"))      # the table's columns


class _Dial:
    """One judged dial table with the helpers every sentence about it uses."""

    def __init__(self, res_list):
        self.res_list = res_list
        self.t = table.at_common_horizon(res_list)       # every run judged at a common step horizon per width
        self.f = table.facts(self.t)

    def rows(self, m, kind):
        return sorted((r for r in self.t["rows"] if r["m"] == m and r["kind"] == kind and r["valid"]),
                      key=lambda r: r["seed"])

    def oc(self, m, kind) -> str:
        """Outcomes of one kind at width m in seed order, the onset of a failed run in brackets."""
        rs = self.rows(m, kind)
        return outcome.words([r["outcome"] for r in rs],
                                  [r["onset"] if r["outcome"] in ("exploded", "nonfinite") else None for r in rs]) \
            or "not run"

    def n(self, m, kind):
        c = self.f["count"].get(m, {}).get(kind)
        return (c["failed"], c["n"]) if c else None

    def cnt(self, m, kind) -> str:
        return "{} of {}".format(*self.n(m, kind)) if self.n(m, kind) else "none"

    def _runs(self, m, kind):
        """(result, run row) of the whole runs behind one kind at width m."""
        by = {(res.name, r["id"]): (res, r) for res in self.res_list for r in res.data["runs"]}
        return [by[(x["result"], x["id"])] for x in self.rows(m, kind) if (x["result"], x["id"]) in by]

    def val(self, m, kind) -> str:
        """The range over seeds of the validation loss at the end of the whole runs."""
        return runs.span([runs.val_loss(r) for _, r in self._runs(m, kind)])

    def tokens(self, m, kind) -> str:
        """Tokens the whole runs saw (their range)."""
        ns = sorted(n for n in (runs.tokens_seen(res, r) for res, r in self._runs(m, kind)) if n is not None)
        if not ns:
            return "—"
        lo, hi = runs.tokens_words(ns[0]), runs.tokens_words(ns[-1])
        return lo if lo == hi else f"{lo[:-2]}–{hi}"


def _arm_words(D: "_Dial", arm: str) -> str:
    """A dial arm in words: its kind and width ("RNE + fix, m = 5"), or the control it is ("BF16 paper placement",
    "FP32 attention")."""
    row = next((r for r in D.t["rows"] if r["arm"] == arm), None)
    if row is not None:
        return f"{dict(KINDS).get(row['kind'], row['kind'])}, m = {row['m']}"
    return {"paper": "BF16 paper placement", "fp32": "FP32 attention"}.get(arm, arm.replace("_", " "))


def _ms(ms) -> str:
    return ", ".join(f"m = {m}" for m in ms) or "no width"


def _bits(ms) -> str:
    return ", ".join(str(m) for m in ms) + " mantissa bits" if ms else "no width tried"


def chapter6_numbers(res_list, live: dict | None = None) -> dict:
    """Chapter 6's precision dial: see the module docstring. `res_list`: the committed dial results
    (`lib.book.results.load_group("precision_dial")`); `live`: the ci-scale run, shown when there are none."""
    if not res_list:
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(4, 1))
        ax.axis("off")
        ax.text(0.5, 0.5, "precision dial: no committed GPU result", ha="center")
        return {"dl_takeaway": "no committed result yet", "dl_steps_lo": "—", "dl_steps_hi": "—", "fig-dial": fig,
                "dl_table_md": ("**Not run on the GPU yet** — so this chapter makes no claim from it. The live run "
                                "below, at this build's scale, proves the code path only:\n\n"
                                + (runs.outcome_table(live["data"]) if live else "")),
                "dl_text_md": "No committed precision-dial result: nothing is claimed from it."}
    D = _Dial(res_list)
    t, f = D.t, D.f
    fin = [r["full_steps"] for r in t["rows"] if r["valid"] and r["full_outcome"] != "nonfinite"]

    def worse(m):
        return f"m = {m}: SR failed in {D.cnt(m, 'sr')} seeds, RNE in {D.cnt(m, 'rne')}"
    out = {"dl_steps_lo": f"{min(fin):,}", "dl_steps_hi": f"{max(fin):,}",
           "dl_takeaway": (f"judged at a common step horizon, the paper placement failed at {_bits(f['rne_failed'])} "
                           f"and trained at {_bits(f['rne_trained'])}, but unbiased stochastic rounding failed at "
                           f"{_bits(f['sr_failed'])} and trained at {_bits(f['sr_trained'])}"
                           + " (" + "; ".join(f"m = {m}: {D.cnt(m, 'sr')} SR seeds" for m in f["sr_failed"])
                           + " failed)"
                           + (", and failed more often than RNE at " + "; ".join(worse(m) for m in f["sr_worse"])
                              if f["sr_worse"] else "")
                           + ". In this amplification, on the few seeds per width in the table, the failures follow "
                           "the size of the rounding noise, not its bias"),
           "fig-dial": dial_figures.dial_figure(res_list, horizons=t["horizon"])}
    # one row per (width, kind): four columns fit the text column; the reading per width follows as a list
    head = ("| m | horizon (steps) | kind | outcomes at the horizon | val loss | tokens |\n"
            "|---|---|---|---|---|---|\n")
    body = "\n".join(f"| {m} | {t['horizon'][m]:,} | {name} | {D.oc(m, k)} | {D.val(m, k)} | {D.tokens(m, k)} |"
                     for m in t["bits"] for k, name in KINDS if D.rows(m, k))
    readings = "\n".join(f"* m = {m}: {t['verdicts'][str(m)]['reading']}" for m in t["bits"])
    changed = [r for r in t["rows"] if r["valid"] and r["outcome"] != r["full_outcome"]]
    note = ("\n\nOutcomes at the horizon, per seed in seed order (onset step in brackets). Whole runs that ended "
            "differently: " + "; ".join(f"{_arm_words(D, r['arm'])}, seed {r['seed']}: {r['full_outcome']}"
                                       + (f" (onset {r['full_onset']})" if r["full_onset"] is not None else "")
                                       + f" after {r['full_steps']} steps" for r in changed) + "."
            if changed else "\n\nOutcomes at the horizon, per seed in seed order (onset step in brackets); every "
            "whole run ended the same way.")
    out["dl_table_md"] = (head + body + note + " Validation loss and tokens are the whole runs', which went on past "
                          "the horizon.\n\nThe reading per width:\n\n" + readings)
    out["dl_text_md"] = _chapter6_text(D)
    return out


def _chapter6_text(D: _Dial) -> str:
    """The dial's reading in chapter 6: repeats, RNE, SR against its noise ratio, the variants, the fix, the bug."""
    t, f = D.t, D.f

    def oc(kind, ms):
        return "; ".join(f"m = {m}: {D.oc(m, kind)}" for m in ms)
    ctl = sorted({(c["arm"], c["outcome"]) for c in t["controls"]})
    controls = "; ".join(f"{'BF16 paper' if a == 'paper' else 'FP32 attention'} {o}" for a, o in ctl) \
        + f" ({len(t['controls'])} runs)"
    para = [f"The committed runs ({runs.labelled(D.res_list, False)}) used LR "
            f"{', '.join(f'{x:g}' for x in t['lr'])}. The controls: {controls}."]
    reps = table.repeats(D.res_list)
    if reps:
        same = [x for x in reps if x["identical"]]
        para.append(f"Runs repeated in two results are {'all ' if len(same) == len(reps) else ''}bit-identical over "
                    "the steps both ran ("
                    + "; ".join(f"{_arm_words(D, x['arm'])}, seed {x['seed']}, at commits {x['commits'][0][:7]} and "
                                f"{x['commits'][1][:7]}: {x['steps']} steps, "
                                f"{'identical' if x['identical'] else 'first difference at step ' + str(x['first_diff'])}"
                                for x in reps) + ").")
    para.append(f"\n\nWith round-to-nearest-even the paper placement **failed at {_ms(f['rne_failed'])}** "
                f"({oc('rne', f['rne_failed'])}) and **trained at {_ms(f['rne_trained'])}** "
                f"({oc('rne', f['rne_trained'])}).")
    if f["sr_failed"]:
        srr = table.sr_error_ratio(5)
        mixed = [m for m in sorted(f["count"]) if "sr" in f["count"][m] and m not in f["sr_failed"] + f["sr_trained"]]
        para.append(f"**Stochastic rounding failed at {_ms(f['sr_failed'])}** ({oc('sr', f['sr_failed'])})"
                    + (f", was mixed at {_ms(mixed)} ({oc('sr', mixed)})" if mixed else "")
                    + (f" and trained at {_ms(f['sr_trained'])} ({oc('sr', f['sr_trained'])})"
                       if f["sr_trained"] else "")
                    + (". It failed in a larger share of seeds than RNE at " + "; ".join(
                        f"m = {m}: SR failed in {D.cnt(m, 'sr')} seeds, RNE in {D.cnt(m, 'rne')}"
                        for m in f["sr_worse"]) + "." if f["sr_worse"] else ".")
                    + f" SR is unbiased, but its error is noisier: at m bits its RMS error is {srr['ratio']:.2f}× "
                    f"that of RNE ({srr['rms_sr_ulp']:.3f} vs {srr['rms_rne_ulp']:.3f} ulp, "
                    f"`lib.studies.dial.table.sr_error_ratio`), as much extra noise as {srr['bits_equiv']:.2f} "
                    "mantissa bit less. So in this amplification the runs fail as the rounding noise grows, whether "
                    "or not it is biased (SR seeds failed: " + "; ".join(f"m = {m}: {D.cnt(m, 'sr')}"
                                                                         for m in f["sr_failed"])
                    + "; more seeds would firm this up), and **the dial does not reproduce the paper's causal claim** "
                    "that the bias is what breaks training. It does not refute it at BF16 either: at 7 bits the bias "
                    f"is {2 ** (7 - max(t['bits']))}–{2 ** (7 - min(t['bits']))}× weaker than at these widths (it "
                    "halves per bit, chapter 1), and the paper's run lasted far longer than ours before it exploded.")
    sm = sorted(f["sm32_failed"] + f["sm32_trained"])
    if sm:
        para.append(f"Keeping the exponent arguments S − m in FP32 (RNE elsewhere) failed at {_ms(f['sm32_failed'])} "
                    f"and trained at {_ms(f['sm32_trained'])} ({oc('sm32', sm)}), as plain RNE did: the rounding of "
                    "S − m is not what breaks the coarse runs (seeds: "
                    + "; ".join(f"m = {m}: {D.cnt(m, 'sm32')} failed" for m in sm) + ").")
    if f["dfp32o_run"]:
        para.append(f"δ from an FP32 O (run at {_ms(f['dfp32o_run'])}) failed at {_ms(f['dfp32o_failed'])} "
                    f"({oc('dfp32o', f['dfp32o_run'])})"
                    + (": where the RNE arm failed too, the failure does not go only through δ, the paper's channel."
                       if set(f["dfp32o_failed"]) & set(f["rne_failed"]) else "."))
    ms = sorted(f["count"])
    para.append("\n\nThe β fix: " + "; ".join(f"m = {m}: {D.cnt(m, 'fix')} seeds failed"
                                              + (f" (RNE: {D.cnt(m, 'rne')})" if D.rows(m, 'rne') else "")
                                              for m in ms if D.rows(m, "fix")) + ". "
                + ("With S − m in FP32 the fix failed in " + "; ".join(f"{D.cnt(m, 'fixsm32')} at m = {m}"
                                                                        for m in ms if D.rows(m, "fixsm32"))
                   + ". Chapter 7 (\"The fix's own rounding error\") offers a mechanism for the difference: in this "
                   "placement the fix's shifted exponent arguments are rounded on a coarse grid, which biases the "
                   "backward's P." if any(D.rows(m, "fixsm32") for m in ms) else ""))
    bad = [r for r in t["rows"] if r["kind"] == "sr" and not r["valid"]]
    if bad:
        para.append(f"\n\n**Earlier SR runs are not a result.** {len(bad)} SR runs of the first dial result went "
                    f"{', '.join(sorted({r['full_outcome'] for r in bad}))} after "
                    f"{', '.join(str(r['full_steps']) for r in bad)} steps. Their backward recomputed S with *other* "
                    "random bits than the forward, so under SR its P was not the P that made O (RNE was never "
                    "affected: its recomputation is deterministic). The bug is fixed and tested (commit 8b8d26d; "
                    "`tests/test_attention_kernel.py::test_sr_backward_recomputes_the_forward_scores`, and the GPU "
                    "tests ran again after it, `results/full/gpu_tests_after_sr_fix.log`). The SR runs in the table "
                    "were recorded after the fix; the earlier ones are left out.")
    return " ".join(para)


def chapter7_numbers(res_list) -> dict:
    """Chapter 7's reading of the dial's fix arms: where the fix failed in more seeds than no fix, and whether the
    fix with S − m in FP32 (no rounding error of its own) failed in fewer."""
    if not res_list:
        return {"d7_lr": "not run", "d7_fix": "not run", "d7_rne": "not run", "d7_fixsm": "not run",
                "d7_h": "not run", "d7_breaks": "", "fe_dial": "The test has not been run on the GPU yet.",
                "d7_take": "and the precision dial has not been run"}
    D = _Dial(res_list)
    t, f = D.t, D.f

    def by_width(kind):
        parts = [f"m = {m}: " + outcome.words(r["outcome"] for r in D.rows(m, kind))
                 for m in t["bits"] if D.rows(m, kind)]
        return "; ".join(parts) or "not run"

    def frac(m, k):
        return D.n(m, k)[0] / D.n(m, k)[1]
    worse = [m for m in t["bits"] if D.n(m, "fix") and D.n(m, "rne") and frac(m, "fix") > frac(m, "rne")]
    sm_cmp = [m for m in t["bits"] if D.n(m, "fixsm32") and D.n(m, "fix")]
    rescued = sorted(set(f["rne_failed"]) & set(f["fixsm32_trained"]))
    sm_failed_with_rne = sorted(set(f["rne_failed"]) & set(f["fixsm32_failed"]))
    out = {"d7_lr": ", ".join(f"{x:g}" for x in t["lr"]),
           "d7_h": "; ".join(f"m = {m}: {h}" for m, h in t["horizon"].items()),
           "d7_fix": by_width("fix"), "d7_rne": by_width("rne"), "d7_fixsm": by_width("fixsm32")}
    out["d7_breaks"] = ((" ".join(
        f"At m = {m} the fix failed in {D.cnt(m, 'fix')} seeds where the paper placement without it failed in "
        f"{D.cnt(m, 'rne')}" + (f", and the fix with S − m in FP32 in {D.cnt(m, 'fixsm32')}." if D.n(m, "fixsm32")
                                else ".") for m in worse)
        + " That is the pattern the fix's own rounding error (previous section) predicts; with this few seeds it is "
        "evidence, not proof.") if worse else "")
    out["fe_dial"] = (("In the precision dial of chapter 6 (LR " + out["d7_lr"] + ", runs judged at a common step "
                       "horizon), seeds failed: "
                       + "; ".join(f"m = {m}: the fix {D.cnt(m, 'fix')}, the fix with S − m in FP32 "
                                   f"{D.cnt(m, 'fixsm32')}, no fix {D.cnt(m, 'rne')}" for m in sm_cmp)
                       + ". Where the paper placement failed without the fix (m = "
                       + (", ".join(map(str, f["rne_failed"])) or "none") + "), the fix with S − m in FP32 "
                       + ("rescued it at m = " + ", ".join(map(str, rescued)) if rescued else
                          "failed as well" if sm_failed_with_rne else "was not run") + ".")
                      if sm_cmp else "The test has not been run on the GPU yet.")
    out["d7_take"] = ((f"and in the precision dial it failed in more seeds than no fix at m = "
                       f"{', '.join(map(str, worse))}" if worse else "and not in the precision dial")
                      + ("; in these seeds keeping S − m in FP32 removed that harm" if worse and all(
                          D.n(m, "fixsm32") and frac(m, "fixsm32") <= frac(m, "rne") for m in worse) else "")
                      + (f", but rescued no width where the unfixed placement failed "
                         f"({', '.join(f'm = {m}' for m in sm_failed_with_rne)})"
                         if sm_failed_with_rne and not rescued else ""))
    return out
