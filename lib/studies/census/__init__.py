"""Where can the chain start? The census of the tie bias's preconditions across training regimes (the proxy, its
knobs, GPT-2 124M on a real corpus): run modules `regimes` and `gpt2`, the reading `reading` (numbers, the rule,
the claim) and the figures `figures`."""
