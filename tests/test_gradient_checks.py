"""The gradient-check study on the CPU: planted inputs at the asked logit size, the rules catch planted violations,
and the run reads a GPT-2 capture file."""
import math

import pytest
import torch

from lib.book import registry
from lib.studies.kernel import gradient_checks as gc


@pytest.mark.parametrize("kind", ["random", "ties"])
@pytest.mark.parametrize("logit", [100.0, 1e4])
def test_planted_logits_reach_their_size(kind, logit):
    q, k, v, do = gc.planted(kind, logit, 1, 2, 1024, 64, 0)
    s = (q.float() @ k.float().transpose(-1, -2)).tril() / 8.0
    top = s.abs().amax().item()
    # "≈ logit": the largest of ~N²/2 Gaussian scores (random) or the sink scores' spread of gains 2.5–5 (ties) sit
    # within a factor 3 of the target; an error in the scaling (a missing √d, a squared σ) is off by 8× or more.
    assert logit / 3 < top < 3 * logit, top
    assert q.dtype == k.dtype == torch.bfloat16


def test_ties_are_exact():
    q, k, v, do = gc.planted("ties", 1e4, 1, 1, 256, 64, 0)
    s = q.float()[0, 0] @ k.float()[0, 0].T
    row = s[200, :201]
    assert (row == row.max()).sum() >= 2


def _row(rule, err, **kw):
    base = {f"{t}_{m}": 1e-3 for t in gc.TENSORS for m in ("max", "rel")}
    return dict(input="x", variant="v", rule=rule, err=dict(base, **err), sdpa=base, emulated=base,
                ours_placement=base, **kw)


def test_rules_catch_violations_and_pass_equals():
    assert gc.check_rows([_row("fa2", {}), _row("placement", {}), _row("authors", {}), _row("none", {"o_max": 9})]) == []
    assert len(gc.check_rows([_row("fa2", {"dq_max": 2.1e-3})])) == 1
    assert len(gc.check_rows([_row("placement", {"dk_rel": 2.1e-3})])) == 1
    assert len(gc.check_rows([_row("authors", {"dv_rel": 4e-4})])) == 1          # 2 × 4e-4 < 1e-3
    assert len(gc.check_rows([_row("fa2", {"o_max": math.inf})])) == 1


def test_run_reads_a_capture(tmp_path, monkeypatch):
    q, k, v, do = gc.planted("random", 50.0, 1, 1, 64, 32, 3)
    torch.save(dict(q=q, k=k, v=v, do=do, arm="sdpa_compiled:s1", step=3000, layer=2), tmp_path / "cap.pt")
    monkeypatch.setenv("BOOK_GPT2_CAPTURE", str(tmp_path / "cap.pt"))
    cfg = dict(registry.resolve("gradient_checks", "ci"), logits=[100.0], variants=["FA2 placement"])
    rows = gc.run("ci", cfg)["data"]["rows"]
    gpt2 = [r for r in rows if r["input_kind"] == "gpt2"]
    assert len(gpt2) == 1 and gpt2[0]["input_step"] == 3000 and len(gpt2[0]["input_sha256"]) == 64
    assert 20 < gpt2[0]["input_logit"] < 200
    # FP32 emulation of FA2 numerics on the CPU: O within a few BF16 ULPs of FP64 (2^-8 relative)
    assert gpt2[0]["err"]["o_rel"] < 2 ** -7


def test_tables_from_a_run():
    cfg = dict(registry.resolve("gradient_checks", "ci"), logits=[100.0])
    data = gc.run("ci", cfg)["data"]
    t = gc.summary_table(data)
    assert t.count("\n") >= 2 and "| FA2 placement |" in t and "old definition" not in t
    f = gc.fp32_o_table(data)
    assert "ties, logits 100" in f and "nan" not in f
    r = dict(_row("fa2", {"dq_max": 1.5e-3}))
    assert abs(gc.worst_ratio(r) - 0.75) < 1e-12


def test_known_outside_rows_are_set_aside_and_no_others():
    """A user-kernel row outside the FA2 rule at logits 10⁵ is known; the same row at 10² is not; an FA2-placement row
    outside its rule is never known."""
    from lib.studies.kernel import gradient_checks as gc
    err = {f"{t}_{k}": 1.0 for t in gc.TENSORS for k in ("max", "rel")}
    sdpa = {f"{t}_{k}": 0.1 for t in gc.TENSORS for k in ("max", "rel")}

    def row(variant, logit, kind="random"):
        return dict(variant=variant, rule="fa2", input=f"{kind} {logit}", input_kind=kind, input_logit=logit,
                    err=err, sdpa=sdpa)
    assert gc.unexpected_violations([row("user kernel", 1e5), row("user kernel", 1e6, "gpt2")]) == []
    assert len(gc.unexpected_violations([row("user kernel", 1e2)])) == 4
    assert len(gc.unexpected_violations([row("FA2 placement", 1e5)])) == 4


def test_gpu_cases_cover_every_variant_once():
    """The GPU test's cases (tests/gpu/test_gradients_gpu.py: one `gc.run` per case, dealt to separate processes)
    are a partition of `gc.VARIANTS`, each variant in one case, and each authors' variant shares its case with its
    comparator (`gc.run` reads the comparator's errors from the same run)."""
    from tests.gpu.test_gradients_gpu import CASES, USER
    listed = [name for names in CASES.values() for name in names]
    assert sorted(listed) == sorted(name for name, *_ in gc.VARIANTS) and len(set(listed)) == len(listed)
    case_of = {name: case for case, names in CASES.items() for name in names}
    for authors, comparator in gc.AUTHORS_COMPARATOR.items():
        assert case_of[authors] == case_of[comparator], authors
    assert set(USER) <= set(listed)
