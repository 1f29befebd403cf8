"""nvFuser's PythonProfiler: each execution inside it profiled segment by segment."""
import pytest
import torch

from fuser import FusionDefinition, FusionDefinitionError, PythonProfiler
from tests.helpers import assert_eager, make


def _sum_of_sums(x, y):
    with FusionDefinition() as fd:
        s = fd.ops.sum(fd.ops.add(fd.from_pytorch(x), fd.from_pytorch(y)), dim=-1)
        fd.add_output(fd.ops.sum(s, dim=-1))
    return fd


def test_profile_names_each_segments_kernel_and_time():
    x, y = make((2, 5)), make((2, 5))
    fd = _sum_of_sums(x, y)
    with PythonProfiler() as prof:
        (out,) = fd.execute([x, y])
    assert_eager(out, (x + y).sum())
    p = prof.profile
    segs = fd.cache.last_runtime.segments
    assert p.segments == len(segs) == len(p.kernel_profiles) >= 1
    for k, kp in enumerate(p.kernel_profiles):
        assert kp.segment_id == k and kp.name.startswith("fuser_") and kp.name in segs[k].source
        assert kp.scheduler == segs[k].params.template.value and kp.time_ms > 0
    assert p.kernel_time_ms == pytest.approx(sum(kp.time_ms for kp in p.kernel_profiles))
    assert p.host_time_ms >= p.kernel_time_ms
    (again,) = fd.execute([x, y])  # outside: not profiled, and the ready path still gives the same
    assert torch.equal(again, out) and len(prof.profiles) == 1


def test_aten_segments_and_several_executions():
    x, w = make((4, 8)), make((6, 8))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.relu(fd.ops.linear(fd.from_pytorch(x), fd.from_pytorch(w))))
    with PythonProfiler() as prof:
        for _ in range(2):
            assert_eager(fd.execute([x, w])[0], torch.relu(x @ w.t()))
    first, second = prof.profiles
    assert first.fusion_id == second.fusion_id and prof.profile is second
    names = [(kp.name, kp.scheduler) for kp in second.kernel_profiles]
    assert names[0] == ("aten: Linear", "expr_eval") and names[1][0].startswith("fuser_")


def test_nested_profilers_and_a_host_program():
    from tests.multidevice.cases import exact, ints, seed_definition

    fd = seed_definition(1, 3, 2)  # a stream-parallel program: timed as a whole
    x, w = ints(6, 8), ints(2, 8, seed=1)
    x2, y2 = make((2, 5)), make((2, 5))
    other = _sum_of_sums(x2, y2)
    with PythonProfiler() as outer:
        with PythonProfiler() as inner:
            (out,) = fd.execute([x, w])
        other.execute([x2, y2])
    exact(out, torch.nn.functional.linear(x, w))
    (host,) = inner.profiles
    assert host.segments == 1 and [(k.name, k.scheduler) for k in host.kernel_profiles] == [("host program", "host")]
    assert len(outer.profiles) == 1 and outer.profile.fusion_id != host.fusion_id


def test_profiler_errors():
    with pytest.raises(FusionDefinitionError, match="no FusionDefinition was executed"):
        with PythonProfiler() as prof:
            pass
        prof.profile
    with pytest.raises(FusionDefinitionError, match="auto_scheduled=False"):
        PythonProfiler(auto_scheduled=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_profile_on_the_gpu_times_with_cuda_events():
    x, y = torch.randn(64, 4096, device="cuda"), torch.randn(64, 4096, device="cuda")
    fd = _sum_of_sums(x, y)
    fd.execute([x, y])  # compiled first: the profile's times are the kernels'
    with PythonProfiler() as prof:
        (out,) = fd.execute([x, y])
    torch.testing.assert_close(out, (x + y).sum(), rtol=1e-4, atol=1e-2)
    assert all(0 < kp.time_ms < 50 for kp in prof.profile.kernel_profiles)
