"""Golden et al.'s numeric-deviation microbenchmark: tiled flash attention and baseline attention in any format.

What it measures: how far an attention output O (H, N, d) lies from a *golden value*, the same attention computed
untiled in FP64 on the same inputs. Three implementations, each in a `Format`:

* `baseline_attention` — softmax(α·QKᵀ)·V with the N × N matrix materialised, written the way PyTorch eager runs
  it on tensors of the format: S = QKᵀ (products accumulated in the working precision, result stored in the
  format), S·α (stored in the format), softmax (computed in the working precision, stored in the format), P·V
  (accumulated in the working precision, stored in the format). Four roundings, the last one of O.
* `flash_attention(style="fa2")` — FlashAttention-2's forward: a running max m, row sum ℓ and unnormalised
  accumulator per query row, updated once per key tile; O = acc/ℓ normalised once at the end and rounded once.
* `flash_attention(style="fa1")` — FlashAttention-1's Algorithm 1: after every key tile the output is *normalised*
  (O ← (ℓ·e^{m−m'}·O + e^{m̃−m'}·P̃V)/ℓ') and written back to memory in the format. P̃ = exp(S − m̃) uses the tile's
  own max. This is where "per-tile rescaling" rounds: once per key tile.

Each flash style runs with one of two *states* (where the intermediates live):
* ``state="fp32"`` — as the hardware kernels run: S, m, ℓ, the rescale factors and (FA2) the accumulator stay in the
  working precision (registers; FA1 stores m and ℓ as FP32 statistics); P̄ is rounded to the format only as the P̄V
  matmul operand, and O when it is stored (FA2: once; FA1: after every key tile).
* ``state="format"`` — as a re-implementation on tensors of the format computes: every operation (matmul, scale,
  subtraction, exp, row sum, rescale, addition, division) runs in the working precision and its result is stored
  in the format. This is the reading of Golden et al.'s "numerical re-implementation" that allows arbitrary
  precision; it resembles the `paper` profile of `lib/fp/numerics.py` (the authors' PyTorch FA2 under autocast).

Formats (`Format`): "fp64", "fp32", "fp16" (5-bit exponent, 10 mantissa bits, subnormals below 2⁻¹⁴), "bf16", and
"m<b>" for the precision dial, b ∈ [1, 23] mantissa bits with FP32's 8-bit exponent ("m7" is BF16 bit for bit).
The working precision — where the hardware accumulates — is FP64 for "fp64" and FP32 for every other format
(tensor cores multiply 16-bit operands exactly and accumulate in FP32; FP32 matmuls are run without TF32). Rounding
to a format is round-to-nearest-even: torch's casts for fp16/bf16 and `round_mantissa` (the FP32 bit pattern, as
`lib/fp/bf16.round_rne` and the kernels do) for the dial.

Tiles: (Br, Bc) = query rows × key columns per tile. All query tiles are processed at once as a batch of
(Br × d) @ (d × Bc) matmuls, and key tiles are visited left to right. A row's arithmetic depends only on Bc (the
sequence of key tiles it sees); Br only sets the matmul shapes, and the tests check that O is bit-identical across
Br. Causal masking, when asked for, skips the key tiles that lie entirely above a query row's diagonal (as FA2
does), so such tiles cost no rounding.

Metrics (`deviation_stats`): Golden's max |O − O_gold| and mean ± std of |O − O_gold|, and the same in ULPs of the
output format, plus what Golden's metric cannot see, the *signed* mean error (a bias). The ULP unit of one
measurement is u = mean_i ulp(O_gold,i), the average grid spacing of the format at the golden outputs: a ratio of
means, so elements that are nearly 0 (where any absolute error is many of *their own* ULPs) do not dominate.
One rounding to nearest of each output gives mean |Δ| = u/4 exactly when the dropped fraction is uniform: the floor
every implementation that stores O in the format sits on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["Format", "get_format", "round_mantissa", "baseline_attention", "flash_attention", "golden_attention",
           "deviation_stats", "golden_tile", "fa1_excess_prediction", "STYLES", "STATES",
           "FORMAT_NAMES"]

STYLES = ("fa1", "fa2")
STATES = ("fp32", "format")
FORMAT_NAMES = ("fp64", "fp32", "fp16", "bf16")   # plus "m1" … "m23", the dial


# --------------------------------------------------------------------------------------------------- formats
def round_mantissa(x: torch.Tensor, m: int) -> torch.Tensor:
    """Round-to-nearest-even of FP32 values to `m` mantissa bits (FP32's 8-bit exponent), as FP32 values.

    Works on the bit pattern (sign kept apart), so it runs on any device: add half an ULP minus one plus the kept
    LSB, clear the dropped bits. Overflow goes to ±inf, subnormals round on the same grid, NaN stays NaN."""
    if x.dtype != torch.float32:
        raise TypeError(f"round_mantissa needs a float32 tensor, got {x.dtype}")
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 23:
        raise ValueError(f"m must be an int in [1, 23], got {m!r}")
    shift = 23 - m
    if shift == 0:
        return x.clone()
    u = x.contiguous().view(torch.int32)
    sign = u & torch.iinfo(torch.int32).min          # 0x80000000
    mag = u & 0x7FFFFFFF
    lsb = (mag >> shift) & 1
    r = ((mag + ((1 << (shift - 1)) - 1) + lsb) >> shift) << shift   # ≤ 0x7F800000 + 2²² for finite x: no overflow
    out = (r | sign).view(torch.float32)
    return torch.where(torch.isnan(x), x, out)


@dataclass(frozen=True)
class Format:
    """A number format: `mantissa_bits` stored fraction bits, smallest normal exponent `min_exp`, and the torch
    dtype that stores it exactly (None for the dial's formats, carried as FP32 values on their grid)."""
    name: str
    mantissa_bits: int
    min_exp: int
    storage: torch.dtype | None

    @property
    def work(self) -> torch.dtype:
        """Working (accumulation) precision: FP64 for FP64, FP32 for everything else."""
        return torch.float64 if self.storage == torch.float64 else torch.float32

    def round(self, x: torch.Tensor) -> torch.Tensor:
        """x (the working dtype) rounded to this format, returned in the working dtype."""
        if self.storage in (torch.float64, torch.float32):
            return x.to(self.storage)       # fp32 work values are already fp32: a no-op
        if self.storage is not None:
            return x.to(self.storage).to(self.work)
        return round_mantissa(x.float(), self.mantissa_bits)

    def ulp(self, x: torch.Tensor) -> torch.Tensor:
        """Spacing of this format's grid at |x| (float64): 2^(e − m) for |x| in [2^e, 2^(e+1)), and
        2^(min_exp − m) in the subnormal range and at 0."""
        a = x.double().abs()
        _, e = torch.frexp(a)                        # a = f·2^e, f ∈ [0.5, 1): floor(log2 a) = e − 1
        e = torch.where(a > 0, e - 1, torch.full_like(e, self.min_exp))
        e = torch.clamp(e, min=self.min_exp)
        return torch.ldexp(torch.ones_like(a), (e - self.mantissa_bits).to(torch.int32))


_NAMED = {
    "fp64": Format("fp64", 52, -1022, torch.float64),
    "fp32": Format("fp32", 23, -126, torch.float32),
    "fp16": Format("fp16", 10, -14, torch.float16),
    "bf16": Format("bf16", 7, -126, torch.bfloat16),
}


def get_format(name) -> Format:
    """'fp64' | 'fp32' | 'fp16' | 'bf16' | 'm<b>' (b mantissa bits, 8-bit exponent) | a Format -> Format."""
    if isinstance(name, Format):
        return name
    if not isinstance(name, str):
        raise TypeError(f"format must be a name or a Format, got {type(name).__name__}")
    if name in _NAMED:
        return _NAMED[name]
    if name.startswith("m") and name[1:].isdigit() and 1 <= int(name[1:]) <= 23:
        return Format(name, int(name[1:]), -126, None)
    raise ValueError(f"unknown format {name!r}; use one of {FORMAT_NAMES} or 'm<b>' with 1 ≤ b ≤ 23")


# ------------------------------------------------------------------------------------------- implementations
def _check(q, k, v, causal):
    for n, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3 or not t.is_floating_point():
            raise ValueError(f"{n} must be a float tensor of shape (heads, seq, head_dim), got "
                             f"{getattr(t, 'shape', type(t).__name__)}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k, v must have one shape, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")


def _inputs(q, k, v, fmt: Format):
    """q, k, v rounded to the format (a no-op for inputs already on its grid), in the working dtype."""
    return tuple(fmt.round(t.to(fmt.work)) for t in (q, k, v))


def golden_attention(q, k, v, *, causal: bool = False, scale=None) -> torch.Tensor:
    """The golden value: softmax(α·QKᵀ)·V untiled in FP64 on the given values (widened exactly). (H, N, d) float64."""
    _check(q, k, v, causal)
    q, k, v = (t.double() for t in (q, k, v))
    a = q.shape[-1] ** -0.5 if scale is None else float(scale)
    s = (q @ k.transpose(-1, -2)) * a
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def baseline_attention(q, k, v, fmt="bf16", *, causal: bool = False, scale=None) -> torch.Tensor:
    """Materialised attention as PyTorch eager computes it on tensors of `fmt` (module docstring: four roundings).
    q, k, v: (H, N, d), any float dtype (rounded to the format first). Returns (H, N, d) in the working dtype."""
    _check(q, k, v, causal)
    fmt = get_format(fmt)
    q, k, v = _inputs(q, k, v, fmt)
    a = q.shape[-1] ** -0.5 if scale is None else float(scale)
    s = fmt.round(q @ k.transpose(-1, -2))
    s = fmt.round(s * a)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    p = fmt.round(torch.softmax(s, dim=-1))
    return fmt.round(p @ v)


def golden_tile(head_dim: int, sram_elems: int) -> tuple[int, int]:
    """FlashAttention-1's tile rule, which Golden et al. follow: Bc = ⌈M/4d⌉, Br = min(⌈M/4d⌉, d) for an SRAM of
    M elements; both rounded down to a power of two (our kernels' tiles). Returns (Br, Bc)."""
    if head_dim < 1 or sram_elems < 4 * head_dim:
        raise ValueError(f"need head_dim ≥ 1 and sram_elems ≥ 4·head_dim, got {head_dim}, {sram_elems}")
    bc = math.ceil(sram_elems / (4 * head_dim))
    br = min(bc, head_dim)
    p2 = lambda x: 1 << (int(x).bit_length() - 1)  # noqa: E731
    return p2(br), p2(bc)


def flash_attention(q, k, v, fmt="bf16", *, style: str = "fa2", state: str = "fp32", block=(64, 64),
                    causal: bool = False, scale=None) -> torch.Tensor:
    """Tiled flash-attention forward in `fmt`. q, k, v: (H, N, d), any float dtype (rounded to the format first);
    block = (Br, Bc), positive ints. Returns O (H, N, d) in the working dtype, on the format's grid.

    style: "fa2" normalises once at the end, "fa1" after every key tile (module docstring).
    state: "fp32" — S, m, ℓ and the accumulator in the working precision, as the hardware kernels keep them in
    registers; only P̄ (as the matmul operand) and the stored O are rounded. "format" — every intermediate is a
    tensor of the format, as a re-implementation on tensors of that dtype computes it: each operation (matmul,
    scale, subtraction, exp, row sum, rescale, addition, division) runs in the working precision and its result
    is rounded. For fp32 and fp64 the two states are the same."""
    _check(q, k, v, causal)
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}, got {state!r}")
    if len(block) != 2 or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in block):
        raise ValueError(f"block must be (Br, Bc) with positive ints, got {block!r}")
    fmt = get_format(fmt)
    rp = fmt.round                                                  # P̄ operand, stored O: always rounded
    r = fmt.round if state == "format" else (lambda x: x)           # every other intermediate
    q, k, v = _inputs(q, k, v, fmt)
    H, N, d = q.shape
    br, bc = block
    a = d ** -0.5 if scale is None else float(scale)
    nq = -(-N // br)
    qt = torch.zeros(H, nq * br, d, dtype=q.dtype, device=q.device)
    qt[:, :N] = q
    qt = qt.view(H, nq, br, d)                                      # query tiles as a batch
    rows = torch.arange(nq * br, device=q.device).view(nq, br)
    neg = torch.tensor(float("-inf"), dtype=q.dtype, device=q.device)
    m = torch.full((H, nq, br), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros(H, nq, br, dtype=q.dtype, device=q.device)
    o = torch.zeros(H, nq, br, d, dtype=q.dtype, device=q.device)   # fa2: the accumulator; fa1: O, normalised
    for j0 in range(0, N, bc):
        kj, vj = k[:, None, j0:j0 + bc], v[:, None, j0:j0 + bc]     # (H, 1, bc', d)
        s = r(r(qt @ kj.transpose(-1, -2)) * a)                     # (H, nq, br, bc')
        live = None
        if causal:
            cols = torch.arange(j0, j0 + kj.shape[2], device=q.device)
            s = torch.where(cols <= rows[..., None], s, neg)
            live = rows >= j0                                       # (nq, br): the tile reaches the diagonal
        if style == "fa2":
            m_new = torch.maximum(m, s.amax(-1))
            alpha = r(torch.exp(r(m - m_new)))
            p = r(torch.exp(r(s - m_new[..., None])))               # state "fp32": ℓ sums the unrounded P̄
            l_new = r(r(alpha * l) + r(p.sum(-1)))
            o_new = r(r(alpha[..., None] * o) + r(rp(p) @ vj))
        else:
            m_t = s.amax(-1)
            p = r(torch.exp(r(s - m_t[..., None])))
            m_new = torch.maximum(m, m_t)
            alpha, beta = r(torch.exp(r(m - m_new))), r(torch.exp(r(m_t - m_new)))
            l_new = r(r(alpha * l) + r(beta * r(p.sum(-1))))
            num = r(r(r(alpha * l)[..., None] * o) + r(beta[..., None] * r(rp(p) @ vj)))
            o_new = rp(num / l_new[..., None])                      # O written back in the format
        if live is not None:                                        # rows whose tile is all masked: skipped
            m_new = torch.where(live, m_new, m)
            l_new = torch.where(live, l_new, l)
            o_new = torch.where(live[..., None], o_new, o)
        m, l, o = m_new, l_new, o_new
    if style == "fa2":
        o = rp(o / l[..., None])
    return o.reshape(H, nq * br, d)[:, :N]


# --------------------------------------------------------------------------------------------------- metrics
def deviation_stats(o: torch.Tensor, gold: torch.Tensor, fmt="bf16") -> dict:
    """Deviation of O from the golden value (same shape), in float64. Returns floats:

    max_abs, mean_abs, std_abs — Golden et al.'s max |Δ| and mean ± std of |Δ| (Δ = O − O_gold, absolute units);
    ulp — the unit u = mean ulp_fmt(O_gold) (module docstring); max_ulp, mean_abs_ulp — max |Δ|/u, mean |Δ|/u;
    rms_ulp — √mean(Δ²)/u; bias_ulp — mean(Δ)/u, the signed mean error (0 for unbiased rounding); away_ulp —
    mean(sign(O_gold)·Δ)/u (> 0: outputs too large in magnitude); rms_gold — the scale of O_gold; ulp_spread —
    mean(ulp²)/u² (≥ 1; the second moment of the grid spacing, which `fa1_excess_prediction` needs); nonfinite —
    count of non-finite O entries (left out of the other numbers)."""
    if o.shape != gold.shape:
        raise ValueError(f"o and gold must have one shape, got {tuple(o.shape)} and {tuple(gold.shape)}")
    fmt = get_format(fmt)
    g = gold.double()
    x = o.double()
    ok = torch.isfinite(x)
    bad = int((~ok).sum())                          # one host sync; the rest is read back in one more
    # all finite (the usual case): the flattened tensors, in the order the boolean mask would give, without its sync
    g, x = (g[ok], x[ok]) if bad else (g.reshape(-1), x.reshape(-1))
    keys = ("max_abs", "mean_abs", "std_abs", "ulp", "max_ulp", "mean_abs_ulp", "rms_ulp", "bias_ulp", "away_ulp",
            "rms_gold", "ulp_spread")
    if g.numel() == 0:
        return dict({k: float("nan") for k in keys}, nonfinite=bad)
    err = x - g
    ae = err.abs()
    ulps = fmt.ulp(g)
    mx, mean, std, u, rms, bias, away, rms_gold, ulp2 = torch.stack([
        ae.max(), ae.mean(), ae.std(unbiased=False), ulps.mean(), err.square().mean().sqrt(), err.mean(),
        (torch.sign(g) * err).mean(), g.square().mean().sqrt(), ulps.square().mean()]).tolist()
    return dict(max_abs=mx, mean_abs=mean, std_abs=std, ulp=u, max_ulp=mx / u, mean_abs_ulp=mean / u,
                rms_ulp=rms / u, bias_ulp=bias / u, away_ulp=away / u, rms_gold=rms_gold,
                ulp_spread=ulp2 / u ** 2, nonfinite=bad)


# ---------------------------------------------------------------------------------------------------- theory
def fa1_excess_prediction(q, k, v, fmt="bf16", *, block_n: int, causal: bool = False, scale=None,
                          chunk_elems: int = 1 << 24) -> float:
    """Predicted mean-square error of FA1-style storage (FP32 state) minus that of FA2-style, in u² (u = mean ULP of
    the golden O in `fmt`). q, k, v: (H, N, d), the format's inputs.

    Derivation: FA1 rounds the normalised output O_t after every key tile t; model each rounding as an independent
    error ε_t, uniform over ±ulp(O_t)/2 (variance ulp(O_t)²/12). The later updates scale O_t by ℓ_t·e^{m_t − m}/ℓ =
    w_t, the fraction of the row's softmax mass in tiles 0 … t, so ε_t reaches the output as w_t·ε_t. The last
    tile's rounding (w = 1) is the final rounding FA2 has too, so the excess is
        E[Δ²_FA1] − E[Δ²_FA2] = mean over rows and columns of Σ_{t < T} w_t² · ulp(O_t)² / 12,
    with w_t and the intermediate O_t computed exactly (FP64) from the inputs. With the mass spread evenly
    (w_t ≈ t/T) and ulp(O_t) ≈ ulp(O) it is ≈ mean(ulp²)·T/36: the RMS error grows as √(N/Bc). The model assumes
    each rounding is a fresh uniform error; when a tile adds less than half an ULP to O_t (mass concentrated on a
    few early keys), the rounding returns O_t unchanged instead, and the model no longer applies."""
    _check(q, k, v, causal)
    fmt = get_format(fmt)
    q, k, v = (t.double() for t in (q, k, v))
    H, N, d = q.shape
    a = d ** -0.5 if scale is None else float(scale)
    T = -(-N // block_n)
    pad = T * block_n - N
    vt = torch.nn.functional.pad(v, (0, 0, 0, pad)).view(H, T, block_n, d)
    t_idx = torch.arange(T, device=q.device)
    total = torch.zeros((), dtype=torch.float64, device=q.device)   # summed on the device: one host sync at the end
    u_sum = torch.zeros((), dtype=torch.float64, device=q.device)
    count = 0
    rows = max(1, chunk_elems // max(N, T * d))                    # query rows per chunk (all heads of the chunk)
    heads = max(1, rows // N)                                       # whole heads per chunk where a head's rows fit
    for h0 in range(0, H, heads):
        hs = slice(h0, h0 + heads)
        for r0 in range(0, N, rows if heads == 1 else N):
            qi = q[hs, r0:r0 + rows]                                # (h, r, d)
            s = (qi @ k[hs].transpose(-1, -2)) * a                  # (h, r, N)
            r_idx = torch.arange(r0, r0 + qi.shape[1], device=q.device)
            if causal:
                s = s.masked_fill(torch.arange(N, device=q.device)[None, :] > r_idx[:, None], float("-inf"))
            p = torch.softmax(s, dim=-1)
            p = torch.nn.functional.pad(p, (0, pad)).view(*qi.shape[:2], T, block_n)
            mass = p.sum(-1).cumsum(-1)                             # (h, r, T): w_t (p sums to 1)
            num = torch.einsum("hrtk,htkd->hrtd", p, vt[hs]).cumsum(2)  # (h, r, T, d): Σ p v over tiles 0 … t
            o_t = num / mass.clamp_min(1e-300)[..., None]           # the normalised intermediate outputs
            last = (r_idx // block_n) if causal else torch.full_like(r_idx, T - 1)
            keep = (t_idx[None, :] < last[:, None]).double()        # (r, T): live tiles before the row's last one
            total += (keep[..., None] * mass[..., None].square() * fmt.ulp(o_t).square()).sum() / 12.0
            u_sum += fmt.ulp(o_t[:, torch.arange(len(last), device=q.device), last]).sum()
            count += qi.shape[0] * qi.shape[1] * d
    u = float(u_sum) / count
    return float(total) / count / u ** 2
