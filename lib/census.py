"""The census of the tie bias's preconditions: how often each attention head meets all three at once.

Chapter 1 proves that the BF16 rounding of P̄V is biased away from zero only where three things meet in one row:
(a) two or more keys at the row maximum, so that several P̄ = exp(S − max) are exactly 1; (b) the other keys so far
below that their whole contribution stays under half a BF16 ULP of the tied sum (it sets only the sticky bit) yet
survives the FP32 accumulation; (c) V of one sign over the tied keys, in the feature at hand. `precondition_census`
counts (a), (b) and (c) per head on real q, k, v and measures the error they produce.

Placements (how S and the ties are formed)
------------------------------------------
* ``"authors"`` — the authors' pure-PyTorch FA2 under CUDA BF16 autocast (`lib/training/authors_fa.py`, chapter 2):
  S = bf16(bf16(q·kᵀ)·scale), the einsum's BF16 output times the scale (with a power-of-two scale, D = 16, 64, 256,
  this is one rounding, as the `paper` profile writes it); ties are the keys equal to the row max. O is computed
  with the `paper` profile's rounding points and its 512-key rounding blocks (`Numerics.round_block`).
* ``"fa2"`` — production FlashAttention-2: S = scale·q·kᵀ in FP32; ties are the keys whose P̄ = exp(S − max) rounds
  to 1 in BF16 (the P̄V operand is exactly 1 for each). O: FP32 accumulators over 64-key tiles, one final cast.

Per row (B·T rows per head, causal rows see keys ≤ themselves): n_max = the tied count, r = Σ P̄ over the other keys
(FP32 P̄ of the placement's S). The row is *tied* if n_max ≥ 2, in the *window* if also
WINDOW_LO·n_max ≤ r < WINDOW_HI·n_max, *zero* if tied with r below the window. A (row, feature) pair is in the
*conjunction* if the row is in the window and V has one strict sign over the tied keys in that feature.

Errors (only the window rows are computed: they are gathered per (b, h) into a padded block)
----------------------------------------------------------------------------------------------
* ``err_ulp``: mean over the conjunction of (O − O_ref)·sign(V) / ulp(O_ref), O the placement's arithmetic
  (`forward_rows`, which reproduces `lib.fp.reference.emulate_forward` bit for bit where FP32 arithmetic is exact;
  the tests check it), O_ref = softmax·V in FP64 on the same S, ulp the BF16 spacing at O_ref (`lib.fp.bf16.ulp`).
* ``err_pred``: chapter 1's exact theory (`lib.fp.theory.expected_error_float`) for the same pairs: the mean
  rounding error of k = n_max same-sign tied terms plus a remainder ρ (in ULPs q of the tied terms, q = the BF16
  ULP of their mean |V|), converted from ULPs of the sum to ULPs of O. The remainder is what reaches the rounding of
  the tied sum: "authors" (round then normalise, per rounding block) — Σ P̄V of the other keys of the tied keys'
  rounding block, and 0 where the ties sit in different blocks (each block's remainder is rounded off before they
  meet); "fa2" (normalise then round) — the effective remainder n_max·O_ref − Σ_tied V (chapter 1's "twist": the
  remainder of O/ℓ, whose sign depends on the other keys' V against the tied mean). The theory is exact for n_max a
  power of two, tied |V| within one binade and a single rounding of the tied sum; it leaves out (i) normalising by
  the placement's ℓ (the authors' BF16 ℓ rounds n_max + r to n_max: |O| grows by r/n_max relative, up to ≈ 1 ULP at
  the window's top) and the remainders other rounding blocks drop, (ii) FP32 accumulation effects, (iii) the second
  rounding of O when n_max is not a power of two. Pairs outside the theory's range (n_max > 16, whose tie bias is
  < 1/32 ULP; or a remainder cancelling more than half the tied sum, ρ ≤ −64·n_max) are predicted 0.
* ``err_ell``: part (i)'s normalisation alone, exactly: O_ref·(ℓ_ref/ℓ − 1)·sign(V)/ulp(O_ref) with ℓ the
  placement's final row sum. On the tests' planted rows err_ulp = err_pred + err_ell to 10⁻⁶ ULP.

Returned dict (numpy, per head unless said): ``tie_rate``, ``window_rate``, ``zero_rate`` (fractions of rows),
``one_signed`` (fraction of the window rows' features that are one-signed; NaN without window rows),
``conjunction`` (fraction of all (row, feature) pairs), ``sink_rate`` (row argmax, first occurrence, at key 0),
``top1`` (mean largest softmax probability), ``max_logit`` (largest S), ``err_ulp``, ``err_pred``, ``err_ell`` (NaN
without conjunction pairs), the counts ``n_rows``, ``n_tied``, ``n_window``, ``n_zero``, ``n_conj`` (pairs), ``r_hist``
(H, len(R_EDGES) − 1): tied rows per bin of log2(r/n_max), and ``r_edges`` = R_EDGES. `pool_census` pools several
censuses (layers, steps, batches) from their counts.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from lib.fp import theory
from lib.fp.numerics import FA2, PAPER, Numerics, tiles_per_round_block

__all__ = ["WINDOW_LO", "WINDOW_HI", "R_EDGES", "PLACEMENTS", "placement_numerics", "placement_scores",
           "forward_rows", "theory_error", "precondition_census", "row_classes", "pool_census"]

# The sticky-bit window, as r/n_max: the other keys' P̄ mass relative to the tied keys' (each P̄ = 1), i.e. their
# share of P̄V when |V| is comparable across keys. The tied sum Σ lies in a binade [2^e, 2^(e+1)).
# * Upper edge: the remainder must stay under half a BF16 ULP of Σ, 2^(e−8), which is between 2⁻⁹·Σ and 2⁻⁸·Σ;
#   r < 2⁻⁸·n_max is that bound at its most generous (beyond it the remainder decides the rounding by itself).
# * Lower edge: the remainder must survive FP32 accumulation into Σ to set the sticky bit. Σ's FP32 ULP is
#   2^(e−23) ≤ 2⁻²³·Σ, so r ≥ 2⁻²²·n_max keeps the remainder at two FP32 ULPs of Σ or more (added as one term: key by
#   key, as chapter 1 shows, smaller pieces can be lost even so). Below it the tie is an exact tie: no bias.
WINDOW_LO = 2.0 ** -22
WINDOW_HI = 2.0 ** -8
# Bins of log2(r / n_max) over tied rows: [−inf, −48), 64 unit bins [−48, −47) … [15, 16), [16, inf). The window's
# edges are bin edges (−22 and −8), so the window's rows are exactly the bins between them; r = 0 falls in the first.
R_EDGES = np.array([-np.inf, *range(-48, 17), np.inf])
PLACEMENTS = ("authors", "fa2")
_M = 7                    # BF16 mantissa bits
_MAX_K = 16               # lib.fp.theory's pmf stops at 16 tied terms


def placement_numerics(placement: str, round_block: int = 512) -> Numerics:
    """The `Numerics` of a placement's forward: "authors" → `paper` with `round_block` (their 512-key tiles);
    "fa2" → `fa2` (64-key compute tiles)."""
    if placement == "authors":
        return PAPER.replace(round_block=round_block)
    if placement == "fa2":
        return FA2
    raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")


def _bf16(x: torch.Tensor) -> torch.Tensor:
    """Round to the BF16 grid (round to nearest even: torch's cast, on the CPU and the GPU), keeping x's dtype."""
    return x.to(torch.bfloat16).to(x.dtype)


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """BF16 spacing at |x| (float64), as `lib.fp.bf16.ulp`: 2^(⌊log2|x|⌋ − 7), exponent floored at −126, 0 → 2⁻⁷."""
    a = x.abs().to(torch.float64)
    _, e = torch.frexp(torch.where(a > 0, a, torch.ones_like(a)))       # a = f·2^e, f ∈ [½, 1)
    return torch.ldexp(torch.ones_like(a), (e - 1).clamp_min(-126) - _M)


def placement_scores(q: torch.Tensor, k: torch.Tensor, placement: str, scale: float, causal: bool) -> torch.Tensor:
    """S (..., T, T) float32 of q, k (..., T, D) float32 (BF16 values) as the placement forms it (module docstring);
    causally masked entries are −inf."""
    s = torch.matmul(q, k.transpose(-2, -1))                # FP32 accumulation of exact BF16 products
    s32 = torch.tensor(scale, dtype=torch.float32).item()    # the scale as the FP32 opmath scalar it becomes
    if placement == "authors":
        # bf16(bf16(s)·s32): torch multiplies a BF16 tensor by a scalar in FP32 (its opmath) and rounds the product
        # to BF16 (nearest even), i.e. the same two roundings in three passes instead of five
        b = s.to(torch.bfloat16)
        s.copy_(b.mul_(s32))
    else:
        s.mul_(s32)
    if causal:
        T = s.shape[-1]
        above = torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1)
        s.masked_fill_(above, float("-inf"))
    return s


def forward_rows(s: torch.Tensor, v: torch.Tensor, numerics: Numerics, block_n: int = 64,
                 return_l: bool = False):
    """O (..., R, D) float32 of FA2's forward on rows of scores, with the rounding points of `numerics` (and the
    final row sum ℓ (..., R) as the placement holds it, when `return_l`).

    s: (..., R, T) float32 scores as formed (already rounded if the placement rounds S; masked entries −inf; a row
    of −inf gives O = 0); v: (..., T, D) float32 holding BF16 values; keys are visited in logical rounding blocks of
    `tiles_per_round_block(numerics.round_block, block_n, T)·block_n` keys, in the order and with the roundings of
    `lib.fp.reference.emulate_forward` (its module docstring): one max, α rescale and rounding of ℓ, P̄V and the
    accumulator per block. Within a block P̄V is one FP32 matmul and ℓ one FP32 sum (the authors' einsum over their
    512-key tile; the emulator sums 64-key tiles, which is the same wherever FP32 arithmetic is exact). Round to
    nearest even with BF16's 7 mantissa bits only (torch's casts)."""
    nm = numerics
    if nm.mantissa_bits != _M or nm.rounding != "rne":
        raise ValueError(f"forward_rows emulates BF16 round-to-nearest-even only, got mantissa_bits="
                         f"{nm.mantissa_bits}, rounding={nm.rounding!r}")
    rnd = _bf16
    T = s.shape[-1]
    width = tiles_per_round_block(nm.round_block, block_n, T) * block_n
    neg_inf = float("-inf")
    m = torch.full(s.shape[:-1], neg_inf, dtype=torch.float32, device=s.device)
    ell = torch.zeros_like(m)
    acc = torch.zeros((*s.shape[:-1], v.shape[-1]), dtype=torch.float32, device=s.device)
    for j0 in range(0, T, width):
        s_b = s[..., j0:j0 + width]
        m_new = torch.maximum(m, s_b.amax(-1))
        m_use = torch.where(m_new == neg_inf, torch.zeros_like(m_new), m_new)
        e = m - m_use
        alpha = torch.exp(rnd(e) if nm.round_s_minus_m else e)
        x = s_b - m_use[..., None]
        p = torch.exp(rnd(x) if nm.round_s_minus_m else x)
        p_op = rnd(p) if nm.round_p else p
        ell = ell * alpha + (p_op if nm.rowsum_rounded_p else p).sum(-1)
        if nm.round_l:
            ell = rnd(ell)
        acc = acc * alpha[..., None]
        if nm.round_acc:
            acc = rnd(acc)
        pv = torch.matmul(p_op, v[..., j0:j0 + width, :])
        acc = acc + (rnd(pv) if nm.round_pv else pv)
        if nm.round_acc:
            acc = rnd(acc)
        m = m_new
    ell = torch.where(ell == 0, torch.ones_like(ell), ell)
    if not nm.normalize_then_round:
        acc, ell = rnd(acc), rnd(ell)
    o = acc / ell[..., None]
    o = rnd(o) if nm.round_o else o
    return (o, ell) if return_l else o


def theory_error(n, rho) -> np.ndarray:
    """Chapter 1's exact mean error (ULPs of the sum) of rounding n same-sign tied BF16 terms plus a remainder rho
    (units of the terms' ULP; negative = against the terms), elementwise over arrays n (int) and rho (float64).

    The same values as `lib.fp.theory.expected_error_float(n, rho)`, evaluated cheaply for many pairs: that mean is
    linear in ρ between consecutive multiples of ½ (every rounding boundary and binade edge of S + ρ, S an integer,
    lies on ½ℤ), so each pair reads the line through two points of its half-interval, and a ρ exactly on ½ℤ (ρ = 0:
    no remainder) is evaluated there. 0 outside the theory's range: n > 16 or ρ ≤ −64·n (module docstring).

    The mean is evaluated only at the distinct points that are read: the two points of each distinct half-interval
    and the distinct ρ on ½ℤ (`expected_error_float` is elementwise: each value does not depend on the others
    passed with it), found by counting (`_distinct_integers`), so the cost is a few passes over the pairs."""
    n = np.asarray(n, dtype=np.int64)
    rho = np.asarray(rho, dtype=np.float64)
    n, rho = np.broadcast_arrays(n, rho)
    out = np.zeros(n.shape, dtype=np.float64)
    ok = (n >= 1) & (n <= _MAX_K) & (rho > -(2 ** (_M - 1)) * n) & np.isfinite(rho)
    for k in np.flatnonzero(np.bincount(n[ok], minlength=_MAX_K + 1)):
        sel = ok & (n == k)
        r = rho[sel]
        half = np.floor(2.0 * r)
        on_edge = half == 2.0 * r
        a = half / 2 + 0.125                      # two points inside the open half-interval (half/2, half/2 + ½)
        uh, ia = _distinct_integers(half)
        ua = uh / 2 + 0.125                       # a's distinct values (the same arithmetic on the same halves)
        f = theory.expected_error_float(int(k), np.concatenate([ua, ua + 0.25]), _M).reshape(2, -1)
        f0, f1 = f[0][ia], f[1][ia]
        res = f0 + (f1 - f0) * (r - a) / 0.25
        if on_edge.any():
            ue, ie = _distinct_integers(half[on_edge])
            res[on_edge] = theory.expected_error_float(int(k), ue / 2, _M)[ie]     # r = half/2 (±0 alike here)
        out[sel] = res
    return out


def _theory_error_torch(n: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """`theory_error` on tensors, on their device: the same operations in the same order, so the same values bit for
    bit (each step an IEEE FP64 operation; the distinct points by `torch.unique`, the theory's values on the host).
    A census keeps its pairs on the GPU this way: on the host the pairs' transfer and the per-pair arithmetic cost
    ≈ 0.1 µs a pair, most of an event on rows where ties are common."""
    n = n.to(torch.int64)
    rho = rho.to(torch.float64)
    n, rho = torch.broadcast_tensors(n, rho)
    out = torch.zeros(n.shape, dtype=torch.float64, device=rho.device)
    ok = (n >= 1) & (n <= _MAX_K) & (rho > -(2 ** (_M - 1)) * n) & torch.isfinite(rho)
    for k in torch.unique(n[ok]).tolist():
        sel = ok & (n == k)
        r = rho[sel]
        half = torch.floor(2.0 * r)
        on_edge = half == 2.0 * r
        a = half / 2 + 0.125
        uh, ia = torch.unique(half, return_inverse=True)
        ua = (uh / 2 + 0.125).cpu().numpy()
        f = torch.from_numpy(theory.expected_error_float(int(k), np.concatenate([ua, ua + 0.25]), _M).reshape(2, -1))
        f = f.to(rho.device)
        f0, f1 = f[0][ia], f[1][ia]
        res = f0 + (f1 - f0) * (r - a) / 0.25
        if bool(on_edge.any()):
            ue, ie = torch.unique(half[on_edge], return_inverse=True)
            fe = theory.expected_error_float(int(k), (ue / 2).cpu().numpy(), _M)
            res[on_edge] = torch.as_tensor(fe, dtype=torch.float64).to(rho.device)[ie]
        out[sel] = res
    return out


def _distinct_integers(x: np.ndarray) -> tuple:
    """(values, inverse) of a float64 array of integers, as np.unique(x, return_inverse=True) gives them (−0 may
    come back as 0): by counting when they span a short range (the remainders ρ of a census: a few dozen
    half-intervals for a million pairs), by sorting otherwise."""
    if x.size:
        lo, hi = x.min(), x.max()
        if -2.0 ** 52 < lo and hi < 2.0 ** 52 and hi - lo <= max(4 * x.size, 1 << 16):
            idx = (x - lo).astype(np.int64)
            present = np.bincount(idx, minlength=int(hi - lo) + 1) > 0
            return lo + np.flatnonzero(present), (np.cumsum(present) - 1)[idx]
    return np.unique(x, return_inverse=True)


def _window_errors(s, at, n_max, win, v, placement, nm, block_n):
    """Per conjunction pair of one chunk, as 1-D tensors: chunk index, n_max, ρ, the factor from ULPs of the sum
    to ULPs of O, the error and its normalisation part (ULPs of O).

    s, at: (c, T, T) scores and tie mask; n_max: (c, T) tied counts (at's row sums); win: (c, T) window rows;
    v: (c, T, D) float32.

    Cost: every FP reduction (the row sums, the FP64 and FP32 matmuls, `forward_rows`) runs on the same operands,
    shapes and layouts as the plain formulas, so the results do not depend on the arrangement below; what changes
    is the rest. The (c, r_max, T) FP64 block is one buffer, used in place in turn for P̄, the authors' in-block P̄
    and the tie mask (on the CPU a fresh tensor of that size costs about as much as its page faults); the tied
    counts come from `_classify`; the authors' tie block from per-block tie flags, not per-key index arrays."""
    g, i = win.nonzero(as_tuple=True)                       # sorted by g, then i
    counts = torch.bincount(g, minlength=s.shape[0])
    r_max = int(counts.max())
    pos = torch.arange(g.numel(), device=s.device) - (torch.cumsum(counts, 0) - counts)[g]
    c, T = s.shape[:2]
    s_w = torch.full((c, r_max, T), float("-inf"), dtype=s.dtype, device=s.device)
    s_w[g, pos] = s[g, i]
    at_w = torch.zeros((c, r_max, T), dtype=torch.bool, device=s.device)
    at_w[g, pos] = at[g, i]
    valid = torch.zeros((c, r_max), dtype=torch.bool, device=s.device)
    valid[g, pos] = True
    n = torch.zeros((c, r_max, 1), dtype=torch.int64, device=s.device)      # at_w's row sums
    n[g, pos, 0] = n_max[g, i].to(torch.int64)
    o, ell = forward_rows(s_w, v, nm, block_n, return_l=True)
    o = o.to(torch.float64)
    # FP64 softmax·V on the same S (buf: P̄ in FP64, then reused below)
    v64 = v.to(torch.float64)
    m64 = s_w.amax(-1, keepdim=True).to(torch.float64)     # the max is exact: the FP64 copy's max
    buf = s_w.to(torch.float64)
    buf.sub_(torch.where(torch.isfinite(m64), m64, torch.zeros_like(m64))).exp_()
    ell64 = buf.sum(-1, keepdim=True)
    o_ref = torch.matmul(buf, v64) / torch.where(ell64 > 0, ell64, torch.ones_like(ell64))
    if placement == "authors":
        # the remainder inside the tied keys' rounding block; none where the ties sit in different blocks
        width = tiles_per_round_block(nm.round_block, block_n, T) * block_n
        nb = -(-T // width)
        at_p = at_w if nb * width == T else torch.cat([at_w, at_w.new_zeros(c, r_max, nb * width - T)], -1)
        has = at_p.view(c, r_max, nb, width).any(-1)       # (c, r_max, nb): the blocks holding tied keys
        blk = torch.where(has.sum(-1) == 1, has.to(torch.uint8).argmax(-1), -1)    # the one block, or none
        out_blk = (torch.arange(T, device=s.device) // width != blk[..., None]) | at_w
        # P̄·[in block]: filling with 0 is multiplying by 0 because every P̄ here is finite (a window row's max is
        # finite: an infinite or NaN one leaves r = 0 or NaN, outside the window; padding rows are all 0)
        buf.masked_fill_(out_blk, 0.0)
        rem = torch.matmul(buf, v64)
    buf.copy_(at_w)
    tied_sum = torch.matmul(buf, v64)                       # Σ over the tied keys of V, exact in FP64
    s_w.copy_(at_w)                                          # the tie mask in FP32 (s_w is spent)
    signs = torch.matmul(s_w, torch.cat([v > 0, v < 0], -1).to(torch.float32))  # exact counts
    n_pos, n_neg = signs.split(v.shape[-1], -1)
    one = valid[..., None] & ((n_pos == n) | (n_neg == n))
    sign = torch.where(n_pos == n, 1.0, -1.0).to(torch.float64)
    ulp_o = _ulp(o_ref)
    err = (o - o_ref) * sign / ulp_o
    # what normalising by the placement's ℓ instead of the exact one does to O (BF16 ℓ ≈ n_max drops r: |O| grows)
    err_ell = o_ref * sign * (ell64 / ell.to(torch.float64)[..., None] - 1) / ulp_o
    if placement != "authors":
        rem = n * o_ref - tied_sum                          # the effective remainder of O/ℓ (normalise then round)
    q_unit = _ulp(tied_sum / n.clamp_min(1))
    rho = rem * sign / q_unit
    factor = _ulp(tied_sum + rem) / (n.clamp_min(1) * _ulp(o_ref))   # ULPs of the sum → ULPs of O
    gi, ri, fi = one.nonzero(as_tuple=True)
    return gi, n[gi, ri, 0], rho[gi, ri, fi], factor[gi, ri, fi], err[gi, ri, fi], err_ell[gi, ri, fi]


def _classify(s: torch.Tensor, placement: str) -> tuple:
    """(row max, Σ P̄ (..., T) FP32, tie mask (..., T, T), n_max (..., T) int32, r/n_max (FP64), tied rows, window
    rows) of scores s (..., T, T), P̄ the FP32 exp(S − max)."""
    mx = s.amax(-1, keepdim=True)
    p = torch.sub(s, mx).exp_()                          # FP32 P̄ (masked keys: 0)
    # fa2: bf16(P̄) == 1, i.e. P̄ ≥ 1 − 2⁻⁹ (nearest even: the midpoint 1 − 2⁻⁹ goes to 1.0; P̄ = exp(S − max) never
    # exceeds 1 + 2⁻⁸, where the rounding to 1 would stop)
    at = (s == mx) if placement == "authors" else (p >= 1.0 - 2.0 ** -9)
    n = at.sum(-1, dtype=torch.int32)
    p_sum = p.sum(-1)
    ratio = p.masked_fill_(at, 0).sum(-1).to(torch.float64) / n
    tied = n >= 2
    win = tied & (ratio >= WINDOW_LO) & (ratio < WINDOW_HI)
    return mx, p_sum, at, n, ratio, tied, win


@torch.no_grad()
def row_classes(q, k, v, *, causal: bool = True, placement: str = "authors", scale=None) -> dict:
    """The census's classes as masks, for measurements made row by row (the chain probe, the kernel table).

    q, k, v: (B, H, T, D) (BF16, or float32 holding BF16 values). Returns "tied", "window", "zero" (B, H, T) bool
    (definitions in the module docstring), "one_signed" (B, H, T, D) bool (tied rows whose V has one strict sign over
    the tied keys in that feature) and "tied_sign" (B, H, T, D) float32: that sign (±1), 0 elsewhere."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    B, H, T, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    s = placement_scores(q.detach().float(), k.detach().float(), placement, scale, causal)
    _, _, at, _, ratio, tied, win = _classify(s, placement)
    vf = v.detach().float()
    atf = at.to(torch.float32)
    n_pos = torch.matmul(atf, (vf > 0).to(torch.float32))          # exact counts of tied keys with V > 0
    n_neg = torch.matmul(atf, (vf < 0).to(torch.float32))
    n = at.sum(-1, keepdim=True).to(torch.float32)
    pos, neg = (n_pos == n) & tied[..., None], (n_neg == n) & tied[..., None]
    sign = pos.to(torch.float32) - neg.to(torch.float32)
    return dict(tied=tied, window=win, zero=tied & (ratio < WINDOW_LO), one_signed=pos | neg, tied_sign=sign)


@torch.no_grad()
def precondition_census(q, k, v, *, causal: bool = True, placement: str = "authors", scale=None,
                        round_block: int = 512, block_n: int = 64, chunk: int = 8) -> dict:
    """The census of the tie bias's preconditions per head (module docstring: definitions and returned keys).

    q, k, v: (B, H, T, D) BF16, or float32 holding BF16 values (CPU); every computation runs in torch on q's
    device. scale: default D^−½. round_block: the authors' rounding block in keys (512 as in their model; 0 = the
    64-key compute tile, −1 = the whole row); block_n: the compute tile width (keys). chunk: (b, h) matrices per
    pass (memory ≲ 50·chunk·T² bytes, most of it only when every row is in the window); results do not depend
    on it."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if not (q.dim() == 4 and q.shape == k.shape and q.shape[:3] == v.shape[:3]):
        raise ValueError(f"q, k, v must be (B, H, T, D) with one shape for q and k, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    xs = []
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"{name} must be bfloat16 or float32 holding BF16 values, got {t.dtype}")
        t = t.detach().to(torch.float32)
        if not torch.equal(_bf16(t), t):
            raise ValueError(f"{name} holds values that are not BF16 values (round it to BF16 first)")
        xs.append(t)
    nm = placement_numerics(placement, round_block)
    B, H, T, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    q3, k3, v3 = (t.reshape(B * H, T, t.shape[-1]) for t in xs)
    dev = q.device
    heads = torch.arange(B * H, device=dev) % H
    f64 = dict(dtype=torch.float64, device=dev)
    acc = {name: torch.zeros(H, **f64) for name in ("n_tied", "n_window", "n_zero", "sink", "top1")}
    max_logit = torch.full((H,), float("-inf"), **f64)
    inner = torch.tensor(R_EDGES[1:-1], **f64)
    n_bins = len(R_EDGES) - 1
    hist = torch.zeros(H * n_bins, **f64)
    pairs = []
    for c0 in range(0, B * H, chunk):
        sl = slice(c0, c0 + chunk)
        h = heads[sl]
        s = placement_scores(q3[sl], k3[sl], placement, scale, causal)
        mx, p_sum, at, n_max, ratio, tied, win = _classify(s, placement)
        for name, x in (("n_tied", tied), ("n_window", win), ("n_zero", tied & (ratio < WINDOW_LO)),
                        ("sink", s[..., 0] == mx[..., 0]), ("top1", 1.0 / p_sum.to(torch.float64))):
            acc[name].index_add_(0, h, x.to(torch.float64).sum(-1))
        max_logit.scatter_reduce_(0, h, mx.amax((-2, -1)).to(torch.float64), reduce="amax")  # S's largest
        bins = torch.bucketize(torch.log2(ratio), inner, right=True)     # [lo, hi) bins
        hist.index_add_(0, (h[:, None] * n_bins + bins)[tied], torch.ones_like(ratio)[tied])
        if bool(win.any()):
            gi, *rest = _window_errors(s, at, n_max, win, v3[sl], placement, nm, block_n)
            pairs.append((h[gi], *rest))
    n_rows = np.full(H, float(B * T))
    out = {key: acc[key].cpu().numpy() for key in ("n_tied", "n_window", "n_zero")}
    out.update(n_rows=n_rows, tie_rate=out["n_tied"] / n_rows, window_rate=out["n_window"] / n_rows,
               zero_rate=out["n_zero"] / n_rows, sink_rate=acc["sink"].cpu().numpy() / n_rows,
               top1=acc["top1"].cpu().numpy() / n_rows, max_logit=max_logit.cpu().numpy(),
               r_hist=hist.reshape(H, n_bins).cpu().numpy(), r_edges=R_EDGES.copy())
    n_conj = np.zeros(H)
    sums = dict(err_ulp=np.zeros(H), err_pred=np.zeros(H), err_ell=np.zeros(H))
    if pairs:
        hp, nk, rho, fac, err, ell = (torch.cat(cols) for cols in zip(*pairs))
        if dev.type == "cuda":      # the theory's mean where the pairs are (same values: `_theory_error_torch`)
            pred = (_theory_error_torch(nk, rho) * fac).cpu().numpy()
        else:
            pred = theory_error(nk.numpy(), rho.numpy()) * fac.numpy()
        hp, err, ell = (x.cpu().numpy() for x in (hp, err, ell))
        n_conj = np.bincount(hp, minlength=H).astype(np.float64)
        for key, x in (("err_ulp", err), ("err_pred", pred), ("err_ell", ell)):
            sums[key] = np.bincount(hp, weights=x, minlength=H)
    with np.errstate(invalid="ignore", divide="ignore"):
        out.update(n_conj=n_conj, conjunction=n_conj / (n_rows * D), one_signed=n_conj / (out["n_window"] * D),
                   **{key: x / n_conj for key, x in sums.items()})
    return out


def pool_census(censuses) -> dict:
    """Pool censuses of one head count (layers, steps, batches) honestly: counts and r_hist add, each rate is its
    pooled numerator over its pooled denominator (n_rows; n_window for one_signed; n_conj for the errors),
    max_logit is the largest. Returns a dict with the keys of one census."""
    cs = list(censuses)
    if not cs:
        raise ValueError("pool_census needs at least one census")
    H = {len(c["n_rows"]) for c in cs}
    if len(H) != 1:
        raise ValueError(f"censuses of different head counts cannot be pooled: {sorted(H)}")
    tot = lambda key: sum(np.asarray(c[key], dtype=np.float64) for c in cs)  # noqa: E731
    wsum = lambda key, w: sum(np.nan_to_num(np.asarray(c[key], np.float64)) * c[w] for c in cs)  # noqa: E731
    n_rows, n_window, n_conj = tot("n_rows"), tot("n_window"), tot("n_conj")
    out = {key: tot(key) for key in ("n_rows", "n_tied", "n_window", "n_zero", "n_conj", "r_hist")}
    with np.errstate(invalid="ignore", divide="ignore"):
        for key in ("tie_rate", "window_rate", "zero_rate", "conjunction", "sink_rate", "top1"):
            out[key] = wsum(key, "n_rows") / n_rows
        out["one_signed"] = np.where(n_window > 0, wsum("one_signed", "n_window") / n_window, np.nan)
        for key in ("err_ulp", "err_pred", "err_ell"):
            out[key] = np.where(n_conj > 0, wsum(key, "n_conj") / n_conj, np.nan)
    out["max_logit"] = np.max([c["max_logit"] for c in cs], axis=0)
    out["r_edges"] = R_EDGES.copy()
    return out
