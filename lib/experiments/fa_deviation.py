"""Golden et al.'s microbenchmark: flash attention's deviation from an FP64 golden value, next to baseline attention.

One grid, four sweeps (each a list of cells; a cell = inputs × head dim × sequence length × format × implementation
× tile), every cell measured against the FP64 golden value on the *same* inputs (`lib.fp.deviation`):

* ``seq``   — sequence length (`seq_lens`) × formats (`seq_formats`) × head dims, Golden's tile rule for each head
  dim (FA1's Bc = ⌈M/4d⌉, Br = min(Bc, d), SRAM `sram_elems`), every simulator implementation (`impls`: "baseline",
  "fa2", "fa1" with FP32 state, "fa2-lowp", "fa1-lowp" with every intermediate in the format), plus our kernel's
  numerics profiles (`profiles`, BF16) and, on the GPU, the real kernels (`gpu_kernels`).
* ``dial``  — mantissa bits (`dial_bits`, 8-bit exponent; m7 = BF16) at `dial_seq_len`: the simulator and our
  kernel's profiles ("fa2", "paper", "paper+fix" — the β fix, β = `beta`; "fp32" rounds nothing and is left out).
* ``tile``  — every (Br, Bc) pair of `tiles` at `tile_seq_len` for `tile_formats` × `tile_impls`, plus our kernel
  (profile "fa2", and on the GPU the native path) with the same tiles where it accepts them.
* the claim (`claim_*` keys): Golden's finding judged by `lib.readings.deviation_reading.claim_fa_deviation`.

Inputs (`inputs`): "normal" — q, k, v i.i.d. N(0, 1) in FP32 (Golden et al. do not state theirs); "attention" —
`lib.experiments.paper_placement.make_inputs(kind="attention")`: a few identical "sink" keys whose scores tie
exactly and dominate their rows, V of one sign (BF16 values). Each format's cell rounds the inputs to the format
first and computes the golden value on those rounded inputs, so the deviation is the algorithm's arithmetic only,
not the quantisation of the inputs, which both implementations share. `rows` query rows per (N, d) cell (H = rows // N
heads), so the max is taken over the same number of elements at every N. Non-causal unless `causal`. Once
`max_wall_s` (> 0) has passed, the remaining (inputs, d, N) groups are recorded as skipped, so that a run on a
device with a time limit still saves what it measured.

Our kernel: on the CPU its oracle `lib.fp.reference.emulate_forward` (bit-identical to the Triton interpreter);
on the GPU `kernels.attention.attention(path="emulated")` for the profiles (FP32 inputs on the format's grid) and
`path="native"` (BF16 tensor cores) in ``gpu_kernels``. Real kernels on the GPU: "eager" (softmax(q@kᵀ·α)@v on
tensors of the format), "sdpa_math", "sdpa_flash", "sdpa_efficient" (`torch.nn.attention.sdpa_kernel`),
"ours_fa2", "ours_paper", "ours_paper+fix" (native path). FP32 matmuls run without TF32.

Result data: "records" (one dict per measurement: the cell and `lib.fp.deviation.deviation_stats`, seconds, a hash
of the output so bit-identical outputs can be recognised; FA1 cells also "pred_excess_ms", the derived excess
mean-square error over FA2 in ULP², `lib.fp.deviation.fa1_excess_prediction`), "tiles" (Golden's tile per head
dim), "claim_setup" (the claim's cell), "claims", "device", "torch", "flags" (backend precision switches),
"wall_s".
"""
from __future__ import annotations

import hashlib
import time

import torch

from lib.fp import deviation as dv
from lib.fp.numerics import get_profile
from lib.readings.deviation_reading import claim_fa_deviation

SIM_IMPLS = {"baseline": None, "fa2": ("fa2", "fp32"), "fa1": ("fa1", "fp32"), "fa2-lowp": ("fa2", "format"),
             "fa1-lowp": ("fa1", "format")}
PROFILE_SPECS = {"fp32": ("fp32", None), "fa2": ("fa2", None), "paper": ("paper", None),
                 "paper+fix": ("paper", "beta")}
GPU_KERNELS = ("eager", "sdpa_math", "sdpa_flash", "sdpa_efficient", "ours_fa2", "ours_paper", "ours_paper+fix")


# ------------------------------------------------------------------------------------------------------ plan
def _fmt_of_bits(b: int) -> str:
    return "bf16" if b == 7 else f"m{b}"


def plan(cfg: dict, device: str) -> list[dict]:
    """The cells of the grid (dicts: sweep, inputs, d, N, fmt, impl, block), in a fixed order."""
    cells = []
    gpu = device == "cuda"

    def add(sweep, inputs, d, n, fmt, impl, block):
        cells.append(dict(sweep=sweep, inputs=inputs, d=d, N=n, fmt=fmt, impl=impl, block=list(block)))

    for inputs in cfg["inputs"]:
        for d in cfg["head_dims"]:
            tile = dv.golden_tile(d, cfg["sram_elems"])
            for n in cfg["seq_lens"]:
                for fmt in cfg["seq_formats"]:
                    for impl in cfg["impls"]:
                        add("seq", inputs, d, n, fmt, impl, tile)
                    if fmt == "bf16":
                        for prof in cfg["profiles"]:
                            add("seq", inputs, d, n, fmt, f"ours:{prof}", cfg["ours_block"])
                    if gpu:
                        for kern in cfg["gpu_kernels"]:
                            if kern.startswith("ours_") and fmt != "bf16":
                                continue
                            add("seq", inputs, d, n, fmt, f"gpu:{kern}",
                                cfg["ours_block"] if kern.startswith("ours_") else tile)
        d = cfg["head_dims"][0]
        tile = dv.golden_tile(d, cfg["sram_elems"])
        for b in cfg["dial_bits"]:
            for impl in cfg["impls"]:
                add("dial", inputs, d, cfg["dial_seq_len"], _fmt_of_bits(b), impl, tile)
            for prof in cfg["profiles"]:
                if prof != "fp32":      # the fp32 profile rounds nothing: the dial does not move it
                    add("dial", inputs, d, cfg["dial_seq_len"], _fmt_of_bits(b), f"ours:{prof}", cfg["ours_block"])
    for inputs in cfg["tile_inputs"]:
        d = cfg["head_dims"][0]
        for fmt in cfg["tile_formats"]:
            for br in cfg["tiles"]:
                for bc in cfg["tiles"]:
                    for impl in cfg["tile_impls"]:
                        add("tile", inputs, d, cfg["tile_seq_len"], fmt, impl, (br, bc))
        for br, bc in cfg["kernel_tiles"]:
            add("tile", inputs, d, cfg["tile_seq_len"], "bf16", "ours:fa2", (br, bc))
            if gpu:
                add("tile", inputs, d, cfg["tile_seq_len"], "bf16", "gpu:ours_fa2", (br, bc))
    for c in cells:
        dv.get_format(c["fmt"])
        kind, _, name = c["impl"].partition(":")
        if not (c["impl"] in SIM_IMPLS or (kind == "ours" and name in PROFILE_SPECS)
                or (kind == "gpu" and name in GPU_KERNELS)):
            raise ValueError(f"unknown implementation {c['impl']!r} in the configuration")
    return cells


# ------------------------------------------------------------------------------------------------- inputs
def make_inputs(kind: str, H: int, N: int, d: int, seed: int) -> tuple:
    """(q, k, v) FP32 (H, N, d) on the CPU; "normal": N(0, 1); "attention": `paper_placement.make_inputs`."""
    if kind == "normal":
        g = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(H, N, d, generator=g) for _ in range(3))
    if kind == "attention":
        from lib.experiments.paper_placement import make_inputs as attention_inputs
        q, k, v, _ = attention_inputs("attention", 1, H, N, d, seed)
        return tuple(t[0].float() for t in (q, k, v))
    raise ValueError(f"unknown input kind {kind!r}; use 'normal' or 'attention'")


# -------------------------------------------------------------------------------------------- implementations
def _ours(q, k, v, fmt, prof, block, causal, cfg, device):
    """Our kernel's numerics profile `prof` at the format's mantissa bits (FP32 inputs on the format's grid)."""
    name, fix = PROFILE_SPECS[prof]
    f = dv.get_format(fmt)
    if f.storage not in (None, torch.bfloat16):
        raise ValueError(f"our kernel handles 8-bit-exponent formats only, got {fmt}")
    nm = get_profile(name).replace(mantissa_bits=f.mantissa_bits)
    kw = dict(causal=causal, fix=fix, beta=float(cfg["beta"]))
    if device == "cuda":
        from kernels.attention import attention
        o = attention(q.float()[None], k.float()[None], v.float()[None], numerics=nm, path="emulated",
                      block=tuple(block), **kw)
        return o[0]
    from lib.fp.reference import emulate_forward
    o = emulate_forward(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy(), nm, block_m=block[0], block_n=block[1],
                        **kw).o
    return torch.from_numpy(o)


def _gpu_kernel(q, k, v, fmt, kern, block, causal, cfg):
    """A real GPU kernel on tensors of the format's storage dtype. Returns O or raises."""
    import torch.nn.functional as F
    f = dv.get_format(fmt)
    if f.storage is None:
        raise ValueError("real kernels run on torch dtypes only")
    q, k, v = (t.to(f.storage) for t in (q, k, v))
    if kern == "eager":
        a = q.shape[-1] ** -0.5
        s = (q @ k.transpose(-1, -2)) * a
        if causal:
            n = s.shape[-1]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        return torch.softmax(s, dim=-1) @ v
    if kern.startswith("sdpa_"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = {"sdpa_math": SDPBackend.MATH, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
                   "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[kern]
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)[0]
    from kernels.attention import attention
    name, fix = PROFILE_SPECS[kern.removeprefix("ours_")]
    return attention(q[None], k[None], v[None], causal=causal, numerics=name, fix=fix, beta=float(cfg["beta"]),
                     path="native", block=tuple(block))[0]


def _compute(cell, q, k, v, cfg, device):
    impl, fmt, block, causal = cell["impl"], cell["fmt"], tuple(cell["block"]), bool(cfg["causal"])
    if impl == "baseline":
        return dv.baseline_attention(q, k, v, fmt, causal=causal)
    if impl in SIM_IMPLS:
        style, state = SIM_IMPLS[impl]
        return dv.flash_attention(q, k, v, fmt, style=style, state=state, block=block, causal=causal)
    kind, _, name = impl.partition(":")
    if kind == "ours":
        return _ours(q, k, v, fmt, name, block, causal, cfg, device)
    return _gpu_kernel(q, k, v, fmt, name, block, causal, cfg)


def _hash(o: torch.Tensor) -> str:
    """A short hash of O's bytes in its own dtype: equal hashes = bit-identical outputs. The bytes are read as uint8
    (NumPy has no bfloat16, so a BF16 tensor cannot pass through `.numpy()` in its own dtype)."""
    return hashlib.sha1(o.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------------ run
def run(scale: str, cfg: dict) -> dict:
    device = cfg["device"]
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("this configuration needs a CUDA GPU (device = 'cuda'); use the ci scale on the CPU")
    flags = {}
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False     # FP32 matmuls in FP32 (the working precision)
        torch.backends.cudnn.allow_tf32 = False
        flags = {"matmul.allow_tf32": False,
                 "matmul.allow_bf16_reduced_precision_reduction":
                     torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
                 "matmul.allow_fp16_reduced_precision_reduction":
                     torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction}
        if hasattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed"):
            flags["math_sdp_fp16_bf16_reduction"] = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    cells = plan(cfg, device)
    groups: dict = {}
    for c in cells:
        groups.setdefault((c["inputs"], c["d"], c["N"]), []).append(c)
    records = []
    t_all = time.perf_counter()
    budget = float(cfg.get("max_wall_s", 0.0))
    for (inputs, d, n), group in groups.items():
        if budget and time.perf_counter() - t_all > budget:   # keep what was measured within the device's limit
            records += [dict(c, error="skipped: wall-clock budget") for c in group]
            continue
        H = max(1, cfg["rows"] // n)
        base = make_inputs(inputs, H, n, d, cfg["seed"])
        by_fmt: dict = {}
        for c in group:
            by_fmt.setdefault(c["fmt"], []).append(c)
        for fmt, fcells in by_fmt.items():
            f = dv.get_format(fmt)
            # The format's inputs (FP32 values on its grid; FP64 widens exactly) and their golden value.
            q, k, v = (f.round(t.to(f.work)).to(device) for t in base)
            gold = dv.golden_attention(q, k, v, causal=bool(cfg["causal"]))
            preds: dict = {}
            for c in fcells:
                rec = dict(c, H=H)
                t0 = time.perf_counter()
                try:
                    o = _compute(c, q, k, v, cfg, device)
                    if device == "cuda":
                        torch.cuda.synchronize()
                    rec["seconds"] = round(time.perf_counter() - t0, 4)
                    o = o.to(gold.device)
                    rec.update(dv.deviation_stats(o, gold, fmt), hash=_hash(o))
                    if c["impl"] == "fa1":      # the derived excess of per-tile storage over FA2 (u²)
                        bc = c["block"][1]
                        if bc not in preds:
                            preds[bc] = dv.fa1_excess_prediction(q, k, v, fmt, block_n=bc, causal=bool(cfg["causal"]))
                        rec["pred_excess_ms"] = preds[bc]
                except Exception as e:  # noqa: BLE001  (a backend that refuses a dtype or tile is a finding)
                    rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                records.append(rec)
            del gold, preds
        print(f"[fa_deviation] {inputs} d={d} N={n}: {len(group)} cells, "
              f"{time.perf_counter() - t_all:.0f} s", flush=True)
    data = {
        "records": records,
        "tiles": {str(d): list(dv.golden_tile(d, cfg["sram_elems"])) for d in cfg["head_dims"]},
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__, "flags": flags, "wall_s": round(time.perf_counter() - t_all, 1),
    }
    data["claim_setup"] = {k: cfg[k] for k in ("claim_seq_len", "claim_head_dim", "claim_inputs", "tile_inputs",
                                               "seed", "causal")}
    data["claims"] = {"fa_deviation": claim_fa_deviation(data)}
    return {"data": data, "seeds": [cfg["seed"]]}
