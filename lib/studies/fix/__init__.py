"""Chapter 7: the β-shifted maximum — exactness, the β window, the fix's own rounding error, the fix and the
authors' code in training, the β sweep, and what it costs."""
