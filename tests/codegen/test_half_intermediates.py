"""A half or bf16 tensor computed inside a kernel holds its rounded value, as its storage would:
read back in the same kernel (a cast to fp32, a comparison, isinf, another op) it is what eager
computes in that dtype, and what the kernel stores for it. Kernels compute in fp32, so each such
result is rounded where it is computed (codegen/kernel.py `_rounds_to_half`)."""
import pytest
import torch

from fuser import DataType, FusionDefinition

DTYPES = [(DataType.Half, torch.float16), (DataType.BFloat16, torch.bfloat16)]


@pytest.mark.parametrize("dtype,torch_dtype", DTYPES)
def test_a_product_read_back_is_the_rounded_one(dtype, torch_dtype):
    with FusionDefinition() as fd:
        a, b = (fd.define_tensor(shape=[-1], contiguity=True, dtype=dtype) for _ in range(2))
        h = fd.ops.mul(a, b)
        fd.add_output(h)
        fd.add_output(fd.ops.cast(h, DataType.Float))
        fd.add_output(fd.ops.isinf(h))
        fd.add_output(fd.ops.eq(h, fd.ops.cast(fd.ops.cast(h, DataType.Float), dtype)))
    gen = torch.Generator().manual_seed(3)
    a = (torch.randn(257, generator=gen) * 3).to(torch_dtype)
    b = (torch.randn(257, generator=gen) * 3).to(torch_dtype)
    big = torch.tensor([300.0, 70000.0], dtype=torch.float32).to(torch_dtype)  # overflows half
    a, b = torch.cat([a, big]), torch.cat([b, big])
    h, h_float, h_inf, h_same = fd.execute([a, b])
    want = a * b
    torch.testing.assert_close(h, want, rtol=0, atol=0)
    torch.testing.assert_close(h_float, want.float(), rtol=0, atol=0)
    assert torch.equal(h_inf, want.isinf())
    assert bool(h_same.all())


@pytest.mark.parametrize("dtype,torch_dtype", DTYPES)
def test_a_chain_rounds_at_each_step_as_eager_does(dtype, torch_dtype):
    with FusionDefinition() as fd:
        x, y = (fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dtype) for _ in range(2))
        s = fd.ops.add(x, y)  # rounded to the dtype in eager
        t = fd.ops.mul(fd.ops.exp(s), y)  # each op rounds again
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(t, DataType.Float), [1]), DataType.Float))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(6, 33, generator=gen).to(torch_dtype)
    y = torch.randn(6, 33, generator=gen).to(torch_dtype)
    (out,) = fd.execute([x, y])
    want = (torch.exp(x + y) * y).float().sum(1)
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype,torch_dtype", DTYPES)
def test_a_select_with_a_scalar_is_rounded(dtype, torch_dtype):
    # max, min and where are exact among tensors of the output dtype, not with a scalar 0.1
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=dtype)
        fd.add_output(fd.ops.cast(fd.ops.maximum(x, 0.1), DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.where(fd.ops.gt(x, 0.0), x, 0.1), DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.clamp(x, 0.1, 0.3), DataType.Float))
    x = torch.randn(40, generator=torch.Generator().manual_seed(2)).to(torch_dtype)
    want = [torch.clamp(x, min=0.1).float(), torch.where(x > 0, x, torch.tensor(0.1, dtype=torch_dtype)).float(),
            torch.clamp(x, 0.1, 0.3).float()]
    for got, expected in zip(fd.execute([x]), want, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("looped", [False, True])
@pytest.mark.parametrize("dtype,torch_dtype", DTYPES)
def test_a_half_row_sum_read_back_is_rounded(dtype, torch_dtype, looped, monkeypatch):
    if looped:  # rows beyond 4 columns take the looped inner reduction
        from fuser.schedulers import heuristics
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 4)
        monkeypatch.setattr(heuristics, "LOOPED_BLOCK", 4)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dtype)
        s = fd.ops.sum(x, [1], True)
        fd.add_output(fd.ops.cast(s, DataType.Float))
        fd.add_output(fd.ops.div(x, s))
    x = (torch.rand(4, 16, generator=torch.Generator().manual_seed(0)) + 0.3).to(torch_dtype)
    x[0] = 4000.0 if torch_dtype is torch.float16 else 1.0e37  # its sum overflows half
    s_float, q = fd.execute([x])
    want = x.sum(1, keepdim=True)
    assert torch.equal(s_float, want.float())
    assert torch.equal(q, x / want)
    assert ("for " in fd.last_triton_code()) == looped
