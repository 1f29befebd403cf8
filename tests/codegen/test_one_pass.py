"""The one-pass form of an inner reduction (codegen/kernel.py `one_pass`, timed by the autotuner
beside the persistent kernel where heuristics.reload_forms says, with one or two rows a program): each pass over the row runs
once without a loop, reduces in line, and re-reads its inputs; tile dims the blocks divide
carry no masks. On Triton's interpreter with the tuner's timer preferring that form, against
eager."""
import json

import pytest
import torch

from benchmarks import fuser_defs
from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from fuser.schedulers import heuristics
from tests.helpers import prefer_the_last_form_timed, row_reduction_forwards


@pytest.fixture(params=[1, 2], ids=["one row a program", "two rows a program"])
def one_pass_wins(request, tmp_path, monkeypatch):
    """Rows of 64 columns or more get the one-pass form as a candidate (one row a program from
    128 columns; with the param 2, also two rows a program, timed last), and the tuner's timer
    prefers the last form timed. Returns the tuner's file and the rows a program."""
    monkeypatch.setattr(heuristics, "TILE_ELEMENTS", 128)
    monkeypatch.setattr(heuristics, "RELOAD_MIN_COLS", 64)
    monkeypatch.setattr(heuristics, "RELOAD_TWO_ROWS_MIN_COLS", 64 if request.param == 2 else None)
    return prefer_the_last_form_timed(monkeypatch, tmp_path), request.param


@pytest.mark.parametrize("rows, cols", [(5, 100), (6, 128), (3, 97)])
def test_softmax_layernorm_rmsnorm_forward(one_pass_wins, monkeypatch, rows, cols):
    choices, rows_a_program = one_pass_wins
    launched = []
    real_call = launch.Launch.__call__
    monkeypatch.setattr(launch.Launch, "__call__",
                        lambda self, *a, **k: launched.append(self.steps[0][0].kwargs) or real_call(self, *a, **k))
    for build, args, want in row_reduction_forwards(rows, cols):
        fd = build()
        (out,) = fd.execute(args)
        code = fd.last_triton_code()
        assert "one pass, reloading" in code and "for c_start" not in code
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2)
        assert launched[-1]["BLOCK0"] == rows_a_program and launched[-1]["EVEN0"] == (rows % rows_a_program == 0)
    # the one-pass form won: the second form timed, or the third (two rows a program)
    assert list(json.loads(choices.read_text()).values())[-1] == rows_a_program


def test_row_statistics_and_column_outputs(one_pass_wins):
    """Several reductions, outputs per row, per element and per column from one kernel: the
    statistics are bound once and each pass re-reads x."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        m = fd.ops.max(x, [1], True)
        s = fd.ops.sum(fd.ops.exp(fd.ops.sub(x, m)), [1], True)
        var, mean = fd.ops.var_mean(x, [1], 1, True)
        fd.add_output(fd.ops.div(fd.ops.exp(fd.ops.sub(x, m)), s))
        fd.add_output(fd.ops.mul(fd.ops.sub(x, mean), w))
        fd.add_output(var)
        fd.add_output(fd.ops.mul(w, 2.0))
    x, w = torch.randn(7, 200), torch.randn(200)
    probs, centred, var, w2 = fd.execute([x, w])
    code = fd.last_triton_code()
    assert "one pass, reloading" in code and "for c_start" not in code
    torch.testing.assert_close(probs, torch.softmax(x, -1))
    torch.testing.assert_close(centred, (x - x.mean(1, keepdim=True)) * w, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(var, x.var(1, keepdim=True), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w2, w * 2)


def test_even_blocks_drop_their_masks(one_pass_wins, monkeypatch):
    """The launch tells the kernel which tile dims its blocks divide (no mask needed there)."""
    launched = []
    real_call = launch.Launch.__call__
    monkeypatch.setattr(launch.Launch, "__call__",
                        lambda self, *a, **k: launched.append(self.steps[0][0].kwargs) or real_call(self, *a, **k))
    fd = fuser_defs.rmsnorm_fwd.__wrapped__()
    for cols, even in ((128, True), (100, False)):
        x, w = torch.randn(4, cols, dtype=torch.bfloat16), torch.randn(cols, dtype=torch.bfloat16)
        (y,) = fd.execute([x, w])
        xf = x.float()
        want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + fuser_defs.RMS_EPS) * w.float()
        torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=2e-2)
        assert launched[-1]["EVEN0"] is True and launched[-1]["EVEN1"] is even
    code = fd.last_triton_code()
    assert "EVEN0: tl.constexpr, EVEN1: tl.constexpr" in code
    # the weight, read by every program, is kept in L2; x's first read too, its last one not
    assert 'tl.load(T1_ptr + T1_off1, mask=c_mask, other=0, eviction_policy="evict_last")' in code
    assert code.count('eviction_policy="evict_first"') == 1


def test_candidates(monkeypatch):
    choose = heuristics.choose
    t = heuristics.Template.inner_reduction
    # two rows a program: not by default
    assert heuristics.reload_forms(choose(t, 4096, 32768), 4096, 32768) == [(1, 8), (1, 32)]
    assert heuristics.reload_forms(choose(t, 8192, 16384), 8192, 16384) == [(1, 4), (1, 16), (1, 32)]
    assert heuristics.reload_forms(choose(t, 1, 32768), 1, 32768) == [(1, 8), (1, 32)]
    assert heuristics.reload_forms(choose(t, 16384, 8192), 16384, 8192) == [(1, 8), (1, 16)]
    assert heuristics.reload_warps(choose(t, 16384, 8192), 8192) == [8, 16]
    assert heuristics.reload_warps(choose(t, 16384, 4096), 4096) == [4, 8]
    assert heuristics.reload_warps(choose(t, 4096, 32768), 32768) == [8, 32]
    monkeypatch.setattr(heuristics, "RELOAD_TWO_ROWS_MIN_COLS", 16384)
    assert heuristics.reload_forms(choose(t, 4096, 32768), 4096, 32768) == [(1, 8), (1, 32), (2, 32)]
    assert heuristics.reload_forms(choose(t, 8192, 16384), 8192, 16384) == [(1, 4), (1, 16), (1, 32), (2, 16)]
    assert heuristics.reload_warps(choose(t, 16384, 2048), 2048) == []  # several rows a program


def test_var_mean_of_rows_where_the_sums_cancel(one_pass_wins):
    """In the one-pass form, rows whose mean is far beyond their spread take the deviations
    from x read again (not held across the reduction), one or two rows a program."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(7, 200, generator=g)
    x[1] += 1000.0
    x[2] = 5.0
    x[4] = x[4] * 1e-3 + 0.5
    x[5] *= 1e20  # squares overflow fp32
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        var, mean = fd.ops.var_mean(t, [1], correction=0)
        fd.add_output(var)
        fd.add_output(mean)
    var, mean = fd.execute([x])
    code = fd.last_triton_code()
    assert "one pass, reloading" in code
    start = code.index("if tl.max(tl.where((")  # the cancellation check (not the overflow's)
    branch = code[start:code.index("tl.sum(", start)]
    assert "tl.load(" in branch  # the deviations read x again
    # a branch rarely taken is no pass for the eviction hints: x's one read every call makes
    # is a stream read once, dropped from L2 first (keeping x there would serve only the branch)
    assert 'eviction_policy="evict_last"' not in code
    assert code.count('eviction_policy="evict_first"') == 1
    want_var, want_mean = torch.var_mean(x.double(), 1, correction=0)
    # the mean's error scales with the row's largest element (1e20 in row 5)
    assert ((mean.double() - want_mean).abs() <= 1e-6 * x.double().abs().amax(1)).all()
    torch.testing.assert_close(var, want_var.float(), rtol=2e-5, atol=1e-9)
