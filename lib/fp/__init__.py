"""Floating point: bit-level BF16 references (`bf16`), where attention rounds (`numerics`), the fix as one value
(`fix`), the FP64 reference and the emulator of any rounding placement (`reference`, the kernels' oracle), shared
attention inputs (`inputs`), and the theory of the tie bias and the β fix (`theory`, `rounding_bias`, `beta_theory`,
`fix_error`). Uses only `lib.book`."""
