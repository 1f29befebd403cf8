"""Outputs that vary along the reduced dim and wait for no reduction are stored in the
reduction's pass (codegen/reductions.py `outputs_ready_in_pass`): an activation's gradient next
to its bias gradient reads x and dy once, and a split column reduction stores each chunk's rows
of it from the chunk's program."""
import re

import pytest
import torch

from benchmarks import fuser_defs
from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from fuser.schedulers import heuristics


def _reference(x, dy):
    xf = x.float().requires_grad_()
    (grad,) = torch.autograd.grad(torch.nn.functional.gelu(xf, approximate="tanh"), xf, dy.float())
    return grad.bfloat16(), grad.sum(0)


def _passes(code: str) -> int:
    """Loops over the rows of the kernel's input (a split's combine loops over workspace rows)."""
    return len(re.findall(r"for r_start in range\((0|r_lo), (R|r_hi|LOOP_EXTENT)", code))


@pytest.mark.parametrize("processors", [0, 8])  # 0: one program a column block; 8: split over rows
def test_activation_grad_is_stored_in_the_bias_grad_pass(monkeypatch, processors):
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", processors)
    fd = fuser_defs.gelu_dx_bias_grad.__wrapped__()
    gen = torch.Generator().manual_seed(processors)
    x = torch.randn(1100, 96, generator=gen).bfloat16()
    dy = torch.randn(1100, 96, generator=gen).bfloat16()
    dz, db = fd.execute([x, dy])
    want_dz, want_db = _reference(x, dy)
    torch.testing.assert_close(dz, want_dz, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(db, want_db, rtol=1e-3, atol=1e-2)
    code = fd.last_triton_code()
    assert len(fd.last_segments()) == 1
    assert _passes(code) == 1, code  # x and dy read once
    assert ("split" in code) == (processors > 0)
    # the storing kernel's tile: 8 rows a step (the plain column sum keeps more; heuristics.py)
    (runtime,) = fd._cache.runtimes()
    (launcher,) = runtime.launchers.values()
    (made,) = launcher.launches.values()
    assert [step.kwargs["BLOCK0"] for step, _, _ in made.steps] == [heuristics.OUTER_STORING_ROWS]


def test_an_output_fed_by_the_reduction_still_takes_a_pass_of_its_own(monkeypatch):
    """y = z - mean of z over rows needs the whole column sum first: as one kernel (no
    processors to fill; with them it runs as two, test_statistics_form.py) a second pass, and
    no split; z = 2x, which the sum reads, is stored in the first pass."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 0)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        z = fd.ops.mul(x, 2.0)
        mean = fd.ops.broadcast_in_dim(fd.ops.div(fd.ops.sum(z, [0]), x.shape()[0]), [x.shape()[0], x.shape()[1]], [1])
        fd.add_output(fd.ops.sub(z, mean))
        fd.add_output(z)
    a = torch.randn(300, 40, generator=torch.Generator().manual_seed(3))
    y, z = fd.execute([a])
    torch.testing.assert_close(y, 2 * a - (2 * a).mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(z, a * 2)
    assert len(fd.last_segments()) == 1
    code = fd.last_triton_code()
    assert "split" not in code and _passes(code) == 2
    first_pass = code.split("for r_start")[1]
    assert first_pass.count("tl.store(") == 1 and "* 2.0" in first_pass
    # unsplit, it keeps the plain column tile (the storing tile was measured split)
    (runtime,) = fd._cache.runtimes()
    (launcher,) = runtime.launchers.values()
    (made,) = launcher.launches.values()
    assert [step.kwargs["BLOCK0"] for step, _, _ in made.steps] != [heuristics.OUTER_STORING_ROWS]


def test_a_row_reduction_with_an_output_beside_it_reads_its_rows_once():
    """A looped row reduction (rows longer than a program keeps) stores an output that needs
    no reduction in its one pass."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.exp(x)
        fd.add_output(y)
        fd.add_output(fd.ops.sum(y, [1]))
    a = torch.randn(4, 70000, generator=torch.Generator().manual_seed(4))
    y, s = fd.execute([a])
    torch.testing.assert_close(y, a.exp())
    torch.testing.assert_close(s, a.exp().sum(1), rtol=1e-5, atol=1e-3)
    code = fd.last_triton_code()
    assert len(re.findall(r"for c_start in (?:tl\.)?range\(", code)) == 1, code


def test_jit_activation_and_bias_gradient_fuse_in_one_pass():
    """fuser.jit on the backward of a linear layer's bias and GELU, as AOTAutograd writes it:
    the activation's gradient and the bias's gradient come from one kernel reading x and dy
    once; a Linear + GELU module's gradients match eager."""
    import fuser

    def grads(x, dy):
        dz = torch.ops.aten.gelu_backward(dy, x, approximate="tanh")
        return dz, dz.sum(0)

    gen = torch.Generator().manual_seed(7)
    x, dy = torch.randn(300, 72, generator=gen), torch.randn(300, 72, generator=gen)
    report = fuser.explain(grads, x, dy)
    (fusion,) = report.fusions
    (code,) = fusion.triton
    assert _passes(code) == 1, code
    got = fuser.jit(grads)(x, dy)
    want = grads(x, dy)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)

    layer = torch.nn.Sequential(torch.nn.Linear(48, 72), torch.nn.GELU(approximate="tanh"))
    jitted = fuser.jit(layer)
    inp = torch.randn(200, 48, generator=gen, requires_grad=True)
    g = torch.randn(200, 72, generator=gen)
    got = torch.autograd.grad(jitted(inp), [inp, *layer.parameters()], g)
    want = torch.autograd.grad(layer(inp), [inp, *layer.parameters()], g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_siblings_sharing_rows_join_a_column_sum_that_stores_them(monkeypatch):
    """A pointwise output and a column sum that only share their input run as one kernel that
    reads it once (the output stored in the sum's pass), split over rows."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, 2.0))
        fd.add_output(fd.ops.sum(fd.ops.exp(x), [0]))
    a = torch.randn(700, 40, generator=torch.Generator().manual_seed(5))
    y, s = fd.execute([a])
    torch.testing.assert_close(y, a * 2)
    torch.testing.assert_close(s, a.exp().sum(0), rtol=1e-5, atol=1e-4)
    (segment,) = fd.last_segments()
    code = fd.last_triton_code()
    assert "split" in code and _passes(code) == 1, code
