"""Scans (cumsum, cumprod, cummax, cummin), argsort / sort, topk and triu against eager PyTorch.
Scans and sorts run as ATen evaluator segments on either backend (their neighbours as kernels);
triu is an iota mask and a where, a generated kernel."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.segment import SegmentKind
from tests.frontend.test_repr import check_roundtrip
from tests.helpers import assert_eager, cases, define, make, run_and_check

f32, bf16, i32, i64 = torch.float32, torch.bfloat16, torch.int32, torch.int64

_EAGER_SCANS = {
    "cumsum": lambda x, d: torch.cumsum(x, d, dtype=x.dtype),
    "cumprod": lambda x, d: torch.cumprod(x, d, dtype=x.dtype),
    "cummax": lambda x, d: torch.cummax(x, d).values,
    "cummin": lambda x, d: torch.cummin(x, d).values,
}


@pytest.mark.parametrize("name,dtype,dim,backend", cases([
    ("cumsum", f32, -1), ("cumsum", bf16, 0), ("cumsum", i32, 1), ("cumprod", f32, 0),
    ("cumprod", bf16, -1), ("cummax", f32, 1), ("cummax", i64, -2), ("cummin", bf16, 0),
    ("cummin", i32, -1),
]))
def test_scan(name, dtype, dim, backend):
    """The scan of x * 2 (a kernel feeding the ATen scan), plus 1 after: the input's dtype
    kept, as nvFuser's scan keeps it (eager's integer cumsum would give int64)."""
    x = make((3, 5), dtype)
    if name == "cumprod":  # values near 1, so the products stay in range
        x = (x.float() * 0.1 + 1).to(dtype)

    def build(fd, t):
        return fd.ops.add(getattr(fd.ops, name)(fd.ops.mul(t, 2), dim), 1)

    run_and_check(build, lambda t: _EAGER_SCANS[name](t * 2, dim) + 1, [x], backend=backend)


def test_scan_init_and_broadcast_axis():
    """`init` starts the scan (folded into every element); a scan along a broadcast dim is a
    copy of its input."""
    x, y = make((3, 4)), make((1, 4))

    def build(fd, a, b):
        return [fd.ops.cumsum(a, 1, 1.5), fd.ops.cummax(a, 0, 0.25), fd.ops.cumprod(b, 0)]

    run_and_check(build, lambda a, b: [a.cumsum(1) + 1.5, a.cummax(0).values.clamp(min=0.25), b.clone()],
                  [x, y])


def test_scan_symbolic_sizes_reuse_the_cache():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.cumsum(t, 0))
    for shape in [(3, 4), (6, 2)]:
        x = make(shape)
        assert_eager(fd.execute([x])[0], x.cumsum(0))
    assert fd.cache.num_runtimes == 1


@pytest.mark.parametrize("op", ["cumsum", "cummin"])
def test_scan_errors(op):
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1], contiguity=True, dtype=DataType.Bool)
        with pytest.raises(fuser.FusionDefinitionError, match=f"{op}: dim 2 is out of range"):
            getattr(fd.ops, op)(t, 2)
        if op == "cumsum":
            with pytest.raises(fuser.FusionDefinitionError, match="cumsum: not defined for the bool"):
                fd.ops.cumsum(b, 0)
        fd.add_output(t)


def _distinct(shape, dtype):
    """Distinct values (a permutation of small integers, exact in bf16), so any sort of them
    has one answer."""
    n = torch.Size(shape).numel()
    return (torch.randperm(n) - n // 2).reshape(shape).to(dtype)


@pytest.mark.parametrize("dtype,dim,descending,backend", cases([
    (f32, -1, False), (bf16, 0, True), (i32, 1, True),
]))
def test_argsort_and_sort(dtype, dim, descending, backend):
    x = _distinct((4, 6), dtype)

    def build(fd, t):
        values, indices = fd.ops.sort(t, dim, descending)
        return [fd.ops.argsort(t, dim, descending), values, fd.ops.add(indices, 1)]

    def reference(t):
        values, indices = torch.sort(t, dim, descending)
        return [torch.argsort(t, dim, descending), values, indices + 1]

    run_and_check(build, reference, [x], backend=backend)


def test_argsort_with_ties():
    """Stable: eager's stable order exactly. Unstable: any order that sorts the values."""
    x = torch.randint(0, 3, (5, 8)).float()
    with FusionDefinition() as fd:
        t = define(fd, x)
        fd.add_output(fd.ops.argsort(t, 1, stable=True))
        fd.add_output(fd.ops.argsort(t, -1, descending=True))
    stable, unstable = fd.execute([x])
    assert_eager(stable, torch.argsort(x, dim=1, stable=True))
    assert torch.equal(unstable.sort(1).values, torch.arange(8).expand(5, 8))  # a permutation
    assert torch.equal(x.gather(1, unstable), x.sort(1, descending=True).values)


@pytest.mark.parametrize("dtype,dim,largest,backend", cases([(f32, -1, True), (bf16, 0, False), (i64, 1, True)]))
def test_topk(dtype, dim, largest, backend):
    x = _distinct((5, 6), dtype)

    def build(fd, t):
        values, indices = fd.ops.topk(t, 3, dim, largest, True)
        return [fd.ops.mul(values, 2), indices]

    def reference(t):
        values, indices = torch.topk(t, 3, dim, largest, True)
        return [values * 2, indices]

    run_and_check(build, reference, [x], backend=backend)


def test_topk_symbolic_k_and_unsorted():
    """A k given at execution is the output's extent along dim; unsorted results hold the
    same elements as eager's (compared sorted)."""
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        k = fd.define_scalar(dtype=DataType.Int)
        values, indices = fd.ops.topk(t, k, 1, sorted=False)
        fd.add_output(values)
        fd.add_output(indices)
    assert values.domain.no_reductions()[1].extent == k.expr
    for shape, kk in [((3, 7), 4), ((2, 5), 2)]:
        x = _distinct(shape, f32)
        got_v, got_i = fd.execute([x, kk])
        want_v = torch.topk(x, kk, 1).values
        assert_eager(got_v.sort(1, descending=True).values, want_v)
        assert torch.equal(x.gather(1, got_i), got_v)
    assert fd.cache.num_runtimes == 1
    check_roundtrip(fd, [_distinct((3, 7), f32), 3])


def test_topk_k_out_of_range():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        k = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.topk(t, k, 0)[0])
        with pytest.raises(fuser.FusionDefinitionError, match="topk: k = -1 must be non-negative"):
            fd.ops.topk(t, -1)
        with pytest.raises(fuser.FusionDefinitionError, match="topk: dim -3 is out of range"):
            fd.ops.topk(t, 1, -3)
    with pytest.raises(fuser.FusionInputError, match=r"topk: k = 5 is out of range for axis 0 of T0, of size 4"):
        fd.execute([make((4, 3)), 5])
    with pytest.raises(fuser.FusionInputError, match=r"topk: k = -2 is out of range"):
        fd.execute([make((4, 3)), -2])
    with FusionDefinition() as fd:
        t = fd.define_tensor([4, 3], contiguity=True)
        with pytest.raises(fuser.FusionDefinitionError, match="topk: k = 5 is larger than axis 0"):
            fd.ops.topk(t, 5, 0)
        fd.add_output(t)


@pytest.mark.parametrize("dtype,diagonal,backend", cases([(f32, 0), (bf16, 2), (i32, -1), (torch.bool, 1)]))
def test_triu(dtype, diagonal, backend):
    x = make((2, 4, 5), dtype)
    fd, _ = run_and_check(lambda fd, t: fd.ops.triu(t, diagonal), lambda t: torch.triu(t, diagonal), [x],
                          backend=backend)
    if backend == "kernel":
        assert [s.kind for s in fd.last_segments()] == [SegmentKind.kernel]


def test_triu_needs_two_dims():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1], contiguity=True)
        with pytest.raises(fuser.FusionDefinitionError, match="triu: needs a tensor of 2 or more dims"):
            fd.ops.triu(t)
        fd.add_output(t)


def test_repr_roundtrip():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.cumsum(t, -1))
        fd.add_output(fd.ops.cumprod(t, 0, 2.0))
        fd.add_output(fd.ops.cummax(t, 1))
        fd.add_output(fd.ops.cummin(t, 0))
        fd.add_output(fd.ops.argsort(t, 1, descending=True, stable=True))
        for v in fd.ops.sort(t, 0):
            fd.add_output(v)
        for v in fd.ops.topk(t, 2, largest=False, sorted=True):
            fd.add_output(v)
        fd.add_output(fd.ops.triu(t, -1))
    check_roundtrip(fd, [_distinct((4, 5), f32)])


# -- fuser.jit ------------------------------------------------------------------------------


def _scans_and_sorts(x, i):
    return (torch.cumsum(x, -1) * 2, torch.cumprod(x, 0) + 1, torch.cummax(x, 1), torch.cummin(x, 0),
            torch.sort(x, -1), torch.sort(x, 0, descending=True)[1] + 1, torch.argsort(x, dim=-1, stable=True),
            torch.topk(x, 2, -1), torch.topk(x, 2, 0, largest=False)[1] + 1, torch.triu(x, 1) * 2,
            torch.cumsum(i, 1), torch.cummax(i, 1), torch.cummin(i, 0), torch.sort(i, dim=1, stable=True))


def _flat(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        else:
            yield from _flat(v)


def test_jit_forward_is_one_program():
    """One fusion, no fallback, on NaNs and ties (cummax indices take the later of equal
    values, as eager's); a second size reuses the compiled program."""
    g = fuser.jit(_scans_and_sorts, dynamic=True)  # (both sizes symbolic from the first call)
    for shape in [(4, 5), (6, 7)]:
        x = make(shape)
        x[1, 2] = float("nan")
        i = torch.randint(-2, 3, shape, dtype=i32)
        got, want = list(_flat(g(x, i))), list(_flat(_scans_and_sorts(x, i)))
        assert len(got) == len(want)
        for a, e in zip(got, want):
            assert a.dtype == e.dtype and a.shape == e.shape
            torch.testing.assert_close(a, e, equal_nan=True)
    info = g.cache_info()
    assert (info.fusions, info.fallback_ops, info.compiles) == (1, 0, 1)


def test_jit_backward():
    """Gradients through cumsum, cumprod, sort and topk values and var_mean against eager
    autograd (their backward's scatters and flips run eagerly)."""
    def f(x):
        return ((torch.cumsum(x, -1) * 2).sum() + torch.cumprod(x, 0).sum()
                + torch.sort(x, -1)[0][:, :2].sum() + (torch.topk(x, 2, 0)[0] ** 2).sum()
                + torch.var_mean(x, -1)[0].sum())

    g = fuser.jit(f)
    x = make((4, 5)).requires_grad_()
    y = x.detach().clone().requires_grad_()
    g(x).backward()
    f(y).backward()
    torch.testing.assert_close(x.grad, y.grad)


def test_sharding_flows_through_every_axis_but_the_scanned_one():
    from fuser.multidevice.axis_map import axis_pairs

    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1, -1], contiguity=True)
        outs = [fd.ops.cumsum(t, 1), fd.ops.argsort(t, -1), fd.ops.topk(t, 2, 0)[1]]
        for o in outs:
            fd.add_output(o)
    ids = t.domain.no_reductions()
    for out, kept in zip(outs, ([0, 2], [0, 1], [1, 2])):
        pairs = axis_pairs(fd.fusion.definition_of(out), t, out)
        assert [a for a, _ in pairs] == [ids[k] for k in kept]
        assert [b for _, b in pairs] == [out.domain.no_reductions()[k] for k in kept]


def test_scan_and_sort_along_an_expanded_dim():
    """An expanded broadcast is scanned and sorted as the real axis it stands for."""
    x = make((1, 4))

    def build(fd, t):
        e = fd.ops.expand(t, [3, -1])
        return [fd.ops.cumsum(e, 0), fd.ops.argsort(e, 0, stable=True), fd.ops.topk(e, 2, 0)[0]]

    run_and_check(build, lambda t: [t.expand(3, 4).cumsum(0), torch.argsort(t.expand(3, 4), dim=0, stable=True),
                                    t.expand(2, 4).clone()], [x])


def test_jit_cumsum_backward_and_flip_are_one_program_each():
    """cumsum's backward flips, scans and flips back: flip lowers to an index_select by a
    descending iota, so neither direction runs an ATen op between fusions."""
    def f(x):
        return (torch.cumsum(x, -1) * x.flip(0, 1)).sum()

    g = fuser.jit(f)
    x = make((4, 5)).requires_grad_()
    y = x.detach().clone().requires_grad_()
    torch.testing.assert_close(g(x), f(y))
    g(x).backward()
    f(y).backward()
    torch.testing.assert_close(x.grad, y.grad)
    assert g.cache_info().fallback_ops == 0


def test_topk_of_a_bool_tensor_is_refused_at_definition():
    """ATen's topk refuses bool: an InternalError at execute before."""
    with pytest.raises(fuser.FusionDefinitionError, match="topk: not defined for the bool"), FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Bool)
        fd.ops.topk(t, 2, 1)


@pytest.mark.parametrize("shape", [(4, 1), (3, 1, 1), (2, 3, 1)])
def test_jit_running_max_along_an_axis_of_one_element(shape):
    """cummax's indices along a size-1 dim came back 0, 1, 2, ... (the iota over that axis was
    numbered by the merged run's index) and its backward's scatter then raised."""
    import fuser as _fuser

    def f(x):
        values, indices = torch.cummax(x * 2, -1)
        return values, indices

    x = make(shape).requires_grad_()
    got = _fuser.jit(f)(x)
    want = f(x)
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0])
    got[0].sum().backward()
    torch.testing.assert_close(x.grad, torch.full(shape, 2.0))


@pytest.mark.parametrize("computed", [False, True], ids=["input", "computed"])
def test_a_sort_output_without_an_allocation_domain_stays_row_major(computed):
    """ATen's sort lays both results out as its input, laid out in the order its values asked
    for: the indices, which asked none, came back in that order too."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.Float)
        v, i = fd.ops.sort(fd.ops.add(x, 1.0) if computed else x, 1, False, True)
        v.set_allocation_domain([v.get_logical_domain()[k] for k in (0, 2, 1)], True)
        fd.add_output(v)
        fd.add_output(i)
    t = torch.randn(2, 3, 4)
    values, indices = fd.execute([t])
    want = torch.sort(t + 1.0 if computed else t, dim=1, stable=True)
    torch.testing.assert_close(values, want.values)
    assert torch.equal(indices, want.indices)
    assert values.stride() == (12, 1, 3) and indices.stride() == (12, 4, 1)
