"""A max or min (any, all, amax) of a Bool tile stays int1 in every kernel form: its masked lanes
took the int identity 0 or 1, so the reduced value was an int32 that a later tl.where took as
its condition, which Triton warns is deprecated and will become an error (with warnings as
errors, fuser raised where eager ran), and in a looped pass an int1 accumulator became int32."""
import re
import warnings

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics
from tests.helpers import sm90_ptx

_NON_BOOLEAN_CONDITION = "tl.where with a non-boolean condition"


def _strict(run):
    """`run()` with Triton's warning of a non-boolean tl.where condition raised as an error."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=_NON_BOOLEAN_CONDITION)
        return run()


def _bool_reduction_fd(kind, axis):
    """where(kind(x > 0.3 along `axis`), x, 2x), and the reduced Bool itself."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        r = getattr(fd.ops, kind)(fd.ops.gt(x, 0.3), [axis], True)
        fd.add_output(fd.ops.where(r, x, fd.ops.mul(x, 2.0)))
        fd.add_output(r)
    return fd


def _eager(kind, axis, x):
    b = x > 0.3
    r = b.amax(axis, keepdim=True) if kind == "max" else b.amin(axis, keepdim=True)
    return torch.where(r, x, x * 2), r


def _check(fd, kind, axis, x):
    got_y, got_r = _strict(lambda: fd.execute([x]))
    want_y, want_r = _eager(kind, axis, x)
    assert got_r.dtype == torch.bool and torch.equal(got_r, want_r)
    torch.testing.assert_close(got_y, want_y, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("shape, max_persistent", [((6, 40), None), ((300, 12), None), ((5, 100), 32)])
def test_bool_max_and_min_feed_a_where(kind, axis, shape, max_persistent, monkeypatch):
    # one tile; many rows (a column reduction's looped pass); rows of 100 past a persistent
    # row of 32 (a row reduction's looped pass)
    if max_persistent is not None:
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", max_persistent)
    g = torch.Generator().manual_seed(66)
    x = torch.randn(*shape, generator=g)
    x[1] = -1.0  # a row and a column that hold both values, and rows and columns that do not
    _check(_bool_reduction_fd(kind, axis), kind, axis, x)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_bool_reduction_of_few_long_rows_split(small_splits, any_program_order, kind):
    # the split's partial step stores the chunks' Bools and the combine step reduces them
    g = torch.Generator().manual_seed(67)
    x = torch.randn(3, 211, generator=g)
    x[0] = torch.rand(211, generator=g) + 0.4  # a row all above the threshold: all() is True
    fd = _bool_reduction_fd(kind, 1)
    _check(fd, kind, 1, x)
    assert "split in one kernel" in fd.last_triton_code()


@pytest.mark.parametrize("axis, shape, max_persistent", [(0, (300, 12), None), (1, (5, 100), 32)])
def test_looped_bool_reduction_compiles_for_sm90(axis, shape, max_persistent, monkeypatch, tmp_path):
    """The looped pass's int1 accumulator stays int1 (a loop-carried value re-assigned another
    type does not compile for the GPU), masks and all (EVEN off); no GPU needed."""
    if max_persistent is not None:
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", max_persistent)
    fd = _bool_reduction_fd("max", axis)
    fd.execute([torch.randn(*shape)])
    source = fd.last_triton_code()
    assert "looped" in source
    params = [p.split(":")[0].strip() for p in re.search(r"^def fuser_\w+\((.*?)\):", source, re.M)[1].split(",")]
    constexprs = {k: v for k, v in {"BLOCK0": 16, "BLOCK1": 16, "INT64": False, "EVEN0": False,
                                    "EVEN1": False, "ALIGN": 2}.items() if k in params}
    if axis == 1:  # (one row a program, as the launch takes a looped row)
        constexprs["BLOCK0"] = 1
    pointers = {p: "*fp32" for p in params if p.endswith("_ptr")}
    assert ".entry" in sm90_ptx(source, constexprs, pointers, tmp_path, num_warps=4)


def _any_nan_of_row(x):
    return torch.where(torch.isnan(x).any(1, keepdim=True), 7.0, x * 2)


def _quantile_of_row(x):
    return torch.quantile(x, 0.3, dim=1)  # (its NaN check: any(isnan) of the sorted row)


@pytest.mark.parametrize("fn", [_any_nan_of_row, _quantile_of_row])
def test_jit_any_of_bool_feeds_a_where(fn):
    g = torch.Generator().manual_seed(68)
    x = torch.randn(5, 24, generator=g)
    x[1, 3] = float("nan")
    got = _strict(lambda: fuser.jit(fn)(x))
    torch.testing.assert_close(got, fn(x), rtol=1e-6, atol=1e-6, equal_nan=True)
