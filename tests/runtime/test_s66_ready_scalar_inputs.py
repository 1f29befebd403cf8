"""A ready program's ATen steps read a scalar input's bound value (runtime/ready.py
`ready_program`): the ready key fixes each scalar argument's type and value, so the value
binding made of it (a float for an int given for a Double, a Half 0.1 rounded to half) is fixed
too. They read the call's argument before, so a call whose argument differed from its bound
value got no ready program (runtime/cache.py refused it) and bound and walked its segments on
every repeat. Every call is compared with eager bit for bit, on fresh data."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.ready import ReadyProgram
from tests.helpers import BACKENDS, backend_env, make

CALLS = 6


def _programs(fd) -> list:
    return [r for r in fd.cache.ready_calls() if isinstance(r, ReadyProgram)]


def _scatter_between_kernels(scalar_dtype: DataType):
    """neg(x), the scalar scattered into it by ATen, then a kernel adding x: three segments on
    the interpreter, ATen ops on the aten backend; each step exact (bitwise comparable)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        i = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Int)
        s = fd.define_scalar(dtype=scalar_dtype)
        fd.add_output(fd.ops.add(fd.ops.scatter(fd.ops.neg(x), i, s, 1), x))
    return fd


def _eager_scatter(x, index, held: torch.Tensor):
    return torch.neg(x).scatter(1, index, held.item()) + x


def _pow_of_scalar(scalar_dtype: DataType):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Double)
        s = fd.define_scalar(dtype=scalar_dtype)
        fd.add_output(fd.ops.sum(fd.ops.pow(fd.ops.abs(x), s), [1]))
    return fd


def _index(g) -> torch.Tensor:
    return torch.stack([torch.randperm(16, generator=g)[:3] for _ in range(4)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scalar_dtype, value", [(DataType.Double, 3), (DataType.Half, 0.1),
                                                 (DataType.BFloat16, 0.1), (DataType.Float, 0.1)],
                         ids=["Double given an int", "Half", "BFloat16", "Float"])
def test_a_scalar_read_by_an_aten_step_takes_the_ready_program(backend, scalar_dtype, value):
    held = torch.tensor(value, dtype=scalar_dtype.to_torch())  # eager's analog of the scalar
    g = torch.Generator().manual_seed(66)
    with backend_env(backend):
        fd = _scatter_between_kernels(scalar_dtype)
        for _ in range(CALLS):
            x, index = make((4, 16)), _index(g)
            (out,) = fd.execute([x, index, value])
            torch.testing.assert_close(out, _eager_scatter(x, index, held), rtol=0, atol=0)
    assert len(_programs(fd)) == 1  # (a BoundCall, binding every repeat, before)


@pytest.mark.parametrize("scalar_dtype, value", [(DataType.Double, 2), (DataType.Half, 0.1)],
                         ids=["Double given an int", "Half"])
def test_pow_on_the_aten_path_takes_the_ready_program(scalar_dtype, value):
    held = torch.tensor(value, dtype=scalar_dtype.to_torch())
    with backend_env("aten"):
        fd = _pow_of_scalar(scalar_dtype)
        for _ in range(CALLS):
            x = make((4, 16), torch.float64)
            (out,) = fd.execute([x, value])
            torch.testing.assert_close(out, torch.pow(x.abs(), held).sum(1), rtol=0, atol=0)
    assert len(_programs(fd)) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_changed_scalar_never_reuses_a_stale_ready_program(backend):
    # each value, each type: its own key, so its own program, never another value's
    values = [3, 0.1, 3, 2.5, 0.1, 3.0, -0.0, 0.0, 3, 0.1]
    g = torch.Generator().manual_seed(67)
    with backend_env(backend):
        fd = _scatter_between_kernels(DataType.Half)
        for value in values:
            x, index = make((4, 16)), _index(g)
            (out,) = fd.execute([x, index, value])
            want = _eager_scatter(x, index, torch.tensor(value, dtype=torch.half))
            torch.testing.assert_close(out, want, rtol=0, atol=0)
            assert torch.equal(out.signbit(), want.signbit())  # (-0.0 is not 0.0's program)
    assert len(_programs(fd)) == len({(type(v), v, str(v)) for v in values})
