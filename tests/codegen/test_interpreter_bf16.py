"""fp32 <-> bf16 conversions in generated kernels match eager bit for bit, subnormal numbers,
ties, inf and NaN included (on the CPU, Triton's interpreter got subnormals wrong both ways:
codegen/interpreter.py `_fix_interpreter_bf16`)."""
import torch

from fuser import DataType, FusionDefinition


def values() -> torch.Tensor:
    tiny = [5.2134e-39, -2.7e-39, 1e-40, 1.4e-45, 1.1754942e-38, 1.1754944e-38]
    ties = [1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -(1.0 + 2 ** -8)]  # halfway between two bf16
    other = [0.0, -0.0, 1.0, 3.3895314e38, 3.4e38, float("inf"), float("-inf"), float("nan")]
    g = torch.Generator().manual_seed(11)
    row = torch.tensor(tiny + ties + other + torch.randn(13, generator=g).tolist())
    return torch.stack([row, row * 1e-3, -row])


def test_narrowing_to_bf16_matches_eager(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.mul(x, 1.0), DataType.BFloat16))
    x = values().to(device)
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, x.to(torch.bfloat16), rtol=0, atol=0, equal_nan=True)


def test_widening_from_bf16_matches_eager(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.mul(fd.ops.cast(x, DataType.Float), 2.0))
    x = values().to(torch.bfloat16).to(device)
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, x.float() * 2.0, rtol=0, atol=0, equal_nan=True)
