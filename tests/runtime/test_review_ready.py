"""Review regressions of the ready-call path (runtime/cache.py ReadyCall, call_key) and of the
launch key it shares with the launcher (codegen/launch.py scalar_key)."""
import numpy as np
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen.launch import scalar_key

from .test_ready_call import scaled_reciprocal


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter divides by zero
def test_a_numpy_negative_zero_is_not_served_the_launch_of_zero():
    # binding accepts numpy.float64 (a float subclass) for a Double scalar, but the launch key
    # kept the sign only for `type(v) is float`: -0.0 reused the launch made for 0.0 (+inf
    # where eager gives -inf), in the ready cache and in the launcher's own cache
    fd = scaled_reciprocal()
    x = torch.rand(3, 5) + 1.0
    for s in (np.float64(0.0), np.float64(-0.0), np.float64(0.0), np.float64(-0.0)):
        (out,) = fd.execute([x, s])
        torch.testing.assert_close(out, 1.0 / (x * float(s)))


def test_scalar_keys_tell_signed_zeros_apart():
    assert scalar_key(np.float64(-0.0)) != scalar_key(np.float64(0.0))
    assert scalar_key(complex(0.0, -0.0)) != scalar_key(complex(0.0, 0.0))
    assert scalar_key(2) != scalar_key(2.0) != scalar_key(True)
    assert scalar_key(1.5) == scalar_key(1.5)



def test_a_fresh_nan_each_call_finds_the_ready_call_and_its_launch():
    # NaN != NaN: a key holding the float matched only the same object, so each call's fresh
    # float("nan") bound, looked up and prepared its launch again (tables of 256 and 1024)
    assert scalar_key(float("nan")) == scalar_key(float("nan")) != scalar_key(-float("nan"))
    assert scalar_key(complex(float("nan"), 1.0)) == scalar_key(complex(float("nan"), 1.0))
    assert scalar_key(complex(float("nan"), 1.0)) != scalar_key(complex(1.0, float("nan")))
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(x, s))
    x = torch.randn(64)
    for _ in range(5):
        (out,) = fd.execute([x, float("nan")])
        assert out.isnan().all()
    (runtime,) = fd.fec.runtimes()
    assert len(fd.fec._ready) == 1
    assert sum(len(launcher.launches) for launcher in runtime.launchers.values()) == 1

def exp_definition():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=False, dtype=DataType.Float)
        fd.add_output(fd.ops.exp(a))
    return fd


def test_last_triton_code_follows_a_ready_call():
    # two layouts of one runtime (same stride order) with different kernels: a repeat of the
    # first layout takes its ready call, and the code it reports must be that layout's kernel,
    # not the one launched before it
    fd = exp_definition()
    dense, strided = torch.randn(4, 8), torch.randn(4, 16)[:, :8]
    fd.execute([dense])
    dense_code = fd.last_triton_code()
    fd.execute([strided])
    strided_code = fd.last_triton_code()
    assert fd.cache.num_runtimes == 1 and dense_code != strided_code
    torch.testing.assert_close(fd.execute([dense])[0], dense.exp())
    assert len(fd.cache._ready) == 2
    assert fd.last_triton_code() == dense_code
    fd.execute([strided])
    assert fd.last_triton_code() == strided_code


def test_fuser_dump_triton_prints_the_kernel_a_ready_call_switches_to(monkeypatch, capsys):
    fd = exp_definition()
    dense, strided = torch.randn(4, 8), torch.randn(4, 16)[:, :8]
    monkeypatch.setenv("FUSER_DUMP", "triton")
    fd.execute([dense])
    fd.execute([strided])
    capsys.readouterr()
    fd.execute([dense])  # the ready call: the kernel changed since the last launch
    assert "def fuser_" in capsys.readouterr().out
    fd.execute([dense])  # the same kernel again: nothing new to show
    assert capsys.readouterr().out == ""


def test_last_triton_code_is_empty_after_an_execution_that_launched_nothing():
    fd = exp_definition()
    fd.execute([torch.randn(4, 6)])
    assert "def fuser_" in fd.last_triton_code()
    (out,) = fd.execute([torch.randn(0, 6)])  # an empty loop space: ATen, no kernel
    assert out.shape == (0, 6) and fd.last_triton_code() == ""
    x = torch.randn(4, 6)
    torch.testing.assert_close(fd.execute([x])[0], x.exp())
    assert "def fuser_" in fd.last_triton_code()
