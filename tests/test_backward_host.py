"""`benchmarks/backward_host.py --placement`: the calling thread and the thread that runs a
node's backward pinned to cores, and both set back to every core after."""
import os
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs Linux thread affinity and two cores")


@pytest.fixture
def backward_host(monkeypatch):
    monkeypatch.setenv("FUSER_BACKGROUND_COMPILE", "0")  # (the module's default, undone after)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from benchmarks import backward_host
    return backward_host


def test_placements_pin_and_restore(backward_host):
    cpu = torch.device("cpu")  # (a CPU node runs on the calling thread: it pins that thread)
    everywhere = os.sched_getaffinity(0)
    cores = sorted(everywhere)
    one = cores[1] if len(cores) >= 3 else cores[0]
    with backward_host.placement("one core", cpu):
        assert os.sched_getaffinity(0) == {one}
        assert torch._C._is_multithreading_enabled()
    assert os.sched_getaffinity(0) == everywhere
    with backward_host.placement("calling thread", cpu):
        assert os.sched_getaffinity(0) == everywhere and not torch._C._is_multithreading_enabled()
    assert torch._C._is_multithreading_enabled()
    backward_host.pin_engine_thread({cores[0]}, cpu)
    assert os.sched_getaffinity(0) == {cores[0]}
    os.sched_setaffinity(0, everywhere)


def test_placement_restores_after_an_error(backward_host):
    everywhere = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="inside"):
        with backward_host.placement("adjacent cores", torch.device("cpu")):
            raise RuntimeError("inside")
    assert os.sched_getaffinity(0) == everywhere and torch._C._is_multithreading_enabled()


def test_busy_table_times_the_call_and_fusers_node(backward_host):
    """`--busy` on the CPU (no sleep to queue): each row's host time, and for fuser.jit the time
    its autograd node spends in the backward program, which is part of the call, and that
    program called again outside autograd; fuser's node is put back after."""
    from fuser.frontend import training

    original = training._Fused.run_backward
    rows = backward_host.busy_table(["rmsnorm_bwd"], torch.device("cpu"), shapes=((8, 32),), calls=2,
                                    contenders=("fuser", "fuser-fd"))
    found = {label: rest for label, *rest in rows}
    assert set(found) == {"rmsnorm_bwd[8x32] fuser", "rmsnorm_bwd[8x32] fuser-fd"}
    host, node, alone = found["rmsnorm_bwd[8x32] fuser"]
    assert 0 < node < host and alone > 0
    assert found["rmsnorm_bwd[8x32] fuser-fd"][1:] == [None, None]
    assert training._Fused.run_backward is original


def test_node_timer_puts_the_node_back_after_an_error(backward_host):
    from fuser.frontend import training

    original = training._Fused.run_backward
    with pytest.raises(RuntimeError, match="inside"):
        with backward_host.NodeTimer():
            assert training._Fused.run_backward is not original
            raise RuntimeError("inside")
    assert training._Fused.run_backward is original
