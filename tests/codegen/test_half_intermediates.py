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
