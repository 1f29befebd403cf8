"""`fuser.explain`'s definition of a fusion is the definition as it runs: the ops the lowering
dropped because no output reads them (log_softmax's result when only the loss is kept, the
zeros of a where's scalar side) are commented out as not run. The report listed them as ops
of the definition, while the fusion's IR beside it had none of them."""
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.frontend.explain import DEAD_MARK
from fuser.ir.fusion import live_exprs
from tests.helpers import backend_env


def _rebuild(definition: str) -> FusionDefinition:
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(definition, namespace)  # noqa: S102 - the reported definition is the thing under test
    fd = FusionDefinition()
    with fd:
        namespace["nvfuser_fusion"](fd)
    return fd


def _random_inputs(fd: FusionDefinition, seed: int) -> list[torch.Tensor]:
    """Fresh values for the definition's inputs: every symbolic size 4; integers are class
    indices below the cross entropy's 8 classes."""
    gen = torch.Generator().manual_seed(seed)
    inputs = []
    for tv in fd.fusion.inputs():
        shape = [int(d.extent) if d.extent.is_Integer else 4 for d in tv.domain.no_reductions()]
        if tv.dtype is DataType.Int:
            inputs.append(torch.randint(0, 8, shape, generator=gen))
        else:
            inputs.append(torch.randn(shape, generator=gen, dtype=tv.dtype.to_torch()) + 2.0)
    return inputs


def test_explain_marks_the_ops_the_lowering_dropped():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, generator=gen, requires_grad=True)
    t = torch.randint(0, 8, (4,), generator=gen)
    report = fuser.explain(lambda a, b: F.cross_entropy(a, b), x, t)
    assert len(report.fusions) == 2  # forward and backward
    for k, fusion in enumerate(report.fusions):
        shown = _rebuild(fusion.definition)
        marked = [line.strip() for line in fusion.definition.splitlines() if DEAD_MARK in line]
        assert marked, fusion.definition  # (each of the two leaves ops behind: see the module doc)
        # what the report shows computes exactly the ops that run: the full record less its
        # dead ops, no more (the unmarked definition held the dead ones too)
        recorded = _rebuild(fusion.definition.replace(DEAD_MARK, ""))
        ran = live_exprs(recorded.fusion.exprs, recorded.fusion.outputs())
        assert len(ran) < len(recorded.fusion.exprs)
        assert [e.op_name for e in shown.fusion.exprs] == [e.op_name for e in ran]
        # and the same values
        inputs = _random_inputs(shown, seed=k + 1)
        with backend_env("aten"):
            for got, want in zip(shown.execute(inputs), recorded.execute(inputs), strict=True):
                torch.testing.assert_close(got, want, equal_nan=True)
    # the function itself still matches eager
    torch.testing.assert_close(fuser.jit(lambda a, b: F.cross_entropy(a, b))(x, t), F.cross_entropy(x, t))


def test_a_definition_without_dead_ops_is_reported_as_recorded():
    report = fuser.explain(lambda a: torch.softmax(a * 2.0, -1), torch.randn(4, 8))
    fusion, = report.fusions
    assert DEAD_MARK not in fusion.definition
    assert "fd.ops.exp" in fusion.definition and "fd.add_output" in fusion.definition


def test_the_notebook_view_shows_the_marked_definition():
    x = torch.randn(4, 8, requires_grad=True)
    report = fuser.explain(lambda a, b: F.cross_entropy(a, b), x, torch.randint(0, 8, (4,)))
    assert DEAD_MARK.strip() in report._repr_html_()
