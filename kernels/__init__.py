"""Triton kernels of the book.

Triton decides between compiled kernels and its CPU interpreter when `@triton.jit` decorates a function, i.e. when
this package is first imported, from the environment variable TRITON_INTERPRET. On a machine without a CUDA device
(and with TRITON_INTERPRET unset) a compiled launch can only fail ("0 active drivers"), so this package switches to
the interpreter itself, with a one-line warning: the kernels then run on CPU tensors, slowly, with the emulated
numerics (see `kernels/attention.py`). An explicit TRITON_INTERPRET (0 or 1) is left as it is. `lib/book/setup.py`
does the same without the warning, for chapters and tests.
"""
import os
import warnings

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    warnings.warn("kernels: no CUDA device, so Triton runs in its CPU interpreter (TRITON_INTERPRET=1 set); "
                  "set TRITON_INTERPRET=1 yourself to silence this", RuntimeWarning, stacklevel=2)

from kernels.attention import attention  # noqa: E402,F401
from kernels.stable_attention import stable_attention  # noqa: E402,F401
