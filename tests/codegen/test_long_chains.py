"""Code generation emits values on demand without one Python frame per op: a chain of several
hundred ops (a long pointwise epilogue, an unrolled update) becomes one kernel, not a
RecursionError."""
import torch

from fuser import DataType, FusionDefinition


def test_a_chain_of_400_ops_is_one_kernel():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        y = x
        for _ in range(100):
            y = fd.ops.add(fd.ops.mul(y, 0.999), w)  # w read by every step
            y = fd.ops.sub(y, fd.ops.mul(x, 0.001))  # and x, far back in the chain
        fd.add_output(fd.ops.sum(y, [-1]))
    x, w = torch.randn(5, 9), torch.randn(9) * 1e-3
    (out,) = fd.execute([x, w])
    ref = x.clone()
    for _ in range(100):
        ref = ref * 0.999 + w - x * 0.001
    torch.testing.assert_close(out, ref.sum(-1), rtol=1e-4, atol=1e-4)
    assert len(fd.last_segments()) == 1
