"""lib/fp/fix.py: the fix as one frozen value, and its defaults declared once by meaning — the paper's β, the tie
tolerance and the guard for the research kernel, the oracle and the training configuration; the user kernel's β —
with no other signature default of the fix written as a number."""
import ast
import importlib
import inspect
import math
from dataclasses import fields
from pathlib import Path

import pytest

from lib.fp.fix import BETA, MAX_SHIFT, TIE_TOL, USER_BETA, Fix
from lib.fp.reference import fixed_row_max
from lib.training.model import GPTConfig, StableSpec
from lib.training.spec import AttnSpec
from lib.training.train import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
FIX_ARGS = {"beta", "tie_tol", "max_shift"}
# Signature defaults of the fix that stay numbers, each a setting of its own, not a default of ours:
OWN_SETTINGS = {
    ("lib/training/authors_fa.py", "authors_attention", "beta"),      # the authors' code's own defaults (β = 2,
    ("lib/training/authors_fa.py", "authors_attention", "tie_tol"),   # ties within 1e-3), replicated as written
    ("lib/fp/rounding_bias.py", "mc_cell", "beta"),                   # the Monte Carlo's β (bias_montecarlo)
    ("lib/studies/fix/beta.py", "underflow_rows", "beta"),            # a β planted past the underflow level
}


def _defaults(obj) -> dict:
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: f.default for f in fields(obj)}
    return {n: p.default for n, p in inspect.signature(obj).parameters.items()}


def _numeric_fix_defaults(tree: ast.AST):
    """(definition, argument) of every default of a fix argument written as a number: function arguments and
    dataclass-style class fields."""
    def number(node):
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
            yield from ((node.name, arg.arg) for arg, d in pairs if arg.arg in FIX_ARGS and number(d))
        elif isinstance(node, ast.ClassDef):
            yield from ((node.name, st.target.id) for st in node.body
                        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                        and st.target.id in FIX_ARGS and number(st.value))


def test_the_defaults_by_meaning():
    assert (BETA, TIE_TOL, MAX_SHIFT, USER_BETA) == (7.0, 0.0, 64.0, 2.0)    # the paper's β; ours; the user kernel's
    kernel = importlib.import_module("kernels.attention").attention     # `kernels.attention` is also the function
    op = importlib.import_module("kernels.attention_op").attention_op
    want = Fix()
    for where in (kernel, op, fixed_row_max, GPTConfig):
        d = _defaults(where)
        assert (d["beta"], d["tie_tol"], d["max_shift"]) == (want.beta, want.tie_tol, want.max_shift), where
    assert _defaults(AttnSpec)["fix"] == want            # a spec holds one Fix, no knobs of its own
    m = TrainConfig().model     # the proxy nests the model: GPTConfig's defaults, read once
    assert (m.beta, m.tie_tol, m.max_shift) == (want.beta, want.tie_tol, want.max_shift)
    stable = importlib.import_module("kernels.stable_attention")
    for where in (stable.stable_attention, stable.forward):
        d = _defaults(where)
        assert (d["beta"], d["max_shift"]) == (USER_BETA, MAX_SHIFT), where
    assert _defaults(StableSpec)["fix"] == Fix(None, USER_BETA, max_shift=MAX_SHIFT)


def test_no_other_numeric_default_of_the_fix():
    found = set()
    for path in sorted(p for top in ("lib", "kernels", "benchmarks") for p in (ROOT / top).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel != "lib/fp/fix.py":
            found |= {(rel, name, arg) for name, arg in _numeric_fix_defaults(ast.parse(path.read_text()))}
    assert found == OWN_SETTINGS


def test_the_scan_sees_arguments_and_fields():
    tree = ast.parse("def f(a, beta=7.0, *, max_shift=64, tie_tol=TIE_TOL, other=1.0): pass\n"
                     "class C:\n    beta: float = 2.0\n    tie_tol: float = TIE_TOL\n")
    assert set(_numeric_fix_defaults(tree)) == {("f", "beta"), ("f", "max_shift"), ("C", "beta")}


def test_fix_validates_and_a_spec_holds_one():
    assert AttnSpec.parse("paper/beta=2/tie_tol=0.001/max_shift=none+fix").fix == Fix("beta", 2.0, 0.001, None)
    assert AttnSpec.parse("paper").fix == Fix()
    with pytest.raises(TypeError, match="fix.kind"):
        bool(Fix())                      # no silent `if spec.fix:` — a Fix of kind None is a value, not "off"
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
