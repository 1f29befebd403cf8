"""Kernels whose outputs are all bf16 use a cheaper tanh (exp-based, absolute error about 1e-7);
kernels with an fp32 output keep libdevice's. Either way the result is eager's, up to one bf16
rounding step."""
import pytest
import torch

from fuser import DataType, FusionDefinition


def _gelu_definition(out_dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        h = fd.ops.cast(x, DataType.Float)
        inner = fd.ops.mul(fd.ops.add(h, fd.ops.mul(fd.ops.mul(fd.ops.mul(h, h), h), 0.044715)), 0.7978845608028654)
        y = fd.ops.mul(fd.ops.mul(h, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))
        fd.add_output(fd.ops.cast(y, out_dtype))
    return fd


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("out_dtype", [DataType.BFloat16, DataType.Float])
def test_tanh_lowering_follows_the_output_precision(out_dtype):
    fd = _gelu_definition(out_dtype)
    x = torch.randn(300, 1000, device="cuda", dtype=torch.bfloat16) * 3
    (out,) = fd.execute([x])
    expected = torch.nn.functional.gelu(x.float(), approximate="tanh")
    source = fd.last_triton_code()
    if out_dtype is DataType.BFloat16:
        assert "_tanh(" in source and "libdevice.tanh" not in source
        rounded = expected.to(torch.bfloat16).float()
        ulp = torch.exp2(torch.floor(torch.log2(rounded.abs().clamp_min(1e-30))) - 7)
        # one rounding step at most, beyond the ~1e-7 |x| both lose in GELU's negative tail
        # (where 1 + tanh(z) cancels in eager's fp32 too)
        assert bool(((out.float() - rounded).abs() <= ulp + 1e-6 * x.float().abs()).all())
    else:
        assert "libdevice.tanh" in source
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_tanh_is_accurate_near_zero_and_saturates():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.tanh(x))
    x = torch.cat([torch.logspace(-12, 1.5, 300), -torch.logspace(-12, 1.5, 300),
                   torch.tensor([0.0, float("inf"), float("-inf"), float("nan")])])
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, torch.tanh(x), rtol=2e-6, atol=0, equal_nan=True)
