"""Chapter 1: BF16 rounding of attention-shaped rows — the tie bias in software (Monte Carlo) and through a kernel."""
