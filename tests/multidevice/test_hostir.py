"""The host program: its printed form, stream loops on one device (chunk matmuls), chunk-shaped
evaluation and meta inference inside loops, the cache, and errors."""
import re

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition, ParallelType
from fuser.evaluate import bind_inputs
from fuser.hostir import HostRuntime
from fuser.runtime.cache import FusionRuntime
from tests.multidevice.cases import exact, ints, mm_calls, seed_definition, shard


def run_seed(t=6, s=3, dtype=torch.float32):
    fd = seed_definition(1, s, 2, {torch.float32: DataType.Float, torch.bfloat16: DataType.BFloat16}[dtype])
    x, w = ints(t, 8, dtype=dtype), ints(2, 8, dtype=dtype, seed=1)
    (out,), calls = mm_calls(lambda: fd.execute([shard(fd, 0, x), shard(fd, 1, w)]))
    return fd, out, calls, x, w


def test_seed_host_program_prints_in_nvfuser_style():
    fd, *_ = run_seed()
    text = str(fd.cache.last_runtime.program)
    assert text.startswith("%HostIrContainer { (") and text.rstrip().endswith("} // %HostIrContainer")
    for pattern in [r"= ALLOCATE\(buffer=T2", r"GetCurrentStream into Stream 0",
                    r"FOR (i\d+) from 0 to 3:", r"SetCurrentStream to Stream \( i\d+ % numberOfStreams \)",
                    r"Synchronize Stream 0", r"= ShardByStream\(T0_g_float\[istreamIdx7\{3\}.*stream_index = i\d+\)",
                    r"= linear\(", r"Communication 0 \(type=Allreduce, mesh=DeviceMesh\{0\}.*in place",
                    r"Wait Communication 0", r"Synchronize Stream \( i\d+ % numberOfStreams \)"]:
        assert re.search(pattern, text), f"{pattern!r} not in\n{text}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_seed_on_one_device_runs_s_chunk_matmuls(dtype):
    fd, out, calls, x, w = run_seed(dtype=dtype)
    exact(out, F.linear(x, w))
    assert [c[0] for c in calls] == [[2, 8]] * 3


def test_seed_with_other_row_counts_reuses_the_runtime_and_never_conflicts():
    fd = seed_definition(1, 3, 2)
    for t in (3, 6, 7, 9, 30, 6):
        x, w = ints(t, 8), ints(2, 8, seed=1)
        exact(fd.execute([x, w])[0], F.linear(x, w), f"t={t}")
    assert fd.cache.num_runtimes == 1


def test_a_repeat_call_of_one_layout_takes_its_ready_call_and_binds_its_own_table(monkeypatch):
    # a host program's repeat call with the same shapes, strides, dtypes and devices skips the
    # signature and plan lookups, still binding a table of its own (one per execution); a new
    # row count takes the full path, and a shard of the wrong size still fails at binding
    from fuser.errors import FusionInputError
    from fuser.hostir.run import HostRunner
    from fuser.runtime import cache

    fd = seed_definition(1, 3, 2)
    w = ints(2, 8, seed=1)
    tables, full_path = [], []
    real_run, real_key = HostRunner.run, cache.call_key
    monkeypatch.setattr(HostRunner, "run", lambda self, args, table, *a, **k: tables.append(table) or real_run(self, args, table, *a, **k))
    monkeypatch.setattr(cache, "call_key", lambda args: full_path.append(1) or real_key(args))
    for t in (6, 6, 6, 9, 9):
        x = ints(t, 8, seed=t)
        exact(fd.execute([x, w])[0], F.linear(x, w), f"t={t}")
    assert len(full_path) == 2 and fd.cache.num_runtimes == 1
    assert len({id(t) for t in tables}) == 5  # a table per execution
    with pytest.raises(FusionInputError):
        fd.execute([x, ints(3, 8)])


@pytest.mark.parametrize("t,chunks", [(7, [3, 3, 1]), (2, [1, 1, 0]), (10, [4, 4, 2])])
def test_rows_not_divisible_by_the_stream_count_leave_a_shorter_last_chunk(t, chunks):
    fd = seed_definition(1, 3, 2)
    x, w = ints(t, 8), ints(2, 8, seed=1)
    (out,), calls = mm_calls(lambda: fd.execute([x, w]))
    exact(out, F.linear(x, w))
    assert [c[0][0] for c in calls] == chunks


def test_meta_inference_inside_the_loop_gives_chunks():
    fd, *_ = run_seed(t=6)
    runtime = fd.cache.last_runtime
    assert isinstance(runtime, HostRuntime)
    x, w = ints(6, 8), ints(2, 8)
    seen = []
    (out,) = runtime.infer_meta([x, w], bind_inputs(fd.cache.prepared, [x, w]),
                                trace=lambda what, expr, outs: seen.append((what, [tuple(o.shape) for o in outs])))
    assert out.device.type == "meta" and out.shape == (6, 2)
    assert seen == [("Evaluate", [(2, 2)]), ("Allreduce", [(2, 2)])] * 3


def test_matmul_with_stream_split_output_columns_runs_three_column_matmuls():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        c = fd.ops.matmul(a, b)
        fd.add_output(c)
        c.outer_split(1, 3)
        c.axis(1).parallelize(ParallelType.stream)
    A, B = ints(4, 5), ints(5, 6, seed=1)
    (out,), calls = mm_calls(lambda: fd.execute([A, B]))
    exact(out, A @ B)
    assert [c[:2] for c in calls] == [[[4, 5], [5, 2]]] * 3


def test_chained_matmuls_with_a_stream_split_input_run_two_by_three_chunk_matmuls():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        c = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.matmul(fd.ops.matmul(a, b), c))
        a.outer_split(0, 3)
        a.axis(0).parallelize(ParallelType.stream)
    A, B, C = ints(6, 5), ints(5, 4, seed=1), ints(4, 2, seed=2)
    (out,), calls = mm_calls(lambda: fd.execute([A, B, C]))
    exact(out, A @ B @ C)
    assert [c[:2] for c in calls] == [[[2, 5], [5, 4]], [[2, 4], [4, 2]]] * 3
    # the intermediate exists one chunk at a time
    text = fd.cache.prepared.print_transforms()
    assert re.search(r"T3_g_float.*\n logical domain.*\n allocation domain : \(istreamIdx", text)


def test_elementwise_ops_in_a_stream_loop_write_their_chunks():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1], contiguity=True)
        y = fd.ops.relu(fd.ops.add(fd.ops.mul(x, 2.0), b))
        fd.add_output(y)
        fd.add_output(fd.ops.sum(y, [0]))  # reads the whole output after the loop
        x.outer_split(0, 2)
        x.axis(0).parallelize(ParallelType.stream)
    X, B = ints(4, 3), ints(3, seed=1)
    y_out, s_out = fd.execute([X, B])
    exact(y_out, torch.relu(X * 2 + B))
    exact(s_out, torch.relu(X * 2 + B).sum(0))


def test_a_fusion_without_meshes_or_streams_keeps_the_single_device_runtime():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.exp(x))
    fd.execute([torch.ones(2, 3)])
    assert fd.cache.prepared is fd.fusion and isinstance(fd.cache.last_runtime, FusionRuntime)


def test_a_mesh_larger_than_the_world_asks_for_torchrun():
    from tests.multidevice.cases import _row_parallel
    from fuser.multidevice import DeviceMesh

    fd = _row_parallel(2, DeviceMesh(torch.arange(2)), False)
    x, w = ints(6, 16), ints(3, 16, seed=1)
    with pytest.raises(fuser.FuserError, match=r"needs 2 processes.*torchrun --nproc-per-node=2"):
        fd.execute([shard_tensor_rank0(fd, 0, x), shard_tensor_rank0(fd, 1, w)])


def shard_tensor_rank0(fd, k, full):
    from fuser.multidevice import shard_tensor

    return shard_tensor(full, fd.fusion.inputs()[k], rank=0)
