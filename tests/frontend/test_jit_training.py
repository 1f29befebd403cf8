"""Forward and backward through `fuser.jit` against eager: the pieces of a llama-style block and
an nn.Module trained for a step. CPU tensors run the generated kernels in Triton's interpreter,
so sizes are small."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fuser

from .jit_helpers import check_forward_backward


def rmsnorm(x, w):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (xf * rstd * w.float()).to(x.dtype)


def rope(x, cos, sin):
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def swiglu(x, w_gate, w_up, w_down):
    return F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)


def attention(q, k, v):
    s = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    p = torch.softmax(scores.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype)
    return p @ v


def cross_entropy(logits, target):
    return F.cross_entropy(logits.float(), target)


def _r(*shape, dtype=torch.float32, grad=True):
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


PIECES = {
    "rmsnorm": (rmsnorm, lambda dt: (_r(6, 32, dtype=dt), _r(32, dtype=dt))),
    "rope": (rope, lambda dt: (_r(2, 5, 3, 8, dtype=dt), _r(5, 1, 8, dtype=dt, grad=False),
                               _r(5, 1, 8, dtype=dt, grad=False))),
    "swiglu": (swiglu, lambda dt: (_r(2, 5, 8, dtype=dt), _r(16, 8, dtype=dt), _r(16, 8, dtype=dt),
                                   _r(8, 16, dtype=dt))),
    "attention": (attention, lambda dt: tuple(_r(2, 3, 5, 8, dtype=dt) for _ in range(3))),
    "cross_entropy": (cross_entropy, lambda dt: (_r(6, 10, dtype=dt), torch.randint(0, 10, (6,)))),
}


@pytest.mark.parametrize("name", list(PIECES))
def test_llama_piece_forward_backward_fp32(name):
    fn, make = PIECES[name]
    jitted = fuser.jit(fn)
    check_forward_backward(fn, jitted, make(torch.float32))
    info = jitted.cache_info()
    assert info.fallback_ops == 0, info  # every op of these pieces lowers
    assert info.fusions >= 2  # a forward and a backward fusion at least


@pytest.mark.parametrize("name", ["rmsnorm", "swiglu", "attention", "cross_entropy"])
def test_llama_piece_forward_backward_bf16(name):
    fn, make = PIECES[name]
    check_forward_backward(fn, fuser.jit(fn), make(torch.bfloat16), reference_dtype=torch.float32)


def test_pieces_new_sizes_reuse_the_program():
    jitted = fuser.jit(rmsnorm)
    for rows in (3, 7, 12):
        check_forward_backward(rmsnorm, jitted, (_r(rows, 32), _r(32)))
    info = jitted.cache_info()
    assert info.graphs == 1 and info.calls == 3
    assert info.compiles == info.fusions  # one runtime per fusion, whatever the row count


class Block(nn.Module):
    def __init__(self, d: int = 16, hidden: int = 32):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def test_module_trains_one_step_like_eager():
    torch.manual_seed(0)
    eager = Block()
    ours = Block()
    ours.load_state_dict(eager.state_dict())
    jitted = fuser.jit(ours)
    assert isinstance(jitted, nn.Module)
    assert set(jitted.state_dict()) == set(eager.state_dict())
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_o = torch.optim.SGD(jitted.parameters(), lr=0.1)
    x = torch.randn(3, 5, 16)
    target = torch.randn(3, 5, 16)
    for model, opt in ((eager, opt_e), (jitted, opt_o)):
        opt.zero_grad()
        F.mse_loss(model(x), target).backward()
    for (name, pe), po in zip(eager.named_parameters(), ours.parameters()):
        torch.testing.assert_close(po.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=name)
    opt_e.step()
    opt_o.step()
    for pe, po in zip(eager.parameters(), ours.parameters()):
        torch.testing.assert_close(po, pe, rtol=1e-4, atol=1e-5)
    assert jitted.cache_info().fallback_ops == 0


def test_module_training_steps_with_new_batch_sizes_compile_once():
    torch.manual_seed(1)
    model = fuser.jit(Block())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for batch in (4, 6, 4, 9):
        x = torch.randn(batch, 3, 16)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    info = model.cache_info()
    assert info.graphs == 1
    assert info.compiles == info.fusions
    assert all(math.isfinite(v) for v in losses)


def test_saved_activations_are_statistics_not_normalized_rows():
    """The min-cut partition saves the inputs and the per-row rstd for RMSNorm's backward,
    recomputing the cheap normalized rows rather than storing them."""
    jitted = fuser.jit(rmsnorm)
    x, w = _r(8, 32), _r(32)
    jitted(x, w).sum().backward()
    (record,) = jitted._stats.records.values()
    forward = next(p for p in record.programs if p.kind == "forward")
    out_node = next(n for n in forward.plan.graph.graph.nodes if n.op == "output")
    saved = [n for n in out_node.args[0][1:] if n is not None and hasattr(n, "meta")
             and isinstance(n.meta.get("val"), torch.Tensor) and n.op != "placeholder"]
    assert [tuple(n.meta["val"].shape)[-1] for n in saved] == [1], saved


def _std_normalize(x):
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)


_BN = nn.BatchNorm1d(6)
_CONV = nn.Conv1d(3, 4, 3)

MORE = {
    # float size arithmetic in the backward (2 / (n - 1)), for two row lengths
    "std": (_std_normalize, lambda: (_r(3, 6),)),
    "std_other_length": (_std_normalize, lambda: (_r(3, 9),)),
    # the attention kernel stays one ATen call, forward and backward
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2.0,
             lambda: tuple(_r(2, 2, 5, 8) for _ in range(3))),
    # running statistics are updated in place: AOTAutograd's input mutation
    "batchnorm_train": (lambda x: _BN(x), lambda: (_r(8, 6),)),
    "conv_gelu": (lambda x: F.gelu(_CONV(x)), lambda: (_r(2, 3, 10),)),
    "transposed_input": (lambda x: (x * x.sigmoid()).sum(0), lambda: (_r(5, 7).t().detach().requires_grad_(),)),
    "topk": (lambda x: torch.topk(x, 2, -1).values.exp(), lambda: (_r(4, 5),)),
}


@pytest.mark.parametrize("name", list(MORE))
def test_more_pytorch_code_forward_backward(name):
    fn, make = MORE[name]
    jitted = fuser.jit(fn)
    check_forward_backward(fn, jitted, make())


def test_batchnorm_running_statistics_follow_eager():
    eager, ours = nn.BatchNorm1d(4), nn.BatchNorm1d(4)
    jitted = fuser.jit(ours)
    for _ in range(2):
        x = torch.randn(6, 4)
        eager(x), jitted(x)
    torch.testing.assert_close(ours.running_mean, eager.running_mean)
    torch.testing.assert_close(ours.running_var, eager.running_var)


def test_the_first_calls_inputs_and_their_graph_are_not_kept_alive():
    # AOTAutograd keeps the backward compiler until the backward's first call; it must not keep
    # the first call's tensors (and the graph that made them) alive with it
    import gc
    import weakref

    fn = fuser.jit(lambda h: torch.nn.functional.gelu(h) * 2)
    w = torch.randn(16, 16, requires_grad=True)
    big = torch.randn(32, 16)
    h = big @ w  # an activation whose graph saves `big`
    out = fn(h)  # the backward never runs
    alive_h, alive_big = weakref.ref(h), weakref.ref(big)
    del h, big, out
    gc.collect()
    assert alive_h() is None and alive_big() is None


def test_a_parameter_resized_after_a_jitted_call_gets_its_own_gradient():
    # a kept first-call graph kept the parameter's gradient accumulator, with its old shape
    fn = fuser.jit(lambda h: h * 2)
    w = torch.nn.Parameter(torch.randn(6))
    fn(torch.randn(3, 6) * w).sum().backward()
    w.grad = None
    w.data = torch.randn(2, 6)
    x = torch.randn(3, 2, 6)
    (x * w).sum().backward()
    torch.testing.assert_close(w.grad, x.sum(0))
