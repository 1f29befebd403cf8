"""The inline form of a prepared launch (codegen/inline.py, `launches.Launch.direct_lines`), which a
ready call's generated code runs on the GPU, against the prepared launch itself (`_run` and
`_DirectStep.__call__`): both must hand Triton's C launcher the same arguments. The launcher,
the CUDA allocator, the device and the stream are stood in (the interpreter compiles nothing);
the GPU tests in tests/runtime/test_ready_launch.py run the real ones."""
import types

import pytest
import torch
from torch._C._dynamo.guards import _empty_strided_cpu

from fuser.codegen import inline, launches, steps

triton_knobs = pytest.importorskip("triton").knobs
HookChain = type(triton_knobs.runtime.launch_enter_hook)


REJECT: set = set()  # grids whose stand-in C launcher raises TypeError
JIT_ARGS: list = []  # the arguments of each call of a stand-in JIT entry point


class _Compiled:
    function, packed_metadata = "function", "packed"

    def launch_metadata(self, grid, stream, *args):
        return {"grid": grid}


class _Kernel:
    """A Triton kernel's JIT entry point (`fn[grid](*args)`), which a misaligned call takes."""

    def __init__(self, calls: list):
        self.calls = calls

    def __getitem__(self, grid):
        return lambda *args, **kwargs: (JIT_ARGS.append(args), self.calls.append(("jit", grid)))


def _step(grid: int, template: list, aligned_at: list, constexprs: dict, calls: list, hooks) -> steps._DirectStep:
    def record(*args):
        if grid in REJECT:  # a launcher of another shape rejects its arguments before launching
            raise TypeError("another launcher")
        calls.append(args)

    step = steps._DirectStep(_Kernel(calls), grid, dict(constexprs, num_warps=4))
    step.compiled, step.aligned_at, step.hooks = _Compiled(), aligned_at, hooks
    step.raw = (record, False, False)
    return step


@pytest.fixture
def stand_ins(monkeypatch):
    for module in (inline, launches, steps):
        monkeypatch.setattr(module, "current_device", lambda: 0)
    for module in (inline, steps):
        monkeypatch.setattr(module, "raw_stream", lambda device: 1234)
    for module in (inline, launches):
        monkeypatch.setattr(module, "stream_key", lambda device: ("stream",))
    monkeypatch.setattr(inline, "FAST_EMPTY", {"cuda": _empty_strided_cpu})
    return types.SimpleNamespace(launch_enter_hook=HookChain(), launch_exit_hook=HookChain())


def _two_step_launch(hooks, calls):
    """A norm backward's shape of launch: a pass (inputs, an output, the workspace, a scalar)
    then a combine (the workspace into the second output)."""
    first = _step(6, [None, None, None, None, 0.5, 7], [0, 1, 2, 3], dict(BLOCK=64), calls, hooks)
    second = _step(1, [None, None, 3], [0, 1], dict(ROWS=4, COLS=32), calls, hooks)
    out_specs = [((5, 8), torch.bfloat16), ((8,), torch.float32)]
    made = launches.Launch([(first, [None, None, None, None, 0.5, 7], [(0, 0), (1, 1), (2, 2), (3, 4)]),
                           (second, [None, None, 3], [(0, 4), (1, 3)])], out_specs, [((3, 8), torch.float32)], "src")
    made.cold = False
    made.workspaces.by_stream[("stream",)] = [torch.zeros(3, 8)]
    return made


def _generated(made, device):
    env = {"K": made, "device": device}
    body = made.direct_lines(["a", "b"], ["o0", "o1"], "K([a, b], device)", env, "", device)
    assert body is not None
    source = "def run(a, b):\n" + "".join(f"    {line}\n" for line in body) + "    return [o0, o1]\n"
    exec(compile(source, "<test>", "exec"), env)
    return env["run"]


def test_the_inline_form_passes_the_prepared_launchs_arguments(stand_ins):
    calls = []
    made = _two_step_launch(stand_ins, calls)
    device = torch.device("cuda", 0)
    run = _generated(made, device)
    a, b = torch.randn(5, 8), torch.randn(8)
    inline = run(a, b)
    reference = made([a, b], device)
    assert len(calls) == 4
    # the C launcher gets each tensor's address as an int (it would ask the driver for a tensor's),
    # from the inline form and from the prepared launch alike; the outputs are new each call
    workspace = made.workspaces.by_stream[("stream",)][0]
    assert calls[0][:13] == calls[2][:13] and calls[1][:13] == calls[3][:13]  # grid, stream, kernel, ...
    for (first, second), outputs in (((calls[0], calls[1]), inline), ((calls[2], calls[3]), reference)):
        assert first[13:17] == (a.data_ptr(), b.data_ptr(), outputs[0].data_ptr(), workspace.data_ptr())
        assert first[17:] == (0.5, 7, 64)
        assert second[13:15] == (workspace.data_ptr(), outputs[1].data_ptr()) and second[15:] == (3, 4, 32)
        assert all(type(p) is int for p in first[13:17] + second[13:15])
    assert [(tuple(o.shape), o.stride(), o.dtype) for o in inline] == \
        [(tuple(o.shape), o.stride(), o.dtype) for o in reference]


def test_the_inline_form_falls_back_where_the_kernel_assumptions_break(stand_ins, monkeypatch):
    calls, fell_back = [], []
    made = _two_step_launch(stand_ins, calls)
    device = torch.device("cuda", 0)
    run = _generated(made, device)
    real = launches.Launch.__call__
    monkeypatch.setattr(launches.Launch, "__call__", lambda self, *a, **k: fell_back.append(1) or real(self, *a, **k))
    b = torch.randn(8)
    run(torch.randn(5, 8), b)
    assert not fell_back
    misaligned = torch.randn(5 * 8 + 1)[1:].view(5, 8)
    run(misaligned, b)  # the prepared launch's own check then takes Triton's JIT path
    assert len(fell_back) == 1 and calls[-2] == ("jit", (6,))
    stand_ins.launch_exit_hook.add(print)
    run(torch.randn(5, 8), b)
    assert len(fell_back) == 2
    stand_ins.launch_exit_hook.remove(print)
    for module in (inline, launches, steps):
        monkeypatch.setattr(module, "current_device", lambda: 1)
    run.__globals__["current_device"] = lambda: 1
    with pytest.raises(Exception):  # noqa: B017 - the prepared launch enters the other device
        run(torch.randn(5, 8), b)
    assert len(fell_back) == 3


def test_no_inline_form_before_compiling_or_off_the_gpu(stand_ins):
    calls = []
    made = _two_step_launch(stand_ins, calls)
    env = {}
    assert made.direct_lines(["a", "b"], ["o0", "o1"], "K", env, "", torch.device("cpu")) is None
    made.steps[1][0].compiled = None  # its first launch compiles it
    assert made.direct_lines(["a", "b"], ["o0", "o1"], "K", env, "", torch.device("cuda", 0)) is None


def test_a_launcher_that_takes_other_arguments_leaves_the_inline_form(stand_ins):
    """A C launcher that rejects its arguments (TypeError, before launching): that step alone
    takes Triton's entry point from then on, as `_DirectStep` does, and the kernels before it
    are not launched again (found by review: one fallback re-ran the whole launch)."""
    calls = []
    made = _two_step_launch(stand_ins, calls)
    run = _generated(made, torch.device("cuda", 0))
    b = torch.randn(8)
    REJECT.add(1)  # the combine kernel's launcher
    try:
        outs = run(torch.randn(5, 8), b)
    finally:
        REJECT.clear()
    assert [tuple(o.shape) for o in outs] == [(5, 8), (8,)]
    assert [step.usable for step, _, _ in made.steps] == [True, False]
    assert len(calls) == 2 and calls[0][0] == 6 and calls[1] == ("jit", (1,))
    # Triton's entry point gets the tensors themselves (the C launcher got their addresses)
    workspace, out = JIT_ARGS[-1][:2]
    assert workspace is made.workspaces.by_stream[("stream",)][0] and out is outs[1]
    run(torch.randn(5, 8), b)  # the prepared launch now: its first kernel raw, the second through the JIT
    assert len(calls) == 4 and calls[2][0] == 6 and calls[3] == ("jit", (1,))


def test_a_pointer_aligned_when_the_kernel_compiled_stays_checked(monkeypatch):
    """Triton specializes each pointer on its 16-byte alignment: a kernel compiled with one
    input misaligned and another aligned assumes the second stays aligned. A later call
    handing it a misaligned pointer there takes Triton's entry point (found by review: only a
    kernel compiled with every pointer aligned was checked)."""
    calls = []

    class Kernel(_Kernel):
        def run(self, *args, grid, warmup, **kwargs):
            compiled = _Compiled()
            compiled._init_handles = lambda: None
            compiled.run = lambda *launch_args: calls.append("launcher")
            return compiled

    monkeypatch.setattr(steps, "current_device", lambda: 0)
    monkeypatch.setattr(steps, "raw_stream", lambda device: 0)
    step = steps._DirectStep(Kernel(calls), 2, dict(BLOCK=8, num_warps=4))
    flat = torch.randn(65)
    misaligned, aligned = flat[1:33], torch.randn(32)
    step([misaligned, aligned, 5])  # the first launch, through the JIT, compiles
    assert step.aligned_at == [1]
    step([misaligned, torch.randn(32), 5])
    step([torch.randn(32), flat[1:33], 5])
    assert calls == [("jit", (2,)), "launcher", ("jit", (2,))]


def test_outputs_are_allocated_without_the_fast_allocators(monkeypatch):
    """A torch without Inductor's allocators (or a launch whose device is not the current
    one) allocates through torch.empty_strided (found by review: it was passed the dtype
    positionally, which torch.empty_strided rejects)."""
    from fuser import DataType, FusionDefinition

    monkeypatch.setattr(inline, "FAST_EMPTY", {})
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.exp(x), [1]))
    x = torch.randn(6, 33, generator=torch.Generator().manual_seed(8))
    for _ in range(2):
        (out,) = fd.execute([x])
        torch.testing.assert_close(out, torch.exp(x).sum(1))
