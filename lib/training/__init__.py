"""Training: the pinned corpus (`data`), the small GPT (`model`) and its attention specs (`spec`: the grammar and the
labels of arms), weight and attention metrics (`metrics`), the training loops (`train`, `lockstep`), judging a loss
curve (`outcome`) and runs of unequal length (`horizon`), the learning-rate rules (`regime`), the proxy's arms and
multi-run driver (`proxy`) and reading training results (`runs`). Uses `lib.book`, `lib.fp`, `kernels` and
`lib.census`."""
