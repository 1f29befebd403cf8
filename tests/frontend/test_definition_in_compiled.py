"""A FusionDefinition executed inside a function that Dynamo compiles (`fuser.jit`,
`torch.compile` with fuser's backend or another): the call breaks the graph and runs as plain
Python, as a C++ nvFuser call does. Traced into, fuser's runtime (and on the CPU Triton's
interpreter, whose frames Dynamo then tried to compile) stopped Dynamo with an internal error."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition


def _exp_definition() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.exp(x))
    return fd


@pytest.mark.parametrize("how", ["jit", "fuser backend", "eager backend"])
def test_a_definition_called_inside_a_compiled_function_breaks_the_graph_and_runs(how):
    fd = _exp_definition()

    def f(a, b):
        return fd.execute([a.sin() * b])[0] * 2 + b

    compiled = {"jit": lambda: fuser.jit(f), "fuser backend": lambda: torch.compile(f, backend="fuser"),
                "eager backend": lambda: torch.compile(f, backend="eager")}[how]()
    for rows in (3, 5):
        a, b = torch.randn(rows, 4), torch.randn(rows, 4)
        torch.testing.assert_close(compiled(a, b), torch.exp(a.sin() * b) * 2 + b)
    if how == "jit":
        assert compiled.cache_info().graphs == 2  # (the graph before the call and the one after)

