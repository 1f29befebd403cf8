"""Looped reductions that are ready together share one pass over the reduced dim: the values
they read load once (a norm backward's dw and db read dy once, not once a reduction), while a
reduction of another's result still waits for its own pass."""
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition

F32 = DataType.Float


def passes(code: str, var: str) -> int:
    return len(re.findall(rf"for {var}_start in (?:tl\.)?range\(", code))  # (plain or unrolled)


def column_sums_fd():
    # dw = sum over rows of dy * (x - mean) * rstd, db = sum over rows of dy, amax of dy
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        dy = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        mean = fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=F32)
        rstd = fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=F32)
        xhat = fd.ops.mul(fd.ops.sub(x, mean), rstd)
        fd.add_output(fd.ops.sum(fd.ops.mul(dy, xhat), [0]))
        fd.add_output(fd.ops.sum(dy, [0]))
        fd.add_output(fd.ops.max(dy, [0]))
    return fd


def check_column_sums(rows: int, device) -> str:
    fd = column_sums_fd()
    x, dy = torch.randn(rows, 70, device=device), torch.randn(rows, 70, device=device)
    mean, rstd = torch.randn(rows, 1, device=device), torch.rand(rows, 1, device=device) + 0.5
    dw, db, dmax = fd.execute([x, dy, mean, rstd])
    torch.testing.assert_close(dw, (dy * (x - mean) * rstd).sum(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(db, dy.sum(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dmax, dy.amax(0))
    # one kernel, or a split one (partial sums per chunk of rows, then their combine, each a
    # function the split kernel calls): each makes one pass over its rows, and dy is read once
    # for all three sums
    code = fd.last_triton_code()
    kernels = [k for k in code.split("def fuser_")[1:] if "tl.atomic_add" not in k]
    assert all(passes(k, "r") == 1 for k in kernels), kernels
    assert sum(k.count("tl.load(T1_ptr") for k in kernels) == 1
    return code


@pytest.mark.parametrize("rows", [5, 600])  # 600 rows: a split column reduction on the GPU
def test_column_reductions_share_one_pass(rows, device):
    check_column_sums(rows, device)


def test_split_column_reductions_share_one_pass(monkeypatch):
    # the GPU's split form on the interpreter: enough "processors" to split 600 rows
    from fuser.codegen import launch
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 132)
    code = check_column_sums(600, "cpu")
    assert "_partial(" in code and "_combine(" in code


def test_dependent_reductions_keep_their_passes(monkeypatch, device):
    # looped rows: var_mean and a sum of x in one pass; the max of (x - mean) waits for the mean
    monkeypatch.setattr(fuser.schedulers.heuristics, "MAX_PERSISTENT", 32)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        var, mean = fd.ops.var_mean(x, [-1], 0, True)
        total = fd.ops.sum(x, [-1], True)
        spread = fd.ops.max(fd.ops.abs(fd.ops.sub(x, mean)), [-1], True)
        fd.add_output(fd.ops.add(fd.ops.add(var, total), spread))
    x = torch.randn(4, 300, device=device) + 2
    (out,) = fd.execute([x])
    var, mean = torch.var_mean(x, -1, correction=0, keepdim=True)
    expected = var + x.sum(-1, keepdim=True) + (x - mean).abs().amax(-1, keepdim=True)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert passes(fd.last_triton_code(), "c") == 2
