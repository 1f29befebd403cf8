"""Inner reductions as a persistent kernel looping over row blocks (codegen/inner_outer.py
RowLoopWriter, used where heuristics.ROW_LOOP_MIN_COLS says): a few programs each take several
row blocks, on Triton's interpreter, against eager."""
import pytest
import torch
import torch.nn.functional as F

from benchmarks import fuser_defs
from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics


@pytest.fixture
def row_loop(monkeypatch):
    monkeypatch.setattr(heuristics, "ROW_LOOP_MIN_COLS", 1)


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("rows, cols", [(7, 100), (300, 64), (130, 512)])
def test_softmax_layernorm_rmsnorm_forward(row_loop, monkeypatch, stages, rows, cols):
    monkeypatch.setattr(heuristics, "ROW_LOOP_STAGES", stages)
    x = torch.randn(rows, cols, dtype=torch.bfloat16)
    w, b = (torch.randn(cols, dtype=torch.bfloat16) for _ in range(2))
    xf = x.float()
    cases = [
        (fuser_defs.softmax_fwd, [x], torch.softmax(xf, -1)),
        (fuser_defs.layernorm_fwd, [x, w, b], F.layer_norm(xf, (cols,), w.float(), b.float(), eps=fuser_defs.LN_EPS)),
        (fuser_defs.rmsnorm_fwd, [x, w], xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + fuser_defs.RMS_EPS) * w.float()),
    ]
    for build, args, want in cases:
        fd = build.__wrapped__()
        (out,) = fd.execute(args)
        code = fd.last_triton_code()
        assert "persistent over rows" in code and ("tl.range(" in code) == (stages > 1)
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2)


def test_outputs_along_columns_only_and_row_statistics(row_loop):
    """An output that does not vary along rows is stored once; row statistics per row."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        m = fd.ops.max(x, [1], True)
        fd.add_output(fd.ops.sub(x, m))
        fd.add_output(m)
        fd.add_output(fd.ops.mul(w, 2.0))
    x, w = torch.randn(230, 33), torch.randn(33)  # 4 row blocks of 64 over 3 programs
    shifted, m, w2 = fd.execute([x, w])
    assert "persistent over rows" in fd.last_triton_code()
    torch.testing.assert_close(m, x.amax(1, keepdim=True))
    torch.testing.assert_close(shifted, x - x.amax(1, keepdim=True))
    torch.testing.assert_close(w2, w * 2)


def test_row_loop_stages_fit_shared_memory():
    params = heuristics.choose(heuristics.Template.inner_reduction, 4096, 32768)
    assert params.persistent and params.block1 == 32768
    # one program a multiprocessor: a 64 KiB bf16 row a stage
    assert heuristics.loop_stages(params, 2, 1, 3) == 3
    assert heuristics.loop_stages(params, 2 + 2, 1, 3) == 1  # two bf16 inputs: 128 KiB a stage
