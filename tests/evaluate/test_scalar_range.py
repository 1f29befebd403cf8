"""A Python constant beyond its op's type range in an ATen segment converts as eager converts
it (inf for a float type), rather than raising (torch.full refuses such values)."""
import pytest
import torch

from fuser import DataType, FusionDefinition, FusionDefinitionError
from fuser.runtime import FusionExecutorCache


def test_constants_beyond_fp32_become_inf_as_in_eager():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, 1e300))
        with pytest.raises(FusionDefinitionError, match="does not fit in 64 bits"):
            fd.ops.mul(x, 2**70)  # (eager refuses the int too: OverflowError)
    x = torch.randn(6, generator=torch.Generator().manual_seed(5))
    big, = FusionExecutorCache(fd.fusion, use_kernels=False).execute([x])
    assert torch.equal(big, x * 1e300)
    empty = fd.execute([torch.randn(0)])  # an empty tensor runs through ATen too
    assert all(t.numel() == 0 for t in empty)
