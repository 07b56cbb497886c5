"""Chapter 3: Golden et al.'s numeric-deviation microbenchmark and weight-drift study, on our kernels and proxy."""
