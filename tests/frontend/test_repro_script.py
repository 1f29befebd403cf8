"""fd.repro_script_for / last_repro_script: a standalone script that defines the fusion again
and runs it on fresh tensors of the inputs' layouts; run here, it must define the same fusion
and give outputs of the same shapes and dtypes."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.frontend.repro import describe_inputs


def _definition():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        e = fd.define_tensor([-1, -1], contiguity=[None, True])         # expanded rows
        t = fd.define_tensor([-1, -1], contiguity=True, stride_order=[0, 1], dtype=DataType.BFloat16)
        s = fd.define_scalar(dtype=DataType.Double)
        n = fd.define_scalar(dtype=DataType.Int)
        y = fd.ops.mul(fd.ops.add(x, e), fd.ops.cast(t, DataType.Float))
        fd.add_output(fd.ops.sum(fd.ops.mul(y, s), dims=[1]))
        fd.add_output(fd.ops.mul(x, n))
    return fd


def _inputs():
    return [torch.randn(3, 5), torch.randn(5).expand(3, 5), torch.randn(5, 3, dtype=torch.bfloat16).t(),
            -1.5, 4]


def _run_script(script: str):
    namespace: dict = {}
    exec(compile(script, "<repro>", "exec"), namespace)  # noqa: S102 - the script under test
    return namespace


def test_repro_script_defines_the_fusion_and_runs_it_on_inputs_of_the_same_layouts():
    fd, inputs = _definition(), _inputs()
    outs = fd.execute(inputs)
    script = fd.repro_script_for(inputs)
    assert "torch.testing.make_tensor((5,), dtype=torch.float32, device='cpu').as_strided((3, 5), (0, 1))" in script
    assert "    -1.5,\n    4,\n]" in script
    ns = _run_script(script)
    assert repr(ns["fd"]) == repr(fd)
    assert [i.stride() for i in ns["inputs"][:3]] == [i.stride() for i in inputs[:3]]
    again = ns["fd"].execute(ns["inputs"])
    assert [(o.shape, o.dtype) for o in again] == [(o.shape, o.dtype) for o in outs]


def test_repro_script_without_inputs_only_defines():
    fd = _definition()
    script = fd.repro_script_for()
    assert "inputs" not in script and "execute" not in script
    assert repr(_run_script(script)["fd"]) == repr(fd)


def test_last_repro_script_needs_an_execution_that_saved_its_inputs():
    fd, inputs = _definition(), _inputs()
    with pytest.raises(fuser.FusionDefinitionError, match="save_repro_inputs=True"):
        fd.last_repro_script()
    fd.execute(inputs)
    with pytest.raises(fuser.FusionDefinitionError, match="save_repro_inputs=True"):
        fd.last_repro_script()
    fd.execute(inputs, save_repro_inputs=True)
    assert fd.last_repro_script() == fd.repro_script_for(inputs)


def test_non_finite_scalars_are_written_as_python_can_read_them():
    assert describe_inputs([float("inf"), float("-inf"), float("nan"), 2.5]) == [
        "float('inf')", "float('-inf')", "float('nan')", "2.5"]


def test_repro_script_draws_fp8_and_vectors():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float8_e4m3fn)
        v = fd.define_vector(2)
        fd.add_output(fd.ops.reshape(fd.ops.cast(x, DataType.Float), v))
    inputs = [torch.randn(6).to(torch.float8_e4m3fn), [2, 3]]
    ns = _run_script(fd.repro_script_for(inputs))
    assert ns["inputs"][0].dtype == torch.float8_e4m3fn and ns["inputs"][1] == [2, 3]
    assert ns["fd"].execute(ns["inputs"])[0].shape == (2, 3)


def test_a_repro_script_draws_index_tensors_that_index():
    # integer tensors were drawn in [-9, 10): an index_select's script failed on its own inputs
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        index = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(x, index, 0))
    inputs = [torch.randn(6, 3), torch.tensor([5, 0, 2, 1, 4, 3, 0])]
    (out,) = fd.execute(inputs)
    for _ in range(5):
        ns = _run_script(fd.repro_script_for(inputs))
        assert 0 <= ns["inputs"][1].min() and ns["inputs"][1].max() < 3
        (again,) = ns["fd"].execute(ns["inputs"])
        assert (again.shape, again.dtype) == (out.shape, out.dtype)


def test_numpy_scalars_are_written_as_python_numbers():
    import numpy as np
    from fuser.frontend.repro import python_literal
    assert [python_literal(v) for v in (np.float32(2.0), np.int64(3), np.bool_(True), np.float64(-0.0))] == \
        ["2.0", "3", "True", "-0.0"]
