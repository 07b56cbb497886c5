"""Where can the chain start? The census of the tie bias's preconditions across training regimes (the proxy, its
knobs, GPT-2 124M on a real corpus): the GPT-2 run module `gpt2` (the proxy regimes run on `lib.training.grid`),
the reading `reading` (numbers, the rule, the claim) and the figures `figures`."""
