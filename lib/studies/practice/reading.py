"""The numbers of the chapter "Using this in your training": which kernels carry which bias, how the monitor sees it
coming, what the fix costs, and what is not measured yet.

`numbers()` returns one dict, {glue name: value} (a string, a Markdown block under a key ending in "_md", or a
Figure under "fig-…"), that the chapter glues in a loop. One function per section, each on what it reads:

* `kernel_table_numbers(res)`: the kernel bias table (`kernel_table`), committed full-scale result or a live run;
* `remainder_sign_check(...)`: the same planted tie with the other keys' V of random sign and of the tied sign (CPU);
* `student_interval(cell)`: a table cell's 95 % interval over its problems from Student's t, not the normal
  approximation (which is too narrow for a handful of problems);
* `ntr_numbers(res)`: chapter 1's measurement of the FA2 order (normalise, then round O once) on planted tied rows,
  per path, without and with the β shift;
* `planted_demo`, `run_monitor_demo(path)`, `monitor_demo_numbers(path)`: `AttentionMonitor` on a tiny GPT with a
  planted tied head, for a few CPU steps, and what its JSON lines and warnings say;
* `monitor_view(res, ...)`, `gpt2_monitor_numbers(res)`: the census of the committed GPT-2 124M run read as the
  monitor reads its own records (per event, per head), with the warnings the monitor's thresholds would have raised;
  `monitor_lead_numbers(res)`: how much earlier the conjunction warning fires than the logit warning;
* `fix_numbers()`: the recommended settings, read from the code (the user kernel's defaults, the fix's window, the
  authors' clamp on ℓ);
* `dev_log(path)`, `dev_log_numbers(log)`: the development measurement of the user kernel on an H100, parsed from
  its log (speed against SDPA's cuDNN and flash backends, the fix's cost, the dQ difference it found), with TFLOP/s
  as a fraction of the H100 SXM's datasheet peak (`H100_SXM_DENSE_BF16_TFLOPS`); `gpu_dq_check(path)`,
  `gpu_dq_numbers(check)`: the GPU test that settled that difference, read from the committed GPU test log.
"""
from __future__ import annotations

import inspect
import json
import math
import re
import warnings
from pathlib import Path

import numpy as np

from lib.studies.practice import figures
from lib.studies.practice.figures import KINDS

ROOT = Path(__file__).resolve().parents[3]
DEV_LOG = ROOT / "results" / "full" / "stable_attention_bench_dev_run.log"
GPU_TESTS_LOG = ROOT / "results" / "full" / "gpu_tests.log"       # the last `make gpu-tests` run, committed
# The user kernel's targets (forward+backward speed-ups over SDPA's backends; the fix's extra time), stated before
# the measurement in benchmarks/bench_stable_attention.py's docstring.
TARGETS = {"cudnn": 0.9, "flash": 1.3, "fix": 0.02, "delta": 0.03}   # delta: δ from the FP32 O, fwd + bwd
# The registered benchmark's targets, set before it runs: at least cuDNN's speed (the development run's 0.9× raised).
REGISTERED_TARGETS = TARGETS | {"cudnn": 1.0}
CHECK_KERNELS = ("sdpa_math", "ours_fa2", "ours_paper")
PLANT_GAIN = 16.0        # the demo's planted head: q and k weights scaled, so attention concentrates
PLANT_LAYER, PLANT_HEAD = 0, 0    # the demo's planted (layer, head), 0-based as the monitor's records index them
ALPHABET = 8             # the demo's tokens come from 8 symbols: each repeats in a 32-token row (ties)
# The H100 SXM's dense BF16 tensor-core peak, in TFLOP/s. Source: NVIDIA H100 Tensor Core GPU datasheet, H100 SXM,
# "BF16 Tensor Core 1,979 teraFLOPS", a figure given with structured sparsity (footnote), i.e. twice the dense rate;
# the H100 architecture whitepaper's table gives the dense rate, 989.4 (1,978.9 with sparsity), for the H100 SXM5.
# The development measurement ran on an "NVIDIA H100 80GB HBM3", the SXM part. (The benchmark's own log divides by
# 790, which is not a datasheet figure; no matmul ceiling was measured on that machine.)
H100_SXM_DENSE_BF16_TFLOPS = 989.4
H100_SXM_SPARSE_BF16_TFLOPS = 1979.0
Z95 = 1.96               # the normal quantile of `kernel_table.summarize`'s intervals (95 %, two-sided)

__all__ = ["numbers", "TARGETS", "H100_SXM_DENSE_BF16_TFLOPS", "kernel_table_result", "kernel_table_numbers",
           "student_interval", "remainder_sign_check", "check_numbers", "ntr_numbers", "monitor_lead_numbers",
           "planted_demo", "run_monitor_demo", "monitor_demo_numbers", "monitor_view",
           "first_warnings", "watched_layer", "gpt2_monitor_numbers", "fix_numbers", "dev_log", "dev_shape_numbers",
           "dev_log_numbers", "speed_numbers", "bench_numbers", "REGISTERED_TARGETS",
           "dq_numbers", "gpu_dq_check", "gpu_dq_numbers", "kernel_label", "cost_numbers",
           "delta_cost_words", "split_words"]


def numbers() -> dict:
    """Every number, table and figure of the chapter but the monitor demo's (which the chapter runs in view and reads
    with `monitor_demo_numbers`). The same at every scale: the results it reads are committed, and what is live (the
    ci kernel table, the remainder check) is CPU work."""
    from lib.book import results
    import dataclasses
    table = kernel_table_result()
    check = remainder_sign_check()
    gpt2 = results.load("gpt2_regime", "full")
    layer = watched_layer(gpt2)
    views = {p: monitor_view(gpt2, layer, p) for p in ("authors", "fa2")}
    # the figure draws the same Student-t intervals as the text
    t_table = dataclasses.replace(table, data=table.data | {"table": {
        n: {k: student_interval(c) for k, c in row.items()} for n, row in table.data["table"].items()}})
    t_check = check | {w: {k: student_interval(c) for k, c in check[w].items()} for w in ("random", "tied")}
    return (kernel_table_numbers(table) | check_numbers(check) | gpt2_monitor_numbers(gpt2)
            | monitor_lead_numbers(gpt2) | fix_numbers() | dev_log_numbers(dev_log())
            | (bench_numbers(results.load("stable_attention_bench", "full"))
               if results.exists("stable_attention_bench", "full") else {})
            | ntr_numbers(results.load("bias_kernel", "full"))
            | cost_numbers(*(results.load(n, "full") if results.exists(n, "full") else None
                             for n in ("monitor_overhead", "census_cost")))
            | gpu_dq_numbers(gpu_dq_check())
            | {"sa_delta_cost": delta_cost_words(results.load("stable_attention_bench", "full").data
                                                 if results.exists("stable_attention_bench", "full") else None)}
            | {"fig-kernel-table": figures.kernel_table_figure(t_table, t_check),
               "fig-gpt2-monitor": figures.gpt2_monitor_figure(views, gpt2.meta)})


# ------------------------------------------------------------------------------------------------ formatting
def _num(x: float, fmt: str = "+.2f") -> str:
    """A number with a typographic minus sign."""
    return format(x, fmt).replace("-", "−")


def _interval(cell: dict) -> str:
    """'−0.19 [−0.20, −0.17]': a table cell's mean and 95 % interval (ULP), Student's t over its problems."""
    if not cell or cell.get("n_problems", 0) == 0:
        return "—"
    cell = student_interval(cell)
    if not math.isfinite(cell["lo"]):
        return _num(cell["mean"])
    return f"{_num(cell['mean'])} [{_num(cell['lo'])}, {_num(cell['hi'])}]"


# The kernel table's fixes of our kernels run with the shift guard (`max_shift` at its default): their labels say so,
# since the exact rule (no guard) is what GPT-2's remedies compare them with.
GUARDED = ("stable+fix", "ours_fa2+fix", "ours_paper+fix")


def kernel_label(name: str, labels: dict) -> str:
    """A kernel's label for prose and tables, where an identifier does not belong: `stable_attention` is "the user
    kernel"; a fix with the shift guard (`GUARDED`) is "guarded"."""
    label = labels.get(name, name).replace("stable_attention", "user kernel")
    return label.replace("fix β", "guarded fix β") if name in GUARDED else label


def _ranges(rows) -> str:
    """'25–63, 89': sorted integers as runs."""
    rows = sorted(rows)
    runs, start = [], rows[0]
    for a, b in zip(rows, rows[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}–{a}" if a > start else f"{a}")
            start = b
    return ", ".join(runs)


# ------------------------------------------------------------------------------------------------ kernel table
def _normal_cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def student_interval(cell: dict) -> dict:
    """A table cell of `kernel_table.summarize` (mean over n problem means, and the normal-approximation interval
    mean ± 1.96·s/√n) with the 95 % interval from Student's t instead, mean ± t₀.₉₇₅(n − 1)·s/√n: exact when the
    problem means are normal, where the normal approximation is too narrow by t₀.₉₇₅(n − 1)/1.96 (6.5× at n = 2,
    1.2× at n = 8). Adds "dof" (n − 1) and "widen" (that factor); NaN ends where n < 2. Idempotent."""
    from scipy.stats import t as student_t
    if not cell or cell.get("interval") == "student-t":
        return cell
    n = int(cell.get("n_problems", 0))
    out = dict(cell, interval="student-t", dof=n - 1)
    if n < 2 or not (math.isfinite(cell["lo"]) and math.isfinite(cell["hi"])):
        return out | dict(lo=float("nan"), hi=float("nan"), widen=float("nan"))
    widen = float(student_t.ppf(0.975, n - 1)) / Z95
    half = (cell["hi"] - cell["lo"]) / 2 * widen
    return out | dict(lo=cell["mean"] - half, hi=cell["mean"] + half, widen=widen)


def kernel_table_result():
    """The kernel bias table: the committed full-scale result if there is one, else a live run at ci scale (on the
    CPU: SDPA's math backend and the research kernel's emulated path; about a second)."""
    from lib.book import results
    from lib.book.runner import live_result
    if results.exists("kernel_bias_table", "full"):
        return results.load("kernel_bias_table", "full")
    return live_result("kernel_bias_table", "ci")


def kernel_table_numbers(res) -> dict:
    """The kernel bias table as Markdown ("kt_md": kernel × kind of input, mean error along sign(V) in ULP with its
    95 % interval from Student's t over problems), what it is ("kt_what"), its size, the intervals' degrees of freedom
    and how much wider they are than the normal approximation ("kt_dof", "kt_widen"), and the full table's kernels
    it does not hold ("kt_missing")."""
    from lib.book import catalogue
    from lib.studies.practice import kernel_table as kt
    d = res.data
    kinds = [k for k in KINDS if any(k in row for row in d["table"].values())]      # the table's, not the check's
    lines = ["| kernel | " + " | ".join(KINDS[k] for k in kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for name, row in d["table"].items():
        lines.append(f"| {kernel_label(name, d['labels'])} | " + " | ".join(_interval(row.get(k)) for k in kinds)
                     + " |")
    n = sorted({row[k]["n_problems"] for row in d["table"].values() for k in kinds if k in row})
    B, H, T, D = d["shape"]
    on_cpu = d["device"] == "cpu"
    missing = [kernel_label(k, kt.LABELS) for k in kt.KERNELS if k not in d["table"]]
    conc = {n: _direction(row["concentrated"]) for n, row in d["table"].items() if "concentrated" in row}
    cells = [student_interval(row[k]) for row in d["table"].values() for k in kinds if k in row]
    widen = sorted({round(c["widen"], 1) for c in cells if math.isfinite(c.get("widen", float("nan")))})
    named = lambda w: "; ".join(kernel_label(n, d["labels"]) for n, v in conc.items() if v == w) or "none"  # noqa: E731
    diffuse = [abs(row["diffuse"]["mean"]) for row in d["table"].values() if "diffuse" in row]
    return {"kt_md": "\n".join(lines),
            "kt_what": ("a live run on this machine's CPU (Triton's interpreter, BF16 rounding emulated bit for bit)"
                        if on_cpu else catalogue.cite(res)),
            "kt_on_gpu": not on_cpu, "kt_shape": f"{B}·{H}·{T}·{D}",
            "kt_n_problems": " or ".join(str(x) for x in n),
            "kt_dof": " or ".join(str(x - 1) for x in n),
            "kt_dof_words": " or ".join(str(x - 1) for x in n) + (" degree" if n == [2] else " degrees") + " of freedom", "kt_widen": " to ".join(f"{w:.1f}" for w in widen) or "—",
            "kt_level": f"{2 * _normal_cdf(Z95) - 1:.0%}",
            "kt_gap_c": f"{d['gaps']['concentrated']:g}",
            "kt_gap_d": f"{d['gaps']['diffuse']:g}", "kt_n_missing": len(missing),
            "kt_missing": "; ".join(missing) if missing else "none",
            "kt_missing_md": "Kernels not in the table above:\n\n" + "\n".join(f"* {m}" for m in missing)
            if missing else "Every kernel of the full table is in the table above.",
            "kt_skipped": "; ".join(f"{k}: {v}" for k, v in d["skipped"].items()) or "none",
            "kt_toward": named("toward zero"), "kt_away": named("away from zero"),
            "kt_unresolved": named("not resolved from zero"),
            "kt_diffuse_max": f"{max(diffuse):.3f}" if diffuse else "—", "kt_fa2_fix": fa2_fix_words(d),
            **_gpt2_numbers(d)}


def fa2_fix_words(d: dict, name: str = "stable") -> str:
    """What the fix did in FA2 numerics in the kernel bias table (its data `d`), for kernel `name` (the user kernel;
    the research kernel's FA2 numerics where the table lacks it): its mean error along sign(V) without and with the
    fix on the planted concentrated ties and on GPT-2's tied rows, each with the way its 95 % interval puts it; ""
    when the table has neither."""
    t = d["table"]
    if name not in t or name + "+fix" not in t:
        name = "ours_fa2"
    if name not in t or name + "+fix" not in t:
        return ""
    cell = lambda c: f"{_interval(c)} ULP ({_direction(c)})"        # noqa: E731
    kinds = [(k, w) for k, w in (("concentrated", f"on the planted concentrated ties (gap {d['gaps']['concentrated']:g}"
                                                   " nats)"), ("gpt2", "on GPT-2's tied rows"))
             if k in t[name] and k in t[name + "+fix"]]
    if not kinds:
        return ""
    from lib.studies.practice import kernel_table as kt
    label = kernel_label(name, kt.LABELS | d["labels"])
    return (f"In the kernel table the fix moved the error of the {label} "
            + "; ".join(f"{w} from {cell(t[name][k])} to {cell(t[name + '+fix'][k])}" for k, w in kinds) + ".")


GPT2_ARMS = {"fp32": "FP32 attention", "sdpa": "flash SDPA", "ours_fa2": "our FA2 placement",
             "paper": "paper placement"}   # chapter 2c's arms, as the GPT-2 capture names its source


def _gpt2_numbers(d: dict) -> dict:
    """The kernel bias table's GPT-2 column in words: where the rows come from ("kt_gpt2_from": the arm, checkpoint
    step, layer and its largest logit), how many tied (row, feature) pairs and how many in the sticky-bit window, the
    kernels whose 95 % interval puts the error away from zero / toward zero / neither on those rows, and the paper
    placement's and the fixes' means there (ULP, "—" when the kernel is not in the table). "kt_gpt2" is False when
    the table has no GPT-2 rows (the CPU run)."""
    g = d.get("gpt2")
    rows = {n: row["gpt2"] for n, row in d["table"].items() if "gpt2" in row}
    if not g or not rows:
        return {"kt_gpt2": False}
    arm, seed = g["arm"].split(":s")
    named = lambda w: "; ".join(kernel_label(n, d["labels"]) for n, c in rows.items()   # noqa: E731
                                if _direction(c) == w) or "none"
    mean = lambda n: f"{rows[n]['mean']:+,.1f}" if n in rows else "—"                  # noqa: E731
    return {"kt_gpt2": True,
            "kt_gpt2_from": (f"layer {g['layer']} of {g['shape'][0]} training windows from the {GPT2_ARMS.get(arm, arm)} "
                             f"run of chapter 2c (seed {seed}) at step {g['step']:,}, whose largest logit there is "
                             f"{g['max_logit']:,.0f}"),
            "kt_gpt2_pairs": f"{g['n_pairs_tied']:,}", "kt_gpt2_window_pairs": f"{g['n_pairs_window']:,}",
            "kt_gpt2_away": named("away from zero"), "kt_gpt2_toward": named("toward zero"),
            "kt_gpt2_unresolved": named("not resolved from zero"),
            "kt_gpt2_paper": mean("ours_paper"), "kt_gpt2_paper_fix": mean("ours_paper+fix"),
            "kt_gpt2_authors": mean("authors"), "kt_gpt2_authors_fix": mean("authors+fix"),
            "kt_gpt2_fa2": mean("ours_fa2"),
            "kt_gpt2_fix_label": kernel_label("ours_paper+fix", d["labels"]) if "ours_paper+fix" in rows else "—",
            # How the authors' fix moves their code's mean error on these rows, and whether the paper placement's
            # error there exceeds one ULP (chapter 1's planted bias is a fraction of one).
            "kt_gpt2_authors_fix_way": _moved(rows.get("authors"), rows.get("authors+fix")),
            "kt_gpt2_paper_size": ("—" if "ours_paper" not in rows else "more than one ULP"
                                   if abs(rows["ours_paper"]["mean"]) > 1 else "within one ULP")}


def _moved(before: dict | None, after: dict | None) -> str:
    """Where a fix moves a cell's mean error, in words: "to the other side of zero and further from it", "…and
    closer to it", "on the same side, further from zero" or "…closer to zero" ("—" when either cell is missing)."""
    if before is None or after is None:
        return "—"
    side = "to the other side of zero and" if before["mean"] * after["mean"] < 0 else "on the same side,"
    return f"{side} {'further from' if abs(after['mean']) > abs(before['mean']) else 'closer to'} zero"


def _direction(cell: dict) -> str:
    """Which way a table cell's 95 % interval (Student's t) puts the error along sign(V)."""
    cell = student_interval(cell)
    if cell["lo"] > 0:
        return "away from zero"
    if cell["hi"] < 0:
        return "toward zero"
    return "not resolved from zero"


def _planted_errors(name: str, shape, seeds, gap: float, tied_sign_rest: bool) -> dict:
    """`kernel_table.summarize` of kernel `name`'s error along sign(V) on the table's planted concentrated ties, with
    the other keys' V of random sign or of the tied keys' sign (the table's own inputs)."""
    import torch
    from lib.studies.practice import kernel_table as kt
    fn, means = kt.kernel_fn(name), []
    for seed in seeds:
        q, k, v, sign = kt.planted(*shape, gap, seed, "cpu", rest="tied" if tied_sign_rest else "random")
        e = kt.along_sign(fn(q, k, v, False), kt.fp64_attention(q, k, v, False), sign[:, :, None, :])
        means.append(kt.problem_means(e, torch.ones_like(e, dtype=torch.bool), 2))
    return kt.summarize(np.concatenate(means))


def remainder_sign_check(shape=(1, 4, 128, 16), seeds=(0, 1), gap: float = 14.0, kernels=CHECK_KERNELS) -> dict:
    """The sign condition of the tie bias, on the CPU: the kernel table's planted concentrated ties (two tied keys
    `gap` nats above the rest, tied V of one sign per feature) with the other keys' V of random sign and with the
    same magnitudes given the tied keys' sign (as the table plants them). The sticky bit pushes the rounding of the tied sum the way the
    remainder Σ P̄V of the other keys points; only a remainder of the tied sign makes that push away from zero.
    Returns {"random"|"tied": {kernel: summary}, "shape", "n_problems"}."""
    out = {which: {k: _planted_errors(k, shape, seeds, gap, which == "tied") for k in kernels}
           for which in ("random", "tied")}
    return out | {"shape": list(shape), "n_problems": shape[0] * shape[1] * len(seeds), "gap": gap}


def check_numbers(check: dict) -> dict:
    """Glue names of `remainder_sign_check`: "ck_<which>_<kernel>" (mean [Student-t interval]) and
    "ck_<which>_<kernel>_way" (which way that interval puts the error along sign(V)), the size and the intervals'
    degrees of freedom."""
    out = {f"ck_{w}_{k}": _interval(s) for w in ("random", "tied") for k, s in check[w].items()}
    out |= {f"ck_{w}_{k}_way": _direction(s) for w in ("random", "tied") for k, s in check[w].items()}
    B, H, T, D = check["shape"]
    return out | {"ck_n": check["n_problems"], "ck_shape": f"{B}·{H}·{T}·{D}", "ck_dof": check["n_problems"] - 1}


def ntr_numbers(res) -> dict:
    """Chapter 1's measurement of the FA2 order — normalise, then round O once — on planted tied rows (`bias_kernel`:
    k = 2 tied maxima, V of one sign in every row), at the larger of the two gaps chapter 1 shows (14 and 16 nats):
    per path (the GPU's tensor cores "native", the emulated kernel, numpy's sequential FP32 accumulation) the mean
    error of O in ULP without the fix ("o1_<path>") and with the β shift ("o1_<path>_fix"), signed as chapter 1 signs
    it, and which way it points ("o1_<path>_way", "o1_<path>_fix_way": toward or away from zero, or not resolved
    from zero where chapter 1's interval holds 0)."""
    from lib.book import catalogue
    cfg = res.meta["config"]
    if cfg["frac_neg"] not in (0.0, 1.0):
        raise ValueError("the direction of the error is defined here only for V of one sign")
    v_sign = -1.0 if cfg["frac_neg"] == 1.0 else 1.0
    cells = {(c["k"], c["gap"], c["method"], c["path"]): c for c in res.data["cells"]}
    gap = max({c["gap"] for c in res.data["cells"]} & {14.0, 16.0})

    def way(c):      # its interval (chapter 1's half-width, `o_ntr_ci`) must exclude 0
        if abs(c["o_ntr"]) <= c["o_ntr_ci"]:
            return "not resolved from zero"
        return "toward zero" if c["o_ntr"] * v_sign < 0 else "away from zero"
    out = {"o1_gap": f"{gap:g}", "o1_k": 2, "o1_keys": cfg["n_keys"], "o1_beta": f"{cfg['beta']:g}",
           "o1_v": "V < 0" if v_sign < 0 else "V > 0",
           "o1_positive": "toward zero" if v_sign < 0 else "away from zero", "o1_device": catalogue.device(res.meta),
           "o1_native_measured": (2, gap, "rne", "native") in cells}
    for path in ("native", "emulated", "numpy"):
        for method, suffix in (("rne", ""), ("beta", "_fix")):
            c = cells.get((2, gap, method, path))
            out[f"o1_{path}{suffix}"] = _num(c["o_ntr"], "+.3f") if c else "—"
            out[f"o1_{path}{suffix}_way"] = way(c) if c else "not measured"
    return out


# ------------------------------------------------------------------------------------------------ the monitor demo
def planted_demo(seed: int = 0, steps: int = 6, gain: float = PLANT_GAIN):
    """(model, optimizer, batches) of the monitor demo: a GPT of 2 layers × 2 heads (C = 32, T = 32, vocabulary
    64) without positional embeddings, so a token repeated in a row gives the first layer identical keys (ties, in both
    heads); head `PLANT_HEAD` of layer `PLANT_LAYER` has its q and k weights scaled by `gain`, so its attention
    concentrates on those keys and some tied rows have a remainder in the sticky-bit window. `steps` batches of 4 rows
    of tokens from `ALPHABET` symbols; AdamW at LR 1e-3."""
    import torch
    from lib.training.model import GPTConfig, build_lm
    torch.manual_seed(seed)
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=64, attn="sdpa", pos="none")
    model = build_lm(cfg)
    C, D = cfg.n_embd, cfg.head_dim
    with torch.no_grad():
        w = model.transformer.h[PLANT_LAYER].attn.c_attn.weight   # (3C, C): rows [0, C) give q, [C, 2C) give k
        h = PLANT_HEAD * D
        w[h:h + D] *= gain
        w[C + h:C + h + D] *= gain
    batches = []
    for s in range(steps):
        x = torch.randint(0, ALPHABET, (4, cfg.block_size), generator=torch.Generator().manual_seed(seed + s))
        batches.append((x, torch.roll(x, -1, 1)))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), batches


def run_monitor_demo(path, steps: int = 6, every: int = 2):
    """The chapter's usage example as a function: `planted_demo`, then the training loop with `AttentionMonitor`
    around it (events every `every` steps on both layers, JSON lines to `path`). Its warnings are kept in the records
    (and returned as Python warnings, which this function silences). Returns the monitor."""
    from lib.monitor import AttentionMonitor, MonitorWarning
    model, optimizer, batches = planted_demo(steps=steps)
    mon = AttentionMonitor(model, every=every, out=path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MonitorWarning)
        for step, (x, y) in enumerate(batches):
            mon.step(step)
            model(x, y)[1].backward()
            mon.collect(step)
            optimizer.step()
            optimizer.zero_grad()
    return mon


def monitor_demo_numbers(path) -> dict:
    """What the demo's JSON lines say, read back with `AttentionMonitor.read`: a Markdown table of the planted layer
    per event and head ("md_table"), the largest rates of each (layer, head) over the events, the O error on the
    conjunction (measured, tie theory, rounding of ℓ) of the planted head, the planted layer and head and the other
    ones ("md_plant_layer", "md_plant_head", "md_other_head", "md_other_layer"; 0-based, as the records index them),
    and the warnings ("md_warnings", a code block)."""
    from lib.monitor import AttentionMonitor
    d = AttentionMonitor.read(path)
    S, L, H = d["conjunction"].shape
    lay, hd = PLANT_LAYER, PLANT_HEAD
    other = 1 - hd                                  # the demo has two heads a layer and two layers
    rows = ["| step | head | tied rows | in window | conjunction | largest logit | σ₁(W_Q) |", "|---" * 7 + "|"]
    for i, s in enumerate(d["step"]):
        for h in range(H):
            rows.append(f"| {s} | {h} | {d['tie_rate'][i, lay, h]:.2f} | {d['window_rate'][i, lay, h]:.3f} | "
                        f"{d['conjunction'][i, lay, h]:.3f} | {d['max_logit'][i, lay, h]:.3g} | "
                        f"{d['sigma_wq'][i, lay, h]:.2f} |")
    w = np.nan_to_num(d["n_conj"][:, lay, hd])
    err = {k: float(np.nansum(np.nan_to_num(d[k][:, lay, hd]) * w) / w.sum()) if w.sum() else float("nan")
           for k in ("err_ulp", "err_pred", "err_ell")}
    msgs_at = d["warnings"]
    msgs = [m for _, _, m in msgs_at]
    per_head = lambda key: {(l, h): float(np.nanmax(d[key][:, l, h])) for l in range(L) for h in range(H)}  # noqa: E731
    return {"md_table": "\n".join(rows), "md_steps": ", ".join(str(s) for s in d["step"]), "md_layers": L,
            "md_max_tie": per_head("tie_rate"),
            "md_max_window": per_head("window_rate"), "md_max_conj": per_head("conjunction"),
            "md_planted_tie": f"{np.nanmax(d['tie_rate'][:, lay, hd]):.2f}",
            "md_other_tie": f"{np.nanmax(d['tie_rate'][:, lay, other]):.2f}",
            "md_planted_conj": f"{np.nanmax(d['conjunction'][:, lay, hd]):.3f}",
            "md_layer1_window": f"{np.nanmax(d['window_rate'][:, 1 - lay, :]):.3f}",
            "md_plant_layer": lay, "md_plant_head": hd, "md_other_head": other, "md_other_layer": 1 - lay,
            "md_err": _num(err["err_ulp"]), "md_pred": _num(err["err_pred"]), "md_ell": _num(err["err_ell"]),
            "md_n_warn": len(msgs), "md_warn_steps": ", ".join(str(s) for s in sorted({s for s, _, _ in msgs_at})),
            "md_warnings": "```text\n" + ("\n".join(msgs) or "(no warnings)") + "\n```"}


# ------------------------------------------------------------------------------------------------ GPT-2, monitored
def _census(res, placement: str, key: str) -> np.ndarray:
    run = res.data["runs"][0]["label"]
    return np.asarray(res.arrays[f"{run}__census__{placement}/{key}"], dtype=np.float64)


def monitor_view(res, layer: int, placement: str = "authors") -> dict:
    """The census of a training result (`gpt2_regime`: the monitor's own census, every `census_every` steps) for one
    layer, as the monitor's records hold it: "step" (E,), "conjunction", "max_logit", "sigma" (E, H), and the
    warnings `AttentionMonitor` would have raised on them with its default `Thresholds` — its own rule
    (`AttentionMonitor._warnings`, the method `collect` calls), fed event by event: "warnings" [(step, kind,
    message)], kind "conjunction", "rise" or "logit"; "first" {kind: first step or None}."""
    from lib.monitor import Thresholds
    from lib.studies.practice.lead_time import KINDS, replay
    run = res.data["runs"][0]["label"]
    steps = np.asarray(res.arrays[f"{run}__census__step"])
    conj = np.nan_to_num(_census(res, placement, "conjunction")[:, layer])
    logit = _census(res, placement, "max_logit")[:, layer]
    found = [(s, kind, m) for s, _, kind, m in replay(steps, conj[:, None], logit[:, None], placement, layers=[layer])]
    first = {k: min((s for s, kk, _ in found if kk == k), default=None) for k in KINDS}
    sigma = np.asarray(res.arrays[f"{run}__census__wq_sigma"], dtype=np.float64)[:, layer]
    return dict(step=steps, conjunction=conj, max_logit=logit, sigma=sigma, warnings=found, first=first,
                thresholds=Thresholds(), layer=layer, placement=placement)


def first_warnings(res) -> dict:
    """{(placement, layer): `monitor_view(...)["first"]`} for every layer of the result, both placements."""
    L = _census(res, "authors", "conjunction").shape[1]
    return {(p, l): monitor_view(res, l, p)["first"] for p in ("authors", "fa2") for l in range(L)}


def watched_layer(res) -> int:
    """The layer (0-based) whose conjunction warning (authors' placement, rate above the threshold) fires first."""
    firsts = first_warnings(res)
    hits = [(f["conjunction"], l) for (p, l), f in firsts.items() if p == "authors" and f["conjunction"] is not None]
    if not hits:
        raise ValueError("no layer's conjunction rate passes the monitor's threshold in this result")
    return min(hits)[1]


def gpt2_monitor_numbers(res) -> dict:
    """The GPT-2 run seen through the monitor: per layer, when each warning would first have fired ("g2_md", only
    the layers with a warning), and in the layer whose conjunction warning fires first (1-based in the glue) the
    largest rates, the logit and σ₁(W_Q) at that point; the thresholds."""
    firsts = first_warnings(res)
    L = max(l for _, l in firsts) + 1
    cell = lambda s: "—" if s is None else f"{s:,}"  # noqa: E731
    th = monitor_view(res, 0)["thresholds"]
    md = [f"| layer | authors': above {100 * th.conjunction:g} % | authors': {th.rise:g}× rise | FA2: above "
          f"{100 * th.conjunction:g} % | FA2: {th.rise:g}× rise | logit above {th.max_logit:g} |", "|---" * 6 + "|"]
    quiet = []
    for l in range(L):
        a, f = firsts[("authors", l)], firsts[("fa2", l)]
        if all(v is None for v in (*a.values(), *f.values())):
            quiet.append(str(l + 1))
            continue
        md.append(f"| {l + 1} | {cell(a['conjunction'])} | {cell(a['rise'])} | {cell(f['conjunction'])} | "
                  f"{cell(f['rise'])} | {cell(a['logit'])} |")
    logit = [(f["logit"], l) for (p, l), f in firsts.items() if p == "authors" and f["logit"] is not None]
    # the tenfold rise of a layer's conjunction rate: its other conjunction warning, early but not specific
    rise = [(f["rise"], l) for (p, l), f in firsts.items() if p == "authors" and f["rise"] is not None]
    conj_layers = sorted(l + 1 for (p, l), f in firsts.items() if p == "authors" and f["conjunction"] is not None)
    fa2_layers = sorted(l + 1 for (p, l), f in firsts.items()
                        if p == "fa2" and (f["conjunction"] is not None or f["rise"] is not None))
    layer = watched_layer(res)
    run = res.data["runs"][0]
    out = {"g2_md": "\n".join(md), "g2_quiet": ", ".join(quiet) or "none", "g2_layer": layer + 1,
           "g2_every": run["config"]["census_every"], "g2_steps": f"{run['steps']:,}", "g2_label": res.label,
           "g2_n_logit_layers": len(logit), "g2_first_logit": f"{min(logit)[0]:,}" if logit else "never",
           "g2_first_logit_layer": min(logit)[1] + 1 if logit else "",
           "g2_n_rise_layers": len(rise), "g2_first_rise": f"{min(rise)[0]:,}" if rise else "never",
           "g2_first_rise_layer": min(rise)[1] + 1 if rise else "",
           "g2_rise_vs_logit": ("no layer's rate rose tenfold" if not rise else
                                "before any logit warning" if not logit or min(rise)[0] < min(logit)[0] else
                                "at the first logit warning's event" if min(rise)[0] == min(logit)[0] else
                                "after the first logit warning"),
           "g2_conj_layers": " and ".join(map(str, conj_layers)), "g2_n_conj_layers": len(conj_layers),
           "g2_fa2_layers": " and ".join(map(str, fa2_layers)) or "none",
           "th_conj": f"{100 * th.conjunction:g} %", "th_rise": f"{th.rise:g}", "th_floor": f"{th.floor:g}",
           "th_logit": f"{th.max_logit:g}"}
    for p in ("authors", "fa2"):
        v = monitor_view(res, layer, p)
        out |= {f"g2_{p}_{k}": (f"{s:,}" if s is not None else "never") for k, s in v["first"].items()}
        out[f"g2_{p}_max_conj"] = f"{v['conjunction'].max():.3f}"
    v = monitor_view(res, layer, "authors")
    first = v["first"]["conjunction"]
    i = int(np.nonzero(v["step"] == first)[0][0])
    out |= {"g2_logit_at": f"{v['max_logit'][i].max():,.0f}", "g2_sigma_start": f"{v['sigma'][0].max():.2f}",
            "g2_sigma_at": f"{v['sigma'][i].max():.2f}", "g2_sigma_end": f"{v['sigma'][-1].max():.1f}",
            "g2_logit_end": f"{v['max_logit'][-1].max():,.0f}"}
    return out


def monitor_lead_numbers(res) -> dict:
    """How much notice the conjunction warning gives over the logit warning, in the layer where it fires first
    (`watched_layer`, authors' placement): the first step of each there ("g2_lead_conj", "g2_lead_logit"), how many
    steps earlier the conjunction warning fires ("g2_lead": logit's first step minus conjunction's, 0 when they fire
    at the same event, negative when the logit warning comes first; "g2_lead_words" the same in words), the first
    logit warning in any layer ("g2_lead_any_logit"), and what that means ("g2_lead_claim", "g2_lead_adds": whether
    the conjunction warning came before every logit warning)."""
    layer = watched_layer(res)
    first = monitor_view(res, layer, "authors")["first"]
    anywhere = [f["logit"] for (p, _), f in first_warnings(res).items() if p == "authors" and f["logit"] is not None]
    lead = first["logit"] - first["conjunction"] if first["logit"] is not None else None
    earlier = (lead is None or lead > 0) and (not anywhere or min(anywhere) > first["conjunction"])
    return {"g2_lead_claim": ("It came before any logit warning" if earlier else "It gave no earlier notice"),
            "g2_lead_adds": ("" if earlier else "What the conjunction warning adds in this run is where the "
                             "preconditions are, not an earlier warning."),
            "g2_lead_conj": f"{first['conjunction']:,}", "g2_lead_logit": _step(first["logit"]),
            "g2_lead": "—" if lead is None else f"{lead:,}", "g2_lead_steps": lead,
            "g2_lead_any_logit": _step(min(anywhere) if anywhere else None),
            "g2_lead_words": ("at the same event as" if lead == 0 else
                              f"{lead:,} steps before" if lead is not None and lead > 0 else
                              f"{-lead:,} steps after" if lead is not None else "without")}


def _step(step) -> str:
    """A step with thousands separators, or "never"."""
    return "never" if step is None else f"{step:,}"


# ------------------------------------------------------------------------------------------------ the fix
def fix_numbers() -> dict:
    """The recommended settings, read from the code: the user kernel's defaults (β, the shift cap), the fix's window
    at that β (ineffective below x₁/(β − 1); without the cap a row with FP32 P̄ and ℓ underflows above
    underflow/(β − 1) where subnormals survive, "fx_uf", and above the normal range's edge on the GPU, "fx_uf_gpu"),
    and the authors' clamp of ℓ with the tied maximum above which it drops rows, at β = 7 and
    at the user kernel's β."""
    from kernels.stable_attention import stable_attention
    from lib.fp import beta_theory as bt
    from lib.fp.fix import Fix
    from lib.training.authors_fa import authors_attention
    from lib.training.zero_rows import OURS_ZERO_AT
    p = inspect.signature(stable_attention).parameters
    beta, cap = float(p["beta"].default), float(p["max_shift"].default)
    floor = float(inspect.signature(authors_attention).parameters["row_sum_floor"].default)
    level = -math.log(floor)
    x1, xu = bt.x_round_to_one(7), bt.underflow_x("fp32")
    return {"fx_beta": f"{beta:g}", "fx_cap": f"{cap:g}", "fx_paper_beta": f"{Fix().beta:g}",
            "fx_lo": f"{x1 / (beta - 1):.4f}", "fx_uf": f"{xu / (beta - 1):.0f}", "fx_floor": f"{floor:g}",
            "fx_floor_level": f"{level:.1f}", "fx_floor_b7": f"{level / (Fix().beta - 1):.2f}",
            "fx_floor_b2": f"{level / (beta - 1):.1f}", "fx_min_weight": f"{math.exp(-cap):.1e}",
            # on the GPU the exponential flushes below FP32's normal range: the row goes earlier than `fx_uf`
            "fx_uf_gpu": f"{OURS_ZERO_AT / (beta - 1):.0f}"}


# ------------------------------------------------------------------------------------------------ the dev log
def dev_log(path=DEV_LOG) -> dict:
    """The development measurement's log, parsed: "header" (its first line), "bench" (the JSON the benchmark wrote),
    "tests" (the GPU tests' progress line, e.g. "....F.F."), "dq" {"counts": {tensor: (differing, total)},
    "counts_their_fwd": the same with the user kernel's backward on the research kernel's forward outputs (the log's
    "ours" is the user kernel, "their" the research kernel, as in tests/gpu/test_stable_attention_gpu.py),
    "examples": [(index (b, h, row, col), value, value)], "rows_head0": [rows], "rows_total": n}."""
    text = Path(path).read_text()
    header = text.splitlines()[0].lstrip("# ").strip()
    parts = re.split(r"## ([^\n]+)\n", text)            # [preamble, title, body, title, body, ...]
    sec = dict(zip(parts[1::2], parts[2::2]))
    bench = json.loads(sec["stable_attention_bench.json"])
    tests_title = next(t for t in sec if t.startswith("GPU tests"))
    tests = sec[tests_title].strip()
    body = next(b for t, b in sec.items() if t.startswith("dQ comparison"))
    first, _, second = body.splitlines()[0].partition("|")
    counts = lambda s: {n: (int(a), int(b)) for n, a, b in re.findall(r"(\w+) (\d+)/(\d+)", s)}  # noqa: E731
    examples = [(tuple(int(i) for i in idx.split(", ")), float(a), float(b))
                for idx, a, b in re.findall(r"\[(\d+(?:, \d+){3})\] (\S+) (\S+)", body)]
    m = re.search(r"rows differing \(head 0\): \[([\d, ]+)\] (\d+)", body)
    return dict(header=header, bench=bench, tests=tests, tests_title=tests_title,
                dq=dict(counts=counts(first), counts_their_fwd=counts(second), examples=examples,
                        rows_head0=[int(r) for r in m.group(1).split(",")], rows_total=int(m.group(2))))


def _round_ratios(shape: dict, a: str, b: str, mode: str) -> list[float]:
    """Per interleaved round: how many times faster `a` is than `b` (b's time / a's time)."""
    ms = shape["ms_per_round"]
    return [tb / ta for ta, tb in zip(ms[f"{a} {mode}"], ms[f"{b} {mode}"])]


def dev_shape_numbers(shape: dict, targets: dict | None = None) -> dict:
    """One shape of the development measurement against the targets (medians over rounds, as the benchmark reports
    them; per-round values as a span): speed-ups of the user kernel's forward+backward over cuDNN and flash, the
    fix's extra time (forward+backward and forward), TFLOP/s and its fraction of the H100 SXM's dense BF16 peak
    (`H100_SXM_DENSE_BF16_TFLOPS`, the datasheet's; not the log's own "fraction_of_peak") and, where the record has
    it, of the matmul ceiling measured beside it; `targets`: `TARGETS` unless given."""
    targets = targets or TARGETS
    out = {}
    for other in ("cudnn", "flash"):
        per = _round_ratios(shape, "stable", f"sdpa_{other}", "fwd+bwd")
        val = shape["ratios"][f"stable over sdpa_{other} fwd+bwd (speed-up)"]
        out[other] = dict(value=val, lo=min(per), hi=max(per), met=val >= targets[other],
                          firm=min(per) >= targets[other] or max(per) < targets[other])
    for mode in ("fwd+bwd", "fwd"):
        per = [r - 1.0 for r in _round_ratios(shape, "stable", "stable_fix", mode)]
        val = shape["fix_cost"][mode]
        out[f"fix {mode}"] = dict(value=val, lo=min(per), hi=max(per), met=val <= targets["fix"],
                                  firm=max(per) <= targets["fix"] or min(per) > targets["fix"])
    for impl in ("stable", "sdpa_cudnn", "sdpa_flash"):
        out[f"tflops {impl}"] = shape[f"{impl} fwd+bwd"]["tflops"]
        out[f"peak {impl}"] = shape[f"{impl} fwd+bwd"]["tflops"] / H100_SXM_DENSE_BF16_TFLOPS
        if "fraction_of_matmul" in shape[f"{impl} fwd+bwd"]:
            out[f"matmul {impl}"] = shape[f"{impl} fwd+bwd"]["fraction_of_matmul"]
    return out


def _span(xs) -> str:
    """'21–41 %': the range of per-cent values, rounded."""
    xs = sorted(xs)
    return f"{xs[0]:.0f}–{xs[-1]:.0f} %"


def _speed_cell(r: dict) -> str:
    return f"{r['value']:.2f}× ({r['lo']:.2f}–{r['hi']:.2f}): {'met' if r['met'] else 'not met'}"


def _cost_cell(r: dict) -> str:
    pct = lambda x: _num(100 * x, "+.1f")  # noqa: E731
    return f"{pct(r['value'])} % ({pct(r['lo'])} to {pct(r['hi'])}): {'met' if r['met'] else 'not met'}"


def dev_log_numbers(log: dict) -> dict:
    """Glue names of the development measurement (`speed_numbers` of its log's benchmark record) and of the dQ
    difference it found ("dq_…")."""
    meta, shapes = log["bench"]["meta"], log["bench"]["shapes"]
    date = re.search(r"\d{4}-\d{2}-\d{2}", log["header"])
    return speed_numbers(meta, shapes, date.group(0) if date else "") | dq_numbers(log)


def speed_numbers(meta: dict, shapes: list[dict], date: str, cite: str | None = None, targets: dict | None = None,
                  matmul: dict | None = None) -> dict:
    """Glue names ("dev_…") of a speed measurement of the user kernel — the development log's (`cite` None: "not a
    registered result") or the registered `stable_attention_bench`'s (`cite`: the result named for prose) —: its
    provenance in words ("dev_intro"), the cost table ("dev_md": one column per shape), the verdicts against
    `targets` per shape and how many of them its rounds leave unsettled, and what the datasheet's peak and the
    measured matmul ceiling (`matmul`, the benchmark's record; None: not measured) say ("dev_ceiling")."""
    targets = targets or TARGETS
    per = [dev_shape_numbers(s, targets) for s in shapes]
    names = ["·".join(str(x) for x in s["shape"]) for s in shapes]
    impls = ("stable", "sdpa_cudnn", "sdpa_flash")
    fix = f"{100 * targets['fix']:g} %"
    rows = [(f"speed-up over {name}, fwd + bwd (target ≥ {targets[key]:g}×)", [_speed_cell(p[key]) for p in per])
            for key, name in (("cudnn", "cuDNN"), ("flash", "flash"))]
    rows += [(f"fix's extra time, {mode.replace('+', ' + ')} (target ≤ {fix})",
              [_cost_cell(p[f"fix {mode}"]) for p in per]) for mode in ("fwd+bwd", "fwd")]
    rows += [("TFLOP/s fwd + bwd: ours, cuDNN, flash",
              [", ".join(f"{p[f'tflops {i}']:.0f}" for i in impls) for p in per]),
             (f"fraction of {H100_SXM_DENSE_BF16_TFLOPS:g} TFLOP/s (datasheet peak)",
              [", ".join(f"{100 * p[f'peak {i}']:.0f} %" for i in impls) for p in per])]
    if matmul and all(f"matmul {i}" in p for p in per for i in impls):
        rows.append((f"fraction of the measured matmul ceiling ({matmul['tflops']:.0f} TFLOP/s)",
                     [", ".join(f"{100 * p[f'matmul {i}']:.0f} %" for i in impls) for p in per]))
    # At most two shapes a table: with more, a table's unbreakable headers and cells outgrow the book's column.
    md = []
    for i in range(0, len(names), 2):
        md += ([""] if md else []) + ["| B·H·T·D | " + " | ".join(names[i:i + 2]) + " |",
                                      "|---" * (len(names[i:i + 2]) + 1) + "|"]
        md += [f"| {label} | " + " | ".join(cells[i:i + 2]) + " |" for label, cells in rows]
    verdicts = [p[k] for p in per for k in ("cudnn", "flash", "fix fwd+bwd", "fix fwd")]

    def where(key):
        hit = [n for n, p in zip(names, per) if p[key]["met"]]
        return ("met at every shape" if len(hit) == len(per) else "met at no shape" if not hit
                else f"met at {', '.join(hit)} only")
    hd = " and ".join(sorted({str(s["shape"][3]) for s in shapes}, key=int))
    what = (f"one {meta['device']} ({date}, PyTorch {meta['torch'].split('+')[0]}, causal, BF16, head dim{'s' if ' and ' in hd else ''} "
            f"{hd}; medians of Triton's benchmark timer over {meta['rounds']} interleaved rounds, per-round values in "
            "brackets)")
    intro = (f"A development measurement on {what}. It is not a registered result: no provenance fingerprint, "
             f"{meta['rounds']} rounds only." if cite is None else f"The registered benchmark ({cite}) on {what}.")
    span = _span(100 * p[f"peak {i}"] for p in per for i in impls)
    ceiling = (f"A BF16 matmul of {matmul['size']}³ on the same GPU reached {matmul['tflops']:.0f} TFLOP/s, "
               f"{100 * matmul['fraction_of_peak']:.0f} % of that peak: the measured ceiling, of which the kernels "
               f"reach {_span(100 * p[f'matmul {i}'] for p in per for i in impls)}."
               if matmul and all(f"matmul {i}" in p for p in per for i in impls) else
               f"No matmul ceiling was measured on that machine, so how close these fractions ({span}) come to a rate "
               "the GPU reaches in practice is not known.")
    return {"dev_md": "\n".join(md), "dev_device": meta["device"], "dev_rounds": meta["rounds"], "dev_date": date,
            "dev_torch": meta["torch"].split("+")[0], "dev_intro": intro, "dev_ceiling": ceiling,
            "dev_cudnn_ok": where("cudnn"), "dev_flash_ok": where("flash"), "dev_fix_ok": where("fix fwd+bwd"),
            "dev_fix_fwd_ok": where("fix fwd"), "dev_n_verdicts": len(verdicts),
            "dev_unfirm": sum(not v["firm"] for v in verdicts),
            "dev_hd": hd, "dev_t_cudnn": f"{targets['cudnn']:g}", "dev_t_flash": f"{targets['flash']:g}",
            "dev_t_fix": fix, "dev_peak": f"{H100_SXM_DENSE_BF16_TFLOPS:g}",
            "dev_peak_sparse": f"{H100_SXM_SPARSE_BF16_TFLOPS:,.0f}", "dev_peak_range": span,
            "dev_split": split_words(shapes)}


def _config_words(conf: str) -> str:
    """'BLOCK_M: 64, BLOCK_N: 64, …, num_warps: 4, …' (Triton's config string) -> 'tiles of 64 query rows × 64 keys
    at 4 warps'."""
    kv = dict(re.findall(r"(\w+): (\w+)", conf))
    return (f"tiles of {kv.get('BLOCK_M', '?')} query rows × {kv.get('BLOCK_N', '?')} keys at "
            f"{kv.get('num_warps', '?')} warps")


def split_words(shapes: list[dict]) -> str:
    """Where the user kernel's time goes against cuDNN's, per shape (B·H·T·D): the forward's speed-up over cuDNN's
    forward (the benchmark's median ratio) and the backward's, taken as forward + backward less forward (from the
    medians of each); then the forward tiles the autotuner chose (query rows × keys, warps), where the record has
    them. "" for a record without forward timings."""
    cells = []
    for s in shapes:
        if "stable fwd" not in s or "sdpa_cudnn fwd" not in s:
            return ""
        bwd = ((s["sdpa_cudnn fwd+bwd"]["ms"] - s["sdpa_cudnn fwd"]["ms"])
               / (s["stable fwd+bwd"]["ms"] - s["stable fwd"]["ms"]))
        fwd = s["ratios"]["stable over sdpa_cudnn fwd (speed-up)"]
        cells.append(f"{'·'.join(map(str, s['shape']))}: forward {fwd:.2f}×, backward {bwd:.2f}×")
    out = ("Speed-up over cuDNN per shape, of our forward alone and of our backward (forward + backward less "
           "forward, from the medians): " + "; ".join(cells) + ".")
    tiles = [_config_words(s["configs"]["fwd"][0]) for s in shapes if s.get("configs", {}).get("fwd")]
    if tiles:
        same = len(set(tiles)) == 1
        out += (" The autotuner chose, for the forward, " + (f"{tiles[0]} at every shape" if same else
                                                             "; ".join(tiles)) + ".")
    return out


def bench_numbers(res) -> dict:
    """`speed_numbers` of the registered `stable_attention_bench` result `res`, against `REGISTERED_TARGETS`."""
    from lib.book import catalogue
    d = res.data
    return speed_numbers(d, d["shapes"], str(res.meta.get("created_utc", ""))[:10], cite=catalogue.cite(res),
                         targets=REGISTERED_TARGETS, matmul=d.get("matmul"))


def delta_cost_words(data: dict | None) -> str:
    """What `stable_attention(..., delta="fp32_o")` adds to a forward + backward over plain `stable_attention`, per
    shape (B·H·T·D), from the registered speed benchmark's data (medians over rounds), against `TARGETS["delta"]`;
    says so when the benchmark has not run."""
    cells = [(s["shape"], s["delta_fp32_o_cost"]["fwd+bwd"]) for s in (data or {}).get("shapes", [])
             if "fwd+bwd" in s.get("delta_fp32_o_cost", {})]
    if not cells:
        return "What it costs in time is not measured yet."
    bad = [x for _, x in cells if x > TARGETS["delta"]]
    verdict = ("met at every shape" if not bad else "met at no shape" if len(bad) == len(cells)
               else f"met at {len(cells) - len(bad)} of {len(cells)} shapes")
    return (f"On one {data['device']} it adds to a forward + backward, over the user kernel without it (medians of "
            f"{data['rounds']} rounds): " + "; ".join(f"{_num(100 * x, '+.1f')} % at {'·'.join(map(str, sh))}"
                                                     for sh, x in cells)
            + f" (target ≤ {100 * TARGETS['delta']:g} %: {verdict}).")


def gpu_dq_check(path=GPU_TESTS_LOG) -> dict | None:
    """The GPU test of the development run's dQ difference (tests/gpu/test_stable_attention_gpu.py,
    `test_causal_ties_dq_against_the_oracle`) as the committed GPU test log prints it: {"device", "date", "passed"
    (the log's verdict line), "rows": {label: {"differ" (rows whose dQ differs from the research kernel's), "far"
    (rows more than "tol" from the CPU oracle), "tol", "max" (the largest difference from it)}}}, one entry per
    kernel build, the first printing of each; None when the log has no such lines."""
    text = Path(path).read_text()
    pat = (r"\[causal ties dQ\] (.+?): (\d+) rows differ from the research kernel \(max \S+?;.*?\), (\d+) rows > "
           r"(\S+) from the oracle \(max (\S+?)\)")
    rows = {}
    for label, differ, far, tol, mx in re.findall(pat, text):
        rows.setdefault(label, dict(differ=int(differ), far=int(far), tol=float(tol), max=float(mx)))
    if not rows:
        return None
    head = text.splitlines()[:2]
    date = re.search(r"\d{4}-\d{2}-\d{2}", head[0])
    device = re.match(r"# device: ([^(]+?)\s*(\(|$)", head[1])
    return dict(device=device.group(1) if device else "GPU", date=date.group(0) if date else "",
                passed=" passed " in head[0], rows=rows)


def gpu_dq_numbers(check: dict | None) -> dict:
    """Glue names of `gpu_dq_check` ("dqg_…"): the research kernel's emulated dQ against the CPU oracle, and whether
    the user kernel's checking mode (its default build) gives the same dQ."""
    if check is None:
        return {"dqg_words": "The GPU test that referees it has not run yet."}
    r, u = check["rows"].get("research (4 warps)"), check["rows"].get("EMULATE default")
    if r is None or u is None:
        return {"dqg_words": "The GPU test that referees it printed no result for both kernels."}
    same = ("the same dQ in every row" if u["differ"] == 0 else f"dQ differing in {u['differ']:,} rows")
    return {"dqg_words": (
        f"In the GPU test run of {check['date']} (one {check['device']}"
        + ("" if check["passed"] else "; that run did not pass as a whole") + f"), on the same inputs, the research "
        f"kernel's emulated path has {r['far'] or 'no'} row{'' if r['far'] == 1 else 's'} more than {r['tol']:g} "
        f"from the CPU oracle (largest "
        f"difference {r['max']:.2g}), and the user kernel's checking mode gives {same}.")}


def dq_numbers(log: dict) -> dict:
    """Glue names of the dQ difference recorded in the development log ("dq_…"); "dq_run": that run in words (its
    date and GPU, from the log's header and benchmark record)."""
    dq = log["dq"]
    date = re.search(r"\d{4}-\d{2}-\d{2}", log["header"])
    c, c2 = dq["counts"], dq["counts_their_fwd"]
    names = {"o": "O", "lse": "LSE", "delta": "δ", "dk": "dK", "dv": "dV"}
    diffs = [abs(a - b) for _, a, b in dq["examples"]]
    return {"dq_diff": f"{c['dq'][0]:,}", "dq_total": f"{c['dq'][1]:,}",
            "dq_agree": ", ".join(names.get(n, n) for n, (k, _) in c.items() if k == 0 and n != "ties"),
            "dq_their_fwd_diff": f"{c2['dq'][0]:,}", "dq_rows_total": dq["rows_total"],
            "dq_rows_head0": _ranges(dq["rows_head0"]), "dq_rows_all": c["lse"][1],
            "dq_ex_diff": f"{max(diffs):.3f}" if diffs else "", "dq_ex_n": len(diffs),
            "dq_tests_failed": log["tests"].count("F"), "dq_tests_n": len(log["tests"]),
            "dq_run": (f"the development run of the user kernel's speed ({date.group(0) + ', ' if date else ''}one "
                       f"{log['bench']['meta']['device']})")}


# FlashAttention's FLOP convention, as the benchmarks count it: a backward is 2.5 forwards (a test ties the two).
BWD_PER_FWD = 2.5


# ------------------------------------------------------------------------------------------------ what it costs
def _share(x: float) -> str:
    """A share of a step in per cent, with two significant digits below 10 %."""
    return f"{100 * x:.2f} %" if x < 0.01 else f"{100 * x:.1f} %" if x < 0.1 else f"{100 * x:.0f} %"


def cost_numbers(mo, cc) -> dict:
    """What the monitor (`monitor_overhead`) and the census (`census_cost`) cost beside a GPT-2 124M training step:
    a table (one row per step kind and window count: the share of a step one event adds, amortised over the events'
    spacing, on the q, k, v of the model at initialisation and on planted peaked ones) and the verdicts against each
    target, in words. Either result may be None (not run: the words say so)."""
    from lib.book import catalogue
    from lib.training.runs import spec_words
    if mo is None and cc is None:
        return {"cost_md": "**Neither cost has been measured on a GPU yet.**", "cost_words": "not measured yet",
                "cost_src": "not run"}
    rows = ["| what | step | windows | initial model | peaked inputs |", "|---|---|---:|---:|---:|"]
    words = []
    for res, what, rows_key in ((mo, "monitor", None), (cc, "census", "rows")):
        if res is None:
            words.append(f"the {what}'s cost is not measured yet")
            continue
        d = res.data
        for arm in d["arms"]:
            step = f"{spec_words(arm['attn'])}, {'compiled' if arm['compile'] else 'eager'}"
            by = {}
            for ev in arm["events"]:      # the monitor reads one window count, the census several
                n = ev[rows_key] if rows_key else res.meta["provenance"]["cfg"]["batch_rows"]
                by.setdefault(n, {})[ev["input"]] = ev["share"]
            for n, sh in sorted(by.items()):
                rows.append(f"| {what}, every {d['every']} steps | {step} | {n} | {_share(sh.get('model', math.nan))} "
                            f"| {_share(sh.get('peaked', math.nan))} |")
        model = [ev["share"] for a in d["arms"] for ev in a["events"] if ev["input"] == "model"]
        peaked = [ev for a in d["arms"] for ev in a["events"] if ev["input"] == "peaked"]
        rate = max(ev["window_rate"] for ev in peaked) if peaked else math.nan
        ok = max(model) <= d["target"]
        m_rate = max(ev["window_rate"] for a in d["arms"] for ev in a["events"] if ev["input"] == "model")
        words.append(f"the {what} {'meets' if ok else 'misses'} its target of {_share(d['target'])} on the model's "
                     f"q, k, v at initialisation (at most {_share(max(model))}, with {100 * m_rate:.0f} % of rows in "
                     "the rounding window)" + (
                         f" and misses it on the peaked ones (up to {_share(max(ev['share'] for ev in peaked))}, with "
                         f"{100 * rate:.0f} % of rows in the rounding window)"
                         if peaked and max(ev["share"] for ev in peaked) > d["target"] else ""))
    devs = sorted({r.data["device"] for r in (mo, cc) if r is not None})
    return {"cost_md": "\n".join(rows), "cost_words": "; ".join(words),
            "cost_src": catalogue.cite([r for r in (mo, cc) if r is not None]), "cost_device": ", ".join(devs)}
