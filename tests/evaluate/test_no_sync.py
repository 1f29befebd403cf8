"""ATen segments on the GPU never wait for its stream: a Python scalar operand becomes a 0-dim
tensor filled on the device (torch.tensor copied it from pageable host memory, which drains the
stream first, so every call of such a segment serialized the host with the GPU)."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime import FusionExecutorCache


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])])
def test_aten_segments_with_scalars_do_not_synchronize(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        n = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int32)
        y = fd.ops.where(fd.ops.gt(x, 0.5), fd.ops.mul(x, 3.0), 2.0)
        fd.add_output(fd.ops.add(y, 1.5))
        fd.add_output(fd.ops.add(n, 2**40))  # wraps to int32 as eager does
        fd.add_output(fd.ops.logical_and(fd.ops.gt(x, 0.0), True))
    cache = FusionExecutorCache(fd.fusion, use_kernels=False)  # every op through ATen
    x = torch.randn(64, 32, device=device)
    n = torch.randint(-100, 100, (64, 32), device=device, dtype=torch.int32)
    cache.execute([x, n])  # the first call checks sizes
    if device == "cuda":
        torch.cuda.set_sync_debug_mode("error")  # a synchronizing call raises
    try:
        y, m, b = cache.execute([x, n])
    finally:
        if device == "cuda":
            torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(y, torch.where(x > 0.5, x * 3.0, 2.0) + 1.5)
    assert torch.equal(m, n + 2**40) and torch.equal(b, (x > 0) & True)
