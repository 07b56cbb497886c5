"""Reading the β sweep (chapter 7) across its results: outcomes per β and seed at a common step horizon, the
theory's thresholds next to the logits the runs reached, and what our kernel does with a row that underflows.

`beta_sweep` (β from tiny to large, seed 0) and `beta_sweep_seeds` (both ends, more seeds) ran under a wall-clock
budget with different numbers of processes sharing the GPU, so they reached different step counts; `table` judges
every run on the first H steps, H = the fewest steps of any finite run (`lib.training.horizon`).

* `table(res_list)`: one row per run, and per (β, guard) the outcomes over seeds.
* `underflow_rows(beta, max_shift)`: on inputs with large tied maxima, the share of query rows whose O our
  kernel's emulator returns as exactly 0 (the paper's rule without a guard), against FP64 attention.
"""
from __future__ import annotations

import numpy as np

from lib.fp import beta_theory
from lib.training import horizon, outcome

__all__ = ["table", "underflow_rows"]


def table(res_list) -> dict:
    """The β-sweep runs of several `lib.book.results.Result`s (with arrays), judged at their common horizon.

    Returns {"horizon": H (steps), "lr": [LRs], "rows": [...], "groups": [...]}. A row is the run summary plus
    "result", "guarded" (max_shift set: the shift is capped, no row underflows), "underflow_r" (score units: a tied
    row max above which this β underflows a BF16 row; None when guarded), "ineffective_r" (below which the shifted
    max still rounds to 1 in BF16) and "first_above" (the first telemetry step at which the largest attention logit
    of any layer exceeded underflow_r, or None; whether that logit was a tied max is not logged). The horizon
    outcome is "outcome" (the whole run's is "full_outcome"). A group is {"beta", "guarded", "seeds", "outcomes",
    "n", "failed" (exploded or non-finite)}, sorted exact before guarded, then by β."""
    if not res_list:
        raise ValueError("no β-sweep results given")
    x1, xu = beta_theory.x_round_to_one(7), beta_theory.underflow_x("bf16")
    raw = []
    for res in res_list:
        for r in res.data["runs"]:
            raw.append((res, r))
    h = horizon.common_horizon([r for _, r in raw])
    rows = []
    for res, r in raw:
        loss, gn = res.arrays[f"{r['id']}__loss"], res.arrays[f"{r['id']}__grad_norm"]
        row = horizon.rejudge(dict(r, result=res.name), loss, gn, int(res.meta["config"]["warmup"]), h)
        b, guarded = float(r["beta"]), r["max_shift"] is not None
        row.update(guarded=guarded, ineffective_r=x1 / (b - 1), underflow_r=None if guarded else xu / (b - 1))
        first = None
        if not guarded:
            st = res.arrays[f"{r['id']}__step"]
            ml = res.arrays[f"{r['id']}__max_logit"].reshape(len(st), -1).max(axis=1)
            hit = np.nonzero(ml > row["underflow_r"])[0]
            first = int(st[hit[0]]) if len(hit) else None
        row["first_above"] = first
        rows.append(row)
    groups = {}
    for r in sorted(rows, key=lambda r: (r["guarded"], r["beta"], r["seed"])):
        g = groups.setdefault((r["beta"], r["guarded"]), dict(beta=r["beta"], guarded=r["guarded"], seeds=[],
                                                               outcomes=[]))
        g["seeds"].append(r["seed"])
        g["outcomes"].append(r["outcome"])
    for g in groups.values():
        g["n"] = len(g["outcomes"])
        g["failed"] = sum(outcome.failed(o) for o in g["outcomes"])
    return dict(horizon=h, lr=sorted({r["lr"] for r in rows}), rows=rows, groups=list(groups.values()))


def underflow_rows(beta: float = 30.0, max_shift=None, *, seed: int = 0, n: int = 64, d: int = 16,
                   block: int = 16) -> dict:
    """What the kernel's arithmetic (its bit-exact numpy emulator, the paper profile of the training runs) does with
    rows whose repeated maximum is shifted past the underflow limit. Inputs: (1, 2, n, d) random BF16-valued q, k, v
    with every other pair of keys duplicated (exact ties) and q scaled so that the tied maxima are tens of score
    units; causal.

    Returns {"beta", "max_shift", "rows", "zero_rows" (share of query rows whose O is exactly 0), "nan_rows" (share
    with any NaN), "fp64_zero_rows" (share of exactly-zero rows of FP64 attention: the true output), "max_r" (the
    largest row maximum, score units)}."""
    from lib.fp.numerics import get_profile
    from lib.fp.reference import attention_fp64, emulate_forward, round_rne
    rng = np.random.default_rng(seed)
    q, k, v = (round_rne(rng.standard_normal((1, 2, n, d)).astype(np.float32), 7) for _ in range(3))
    k[:, :, 1::4] = k[:, :, 0::4][:, :, : k[:, :, 1::4].shape[2]]     # duplicated keys: tied scores
    q *= np.float32(16.0)                                                # a power of two: q stays BF16-valued
    f = emulate_forward(q, k, v, get_profile("paper"), causal=True, block_m=block, block_n=block, fix="beta",
                        beta=beta, tie_tol=0.0, max_shift=max_shift)
    o = np.asarray(f.o).reshape(-1, n, d)
    ref = attention_fp64(q, k, v, causal=True)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(d)
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    return dict(beta=beta, max_shift=max_shift, rows=int(o.shape[0] * n),
                zero_rows=float((o == 0).all(-1).mean()), nan_rows=float(np.isnan(o).any(-1).mean()),
                fp64_zero_rows=float((np.asarray(ref["o"]).reshape(-1, n, d) == 0).all(-1).mean()),
                max_r=float(s.max()))
