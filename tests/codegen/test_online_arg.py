"""Arg reductions in one pass (codegen/online_arg.py): argmax, argmin and max / min along a dim
keep a running (value, position) pair, so a looped kernel reads its rows once, not twice, and
few long rows (a whole tensor's argmax) split across programs, where before one program
looped over each row. Results exactly as eager's: first position on ties, NaN as the extreme,
and the value of the winning element (-0.0 against 0.0)."""
import math
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics
from tests.helpers import fresh_jit

PASS = re.compile(r"for c_start in (?:tl\.)?range\(|for r_start in (?:tl\.)?range\(")


@pytest.fixture
def looped(monkeypatch):
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)  # rows longer than 32: the looped kernel


def tied(shape, dtype, seed=0) -> torch.Tensor:
    """Small integers (ties everywhere); in floating types rows of special values: NaN late in
    a row, a row of -inf, a row of 0.0 and -0.0 (the first -0.0), a row whose maximum and
    minimum sit at the last position."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, shape, generator=g).to(dtype)
    if dtype.is_floating_point:
        x[0, -3] = math.nan
        x[1] = -math.inf
        x[2] = 0.0
        x[2, 5::7] = -0.0
        x[2, 3] = -0.0
        x[3, -1], x[3, -2] = 9.0, -9.0
    return x


def kernels(fn, *args) -> str:
    return "\n".join(t for f in fuser.explain(fresh_jit(fn), *args).fusions for t in f.triton)


FORMS = {
    "argmax": lambda x: x.argmax(-1),
    "argmin": lambda x: x.argmin(1),
    "max dim": lambda x: torch.max(x, -1),
    "min dim keepdim": lambda x: torch.min(x, 1, keepdim=True),
}


def check_exact(fn, *x):
    got, want = fresh_jit(fn)(*x), fn(*x)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        if w.dtype.is_floating_point:  # (the sign of a zero too)
            assert torch.equal(torch.signbit(g), torch.signbit(w)), (g, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("name", list(FORMS))
def test_a_looped_arg_reduction_reads_its_rows_once(looped, name, dtype):
    x = tied((5, 300), dtype)
    check_exact(FORMS[name], x)
    code = kernels(FORMS[name], x)
    assert len(PASS.findall(code)) == 1, code
    assert "_argmax_pair" in code or "_argmin_pair" in code


@pytest.mark.parametrize("name", list(FORMS))
def test_rows_in_one_tile_reduce_pairs(name):
    """The persistent form reduces (value, position) pairs too: the value is the first
    extreme's, its sign included."""
    x = tied((5, 30), torch.float32)
    check_exact(FORMS[name], x)
    assert "_arg" in kernels(FORMS[name], x)


@pytest.mark.parametrize("name", list(FORMS))
def test_few_long_rows_split_across_programs(small_splits, any_program_order, looped, name):
    x = tied((4, 1000), torch.float32, seed=1)
    x[3, 990] = 50.0  # (the extreme in the last chunk)
    check_exact(FORMS[name], x)
    code = kernels(FORMS[name], x)
    assert "split in one kernel" in code and "chunk * CHUNK" in code, code


@pytest.mark.parametrize("largest", [True, False])
def test_a_whole_tensor_splits(small_splits, any_program_order, looped, largest):
    x = torch.randn(6, 200, generator=torch.Generator().manual_seed(2))
    x[4, 117] = 30.0 if largest else -30.0
    x[5, 3] = x[4, 117]  # (a tie later in memory: the first wins)
    fn = (lambda x: x.argmax()) if largest else (lambda x: x.argmin())
    check_exact(fn, x)
    x[1, 150] = math.nan  # (NaN wins both)
    check_exact(fn, x)
    assert "split in one kernel" in kernels(fn, x)


def test_columns_split_over_rows(small_splits, any_program_order):
    """argmax over dim 0 of many rows and few columns: an outer reduction, its rows split."""
    x = tied((4, 8000), torch.float32, seed=3).t().contiguous()  # (the special rows along dim 0)
    x[7500, 1] = 40.0
    check_exact(lambda x: torch.max(x, 0), x)
    check_exact(lambda x: x.argmin(0), x)
    code = kernels(lambda x: x.argmin(0), x)
    assert "outer reduction" in code and "split in one kernel" in code, code


def test_a_row_sum_beside_its_argmax_takes_the_same_pass(looped):
    def fn(x):
        return x.sum(-1), x.argmax(-1)
    x = torch.randn(5, 300)
    s, i = fresh_jit(fn)(x)
    torch.testing.assert_close(s, x.sum(-1))
    assert torch.equal(i, x.argmax(-1))
    assert len(PASS.findall(kernels(fn, x))) == 1


def test_softmax_and_argmax_of_the_same_logits(looped):
    def fn(x):
        return torch.softmax(x, -1), x.argmax(-1)
    x = tied((5, 300), torch.float32)
    p, i = fresh_jit(fn)(x)
    torch.testing.assert_close(p, torch.softmax(x, -1), equal_nan=True)
    assert torch.equal(i, x.argmax(-1))


def test_a_definition_without_the_isnan_term_keeps_its_own_meaning(looped):
    """min(where(x == max(x), position, n)) of a floating x: a row holding NaN reaches no
    position (NaN equals nothing), so its result is n. Not an arg pair, which would give the
    NaN's position."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        m = fd.ops.max(x, [1], True)
        n = fd.ops.size(x, 1)
        pos = fd.ops.broadcast(fd.ops.iota(n, 0, 1, DataType.Int), [True, False])
        fd.add_output(fd.ops.min(fd.ops.where(fd.ops.eq(x, m), pos, n), [1]))
    x = torch.randn(4, 100)
    x[1, 7] = math.nan
    (got,) = fd.execute([x])
    want = x.argmax(1)
    want[1] = 100
    assert torch.equal(got, want)
    assert "_arg" not in fd.last_triton_code()


@pytest.mark.parametrize("fill", [-1, 5])
def test_a_fill_below_the_positions_keeps_its_own_meaning(fill):
    """min(where(x == max(x), arange(n), fill)) with a fill some position reaches: a row with an
    element off its maximum gives the fill, not the first position (no arg pair)."""
    def fn(x):
        return torch.where(x == x.amax(1, keepdim=True), torch.arange(x.shape[1]), fill).amin(1)
    x = torch.randint(0, 100, (4, 16))
    x[3] = 7  # (all equal: every position reached)
    assert torch.equal(fresh_jit(fn)(x), fn(x))


@pytest.mark.parametrize("largest", [True, False])
def test_the_value_of_a_cat_s_signed_zero_tie_is_the_first(largest):
    """Rows of a cat (shifted views, one tile): the value is the first extreme's, sign included."""
    def fn(a, b):
        return (torch.max if largest else torch.min)(torch.cat([a, b], 1), 1)
    a = torch.tensor([[0.0, -0.0], [-0.0, 0.0], [-1.0, -0.0]])
    b = torch.tensor([[-0.0, -3.0], [0.0, -2.0], [0.0, -5.0]])
    if not largest:
        a, b = -a, -b
    check_exact(fn, a, b)
