"""How captured graphs are cut into fusions and ATen calls: phases around eager ops, views taken
by ATen, recomputation instead of storing, floats as constants, sizes computed at run time."""
import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser.frontend.program import FusionStep

from .jit_helpers import assert_close_to_eager, check_forward_backward


def _programs(jitted):
    return [p for r in jitted._stats.records.values() for p in r.programs]


def _kernel_segments(program):
    return [s for step in program.fusion_steps for s in step.fd.last_segments()
            if s.kind.value == "kernel"]


@pytest.mark.parametrize("b_returned", [True, False])
def test_an_eager_op_cuts_only_what_depends_on_it(b_returned):
    def f(x, y):
        a = torch.logcumsumexp(x.exp(), -1)  # no lowering: runs through ATen
        b = torch.tanh(y) * 2.0              # independent of it
        out = a.sigmoid() + b
        return (out, b) if b_returned else out

    jitted = fuser.jit(f)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    assert_close_to_eager(jitted(x, y), f(x, y))
    (program,) = _programs(jitted)
    kinds = [type(s).__name__ for s in program.steps]
    assert kinds == ["FusionStep", "EagerStep", "FusionStep"], kinds
    first, last = ({n.target for n in program.steps[k].region.nodes} for k in (0, 2))
    assert torch.ops.aten.exp.default in first
    # b made as early as it can be where it is an output; read only after the eager op, it is
    # computed in the fusion that reads it (nothing written between the two)
    assert torch.ops.aten.tanh.default in (first if b_returned else last - first)


def test_views_of_fusion_outputs_are_aten_views():
    @fuser.jit
    def f(x):
        return (x * 2.0).t()

    x = torch.randn(3, 5)
    out = f(x)
    assert_close_to_eager(out, (x * 2.0).t())
    assert out.stride() == (1, 5)  # a transposed view of the kernel's [3, 5] output


def test_shared_pointwise_values_are_recomputed_not_stored():
    """RMSNorm's backward: a column sum (weight gradient) and a row sum (input gradient) need
    dy * w and x * rstd; each reduction gets its own copy rather than one kernel writing them
    for another, and the segmenter joins the copies into one inner-outer kernel that writes
    only the gradients."""
    def rmsnorm(x, w):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x * rstd * w

    jitted = fuser.jit(rmsnorm)
    args = (torch.randn(8, 32, requires_grad=True), torch.randn(32, requires_grad=True))
    check_forward_backward(rmsnorm, jitted, args)
    backward = next(p for p in _programs(jitted) if p.kind == "backward")
    kernels = _kernel_segments(backward)
    assert len(kernels) == 1 and "inner-outer" in kernels[0].why, [k.describe().splitlines()[0] for k in kernels]
    assert len(kernels[0].outputs) == 2  # only gradients: the [8, 32] dx and the [32] dw


def test_python_floats_are_constants():
    @fuser.jit
    def f(x, scale):
        return x * scale + 1e-3

    x = torch.randn(4, 5)
    assert_close_to_eager(f(x, 0.5), x * 0.5 + 1e-3)
    assert_close_to_eager(f(x, 0.25), x * 0.25 + 1e-3)
    for program in _programs(f):
        graph = program.plan.graph.graph
        inputs = [n.meta["val"] for n in graph.nodes if n.op == "placeholder"]
        assert not any(isinstance(v, torch.Tensor) and v.dim() == 0 for v in inputs)


def test_floor_divided_sizes_are_computed_at_run_time():
    def halves(x):
        d = x.shape[-1]
        return x[..., : d // 2] * 2.0 + x[..., d // 2:]

    jitted = fuser.jit(halves, dynamic=True)  # (row lengths symbolic from the first call)
    for d in (6, 10, 14):
        x = torch.randn(3, d, requires_grad=True)
        check_forward_backward(halves, jitted, (x,))
    info = jitted.cache_info()
    assert info.graphs == 1 and info.fallback_ops == 0


def test_zero_dim_constants_become_numbers():
    def f(x, m):
        return torch.where(m, x, torch.tensor(0.0)).sum(-1)

    jitted = fuser.jit(f)
    x, m = torch.randn(4, 7), torch.rand(4, 7) > 0.3
    assert_close_to_eager(jitted(x, m), f(x, m))
    (program,) = _programs(jitted)
    (step,) = [s for s in program.steps if isinstance(s, FusionStep)]
    assert all(s.kind.value == "kernel" for s in step.fd.last_segments())


def test_cross_entropy_gradient_stays_in_kernels():
    def ce(logits, target):
        return F.cross_entropy(logits, target)

    jitted = fuser.jit(ce)
    check_forward_backward(ce, jitted, (torch.randn(6, 11, requires_grad=True), torch.randint(0, 11, (6,))))
    assert jitted.cache_info().fallback_ops == 0  # gather and scatter lowered as one-hots


def test_a_program_output_reader_builds_the_graph_outputs():
    """A graph program's outputs (lists and tuples of slots, numbers and None) come from one
    generated expression; other values fall back to the template walk."""
    from fuser.frontend.program import _Slot, _output_reader

    env = ["a", "b", "c"]
    read = _output_reader((_Slot(2), [_Slot(0), None, 3, True], (_Slot(1),)))
    assert read(env) == ("c", ["a", None, 3, True], ("b",))
    assert read.__code__.co_filename == "<fuser program output>"
    fallback = _output_reader([_Slot(1), 0.5, {"k": _Slot(0)}])
    assert fallback(env) == ["b", 0.5, {"k": "a"}]
    deep = _Slot(0)
    for _ in range(300):  # past the parser's nesting limit: the walk too
        deep = (deep,)
    value = _output_reader(deep)(env)
    for _ in range(300):
        (value,) = value
    assert value == "a"


def test_a_reduction_read_after_an_eager_op_stays_with_its_input():
    # (moved after the eager op, its full-size input would be written out instead of its sums)
    def f(x):
        h = x.exp()
        s = h.sum(-1, keepdim=True)
        return torch.logcumsumexp(h * 2, -1) + s

    jitted = fuser.jit(f)
    x = torch.randn(4, 16)
    assert_close_to_eager(jitted(x), f(x))
    (program,) = _programs(jitted)
    assert torch.ops.aten.sum.dim_IntList in {n.target for n in program.steps[0].region.nodes}
