"""FusionExecutorCache: one runtime per input signature, fresh bindings per execution. Two
definitions executed alternately with different sizes never see each other's bindings."""
import threading

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import BACKENDS, assert_eager, backend_env, make


def norm_fd():
    """(x + y) * s and x summed over rows: i0, i1 bound from x, y shares i1."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.define_tensor([-1], contiguity=True)
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.mul(fd.ops.add(x, y), s))
        fd.add_output(fd.ops.sum(x, [0]))
    return fd


def check(fd, m, n, s=3):
    x, y = make((m, n)), make((n,))
    out, total = fd.execute([x, y, s])
    assert_eager(out, (x + y) * s)
    assert_eager(total, x.sum(0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_definitions_alternate_with_different_sizes(backend):
    with backend_env(backend):
        a, b = norm_fd(), norm_fd()
        # both fusions name their extents i0, i1: only their own tables may give them values
        assert {str(d.extent) for d in a.fusion.inputs()[0].get_logical_domain()} == {"i0", "i1"}
        assert {str(d.extent) for d in b.fusion.inputs()[0].get_logical_domain()} == {"i0", "i1"}
        for m, n in [(3, 5), (4, 7), (2, 9), (3, 5), (5, 3)]:
            check(a, m, n)
            check(b, n + 1, m + 2)
            check(a, m, n)
        assert a.cache.num_runtimes == 1 and b.cache.num_runtimes == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_runtime_reused_while_only_sizes_change(backend):
    with backend_env(backend):
        fd = norm_fd()
        assert fd.cache is None
        for m, n in [(3, 5), (7, 2), (2, 13), (6, 6)]:
            check(fd, m, n)
        assert fd.cache.num_runtimes == 1
        runtime = fd.cache.last_runtime
        check(fd, 4, 4)
        assert fd.cache.last_runtime is runtime


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_runtime_when_a_dim_becomes_size_1(backend):
    with backend_env(backend):
        fd = norm_fd()
        check(fd, 3, 5)
        check(fd, 1, 5)  # x's rows: size 1 now
        assert fd.cache.num_runtimes == 2
        check(fd, 4, 5)
        check(fd, 1, 6)
        assert fd.cache.num_runtimes == 2
        check(fd, 3, 1)  # x's and y's columns: size 1
        assert fd.cache.num_runtimes == 3


def test_no_new_runtime_when_a_scalar_changes_type():
    # an int given for a Double scalar binds as that float: the runtime reads it from the binding
    # table, so one runtime serves both (a second one was planned, its kernels launched again)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(x, s))
    t = make((3, 5))
    with backend_env("aten"):
        torch.testing.assert_close(fd.execute([t, 2.5])[0], t * 2.5)
        assert fd.execute([make((4, 6)), 1.5])[0].shape == (4, 6)
        assert fd.cache.num_runtimes == 1
        torch.testing.assert_close(fd.execute([t, 2])[0], t * 2)  # an int for the Double scalar
        assert fd.cache.num_runtimes == 1


def test_new_runtime_when_the_layout_changes():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=False)
        fd.add_output(fd.ops.exp(x))
    a, b = make((3, 5)), make((5, 3)).t()
    assert_eager(fd.execute([a])[0], a.exp())
    assert fd.execute([make((4, 6))])[0].shape == (4, 6)
    assert fd.cache.num_runtimes == 1
    assert_eager(fd.execute([b])[0], b.exp())
    assert fd.cache.num_runtimes == 2


def test_bad_inputs_add_no_runtime():
    fd = norm_fd()
    check(fd, 3, 5)
    for bad in ([make((3, 5), torch.float64), make((5,), torch.float64), 3], [make((3, 5)), make((4,)), 3],
                [make((3, 5))]):
        with pytest.raises(fuser.FusionInputError):
            fd.execute(bad)
    assert fd.cache.num_runtimes == 1
    check(fd, 2, 4)


def test_outputs_are_fresh_tensors_each_execution():
    fd = norm_fd()
    x, y = make((3, 5)), make((5,))
    out1, _ = fd.execute([x, y, 2])
    out2, _ = fd.execute([x, y, 2])
    assert out1.data_ptr() != out2.data_ptr()
    out1.add_(100.0)
    assert_eager(out2, (x + y) * 2)


def test_backend_switch_selects_the_path():
    """The two backends of the op tests really differ: ATen evaluator segments vs a kernel."""
    for backend, kind in (("aten", "evaluator"), ("kernel", "kernel")):
        with backend_env(backend):
            with FusionDefinition() as fd:
                x = fd.define_tensor([-1, -1], contiguity=True)
                fd.add_output(fd.ops.exp(fd.ops.add(x, 1.0)))
            t = make((3, 5))
            assert_eager(fd.execute([t])[0], (t + 1.0).exp())
            assert [s.kind.value for s in fd.last_segments()] == [kind]


def test_threads_share_one_definition():
    fd = norm_fd()
    errors = []

    def worker(k):
        try:
            for i in range(4):
                check(fd, 2 + (i + k) % 3, 3 + k)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert fd.cache.num_runtimes == 1
