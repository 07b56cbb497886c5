"""The β fix as one value: which fix, its β, its tie tolerance and its shift cap, with the defaults in one place.

`Fix(kind, beta, tie_tol, max_shift)` is frozen and validated. Kinds: None (no fix), "beta" (the paper's rule per
key tile: a row whose tile maximum r_m repeats subtracts β·r_m, r_m > 0, or 0, r_m < 0), "beta_split" (the same
rule also on a maximum repeated across tiles), "zero_rows" (no shift: the rows whose exact-rule shift would
underflow are zeroed — a control). `max_shift` caps the shift (None: the paper's exact rule, which can underflow a
row); `tie_tol` counts scores within that distance of the maximum as tied.

The defaults are declared here once, by meaning, and every signature default of the fix reads them:

* `BETA` (7, the paper's β), `TIE_TOL` (exact ties) and `MAX_SHIFT` (our underflow guard, 64): the research kernel
  (`kernels.attention.attention`, `kernels.attention_op.attention_op`), the oracle (`lib.fp.reference`), the fix's
  error model (`lib.fp.fix_error`) and the training configuration (`lib.training.spec.AttnSpec`, `GPTConfig`,
  `TrainConfig`) — the replication runs the paper's setting unless a run names another;
* `USER_BETA` (2): the user kernel's β (`kernels.stable_attention`, the training layer on it
  `lib.training.model.StableSpec`), a recommendation rather than a replication, with the same guard `MAX_SHIFT`.

A β written in a study's variant table, a sweep's list or a test is an experimental setting, not a default, and
stays a number there. `tests/test_fix_value.py` checks that no signature default of the fix is written as a number
outside this module (and the few that are the authors' code's own).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Fix", "KINDS", "BETA", "TIE_TOL", "MAX_SHIFT", "USER_BETA"]

BETA = 7.0          # the paper's β
TIE_TOL = 0.0       # exact ties only
MAX_SHIFT = 64.0    # our underflow guard: the largest weight stays ≥ e^−64, a normal number in FP32 and BF16
# The user kernel's β differs from the paper's on purpose. A larger β shifts a tied row further and reaches the
# underflow sooner: in chapter 6's healthy regime the exact rule at β = 7 zeroed rows and cost loss, at β = 2 it did
# not (chapter 7). 2 is also the authors' current code's value; chapter 8 recommends it, with the guard on.
USER_BETA = 2.0
KINDS = (None, "beta", "beta_split", "zero_rows")


@dataclass(frozen=True)
class Fix:
    kind: str | None = None
    beta: float = BETA
    tie_tol: float = TIE_TOL
    max_shift: float | None = MAX_SHIFT

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"fix kind must be one of {KINDS}, got {self.kind!r}")
        if isinstance(self.beta, bool) or not isinstance(self.beta, (int, float)) or not math.isfinite(self.beta) \
                or self.beta <= 1:
            raise ValueError(f"beta must be a finite number > 1, got {self.beta!r}")
        if not isinstance(self.tie_tol, (int, float)) or not math.isfinite(self.tie_tol) or self.tie_tol < 0:
            raise ValueError(f"tie_tol must be a finite number >= 0, got {self.tie_tol!r}")
        if self.max_shift is not None and not (isinstance(self.max_shift, (int, float))
                                               and math.isfinite(self.max_shift) and self.max_shift > 0):
            raise ValueError(f"max_shift must be a finite number > 0 or None (the exact rule), got {self.max_shift!r}")

    def __bool__(self):
        # A Fix whose kind is None is still a Fix: truth would say "a value is set", not "a fix is on". Ask `.kind`.
        raise TypeError("the truth of a Fix is ambiguous: test fix.kind (None: no fix)")

    @property
    def exact(self) -> bool:
        """The paper's exact rule: no cap on the shift."""
        return self.max_shift is None

    def kernel_args(self) -> dict:
        """Keyword arguments of `kernels.attention.attention` (fix, beta, tie_tol, max_shift); the control
        "zero_rows" is not a kernel fix (`lib.training.zero_rows`)."""
        if self.kind == "zero_rows":
            raise ValueError("zero_rows is a control around the plain kernel, not a kernel fix")
        return dict(fix=self.kind, beta=self.beta, tie_tol=self.tie_tol, max_shift=self.max_shift)

    def underflow_r(self, x_underflow: float) -> float:
        """The tied row maximum (score units) above which the exact rule's shift (β − 1)·r_m reaches `x_underflow`
        (e.g. `lib.fp.beta_theory.underflow_x("bf16")`); inf with a cap below that level."""
        if self.max_shift is not None and self.max_shift < x_underflow:
            return math.inf
        return x_underflow / (self.beta - 1)

    def label(self, detail: bool = False) -> str:
        """"fix β = 7" (`detail`: "fix β = 7, ties within 0.001, exact rule"); "no fix"; "rows zeroed, no shift"."""
        if self.kind is None:
            return "no fix"
        if self.kind == "zero_rows":
            return "rows zeroed, no shift"
        words = [f"fix β = {self.beta:g}" + (" (also across tiles)" if self.kind == "beta_split" else "")]
        if detail:
            if self.tie_tol:
                words.append(f"ties within {self.tie_tol:g}")
            words.append("exact rule" if self.exact else f"shift ≤ {self.max_shift:g}")
        return ", ".join(words)
