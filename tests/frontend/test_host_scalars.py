"""0-dim CPU tensors in a GPU graph (frontend/host_scalars.py) and write-backs folded into the
fusion that computes them (frontend/write_backs.py), planned on graphs traced with fake CUDA
tensors (no GPU needed for the plan); the GPU test runs a real optimizer step."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import fuser
from fuser.frontend.lowering import Region
from fuser.frontend.partition import NOT_WORTH, plan_graph
from fuser.frontend.program import GraphProgram
from tests.helpers import make

aten = torch.ops.aten


def _traced(f, *shapes_devices, writes=()):
    """`f` traced on fake tensors ((shape, device) each), then `copy_(input, output)` for each
    (input position, output position) of `writes`, as a functionalized in-place step ends."""
    mode = FakeTensorMode()
    with mode:
        args = [torch.empty(shape, device=device) for shape, device in shapes_devices]
        gm = make_fx(f, tracing_mode="real")(*args)
    graph = gm.graph
    out = next(n for n in graph.nodes if n.op == "output")
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    values = list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
    with graph.inserting_before(out):
        for i, o in writes:
            node = graph.call_function(aten.copy_.default, (placeholders[i], values[o]))
            node.meta["val"] = placeholders[i].meta["val"]
    out.args = (tuple(v for k, v in enumerate(values) if k not in {o for _, o in writes}),)
    gm.recompile()
    return gm


def _adam_like(p, g, step):
    s = step + 1
    correction = 1 - torch.pow(0.9, s)
    return s, p - g / correction


def test_a_cpu_step_counter_joins_the_gpu_fusion_as_a_number():
    gm = _traced(_adam_like, ((8, 4), "cuda"), ((8, 4), "cuda"), ((), "cpu"), writes=[(2, 0), (0, 1)])
    plan = plan_graph(gm)
    regions = plan.regions
    assert len(regions) == 1, plan.steps
    region = regions[0]
    assert region.device == torch.device("cuda", 0)
    # the bias correction is computed in the GPU fusion; the new step count comes from the CPU
    assert {n.name for n in region.nodes} == {"pow_1", "rsub", "div", "sub"}
    assert [getattr(src, "name", None) for src in region.inputs] == ["add", "g_1", "p_1"]
    eager = {e.node.name: e for e in plan.eager}
    assert eager["add"].kind == NOT_WORTH and "0-dim CPU" in eager["add"].reason
    # the parameter's write-back is the fusion's (an aliased output); the counter's stays ATen
    assert [n.name for _, n in region.write_backs] == ["p_1"]
    assert [e.node.args[0].name for e in plan.eager if e.node.target is aten.copy_.default] == ["step_1"]
    steps = plan.steps
    assert steps.index(eager["add"]) < steps.index(region)  # (the fusion reads its result)
    program = GraphProgram(plan, "inference")
    (fusion_step,) = program.fusion_steps
    assert fusion_step.moves and fusion_step.write_backs
    assert program._one_fusion is None


def test_a_cpu_vector_reduced_for_a_gpu_op_is_not_lifted():
    def f(x, v):
        return x * v.sum()

    plan = plan_graph(_traced(f, ((8, 4), "cuda"), ((5,), "cpu")))
    (region,) = [r for r in plan.regions if r.device.type == "cuda"]
    assert [n.name for n in region.nodes] == ["mul"]  # (the sum runs on the CPU, its number joins)


def test_a_gpu_op_reading_a_cpu_fusion_runs_in_a_later_phase():
    def f(x, t, u):
        return x * (t.exp() + u.sin()).sum()  # (a CPU vector's sum: not lifted)

    plan = plan_graph(_traced(f, ((8, 4), "cuda"), ((3,), "cpu"), ((3,), "cpu")))
    steps = plan.steps
    cpu = [k for k, s in enumerate(steps) if isinstance(s, Region) and s.device.type == "cpu"]
    gpu = [k for k, s in enumerate(steps) if isinstance(s, Region) and s.device.type == "cuda"]
    assert cpu and gpu and max(cpu) < min(gpu), steps


def test_a_write_back_read_after_the_fusion_waits_for_the_read():
    def f(p, x):
        return p.exp(), p + torch.linalg.inv(x.cos())  # (p read again after an eager op)

    plan = plan_graph(_traced(f, ((4, 4), "cuda"), ((4, 4), "cuda"), writes=[(0, 0)]))
    steps = plan.steps
    (copy,) = [k for k, s in enumerate(steps) if not isinstance(s, Region) and s.node.target is aten.copy_.default]
    readers = [k for k, s in enumerate(steps) if isinstance(s, Region) and any(n.name == "add" for n in s.nodes)]
    assert readers and readers[0] < copy, steps
    assert not any(r.write_backs for r in plan.regions)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cpu_step_counter_updates_a_gpu_tensor_in_one_fusion():
    # (an optimizer traced by Dynamo moves its counters to the GPU; a function given one keeps it)
    def step(p, g, count):
        count.add_(1)
        p.sub_(g * 0.1 / (1 - 0.9 ** count).sqrt())

    jitted = fuser.jit(step)
    p, g, count = make((64, 32)).cuda(), make((64, 32)).cuda(), torch.tensor(0.0)
    ref_p, ref_count = p.clone(), count.clone()
    for _ in range(3):
        jitted(p, g, count)
        step(ref_p, g, ref_count)
        torch.testing.assert_close(p, ref_p)
        assert count.device.type == "cpu" and count.item() == ref_count.item()
    info = jitted.cache_info()
    assert info.fusions == 1, info  # (the GPU ops in one kernel: none eager for mixing devices)
