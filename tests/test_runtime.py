"""`lib.training.runtime`: the step every loop shares on a tiny model (forward and backward, micro-batches, the
gradient norm with and without clipping) and `run_many` in this process and in spawned processes, with and without
the progress report."""
import math
import time

import pytest
import torch

from lib.training import runtime


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Linear(4, 3)

    def forward(self, x, y):
        logits = self.w(x)
        return logits, torch.nn.functional.cross_entropy(logits, y)


def _batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)


def test_forward_backward_is_the_plain_step_and_micro_batches_average_it():
    x, y = _batch()
    a, b = Tiny(), Tiny()
    loss = runtime.forward_backward(a, x, y, torch.device("cpu"), None)
    ref = b(x, y)[1]
    ref.backward()
    assert torch.equal(loss, ref) and torch.equal(a.w.weight.grad, b.w.weight.grad)
    c = Tiny()
    mean = runtime.forward_backward(c, x, y, torch.device("cpu"), None, accum=2)
    assert torch.allclose(mean, ref) and torch.allclose(c.w.weight.grad, b.w.weight.grad, atol=1e-6)


def test_grad_norm_clips_only_with_a_positive_limit():
    x, y = _batch()
    m = Tiny()
    runtime.forward_backward(m, x, y, torch.device("cpu"), None)
    g = [p.grad.clone() for p in m.parameters()]
    total = math.sqrt(sum(float(t.norm()) ** 2 for t in g))
    assert float(runtime.grad_norm(m, 0.0)) == pytest.approx(total, rel=1e-6)
    assert all(torch.equal(p.grad, t) for p, t in zip(m.parameters(), g))          # not clipped
    limit = total / 2
    assert float(runtime.grad_norm(m, limit)) == pytest.approx(total, rel=1e-6)             # the norm before clipping
    assert math.sqrt(sum(float(p.grad.norm()) ** 2 for p in m.parameters())) == pytest.approx(limit, rel=1e-5)


def test_run_many_in_order_here_and_in_spawned_processes_with_a_progress_report(capsys):
    assert runtime.run_many(abs, [-1, -2, 3]) == [1, 2, 3]
    assert runtime.run_many(abs, [-1, -2, 3], workers=2) == [1, 2, 3]
    seen = []

    def lines(progress, labels):
        seen.append(labels)
        return [f"  {lab}" for lab in labels]
    t0 = time.perf_counter()
    assert runtime.run_many(time.sleep, [0.5, 0.5], workers=2, status_every_s=0.05, labels=["a", "b"], init=len,
                            lines=lines) == [None, None]
    assert seen and seen[0] == ["a", "b"] and time.perf_counter() - t0 < 30
    assert "[run_many]" in capsys.readouterr().out
