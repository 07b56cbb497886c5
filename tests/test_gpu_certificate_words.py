"""lib/book/gpu_certificate.py: the loop's GPU certificate in a reader's words, from planted records."""
from lib.book import gpu_certificate
from lib.book.results import Result


def _rec(name, runs, steps=100, device="NVIDIA H100 80GB HBM3"):
    meta = {"device": device, "created_utc": "2026-12-06T16:00:00+00:00", "scale": "full"}
    return Result(name, "full", meta, dict(runs=runs, steps=steps, device=device))


def test_counts_every_run_and_names_the_stand_ins_and_the_rest():
    ok = dict(done=True, bit_identical=True, determinism="strict")
    gpt2 = _rec("loop_certificate_gpt2", [dict(ok, kind="lm")] * 3)
    proxy = _rec("loop_certificate_proxy", [dict(ok, kind="proxy")] * 4 + [dict(ok, kind="proxy", stand_in_for="e")]
                 + [dict(kind="proxy", done=True, bit_identical=False, determinism="warn")]
                 + [dict(kind="proxy", done=False)])
    text = gpu_certificate.words([gpt2, proxy])
    assert "(9: 3 of GPT-2 and 6 of the small proxy model)" in text and "trained 100 steps on one NVIDIA H100 80GB HBM3" in text
    assert "8 of 9 gave bit-identical" in text and "8 of them with every operation deterministic" in text
    assert "For 1 of them the commit" in text and "1 have not run yet." in text and "(Certificates: " in text
    whole = gpu_certificate.words([gpt2])
    assert "3 of 3 gave bit-identical" in whole and "with every operation deterministic:" in whole
    assert "stand" not in whole and "not run yet" not in whole and "For " not in whole
    assert gpu_certificate.words([None]) == ""
