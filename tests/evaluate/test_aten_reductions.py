"""fuser's ATen evaluation of reductions (fd.validate's reference, FUSER_CPU_KERNELS=aten and
evaluator segments) computes what the generated kernels compute."""
import math

import torch

from fuser import FusionDefinition
from fuser.runtime import FusionExecutorCache


def _aten(fd, inputs):
    """`fd` through its ATen rules (fd.validate's reference)."""
    return FusionExecutorCache(fd.fusion, use_kernels=False).execute(inputs)


def test_an_fp16_product_multiplies_in_fp32():
    # ATen's CPU prod of fp16 rounds each product to fp16: 2.6% off over 2000 factors near 1,
    # so fd.validate failed the kernel (which multiplies in fp32); over two axes too
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        x = (1 + torch.rand(2, 40, 50, generator=g) * 2e-3).to(dtype)
        with FusionDefinition() as fd:
            a = fd.from_pytorch(x)
            fd.add_output(fd.ops.prod(a, [1, 2]))
        (ref,) = _aten(fd, [x])
        exact = x.double().prod(2).prod(1)
        assert ref.dtype == dtype
        torch.testing.assert_close(ref.double(), exact.to(dtype).double(), rtol=2 ** -8, atol=0)
        (out,) = fd.execute([x])
        torch.testing.assert_close(out, ref, rtol=2 ** -8, atol=0)
        fd.validate([x])


def test_var_mean_of_a_row_holding_an_inf_has_the_kernels_nan_mean():
    # the kernels give such a row a NaN mean whatever the order (codegen/math.py
    # `_welford_mean`); ATen kept inf where the inf came last, and fd.validate failed the kernel
    x = torch.tensor([[1.0, 2.0, math.inf], [math.inf, 1.0, 2.0], [1.0, 2.0, 4.0], [math.inf, math.inf, 1.0]])
    with FusionDefinition() as fd:
        a = fd.from_pytorch(x)
        v, m = fd.ops.var_mean(a, [1], 0)
        fd.add_output(v)
        fd.add_output(m)
    ref_v, ref_m = _aten(fd, [x])
    out_v, out_m = fd.execute([x])
    torch.testing.assert_close(out_m, ref_m, equal_nan=True)
    torch.testing.assert_close(out_v, ref_v, equal_nan=True)
    assert ref_m[:2].isnan().all() and ref_m[3].isnan() and ref_m[2] == x[2].mean()
    fd.validate([x])
    # one element a row: its inf is its mean, as eager's
    y = torch.tensor([[math.inf], [2.0]])
    with FusionDefinition() as fd1:
        v, m = fd1.ops.var_mean(fd1.from_pytorch(y), [1], 0)
        fd1.add_output(m)
    (ref_m,) = _aten(fd1, [y])
    assert ref_m.tolist() == [math.inf, 2.0]
