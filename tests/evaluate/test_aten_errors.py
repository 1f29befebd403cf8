"""ATen refusing an op in an evaluator segment: the binder checked every input against the IR,
so that is fuser's bug, an InternalError naming the op and its operands; the CPU allocator's
failure passes through as it is."""
import pytest
import torch

import fuser
from fuser import FusionDefinition
from fuser.evaluate import rules
from fuser.ir import MatmulOp
from tests.helpers import make


def _matmul_fd():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.matmul(a, b))
    return fd


@pytest.mark.parametrize("message,raised", [
    ("mat1 and mat2 shapes cannot be multiplied", fuser.InternalError),
    ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes", RuntimeError),
])
def test_aten_failure_in_an_evaluator_segment(monkeypatch, message, raised):
    def refuse(e, args, ctx):
        raise RuntimeError(message)

    monkeypatch.setitem(rules.RULES, MatmulOp, refuse)
    with pytest.raises(raised) as info:
        _matmul_fd().execute([make((2, 3)), make((3, 4))])
    if raised is fuser.InternalError:
        assert "MatmulOp" in str(info.value) and "(2, 3) float32" in str(info.value)
    else:
        assert not isinstance(info.value, fuser.FuserError)


def test_aten_out_of_memory_passes_through(monkeypatch):
    def refuse(e, args, ctx):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setitem(rules.RULES, MatmulOp, refuse)
    with pytest.raises(torch.OutOfMemoryError):
        _matmul_fd().execute([make((2, 3)), make((3, 4))])


def test_a_rules_own_error_passes_through(monkeypatch):
    """A rule that names the input itself (indexing's out-of-range index) is not re-labelled
    fuser's bug, though every fuser error is a RuntimeError."""
    def refuse(e, args, ctx):
        raise fuser.FusionInputError("matmul: the input is bad")

    monkeypatch.setitem(rules.RULES, MatmulOp, refuse)
    with pytest.raises(fuser.FusionInputError, match="the input is bad") as info:
        _matmul_fd().execute([make((2, 3)), make((3, 4))])
    assert not isinstance(info.value, fuser.InternalError)


def test_fuser_errors_are_runtime_errors_as_nvfusers_are():
    """Code written against nvfuser_direct catches its errors as RuntimeError."""
    assert issubclass(fuser.FuserError, RuntimeError)
    with pytest.raises(RuntimeError, match="extent i1 has two values"):
        _matmul_fd().execute([make((2, 3)), make((4, 5))])
