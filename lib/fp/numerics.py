"""Where rounding happens inside flash attention, as data.

One frozen `Numerics` value names every rounding point of the forward and backward pass. The same value drives
the Triton kernels (as `tl.constexpr` flags), the PyTorch/numpy emulator in `lib/fp/reference.py` (the oracle) and
the rounding-point table of chapter 2. "Low precision" (lp) means: rounded to `mantissa_bits` mantissa bits with
`rounding` (7 bits + "rne" = BF16). Everything not listed as rounded is FP32.

Profiles
--------
* ``fp32``  — reference: nothing rounded (inputs are still whatever the caller passes).
* ``fa2``   — production FlashAttention-2: FP32 S, FP32 running max / row sum / O accumulator; P̄ rounded only as the
              P̄V matmul operand; normalise in FP32, round O once on store; LSE FP32; δ = rowsum(dO∘O) from the saved
              (rounded) O, in FP32; backward P and dS rounded only as matmul operands.
* ``paper`` — the authors' pure-PyTorch FA under CUDA BF16 autocast: BF16 wherever an op's output is BF16 under
              autocast (einsum outputs, BF16 − BF16, in-place updates of BF16 buffers), FP32 where autocast runs the
              op in FP32 (exp, log, sum). Checked on the GPU by `lib/studies/kernel/paper_placement.py` (chapter 2).

Rounding blocks
---------------
`round_block` (keys) decouples the rounding points that depend on tiling from the kernels' compute tile (64 keys).
0: they follow the compute tile (the default; every profile). R > 0, a multiple of the tile width (e.g. 512, the
authors' tile): per logical block of R keys the forward takes one block max (the α rescale once per block), runs
the fix's tie test over the whole block, sums P̄V and ℓ over the block's tiles in FP32 and rounds them (round_pv,
round_l, round_acc) once per block; with round_grad_acc the backward rounds dQ per block of R keys and dK, dV per
block of R queries. -1: one block per row (the paper's untiled analysis). Spec strings: ``paper/round_block=512``.

The exact arithmetic order each flag guards is written down in `lib/fp/reference.py` (module docstring).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

__all__ = ["Numerics", "PROFILES", "get_profile", "rounding_point_table", "tiles_per_round_block"]

_DELTA_SOURCES = ("saved_o", "fp32_o", "dp_p", "dp_p_norm")
_ROUNDINGS = ("rne", "sr")


@dataclass(frozen=True)
class Numerics:
    # --- forward ------------------------------------------------------------------------------------------------
    round_s: bool = False          # scores S = scale·QKᵀ rounded (paper code: einsum output is BF16)
    round_s_minus_m: bool = False  # forward exponent arguments S − m and m_old − m_new rounded before exp
    round_p: bool = True           # P̄ = exp(S − m) rounded: as the P̄V matmul operand (fa2) or stored (paper)
    rowsum_rounded_p: bool = False # ℓ sums the rounded P̄ (paper) instead of the FP32 P̄ (fa2)
    round_l: bool = False          # running row sum ℓ = lp(α·ℓ + ℓ_tile), one rounding per tile (lp buffer)
    round_pv: bool = False         # each tile's P̄V product rounded before it meets the accumulator
    round_acc: bool = False        # O accumulator rounded after each tile's rescale-and-add (lp buffer)
    normalize_then_round: bool = True  # True: O = lp(acc/ℓ) with FP32 acc (fa2); False: O = lp(lp(acc)/lp(ℓ))
    round_lse: bool = False        # LSE = m + log ℓ stored in lp
    round_o: bool = True           # O as returned and saved for backward, in lp
    round_block: int = 0           # keys per logical rounding block: 0 = the compute tile, k·tile width, -1 = row
    # --- backward -----------------------------------------------------------------------------------------------
    delta_source: str = "saved_o"  # δ from the saved O ("saved_o"), an FP32 recompute ("fp32_o"), rowsum(dP∘P)
                                   # ("dp_p"), or rowsum(dP∘P) / rowsum(P) ("dp_p_norm", `kernels/flash_bwd.py`)
    round_delta: bool = False      # δ itself stored in lp (paper code)
    round_delta_products: bool = False  # δ's elementwise products dO∘O rounded before the row sum
    round_bwd_s_minus_lse: bool = False  # backward exponent argument S − LSE rounded before exp
    round_bwd_p: bool = True       # backward P = exp(S − LSE) rounded (as the dV matmul operand, or stored)
    round_ds: bool = True          # dS rounded (as the dQ / dK matmul operand, or stored)
    round_dp: bool = False         # dP = dO·Vᵀ rounded (and dP − δ too when δ is also lp: round_delta)
    round_grad_acc: bool = False   # each tile's dQ/dK/dV product rounded; dQ/dK/dV accumulators in lp
    # --- format ---------------------------------------------------------------------------------------------
    mantissa_bits: int = 7         # 7 = BF16; fewer = the precision dial (same 8-bit exponent)
    rounding: str = "rne"          # "rne" (round to nearest even) or "sr" (stochastic)

    def __post_init__(self):
        if self.delta_source not in _DELTA_SOURCES:
            raise ValueError(f"delta_source must be one of {_DELTA_SOURCES}, got {self.delta_source!r}")
        if self.rounding not in _ROUNDINGS:
            raise ValueError(f"rounding must be one of {_ROUNDINGS}, got {self.rounding!r}")
        if isinstance(self.mantissa_bits, bool) or not isinstance(self.mantissa_bits, int) \
                or not 1 <= self.mantissa_bits <= 23:
            raise ValueError(f"mantissa_bits must be an int in [1, 23], got {self.mantissa_bits!r}")
        rb = self.round_block
        if isinstance(rb, bool) or not isinstance(rb, int) or not (rb in (-1, 0) or (rb > 0 and rb % 16 == 0)):
            raise ValueError(f"round_block must be 0 (the compute tile), -1 (the whole key row) or a positive "
                             f"multiple of the compute tile width (a multiple of 16, e.g. 512), got {rb!r}")
        for f in fields(self):
            if f.type in ("bool", bool) and not isinstance(getattr(self, f.name), bool):
                raise TypeError(f"{f.name} must be a bool, got {getattr(self, f.name)!r}")

    def replace(self, **kw) -> "Numerics":
        return replace(self, **kw)

    def as_dict(self) -> dict:
        return asdict(self)


FP32 = Numerics(round_p=False, round_o=False, round_bwd_p=False, round_ds=False)
FA2 = Numerics()
# The authors' pure-PyTorch FA2 under CUDA BF16 autocast, as read from PyTorch's autocast rules: einsum outputs BF16
# (S, P̄V, dP, dQ/dK/dV tiles), exp/log/sum run in FP32 (P̄, ℓ_tile, LSE, δ's row sum are FP32), BF16 − BF16 is BF16
# (S − m), in-place updates of BF16 buffers round (ℓ, O accumulator, dQ/dK/dV accumulators). Checked bit-for-bit
# on the GPU by `lib/studies/kernel/paper_placement.py` (chapter 2 shows the measured agreement).
PAPER = Numerics(round_s=True, round_s_minus_m=True, round_p=True, rowsum_rounded_p=False, round_l=True,
                 round_pv=True, round_acc=True, normalize_then_round=False, round_lse=False, round_o=True,
                 delta_source="saved_o", round_delta=False, round_delta_products=True, round_bwd_s_minus_lse=False,
                 round_bwd_p=True, round_ds=True, round_dp=True, round_grad_acc=True)

PROFILES = {"fp32": FP32, "fa2": FA2, "paper": PAPER}

# One-line descriptions, used by the chapter-2 table (keep in field order).
DESCRIPTIONS = {
    "round_s": "scores S = α·QKᵀ",
    "round_s_minus_m": "forward exponent arguments S − m, m_old − m_new",
    "round_p": "P̄ = exp(S − m) (matmul operand / stored)",
    "rowsum_rounded_p": "ℓ sums the rounded P̄",
    "round_l": "running row sum ℓ (once per tile)",
    "round_pv": "per-tile P̄V product",
    "round_acc": "O accumulator across tiles",
    "normalize_then_round": "normalise in FP32, then round once",
    "round_lse": "LSE = m + log ℓ",
    "round_o": "O returned / saved for backward",
    "round_block": "keys per rounding block (0: compute tile, −1: row)",
    "delta_source": "δ source",
    "round_delta": "δ stored",
    "round_delta_products": "δ's products dO∘O",
    "round_bwd_s_minus_lse": "backward exponent argument S − LSE",
    "round_bwd_p": "backward P",
    "round_ds": "backward dS",
    "round_dp": "backward dP (and dP − δ if δ is lp)",
    "round_grad_acc": "dQ/dK/dV tile products and accumulators",
    "mantissa_bits": "mantissa bits",
    "rounding": "rounding mode",
}


def get_profile(numerics) -> Numerics:
    """A profile name ('fp32', 'fa2', 'paper') or a Numerics value -> Numerics. Raises on anything else."""
    if isinstance(numerics, Numerics):
        return numerics
    if isinstance(numerics, str):
        if numerics not in PROFILES:
            raise ValueError(f"unknown numerics profile {numerics!r}; choose one of {sorted(PROFILES)} or pass a Numerics")
        return PROFILES[numerics]
    raise TypeError(f"numerics must be a profile name or a Numerics, got {type(numerics).__name__}")


def rounding_point_table(profiles=("fp32", "fa2", "paper")):
    """Rows (field, description, value per profile) for the chapter-2 table."""
    ps = [get_profile(p) for p in profiles]
    return [(f.name, DESCRIPTIONS[f.name], *[getattr(p, f.name) for p in ps]) for f in fields(Numerics)]


def tiles_per_round_block(round_block: int, block: int, n: int) -> int:
    """Tiles of width `block` per logical rounding block (`Numerics.round_block`) along a row (or column) of `n`
    keys (or queries): 1 for round_block = 0, all `ceil(n / block)` tiles for -1, round_block / block otherwise.
    Raises ValueError when a positive round_block is not a multiple of `block` (the kernels' tiles are 64 wide)."""
    if round_block == 0:
        return 1
    if round_block == -1:
        return max(1, -(-int(n) // int(block)))
    if round_block % block:
        raise ValueError(f"round_block={round_block} must be a multiple of the tile width {block}; use a "
                         f"multiple of {block}, 0 (per tile) or -1 (the whole row)")
    return round_block // block
