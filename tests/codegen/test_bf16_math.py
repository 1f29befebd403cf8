"""Kernels whose outputs are all bf16 may use the hardware's approximate tanh (its error stays
below half a bf16 unit in the last place); kernels with an fp32 output keep the accurate one."""
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
    source = "\n".join(fd.last_triton_code())
    if out_dtype is DataType.BFloat16:
        assert "tanh.approx.f32" in source
        torch.testing.assert_close(out, expected.to(torch.bfloat16), rtol=1.6e-2, atol=1e-2)
        # at most one bf16 rounding step away from eager's result
        ulp = (expected.abs().clamp_min(1e-3) * 2.0 ** -7)
        assert bool(((out.float() - expected).abs() <= ulp).all())
    else:
        assert "tanh.approx" not in source
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_interpreter_keeps_its_tanh():
    fd = _gelu_definition(DataType.BFloat16)
    x = torch.randn(7, 33, dtype=torch.bfloat16)
    (out,) = fd.execute([x])
    assert "tanh.approx" not in "\n".join(fd.last_triton_code())
    torch.testing.assert_close(out, torch.nn.functional.gelu(x.float(), approximate="tanh").to(torch.bfloat16),
                               rtol=1.6e-2, atol=1e-2)
