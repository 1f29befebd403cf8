"""A slice's output extent holds its input's extent once, so chains of slices stay small: the
length of x[a:b] on an axis of n is one function of (a, b, n) where the difference of two
normalized bounds held n twice and doubled per slice (16 slices by a scalar start printed 10 MB
and took 4 s; a jitted x[1:] loop of 12 took 37 s to retrace with dynamic shapes)."""
import itertools
import time

import pytest
import sympy
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.ir.symbolic import compile_extent, sliceLen, tailLen
from tests.helpers import assert_eager


def _norm(i, n):
    return min(max(i + n if i < 0 else i, 0), n)


@pytest.mark.parametrize("a,b", list(itertools.product(range(-6, 7), repeat=2)))
def test_slice_length_forms_match_pytorch(a, b):
    """Every closed form the integer bounds take agrees with Python's own slicing of a list."""
    n = sympy.Symbol("n", integer=True, nonnegative=True)
    forms = {
        "x[a:b]": (sliceLen(sympy.Integer(a), sympy.Integer(b), n), lambda v: len(range(v)[a:b])),
        "x[a:]": (tailLen(sympy.Integer(a), n), lambda v: len(range(v)[a:])),
        "x[3:][a:b]": (sliceLen(sympy.Integer(a), sympy.Integer(b), tailLen(sympy.Integer(3), n)),
                       lambda v: len(range(v)[3:][a:b])),
        "x[2:][a:]": (tailLen(sympy.Integer(a), tailLen(sympy.Integer(2), n)), lambda v: len(range(v)[2:][a:])),
    }
    for what, (form, want) in forms.items():
        f = compile_extent(form)
        for v in range(10):
            assert f({"n": v}) == want(v), (what, a, b, v, form)


def test_chain_of_slices_by_a_scalar_start_stays_small():
    depth = 30
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Int)
        y = x
        for _ in range(depth):
            y = fd.ops.slice(y, start_indices=[s], end_indices=[fd.ops.size(y, 0)])
        fd.add_output(fd.ops.mul(y, 2.0))
    text = str(fd.fusion)
    assert len(text) < 100_000, len(text)  # (doubling per slice: 2**30 copies of i0)
    x = torch.randn(100)
    for start in (1, -3, 0, 500):
        (out,) = fd.execute([x, start])
        want = x
        for _ in range(depth):
            want = want[start:]
        assert_eager(out, want * 2)


def test_chain_of_integer_slices_prints_one_difference():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        y = x
        for _ in range(5):
            y = fd.ops.slice(y, [1], [fd.ops.size(y, 0)])
        fd.add_output(y)
    assert "max(0, ( i0 - 5 ))" in str(fd.fusion)
    x = torch.randn(7)
    assert_eager(fd.execute([x])[0], x[5:])
    assert fd.execute([torch.randn(3)])[0].shape == (0,)


def test_jitted_slice_loop_retraces_quickly_with_dynamic_shapes():
    @fuser.jit
    def f(x):
        for _ in range(12):
            x = x[1:] * 1.5
        return x

    for n in (40, 50):
        x = torch.randn(n)
        start = time.perf_counter()
        out = f(x)
        elapsed = time.perf_counter() - start
        assert_eager(out, x[12:] * 1.5 ** 12)
    assert elapsed < 15, elapsed  # the dynamic retrace (37 s before, under 1 s now)


@pytest.mark.parametrize("a", [3, -3])
def test_a_rotate_joins_back_to_its_extent(a):
    """cat([x[a:], x[:a]]) has x's extent itself: min(a, n) + max(n - a, 0), left as written,
    grew per level of a chain of rotates (and its kernel carried the sizes, 1 MB of comments
    at ten levels under dynamic shapes)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        y = x
        for _ in range(4):
            n = fd.ops.size(y, 1)
            y = fd.ops.sin(fd.ops.cat([fd.ops.slice(y, [0, a], [fd.ops.size(y, 0), n]),
                                       fd.ops.slice(y, [0, 0], [fd.ops.size(y, 0), a])], 1))
        fd.add_output(y)
    assert fd.fusion.outputs()[0].domain.no_reductions()[1].size == x.domain.no_reductions()[1].size
    for cols in (8, 2):  # (2 < |a|: the pieces are the whole row and nothing)
        t = torch.randn(3, cols)
        want = t
        for _ in range(4):
            want = torch.cat([want[:, a:], want[:, :a]], 1).sin()
        assert_eager(fd.execute([t])[0], want)
