"""Environment set-up shared by chapters, tests and GPU entry points. Import this *before* `kernels`.

Without CUDA it switches Triton to its CPU interpreter (TRITON_INTERPRET=1). Triton reads that variable when a
`@triton.jit` function is decorated, i.e. when `kernels` is first imported, so the order matters.
"""
import os

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
DEVICE = "cuda" if HAS_CUDA and not INTERPRET else "cpu"
