"""Named experiment scales.

* ``ci``   — CPU, Triton interpreter, seconds per chapter. Proves the code paths and small-scale effects.
* ``full`` — one GPU (the H100 of the book's results). Produces the committed results under ``results/full``.

The scale comes from the ``BOOK_SCALE`` environment variable; without it the default is ``full`` when CUDA is
available and ``ci`` otherwise. Asking for ``full`` without CUDA is an error, never a silent fallback.
"""
from __future__ import annotations

import os

SCALES = ("ci", "full")


class ScaleError(RuntimeError):
    """Raised for an unknown scale or a scale the machine cannot run."""


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def resolve(name: str | None = None) -> str:
    """Return the scale to run at: `name` if given, else $BOOK_SCALE, else 'full' with CUDA / 'ci' without.

    Raises ScaleError for an unknown name, or for 'full' on a machine without CUDA."""
    if name is None:
        name = os.environ.get("BOOK_SCALE") or ("full" if _has_cuda() else "ci")
    if name not in SCALES:
        raise ScaleError(f"unknown scale {name!r}; choose one of {SCALES} (set BOOK_SCALE or pass scale=)")
    if name == "full" and not _has_cuda():
        raise ScaleError("scale 'full' needs a CUDA GPU and none is available; use BOOK_SCALE=ci on the CPU")
    return name


def pick(scale: str, **by_scale):
    """`pick(scale, ci=..., full=...)` -> the value for `scale`; raises if that scale was not given."""
    if scale not in by_scale:
        raise ScaleError(f"no setting for scale {scale!r} (have {sorted(by_scale)})")
    return by_scale[scale]
