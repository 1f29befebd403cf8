"""Persistent inner reductions over short rows (a row block of 1024 or 2048 columns): 32
elements a thread (heuristics.SHORT_ROW_ELEMENTS_PER_THREAD), 16-byte loads and stores kept."""
import re

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser.schedulers import heuristics
from fuser.schedulers.heuristics import Template

from tests.codegen.test_aligned_rows import softmax_fd
from tests.helpers import sm90_ptx


@pytest.mark.parametrize("rows,cols,per_thread", [
    (16384, 768, 32), (16384, 1600, 32), (32768, 2048, 32), (16384, 64, 16), (16384, 513, 32), (1, 768, 32), (3, 100, 16),
    (16384, 4096, 16), (16384, 8192, 16)])
def test_elements_a_thread_by_row_length(rows, cols, per_thread):
    p = heuristics.choose(Template.inner_reduction, rows, cols)
    assert p.persistent and p.block0 * p.block1 // (32 * p.num_warps) == per_thread, p


@pytest.mark.parametrize("shape", [(37, 768), (9, 1600), (5, 2000)])
def test_short_row_norms_and_softmax_match_eager(shape, device):
    x = torch.randn(shape, device=device).to(torch.bfloat16)
    w = torch.randn(shape[1], device=device).to(torch.bfloat16)
    b = torch.randn(shape[1], device=device).to(torch.bfloat16)

    def norms(x, w, b):
        ln = F.layer_norm(x.float(), (x.shape[1],), w.float(), b.float()).to(x.dtype)
        rms = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
        return ln, rms, torch.softmax(x.float(), -1).to(x.dtype)
    for got, want in zip(fuser.jit(norms)(x, w, b), norms(x, w, b)):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_short_rows_keep_16_byte_vectors_on_sm90(tmp_path):
    """A bf16 softmax over rows of 768 (2 rows a program on 2 warps, the last quarter of the
    1024-column block masked) loads and stores whole 16-byte vectors when compiled for sm_90."""
    fd = softmax_fd(torch.bfloat16)
    x = torch.randn(8, 768).to(torch.bfloat16)
    y, _ = fd.execute([x])
    torch.testing.assert_close(y, torch.softmax(x.float(), -1).to(torch.bfloat16), rtol=2e-2, atol=1e-4)
    code = fd.last_triton_code()
    p = heuristics.choose(Template.inner_reduction, 16384, 768)
    constexprs = {"BLOCK0": p.block0, "BLOCK1": p.block1, "INT64": False, "EVEN0": True, "EVEN1": False,
                  "T0_stride1": 1, "T9_stride1": 1}
    ptx = sm90_ptx(code, constexprs, {"T0_ptr": "*bf16", "T9_ptr": "*bf16", "T10_ptr": "*fp32"}, tmp_path,
                   num_warps=p.num_warps, divisible=("X1", "T0_stride0", "T9_stride0"))
    loads, stores = (len(re.findall(rf"{op}\.global[\w.:]*\.v4\.b32", ptx)) for op in ("ld", "st"))
    assert loads > 0 and stores > 0, (loads, stores)


@pytest.mark.parametrize("cols,tile", [(768, 2048), (1024, 2048), (64, 4096), (512, 4096), (1600, 4096), (2048, 4096), (4096, 4096)])
def test_tile_by_row_length(cols, tile):
    p = heuristics.choose(Template.inner_reduction, 16384, cols)
    assert p.block0 * p.block1 == tile and p.grid == 16384 // p.block0, p
