"""Training: the pinned corpus (`data`), the small GPT (`model`), weight and attention metrics (`metrics`), the
training loop (`train`), judging a loss curve (`outcome`) and the proxy's arms and multi-run driver (`proxy`).
Uses `lib.book`, `lib.fp` and `kernels`."""
