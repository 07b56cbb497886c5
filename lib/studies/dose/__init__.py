"""Chapter 5: the δ error dosed — FP32 attention with λ·c(Δδ) added to δ: which component breaks training, and where."""
