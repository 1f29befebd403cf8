"""var_mean of fp64 keeps fp64 in every Welford form (codegen/reductions.py `_accumulate`,
`finish_var_mean`; kernel.py `workspace_dtype`): the accumulators, the count and its
reciprocal, the split's partials and the combine's weights. With fp32 ones the interpreter gave
fp32-grade results (relative error 1e-8) and the GPU's compiler refused the kernel (a
loop-carried fp32 accumulator re-assigned fp64). fp32 and bf16 inputs keep fp32 accumulators."""
import re

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from fuser.schedulers import heuristics
from tests.helpers import TORCH_TO_DT, dtype_name, prefer_the_last_form_timed, sm90_ptx

FORMS = {  # form -> (rows, columns, reduced dim, plan words)
    "persistent rows": (5, 17, 1, "persistent"),
    "looped rows": (7, 301, 1, "looped_aligned"),  # (rows of 301 start anywhere: aligned loops)
    "looped rows, a masked last chunk": (7, 304, 1, "looped"),  # (64-column chunks: 4 and 48 columns)
    "looped columns": (301, 7, 0, "looped"),
    "outer, few rows": (5, 17, 0, "looped"),
    "split in one kernel": (3001, 9, 0, "split in one kernel"),
    "split in two kernels": (3001, 9, 0, "split (partial)"),
    "few long rows split": (3, 1000, 1, "split in one kernel"),
    "few long rows split in two kernels": (3, 1000, 1, "split (partial)"),
    "persistent over rows": (70, 33, 1, "persistent over rows"),
    "one pass": (5, 100, 1, "one pass, reloading"),
}


def _force(monkeypatch, tmp_path, form: str) -> None:
    if form.startswith("looped rows"):  # 16-column chunks: many steps a row
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 64)
        monkeypatch.setattr(heuristics, "LOOPED_BLOCK", 64 if "masked" in form else 16)
    if form.startswith("split"):
        monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
        monkeypatch.setattr(launch, "SPLIT_IN_ONE_KERNEL", form == "split in one kernel")
    if form.startswith("few long rows split"):  # (as the small_splits fixture)
        monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 4)
        monkeypatch.setattr(launch, "SPLIT_IN_ONE_KERNEL", form == "few long rows split")
        monkeypatch.setattr(heuristics, "INNER_SPLIT_MIN_COLS", 64)
        monkeypatch.setattr(heuristics, "INNER_SPLIT_BLOCK", 16)
        monkeypatch.setattr(heuristics, "INNER_SPLIT_MIN_CHUNK", 32)
    if form == "persistent over rows":
        monkeypatch.setattr(heuristics, "ROW_LOOP_MIN_COLS", 1)
    if form == "one pass":  # a candidate from 64 columns, and the tuner's timer prefers it
        monkeypatch.setattr(heuristics, "TILE_ELEMENTS", 128)
        monkeypatch.setattr(heuristics, "RELOAD_MIN_COLS", 64)
        prefer_the_last_form_timed(monkeypatch, tmp_path)


def _var_mean(dim: int, dtype: torch.dtype) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=TORCH_TO_DT[dtype])
        var, mean = fd.ops.var_mean(x, [dim], 1)
        fd.add_output(var)
        fd.add_output(mean)
    return fd


def _data(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    # a mean 3 spreads away, the spread varying along columns: each row and column its own
    return (3.0 + torch.randn(rows, cols, dtype=torch.float64) * torch.linspace(0.5, 2.0, cols,
                                                                               dtype=torch.float64)).to(dtype)


def _accumulator_types(code: str) -> set[str]:
    return set(re.findall(r"acc\w+_(?:mean|m2|n) = tl\.full\(\[[^]]*\], 0\.0, (tl\.\w+)\)", code))


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=dtype_name)
def test_var_mean_accumulates_in_the_compute_type(monkeypatch, tmp_path, form, dtype):
    """fp64 accumulators for fp64 (results within 1e-12 of eager's), fp32 for fp32 and bf16
    (whose statistics eager computes in fp32 too; within their rounding)."""
    _force(monkeypatch, tmp_path, form)
    rows, cols, dim, words = FORMS[form]
    x = _data(rows, cols, dtype)
    fd = _var_mean(dim, dtype)
    var, mean = fd.execute([x])
    want_var, want_mean = (w.to(dtype) for w in torch.var_mean(x.double(), dim, correction=1))
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(mean, want_mean, rtol=tol, atol=0)
    torch.testing.assert_close(var, want_var, rtol=tol, atol=0)
    code = fd.last_triton_code()
    assert words in code, code
    if words not in ("persistent", "persistent over rows", "one pass, reloading"):  # (no accumulators: in line)
        assert _accumulator_types(code) == {"tl.float64" if dtype is torch.float64 else "tl.float32"}, code


@pytest.mark.parametrize("form", ["looped rows", "looped rows, a masked last chunk", "looped columns",
                                  "split in two kernels", "few long rows split in two kernels"])
def test_fp64_looped_var_mean_compiles_for_sm90(monkeypatch, tmp_path, form):
    """Each loop-carried value keeps its fp64 type: the kernels compile for an H100/H200 (no
    GPU needed), masks and all (EVEN off). (The split in one kernel runs the split in two
    kernels' steps as functions: those compiled here.)"""
    _force(monkeypatch, tmp_path, form)
    rows, cols, dim, _ = FORMS[form]
    fd = _var_mean(dim, torch.float64)
    fd.execute([_data(rows, cols, torch.float64)])
    kernels = re.split(r"(?=^# Generated by fuser)", fd.last_triton_code(), flags=re.M)[1:]
    assert len(kernels) == (2 if "two kernels" in form else 1)
    for source in kernels:
        params = [p.split(":")[0].strip() for p in re.search(r"^def fuser_\w+\((.*?)\):", source, re.M)[1].split(",")]
        constexprs = {k: v for k, v in {"BLOCK0": 16, "BLOCK1": 64, "INT64": False, "EVEN0": False,
                                        "EVEN1": False, "ALIGN": 2}.items() if k in params}
        if dim == 1:  # (one row a program, as the launch takes a looped or split row)
            constexprs["BLOCK0"] = 1
        pointers = {p: "*fp64" for p in params if p.endswith("_ptr")}
        assert ".entry" in sm90_ptx(source, constexprs, pointers, tmp_path, num_warps=4)


def test_welford_of_fp64_columns_split(monkeypatch, tmp_path):
    """nvFuser's welford (avg, var_sum, n) of fp64 columns, split in two kernels."""
    _force(monkeypatch, tmp_path, "split in two kernels")
    x = _data(3001, 9, torch.float64)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Double)
        avg, var_sum, n = fd.ops.welford(t, [0])
        for o in (avg, var_sum, n):
            fd.add_output(o)
    avg, var_sum, n = fd.execute([x])
    want_var, want_mean = torch.var_mean(x, 0, correction=0)
    torch.testing.assert_close(avg, want_mean, rtol=1e-12, atol=0)
    torch.testing.assert_close(var_sum, want_var * 3001, rtol=1e-12, atol=0)
    assert (n == 3001).all()
