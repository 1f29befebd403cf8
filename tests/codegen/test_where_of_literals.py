"""A where of two literals (fd.ops.where(c, 0.1, 0.2)) of a Double result: Triton selects
between two literals in fp32, so one becomes an fp64 block; the values are the fp64 ones."""
import torch

from fuser import DataType, FusionDefinition


def test_a_double_where_of_two_literals_keeps_their_digits(device):
    with FusionDefinition() as fd:
        c = fd.define_tensor(shape=[-1, -1], dtype=DataType.Bool)
        fd.add_output(fd.ops.where(c, 0.1, 1 / 3))
    m = torch.rand(8, 33, device=device) > 0.5
    (out,) = fd.execute([m])
    want = torch.where(m, torch.tensor(0.1, dtype=torch.float64, device=device),
                       torch.tensor(1 / 3, dtype=torch.float64, device=device))
    assert out.dtype == torch.float64 and torch.equal(out, want)
