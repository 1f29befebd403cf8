"""Property test: random pointwise and reduction fusions, generated kernels against the ATen
evaluator on the same inputs."""
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuser import DataType, FusionDefinition
from fuser.runtime import FusionExecutorCache

UNARY = ["neg", "abs", "sin", "cos", "relu", "sigmoid", "tanh", "exp"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]
REDUCTIONS = ["sum", "max", "min"]


@st.composite
def programs(draw):
    rows = draw(st.integers(1, 9))
    cols = draw(st.integers(1, 40))
    shapes = draw(st.lists(st.sampled_from(["full", "row", "col"]), min_size=1, max_size=3))
    steps = draw(st.lists(st.tuples(st.sampled_from(["unary", "binary", "scalar"]),
                                    st.sampled_from(UNARY), st.sampled_from(BINARY),
                                    st.integers(0, 10), st.floats(-2, 2)), min_size=1, max_size=6))
    reduction = draw(st.none() | st.tuples(st.sampled_from(REDUCTIONS), st.integers(0, 1), st.booleans()))
    tail = draw(st.lists(st.tuples(st.sampled_from(BINARY), st.integers(0, 10)), max_size=2))
    return rows, cols, shapes, steps, reduction, tail


def build(rows, cols, shapes, steps, reduction, tail, device="cpu"):
    dims = {"full": [-1, -1], "row": [1, -1], "col": [-1, 1]}
    with FusionDefinition() as fd:
        ins = [fd.define_tensor(shape=dims[s], contiguity=True, dtype=DataType.Float) for s in shapes]
        vals = list(ins)
        for kind, u, b, pick, c in steps:
            x = vals[pick % len(vals)]
            if kind == "unary":
                vals.append(getattr(fd.ops, u)(x))
            elif kind == "binary":
                vals.append(getattr(fd.ops, b)(x, vals[(pick + 1) % len(vals)]))
            else:
                vals.append(getattr(fd.ops, b)(x, c))
        out = vals[-1]
        if reduction is not None:
            op, axis, keep = reduction
            if out.ndim == 2:
                red = getattr(fd.ops, op)(out, [axis], keep)
                out = red
                for b, pick in tail:
                    other = vals[pick % len(vals)]
                    if keep or other.ndim == 0:
                        out = getattr(fd.ops, b)(out, other)
        fd.add_output(out)
    sizes = {"full": (rows, cols), "row": (1, cols), "col": (rows, 1)}
    inputs = [torch.randn(*sizes[s], device=device) for s in shapes]
    return fd, inputs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(program=programs())
def test_kernels_match_evaluator(program, device):
    fd, inputs = build(*program, device=device)
    (actual,) = fd.execute(inputs)
    (expected,) = FusionExecutorCache(fd.fusion, use_kernels=False).execute(inputs)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
