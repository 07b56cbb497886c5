"""Training: the pinned corpus (`data`), the small GPT (`model`) and its attention specs (`spec`: the grammar and the
labels of arms), weight and attention metrics (`metrics`), the one training loop (`loop`) with the step and what
surrounds it (`runtime`), the step's own telemetry (`telemetry`), the proxy studies' configs onto it (`train`) and
several runs in lock-step (`lockstep`), the GPU certificate of the loop (`loop_certificate`), judging a loss curve
(`outcome`) and runs of unequal length (`horizon`), the learning-rate rules (`regime`), the proxy's arms and
multi-run driver (`proxy`) and reading training results (`runs`). Uses `lib.book`, `lib.fp`, `kernels` and
`lib.census`."""
