"""Does a *biased* attention rounding make training fail, at a learning rate where BF16 trains? (chapter 6)

At our scale no BF16 learning rate separates the paper placement from the other arms (`lr_sweep`): where it
fails, FP32 attention fails too. This experiment amplifies the paper's mechanism instead of the learning rate.
Chapter 1 measured that the tie bias of P̄V scales with the unit in the last place (×2 per mantissa bit removed);
here every rounding point of the paper placement rounds to m < 7 mantissa bits (the same 8-bit exponent: the
"precision dial"), at an LR where BF16 and FP32 attention train, and three arms per m separate the bias from the
noise:

* ``paper_m{m}``      — the paper placement at m bits, round-to-nearest-even (ties at P̄ = 1, biased P̄V);
* ``paper_m{m}_sr``   — the same rounding points with *stochastic* rounding: as coarse (larger per-element
                        variance than RNE) but unbiased, so it keeps the noise and removes the bias;
* ``paper_m{m}+fix``  — RNE plus the β fix on every repeated row max (``fix_split``: also across our 64-key tiles,
                        which is what the authors' 512-key tiles do on a 512-token row), the paper's cure;
* ``paper_m{m}_dfp32o`` (at the smallest m only) — RNE, but δ from an FP32 recompute of O (the paper's δ-channel
                        ablation);
* ``paper_m{m}_sm32``  — RNE with the forward exponent arguments S − m in FP32 (every other point at m bits);
* ``paper_m{m}+fix_sm32`` — the same plus the fix. Chapter 7 (`lib.fp.fix_error`) measured that in the paper placement
                        the fix's shifted exponent argument S − β·r_m, rounded like S − m, multiplies the forward
                        error of O and the row-sum error of the backward P as r_m grows, and that computing S − m in
                        FP32 removes that excess: this arm is the fix without its own rounding error;
* controls at the same LR, seed and batch order: ``paper`` (BF16, m = 7, native path) and ``fp32`` attention.

Reading: if ``paper_m`` fails while ``_sr`` and ``+fix`` train, the failure is caused by the bias (not by the
coarseness), and the fix removes it; if ``_sr`` fails as well, coarse rounding alone is enough and the test says
nothing about the bias. The dial is our amplification, not the paper's setting: BF16 (m = 7) is what the paper ran.

Results recorded before commit 8b8d26d (`SR_BACKWARD_BUG`) have invalid SR arms: the backward recomputed S with
other random bits than the forward, so its P was not the P that made O. `verdicts(..., sr_valid=False)` ignores them.

cfg: bits (the widths m < 7), kinds (per-m arm kinds of `KINDS`), seeds, lr, steps, controls (a subset of
"paper" (BF16, m = 7) and "fp32"; [] when a variant's controls ran in another result), control_seeds (default: the
first seed). Every arm runs on the kernel's native path at full scale (BF16 tensor-core operands rounded to m bits;
`kernels/attention.py`); the emulated path's FP32 `ieee` matmuls were ≈ 17× slower per training step (0.21 vs
3.59 steps/s with 10 runs sharing the H100). All runs are concurrent processes, each capped by $EXPLOSION_BUDGET_S
wall seconds. At ci scale: the tiny CPU proxy, a few steps (proves the code path; no verdict).
"""
from __future__ import annotations

from lib.studies.dial import table as dial_reading
from lib.training import outcome, proxy

KINDS = ("rne", "sr", "fix", "dfp32o", "sm32", "fixsm32")   # per-m arm kinds (dfp32o only at the smallest m)
CONTROLS = {"paper": "paper", "fp32": "naive"}


def arm_specs(m: int, kinds=KINDS, smallest: bool = True) -> dict[str, str]:
    """{arm name: attention spec string} of the per-m arms (see the module docstring)."""
    base = f"paper/mantissa_bits={m}"
    spec = {"rne": base, "sr": f"{base}/rounding=sr", "fix": f"{base}+fix_split",
            "dfp32o": f"{base}/delta_source=fp32_o", "sm32": f"{base}/round_s_minus_m=false",
            "fixsm32": f"{base}/round_s_minus_m=false+fix_split"}
    return {f"paper_m{m}{dial_reading.KIND_SUFFIX[k]}": spec[k] for k in kinds if k != "dfp32o" or smallest}


def plan(scale: str, cfg: dict) -> dict:
    bits, seeds, lr, steps = tuple(cfg["bits"]), tuple(cfg["seeds"]), float(cfg["lr"]), int(cfg["steps"])
    kinds = tuple(cfg["kinds"])
    bad_c = [c for c in cfg["controls"] if c not in CONTROLS]
    if bad_c:
        raise ValueError(f"precision_dial: controls must be a subset of {list(CONTROLS)}; got {cfg['controls']!r}")
    controls = {c: CONTROLS[c] for c in cfg["controls"]}
    cseeds = tuple(cfg.get("control_seeds") or seeds[:1])
    bad = [k for k in kinds if k not in KINDS]
    if bad or not bits or any(not 1 <= m <= 6 for m in bits):
        raise ValueError(f"precision_dial: bits must lie in 1..6 and arms in {KINDS}; got {bits}, {kinds}")
    missing = proxy.kernel_available()
    if missing is not None:
        raise RuntimeError(f"precision_dial needs kernels.attention: {missing}")
    specs = {}
    for m in sorted(bits):
        specs |= arm_specs(m, kinds, smallest=m == min(bits))
    dial = dict(specs)
    specs |= controls
    return dict(bits=sorted(bits), seeds=list(seeds), control_seeds=list(cseeds), lr=lr, steps=steps,
                kinds=list(kinds), specs=specs, dial_arms=list(dial), control_arms=list(controls))


def run(scale: str, cfg: dict) -> dict:
    p = plan(scale, cfg)
    runs = [dict(arm=a, seed=s, lr=p["lr"], attn=p["specs"][a]) for a in p["dial_arms"] for s in p["seeds"]]
    runs += [dict(arm=a, seed=s, lr=p["lr"], attn=p["specs"][a]) for a in p["control_arms"]
             for s in p["control_seeds"]]
    workers = proxy.default_workers(scale, len(runs))
    summaries, arrays, meta = proxy.run_arms(scale, runs, workers, steps=p["steps"])
    data = dict(runs=summaries, bits=p["bits"], seeds=p["seeds"], control_seeds=p["control_seeds"], lr=p["lr"], steps=p["steps"], kinds=p["kinds"],
                specs=p["specs"], verdicts=dial_reading.verdicts(summaries, p["bits"]), wall_s_all_runs=meta["wall_s"],
                thresholds=dict(smooth=outcome.SMOOTH, rise_exploded=outcome.RISE_EXPLODED,
                                rise_degraded=outcome.RISE_DEGRADED, gn_spike=outcome.GN_SPIKE,
                                onset_rise=outcome.ONSET_RISE))
    return dict(data=data, arrays=arrays, config=dict(meta["base_config"], workers=workers, lr=p["lr"],
                                                      steps=p["steps"], plan=p),
                seeds=dict(torch=p["seeds"], data=[0]))
