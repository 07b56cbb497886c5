"""The intro's "What we found" box: a few findings, each one sentence whose numbers are computed from the committed
full-scale results when the book is built — through the same readings the chapters use (`lib.claims.verdicts`'s
cells for the tie bias, `lib.studies.census.reading` for GPT-2's census, `lib.studies.delta.reading` for the proxy's
captures, `lib.studies.gpt2.reading` and `lib.studies.kernel.gradient_checks` for the GPT-2 kernel checks), never
typed.

Each finding names the results it rests on: one that rests on a stale result says so in the box; one whose result is
missing says what is not measured yet instead of a number. The last finding says what is *not yet tested at GPT-2
scale*, read from the experiment registry (the GPT-2 comparison's arms, seeds and steps) and from whether its result
is committed.

* `findings(root)`: the findings as `Finding`s, in the box's order;
* `markdown(items, chapter_cell)`: the box, a MyST admonition of class `BOX_CLASS` (the HTML check looks for it on
  the root page's first screen).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lib.book import catalogue, registry, results as _results
from lib.claims import verdicts as _v

BOX_CLASS = "what-we-found"       # the admonition's class, looked for by `lib.book.htmlcheck`
TITLE = "What we found"
GPT2_ARMS = "gpt2_arms"           # the registered comparison of rounding placements in GPT-2 124M
STALE = "rests on a stale result: its code changed after it ran"


@dataclass
class Finding:
    head: str                     # the finding in a few words, shown bold
    text: str                     # the sentence(s) with the numbers
    results: list = field(default_factory=list)    # the Results it rests on
    chapters: tuple = ()          # "chapters/NN-…" files that hold the evidence

    @property
    def stale(self) -> bool:
        return any(r.stale for r in self.results)


def _res(name, root):
    return _results.load(name, "full", root) if _results.exists(name, "full", root) else None


def _list(xs) -> str:
    xs = [str(x) for x in xs]
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1] if xs else ""


# ------------------------------------------------------------------------------------------------------ findings
def bias(root=None) -> Finding:
    """The tie bias on tensor cores, the β fix there, and the fix's own bias on sink-tie attention inputs."""
    head = "The rounding bias is real."
    res, dev = _res("bias_kernel", root), _res("fa_deviation", root)
    cells = _v._bias_cells(root)
    if res is None or cells is None or cells[0] is None:
        return Finding(head, "The tie bias on tensor cores is not measured yet.", [], ("chapters/01-bf16-rounding",))
    rne, beta, gap = cells
    k = {2: "Two", 3: "Three", 4: "Four"}.get(rne["k"], str(rne["k"]))
    text = (f"{k} tied row maxima bias BF16 P̄V by {rne['pv']:+.3f} ± {rne['pv_ci']:.3f} ULP (95 % CI, "
            f"{catalogue.device(res.meta)} tensor cores)")
    if beta is not None:
        text += f"; the β fix removes it there ({beta['pv']:+.3f})"
    att = _v._attention_bias(root)
    used = [res]
    if att is not None:
        a, b, n = att
        used.append(dev)
        text += (f" but adds its own on sink-tied attention inputs ({a:+.3f} → {b:+.3f} ULP, {n:,} keys)"
                 if abs(b) > abs(a) else f" and on sink-tied attention inputs ({a:+.3f} → {b:+.3f} ULP, {n:,} keys)")
    return Finding(head, text + ".", used, ("chapters/01-bf16-rounding", "chapters/03-numeric-deviation"))


def gpt2_preconditions(root=None) -> Finding:
    """The census of the tie bias's preconditions in GPT-2 124M at the paper's LR (chapter 2b)."""
    res = _res("gpt2_regime", root)
    ch = ("chapters/02b-where-can-the-chain-start",)
    if res is None:
        return Finding("GPT-2's preconditions", "The census of GPT-2's training is not measured yet.", [], ch)
    from lib.studies.census import reading as census
    n = census.gpt2_numbers(res)
    if not n["authors_present"]:
        return Finding("GPT-2 lacks the bias's preconditions.",
                       f"GPT-2 124M at LR {n['lr']:g} (seed {n['seed']}, {n['steps']:,} steps) has no head that "
                       "passes the census's rule in the authors' placement.", [res], ch)
    return Finding(
        "GPT-2 has its preconditions.",
        f"GPT-2 124M at the paper's LR {n['lr']:g} (seed {n['seed']}, {n['steps']:,} steps) meets them in up to "
        f"{n['authors_max_conj']:.1%} of a head's (row, feature) pairs in the authors' placement; FA2's has "
        f"{n['pairs_ratio']:.0f}× fewer in all.", [res], ch)


def proxy(root=None) -> Finding:
    """Where links 3–7 were tested (the small proxy model): no lean of O's error along sign(V), and no explosion at
    either width (chapters 4 and 6)."""
    head = "Our small proxy shows neither the biased O nor the explosion."
    ch = ("chapters/04-biased-output", "chapters/06-loss-explosion")
    cap = _res("delta_capture", root)
    parts, used, where = [], [], ""
    hh = _results.load_group("healthy_headline", "full", root)
    if hh:
        cfg = hh[0].meta.get("config", {})
        where = f"In the {cfg.get('n_layer')}-layer proxy where links 3–7 were tested (LR {cfg.get('lr'):g}), "
    else:
        where = "In the proxy where links 3–7 were tested, "
    if cap is not None:
        from lib.studies.delta import reading as delta
        n4 = delta.numbers_ch4(cap)
        parts.append(f"O's error along sign(V) is {n4['os_ulp_med']:+.3f} ULP (median over heads, seeds {n4['seeds']})")
        used.append(cap)
    runs = []
    for group in ("healthy_headline", "width_768"):
        g = _results.load_group(group, "full", root)
        if g:
            failed, n, h = _v._healthy_paper(g)
            width = g[0].meta.get("config", {}).get("n_embd")
            runs.append(f"{failed} of {n}{'' if runs else ' seeds'} at width {width} ({h:,} steps)")
            used += g
    if runs:
        parts.append("the paper's numerics failed in " + _list(runs))
    if not used:
        return Finding(head, "The proxy's captures and training runs are not measured yet.", [], ch)
    return Finding(head, where + " and ".join(parts) + ".", used, ch)


def gpt2_kernel(root=None) -> Finding:
    """Our kernel against PyTorch's flash attention at GPT-2 scale: gradients against FP64, training fidelity, step
    time (chapter 2's section "Where GPT-2 trains")."""
    head = "Our kernel passes its GPT-2 checks."
    ch = ("chapters/02-flash-attention-kernel",)
    gc, kf, ts = _res("gradient_checks", root), _res("kernel_fidelity", root), _res("train_step_gpt2", root)
    parts, used = [], []
    if gc is not None:
        from lib.studies.kernel import gradient_checks as gchk
        inputs = list(dict.fromkeys(r["input"] for r in gc.data["rows"]))
        bad = {v.split(" on ", 1)[1].split(":")[0] for v in gchk.read_violations(gc.data)
               if v.startswith("FA2 placement on ")}          # our kernel in FA2 placement, the δ it trains with
        parts.append(f"in FA2 placement its gradients meet FlashAttention's error rule on "
                     f"{len(inputs) - len(bad)} of {len(inputs)} inputs")
        used.append(gc)
    if kf is not None:
        from lib.studies.gpt2 import reading as g2r
        n, cfg = g2r.numbers(kf), g2r.cfg_of(kf)
        modes = {m: n[f"alike_{m}"] for m in ("eager", "compiled") if n[f"alike_{m}"] != "not run"}
        how = (f"alike with PyTorch's flash SDPA, {' and '.join(modes)}"
               if modes and all(v == "alike" for v in modes.values()) else
               "with PyTorch's flash SDPA: " + ("; ".join(f"{v} {m}" for m, v in modes.items()) or "not compared"))
        failed = [a for a in g2r.ARM_WORDS if n[f"{a}_failed_at"] not in ("no failure", "not run")]
        seeds = cfg["seeds"]
        parts.append(f"over {n['sdpa_eager_steps']} steps (seed{'s' if len(seeds) > 1 else ''} {_list(seeds)}) it "
                     f"trained {how} — a weak test: PyTorch's own two modes differ "
                     f"{n['spread_logit_factor']}-fold in a layer's largest logit; "
                     + ("none failed" if not failed else f"{len(failed)} of {len(g2r.ARM_WORDS)} runs failed"))
        used.append(kf)
    if ts is not None:
        rec = next((r for g in ts.data["groups"] for r in g if r["label"] == "fa2_compiled"), None)
        if rec is not None:
            parts.append(f"a compiled step takes {rec['ratio_to_baseline']:.2f}× PyTorch's time "
                         f"({catalogue.device(ts.meta)})")
            used.append(ts)
    if not parts:
        return Finding(head, "The GPT-2 kernel checks are not measured yet.", [], ch)
    text = "; ".join(parts)
    return Finding(head, text[0].upper() + text[1:] + ".", used, ch)


def _arms_words(specs) -> str:
    """The GPT-2 comparison's arms in words: "FP32 attention, PyTorch's flash SDPA and our kernel in FA2 and paper
    placements" (our kernel's arms by their placement, `lib.training.runs.spec_words`)."""
    from lib.training.runs import spec_words
    named = {"fp32_flash": "FP32 attention", "sdpa": "PyTorch's flash SDPA"}
    words = [named[s] for s in specs if s in named]
    ours = [spec_words(s).split(",")[0].replace(" placement", "") for s in specs if s not in named]
    if ours:
        words.append(f"our kernel in {_list(ours)} placement{'s' if len(ours) > 1 else ''}")
    return _list(words)


def gpt2_untested(root=None) -> Finding:
    """What is not yet tested at GPT-2 scale: the registered GPT-2 comparison (its arms, seeds and steps read from the
    registry), and whether it has a committed result."""
    head = "Not yet tested at GPT-2 scale: the explosion."
    try:
        cfg = registry.resolve(GPT2_ARMS, "full")
    except KeyError:
        return Finding(head, "No GPT-2 comparison of rounding placements is registered.", [], ())
    arms = [a["attn"] for a in cfg["arms"]]
    words = _arms_words(arms)
    if _results.exists(GPT2_ARMS, "full", root):
        return Finding(head, f"The GPT-2 comparison ({words}) has a committed result that this book does not read "
                             "yet; until it does, the explosion is tested only in the proxy.", [], ())
    fix = any("+fix" in a for a in arms)
    return Finding(head, f"The registered comparison of {words} (seeds {_list(cfg['seeds'])}, {cfg['steps']:,} "
                         "steps) has not run" + ("." if fix else "; it has no β-fix arm."), [], ())


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _fates(outcomes: list) -> str:
    """What an arm did in each seed, from `reading.outcomes` tuples (seed, steps, failure step, steps to recover):
    "spikes that recovered in seed 0; no failure in seed 1"; an explosion is a failure never recovered."""
    kinds = {"exploded": [], "spikes that recovered": [], "no failure": []}
    for seed, steps, fs, rec in outcomes:
        kinds["no failure" if fs is None else "exploded" if rec is None else "spikes that recovered"].append(seed)
    return "; ".join(f"{k} in seed{'s' if len(v) > 1 else ''} {_list(v)}" for k, v in kinds.items() if v)


# The changes to the paper placement the box names when they prevented its failure (chapter 2c), in its words.
REMEDY_WORDS = {"paper_delta_fp32_o": "δ alone from an FP32 O", "paper_o32": "O kept in FP32"}


def _remedies_words(chain, boom_seeds, root=None) -> tuple[list, str]:
    """(the channel and remedy results read, a clause for the paper placement's failure: ", where δ alone from an
    FP32 O, or O kept in FP32, prevents it" when the arms of `REMEDY_WORDS` that prevent it by the registered rule
    (`lib.studies.gpt2.remedies.verdicts`) did so in every seed of `boom_seeds`, else "; … prevents it in seed 1";
    "" when none does)."""
    from lib.studies.gpt2 import remedies as g2m
    rem = g2m.in_place([r for r in (_res(n, root) for g in g2m.REMEDY_GROUPS for n in registry.GROUPS[g])
                        if r is not None])
    rows = g2m.arm_rows(rem, chain) if rem else []
    # the results the clause reads: those holding an arm it names (not every channel or remedy result)
    rem = [r for r in rem if r.name in {row["entry"] for row in rows if row["arm"] in REMEDY_WORDS}]
    v = g2m.verdicts(rows)
    ok = [a for a in REMEDY_WORDS if v.get(a)]
    if not ok:
        return rem, ""
    seeds = sorted({r["seed"] for r in rows if r["arm"] in ok and r["base_fail"] is not None})
    who = ", or ".join(REMEDY_WORDS[a] for a in ok) + ("," if len(ok) > 1 else "")
    if sorted(boom_seeds) == seeds:
        return rem, f", where {who} prevents it"
    return rem, f"; {who} prevents it in seed{'s' if len(seeds) > 1 else ''} {_list(seeds)}"


def gpt2_chain(root=None) -> Finding:
    """The GPT-2 comparison when its results are committed (chapter 2c): with two or more seeds, FP32 attention's
    largest logit and failures, the layers the paper placement grows beyond FP32 attention's seed-to-seed spread (the
    registered rule), and where it exploded; with one seed, the largest logits at the last step every arm reached and
    which arms the failure rule caught; otherwise what is not yet tested (`gpt2_untested`)."""
    from lib.studies.gpt2 import reading as g2r
    chain = [r for r in (_res(n, root) for n in g2r.CHAIN_RESULTS) if r is not None]
    if not chain:
        return gpt2_untested(root)
    M = g2r.merge_seeds(chain)
    cfg = g2r.cfg_of(M)
    rules = cfg["rules"]
    oc = g2r.outcomes(M)
    verdict = g2r.growth_verdict(M.arrays, M.data["runs"], rules)
    if verdict and "paper" in verdict and "fp32" in oc:
        g = g2r.growth_words(verdict, g2r.fp32_spread(M.arrays, M.data["runs"], rules),
                             g2r.growth_ratios(M.arrays, M.data["runs"], rules))
        fp32_max = max(float(g2r.layer_series(M.arrays, f"fp32:s{o[0]}")["logit"].max()) for o in oc["fp32"])
        boom = [o for o in oc["paper"] if o[2] is not None and o[3] is None]
        fp32_failed = sum(o[2] is not None for o in oc["fp32"])
        head = (f"In GPT-2 the paper placement exploded in {len(boom)} seed{'s' if len(boom) != 1 else ''} "
                f"of {len(oc['paper'])}, FP32 attention "
                + ("in none." if not fp32_failed else f"failed in {fp32_failed}."))
        words = {"sdpa": "flash SDPA", "ours_fa2": "our FA2 placement"}
        # Per FA2-placement arm, what each seed did: exploded, spiked and recovered, or never failed.
        fates = {a: _fates(oc[a]) for a in ("sdpa", "ours_fa2") if a in oc}
        same = len({v for v in fates.values()}) == 1
        groups = ([(_list([words[a] for a in fates]), next(iter(fates.values())))] if same and fates
                  else [(words[a], v) for a, v in fates.items()])
        # None of them exploded: say so in a few words, with the seeds where they spiked and recovered.
        fa2 = [o for a in fates for o in oc[a]]
        spiked = sorted({o[0] for o in fa2 if o[2] is not None})
        quiet = fa2 and all(o[2] is None or o[3] is not None for o in fa2)
        text = (f"FP32 attention's logits stay ≤ {fp32_max:,.0f}; the paper placement "
                f"grows {g['paper_grown_logit_every']} beyond FP32's seed-to-seed spread"
                # the head names how many seeds; where it is every one, the steps alone say when
                # o[2] is a run's first failure; an exploded run may come back once and fail again
                + ((f" and first fails at steps {_list([f'{o[2]:,}' for o in boom])}"
                    if len(boom) > 1 and len(boom) == len(oc["paper"]) else
                    f" and ends failed in seed{'s' if len(boom) > 1 else ''} {_list([o[0] for o in boom])} "
                    f"(first at step{'s' if len(boom) > 1 else ''} {_list([f'{o[2]:,}' for o in boom])})")
                   if boom else "")
                + "{remedies}."
                + (f" {_cap(_list([words[a] for a in fates]))} never exploded"
                   + (f" (seed{'s' if len(spiked) > 1 else ''} {_list(spiked)}: spikes that recovered)" if spiked else "")
                   + "." if quiet else "".join(f" {_cap(who)}: {fate}." for who, fate in groups)))
        rem, words = _remedies_words(M, [o[0] for o in boom], root)
        return Finding(head, text.replace("{remedies}", words), chain + rem, ("chapters/02c-the-chain-in-gpt2",))
    res = _res(GPT2_ARMS, root)
    if res is None:
        return gpt2_untested(root)
    n = g2r.arms_numbers(res)
    bf16 = [a for a in ("sdpa", "ours_fa2", "paper") if f"{a}_steps" in n]
    if "fp32_steps" not in n or not bf16:
        return gpt2_untested(root)
    seeds = g2r.cfg_of(res)["seeds"]
    head = "In GPT-2, BF16 attention grows the logits; FP32 does not."
    words = {"fp32": "FP32", "sdpa": "flash SDPA", "ours_fa2": "our FA2 placement", "paper": "the paper placement"}
    vals = sorted(bf16, key=lambda a: float(n[a + "_logit_common"].replace(",", "")))
    failed = [f"{words[a]} ({n[a + '_failed_at']})" for a in bf16 if n[a + "_failed_at"] != "none"]
    first = min((int(n[a + "_failed_at"].split()[-1].replace(",", "")) for a in bf16 if n[a + "_failed_at"] != "none"),
                default=None)
    steps = {a: int(n[a + "_steps"].replace(",", "")) for a in ["fp32"] + bf16}
    # An arm that stopped before the first failure step is not said to have held (the paper placement's run).
    held = [words[a] for a in ["fp32"] + bf16 if n[a + "_failed_at"] == "none" and (first is None or steps[a] > first)]
    short = [words[a] for a in bf16 if n[a + "_failed_at"] == "none" and first is not None and steps[a] <= first]
    text = (f"Seed{'s' if len(seeds) > 1 else ''} {_list(seeds)}, step {n['common_step']}: largest logit "
            f"{n['fp32_logit_common']} under FP32 attention, {n[vals[0] + '_logit_common']}–"
            f"{n[vals[-1] + '_logit_common']} under BF16. The failure rule caught "
            + (_list(failed) if failed else "no arm") + ("; not " + _list(held).replace(" and ", " or ") if held else "")
            + (f"; {_list(short)} stopped earlier" if short else "") + ".")
    return Finding(head, text, [res], ("chapters/02c-the-chain-in-gpt2",))


FINDINGS = (bias, gpt2_preconditions, proxy, gpt2_kernel, gpt2_chain)


def findings(root=None) -> list[Finding]:
    """The box's findings, in order (each computed from the committed full-scale results)."""
    return [f(root) for f in FINDINGS]


def markdown(items: list[Finding], chapter_cell=lambda ch: ch) -> str:
    """The box: a MyST admonition titled `TITLE`, class `BOX_CLASS`, one bullet per finding — its head in bold, its
    sentence, `STALE` where it rests on a stale result, and its chapters (`chapter_cell(file)` makes each
    link)."""
    lines = [f"```{{admonition}} {TITLE}", f":class: {BOX_CLASS}"]
    for f in items:
        chs = ", ".join(chapter_cell(c) for c in f.chapters)
        lines.append(f"* **{f.head}** {f.text}" + (f" ({STALE}.)" if f.stale else "")
                     + (f" Ch. {chs}." if chs else ""))
    lines.append("```")
    return "\n".join(lines)


def compiled_in_training(root=None) -> str:
    """For the intro's placement box: what the authors' own code, compiled (their code's default), did in GPT-2 training
    (chapter 2c), per seed beside our kernel's eager-placement arm (`lib.studies.gpt2.remedies`, the registered
    failure rule); "" while no such run is committed."""
    from lib.studies.gpt2 import reading as g2r
    from lib.studies.gpt2 import remedies as g2m
    rem = g2m.in_place([r for r in (_res(n, root) for n in registry.GROUPS["gpt2_authors_compiled"]) if r is not None])
    chain = [r for r in (_res(n, root) for n in g2r.CHAIN_RESULTS) if r is not None]
    if not rem or not chain:
        return ""
    rows = [r for r in g2m.arm_rows(rem, g2r.merge_seeds(chain)) if r["arm"] == "authors_compiled"]
    if not rows:
        return ""
    runs = [f"seed {r['seed']}: {g2m.arm_outcome(r)}"
            + (f" (our kernel in their eager placement, from the same initialisation and batches: "
               f"{g2m.outcome_words(r['base_fail'], r['base_back'], r['base_steps'])})" if r["base_steps"] else "")
            for r in sorted(rows, key=lambda r: r["seed"])]
    return ("In GPT-2 training (chapter 2c), the authors' code without its fix, compiled (their code's default) — "
            + "; ".join(runs) + ". No verdict of the table rests on the compiled placement.")
