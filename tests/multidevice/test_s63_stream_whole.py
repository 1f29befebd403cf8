"""Stream-parallel outputs that no input chunk gives: iota, random ops, and ops whose output
axis no input axis maps to (a scan, slice, cat or pad along the split axis, a reshape across
it). Each is computed whole before the loop and the loop reads its chunks, so the values are
those of the same definition without the stream split (and eager's), random numbers included."""
import pytest
import torch

from fuser import DataType, FusionDefinition, ParallelType
from fuser.runtime import FusionExecutorCache
from tests.multidevice.cases import exact, loop_segments


def on_streams(tv, s=3, axis=0):
    tv.outer_split(axis, s)
    tv.axis(axis).parallelize(ParallelType.stream)


def iota_plus_x(split: bool):
    """x + iota(len(x)) in fp32, the iota (and the sum) on 3 streams when `split`."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True)
        i = fd.ops.iota(x.size(0), 0, 1, DataType.Float)
        y = fd.ops.add(x, i)
        if split:
            on_streams(i)
            on_streams(y)
        fd.add_output(y)
    return fd


@pytest.mark.parametrize("n", [6, 7])  # (7 by 3: chunks of 3, 3 and 1)
def test_iota_on_streams_counts_from_start_across_chunks(n):
    with FusionDefinition() as fd:
        length = fd.define_scalar(DataType.Int)
        y = fd.ops.iota(length, 10, 1, DataType.Int)
        on_streams(y)
        fd.add_output(y)
    out, = fd.execute([n])
    exact(out, torch.arange(10, 10 + n), f"n={n}")


@pytest.mark.parametrize("n", [6, 7])
def test_x_plus_iota_on_streams_matches_the_unsplit_definition_and_eager(n):
    X = torch.randn(n)
    out, = iota_plus_x(True).execute([X])
    plain, = iota_plus_x(False).execute([X])
    exact(out, plain, f"n={n}")
    torch.testing.assert_close(out, X + torch.arange(n, dtype=torch.float32))


def test_the_loop_still_adds_chunk_by_chunk_reading_chunks_of_the_whole_iota():
    fd = iota_plus_x(True)
    fd.execute([torch.randn(6)])
    assert [ops for _, ops in loop_segments(fd)] == [["add"]]


def test_the_aten_reference_of_iota_on_streams_is_eager():
    # fd.validate compares with this reference: it must not share the kernels' chunk fault
    X = torch.randn(6)
    reference = FusionExecutorCache(iota_plus_x(True).fusion, use_kernels=False)
    out, = reference.execute([X])
    torch.testing.assert_close(out, X + torch.arange(6, dtype=torch.float32))


def rand_plus_x(stream: bool, split_rng: bool, seeded: bool):
    """x + rand_like(x), the sum (and with `split_rng` the draw) on 3 streams when `stream`
    (the draw alone left unsplit is computed before the loop anyway)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        kw = dict(rng_seed=fd.define_scalar(1234, DataType.Int),
                  rng_offset=fd.define_scalar(0, DataType.Int)) if seeded else {}
        r = fd.ops.rand_like(x, **kw)
        y = fd.ops.add(x, r)
        if stream:
            on_streams(y)
            if split_rng:
                on_streams(r)
        fd.add_output(y)
    return fd


def draw(fd, X):
    torch.manual_seed(7)  # (an unseeded op's seed comes from PyTorch's generator)
    out, = fd.execute([X])
    return out - X


@pytest.mark.parametrize("seeded", [True, False])
def test_random_numbers_on_streams_are_the_unsplit_draw(seeded):
    X = torch.randn(7, 4)
    plain = draw(rand_plus_x(False, False, seeded), X)
    assert not torch.equal(plain[0:2], plain[2:4])
    exact(draw(rand_plus_x(True, True, seeded), X), plain)


# name: (fusion op on x, eager on X); the op's output goes on streams along its axis 0
UNMAPPED = {
    "cumsum": (lambda fd, x: fd.ops.cumsum(x, 0), lambda X: X.cumsum(0)),
    "slice": (lambda fd, x: fd.ops.slice(x, [1, 0], [4, 5]), lambda X: X[1:4]),
    "cat": (lambda fd, x: fd.ops.cat([x, x], 0), lambda X: torch.cat([X, X], 0)),
    "pad": (lambda fd, x: fd.ops.pad(x, [0, 0, 1, 2]), lambda X: torch.nn.functional.pad(X, [0, 0, 1, 2])),
    "reshape_30": (lambda fd, x: fd.ops.reshape(fd.ops.exp(x), [30]), lambda X: X.exp().reshape(30)),
    "reshape_5x6": (lambda fd, x: fd.ops.reshape(fd.ops.exp(x), [5, 6]), lambda X: X.exp().reshape(5, 6)),
    "reshape_3x10": (lambda fd, x: fd.ops.reshape(fd.ops.exp(x), [3, 10]), lambda X: X.exp().reshape(3, 10)),
}


def unmapped_definition(name: str, split: bool):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = UNMAPPED[name][0](fd, x)
        if split:
            on_streams(y)
        fd.add_output(fd.ops.mul(y, 2.0))  # (and a consumer that stays in the loop)
        if split:
            on_streams(fd.fusion.outputs()[0])
    return fd


@pytest.mark.parametrize("name", list(UNMAPPED))
def test_an_output_axis_no_input_maps_is_computed_whole_then_chunked(name):
    X = torch.randn(6, 5)
    out, = unmapped_definition(name, True).execute([X])
    plain, = unmapped_definition(name, False).execute([X])
    torch.testing.assert_close(out, plain, rtol=0, atol=0)
    torch.testing.assert_close(out, UNMAPPED[name][1](X) * 2)


def test_a_scan_along_the_stream_axis_with_uneven_chunks():
    X = torch.randn(7, 5)
    out, = unmapped_definition("cumsum", True).execute([X])
    torch.testing.assert_close(out, X.cumsum(0) * 2)
