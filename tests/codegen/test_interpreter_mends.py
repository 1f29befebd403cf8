"""fuser's mends of Triton's interpreter (codegen/interpreter.py): reductions with a user combine
function in log2(n) rounds of whole-array combines instead of a Python call an element, with
the results of a left fold up to rounding; the NumPy type of a Triton type remembered."""
import math

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from fuser.codegen.interpreter import Interpreted

CALLS = []


@triton.jit
def _sum_and_max(a, b, c, d):
    CALLS.append(1)  # (Python on the interpreter: counts the combine's calls)
    return a + c, tl.maximum(b, d)


@triton.jit
def _first_nonzero(a, i, b, j):
    """Not commutative: the left operand wins unless it is 0; an order check."""
    take_left = a != 0
    return tl.where(take_left, a, b), tl.where(take_left, i, j)


@triton.jit
def _reduce_rows(x_ptr, s_ptr, m_ptr, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + r * C + c)
    s, m = tl.reduce((x, x), AXIS, _sum_and_max)
    if AXIS == 0:
        tl.store(s_ptr + tl.arange(0, C), s)
        tl.store(m_ptr + tl.arange(0, C), m)
    else:
        tl.store(s_ptr + tl.arange(0, R), s)
        tl.store(m_ptr + tl.arange(0, R), m)


@triton.jit
def _first_nonzero_index(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    v, i = tl.reduce((x, tl.arange(0, N)), 0, _first_nonzero)
    tl.store(out_ptr, v)
    tl.store(out_ptr + 1, i.to(tl.float32))


@triton.jit
def _whole_block(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + r * C + c)
    s, m = tl.reduce((x, x), None, _sum_and_max)
    tl.store(out_ptr, s)
    tl.store(out_ptr + 1, m)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("rows,cols", [(16, 8), (1, 4), (32, 2)])
def test_a_two_output_combine_matches_numpy_in_log_rounds(rows, cols, axis):
    x = torch.randn(rows, cols)
    n = (rows, cols)[axis]
    s, m = torch.empty(x.shape[1 - axis]), torch.empty(x.shape[1 - axis])
    CALLS.clear()
    Interpreted(_reduce_rows.fn)[(1,)](x, s, m, rows, cols, axis)
    torch.testing.assert_close(s, x.sum(axis), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m, x.amax(axis))
    assert len(CALLS) == math.ceil(math.log2(n)), "one combine call a round, not one an element"


def test_the_whole_block_reduces_to_scalars():
    x = torch.randn(8, 4)
    out = torch.empty(2)
    Interpreted(_whole_block.fn)[(1,)](x, out, 8, 4)
    torch.testing.assert_close(out, torch.stack([x.sum(), x.max()]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("first", [0, 3, 7, 10, 15])
def test_earlier_elements_stay_on_the_left(first):
    """The first nonzero element's value and index, as a left fold finds them."""
    x = torch.zeros(16)
    x[first:] = torch.arange(1, 17 - first, dtype=torch.float32)
    out = torch.empty(2)
    Interpreted(_first_nonzero_index.fn)[(1,)](x, out, 16)
    assert out.tolist() == [1.0, float(first)]


@triton.jit
def _scalar_max(a, b):
    if a >= b:  # (Python control flow on the values: a combine of scalars only)
        return a
    return b


@triton.jit
def _max_by_scalars(x_ptr, out_ptr, N: tl.constexpr):
    tl.store(out_ptr, tl.reduce(tl.load(x_ptr + tl.arange(0, N)), 0, _scalar_max))


def test_a_scalar_only_combine_keeps_the_element_wise_path():
    """The interpreter reads any array as true: whole-array rounds would return the first
    element here, were the truth of several elements not an error that sends the reduce back
    to the element-wise path."""
    x = torch.tensor([0.5, -1.0, 3.0, 2.0, 7.0, 1.0, -4.0, 6.0])
    out = torch.empty(1)
    Interpreted(_max_by_scalars.fn)[(1,)](x, out, 8)
    assert out.item() == 7.0


def test_the_remembered_dtype_lookup_answers_as_the_interpreters_table():
    """codegen/interpreter.py `_fix_interpreter_dtype_lookup`: the same NumPy type for scalar,
    block and pointer types, before and after an answer is remembered."""
    from triton.runtime import interpreter

    Interpreted(_whole_block.fn)  # (installs the lookup)
    lookup = interpreter._get_np_dtype
    assert getattr(lookup, "fuser_fixed", False)
    table = {tl.float32: np.float32, tl.bfloat16: np.uint16, tl.int1: np.bool_, tl.int64: np.int64,
             tl.uint8: np.uint8, tl.float8e4nv: np.uint8, tl.float16: np.float16}
    for _ in range(2):
        for ty, want in table.items():
            assert lookup(ty) == np.dtype(want)
            assert lookup(tl.block_type(ty, [4, 8])) == np.dtype(want)
        assert lookup(tl.pointer_type(tl.float32)) == np.dtype(np.uint64)
        assert lookup(tl.block_type(tl.pointer_type(tl.bfloat16), [4])) == np.dtype(np.uint64)


def test_a_masked_lane_computes_without_numpy_warnings():
    """A logsumexp over 5 rows of 100: the lanes past the last row and column compute the log
    of a zero sum, as the GPU's do, silently (eager warns of nothing either); the result is
    eager's. Before the mend the CPU run printed NumPy's 'divide by zero encountered in log'."""
    import warnings

    from fuser import DataType, FusionDefinition

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        m = fd.ops.max(x, [1], True)
        s = fd.ops.sum(fd.ops.exp(fd.ops.sub(x, m)), [1], True)
        fd.add_output(fd.ops.add(fd.ops.log(s), m))
    t = torch.randn(5, 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        (out,) = fd.execute([t])
    torch.testing.assert_close(out, torch.logsumexp(t, 1, keepdim=True))
