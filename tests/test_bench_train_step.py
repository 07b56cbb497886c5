"""benchmarks/bench_train_step.py on the CPU, its GPU parts stood in for: what `run` returns must save as a result
(the proxy's configuration as its flat record, JSON-ready), with the keys the committed result keeps."""
import json

import torch

from benchmarks import bench_train_step as bench
from lib.book import results


def test_run_saves_with_the_proxys_flat_record(monkeypatch, tmp_path):
    ms = {arm: 10.0 + i for i, arm in enumerate(("sdpa", "paper", "paper+fix"))}
    timed = []

    def fake_bench(step, warmup, rep, return_mode):
        timed.append(step.arm)
        return ms[step.arm]

    def fake_step_fn(arm, batch_size, seq_len):
        step = lambda: None  # noqa: E731
        step.arm = arm
        return step, None
    import triton.testing
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(triton.testing, "do_bench", fake_bench)
    monkeypatch.setattr(bench, "step_fn", fake_step_fn)
    monkeypatch.setattr(bench, "_gpu_ms", lambda step, n: ms[step.arm] / 2)
    out = bench.run("full", dict(arms=list(ms), rounds=2, rep_ms=1, gpu_steps=1))
    assert timed == list(ms) * 2                                    # interleaved rounds
    assert out["data"]["fix_cost"] == ms["paper+fix"] / ms["paper"]
    monkeypatch.undo()                       # saving records the machine: the real one, with no CUDA
    path = results.save("train_step_bench", "full", out["data"], seeds=out["seeds"], config=out["config"],
                        root=tmp_path)
    saved = json.loads(path.read_text())["meta"]["config"]
    committed = results.load("train_step_bench", "full").meta["config"]
    assert set(saved) == set(committed)
    assert saved == json.loads(json.dumps(bench.proxy_config("full").record()))    # the full proxy's, as recorded
