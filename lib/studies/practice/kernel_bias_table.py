"""Which kernels carry which bias: the signed BF16 error of O along sign(V) on tied rows, for every attention kernel
a user calls, with intervals over independent problems.

`run(scale, cfg)` measures, for each kernel of `cfg["kernels"]` (`kernel_table.KERNELS`: SDPA's flash, cuDNN,
memory-efficient and math backends; `stable_attention` without and with the fix; the research kernel in the FA2 and
the paper placement, without and with the fix; the authors' code eager and compiled, without and with their fix)
and each kind of input, on the selected (row, feature) pairs

    e = (O − O_ref)·sign(V_tied) / ulp(O_ref)

in ULP (O_ref: FP64 attention of the same BF16 q, k, v; ulp: the BF16 spacing at O_ref; e < 0 points toward zero).

Problems and intervals. The interval of a cell is over *problems*, the independent draws of its inputs; the pairs of
one problem share its tied keys and its remainder, so an interval over pairs would be far too narrow (the tests
show by how much). Per problem: the mean of e over its selected pairs, and the fraction of its selected rows whose
row error (the mean of e over the row's selected pairs) is negative (toward zero), positive (away) or exactly 0.
Per cell: the mean over problems and its Student-t interval (`lib.stats.t_interval`, the cell's "lo", "hi"), the
percentile bootstrap over problems beside it ("boot_lo", "boot_hi", `lib.stats.bootstrap_interval`), and the same
for the fraction of rows toward zero ("toward", "toward_lo", "toward_hi").

Kinds of input (q, k, v BF16, shape (B, H, T, D)):

* ``concentrated``, ``diffuse`` — `kernel_table.planted`: two keys tied `gap` nats above all others (14 nats puts
  the remainder in the sticky-bit window at T = 1024; 4 nats lets it decide the rounding by itself), tied V of one
  sign in every feature, the other keys' V of the same sign (the paper's worked example); non-causal. One problem =
  one (seed, batch, head); every pair is selected.
* ``gpt2``, ``gpt2_window`` — GPT-2's layer 2 (1-based) captured from a trained checkpoint by
  `lib.studies.gpt2.campaign.capture_gpt2` (the file named by ``$BOOK_GPT2_CAPTURE``; its sha256, arm, step and
  layer are recorded; without it these kinds are skipped, with the reason); causal. One problem = one (window, head).
  Selected: the tied rows of the authors' placement (two or more keys with equal BF16 scores at the row maximum,
  `lib.census.row_classes`), in the features where V has one sign over the tied keys (``gpt2``), and of those the
  rows whose remainder is in the sticky-bit window (``gpt2_window``: the census's conjunction). One row set for
  every kernel, so the kernels are compared on the same pairs.

A kernel that cannot run on this machine (a backend missing) is skipped and the reason recorded. Full scale runs on
CUDA (native BF16 paths); ci scale on the CPU (SDPA's math backend and the research kernel's emulated path, bit for
bit the GPU's emulated path).
"""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import torch

from lib import stats
from lib.studies.practice import kernel_table as kt

PROBLEM = {"concentrated": "seed, batch, head", "diffuse": "seed, batch, head", "gpt2": "window, head",
           "gpt2_window": "window, head"}
CAPTURE_ENV = "BOOK_GPT2_CAPTURE"


# ------------------------------------------------------------------------------------------------ per problem
def problem_stats(e: torch.Tensor, sel: torch.Tensor) -> dict:
    """Per problem of e, sel (P, T, D) (error along sign(V) in ULP; selected pairs): "mean" (over its selected
    pairs), "toward", "away", "exact" (fractions of its selected rows whose row error is < 0, > 0, = 0), "rows",
    "pairs" (counts); numpy arrays over the problems with at least one selected pair."""
    m = sel.to(e.dtype)
    e = torch.where(sel, e, torch.zeros_like(e))        # NaN-free outside the selection
    n_row = m.sum(-1)                                    # (P, T) selected pairs a row
    s_row = e.sum(-1)
    rows = n_row > 0
    row_err = s_row / n_row.clamp_min(1)
    n_rows = rows.sum(-1).to(e.dtype)
    ok = n_rows > 0
    frac = lambda x: ((x & rows).sum(-1).to(e.dtype) / n_rows.clamp_min(1))[ok]  # noqa: E731
    out = dict(mean=(s_row.sum(-1) / n_row.sum(-1).clamp_min(1))[ok], toward=frac(row_err < 0),
               away=frac(row_err > 0), exact=frac(row_err == 0), rows=n_rows[ok], pairs=n_row.sum(-1)[ok])
    return {k: v.cpu().numpy() for k, v in out.items()}


def summarize(per: list[dict], level: float, n_boot: int, seed: int = 0) -> dict:
    """A table cell from `problem_stats` of several inputs: mean error over problems with its Student-t interval
    ("lo", "hi", "dof", "widen" = its width over the normal approximation's) and percentile bootstrap ("boot_lo",
    "boot_hi"); the fractions of rows toward zero (with its t interval, cut to [0, 1], where the fraction lies: no
    loss of coverage), away and exact; the counts."""
    cat = {k: np.concatenate([p[k] for p in per]) if per else np.zeros(0) for k in
           ("mean", "toward", "away", "exact", "rows", "pairs")}
    t = stats.t_interval(cat["mean"], level)
    blo, bhi = stats.bootstrap_interval(cat["mean"], level, n_boot, seed)
    tw = stats.t_interval(cat["toward"], level)
    return dict(mean=t["mean"], lo=t["lo"], hi=t["hi"], n_problems=t["n"], interval="student-t", dof=t["dof"],
                level=level, widen=t["t"] / _z(level), sd=t["sd"], boot_lo=blo, boot_hi=bhi,
                toward=tw["mean"], toward_lo=max(0.0, tw["lo"]), toward_hi=min(1.0, tw["hi"]),
                away=float(cat["away"].mean()) if cat["away"].size else float("nan"),
                exact=float(cat["exact"].mean()) if cat["exact"].size else float("nan"),
                n_rows=int(cat["rows"].sum()), n_pairs=int(cat["pairs"].sum()))


def _z(level: float) -> float:
    """The two-sided normal quantile of `level` (1.96 at 95 %): what the Student-t quantile is compared with."""
    from scipy.stats import norm
    return float(norm.ppf((1 + level) / 2))


# ------------------------------------------------------------------------------------------------ inputs
def _planted_inputs(cfg: dict, dev) -> dict:
    """{kind: [(q, k, v, causal, sign (P, 1, D), selection (P, T, D) or None, O_ref)]} of the planted kinds."""
    B, H, T, D = cfg["shape"]
    out = {}
    for kind, gap in cfg["gaps"].items():
        out[kind] = []
        for seed in cfg["seeds"]:
            q, k, v, sign = kt.planted(B, H, T, D, float(gap), int(seed), dev)
            out[kind].append((q, k, v, False, sign.reshape(B * H, 1, D), None, kt.fp64_attention(q, k, v, False)))
    return out


def load_capture(path: str, dev) -> tuple:
    """(q, k, v) BF16 on `dev` and the record of a GPT-2 capture file (`capture_gpt2`'s): its sha256, arm, step,
    layer (1-based) and shape."""
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    cap = torch.load(path, map_location="cpu", weights_only=False)
    q, k, v = (cap[n].to(dev, torch.bfloat16) for n in ("q", "k", "v"))
    meta = {key: val for key, val in cap.items() if not isinstance(val, torch.Tensor)}
    return (q, k, v), dict(meta, sha256=sha, shape=list(q.shape))


def _gpt2_inputs(cfg: dict, dev, skipped: dict) -> tuple[dict, dict | None]:
    """The GPT-2 kinds' inputs (as `_planted_inputs`) from ``$BOOK_GPT2_CAPTURE``, and the capture's record."""
    from lib.census import row_classes
    path = os.environ.get(CAPTURE_ENV, "")
    if not cfg.get("gpt2_capture", False):
        return {}, None
    if not path:
        skipped["gpt2"] = "no capture of GPT-2's layer 2 was given to this run"
        return {}, None
    (q, k, v), meta = load_capture(path, dev)
    B, H, T, D = q.shape
    cls = row_classes(q, k, v, causal=True, placement=cfg.get("tie_placement", "authors"))
    tied = cls["one_signed"]
    window = cls["window"].unsqueeze(-1) & tied
    sign = cls["tied_sign"].reshape(B * H, T, D)
    ref = kt.fp64_attention(q, k, v, True)
    meta |= {f"n_pairs_{n}": int(m.sum()) for n, m in (("tied", tied), ("window", window))}
    meta["max_logit"] = max_logit(q, k)
    return ({"gpt2": [(q, k, v, True, sign, tied.reshape(B * H, T, D), ref)],
             "gpt2_window": [(q, k, v, True, sign, window.reshape(B * H, T, D), ref)]}, meta)


def max_logit(q, k) -> float:
    """The largest causal score scale·q·kᵀ (FP32 products of the BF16 values), over the (batch, head)s of q, k."""
    T = q.shape[-2]
    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    out = float("-inf")
    for b in range(q.shape[0]):
        s = torch.matmul(q[b].float(), k[b].float().transpose(-2, -1)) / q.shape[-1] ** 0.5
        out = max(out, float(s.masked_fill(~allowed, float("-inf")).amax()))
    return out


# ------------------------------------------------------------------------------------------------ the run
def measure(fn, inputs: list) -> list[dict]:
    """`problem_stats` of kernel `fn` on each input of one kind."""
    out = []
    for q, k, v, causal, sign, sel, ref in inputs:
        o = fn(q, k, v, causal)
        B, H, T, D = q.shape
        e = kt.along_sign(o, ref, 1.0).reshape(B * H, T, D) * sign
        out.append(problem_stats(e, torch.ones_like(e, dtype=torch.bool) if sel is None else sel))
    return out


def run(scale: str, cfg: dict) -> dict:
    """cfg: shape (B, H, T, D of the planted inputs), gaps ({kind: nats}), seeds, kernels, level, n_boot,
    gpt2_capture (read ``$BOOK_GPT2_CAPTURE``), tie_placement (whose ties select the GPT-2 rows)."""
    t0 = time.perf_counter()
    if scale == "full" and not torch.cuda.is_available():
        raise RuntimeError("the full kernel bias table runs the CUDA backends: no GPU here")
    dev = torch.device("cuda" if scale == "full" else "cpu")
    skipped, timing = {}, {}
    inputs = _planted_inputs(cfg, dev)
    gpt2, capture = _gpt2_inputs(cfg, dev, skipped)
    inputs |= gpt2
    level, n_boot = float(cfg.get("level", 0.95)), int(cfg.get("n_boot", 4000))
    table = {}
    for name in cfg["kernels"]:
        fn = kt.kernel_fn(name)
        t1 = time.perf_counter()
        try:
            per = {kind: measure(fn, inp) for kind, inp in inputs.items()}
        except Exception as exc:  # noqa: BLE001  (a backend missing on this machine: record and go on)
            skipped[name] = f"{type(exc).__name__}: {exc}"
            continue
        timing[name] = round(time.perf_counter() - t1, 2)
        table[name] = {kind: summarize(p, level, n_boot) for kind, p in per.items()}
        print(f"[kernel_bias_table] {name:22s} " + "  ".join(
            f"{kind} {c['mean']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] n={c['n_problems']}"
            for kind, c in table[name].items()) + f"  ({timing[name]} s)", flush=True)
    device = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    B, H, T, D = cfg["shape"]
    data = dict(table=table, skipped=skipped, labels={k: kt.LABELS[k] for k in table}, shape=[B, H, T, D],
                gaps=cfg["gaps"], device=device, problem={k: PROBLEM[k] for k in inputs}, level=level,
                interval="Student's t over problems; percentile bootstrap over problems beside it",
                gpt2=capture, timing_s=timing, torch=torch.__version__, wall_s=round(time.perf_counter() - t0, 1))
    return dict(data=data, seeds=list(cfg["seeds"]))
