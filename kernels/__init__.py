"""Triton kernels of the book. On a machine without CUDA set TRITON_INTERPRET=1 *before* importing this package
(tests/conftest.py and lib/book/setup.py do it), because Triton decides interpreter mode when `@triton.jit` decorates."""
from kernels.attention import attention  # noqa: E402,F401
