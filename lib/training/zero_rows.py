"""The exact β rule's per-row shift, and the row-zeroing control built on it.

The β fix (Qiu & Yao §4, with no underflow guard) replaces the max r_m of a key tile whose maximum is repeated
(another score ≥ r_m − tie_tol in the same tile) by β·r_m if r_m > 0 and by 0 if r_m < 0; the running max of the
row is the largest adjusted tile max M. Its largest P̄ entry is then exp(−shift) with shift = M − max_j S[j] ≥ 0.
Once the shift passes the level where exp(−shift) (times the row's few near-max entries) falls below what the
arithmetic can hold, the row's O collapses to (about) 0 and its backward P to 0: the row is dropped from the
forward and from the gradient. That, not the removal of the tie bias, may be what stabilises a run
(regularising exactly the rows whose logits run away). The row-zeroing control asks whether dropping those rows
alone does it: it runs the *plain* attention (no shift anywhere) and zeroes O, with no gradient, on exactly the rows
whose exact-rule shift exceeds a level `zero_at`.

Levels (`zero_at`, in units of the shifted exponent):
* the authors' code clamps each tile's row sum ℓ at `floor` (1e-10): from shift ≈ −ln(floor) ≈ 23.0 on, ℓ sits at
  the clamp and O shrinks as exp(−(shift − 23.0)): `authors_zero_at(floor)` = −ln(floor) (a row with n entries at
  the shifted max reaches the clamp at −ln(floor) + ln n; the level ignores the ln n);
* our kernel has no clamp: a row vanishes when every exp(S − M) underflows; on the GPU the exponential flushes
  results below the normal range, 2^−126, to 0, so the level is 126·ln 2 ≈ 87.34 (`OURS_ZERO_AT`; in the CPU
  interpreter subnormals survive to 150·ln 2 ≈ 103.97, see `lib.fp.beta_theory.underflow_x`).

Shapes: q, k (B, H, T, D); shifts and masks (B, H, T). Scores are formed as each backend forms them, so that the
ties are the backend's ties: `authors_shift` with the authors' tiles, einsum and dtype (BF16 under autocast),
masked with −finfo(dtype).max (so a fully masked tile counts as a repeated negative max, as in their code);
`ours_shift` in FP32 (rounded to BF16 when the profile rounds S), −inf masked, per 64-key tile (our kernels'
BLOCK_N). A tie decided by the last bit of a score can differ from the backend's own (other matmul summation order).
"""
from __future__ import annotations

import math

import torch

__all__ = ["OURS_ZERO_AT", "authors_zero_at", "tile_rule", "authors_shift", "ours_shift", "ours_zero_mask", "tie_block",
           "fix_row_stats",
           "zero_rows", "count_rows"]

OURS_ZERO_AT = 126 * math.log(2.0)   # ≈ 87.34: exp(−x) leaves FP32's normal range (flushed to 0 on the GPU)


def authors_zero_at(floor: float) -> float:
    """The shift from which the authors' clamped row sum sits at the clamp: −ln(floor); `OURS_ZERO_AT` if floor = 0."""
    return -math.log(floor) if floor > 0 else OURS_ZERO_AT


def tile_rule(s: torch.Tensor, *, beta: float, tie_tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One key tile of scores s (..., rows, keys), masked entries already filled: (tile max, the exact rule's
    adjusted tile max), both (..., rows) in s's dtype. A tile max m is repeated when ≥ 2 scores are ≥ m − tie_tol
    (a −inf max is never repeated); repeated m > 0 becomes β·m (unless that overflows), repeated m < 0 becomes 0."""
    m = s.amax(dim=-1)
    repeated = ((s >= (m - tie_tol).unsqueeze(-1)).sum(dim=-1) > 1) & (m > float("-inf"))
    scaled = beta * m
    adj = torch.where(repeated & (m > 0) & torch.isfinite(scaled), scaled, m)
    adj = torch.where(repeated & (adj < 0), torch.zeros_like(adj), adj)
    return m, adj


def authors_shift(q, k, *, tile: int, beta: float, tie_tol: float, causal: bool = True) -> torch.Tensor:
    """(B, H, T) FP32 shift of the exact rule as the authors' forward computes it (their tiles, einsum and dtype;
    run it under the same autocast as their forward). `tile`: their q- and k-bucket size."""
    dt, dev = q.dtype, q.device
    N, d = q.shape[-2:]
    scale = d ** -0.5
    neg = -torch.finfo(dt).max
    shifts = []
    for i0 in range(0, N, tile):
        qi = q[..., i0:i0 + tile, :]
        big = raw = None
        for j0 in range(0, N, tile):
            s = torch.einsum("...id,...jd->...ij", qi, k[..., j0:j0 + tile, :]) * scale
            if causal and i0 < j0 + tile - 1:
                above = torch.ones(qi.shape[-2], s.shape[-1], dtype=torch.bool, device=dev).triu(i0 - j0 + 1)
                s.masked_fill_(above, neg)
            m, adj = tile_rule(s, beta=beta, tie_tol=tie_tol)
            big = adj if big is None else torch.maximum(big, adj)
            raw = m if raw is None else torch.maximum(raw, m)
        shifts.append(big.float() - raw.float())
    return torch.cat(shifts, dim=-1)


def ours_shift(q, k, *, beta: float, tie_tol: float, round_s: bool, causal: bool = True, tile: int = 64,
               scale: float | None = None) -> torch.Tensor:
    """(B, H, T) FP32 shift of the exact rule as our kernel detects ties: FP32 S = (q·kᵀ)·scale, rounded to BF16
    (RNE) when `round_s`, −inf above the diagonal, tiles of `tile` keys."""
    B, H, T, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    with torch.autocast(device_type=q.device.type, enabled=False):
        s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
        if round_s:
            s = s.to(torch.bfloat16).float()
        if causal:
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool, device=s.device).tril(), float("-inf"))
        pad = -T % tile
        if pad:
            s = torch.nn.functional.pad(s, (0, pad), value=float("-inf"))
        m, adj = tile_rule(s.view(B, H, T, -1, tile), beta=beta, tie_tol=tie_tol)   # (B, H, T, n_tiles)
        return adj.amax(dim=-1) - m.amax(dim=-1)


@torch.no_grad()
def ours_zero_mask(q, k, *, numerics, beta: float, tie_tol: float, zero_at: float, causal: bool = True,
                   scale: float | None = None) -> torch.Tensor:
    """(B, H, T) bool: rows whose exact-rule shift, with our kernel's ties (`ours_shift`: its tie-test block — the
    rounding block `numerics.round_block`, else the 64-key tile — S rounded as `numerics` rounds it), exceeds
    `zero_at`."""
    from lib.fp.numerics import get_profile
    nm = get_profile(numerics)
    if nm.round_s and (nm.mantissa_bits != 7 or nm.rounding != "rne"):
        raise ValueError("+zero_rows rebuilds the kernel's ties from BF16 (RNE) scores: with round_s on it needs "
                         f"mantissa_bits=7 and rounding='rne', got {nm.mantissa_bits}, {nm.rounding!r}")
    shift = ours_shift(q, k, beta=beta, tie_tol=tie_tol, round_s=nm.round_s, causal=causal,
                       tile=tie_block(nm, q.shape[-2]), scale=scale)
    return shift > zero_at


def tie_block(numerics, seq_len: int) -> int:
    """Keys per tie test of our kernel's fix: the logical rounding block (`Numerics.round_block`; -1 = the whole row)
    or, with round_block 0, the compute tile (64 keys on both paths: `kernels.attention.EMULATED_BLOCK`, the native
    path's BLOCK_N)."""
    from kernels.attention import EMULATED_BLOCK
    from lib.fp.numerics import get_profile
    rb = get_profile(numerics).round_block
    return EMULATED_BLOCK[1] if rb == 0 else seq_len if rb == -1 else rb


def fix_row_stats(q, k, *, numerics, beta: float, tie_tol: float, max_shift, causal: bool = True,
                  scale: float | None = None) -> dict:
    """Telemetry of our kernel's β fix on one layer's q, k (B, H, T, D): the share of query rows whose max it shifts
    ("fix_rows"), whose shift the exact rule takes past the level where exp(−shift) leaves FP32's normal range, so
    the row's ℓ underflows and the kernel returns O = 0 for it ("fix_zero_rows", with max_shift None), and whose shift
    the underflow guard caps ("fix_guard_rows", with a max_shift)."""
    from lib.fp.numerics import get_profile
    nm = get_profile(numerics)
    shift = ours_shift(q, k, beta=beta, tie_tol=tie_tol, round_s=nm.round_s, causal=causal,
                       tile=tie_block(nm, q.shape[-2]), scale=scale)
    n = shift.numel()
    return dict(fix_rows=(shift != 0).sum().item() / n,
                fix_zero_rows=((shift > OURS_ZERO_AT).sum().item() / n) if max_shift is None else 0.0,
                fix_guard_rows=((shift > max_shift).sum().item() / n) if max_shift is not None else 0.0)


def count_rows(stats: dict | None, rows: torch.Tensor) -> None:
    """Add the number of True rows and of all rows to stats["underflow_n"] / ["underflow_of"] (if stats is a dict)."""
    if stats is not None:
        stats["underflow_n"] = stats.get("underflow_n", 0) + int(rows.sum().item())
        stats["underflow_of"] = stats.get("underflow_of", 0) + rows.numel()


def zero_rows(o: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """O (B, H, T, D) with the rows where `mask` (B, H, T) is True set to 0; no gradient flows into those rows (the
    gradient of a masked fill is 0 there), so the backend's backward sees dO = 0 on them: they contribute nothing
    to dQ, dK or dV."""
    return o.masked_fill(mask.unsqueeze(-1), 0.0)
