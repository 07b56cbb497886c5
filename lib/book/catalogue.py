"""Every result of the book, from the registry and from `results/<scale>/`, with the command that regenerates it,
and the words a reader sees for a result.

`rows(scale)` joins the registry entries (`lib.book.registry.entries()`: summary, chapter, GPU minutes, needs) with
the committed results at `scale` (`lib.book.results`: label, wall time, staleness reasons), each result read by its
own name. A committed result that has no registry entry (a benchmark script's output, say) is listed too, with the
command recorded in its meta. The appendix prints this table.

A result's name (`healthy_headline_w768`) is a command-line argument, not prose: pages name a result by its title
(`title`: "the width-768 runs, seeds 0–1") and its provenance in words (`cite`: "H100, 2026-11-24"); the appendix is
the one place that pairs each title with its name, its command and its full provenance. `stale_line` is the one
sentence a chapter gives to the stale results it reads.
"""
from __future__ import annotations

import re
from pathlib import Path

from lib.book import registry, results

# A result's title as prose names it (lower case, to follow "the"-less in a sentence: "… in the LR 8e-3 headline").
# One line per registry entry and per committed result; `title` falls back to the summary's first clause.
TITLES = {
    "bias_montecarlo": "the Monte Carlo of the tie bias on attention-shaped rows",
    "bias_kernel": "the tie bias through the Triton kernel and the H100's tensor cores",
    "paper_placement": "the authors' code under BF16 autocast, bit for bit against the emulator",
    "rounding_exhaustive": "the rounding helper on every FP32 bit pattern",
    "lr_sweep": "the LR sweep at 6.5e-3 and 7e-3",
    "lr_sweep_s1": "the LR sweep at 6.5e-3 and 7e-3, seed 1",
    "lr_sweep_s2": "the LR sweep at 6.5e-3 and 7e-3, seed 2",
    "headline": "the LR 8e-3 headline",
    "headline_fix_sm32": "the LR 8e-3 fix with S − m in FP32",
    "headline_cliff": "the LR 7e-3 cliff at three seeds",
    "beta_sweep": "the β sweep at LR 8e-3",
    "beta_sweep_seeds": "the β sweep's two ends at two more seeds",
    "regime_sweep": "the healthy regime's pilot at LR 1e-3",
    "regime_sweep_5e4": "the healthy regime's pilot at LR 5e-4",
    "healthy_headline": "the healthy headline (paper placement and the fix at β = 7)",
    "healthy_headline_more": "the healthy headline's β = 2 and FA2 arms",
    "healthy_headline_w768": "the width-768 runs, seeds 0 and 1",
    "healthy_headline_w768_s2": "the width-768 runs, seed 2",
    "authors_code": "the authors' code in the healthy regime",
    "authors_code_6k": "the authors' code without the fix to 6,000 steps",
    "authors_code_8e3": "the authors' code at LR 8e-3",
    "generic_growth_controls": "the QK-norm and row-zeroing controls at LR 8e-3",
    "fa_deviation": "Golden et al.'s microbenchmark",
    "weight_drift": "Golden et al.'s weight drift on the proxy",
    "delta_capture": "the captures of the healthy run",
    "delta_capture_8e3": "the captures before the LR 8e-3 blow-up",
    "delta_capture_fa2": "the captures of the FA2-numerics arm",
    "attention_bench": "the attention speed benchmark",
    "train_step_bench": "the training-step benchmark",
    "capture_overhead_bench": "the capture-cost benchmark",
    "delta_dose": "the δ dose, stage 1",
    "delta_dose_seeds": "the δ dose, stage 2 (more seeds)",
    "delta_dose_brackets": "the δ dose's lower brackets",
    "delta_dose_bias3": "the δ dose's bias-only bracket at λ = 3",
    "census_regimes": "the census of the preconditions in the proxy",
    "gpt2_regime": "GPT-2 124M at the paper's LR (SDPA) with the census",
    "gpt2_regime_paper": "GPT-2 124M continued in the paper placement",
    "positive_control_levers": "the levers toward the preconditions",
    "bias_injection": "the bias injected at controlled rates",
    "kernel_bias_table": "the bias of the kernels a user calls, on planted ties and GPT-2's tied rows",
    "gradient_checks": "the gradient checks of every training variant against FP64",
    "kernel_fidelity": "our kernel against PyTorch's flash SDPA, training GPT-2 124M",
    "train_step_gpt2": "the GPT-2 124M training-step benchmark",
    "train_step_remedies": "the GPT-2 remedies' training-step benchmark",
    "train_step_fix": "the exact-rule fix's training-step benchmark",
    "train_step_qknorm": "the capped QK-norm's training-step benchmark",
    "stable_attention_bench": "the user kernel's speed benchmark",
    "gpt2_arms": "the chain in GPT-2 124M, seed 0: FP32, SDPA, our FA2 and paper placements",
    "gpt2_arms_s1": "the chain in GPT-2 124M, seed 1: FP32 attention and the paper placement",
    "gpt2_arms_s1_fa2": "the chain in GPT-2 124M, seed 1: flash SDPA and our FA2 placement",
    "gpt2_arms_s2": "the chain in GPT-2 124M, seed 2: FP32 attention and the paper placement",
    "gpt2_arms_s2_fa2": "the chain in GPT-2 124M, seed 2: flash SDPA and our FA2 placement",
    "gpt2_arms_s0_paper": "the chain in GPT-2 124M, seed 0: the paper placement to the full horizon",
    "gpt2_arms_s0_fp32": "the chain in GPT-2 124M, seed 0: FP32 attention to the full horizon",
    "loop_certificate_gpt2": "the one training loop against the code of every committed GPT-2 run, on the GPU",
    "loop_certificate_proxy": "the one training loop against the code of every committed proxy run, on the GPU",
    "gpt2_arms_s1_fp32": "the chain in GPT-2 124M, seed 1: FP32 attention to the full horizon",
    "gpt2_delta": "the δ channel in GPT-2 124M: δ from an FP32 O and δ = rowsum(dP∘P) / ΣP, seed 0",
    "gpt2_delta_s1": "the δ channel in GPT-2 124M: δ from an FP32 O and δ = rowsum(dP∘P) / ΣP, seed 1",
    "gpt2_delta_s2": "the δ channel in GPT-2 124M: δ from an FP32 O, seed 2",
    "gpt2_remedy_o32": "GPT-2 124M with O kept in FP32 and with the guarded fix at β = 2, seed 0",
    "gpt2_remedy_o32_s1": "GPT-2 124M with O kept in FP32 and with the guarded fix at β = 2, seed 1",
    "gpt2_remedy_o32_s2": "GPT-2 124M with O kept in FP32, seed 2",
    "gpt2_remedy_fix": "GPT-2 124M with the fix by the paper's exact rule at β = 2 and 7, seed 0",
    "gpt2_remedy_fix_s1": "GPT-2 124M with the fix by the paper's exact rule at β = 7, seed 1",
    "gpt2_remedy_fix_b2_s1": "GPT-2 124M with the fix by the paper's exact rule at β = 2, seed 1",
    "gpt2_remedy_fix_s2": "GPT-2 124M with the fix by the paper's exact rule at β = 7, seed 2",
    "gpt2_remedy_fix_b2_s2": "GPT-2 124M with the fix by the paper's exact rule at β = 2, seed 2",
    "gpt2_qknorm": "GPT-2 124M with its logits bounded by a capped QK-norm, seed 0",
    "gpt2_qknorm_s1": "GPT-2 124M with its logits bounded by a capped QK-norm, paper placement, seed 1",
    "gpt2_qknorm_fp32_s1": "GPT-2 124M with its logits bounded by a capped QK-norm, FP32 attention, seed 1",
    "gpt2_qknorm_s2": "GPT-2 124M with its logits bounded by a capped QK-norm, paper placement, seed 2",
    "gpt2_authors_compiled": "the authors' code training GPT-2 124M compiled, with and without their fix, seed 0",
    "gpt2_authors_compiled_s1": "the authors' code training GPT-2 124M compiled, without their fix, seed 1",
    "gpt2_authors_compiled_fix_s1": "the authors' code training GPT-2 124M compiled, with their fix, seed 1",
    "gpt2_authors_eager": "the authors' code training GPT-2 124M eagerly, with and without their fix, seed 0",
    "gpt2_authors_eager_s1": "the authors' code training GPT-2 124M eagerly, with and without their fix, seed 1",
    "gpt2_inject": "the tie bias injected into GPT-2 124M at 1× and 10× the measured rates, seed 0",
    "gpt2_inject_s1": "the tie bias injected into GPT-2 124M at 1× and 10× the measured rates, seed 1",
    "gpt2_inject_low": "the tie bias injected into GPT-2 124M at 0.1× and at zero rate, seed 0",
    "gpt2_inject_low_s1": "the tie bias injected into GPT-2 124M at 0.1× and at zero rate, seed 1",
    "gpt2_dial_s1": "GPT-2 124M in the paper placement with its scores S in FP32, seed 1",
    "gpt2_dial_pl32_s1": "GPT-2 124M in the paper placement with P̄ and ℓ in FP32, seed 1",
    "gpt2_dial_s2": "GPT-2 124M in the paper placement with its scores S in FP32, seed 2",
    "gpt2_dial_pl32_s2": "GPT-2 124M in the paper placement with P̄ and ℓ in FP32, seed 2",
    "gpt2_authors_compiled_s1_long": "the authors' code training GPT-2 124M compiled, without their fix, seed 1, "
                                     "towards the full horizon",
    "gpt2_ddp": "GPT-2 124M at the authors' batch on several GPUs",
    "census_cost": "the census's cost beside a GPT-2 124M training step",
    "monitor_overhead": "the monitor's cost in a GPT-2 124M training step",
}


# A group of results read as one (`lib.book.registry.GROUPS`), named once where all of its results are meant.
GROUP_TITLES = {"beta_sweep": "the β sweep ({n} results)",
                "healthy_headline": "the healthy headline ({n} results)", "width_768": "the width-768 runs",
                "authors_code": "the authors' code trained ({n} results)", "delta_dose": "the δ dose ({n} results)",
                "gpt2_delta": "the δ channel in GPT-2 124M, seeds 0 to 2",
                "gpt2_remedy_o32": "GPT-2 124M with O kept in FP32 and with the guarded fix at β = 2, seeds 0 to 2",
                "gpt2_remedy_fix": "GPT-2 124M with the paper's exact fix at β = 2 and 7, seeds 0 to 2",
                "gpt2_qknorm": "GPT-2 124M with a capped QK-norm, seeds 0 to 2",
                "gpt2_authors_compiled": "the authors' code training GPT-2 124M compiled, seeds 0 and 1",
                "gpt2_authors_eager": "the authors' code training GPT-2 124M eagerly, seeds 0 and 1",
                "gpt2_inject": "the tie bias injected into GPT-2 124M at 1× and 10×, seeds 0 and 1",
                "gpt2_inject_low": "the tie bias injected into GPT-2 124M at 0.1× and at zero rate, seeds 0 and 1",
                "gpt2_dial": "GPT-2 124M in the paper placement with S, or P̄ and ℓ, in FP32, seeds 1 and 2"}


def title(name: str) -> str:
    """How prose names result `name`: its `TITLES` entry, else the first clause of its registry summary, else
    "a result without a title"."""
    if name in TITLES:
        return TITLES[name]
    e = registry.entries().get(name)
    if e is not None and e.summary:
        head = re.split(r"[:;(]|\. ", e.summary, maxsplit=1)[0].strip().rstrip(".")
        return head[:1].lower() + head[1:]
    return "a result without a title"


def device(meta: dict) -> str:
    """The machine of a result in words: "H100", "H200", "CPU" (from meta["device"], e.g. "NVIDIA H100 80GB HBM3" or
    "cpu (x86_64)")."""
    d = str(meta.get("device", "") or "")
    m = re.search(r"\b([A-Z]\d{2,4})\b", d)
    if m:
        return m.group(1)
    return "CPU" if d.lower().startswith("cpu") else (d or "unknown device")


def cite(res, with_title: bool = True, mark_stale: bool = True) -> str:
    """A result (or a list of results) named for prose, with no internal name: "the LR 8e-3 headline (H100,
    2026-11-23, stale)"; without the title only the parenthesis's content; `mark_stale` False leaves "stale" out (in
    a section that says once that its results are stale). Several results are joined by "; "."""
    if isinstance(res, (list, tuple)):
        return "; ".join(cite(r, with_title, mark_stale) for r in res)
    when = f"{device(res.meta)}, {str(res.meta.get('created_utc', ''))[:10]}" + \
        (", stale" if res.stale and mark_stale else "")
    if res.scale != "full":
        when = f"{res.scale} scale, " + when
    return f"{title(res.name)} ({when})" if with_title else when


def stale_line(res_list, why: str = "") -> str:
    """One sentence on the stale results among `res_list` ('' when none is stale): which (by title), that the code
    their runs reach changed after they ran (or `why`), and where the commands that re-run them are."""
    stale = [r for r in res_list if r.stale]
    if not stale:
        return ""
    left = list(dict.fromkeys(r.name for r in stale))
    names = []
    for group, members in registry.GROUPS.items():       # a group read as one is named once, by its title
        if len(members) > 1 and all(m in left for m in members) and group in GROUP_TITLES:
            names.append(GROUP_TITLES[group].format(n=len(members)))
            left = [n for n in left if n not in members]
    names = [title(n) for n in left] + names
    sep = "; " if any("," in n for n in names) else ", "
    what = names[0] if len(names) == 1 else sep.join(names[:-1]) + " and " + names[-1]
    verb = "is" if len(names) == 1 else "are"
    return (f"Stale: {what} {verb} read as {'it was' if len(names) == 1 else 'they were'} committed — "
            f"{why or 'the code their runs reach has changed since they ran'}; the appendix lists why and the "
            f"command that re-runs {'it' if len(names) == 1 else 'each'}.")


def titled(text: str) -> str:
    """`text` (a string a result recorded, say "regime_sweep (full): largest LR whose …") with every result name in
    it, and a "(full)" after it, replaced by the result's title."""
    names = set(registry.entries()) | {p.stem for p in (results.RESULTS_DIR / "full").glob("*.json")}
    pat = re.compile(r"(?<![\w`])(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True))
                     + r")(?: \((?:full|ci)\))?(?![\w`])")
    return pat.sub(lambda m: title(m.group(1)), text)


_CODEY = re.compile(r"(?<![`\w/])((?:python -m [\w.]+(?: [\w./=-]+)*)|"
                    r"\b(?:lib|kernels|tests|benchmarks|data|chapters|results)/[\w./-]*\w|"
                    r"\blib(?:\.\w+)+\b|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b)(?![`\w])")


def codify(text: str) -> str:
    """`text` with the code in it — file paths, `lib.` module paths, `python -m …` commands, snake_case names of
    results and functions — in Markdown code spans, so that a registry summary reads as prose with its code marked."""
    return _CODEY.sub(lambda m: f"`{m.group(1)}`", text)


def command(name: str, scale: str = "full") -> str:
    """The one command that regenerates registry entry `name` at `scale` into ./results."""
    return f"python -m lib.experiments {name} --scale {scale} --out results"


def _script_command(meta: dict) -> str:
    """The command a result without a registry entry was produced with (its script, writing into ./results)."""
    argv = list(meta.get("argv") or [])
    if argv and argv[0].endswith(".py") and (results.ROOT / argv[0]).exists():
        rest = []
        skip = False
        for a in argv[1:]:
            if skip:
                skip = False
                continue
            if a == "--out":              # the machine's output folder: the repository's results/ instead
                skip = True
                continue
            rest.append(a)
        return " ".join(["python", argv[0], *rest, "--out", "results"])
    return ""


def rows(scale: str = "full", root: Path | str | None = None) -> list[dict]:
    """One dict per result, registry order first, then committed results without an entry:
    name, in_registry, summary, chapter, gpu_min, needs, command, committed, label, wall_s, stale (list of reasons)."""
    out = []
    entries = registry.entries()
    for name, e in entries.items():
        have = results.exists(name, scale, root)
        res = results.load(name, scale, root) if have else None
        out.append(dict(name=name, in_registry=True, summary=e.summary, chapter=e.chapter, gpu_min=e.gpu_min,
                        device=e.device, needs=list(e.needs), command=command(name, scale), committed=have,
                        label=res.label if res else "", machine=device(res.meta) if res else "",
                        date=str(res.meta.get("created_utc", ""))[:10] if res else "",
                        wall_s=res.meta.get("wall_s") if res else None,
                        stale=list(res.stale) if res else [], commit=res.meta.get("git_commit") if res else None))
    base = Path(root) if root else results.RESULTS_DIR
    for js in sorted((base / scale).glob("*.json")):
        if js.stem in entries:
            continue
        res = results.load(js.stem, scale, root)
        out.append(dict(name=js.stem, in_registry=False, summary=res.meta.get("summary", ""), chapter="",
                        gpu_min=round(res.meta["wall_s"] / 60, 1) if res.meta.get("wall_s") else None,
                        device="gpu", needs=[], command=_script_command(res.meta), committed=True, label=res.label,
                        machine=device(res.meta), date=str(res.meta.get("created_utc", ""))[:10],
                        wall_s=res.meta.get("wall_s"), stale=list(res.stale), commit=res.meta.get("git_commit")))
    return out


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _gpu(r: dict) -> str:
    return "—" if r["gpu_min"] is None else ("CPU" if r.get("device") == "cpu" else f"{r['gpu_min']:g}")


def _committed(r: dict) -> str:
    """'H100 · a1b2c3d4 · 2026-11-22' of a committed row: machine, commit, date."""
    return " · ".join(x for x in (r.get("machine"), str(r.get("commit") or "")[:8], r.get("date")) if x)


def markdown_table(rs: list[dict]) -> str:
    """An overview that fits the text column: result (its name, as the command takes it), chapter, GPU minutes, the
    committed result's machine, commit and date, fresh / stale / not produced. `markdown_details` gives the rest."""
    lines = ["| result | ch. | GPU min | committed | state |", "|---|---|---|---|---|"]
    for r in rs:
        if r["committed"]:
            com, state = _committed(r), ("**stale**" if r["stale"] else "fresh")
        else:
            com, state = "—", "not produced"
        lines.append(f"| `{r['name']}` | {_cell(r['chapter'] or '—')} | {_gpu(r)} | {_cell(com)} | {state} |")
    return "\n".join(lines)


def markdown_details(rs: list[dict]) -> str:
    """One list item per result: its title, its name, what it shows (the registry summary, its code marked), the one
    command that regenerates it, what it needs first, the committed result's provenance and every reason it is
    stale."""
    items = []
    for r in rs:
        t = title(r["name"])
        head = f"**{t[:1].upper() + t[1:]}**, `{r['name']}`" + ("" if r["in_registry"] else " (not a registry entry)")
        meta = [f"chapter {r['chapter']}" if r["chapter"] else None,
                ("CPU only" if r.get("device") == "cpu" else f"{r['gpu_min']:g} GPU min")
                if r["gpu_min"] is not None else None,
                ("after " + ", ".join(f"`{n}`" for n in r["needs"])) if r["needs"] else None]
        meta = "; ".join(m for m in meta if m)
        cmd = f"`{r['command']}`" if r["command"] else "no command recorded"
        if not r["committed"]:
            com = "not produced yet."
        else:
            com = _committed(r) + (f", {r['wall_s']:.0f} s" if isinstance(r["wall_s"], (int, float)) else "")
            com += (" — **stale**: " + "; ".join(map(codify, r["stale"])) + ".") if r["stale"] else " — fresh."
        items.append(f"* {head}{' (' + meta + ')' if meta else ''}: {codify(r['summary']) or '(no summary)'}  \n"
                     f"  Regenerate: {cmd}  \n  Committed: {com}")
    return "\n".join(items)
