"""Ops on Int scalars only where eager's values on 0-dim int64 tensors (docs/nvfuser.md's rule
for scalar ops) have no Python counterpart: a shift count outside [0, 64) shifts every bit out
(0, or -1 for a right shift of a negative value; Python refuses a negative count), and an
integer 0 to a negative power is 0 (Python divides by zero). Both were FusionDefinitionErrors
for known scalars and failed executions for scalar inputs."""
import pytest
import torch

from fuser import DataType, FusionDefinition

EAGER = {"bitwise_left_shift": torch.bitwise_left_shift, "bitwise_right_shift": torch.bitwise_right_shift,
         "pow": torch.pow}


def _int_scalar_op(name, a, b, known):
    """fd.ops.<name> of two Int scalars (known, or inputs bound at execution), added to a
    random int64 tensor so that its value reaches an output."""
    t = torch.randint(-100, 100, (5,))
    with FusionDefinition() as fd:
        tv = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        x, y = (fd.define_scalar(v if known else None, dtype=DataType.Int) for v in (a, b))
        fd.add_output(fd.ops.add(tv, getattr(fd.ops, name)(x, y)))
    (out,) = fd.execute([t] if known else [t, a, b])
    return out - t


def _cases(name):
    """Fresh random values with counts and exponents outside Python's rules, eager's edges."""
    values = torch.randint(-50, 50, (3,)).tolist()
    if name == "pow":
        return [(0, -1), (0, -4), (1, -3), (-1, -3), (-1, -4)] + [(v, -2) for v in values]
    counts = [-1, -7, 64, 65, -(2 ** 40)] + torch.randint(-64, 0, (2,)).tolist()
    return [(v, c) for v in values + [-8, 3] for c in counts]


@pytest.mark.parametrize("known", [False, True], ids=["input", "known"])
@pytest.mark.parametrize("name", sorted(EAGER))
def test_int_scalar_ops_take_eager_values_on_0_dim_tensors(name, known):
    for a, b in _cases(name):
        want = EAGER[name](torch.tensor(a), torch.tensor(b))
        got = _int_scalar_op(name, a, b, known)
        torch.testing.assert_close(got, want.expand(5), msg=lambda m: f"{name}({a}, {b}): {m}")
