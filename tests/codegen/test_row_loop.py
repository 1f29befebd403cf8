"""Inner reductions as a persistent kernel looping over row blocks (codegen/inner_outer.py
RowLoopWriter, used where heuristics.ROW_LOOP_MIN_COLS says): a few programs each take several
row blocks, on Triton's interpreter, against eager."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics
from tests.helpers import row_reduction_forwards


@pytest.fixture
def row_loop(monkeypatch):
    monkeypatch.setattr(heuristics, "ROW_LOOP_MIN_COLS", 1)


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("rows, cols", [(7, 100), (300, 64), (130, 512)])
def test_softmax_layernorm_rmsnorm_forward(row_loop, monkeypatch, stages, rows, cols):
    monkeypatch.setattr(heuristics, "ROW_LOOP_STAGES", stages)
    for build, args, want in row_reduction_forwards(rows, cols):
        fd = build()
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
