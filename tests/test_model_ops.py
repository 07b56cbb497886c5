"""The model on our kernel's custom ops (`GPT.set_ops`, as `lib.training.model.build_lm` builds it): the direct
path bit for bit, the FP32 flash backend, and `torch.compile` over the whole model with no graph break."""
import pytest
import torch

from lib.training.model import GPT, Fp32FlashSpec, GPTConfig, build_lm, parse_spec

SMALL = dict(n_layer=2, n_head=2, n_embd=32, block_size=64)


def _loss_and_grads(model, x):
    loss = model(x, x)[1]
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("attn", ["fa2", "paper/round_block=64", "paper/beta=2+fix", "paper/delta_source=dp_p"])
def test_op_path_is_gpt_path_bit_for_bit(attn):
    """build_lm routes our kernel through the custom ops, GPT through the autograd Function: the same launches, so the
    loss and every gradient are equal."""
    torch.manual_seed(0)
    g = GPT(GPTConfig(**SMALL, attn=attn))
    torch.manual_seed(0)
    m = build_lm(GPTConfig(**SMALL, attn=attn))
    assert all(a.ops for a in m.attn_layers) and not any(a.ops for a in g.attn_layers)
    x = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(1))
    (lg, gg), (lm, gm) = _loss_and_grads(g, x), _loss_and_grads(m, x)
    assert torch.equal(lg, lm)
    for a, b in zip(gg, gm):
        assert torch.equal(a, b)


def test_fp32_flash_spec_is_fp32_attention():
    """On the CPU the FP32 flash backend runs SDPA's math kernel in FP32: the same function as the FP32 reference
    ("naive") to FP32 rounding (two orders of the same sums: a few 2^-24 relative, loss ~5.5 nats)."""
    assert parse_spec("fp32_flash") == Fp32FlashSpec() and parse_spec(" fp32_flash ").label == "fp32_flash"
    torch.manual_seed(0)
    a = build_lm(GPTConfig(**SMALL, attn="naive"))
    torch.manual_seed(0)
    b = build_lm(GPTConfig(**SMALL, attn="fp32_flash"))
    x = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(2))
    la, lb = a(x, x)[1], b(x, x)[1]
    assert abs(la.item() - lb.item()) <= 64 * 2 ** -24 * la.item()
    assert GPTConfig(**SMALL, attn="fp32_flash").to_dict()["attn"] == [{"text": "fp32_flash"}] * 2


def test_whole_model_compiles_with_our_kernel():
    """fullgraph=True: the model with our kernel in every layer traces into one graph; compiled and eager give the
    same loss and gradients bit for bit on the CPU (aot_eager: the same ops, the kernels opaque)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = build_lm(GPTConfig(**SMALL, attn="paper/round_block=64"))
    x = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(3))
    le, ge = _loss_and_grads(m, x)
    m.zero_grad(set_to_none=True)
    lc, gc = _loss_and_grads(torch.compile(m, fullgraph=True, backend="aot_eager"), x)
    assert torch.equal(le, lc)
    for a, b in zip(ge, gc):
        assert torch.equal(a, b)
