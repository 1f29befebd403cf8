"""Split inner reductions (codegen/split_kernel.py with the reduced dim on columns): a reduction
over a whole tensor, or over a few long rows, runs as programs each reducing a chunk of a row's
columns into a workspace, the last program of each row block combining the chunks and finishing
the fusion (a mean's division, a cast). The split's thresholds are lowered so that the
interpreter's small tensors split; the programs run in any order."""
import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from fuser.schedulers import heuristics


def _split_launches(fd) -> list:
    (runtime,) = fd._cache.runtimes()
    return [made for launcher in runtime.launchers.values() for made in launcher.launches.values()
            if made is not None and made.semaphores is not None]


def _mse(p, t):
    return F.mse_loss(p, t)


def _amax(x):
    return x.abs().amax()


def _sum_squares(g):
    return (g * g).sum()


@pytest.mark.parametrize("fn, dtype", [(_mse, torch.bfloat16), (_amax, torch.bfloat16), (_sum_squares, torch.float32)])
def test_whole_tensor_reductions_split(small_splits, any_program_order, fn, dtype):
    g = torch.Generator().manual_seed(5)
    args = [torch.randn(37, 211, generator=g).to(dtype) for _ in range(2 if fn is _mse else 1)]
    jitted = fuser.jit(fn)
    for _ in range(2):  # a second launch finds the semaphores zero again
        got = jitted(*args)
        want = fn(*[a.double() for a in args]).to(got.dtype)
        torch.testing.assert_close(got, want, rtol=1e-3 if dtype is torch.float32 else 1e-2, atol=1e-3)
    code = "\n".join(t for f in fuser.explain(fn, *args).fusions for t in f.triton)
    assert "split in one kernel" in code and "c_lo = chunk * CHUNK" in code


def test_few_long_rows_split_with_welford_and_several_reductions(small_splits, any_program_order):
    """var_mean (Welford partials), a max and an int64 sum over 3 rows of 1000 columns: each
    kept in its own accumulator type (an int64 sum through fp32 partials would round)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        n = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int)
        var, mean = fd.ops.var_mean(x, [1], 1)
        fd.add_output(var)
        fd.add_output(mean)
        fd.add_output(fd.ops.max(x, [1]))
        fd.add_output(fd.ops.sum(n, [1]))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 1000, generator=g) * 3 + 100
    n = torch.randint(2**40, 2**41, (3, 1000), generator=g)
    var, mean, top, total = fd.execute([x, n])
    want_var, want_mean = torch.var_mean(x.double(), 1, correction=1)
    torch.testing.assert_close(var, want_var.float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mean, want_mean.float(), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(top, x.amax(1))
    assert torch.equal(total, n.sum(1))
    code = fd.last_triton_code()
    assert "split in one kernel" in code and "tl.atomic_add(SEM_ptr + pid0, 1" in code
    launches = _split_launches(fd)
    assert launches
    for made in launches:
        (sems,) = made.semaphores.by_stream.values()
        assert sems.numel() == 3 and not sems.any()  # one counter a row, zero again
    # 4 processors x 4 programs over 3 rows: 6 chunks a row (of at least 32 columns), each
    # workspace a row per chunk, a column per kept row, in its reduction's type
    specs = {spec for made in launches for spec in made.workspaces.specs}
    assert ((6, 3), torch.int64) in specs and ((6, 3), torch.float32) in specs


def test_an_output_along_the_row_is_stored_in_the_chunks_pass(small_splits, any_program_order):
    """y = x * 2 beside x.sum(1): each chunk's program stores its columns of y as it reduces."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, 2.0))
        fd.add_output(fd.ops.sum(x, [1]))
    x = torch.randn(2, 500, generator=torch.Generator().manual_seed(1))
    y, s = fd.execute([x])
    assert "split in one kernel" in fd.last_triton_code()
    torch.testing.assert_close(y, x * 2)
    torch.testing.assert_close(s, x.sum(1), rtol=1e-5, atol=1e-4)


def _centered_square_sum(x):
    return (x - x.amax(1, keepdim=True)).pow(2).sum(1)


def test_a_reduction_of_a_reduction_does_not_split(small_splits):
    """A sum of (x - max)^2 reads the max: chunks could not finish it alone (unlike a softmax's
    sum of exp(x - max), whose chunks combine: test_split_softmax.py), so it stays one program a
    row."""
    jitted = fuser.jit(_centered_square_sum)
    x = torch.randn(2, 500, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(jitted(x), _centered_square_sum(x.double()).float(), rtol=1e-4, atol=1e-3)
    (report,) = fuser.explain(_centered_square_sum, x).fusions
    assert "split in one kernel" not in "\n".join(report.triton)


def test_split_heuristic():
    """Split only where rows leave processors idle and rows are long; chunks of whole blocks."""
    split = heuristics.inner_split
    min_cols = heuristics.INNER_SPLIT_MIN_COLS
    assert split(1, min_cols - 1, 132)[1] == 1  # short: latency-bound either way
    assert split(2 * 132, 2**20, 132)[1] == 1  # two programs a processor already
    assert split(2 * 132 - 1, 2**20, 132)[1] > 1
    assert split(1, 2**20, 0)[1] == 1  # no processors (the interpreter, by default)
    params, chunks = split(1, 2**26, 132)
    assert chunks == 4 * 132 and not params.persistent and params.grid == 1
    assert split(1, min_cols, 132)[1] == min_cols // heuristics.INNER_SPLIT_MIN_CHUNK
    # a few rows of a vocabulary: a chunk a block, so the GPU gets programs enough
    assert split(8, 128256, 132)[1] == 128256 // heuristics.INNER_SPLIT_BLOCK


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_whole_tensor_reductions_split_on_the_gpu():
    """With the GPU's own thresholds: an fp8-style amax, an MSE and an int64 sum over large
    tensors split, and stay right call after call."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, generator=g)
    t = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, generator=g)
    n = torch.randint(2**40, 2**41, (1024, 1024), device="cuda", generator=g)
    for fn, args in ((_amax, (x,)), (_mse, (x, t)), (lambda n: n.sum(), (n,))):
        jitted = fuser.jit(fn)
        for _ in range(3):
            got = jitted(*args)
            if got.dtype == torch.int64:
                assert torch.equal(got, fn(*args))
            else:
                want = fn(*[a.double() for a in args])
                torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=1e-3)
        code = "\n".join(t for f in fuser.explain(fn, *args).fusions for t in f.triton)
        assert "split in one kernel" in code


def test_a_loop_space_past_int32_indexes_in_int64(small_splits, monkeypatch):
    """A loop space of 2^31 elements or more indexes in 64 bits even where every tensor is small
    (a broadcast input): a split's chunk starts (chunk * CHUNK) would overflow 32 bits.
    Checked with the limit lowered to 100 elements."""
    monkeypatch.setattr(launch, "_INT32_LIMIT", 100)
    with FusionDefinition() as fd:
        x = fd.define_tensor([1, 1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.expand(x, [1, 300]), [1]))
    (total,) = fd.execute([torch.full((1, 1), 0.5)])
    torch.testing.assert_close(total, torch.tensor([150.0]))
    (made,) = _split_launches(fd)
    assert made.steps[0][0].kwargs["INT64"]
