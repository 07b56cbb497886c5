"""`lib.training.runtime`: the step every loop shares on a tiny model (forward and backward, micro-batches, the
gradient norm with and without clipping, the optimiser step in the loops' order) and `run_many` in this process and in spawned processes, with and without
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


def test_train_step_is_the_plain_step_in_the_loops_order():
    """One optimiser step: lr into every group (one per optimiser when given a list), the hook around the forward
    and backward, the reader before the update, the update from the clipped gradients; a failing forward with a
    fallback is redone through the module it returns, from zeroed gradients, without calling the hook again."""
    x, y = _batch()
    dev = torch.device("cpu")
    calls = []

    class Hook:
        def before_forward(self, step, model):
            calls.append(("before", step))

        def after_backward(self, step, model, opt):
            calls.append(("after", step, model.w.weight.grad is not None, opt is opts[-1]))

    a, b = Tiny(), Tiny()
    opts = [torch.optim.SGD([a.w.weight], lr=0.0), torch.optim.SGD([a.w.bias], lr=0.0)]
    loss, gn = runtime.train_step(a, a, opts, x, y, [0.1, 0.2], dev, None, 0.5, step=3, hook=Hook(),
                                  before_update=lambda: calls.append(("read", a.w.weight.grad is not None)))
    assert calls == [("before", 3), ("after", 3, True, True), ("read", True)]
    assert [o.param_groups[0]["lr"] for o in opts] == [0.1, 0.2] and a.w.weight.grad is None  # stepped, zeroed
    ref = b(x, y)[1]
    ref.backward()
    gref = torch.nn.utils.clip_grad_norm_(b.parameters(), 0.5)
    assert torch.equal(loss, ref) and torch.equal(gn, gref)
    assert torch.equal(a.w.weight, b.w.weight.detach() - 0.1 * b.w.weight.grad)
    assert torch.equal(a.w.bias, b.w.bias.detach() - 0.2 * b.w.bias.grad)

    def broken(x_, y_):
        raise RuntimeError("no compiler here")

    c, d = Tiny(), Tiny()
    calls.clear()
    opt = torch.optim.SGD(c.parameters(), lr=0.1)
    seen = []
    loss, _ = runtime.train_step(broken, c, [opt], x, y, 0.1, dev, None, 0.0, hook=Hook(),
                                 fallback=lambda e: seen.append(str(e)) or c)
    assert seen == ["no compiler here"] and [k[0] for k in calls] == ["before", "after"]
    assert torch.equal(loss, d(x, y)[1])
    with pytest.raises(RuntimeError, match="no compiler"):
        runtime.train_step(broken, c, [opt], x, y, 0.1, dev, None, 0.0)


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
