"""A fusion input that does not fit its definition at run time, inside a jitted function: the
error keeps its type and its message, which names the fusion's own inputs (`input 0 (T0)`),
and adds what those are in the user's terms: the traced graph's ATen ops the fusion computes,
and the node or argument each input it names comes from (frontend/program.py)."""
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import fuser
from fuser import DataType, FusionDefinition
from fuser.frontend.partition import plan_graph
from fuser.frontend.program import GraphProgram
from tests.helpers import make


def _positives_then_add(x, y):
    return (x[x > 0] * 2) + y


def _with_signs(signs):
    """Random magnitudes (never zero) with the given signs: a known count of positives."""
    return make((len(signs),), positive=True) * torch.tensor(signs, dtype=torch.float32)


@pytest.mark.parametrize("dynamic, error, message, named", [
    ("rows", fuser.FusionInputError, "input 0 (T0) axis 0: size 4, but the definition declares 3",
     ["input 0 is aten.index.Tensor's result (node index)"]),
    (True, fuser.ExtentConflictError,
     "extent i0 has two values in one execution: 4 from input 0 (T0) axis 0 and 3 from input 1 (T1) axis 0",
     ["input 0 is aten.index.Tensor's result (node index)", "input 1 is the argument y (graph input arg"]),
], ids=["rows", "dynamic"])
def test_a_data_dependent_size_that_disagrees_names_the_graph_s_ops_and_inputs(dynamic, error, message, named):
    torch._dynamo.reset()
    jitted = fuser.jit(_positives_then_add, dynamic=dynamic)
    x, y = _with_signs([1, -1, 1, -1, 1]), make((3,))
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(jitted(x, y), _positives_then_add(x, y))
        x = _with_signs([1, -1, 1, 1, 1])  # four positives, three of y: eager raises
        with pytest.raises(RuntimeError, match=r"size of tensor a \(4\) must match the size of tensor b \(3\)"):
            _positives_then_add(x, y)
        with pytest.raises(error) as raised:
            jitted(x, y)
    first, *context = str(raised.value).splitlines()
    assert first == message  # (the binding's own message, first)
    assert len(context) == 1 + len(named), str(raised.value)
    assert context[0].startswith("in a fusion of the traced ATen graph computing aten.mul.Tensor (node mul"), context
    assert "aten.add.Tensor (node add" in context[0], context
    assert [line.strip()[:len(want)] for line, want in zip(context[1:], named)] == named, context


def _traced(f, *shapes):
    with FakeTensorMode():
        return make_fx(f, tracing_mode="real")(*[torch.empty(s) for s in shapes])


def _twice_plus(x, y):
    return (x * 2 + y,)  # (a tuple of outputs, as AOTAutograd's graphs return)


@pytest.mark.parametrize("call", ["positional", "boxed"])
def test_a_one_fusion_program_names_the_graph_inputs_of_a_size_mismatch(call):
    program = GraphProgram(plan_graph(_traced(_twice_plus, (3,), (3,))), "inference")
    assert program._one_fusion is not None  # (the straight-line call, no slots)
    run = program.positional_call() if call == "positional" else lambda *args: program(list(args))
    x, y = make((3,)), make((3,))
    torch.testing.assert_close(run(x, y), _twice_plus(x, y))
    with pytest.raises(fuser.FusionInputError) as raised:
        run(make((4,)), y)
    first, *context = str(raised.value).splitlines()
    assert first == "input 0 (T0) axis 0: size 4, but the definition declares 3"
    assert context == ["in a fusion of the traced ATen graph computing aten.mul.Tensor (node mul), "
                       "aten.add.Tensor (node add), where",
                       "  input 0 is the graph input x_1"]


def test_a_definition_s_own_input_error_keeps_its_message():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.add(a, b))
    x, y = make((3,)), make((3,))
    torch.testing.assert_close(fd.execute([x, y])[0], x + y)
    with pytest.raises(fuser.ExtentConflictError) as raised:
        fd.execute([make((4,)), y])
    assert str(raised.value) == ("extent i0 has two values in one execution: 4 from input 0 (T0) axis 0 "
                                 "and 3 from input 1 (T1) axis 0")
