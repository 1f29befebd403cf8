"""An in-place op on a slice of an argument (`x[:4].mul_(2)`, `x[a:b] += y`, `x[:, ::2].mul_(y)`)
writes the slice alone (frontend/reinplace.py): functionalized, it read the slice, scattered the
new value into a new tensor of all of x (`slice_scatter`) and copied that back (`copy_`), two
ATen calls over the whole argument, because the slice's read of x's old value kept the write
out of place. A read of the very region written, feeding only the written value, is now
allowed; a read of another region (`x[1:5] = x[0:4] * 2`) or of the old value for anything else
keeps the out-of-place form."""
import pytest
import torch

import fuser
from tests.helpers import make

# ATen ops that make or write a tensor of the argument's size: left, the write is not in place
_WHOLE_ARGUMENT = ("aten.slice_scatter.default", "aten.select_scatter.default", "aten.copy_.default")


def _aten_code(fn, *args) -> str:
    """The ATen graphs fuser compiled for `fn` (jitted) called with `args` (run once more)."""
    report = fuser.explain(fn, *args)
    return "\n".join(p.aten_code for g in report.graphs for p in g.programs)


def _whole_argument_ops(code: str) -> list[str]:
    return [op for op in _WHOLE_ARGUMENT if f"torch.ops.{op}(" in code]


def rows_mul(x):
    return x[:4].mul_(2)


def rows_add(x, y):
    x[2:5] += y


def strided_columns_mul(x, y):
    return x[:, ::2].mul_(y)


def block_add(x, y):
    return x[1:3, 2:6].add_(y)


def column_mul(x):
    return x[:, 1].mul_(-3)


def rows_transposed_mul(x):
    return x[:4].t().mul_(2)


# (function, argument shapes): each writes a part of x that it reads, and nothing else of x
_SLICE_UPDATES = {
    "rows_mul": (rows_mul, [(8, 16)]),
    "rows_add": (rows_add, [(8, 16), (3, 16)]),
    "strided_columns_mul": (strided_columns_mul, [(8, 16), (8, 8)]),
    "block_add": (block_add, [(4, 8), (2, 4)]),
    "column_mul": (column_mul, [(8, 16)]),
    "rows_transposed_mul": (rows_transposed_mul, [(8, 16)]),
}


def _check_against_eager(fn, jf, shapes):
    """Runs `fn` and `jf` on copies of fresh arguments: the results, the written argument and a
    returned view's place in it are eager's."""
    args = [make(s) for s in shapes]
    ours, theirs = [a.clone() for a in args], [a.clone() for a in args]
    with torch.no_grad():
        got, want = jf(*ours), fn(*theirs)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    if want is None:
        assert got is None
        return
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert want.untyped_storage().data_ptr() == theirs[0].untyped_storage().data_ptr()
    assert got.untyped_storage().data_ptr() == ours[0].untyped_storage().data_ptr()  # (a view of x)
    assert (got.storage_offset(), got.stride()) == (want.storage_offset(), want.stride())


@pytest.mark.parametrize("update", sorted(_SLICE_UPDATES))
def test_an_in_place_op_on_a_slice_writes_the_slice_alone(update):
    fn, shapes = _SLICE_UPDATES[update]
    jf = fuser.jit(fn)
    for _ in range(2):
        _check_against_eager(fn, jf, shapes)
    # (the slice copied into x: one ATen call; it was a slice_scatter of all of x and a copy_ back)
    assert jf.cache_info().fallback_ops == 1, jf.cache_info()
    code = _aten_code(jf, *[make(s) for s in shapes])
    assert _whole_argument_ops(code) == [], code


def test_an_update_of_rows_at_symbolic_bounds_writes_the_rows_alone():
    def f(x, y, start: int):
        x[start:start + 3] += y

    jf = fuser.jit(f)
    for start in (1, 4, 2):  # (the second call traces the start as a SymInt)
        x, y = make((8, 16)), make((3, 16))
        ours = x.clone()
        with torch.no_grad():
            jf(ours, y, start)
            f(x, y, start)
        torch.testing.assert_close(ours, x, rtol=1e-6, atol=1e-6)
    code = _aten_code(jf, make((8, 16)), make((3, 16)), 3)
    assert _whole_argument_ops(code) == [], code


def shifted_rows(x):
    x[1:5] = x[0:4] * 2  # (reads rows 0-3, writes rows 1-4)


def old_rows_returned(x):
    old = x[:4] * 3
    x[:4].mul_(2)
    return old


@pytest.mark.parametrize("fn", [shifted_rows, old_rows_returned], ids=lambda f: f.__name__)
def test_a_read_of_the_old_value_besides_the_update_keeps_the_out_of_place_write(fn):
    jf = fuser.jit(fn)
    x = make((8, 16))
    ours = x.clone()
    with torch.no_grad():
        got, want = jf(ours), fn(x)
    torch.testing.assert_close(ours, x, rtol=1e-6, atol=1e-6)
    if want is not None:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    code = _aten_code(jf, make((8, 16)))
    assert "torch.ops.aten.slice_scatter.default(" in code, code


def test_an_in_place_op_on_a_transposed_argument_matches_eager():
    # (all of x written: the copy back of the transposed value stays, one ATen call)
    jf = fuser.jit(lambda x: x.t().mul_(2))
    for _ in range(2):
        _check_against_eager(lambda x: x.t().mul_(2), jf, [(8, 16)])


def test_a_slice_update_by_a_weight_needing_a_gradient_matches_eagers_gradient():
    # (a training graph: not written in place, as before; x's update and w's gradient eager's)
    def f(x, w):
        return (x[:4].mul_(w) * x[4:]).sum()

    x, w = make((8, 16)), make((16,))
    ours, theirs = (x.clone(), w.clone().requires_grad_()), (x.clone(), w.clone().requires_grad_())
    jf = fuser.jit(f)
    jf(*ours).backward()
    f(*theirs).backward()
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours[1].grad, theirs[1].grad, rtol=1e-5, atol=1e-5)
