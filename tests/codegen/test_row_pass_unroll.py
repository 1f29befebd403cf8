"""A looped row reduction's accumulating passes unroll their loop over a row's chunks
(heuristics.ROW_PASS_UNROLL, Triton's loop_unroll_factor) so that several chunks' loads are in
flight at once; the pass that stores the outputs, column reductions' loops over rows and split
reductions keep plain loops. Results match eager where the chunks are no multiple of the factor."""
import re

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics
from tests.helpers import sm90_ptx

UNROLLED = re.compile(r"for c_start in tl\.range\(0, (C|LOOP_EXTENT), BLOCK1, loop_unroll_factor=(\d+)\):")


@pytest.fixture
def looped(monkeypatch):
    # rows longer than 64 loop over chunks of 16 columns
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 64)
    monkeypatch.setattr(heuristics, "LOOPED_BLOCK", 16)


def _layernorm_fd(dtype=DataType.BFloat16) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=dtype)
        w = fd.define_tensor([-1], contiguity=True, dtype=dtype)
        xf = fd.ops.cast(x, DataType.Float)
        var, mean = fd.ops.var_mean(xf, [1], correction=0)
        shape = x.shape()
        y = fd.ops.mul(fd.ops.sub(xf, fd.ops.broadcast_in_dim(mean, shape, [0])),
                       fd.ops.broadcast_in_dim(fd.ops.rsqrt(fd.ops.add(var, 1e-5)), shape, [0]))
        fd.add_output(fd.ops.cast(fd.ops.mul(y, fd.ops.broadcast_in_dim(fd.ops.cast(w, DataType.Float), shape, [1])),
                                  dtype))
    return fd


# 7 chunks; 4 and a half chunk. (Row lengths of a multiple of 16: others take codegen/kernel.py's
# aligned loops, tests/codegen/test_aligned_rows.py.)
@pytest.mark.parametrize("cols,block", [(16 * 7, 16), (16 * 9, 32)])
def test_the_statistics_pass_unrolls_and_the_output_pass_does_not(looped, monkeypatch, cols, block):
    monkeypatch.setattr(heuristics, "LOOPED_BLOCK", block)
    fd = _layernorm_fd()
    gen = torch.Generator().manual_seed(cols)
    x = (torch.randn(5, cols, generator=gen) * 3 + 40).bfloat16()
    w = torch.randn(cols, generator=gen).bfloat16()
    (y,) = fd.execute([x, w])
    want = F.layer_norm(x.float(), (cols,), w.float(), None, 1e-5).bfloat16()
    torch.testing.assert_close(y, want, rtol=2e-2, atol=2e-2)
    code = fd.last_triton_code()
    loops = re.findall(r"^\s*for c_start in .*$", code, re.M)
    assert len(loops) == 2, code
    assert UNROLLED.search(loops[0]) and UNROLLED.search(loops[0])[2] == str(heuristics.ROW_PASS_UNROLL), loops
    assert "tl.range" not in loops[1] and "range(0, " in loops[1], loops  # the output pass


def test_an_online_softmax_pass_unrolls(looped):
    """The max and the sum of exponentials in one pass (codegen/online_softmax.py), then the outputs."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        e = fd.ops.exp(fd.ops.sub(xf, fd.ops.max(xf, [1], True)))
        fd.add_output(fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, [1], True)), DataType.BFloat16))
    # (160 columns: rows start 16-byte aligned; unaligned rows take codegen/kernel.py's aligned
    # loops, whose inner loop unrolls the same way: tests/codegen/test_aligned_rows.py)
    a = (torch.randn(3, 160, generator=torch.Generator().manual_seed(1)) * 4).bfloat16()
    (y,) = fd.execute([a])
    torch.testing.assert_close(y, torch.softmax(a.float(), -1).bfloat16(), rtol=2e-2, atol=2e-2)
    code = fd.last_triton_code()
    loops = re.findall(r"^\s*for c_start in .*$", code, re.M)
    assert "_max_nan(" in code and len(loops) == 2, code  # (the online form: one pass for both)
    assert UNROLLED.search(loops[0]) and "tl.range" not in loops[1], loops


def test_fuser_jit_softmax_matches_eager(looped):
    fn = fuser.jit(lambda x: torch.softmax(x.float(), -1).to(x.dtype))
    x = torch.randn(3, 160, generator=torch.Generator().manual_seed(1)).bfloat16()  # (aligned rows)
    torch.testing.assert_close(fn(x), torch.softmax(x.float(), -1).bfloat16(), rtol=2e-2, atol=2e-2)


def test_a_column_reduction_keeps_its_plain_loop():
    """A column sum loops over rows (unrolling those lost on the H200: twenty-seventh session)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(x, [0]))
    a = torch.randn(300, 40, generator=torch.Generator().manual_seed(4))
    (s,) = fd.execute([a])
    torch.testing.assert_close(s, a.sum(0), rtol=1e-5, atol=1e-4)
    code = fd.last_triton_code()
    assert "loop_unroll_factor" not in code and "for r_start in range(" in code, code


def test_one_unroll_writes_the_plain_loop(looped, monkeypatch):
    monkeypatch.setattr(heuristics, "ROW_PASS_UNROLL", 1)
    fd = _layernorm_fd()
    fd.execute([torch.randn(2, 112).bfloat16(), torch.randn(112).bfloat16()])  # (see above)
    assert "loop_unroll_factor" not in fd.last_triton_code()


def _sm90_loads(monkeypatch, tmp_path, unroll: int) -> int:
    monkeypatch.setattr(heuristics, "ROW_PASS_UNROLL", unroll)
    fd = _layernorm_fd()
    fd.execute([torch.randn(2, 112).bfloat16(), torch.randn(112).bfloat16()])  # (see above)
    source = fd.last_triton_code()
    params = [p.split(":")[0].strip() for p in re.search(r"^def fuser_\w+\((.*?)\):", source, re.M)[1].split(",")]
    constexprs = {k: v for k, v in {"BLOCK0": 1, "BLOCK1": 1024, "INT64": False, "EVEN0": True, "EVEN1": True}.items()
                  if k in params}
    # (unit column strides, as Triton specializes them: 16-byte vector loads)
    constexprs.update({p: 1 for p in params if p.endswith("_stride1")})
    pointers = {p: "*bf16" for p in params if p.endswith("_ptr")}
    ptx = sm90_ptx(source, constexprs, pointers, tmp_path, num_warps=4,
                   divisible=tuple(p for p in params if p.endswith("_stride0")) + ("X1",))
    return len(re.findall(r"\bld\.global\.", ptx))


def test_the_unrolled_pass_compiles_to_more_loads_in_flight(looped, monkeypatch, tmp_path):
    """Compiled for an H100/H200 (no GPU needed): the unrolled statistics pass issues a load a
    chunk of the unrolled steps, where the plain loop issues one."""
    factor = heuristics.ROW_PASS_UNROLL  # (read before the first compile sets it to 1)
    assert factor > 1
    plain = _sm90_loads(monkeypatch, tmp_path, 1)
    unrolled = _sm90_loads(monkeypatch, tmp_path, factor)
    assert unrolled >= plain + factor - 1, (plain, unrolled)
