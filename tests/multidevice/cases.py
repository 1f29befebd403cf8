"""Multi-device cases, each a function of the device that runs on every rank of a mesh of all
processes: two ranks under torchrun (`worker.py`, gloo on CPU tensors or NCCL on GPUs), or one
process with a mesh of one device (`test_cases.py`). Inputs are integer-valued, so every
result is compared exactly with eager PyTorch on the full tensors; only GELU, whose tanh in a
generated kernel is not ATen's, is compared within a rounding.

A case raises (AssertionError, FuserError) to fail. Nothing here starts processes.
"""
from __future__ import annotations

import contextlib
import os
import re

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import fuser
from fuser import DataType, FusionDefinition, ParallelType
from fuser.multidevice import Communicator, DeviceMesh, shard_tensor

DT = {torch.float32: DataType.Float, torch.bfloat16: DataType.BFloat16}


def world() -> tuple[int, int]:
    comm = Communicator.default()
    return comm.rank, comm.world_size


def ints(*shape, dtype=torch.float32, device="cpu", seed=0):
    """The same integer-valued tensor on every rank (a fixed seed per call site)."""
    g = torch.Generator().manual_seed(seed + 1000 * len(shape) + sum(shape))
    return torch.randint(-3, 4, shape, generator=g).to(dtype).to(device)


def shard_rows(full, d, rank, axis=0):
    n = full.shape[axis] // d
    return full.narrow(axis, rank * n, n)


def exact(actual, expected, what=""):
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert torch.equal(actual.cpu(), expected.cpu()), f"{what}: values differ\n{actual}\nvs\n{expected}"


def shard(fd, k, full):
    return shard_tensor(full, fd.fusion.inputs()[k])


# ---------------------------------------------------------------------------------------------


def resharding(mesh, parts, x_axis=None, y_axis=None):
    """`y = set(x)` on `mesh`, x's axis `x_axis` and y's axis `y_axis` (where given) split into
    `parts` onto mesh_x: the definition of one resharding collective."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.set(x)
        fd.add_output(y)
        for tv, axis in ((x, x_axis), (y, y_axis)):
            tv.set_device_mesh(mesh)
            if axis is not None:
                tv.outer_split(axis, parts)
                tv.axis(axis).parallelize(ParallelType.mesh_x)
    return fd


def case_allgather(device):
    """A row-sharded tensor `set` into a replicated one: an allgather."""
    rank, d = world()
    fd = resharding(DeviceMesh(torch.arange(d)), d, x_axis=0)
    full = ints(3 * d, 5, device=device)
    out, = fd.execute([shard(fd, 0, full)])
    exact(out, full, "allgather")
    _collectives(fd, ["Allgather"])


def _row_parallel(d, mesh, bias, k=8, n=3, out_rows_sharded=False):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, k * d], contiguity=True)
        w = fd.define_tensor([n, k * d], contiguity=True)
        args = [x, w]
        if bias:
            args.append(fd.define_tensor([n], contiguity=True))
        y = fd.ops.linear(*args)
        fd.add_output(y)
        for tv in (x, w):
            tv.set_device_mesh(mesh)
        x.outer_split(1, d)
        x.axis(1).parallelize(ParallelType.mesh_x)
        w.outer_split(1, d)
        w.axis(1).parallelize(ParallelType.mesh_x)
        if out_rows_sharded:
            y.set_device_mesh(mesh)
            y.outer_split(0, d)
            y.axis(0).parallelize(ParallelType.mesh_x)
    return fd


def case_row_parallel_allreduce(device):
    """K sharded: local linear of the shards, then an allreduce; the bias is added once."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    for bias in (False, True):
        fd = _row_parallel(d, mesh, bias)
        x, w, b = ints(6, 8 * d, device=device), ints(3, 8 * d, device=device, seed=1), ints(3, device=device, seed=2)
        args = [shard(fd, 0, x), shard(fd, 1, w)] + ([b] if bias else [])
        out, = fd.execute(args)
        exact(out, F.linear(x, w, b if bias else None), f"row-parallel linear, bias={bias}")
        _collectives(fd, ["Allreduce"])


def case_row_parallel_reduce_scatter(device):
    """K sharded and the output sharded on its rows: a reduce-scatter."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    for bias in (False, True):
        fd = _row_parallel(d, mesh, bias, out_rows_sharded=True)
        x, w, b = ints(4 * d, 8 * d, device=device), ints(3, 8 * d, device=device, seed=1), ints(3, device=device, seed=2)
        args = [shard(fd, 0, x), shard(fd, 1, w)] + ([b] if bias else [])
        out, = fd.execute(args)
        exact(out, shard_rows(F.linear(x, w, b if bias else None), d, rank), f"reduce-scatter, bias={bias}")
        _collectives(fd, ["ReduceScatter"])


def case_row_parallel_matmul_on_streams(device):
    """matmul(a, b) with the contraction sharded and a's rows split onto 2 streams: per chunk,
    a local matmul into the output chunk and an allreduce of the chunk."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, 4 * d], contiguity=True)
        b = fd.define_tensor([4 * d, -1], contiguity=True)
        fd.add_output(fd.ops.matmul(a, b))
        for tv, axis in ((a, 1), (b, 0)):
            tv.set_device_mesh(mesh)
            tv.outer_split(axis, d)
            tv.axis(axis).parallelize(ParallelType.mesh_x)
        a.outer_split(0, 2)
        a.axis(0).parallelize(ParallelType.stream)
    af, bf = ints(6, 4 * d, device=device), ints(4 * d, 5, device=device, seed=1)
    (out,), calls = mm_calls(lambda: fd.execute([shard(fd, 0, af), shard(fd, 1, bf)]))
    exact(out, af @ bf, "row-parallel matmul on streams")
    assert [list(c[0]) for c in calls] == [[3, 4]] * 2, calls
    _collectives(fd, ["Allreduce"])


def seed_definition(d, s=3, h=2, dtype=DataType.Float):
    """The seed issue's configuration: x [t, 4h] split by s onto streams (rows) and by d onto
    mesh_x (columns), the weight [h, 4h] by d onto mesh_x."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 4 * h], contiguity=True, dtype=dtype)
        w = fd.define_tensor(shape=[h, 4 * h], contiguity=True, dtype=dtype)
        fd.add_output(fd.ops.linear(x, w))
        mesh = DeviceMesh(torch.arange(d))
        for tv in (x, w):
            tv.set_device_mesh(mesh)
        x.outer_split(0, s)
        x.axis(0).parallelize(ParallelType.stream)
        x.outer_split(2, d)
        x.axis(2).parallelize(ParallelType.mesh_x)
        w.outer_split(1, d)
        w.axis(1).parallelize(ParallelType.mesh_x)
    return fd


def mm_calls(fn, op: str = "aten::mm"):
    """(fn's result, the input shapes of every `op` (aten::mm) it ran)."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        result = fn()
    return result, [e.input_shapes for e in prof.events() if e.name == op]


def case_seed(device, dtype=torch.float32):
    """s matmuls of [t/s, 4h/d] chunks, each allreduced; the same runtime for another t."""
    rank, d = world()
    s, h = 3, 2 * d
    fd = seed_definition(d, s, h, DT[dtype])
    for t in (6, 12):
        x, w = ints(t, 4 * h, dtype=dtype, device=device), ints(h, 4 * h, dtype=dtype, device=device, seed=1)
        (out,), calls = mm_calls(lambda: fd.execute([shard(fd, 0, x), shard(fd, 1, w)]))
        exact(out, F.linear(x, w), f"seed t={t}")
        assert len(calls) == s, f"t={t}: {len(calls)} aten::mm calls, expected {s}: {calls}"
        for c in calls:
            assert list(c[0]) == [t // s, 4 * h // d], f"t={t}: aten::mm input {c[0]}, expected [{t // s}, {4 * h // d}]"
    # the weight is transposed once an execution, not once a chunk
    _, transposes = mm_calls(lambda: fd.execute([shard(fd, 0, x), shard(fd, 1, w)]), "aten::t")
    assert len(transposes) == 1, f"{len(transposes)} aten::t calls in one execution of {s} chunks"
    # rows that do not divide by s: the last chunk is shorter, still one runtime
    x, w = ints(7, 4 * h, dtype=dtype, device=device), ints(h, 4 * h, dtype=dtype, device=device, seed=1)
    (out,), calls = mm_calls(lambda: fd.execute([shard(fd, 0, x), shard(fd, 1, w)]))
    exact(out, F.linear(x, w), "seed t=7")
    assert [c[0][0] for c in calls] == [3, 3, 1], calls
    assert fd.cache.num_runtimes == 1, f"{fd.cache.num_runtimes} runtimes for three values of t"


def case_column_parallel_stream_allgather(device):
    """x sharded on rows, the weight on its output rows (column-parallel); the output splits
    the rows onto streams: x is allgathered chunk by chunk inside the stream loop."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    for s, annotate_y in ((d, True), (2 * d, True), (2 * d, False)):
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, 5], contiguity=True)
            w = fd.define_tensor([-1, 5], contiguity=True)
            y = fd.ops.linear(x, w)
            fd.add_output(y)
            for tv in (x, w):
                tv.set_device_mesh(mesh)
            x.outer_split(0, d)
            x.axis(0).parallelize(ParallelType.mesh_x)
            w.outer_split(0, d)
            w.axis(0).parallelize(ParallelType.mesh_x)
            if annotate_y:  # else y's mesh and column split come from w by propagation
                y.set_device_mesh(mesh)
                y.outer_split(1, d)
                y.axis(1).parallelize(ParallelType.mesh_x)
            y.outer_split(0, s)
            y.axis(0).parallelize(ParallelType.stream)
        xf, wf = ints(2 * s, 5, device=device), ints(3 * d, 5, device=device, seed=1)
        (out,), calls = mm_calls(lambda: fd.execute([shard(fd, 0, xf), shard(fd, 1, wf)]))
        exact(out, shard_rows(F.linear(xf, wf), d, rank, axis=1), f"column-parallel, s={s}")
        assert len(calls) == s and all(list(c[0]) == [2, 5] for c in calls), calls
        _collectives(fd, ["Broadcast"])
        assert "FOR" in str(fd.cache.last_runtime.program)


def tp_mlp_definition(d, h=4, dtype=DataType.Float, act="relu"):
    """Column-parallel linear (+ sharded bias), an activation, row-parallel linear (+ bias)."""
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, h], contiguity=True, dtype=dtype)
        w1 = fd.define_tensor([4 * h, h], contiguity=True, dtype=dtype)
        b1 = fd.define_tensor([4 * h], contiguity=True, dtype=dtype)
        w2 = fd.define_tensor([h, 4 * h], contiguity=True, dtype=dtype)
        b2 = fd.define_tensor([h], contiguity=True, dtype=dtype)
        y1 = fd.ops.linear(x, w1, b1)
        if act == "relu":
            a = fd.ops.relu(y1)
        else:  # gelu, tanh approximation
            a = _gelu_tanh(fd, y1)
        fd.add_output(fd.ops.linear(a, w2, b2))
        for tv in (x, w1, b1, w2, b2):
            tv.set_device_mesh(mesh)
        for tv, axis in ((w1, 0), (b1, 0), (w2, 1)):
            tv.outer_split(axis, d)
            tv.axis(axis).parallelize(ParallelType.mesh_x)
    return fd


def case_tp_mlp(device):
    rank, d = world()
    h = 4
    fd = tp_mlp_definition(d, h)
    full = [ints(5, h, device=device), ints(4 * h, h, device=device, seed=1), ints(4 * h, device=device, seed=2),
            ints(h, 4 * h, device=device, seed=3), ints(h, device=device, seed=4)]
    out, = fd.execute([shard(fd, k, t) for k, t in enumerate(full)])
    x, w1, b1, w2, b2 = full
    exact(out, F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2), "tensor-parallel MLP")
    _collectives(fd, ["Allreduce"])


def case_all_to_all(device):
    """A device axis moved from rows to columns."""
    rank, d = world()
    fd = resharding(DeviceMesh(torch.arange(d)), d, x_axis=0, y_axis=1)
    full = ints(2 * d, 3 * d, device=device)
    out, = fd.execute([shard(fd, 0, full)])
    exact(out, shard_rows(full, d, rank, axis=1), "all-to-all")
    _collectives(fd, ["AllToAll"])


def case_an_expanded_broadcast_meets_a_shard(device):
    """`x - broadcast_in_dim(r, x.shape(), [0])` with x's columns sharded: the expanded operand
    keeps x's global column count, and ATen refused it against the shard (an InternalError on
    every rank); its one value a row now broadcasts to the local columns."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        r = fd.define_tensor([-1], contiguity=True)
        fd.add_output(fd.ops.sub(x, fd.ops.broadcast_in_dim(r, x.shape(), [0])))
        x.set_device_mesh(mesh)
        r.set_device_mesh(mesh)
        x.outer_split(1, d)
        x.axis(1).parallelize(ParallelType.mesh_x)
    full, rows = ints(4, 3 * d, device=device), ints(4, device=device, seed=1)
    out, = fd.execute([shard_rows(full, d, rank, axis=1).contiguous(), rows])
    exact(out, shard_rows(full - rows[:, None], d, rank, axis=1), "sharded x minus an expanded row vector")


def case_replicated_to_sharded(device):
    """Replicated to sharded: a local slice; then a sum over the sharded axis: an allreduce."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.set(x)
        z = fd.ops.sum(fd.ops.mul(y, 2.0), [1])
        m = fd.ops.max(y, [1])
        fd.add_output(y)
        fd.add_output(z)
        fd.add_output(m)
        x.set_device_mesh(mesh)
        y.set_device_mesh(mesh)
        y.outer_split(1, d)
        y.axis(1).parallelize(ParallelType.mesh_x)
    full = ints(4, 2 * d, device=device)
    y_out, z_out, m_out = fd.execute([full])
    exact(y_out, shard_rows(full, d, rank, axis=1), "shard")
    exact(z_out, (full * 2).sum(1), "sum over a sharded axis")
    exact(m_out, full.amax(1), "max over a sharded axis")
    _collectives(fd, ["Shard", "Allreduce", "Allreduce"])


def case_replicated_inputs_to_a_sharded_output_through_an_op(device):
    """An op whose output is annotated sharded while its inputs are replicated: computed from
    the inputs' local slices (a relu), or whole then sliced (a linear's rows)."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        w = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.relu(x)
        z = fd.ops.linear(x, w)
        fd.add_output(y)
        fd.add_output(z)
        for t in (x, w, y, z):
            t.set_device_mesh(mesh)
        y.outer_split(1, d)
        y.axis(1).parallelize(ParallelType.mesh_x)
        z.outer_split(0, d)
        z.axis(0).parallelize(ParallelType.mesh_x)
    full, weight = ints(2 * d, 4 * d, device=device), ints(3, 4 * d, device=device, seed=1)
    y_out, z_out = fd.execute([full, weight])
    exact(y_out, shard_rows(torch.relu(full), d, rank, axis=1), "relu, sharded output")
    exact(z_out, shard_rows(F.linear(full, weight), d, rank), "linear, rows of the output")


def _split_on_mesh(tv, axis, mesh, d):
    tv.set_device_mesh(mesh)
    tv.outer_split(axis, d)
    tv.axis(axis).parallelize(ParallelType.mesh_x)


def case_linear_contraction_split_from_the_sharded_input(device):
    """A linear whose contraction is sharded on one operand only, with the mesh axis also
    wanted on the output's rows (x by rows, w by K, y annotated by rows: a reduce-scatter), or
    already used by the other operand's output axis (x by K, w by N): the operand that must be
    resharded onto K takes the split of the one sharded there."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    for x_axis, w_axis, y_axis, out_axis in ((0, 1, 0, 0), (1, 0, None, 1)):
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, -1], contiguity=True)
            w = fd.define_tensor([-1, -1], contiguity=True)
            y = fd.ops.linear(x, w)
            fd.add_output(y)
            _split_on_mesh(x, x_axis, mesh, d)
            _split_on_mesh(w, w_axis, mesh, d)
            if y_axis is not None:
                _split_on_mesh(y, y_axis, mesh, d)
        full_x, full_w = ints(2 * d, 4 * d, device=device), ints(2 * d, 4 * d, device=device, seed=1)
        (out,) = fd.execute([shard(fd, 0, full_x), shard(fd, 1, full_w)])
        exact(out, shard_rows(F.linear(full_x, full_w), d, rank, axis=out_axis), f"x on {x_axis}, w on {w_axis}")


def case_an_op_between_two_meshes_is_refused(device):
    """x on one mesh, z = set(relu(x)) on the same ranks in another order: the relu takes x's
    mesh by propagation, and the set between the two meshes is refused (it ran no collective
    and returned x's blocks in z's places)."""
    rank, d = world()
    if d == 1:
        return  # (one device: the two meshes are one)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        z = fd.ops.set(fd.ops.relu(x))
        fd.add_output(z)
        _split_on_mesh(x, 0, DeviceMesh(torch.arange(d)), d)
        _split_on_mesh(z, 0, DeviceMesh(torch.arange(d).flip(0)), d)
    try:
        fd.execute([shard(fd, 0, ints(2 * d, 3, device=device))])
    except fuser.UnsupportedError as err:
        assert "different meshes" in str(err), str(err)
    else:
        raise AssertionError("an op between two meshes was accepted")


def case_an_alias_sharded_otherwise_than_its_input_is_refused(device):
    """add_output(y, alias_input=x) with y replicated and x sharded, or the other way: a
    FusionDefinitionError on every rank (copy_ raised torch's size error, or broadcast the
    rank's row of y into every row of x)."""
    rank, d = world()
    if d == 1:
        return  # (one device: a shard is the whole tensor)
    mesh = DeviceMesh(torch.arange(d))
    for sharded_input in (True, False):
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, -1], contiguity=True)
            y = fd.ops.set(fd.ops.mul(x, 2.0))
            fd.add_output(y, alias_input=x)
            x.set_device_mesh(mesh)
            y.set_device_mesh(mesh)
            _split_on_mesh(x if sharded_input else y, 0, mesh, d)
        full = ints(2 * d, 3, device=device)
        given = shard(fd, 0, full) if sharded_input else full.clone()
        try:
            fd.execute([given])
        except fuser.FusionDefinitionError as err:
            assert "must be sharded across the device mesh as its input is" in str(err), str(err)
        else:
            raise AssertionError(f"an alias sharded otherwise than its input ran (input sharded: {sharded_input})")


def case_sharded_attention(device):
    """sdpfa_fwd with q, k, v sharded on heads (tensor-parallel attention), and with q sharded
    on its sequence, causal or not (the causal mask reads each row's global position, so a
    causal q is gathered first). The rule indexed the op's 0-dim seed and offset outputs."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    b, H, L, E = 1, 2 * d, 4 * d, 8
    full = [ints(b, H, L, E, device=device, seed=20 + k) / 4 for k in range(3)]
    for axis, sharded, causal in ((1, (0, 1, 2), False), (1, (0, 1, 2), True), (2, (0,), False), (2, (0,), True)):
        with FusionDefinition() as fd:
            ts = [fd.define_tensor([b, H, L, E], contiguity=True) for _ in range(3)]
            z = fd.ops.set(fd.ops.sdpfa_fwd(*ts, is_causal=causal)[0])
            fd.add_output(z)
            for k, t in enumerate(ts):
                _split_on_mesh(t, axis, mesh, d) if k in sharded else t.set_device_mesh(mesh)
            z.set_device_mesh(mesh)
        args = [shard_rows(t, d, rank, axis=axis).contiguous() if k in sharded else t for k, t in enumerate(full)]
        (out,) = fd.execute(args)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(*full, is_causal=causal), rtol=1e-3, atol=1e-3,
                                   msg=lambda m: f"sharded on axis {axis}, causal={causal}: {m}")


def case_shard_sizes_checked_across_ranks(device):
    """Ranks passing shards of different sizes for a symbolic extent: unchecked by default
    (the sizes are not exchanged), each rank bound its own column count and divided a mean by
    it. With FUSER_CHECK_SHARDS=1 every rank raises an ExtentConflictError naming each rank's
    value, and matching shards still run."""
    rank, d = world()
    if d == 1:
        return
    mesh = DeviceMesh(torch.arange(d))

    def definition():
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, -1], contiguity=True)
            z = fd.ops.set(fd.ops.sum(x, [1]))
            fd.add_output(z)
            _split_on_mesh(x, 1, mesh, d)
            z.set_device_mesh(mesh)
        return fd

    full = ints(3, 4 * d, device=device)
    mine = full[:, :4 - rank] if rank < 2 else shard_rows(full, d, rank, axis=1)  # rank 1: 3 columns
    with _check_shards_on():
        fd = definition()
        try:
            fd.execute([mine.contiguous()])
        except fuser.ExtentConflictError as err:
            msg = str(err)
            for pattern in (rf"rank 0: {4 * d}\b", rf"rank 1: {3 * d}\b", r"input 0\b", "FUSER_CHECK_SHARDS"):
                assert re.search(pattern, msg), f"{pattern!r} not in: {msg}"
        else:
            raise AssertionError("shards of different sizes on the ranks were accepted")
        (out,) = fd.execute([shard_rows(full, d, rank, axis=1).contiguous()])
        exact(out, full.sum(1), "matching shards after a mismatch")


@contextlib.contextmanager
def _check_shards_on():
    """FUSER_CHECK_SHARDS=1 for the runtimes made inside (it is read when one is made)."""
    before = os.environ.get("FUSER_CHECK_SHARDS")
    os.environ["FUSER_CHECK_SHARDS"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["FUSER_CHECK_SHARDS"]
        else:
            os.environ["FUSER_CHECK_SHARDS"] = before


def case_a_rank_refused_before_the_shard_check_fails_every_rank(device):
    """With FUSER_CHECK_SHARDS=1, a rank whose input is refused before its exchange (a wrong
    dtype) and that goes on to the next fusion paired its exchange with the other rank's first
    fusion: their collectives then mixed a sum with a max, wrong values and no error. The
    exchange now starts with the program's fingerprint: both ranks raise, and stay in step."""
    rank, d = world()
    if d == 1:
        return
    mesh = DeviceMesh(torch.arange(d))

    def definition(op):
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, -1], contiguity=True)
            fd.add_output(getattr(fd.ops, op)(x, [1]))
            _split_on_mesh(x, 1, mesh, d)
        return fd

    full = ints(4, 2 * d, device=device)
    mine = shard_rows(full, d, rank, axis=1).contiguous()
    with _check_shards_on():
        first, second = definition("sum"), definition("max")

        def refused(fd, arg, pattern):
            try:
                fd.execute([arg])
            except fuser.FusionInputError as err:
                assert re.search(pattern, str(err)), f"{pattern!r} not in: {err}"
            else:
                raise AssertionError(f"rank {rank}: no error where {pattern!r} was expected")

        if rank == 1:
            refused(first, mine.double(), "expected dtype")
        refused(second if rank == 1 else first, mine, "different fusions")
        (out,) = second.execute([mine])
        exact(out, full.amax(1), "the next fusion, every rank in step again")


def case_weight_sharding_wins(device):
    """x sharded on rows, the weight on the contraction: the output follows the weight (a
    partial sum, allreduced) and x is resharded onto the contraction by an all-to-all."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, 4 * d], contiguity=True)
        w = fd.define_tensor([3, 4 * d], contiguity=True)
        fd.add_output(fd.ops.linear(x, w))
        for tv, axis in ((x, 0), (w, 1)):
            tv.set_device_mesh(mesh)
            tv.outer_split(axis, d)
            tv.axis(axis).parallelize(ParallelType.mesh_x)
    x, w = ints(2 * d, 4 * d, device=device), ints(3, 4 * d, device=device, seed=1)
    out, = fd.execute([shard(fd, 0, x), shard(fd, 1, w)])
    exact(out, F.linear(x, w), "weight sharding wins")
    _collectives(fd, ["AllToAll", "Allreduce"])


def case_2d_mesh(device):
    """A 2-D mesh: the contraction sharded on mesh_y of a (d x 1) mesh, then on mesh_x of a
    (1 x d) mesh."""
    rank, d = world()
    for devices, pt in ((torch.arange(d).reshape(d, 1), ParallelType.mesh_y),
                        (torch.arange(d).reshape(1, d), ParallelType.mesh_x)):
        mesh = DeviceMesh(devices)
        assert mesh.size == d
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, 4 * d], contiguity=True)
            w = fd.define_tensor([3, 4 * d], contiguity=True)
            fd.add_output(fd.ops.linear(x, w))
            for tv in (x, w):
                tv.set_device_mesh(mesh)
                tv.outer_split(1, d)
                tv.axis(1).parallelize(pt)
        x, w = ints(5, 4 * d, device=device), ints(3, 4 * d, device=device, seed=1)
        out, = fd.execute([shard(fd, 0, x), shard(fd, 1, w)])
        exact(out, F.linear(x, w), f"2-D mesh {tuple(devices.shape)} on {pt.name}")


def case_bad_shard(device):
    """A shard of the wrong size: a FusionInputError naming the input, the axis, and the
    expected local and global sizes."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    fd = _row_parallel(d, mesh, False)
    w = ints(3, 8 * d, device=device)
    bad = ints(6, 8 - 1, device=device)
    try:
        fd.execute([bad, shard(fd, 1, w)])
    except fuser.FusionInputError as err:
        msg = str(err)
        for pattern in (r"input 0\b", r"axis 1\b", r"local size 7\b", rf"global extent {8 * d}\b",
                        r"local size 8\b"):
            assert re.search(pattern, msg), f"{pattern!r} not in: {msg}"
    else:
        raise AssertionError("a shard of the wrong size was accepted")
    # and the definition still works
    x = ints(6, 8 * d, device=device)
    out, = fd.execute([shard(fd, 0, x), shard(fd, 1, w)])
    exact(out, F.linear(x, w), "after a bad input")


def case_allgather_columns_and_mesh_order(device):
    """Allgathers that do not land straight in the output (a gathered axis other than the
    rows, a mesh listing its devices out of order, chunks of a stream loop): the shards come
    end to end through a buffer, the only form gloo takes."""
    rank, d = world()
    for devices, axis, s in ((torch.arange(d), 1, None), (torch.arange(d).flip(0), 0, None),
                             (torch.arange(d), 1, 2)):
        mesh = DeviceMesh(devices)
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, -1], contiguity=True)
            y = fd.ops.set(x)
            fd.add_output(y)
            x.set_device_mesh(mesh)
            y.set_device_mesh(mesh)
            x.outer_split(axis, d)
            x.axis(axis).parallelize(ParallelType.mesh_x)
            if s is not None:  # y's rows onto streams: the gather runs chunk by chunk
                y.outer_split(0, s)
                y.axis(0).parallelize(ParallelType.stream)
        for t in ((4, 5) if axis == 1 else (2 * d, 4 * d)):
            full = ints(t, 3 * d, device=device)
            out, = fd.execute([shard(fd, 0, full)])
            exact(out, full, f"allgather of axis {axis} on {devices.tolist()}, s={s}, t={t}")


def _expect_uneven(fn, pattern: str) -> None:
    try:
        fn()
    except fuser.FusionInputError as err:
        assert re.search(pattern, str(err)), f"{pattern!r} not in: {err}"
    else:
        raise AssertionError(f"an uneven split was accepted ({pattern})")


def case_uneven_reshardings(device):
    """A resharding that cuts an axis the mesh does not divide (a shard of a replicated input,
    a reduce-scatter of the rows, an all-to-all onto the columns): a FusionInputError naming
    the collective, tensor, axis and size, not an internal error or a bare torch error; even
    sizes still work afterwards."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    fd = resharding(mesh, d, y_axis=1)
    rs = _row_parallel(d, mesh, False, out_rows_sharded=True)
    a2a = resharding(mesh, d, x_axis=0, y_axis=1)
    w = ints(3, 8 * d, device=device, seed=1)
    if d > 1:  # one device divides everything
        odd = 2 * d + 1
        _expect_uneven(lambda: fd.execute([ints(4, odd, device=device)]),
                       rf"Shard of T0: axis 1 of size {odd} does not split evenly into {d} shards")
        _expect_uneven(lambda: rs.execute([shard(rs, 0, ints(odd, 8 * d, device=device)), shard(rs, 1, w)]),
                       rf"ReduceScatter of T\d+: axis 0 of size {odd} does not split evenly into {d}")
        _expect_uneven(lambda: a2a.execute([shard(a2a, 0, ints(2 * d, odd, device=device))]),
                       rf"AllToAll of T0: axis 1 of size {odd} does not split evenly into {d}")
    full = ints(4, 2 * d, device=device)
    out, = fd.execute([full])
    exact(out, shard_rows(full, d, rank, axis=1), "shard after an uneven one")
    xf = ints(2 * d, 8 * d, device=device)
    out, = rs.execute([shard(rs, 0, xf), shard(rs, 1, w)])
    exact(out, shard_rows(F.linear(xf, w), d, rank), "reduce-scatter after an uneven one")
    full = ints(2 * d, 3 * d, device=device)
    out, = a2a.execute([shard(a2a, 0, full)])
    exact(out, shard_rows(full, d, rank, axis=1), "all-to-all after an uneven one")


# ---------------------------------------------------------------------------------------------
# Generated kernels inside stream loops and on device shards.

# ATen ops the evaluator runs for pointwise exprs and casts: none of them may run where kernels do
ELEMENTWISE_ATEN = {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::tanh", "aten::relu",
                    "aten::clamp_min", "aten::maximum", "aten::_to_copy", "aten::to", "aten::gelu",
                    "aten::sum", "aten::amax", "aten::max"}


def traced(fd, args) -> tuple[list, list]:
    """fd.execute(args) once, then the same execution through the runtime's host runner with a
    trace: (outputs, [(what ran: "Evaluate", "LaunchKernel" or a collective, output shapes)])."""
    fd.execute(args)
    seen: list = []
    outs = fd.cache.last_runtime.runner.run(
        args, fd.cache._binder.bind(args),
        trace=lambda what, x, values: seen.append((what, [tuple(v.shape) for v in values])))
    return outs, seen


def profiled(fn):
    """(fn's result, the ATen events it ran: name and input shapes)."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        result = fn()
    return result, [(e.name, e.input_shapes) for e in prof.events()]


def loop_segments(fd) -> list[tuple[str, list[str]]]:
    """(Evaluate or LaunchKernel, op names) of each segment in the host program's stream loop."""
    from fuser.hostir.nodes import Evaluate, ForLoop, LaunchKernel, Synchronize

    program = fd.cache.last_runtime.program
    loop = next(op for op in program.body if isinstance(op, ForLoop)
                and not all(isinstance(x, Synchronize) for x in op.body))
    return [(type(op).__name__, [e.op_name for e in op.segment.exprs]) for op in loop.body
            if isinstance(op, (Evaluate, LaunchKernel))]


def _gelu_tanh(fd, y):
    inner = fd.ops.mul(fd.ops.add(y, fd.ops.mul(fd.ops.mul(fd.ops.mul(y, y), y), 0.044715)), 0.7978845608028654)
    return fd.ops.mul(fd.ops.mul(y, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))


def column_parallel_act_definition(d, s=3, k=4, n=2, act="gelu"):
    """x [t, k] with its rows on s streams, a column-parallel linear (w [n d, k] and b [n d]
    sharded on their rows), GELU (tanh approximation) or relu, and a cast to bf16: per chunk, a
    linear into the [t/s, n] chunk and one kernel that writes the chunk of the output."""
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, k], contiguity=True)
        w = fd.define_tensor([n * d, k], contiguity=True)
        b = fd.define_tensor([n * d], contiguity=True)
        y = fd.ops.linear(x, w, b)
        a = _gelu_tanh(fd, y) if act == "gelu" else fd.ops.relu(y)
        fd.add_output(fd.ops.cast(a, DataType.BFloat16))
        for tv in (x, w, b):
            tv.set_device_mesh(mesh)
        for tv in (w, b):
            tv.outer_split(0, d)
            tv.axis(0).parallelize(ParallelType.mesh_x)
        x.outer_split(0, s)
        x.axis(0).parallelize(ParallelType.stream)
    return fd


def _chunks(t, s):
    c = -(-t // s)
    return [max(0, min(c, t - j * c)) for j in range(s)]


def case_column_parallel_activation_kernel_on_streams(device):
    """Chunk by chunk on streams: the linear through ATen, then GELU (or relu) and the cast as
    one generated kernel per chunk, written into the output's chunk; uneven chunks (t = 7 by 3)
    and a second and third size run on the same runtime."""
    rank, d = world()
    s, k, n = 3, 4, 2
    for act in ("relu", "gelu"):
        fd = column_parallel_act_definition(d, s, k, n, act)
        for t in (6, 7, 9):
            X, W = ints(t, k, device=device), ints(n * d, k, device=device, seed=1)
            B = ints(n * d, device=device, seed=2)
            args = [shard(fd, 0, X), shard(fd, 1, W), shard(fd, 2, B)]
            (out,), events = profiled(lambda: fd.execute(args))
            y = F.linear(X, W, B)
            want = shard_rows((F.gelu(y, approximate="tanh") if act == "gelu" else torch.relu(y)).to(torch.bfloat16),
                              d, rank, axis=1)
            if act == "relu":  # integers: exact
                exact(out, want, f"column-parallel relu, t={t}")
            else:  # the kernel's tanh is not ATen's: within a bf16 rounding
                assert out.shape == want.shape and out.dtype == want.dtype, (out.shape, out.dtype)
                torch.testing.assert_close(out.float(), want.float(), rtol=1e-2, atol=1e-2)
            ran = {name for name, _ in events}
            assert not ran & ELEMENTWISE_ATEN, f"{act}, t={t}: ATen ran {sorted(ran & ELEMENTWISE_ATEN)}"
            linears = [shapes[0] for name, shapes in events if name == "aten::linear"]
            assert [r[0] for r in linears] == _chunks(t, s), linears
            (again,), seen = traced(fd, args)
            exact(again, out, f"{act}, t={t}: the traced run")
            kernels = [shapes[0] for what, shapes in seen if what == "LaunchKernel"]
            assert kernels == [(c, n) for c in _chunks(t, s)], f"t={t}: kernel launches {kernels}"
        assert fd.cache.num_runtimes == 1, f"{fd.cache.num_runtimes} runtimes for three values of t"
        segs = loop_segments(fd)
        assert [kind for kind, _ in segs] == ["Evaluate", "LaunchKernel"], segs
        assert segs[0][1] == ["LinearOp"] and segs[1][1][-1] == "CastOp", segs
        text = str(fd.cache.last_runtime.program)
        assert re.search(rf"FOR i\d+ from 0 to 3:(\n    .*)*\n    LaunchKernel \(Triton\) over local extents "
                         rf"\[\( ceilDiv\(i0, 3\) \), {n}\]:", text), text


def case_row_parallel_matmul_bias_relu_on_streams(device):
    """A matmul whose contraction is sharded, its rows on 3 streams: per chunk, the local
    matmul, the allreduce of the chunk, then the bias add and relu as one kernel into the
    output's chunk. Rows that do not divide by 3, and a second size on the same runtime."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, 4 * d], contiguity=True)
        b = fd.define_tensor([4 * d, 5], contiguity=True)
        bias = fd.define_tensor([5], contiguity=True)
        fd.add_output(fd.ops.relu(fd.ops.add(fd.ops.matmul(a, b), bias)))
        for tv, axis in ((a, 1), (b, 0)):
            tv.set_device_mesh(mesh)
            tv.outer_split(axis, d)
            tv.axis(axis).parallelize(ParallelType.mesh_x)
        bias.set_device_mesh(mesh)
        a.outer_split(0, 3)
        a.axis(0).parallelize(ParallelType.stream)
    for t in (7, 6):
        af, bf = ints(t, 4 * d, device=device), ints(4 * d, 5, device=device, seed=1)
        cf = ints(5, device=device, seed=2)
        args = [shard(fd, 0, af), shard(fd, 1, bf), cf]
        (out,), events = profiled(lambda: fd.execute(args))
        exact(out, torch.relu(af @ bf + cf), f"matmul + bias + relu on streams, t={t}")
        ran = {name for name, _ in events}
        assert not ran & ELEMENTWISE_ATEN, f"t={t}: ATen ran {sorted(ran & ELEMENTWISE_ATEN)}"
        _, seen = traced(fd, args)
        per_chunk = [what for what, _ in seen]
        # the bias broadcast (a view, through ATen) before the loop, then per chunk
        assert per_chunk == ["Evaluate"] + ["Evaluate", "Allreduce", "LaunchKernel"] * 3, per_chunk
        kernels = [shapes[0] for what, shapes in seen if what == "LaunchKernel"]
        assert kernels == [(c, 5) for c in _chunks(t, 3)], kernels
    assert fd.cache.num_runtimes == 1
    assert [kind for kind, _ in loop_segments(fd)] == ["Evaluate", "LaunchKernel"], loop_segments(fd)
    _collectives(fd, ["Allreduce"])


def case_kernels_on_device_shards(device):
    """Outside stream loops, kernels run on the local shards of tensors sharded on mesh axes:
    the tensor-parallel MLP's activation on the [t, 4h/d] shard, and partial sums and maxima
    over a sharded axis (then allreduced)."""
    rank, d = world()
    h = 4
    for act in ("relu", "gelu"):
        fd = tp_mlp_definition(d, h, act=act)
        full = [ints(5, h, device=device), ints(4 * h, h, device=device, seed=1), ints(4 * h, device=device, seed=2),
                ints(h, 4 * h, device=device, seed=3), ints(h, device=device, seed=4)]
        args = [shard(fd, k, t) for k, t in enumerate(full)]
        (out,), seen = traced(fd, args)
        x, w1, b1, w2, b2 = full
        y1 = F.linear(x, w1, b1)
        want = F.linear(torch.relu(y1) if act == "relu" else F.gelu(y1, approximate="tanh"), w2, b2)
        if act == "relu":
            exact(out, want, "tensor-parallel MLP, relu kernel on the shards")
        else:
            torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)
        kernels = [shapes[0] for what, shapes in seen if what == "LaunchKernel"]
        assert kernels[0] == (5, 4 * h // d), f"{act}: kernels {kernels}"
        assert re.search(rf"LaunchKernel \(Triton\) over local extents \[i0, {4 * h // d}\]:",
                         str(fd.cache.last_runtime.program))
    mesh = DeviceMesh(torch.arange(d))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.set(x)
        fd.add_output(fd.ops.sum(fd.ops.mul(y, 2.0), [1]))
        fd.add_output(fd.ops.max(y, [1]))
        x.set_device_mesh(mesh)
        y.set_device_mesh(mesh)
        y.outer_split(1, d)
        y.axis(1).parallelize(ParallelType.mesh_x)
    for cols in (3, 5):
        full = ints(4, cols * d, device=device)
        (z, m), seen = traced(fd, [full])
        exact(z, (full * 2).sum(1), f"sum over a sharded axis, {cols} columns a shard")
        exact(m, full.amax(1), f"max over a sharded axis, {cols} columns a shard")
        assert [w for w in seen if w[0] == "LaunchKernel"] == [("LaunchKernel", [(4,)])] * 2, seen
    _collectives(fd, ["Shard", "Allreduce", "Allreduce"])


def _collectives(fd, expected: list[str]) -> None:
    found = [s.exprs[0].op_name for s in fd.last_segments() if s.kind.value == "communication"]
    assert found == expected, f"collectives {found}, expected {expected}"




def _sum_over_columns_sharded(d, mesh, dtype, dims):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=dtype)
        y = fd.ops.sum(x, dims)
        fd.add_output(y)
        for tv in (x, y):
            tv.set_device_mesh(mesh)
        x.outer_split(1, d)
        x.axis(1).parallelize(ParallelType.mesh_x)
    return fd


def case_a_half_sum_over_the_sharded_axis_rounds_once(device):
    """A bf16 sum over the sharded axis: each rank's fp32 partial was rounded to bf16 before the
    allreduce (in bf16), so [1000, 0.5 | -1000, 0.5] summed to 0 where eager gives 1 (fifty-
    fifth session). The partials and the collective stay fp32; the sum is rounded once."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    fd = _sum_over_columns_sharded(d, mesh, DataType.BFloat16, [1])
    pieces = [torch.tensor([1000.0 if k % 2 == 0 else -1000.0, 0.5]) for k in range(d)]
    full = torch.cat(pieces).reshape(1, 2 * d).to(torch.bfloat16).to(device)
    out, = fd.execute([shard(fd, 0, full)])
    exact(out, full.float().sum(1).to(torch.bfloat16), "bf16 sum over the sharded axis")
    g = torch.Generator().manual_seed(7)
    full = torch.randn(3, 64 * d, generator=g).to(torch.bfloat16).to(device)
    out, = fd.execute([shard(fd, 0, full)])
    torch.testing.assert_close(out.float().cpu(), full.float().sum(1).to(torch.bfloat16).float().cpu(),
                               rtol=1.6e-2, atol=1e-2)
    _collectives(fd, ["Allreduce"])


def case_a_reduction_over_two_axes_one_sharded(device):
    """`sum(x, [0, 1])` of x sharded on axis 1: a local sum of each shard, then an allreduce.
    The contraction's split was sought on the first reduced axis: an AllToAll moved the whole
    tensor first, and refused rows that the mesh does not divide (fifty-fifth session)."""
    rank, d = world()
    mesh = DeviceMesh(torch.arange(d))
    fd = _sum_over_columns_sharded(d, mesh, DataType.Float, [0, 1])
    for rows in (5, 2 * d):
        full = ints(rows, 4 * d, device=device, seed=rows)
        out, = fd.execute([shard(fd, 0, full)])
        exact(out, full.sum(), f"sum over both axes of {rows} rows")
        _collectives(fd, ["Allreduce"])


# ---------------------------------------------------------------------------------------------
# Four ranks: a 2 x 2 mesh, whose collectives run in subgroups (rows or columns of the mesh).


def case_2x2_mesh(device):
    """x [t, K]: rows on mesh_y, K on mesh_x; w [N, K]: K on mesh_x. The linear's partial sums
    are allreduced within each mesh row (teams {0, 1} and {2, 3}); the output keeps its rows
    on mesh_y, then a set into a replicated tensor allgathers them within each mesh column."""
    rank, n = world()
    assert n == 4, f"needs 4 ranks, got {n}"
    mesh = DeviceMesh(torch.arange(4).reshape(2, 2))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, 8], contiguity=True)
        w = fd.define_tensor([3, 8], contiguity=True)
        y = fd.ops.linear(x, w)
        z = fd.ops.set(y)
        fd.add_output(y)
        fd.add_output(z)
        for tv in (x, w, z):
            tv.set_device_mesh(mesh)
        x.outer_split(0, 2)
        x.axis(0).parallelize(ParallelType.mesh_y)
        x.outer_split(2, 2)
        x.axis(2).parallelize(ParallelType.mesh_x)
        w.outer_split(1, 2)
        w.axis(1).parallelize(ParallelType.mesh_x)
    xf, wf = ints(4, 8, device=device), ints(3, 8, device=device, seed=1)
    y_out, z_out = fd.execute([shard(fd, 0, xf), shard(fd, 1, wf)])
    row = rank // 2  # this rank's mesh_y index
    exact(y_out, shard_rows(F.linear(xf, wf), 2, row), "2x2 mesh: rows on mesh_y, allreduce on mesh_x")
    exact(z_out, F.linear(xf, wf), "2x2 mesh: allgather on mesh_y")
    _collectives(fd, ["Allreduce", "Allgather"])


def case_2x2_mesh_column_allgather(device):
    """Columns sharded on mesh_x of a 2 x 2 mesh, gathered within each mesh row (teams {0, 1}
    and {2, 3}) through the end-to-end buffer."""
    rank, n = world()
    assert n == 4, f"needs 4 ranks, got {n}"
    fd = resharding(DeviceMesh(torch.arange(4).reshape(2, 2)), 2, x_axis=1)
    full = ints(3, 4, device=device)
    out, = fd.execute([shard(fd, 0, full)])
    exact(out, full, "2x2 mesh: columns gathered on mesh_x")


CASES_4 = {"2x2_mesh": case_2x2_mesh, "2x2_mesh_column_allgather": case_2x2_mesh_column_allgather}
CASES = {name[len("case_"):]: fn for name, fn in list(globals().items())
         if name.startswith("case_") and name[len("case_"):] not in CASES_4}
