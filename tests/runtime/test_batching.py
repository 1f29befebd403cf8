"""Launches of one pointwise kernel batched into one launch by a ready program
(runtime/batching.py, codegen/batched.py): where it may, where it may not, each result against
eager."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import batched, steps
from tests.helpers import OptimizerTwins, make

DEVICES = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])])


@pytest.fixture
def launches(monkeypatch):
    """The grid of each kernel launch (the interpreter's and the GPU's), and the batched ones'."""
    made = {"all": [], "batched": []}
    for step_type in (steps._Step, steps._DirectStep):
        call = step_type.__call__

        def spy(self, args, call=call):
            made["all"].append(self.grid)
            return call(self, args)
        monkeypatch.setattr(step_type, "__call__", spy)
    launch = batched.BatchedLaunch.__call__

    def batched_spy(self, members, grids):
        done = launch(self, members, grids)
        if done and self.target != "cuda":  # (a GPU's goes through `launch`)
            made["batched"].append(len(members))
        return done
    monkeypatch.setattr(batched.BatchedLaunch, "__call__", batched_spy)
    launch_built = batched.BatchedLaunch.launch

    def launch_spy(self, addresses, device):  # (a GPU's generated call, its kernel built)
        done = launch_built(self, addresses, device)
        if done:
            made["batched"].append(len(self.rows))
        return done
    monkeypatch.setattr(batched.BatchedLaunch, "launch", launch_spy)
    return made


def _updates(n: int):
    """n SGD-like updates of n parameters, each written into its parameter."""
    with FusionDefinition() as fd:
        ps = [fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float) for _ in range(n)]
        gs = [fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float) for _ in range(n)]
        for p, g in zip(ps, gs):
            fd.add_output(fd.ops.sub(p, fd.ops.mul(g, 0.1)), alias_input=p)
    return fd


def _expected(params, grads):
    return [p - g * 0.1 for p, g in zip(params, grads)]


@DEVICES
def test_independent_updates_of_one_kernel_run_as_one_launch(launches, device):
    fd = _updates(4)
    # one kernel, one tile (1024 columns of the flattened rows, on as many warps): the extents
    # are arguments, and a member whose tile dims the blocks do not divide takes masks
    shapes = [(8, 128), (8, 128), (24, 128), (9, 128)]
    params = [make(s).to(device) for s in shapes]
    for call in range(3):
        grads = [make(s).to(device) for s in shapes]
        expected = _expected(params, grads)
        launches["all"].clear()
        fd.execute(params + grads)
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e)
        if call:  # (the first call runs the launches one by one; its ready program batches)
            assert launches["batched"][-1] == 4 and len(launches["all"]) == 1, launches


@DEVICES
def test_new_tensors_each_call_remake_the_table(launches, device):
    fd = _updates(3)
    for _ in range(4):
        params = [make((4, 16)).to(device) for _ in range(3)]
        grads = [make((4, 16)).to(device) for _ in range(3)]
        expected = _expected(params, grads)
        fd.execute(params + grads)
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e)
    assert launches["batched"] == [3, 3, 3]


def test_a_misaligned_argument_runs_the_members_one_by_one(launches):
    fd = _updates(2)
    for misaligned in (False, True, False):
        params = [make((4, 16)) for _ in range(2)]
        grads = [make((4, 16)) for _ in range(2)]
        if misaligned:
            grads[1] = make((4 * 16 + 1,))[1:].view(4, 16)
        expected = _expected(params, grads)
        launches["all"].clear()
        fd.execute(params + grads)
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e)
    assert launches["batched"] == [2], launches  # (the third call: the second was misaligned)


def test_a_kernel_reading_another_kernels_output_is_not_batched(launches):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        first = fd.ops.exp(a)
        fd.add_output(first)
        fd.add_output(fd.ops.matmul(first, b))  # (an ATen segment between two kernels)
        fd.add_output(fd.ops.exp(fd.ops.matmul(first, b)))
    for _ in range(3):
        x, y = make((8, 8)), make((8, 8))
        got = fd.execute([x, y])
        torch.testing.assert_close(got[2], (x.exp() @ y).exp(), rtol=1e-5, atol=1e-5)
    assert launches["batched"] == []


def test_a_jitted_optimizer_step_batches_its_parameters(launches):
    twins = OptimizerTwins(lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True), ((16, 8), (16, 8), (8,), (24, 8)))
    for _ in range(3):
        twins.step()
    twins.assert_same()
    assert launches["batched"] and sum(launches["batched"][-2:]) >= 3, launches


def test_a_kernel_without_one_program_index_has_no_batched_form():
    module = "def k(X_ptr, N, BLOCK: tl.constexpr):\n    a = tl.program_id(0)\n    b = tl.program_id(0)\n"
    x = make((4,))
    assert batched.batched_source(module, "k", [[x]], [[None, 4]], [[(0, 0)]]) is None
    one = "def k(X_ptr, N, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"
    name, text = batched.batched_source(one, "k", [[x], [x]], [[None, 4], [None, 8]], [[(0, 0)], [(0, 0)]])
    assert f"def {name}(TABLE, BLOCK: tl.constexpr, COUNT: tl.constexpr, COUNT_BLOCK: tl.constexpr):" in text
    assert "N = tl.load(batch_row + 1).to(tl.int32)" in text  # (differs: read from the table)
    # specialized as Triton specializes: a 1 is a constant, a multiple of 16 said to be, other
    # values read (one batched kernel for every size), a scalar input never specialized
    three = "def k(X_ptr, N, S, M, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"
    name, text = batched.batched_source(three, "k", [[x], [x]], [[None, 1, 7, 32], [None, 1, 7, 32]],
                                        [[(0, 0)], [(0, 0)]], unspecialized=("M",))
    assert "    N = 1\n" in text and "    S = tl.load(batch_row + 2).to(tl.int32)\n" in text
    assert "    M = tl.load(batch_row + 3).to(tl.int32)\n" in text
    name, text = batched.batched_source(three, "k", [[x], [x]], [[None, 1, 7, 32], [None, 1, 7, 64]],
                                        [[(0, 0)], [(0, 0)]])
    assert "    M = tl.multiple_of(tl.load(batch_row + 3).to(tl.int32), 16)\n" in text


def test_an_update_moved_to_the_batch_keeps_an_earlier_read_of_its_parameter(launches):
    # A and C launch one kernel; B, an ATen matmul between them, reads C's parameter before C
    # writes it there (in place: no later segment reads it)
    with FusionDefinition() as fd:
        ps = [fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float) for _ in range(2)]
        gs = [fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float) for _ in range(2)]
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.sub(ps[0], fd.ops.mul(gs[0], 0.1)), alias_input=ps[0])
        fd.add_output(fd.ops.matmul(ps[1], w))
        fd.add_output(fd.ops.sub(ps[1], fd.ops.mul(gs[1], 0.1)), alias_input=ps[1])
    for _ in range(3):
        params = [make((8, 128)) for _ in range(2)]
        grads = [make((8, 128)) for _ in range(2)]
        weight = make((128, 4))
        product = params[1] @ weight
        expected = _expected(params, grads)
        (got,) = fd.execute(params + grads + [weight])
        torch.testing.assert_close(got, product)
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e)
    assert launches["batched"] == []


@DEVICES
def test_an_update_moved_to_the_batch_keeps_an_earlier_read_through_a_view(launches, device):
    # as above, B reading a reshape of C's parameter (an ATen view made before A): C stays
    # after B, so B sums the parameter as it came
    with FusionDefinition() as fd:
        ps = [fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float) for _ in range(2)]
        gs = [fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float) for _ in range(2)]
        flat = fd.ops.reshape(ps[1], [1024])
        fd.add_output(fd.ops.sub(ps[0], fd.ops.mul(gs[0], 0.1)), alias_input=ps[0])
        fd.add_output(fd.ops.sum(flat, [0]))
        fd.add_output(fd.ops.sub(ps[1], fd.ops.mul(gs[1], 0.1)), alias_input=ps[1])
    for _ in range(3):
        params = [make((8, 128)).to(device) for _ in range(2)]
        grads = [make((8, 128)).to(device) for _ in range(2)]
        total, expected = params[1].sum(), _expected(params, grads)
        (got,) = fd.execute(params + grads)
        torch.testing.assert_close(got, total)
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e)
    assert launches["batched"] == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_graph_captures_the_members_one_by_one(launches):
    """A captured call launches the members one by one: the graph would keep the table's
    address, which a later call may free. Each replay updates the parameters again."""
    fd = _updates(3)
    params = [make((8, 128)).cuda() for _ in range(3)]
    grads = [make((8, 128)).cuda() for _ in range(3)]
    for _ in range(2):  # (compiled, and the ready program made, outside the capture)
        fd.execute(params + grads)
    batched_before = list(launches["batched"])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fd.execute(params + grads)
    assert launches["batched"] == batched_before
    for _ in range(2):
        for g in grads:
            g.copy_(torch.randn_like(g))
        expected = _expected(params, grads)
        graph.replay()
        torch.cuda.synchronize()
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e)


def test_the_batched_kernel_is_printed_with_the_members():
    fd = _updates(2)
    for _ in range(2):
        fd.execute([make((8, 128)) for _ in range(4)])
    code = fd.last_triton_code()
    assert "# one launch of 2 launches of fuser_pointwise_" in code
    assert "_batched_" in code and "batch_member" in code


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_call_on_another_stream_copies_its_own_table(monkeypatch):
    """The table is remembered with the stream it was copied on: a call on another stream, the
    same tensors passed, copies its own (the first stream's copy may not have arrived)."""
    made = []
    table = batched.BatchedLaunch._table
    monkeypatch.setattr(batched.BatchedLaunch, "_table", lambda self, a, d: made.append(1) or table(self, a, d))
    fd = _updates(2)
    params = [make((8, 128)).cuda() for _ in range(2)]
    grads = [make((8, 128)).cuda() for _ in range(2)]
    side = torch.cuda.Stream()
    for stream in (None, None, side, side, None):
        expected = _expected(params, grads)
        with torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream()):
            fd.execute(params + grads)
        torch.cuda.synchronize()
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e)
    assert len(made) == 3  # (the second call's, the side stream's, the default stream's again)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_batched_kernel_that_fails_to_compile_leaves_the_members_one_by_one(launches, monkeypatch):
    """A batched form that does not compile (here made so) warns once; its members run one by
    one at that call and every later one."""
    made = batched.batched_source

    def broken(*args, **kwargs):
        name, text = made(*args, **kwargs)
        return name, text.replace("    batch_program = tl.program_id(0)",
                                  "    tl.static_assert(COUNT < 0)\n    batch_program = tl.program_id(0)")
    monkeypatch.setattr(batched, "batched_source", broken)
    fd = _updates(3)
    params = [make((8, 128)).cuda() for _ in range(3)]
    with pytest.warns(UserWarning, match="failed to compile") as caught:
        for _ in range(4):
            grads = [make((8, 128)).cuda() for _ in range(3)]
            expected = _expected(params, grads)
            fd.execute(params + grads)
            for p, e in zip(params, expected):
                torch.testing.assert_close(p, e)
    assert sum("failed to compile" in str(w.message) for w in caught) == 1
    assert launches["batched"] == []
