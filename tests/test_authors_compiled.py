"""The authors' attention compiled inside the model, as their runs were: `torch.compile` of a GPT with the authors'
backend traces (it once stopped at the first step — the backend called their backward as a method of their
autograd function from another one's backward, which the compiler takes for a backward node — and the run trained
eagerly), and gives the eager model's loss and gradients up to FP32 rounding (CPU, FP32, no autocast)."""
import pytest
import torch

from lib.training.model import GPTConfig, build_lm


def _step(attn: str, compiled: bool):
    torch.manual_seed(0)
    model = build_lm(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, vocab_size=64, attn=attn))
    run = torch.compile(model, fullgraph=False) if compiled else model
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 64, (2, 32), generator=g), torch.randint(0, 64, (2, 32), generator=g)
    _, loss = run(x, y)
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("attn", ["authors/tile=16", "authors/tile=16/beta=2/tie_tol=0.001+fix"])
def test_the_authors_backend_compiles_and_matches_eager(attn):
    torch._dynamo.reset()
    eager_loss, eager_grads = _step(attn, False)
    with torch._dynamo.config.patch(suppress_errors=False):
        loss, grads = _step(attn, True)
    assert torch.allclose(loss, eager_loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, eager_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
