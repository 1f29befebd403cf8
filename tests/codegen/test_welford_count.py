"""A looped var_mean (Welford) keeps its count along the reduced dim only: whether a lane takes an
element at a step depends on the reduced dim's mask alone, so the count and the reciprocal the
update multiplies by are a row (or column) of the tile, not a tile, and the update has no
division an element (codegen/reductions.py `_accumulate`; on the H200 a column var_mean's split
kernel over bf16 8192x16384 took 106 us instead of 149). Checked in every looped form (rows
looped over, columns looped over, columns split over chunks of rows in one kernel and in two),
on odd extents whose last step is masked, and on data whose mean is large against its spread."""
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.codegen import launch

FORMS = {  # form -> (rows, columns, reduced dim, plan words)
    "looped rows": (7, 301, 1, "looped"),
    "looped columns": (301, 7, 0, "looped"),
    "split in one kernel": (3001, 9, 0, "split in one kernel"),
    "split in two kernels": (3001, 9, 0, "split (partial)"),
}


def _var_mean(dim: int, correction: int, dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dtype)
        var, mean = fd.ops.var_mean(fd.ops.cast(x, DataType.Float), [dim], correction)
        fd.add_output(var)
        fd.add_output(mean)
    return fd


def _force(monkeypatch, form: str) -> None:
    if form == "looped rows":
        monkeypatch.setattr(fuser.schedulers.heuristics, "MAX_PERSISTENT", 64)
    if form.startswith("split"):
        monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
        monkeypatch.setattr(launch, "SPLIT_IN_ONE_KERNEL", form == "split in one kernel")


@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("form", list(FORMS))
def test_looped_var_mean_counts_along_the_reduced_dim(monkeypatch, form, correction):
    _force(monkeypatch, form)
    rows, cols, dim, words = FORMS[form]
    # a mean 300 spreads away: the update's rounding shows in the variance if it is off
    x = 300.0 + torch.randn(rows, cols) * torch.linspace(0.5, 2.0, cols)
    fd = _var_mean(dim, correction, DataType.Float)
    var, mean = fd.execute([x])
    want_var, want_mean = torch.var_mean(x.double(), dim, correction=correction)
    torch.testing.assert_close(mean, want_mean.float(), rtol=1e-6, atol=0)
    torch.testing.assert_close(var, want_var.float(), rtol=2e-5, atol=0)
    code = fd.last_triton_code()
    assert words in code, code
    count_shape = "[BLOCK0, 1]" if dim == 0 else "[1, BLOCK1]"
    # the count declared along the reduced dim, its reciprocal a step, no division an element
    assert re.search(r"acc\w+_n = tl\.full\(" + re.escape(count_shape), code), code
    assert re.search(r"acc\w+_inv = 1\.0 / tl\.maximum\(acc\w+_n, 1\.0\)", code), code
    assert not re.search(r"_delta /", code), code


@pytest.mark.parametrize("form", list(FORMS))
def test_looped_var_mean_of_bf16_matches_aten(monkeypatch, form):
    """bf16 input, fp32 statistics, as a batch or layer normalization computes them."""
    _force(monkeypatch, form)
    rows, cols, dim, _ = FORMS[form]
    x = (torch.randn(rows, cols) * 3 - 1).to(torch.bfloat16)
    var, mean = _var_mean(dim, 0, DataType.BFloat16).execute([x])
    want_var, want_mean = torch.var_mean(x.float(), dim, correction=0)
    torch.testing.assert_close(mean, want_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(var, want_var, rtol=1e-5, atol=1e-6)
