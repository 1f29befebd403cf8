"""The inner-outer kernel with its row loop pipelined (INNER_OUTER_STAGES > 1) computes what the
plain loop computes: RMSNorm backward (dx and dw) against eager."""
import pytest
import torch

from benchmarks import fuser_defs
from fuser.schedulers import heuristics


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_pipelined_row_loop_matches_eager(stages, monkeypatch):
    monkeypatch.setattr(heuristics, "INNER_OUTER_STAGES", stages)
    fd = fuser_defs.rmsnorm_bwd.__wrapped__()
    x, dy = (torch.randn(37, 100, dtype=torch.bfloat16) for _ in range(2))
    w = torch.randn(100, dtype=torch.bfloat16)
    dx, dw = fd.execute([x, w, dy])
    assert ("tl.range(" in fd.last_triton_code()) == (stages > 1)
    xe, we = x.float().requires_grad_(), w.float().requires_grad_()
    y = xe * torch.rsqrt(xe.pow(2).mean(-1, keepdim=True) + 1e-6) * we
    gx, gw = torch.autograd.grad(y, [xe, we], dy.float())
    torch.testing.assert_close(dx.float(), gx, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dw.float(), gw, rtol=2e-2, atol=5e-2)


def test_stages_shrink_to_fit_shared_memory():
    """Each stage buffers one row block of every tile input: bf16 x and dy at 4096 columns take
    the full INNER_OUTER_STAGES; fp32 inputs at 16384 columns (32 warps, one program a
    multiprocessor, 192 KiB a stage for three inputs) get one stage."""
    params = heuristics.choose(heuristics.Template.inner_outer, 16384, 4096)
    assert heuristics.inner_outer_stages(params, 2 + 2) == heuristics.INNER_OUTER_STAGES
    wide = heuristics.choose(heuristics.Template.inner_outer, 16384, 16384)
    assert heuristics.inner_outer_stages(wide, 4 + 4 + 4) == 1
    assert heuristics.inner_outer_stages(wide, 2 + 2) * 16384 * 4 <= heuristics.SHARED_MEMORY_BUDGET


def test_generated_loop_uses_the_stages_that_fit():
    fd = fuser_defs.rmsnorm_bwd.__wrapped__()
    x, dy = (torch.randn(9, 100, dtype=torch.bfloat16) for _ in range(2))
    fd.execute([x, torch.randn(100, dtype=torch.bfloat16), dy])
    assert f"num_stages={heuristics.INNER_OUTER_STAGES})" in fd.last_triton_code()
