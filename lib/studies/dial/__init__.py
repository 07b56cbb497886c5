"""The precision dial (chapters 6 and 7): the paper placement with every rounding point at m < 7 mantissa bits —
round-to-nearest-even against stochastic rounding, with and without the fix — at an LR where BF16 trains; runs of
unequal length judged at a common step horizon per width."""
