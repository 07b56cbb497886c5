"""lib/fp/fix.py: the fix as one frozen value, and its defaults declared once — every other place that still writes
them as a literal (kernel, oracle, training configuration) is checked against `Fix()` until a kernel cleanup makes
them read it."""
import inspect
import math
from dataclasses import fields

import pytest

from lib.fp.fix import Fix
from lib.fp.reference import fixed_row_max
from lib.training.model import GPTConfig
from lib.training.spec import AttnSpec
from lib.training.train import TrainConfig


def _defaults(obj) -> dict:
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: f.default for f in fields(obj)}
    return {n: p.default for n, p in inspect.signature(obj).parameters.items()}


def test_every_copy_of_the_defaults_agrees_with_fix():
    import importlib
    kernel = importlib.import_module("kernels.attention").attention     # `kernels.attention` is also the function
    want = Fix()
    for where in (kernel, fixed_row_max, AttnSpec, GPTConfig, TrainConfig):
        d = _defaults(where)
        assert (d["beta"], d["tie_tol"], d["max_shift"]) == (want.beta, want.tie_tol, want.max_shift), where


def test_fix_validates_and_reads_a_spec():
    assert Fix.of(AttnSpec.parse("paper/beta=2/tie_tol=0.001/max_shift=none+fix")) == Fix("beta", 2.0, 0.001, None)
    assert Fix.of(AttnSpec.parse("paper")) == Fix()
    for bad in (dict(kind="beta2"), dict(beta=1.0), dict(beta=float("nan")), dict(tie_tol=-1.0), dict(max_shift=0.0)):
        with pytest.raises(ValueError):
            Fix(**bad)


def test_labels_kernel_args_and_the_underflow_level():
    f = Fix("beta", 7.0, 0.001, None)
    assert f.label() == "fix β = 7" and f.label(detail=True) == "fix β = 7, ties within 0.001, exact rule"
    assert Fix().label() == "no fix" and Fix("zero_rows").label() == "rows zeroed, no shift"
    assert Fix("beta_split").label(detail=True) == "fix β = 7 (also across tiles), shift ≤ 64"
    assert f.kernel_args() == dict(fix="beta", beta=7.0, tie_tol=0.001, max_shift=None)
    with pytest.raises(ValueError):
        Fix("zero_rows").kernel_args()
    assert f.underflow_r(92.88) == pytest.approx(92.88 / 6)
    assert Fix("beta").underflow_r(92.88) == math.inf          # the default cap (64) stays below the level
