"""Chapter 6: does the proxy GPT explode, and is it the paper's mechanism? The regime pilots, the healthy headline,
the width-768 runs, LR 8e-3 with its controls and the LR sweep."""
