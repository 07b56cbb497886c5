"""Where does the authors' pure-PyTorch flash attention round? Established bit-for-bit against the emulator.

`AuthorsFA2` (in `lib/training/authors_fa.py`) is our PyTorch implementation of the algorithm the authors'
`attention.py` runs, written from its description in the reference notes (paper dossier §8 and §5.4; their code is
not copied): FA2 forward and backward over q- and k-tiles (512 × 512 in their model), scores `einsum(q, k)·α`,
masked with −finfo(dtype).max in the forward and −inf in the backward, the running max / row sum / output kept in
buffers of the input dtype and updated in place, δ = rowsum(dO∘O) recomputed per tile, dQ/dK/dV accumulated in
place; the optional β fix (`stable=True`: repeated tile max within 1e-3, β = 2 in their current code).

It is called with BF16 q, k, v under `torch.autocast(device, dtype=torch.bfloat16)`, as their model calls it (the
attention inputs are the BF16 outputs of `c_attn` under autocast). Three ways of running the backward:

* ``eager``          — backward outside autocast, as their `train.py` calls `loss.backward()`;
* ``eager_bwd_autocast`` — backward inside autocast (what a backward traced under the forward's autocast sees);
* ``compiled``       — `torch.compile` of the forward call (their default `compile=True`), backward outside.

For each run that completes, O, LSE, δ and dQ/dK/dV are compared bit-for-bit with `lib.fp.reference` emulating
candidate `Numerics` values on the same inputs and tiles: the predicted placement (`lib.fp.numerics.PAPER`), each
one-flag flip of it, the older "everything BF16" reading, and fa2 / fp32 for scale. The candidate that matches is
the placement; a flip that lowers the match proves that its rounding point is really there (or really absent).
The dtype of every intermediate is recorded too (`trace`), which is the direct evidence.

At ``ci`` scale the same code runs on the CPU with small shapes; CPU autocast has different op lists (e.g. `exp`
stays BF16), so its finding is labelled CPU and is not the paper's placement.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from lib.fp.inputs import attention_inputs
from lib.fp.numerics import FA2, FP32, PAPER, Numerics
from lib.fp.reference import emulate_attention
from lib.training.authors_fa import AuthorsFA2, authors_attention  # noqa: F401  (the authors' algorithm)


_NEG_MAX_NOTE = "forward masks with -finfo(dtype).max, backward with -inf (as described for the authors' code)"


# ------------------------------------------------------------------------------------------------ candidates
_FLIP_FIELDS = ("round_s", "round_s_minus_m", "rowsum_rounded_p", "round_l", "round_pv", "round_acc",
                "normalize_then_round", "round_lse", "round_delta", "round_delta_products", "round_bwd_s_minus_lse",
                "round_dp", "round_grad_acc")
ALL_BF16 = PAPER.replace(rowsum_rounded_p=True, round_lse=True, round_delta=True, round_bwd_s_minus_lse=True)


def candidates() -> dict:
    """name -> Numerics: the predicted placement, each one-flag flip of it, 'all BF16', fa2 and fp32."""
    out = {"paper (predicted)": PAPER}
    for f in _FLIP_FIELDS:
        out[f"paper, {f}={not getattr(PAPER, f)}"] = PAPER.replace(**{f: not getattr(PAPER, f)})
    out["all BF16 (provisional reading)"] = ALL_BF16
    # hypotheses for torch.compile (Inductor fuses element-wise chains and skips their intermediate roundings)
    out["compile? S−m, P̄V FP32"] = PAPER.replace(round_s_minus_m=False, round_pv=False)
    out["compile? S−m FP32, acc FP32"] = PAPER.replace(round_s_minus_m=False, round_acc=False)
    out["compile? S−m, P̄V, acc FP32"] = PAPER.replace(round_s_minus_m=False, round_pv=False, round_acc=False)
    out["fa2"] = FA2
    out["fp32"] = FP32
    return out


def _ulp_lp(x):
    """Spacing of the BF16 grid at |x| (float64), with the subnormal floor."""
    a = np.abs(x.astype(np.float64))
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.ldexp(1.0, (np.maximum(e, -126) - 7).astype(int))


def agreement(run: np.ndarray, emu: np.ndarray) -> dict:
    """Fractions of elements that are bit-identical and within one BF16 ulp; both float32 arrays."""
    run, emu = np.asarray(run, np.float32), np.asarray(emu, np.float32)
    same = (run.view(np.uint32) == emu.view(np.uint32)) | ((run == 0) & (emu == 0))
    both_nan = np.isnan(run) & np.isnan(emu)
    close = np.abs(run.astype(np.float64) - emu) <= _ulp_lp(np.maximum(np.abs(run), np.abs(emu)))
    return {"bit_identical": float(np.mean(same | both_nan)), "within_1ulp_bf16": float(np.mean(close | both_nan))}


# ------------------------------------------------------------------------------------------------ running it
def _run_mode(mode, q, k, v, do, device, tile, causal, stable, beta, tie_tol, row_sum_floor=1e-10):
    """Run the authors' algorithm one way. Returns (outputs as float32 numpy or None, trace, error or None)."""
    trace = {} if mode != "compiled" else None
    qd, kd, vd = (t.to(device).requires_grad_(True) for t in (q, k, v))
    dod = do.to(device)
    ac = torch.autocast(device_type=device, dtype=torch.bfloat16)

    def fwd(a, b, c):
        return authors_attention(a, b, c, causal=causal, q_tile=tile, k_tile=tile, stable=stable, beta=beta,
                                 tie_tol=tie_tol, trace=trace, row_sum_floor=row_sum_floor)

    outputs = {}
    try:
        f = torch.compile(fwd) if mode == "compiled" else fwd
        with ac:
            o = f(qd, kd, vd)
        outputs["o"] = o.detach().float().cpu().numpy()
        if mode == "eager_bwd_autocast":
            with ac:
                o.backward(dod)
        else:
            o.backward(dod)
        outputs.update(dq=qd.grad.float().cpu().numpy(), dk=kd.grad.float().cpu().numpy(),
                       dv=vd.grad.float().cpu().numpy())
        err = None
    except Exception as e:  # recorded: e.g. a dtype mismatch in the eager backward is itself a finding
        err = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    if trace is not None:
        for key in ("_lse", "_delta"):
            if key in trace:
                outputs[key[1:]] = trace.pop(key).numpy()
    return (outputs or None), trace, err


# The paper-dossier claim "paper_placement": these points are rounded to BF16 (flag of `Numerics` for each).
_CLAIMED = {"S": "round_s", "P̄": "round_p", "ℓ": "round_l", "P̄V per tile": "round_pv", "O accumulator": "round_acc",
            "LSE": "round_lse", "δ": "round_delta"}


def _claims(records, best, cands, device) -> dict:
    """Verdict on the claim from the measurement: the best-matching candidate of the eager run with the backward
    under autocast (random inputs, first tile) decides which claimed points are rounded."""
    if device != "cuda":
        return {}   # CPU autocast is not the authors' placement
    keys = [k for k in best if k.startswith("random/") and k.endswith("/eager_bwd_autocast")]
    if not keys:
        return {}
    key = max(keys, key=lambda k: int(k.split("/")[1]))      # the authors' (largest) tile
    nm = cands[best[key]]
    rec = next(r for r in records if f"{r['kind']}/{r['tile']}/{r['mode']}" == key and not r["stable"])
    o_match = rec["agreement"][best[key]]["o"]["bit_identical"]
    rounded = [p for p, f in _CLAIMED.items() if getattr(nm, f)]
    fp32 = [p for p, f in _CLAIMED.items() if not getattr(nm, f)]
    status = "reproduced" if not fp32 else ("not reproduced" if not rounded else "partly")
    eager_err = any(r["mode"] == "eager" and r["error"] for r in records)
    ev = (f"H100, eager CUDA autocast (best match '{best[key]}', O {100 * o_match:.2f}% bit-identical): rounded "
          f"{', '.join(rounded)}; FP32 {', '.join(fp32) or '—'}"
          + ("; backward outside autocast (as in train.py) raises a dtype error" if eager_err else ""))
    return {"paper_placement": {"status": status, "evidence": ev}}


def run(scale: str, cfg: dict) -> dict:
    """cfg: B, H, N, d (input shape), tiles (q = k tile sizes; the first is the authors'), kinds (input kinds of
    `lib.fp.inputs.attention_inputs`), modes (see the module docstring), compile_after_s (skip torch.compile once this much wall time
    has passed). Runs under CUDA autocast at full scale, CPU autocast at ci scale."""
    device = "cuda" if scale == "full" else "cpu"
    seed = 1234
    causal = True
    cands = candidates()
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False   # as the authors' train.py
        torch.backends.cudnn.allow_tf32 = False
    records = []
    traces = {}
    t_all = time.perf_counter()
    for kind in cfg["kinds"]:
        q, k, v, do = attention_inputs(kind, cfg["B"], cfg["H"], cfg["N"], cfg["d"], seed)
        for tile in cfg["tiles"]:
            emu = {}
            # every candidate at the authors' tile; at other tiles only the predicted placement and its rivals
            keep = cands if tile == cfg["tiles"][0] else {c: cands[c] for c in
                                                           ("paper (predicted)", "all BF16 (provisional reading)", "fa2")}
            for cname, nm in keep.items():
                emu[cname] = emulate_attention(q, k, v, do, nm, causal=True, block_m=tile, block_n=tile)
            for stable in (False, True):
                if stable:
                    emu_fix = emulate_attention(q, k, v, None, PAPER, causal=True, block_m=tile, block_n=tile,
                                                fix="beta", beta=2.0, tie_tol=1e-3, max_shift=None)
                for mode in cfg["modes"]:
                    if stable and mode != "eager_bwd_autocast":
                        continue  # the fix is forward-only: one run suffices
                    if mode == "compiled" and (tile != cfg["tiles"][0] or
                                               time.perf_counter() - t_all > cfg.get("compile_after_s", 1e9)):
                        continue  # compile is slow: once, at the authors' tile, and only if time is left
                    for floor in ((1e-10, 0.0) if stable else (1e-10,)):
                        t0 = time.perf_counter()
                        outs, trace, err = _run_mode(mode, q, k, v, do, device, tile, causal, stable, 2.0, 1e-3,
                                                     row_sum_floor=floor)
                        rec = {"kind": kind, "tile": tile, "mode": mode, "stable": stable, "row_sum_floor": floor,
                               "error": err, "seconds": round(time.perf_counter() - t0, 2), "agreement": {}}
                        if trace is not None and floor:
                            traces[f"{kind}/{tile}/{mode}/{'stable' if stable else 'plain'}"] = trace
                        if outs is not None:
                            if stable:
                                rec["agreement"]["paper (predicted) + fix beta=2, tol=1e-3"] = {
                                    "o": agreement(outs["o"], emu_fix["o"])}
                            else:
                                for cname, e in emu.items():
                                    rec["agreement"][cname] = {key: agreement(outs[key], e[key])
                                                               for key in ("o", "lse", "delta", "dq", "dk", "dv")
                                                               if key in outs}
                        records.append(rec)
                    print(f"[paper_placement] {kind} tile={tile} {mode} stable={stable} err={err}", flush=True)
    best = {}
    for rec in records:
        if rec["stable"] or not rec["agreement"]:
            continue
        score = {c: float(np.mean([v["bit_identical"] for v in a.values()])) for c, a in rec["agreement"].items()}
        best[f"{rec['kind']}/{rec['tile']}/{rec['mode']}"] = max(score, key=score.get)
    data = {
        "claims": _claims(records, best, cands, device),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "autocast_device": device, "torch": torch.__version__, "records": records, "traces": traces,
        "best_candidate": best, "candidates": {c: nm.as_dict() for c, nm in cands.items()},
        "predicted": PAPER.as_dict(), "note": _NEG_MAX_NOTE, "wall_s": round(time.perf_counter() - t_all, 1),
    }
    return {"data": data, "config": dict(cfg, causal=causal, beta=2.0, tie_tol=1e-3), "seeds": [seed]}
