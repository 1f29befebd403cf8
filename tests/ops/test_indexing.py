"""index_select, select, gather, take_along_axis, scatter and embedding_fwd against eager
PyTorch. They run as ATen evaluator segments on either backend; their pointwise neighbours
stay in generated kernels."""
import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.segment import SegmentKind
from tests.frontend.test_repr import check_roundtrip
from tests.helpers import TORCH_TO_DT, assert_eager, cases, make, run_and_check

f32, bf16, i32, i64 = torch.float32, torch.bfloat16, torch.int32, torch.int64
NO_BCAST = {"size1_broadcast": False}


def rows_of_indices(shape, length, dtype=i64):
    """Random indices into an axis of `length` (repeats included)."""
    return torch.randint(0, length, shape, dtype=dtype)


def distinct_along(shape, dim, length, dtype=i64):
    """Indices that differ along `dim` (scatter writes each position at most once: eager's
    order among repeats is unspecified)."""
    n = shape[dim]
    moved = list(shape)
    moved[dim] = length
    perm = torch.rand(moved).argsort(dim)
    return perm.narrow(dim, 0, n).contiguous().to(dtype)


# -- index_select ------------------------------------------------------------------------------

INDEX_SELECTS = [  # (id, x shape, x dtype, index shape, index dtype, dim)
    ("rows-f32-i64", (5, 4), f32, (7,), i64, 0),
    ("cols-bf16-i32-negdim", (3, 6), bf16, (4,), i32, -1),
    ("middle-int32-values", (2, 5, 3), i32, (3,), i64, 1),
    ("0d-index", (4, 3), f32, (), i64, 0),
]


@pytest.mark.parametrize("sx,xdt,si,idt,dim", [pytest.param(*c[1:], id=c[0]) for c in INDEX_SELECTS])
def test_index_select(sx, xdt, si, idt, dim):
    x = make(sx, xdt)
    index = rows_of_indices(si, sx[dim], idt)
    run_and_check(lambda fd, a, i: fd.ops.index_select(a, i, dim),
                  lambda a, i: torch.index_select(a, dim, i), [x, index], decl=[NO_BCAST, NO_BCAST])


def test_index_select_of_an_index_broadcast_to_the_rank():
    """nvFuser's other index form: [1, n] selecting along axis 1."""
    x, index = make((3, 5)), rows_of_indices((1, 4), 5)
    run_and_check(lambda fd, a, i: fd.ops.index_select(a, i, 1),
                  lambda a, i: torch.index_select(a, 1, i[0]), [x, index])


@pytest.mark.parametrize("backend", cases([()]))
def test_pointwise_neighbours_stay_in_a_kernel(backend):
    """exp(index_select(x, idx)) + y: one ATen segment, then one generated kernel."""
    x, index, y = make((6, 4)), rows_of_indices((5,), 6), make((5, 4))
    fd, _ = run_and_check(lambda fd, a, i, b: fd.ops.add(fd.ops.exp(fd.ops.index_select(a, i, 0)), b),
                          lambda a, i, b: torch.exp(a[i]) + b, [x, index, y], backend=backend)
    kinds = [(s.kind, [e.op_name for e in s.exprs]) for s in fd.last_segments()]
    if backend == "kernel":  # (the aten backend runs the whole fusion as one ATen segment)
        assert kinds == [(SegmentKind.evaluator, ["IndexSelectOp"]), (SegmentKind.kernel, ["exp", "add"])]


# -- select ------------------------------------------------------------------------------------


@pytest.mark.parametrize("xdt,dim,index", [(f32, 0, 2), (bf16, -1, -1), (i64, 1, 0)])
def test_select_with_a_scalar_input(xdt, dim, index):
    x = make((4, 3, 5), xdt)
    run_and_check(lambda fd, a, s: fd.ops.select(a, s, dim), lambda a, s: torch.select(a, dim, s),
                  [x, index], decl=[None, {"dtype": DataType.Int}])


def test_select_with_a_constant_index():
    x = make((4, 3))
    fd, _ = run_and_check(lambda fd, a: fd.ops.mul(fd.ops.select(a, 1, 1), 2.0),
                          lambda a: a[:, 1] * 2, [x])
    check_roundtrip(fd, [make((5, 3))])


# -- gather and take_along_axis ------------------------------------------------------------------

GATHERS = [  # (id, x shape, x dtype, index shape, index dtype, dim)
    ("f32-i64", (4, 6), f32, (4, 3), i64, 1),
    ("bf16-i32-negdim", (5, 3), bf16, (2, 3), i32, -2),
    ("int-values-shorter-index", (3, 4, 5), i32, (2, 6, 3), i64, 1),
]


@pytest.mark.parametrize("sx,xdt,si,idt,dim", [pytest.param(*c[1:], id=c[0]) for c in GATHERS])
def test_gather(sx, xdt, si, idt, dim):
    x = make(sx, xdt)
    index = rows_of_indices(si, sx[dim], idt)
    run_and_check(lambda fd, a, i: fd.ops.gather(a, i, dim),
                  lambda a, i: torch.gather(a, dim, i.long()), [x, index], decl=[NO_BCAST, NO_BCAST])


TAKES = [  # (id, x shape, index shape, dim): size 1 declared as broadcast
    ("same-axes", (4, 6), (4, 3), 1),
    ("index-broadcast-row", (4, 6), (1, 3), 1),
    ("arg-broadcast-row", (1, 6), (4, 3), -1),
    ("3d", (2, 5, 3), (2, 7, 3), 1),
    # a size 1 broadcasts to 0 (max(0, 1) made it 1: an InternalError)
    ("empty-arg-rows", (0, 6), (1, 3), 1),
    ("empty-index-rows", (1, 6), (0, 3), 1),
]


@pytest.mark.parametrize("sx,si,dim", [pytest.param(*c[1:], id=c[0]) for c in TAKES])
def test_take_along_axis(sx, si, dim):
    x, index = make(sx), rows_of_indices(si, sx[dim], i32)
    run_and_check(lambda fd, a, i: fd.ops.take_along_axis(a, i, dim),
                  lambda a, i: torch.take_along_dim(a, i.long(), dim), [x, index])


def test_take_along_axis_unifies_the_other_axes():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        i = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.take_along_axis(x, i, 1))
    with pytest.raises(fuser.ExtentConflictError):
        fd.execute([make((4, 6)), rows_of_indices((3, 2), 6)])


# -- scatter -------------------------------------------------------------------------------------


SCATTERS = [  # (id, dtype, index dtype, dim, index shape, src shape) into a [5, 6] tensor
    ("f32-cols", f32, i64, 1, (5, 3), (5, 4)),
    ("bf16-rows-i32-shorter", bf16, i32, 0, (3, 4), (3, 6)),
    ("int-values-negdim", i64, i64, -1, (2, 6), (3, 6)),
]


@pytest.mark.parametrize("xdt,idt,dim,si,ss", [pytest.param(*c[1:], id=c[0]) for c in SCATTERS])
def test_scatter_a_tensor(xdt, idt, dim, si, ss):
    x, src = make((5, 6), xdt), make(ss, xdt)
    index = distinct_along(si, dim % 2, x.shape[dim], idt)
    run_and_check(lambda fd, a, i, s: fd.ops.scatter(a, i, s, dim),
                  lambda a, i, s: torch.scatter(a, dim, i.long(), s), [x, index, src])


def test_scatter_a_scalar_input_and_a_constant():
    x, index = make((4, 7)), distinct_along((4, 3), 1, 7)

    def build(fd, a, i, s):
        return [fd.ops.mul(fd.ops.scatter(a, i, s, 1), 2.0), fd.ops.scatter(a, i, -2.5, -1)]

    fd, _ = run_and_check(build, lambda a, i, s: [torch.scatter(a, 1, i, s) * 2,
                                                  torch.scatter(a, 1, i, -2.5)],
                          [x, index, 1.5], decl=[None, None, {"dtype": DataType.Double}])
    check_roundtrip(fd, [make((3, 8)), distinct_along((3, 2), 1, 8), 0.25])


# -- embedding_fwd ---------------------------------------------------------------------------------


@pytest.mark.parametrize("wdt,idt,shape", [(f32, i64, (3, 5)), (bf16, i32, (7,))])
def test_embedding_fwd(wdt, idt, shape):
    w, index = make((10, 4), wdt), rows_of_indices(shape, 10, idt)
    run_and_check(lambda fd, i, a: fd.ops.embedding_fwd(i, a), lambda i, a: F.embedding(i, a),
                  [index, w], decl=[NO_BCAST, NO_BCAST])


def test_embedding_fwd_options_and_the_weight_stays_unchanged():
    """padding_idx passes through; max_norm renormalizes the looked-up rows as eager does, but
    leaves the fusion's input alone (eager renormalizes its weight in place)."""
    w = make((10, 4)) * 3
    index = torch.tensor([[1, 9, 1], [0, 4, 2]])
    before = w.clone()

    def build(fd, i, a, pad, max_norm):
        return fd.ops.embedding_fwd(i, a, pad, max_norm, 1.5)

    decl = [None, None, {"dtype": DataType.Int}, {"dtype": DataType.Double}]
    fd, _ = run_and_check(build, lambda i, a, pad, mn: F.embedding(i, a.clone(), pad, mn, 1.5),
                          [index, w, 4, 2.0], decl=decl)
    assert torch.equal(w, before)
    check_roundtrip(fd, [index, make((10, 4)) * 3, 2, 1.0])
    with pytest.raises(fuser.FusionInputError, match="embedding_fwd"):  # (F.embedding asserted: a raw error)
        fd.execute([index, w, 12, 2.0])


# -- symbolic sizes, repr ----------------------------------------------------------------------


def test_symbolic_sizes_reuse_the_cache():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        i = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int32)
        g = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int)
        picked = fd.ops.index_select(x, i, 0)
        fd.add_output(fd.ops.gather(fd.ops.cast(picked, DataType.Float), g, 1))
    for rows, cols, n, k in ((5, 4, 3, 2), (9, 7, 6, 5)):
        x, i = make((rows, cols), bf16), rows_of_indices((n,), rows, i32)
        g = rows_of_indices((n, k), cols)
        (out,) = fd.execute([x, i, g])
        assert_eager(out, torch.gather(x[i.long()].float(), 1, g))
    assert fd.cache.num_runtimes == 1
    check_roundtrip(fd, [x, i, g])


def test_repr_round_trip_of_every_op():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        i = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        g = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int)
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(x, i, -1))
        fd.add_output(fd.ops.select(x, s, 0))
        fd.add_output(fd.ops.take_along_axis(x, g, 1))
        fd.add_output(fd.ops.scatter(x, g, fd.ops.gather(x, g, 1), 1))
        fd.add_output(fd.ops.embedding_fwd(g, x, None, None, 2.0))
    text = repr(fd)
    for name in ("index_select", "select", "take_along_axis", "scatter", "gather", "embedding_fwd"):
        assert f"fd.ops.{name}(" in text
    x, g = make((4, 6)), distinct_along((4, 3), 1, 4)
    check_roundtrip(fd, [x, rows_of_indices((5,), 6), g, 2])


# -- errors --------------------------------------------------------------------------------------


def _definition_error(build, match):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fi = fd.define_tensor([-1, -1], contiguity=True)
        i = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int)
        v = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        with pytest.raises(fuser.FusionDefinitionError, match=match):
            build(fd, x, fi, i, v)
        fd.add_output(x)


@pytest.mark.parametrize("build,match", [
    pytest.param(lambda fd, x, fi, i, v: fd.ops.gather(x, fi, 1), "gather: index .* integer dtype", id="float-index-gather"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.index_select(x, fd.ops.cast(v, DataType.Float), 0),
                 "index_select: index .* integer dtype", id="float-index-index_select"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.embedding_fwd(fi, x), "embedding_fwd: input .* integer dtype",
                 id="float-index-embedding"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.select(x, 1.5, 0), "select: index", id="float-index-select"),
    # (ATen's index ops take int32 and int64 only: uint64 passed as integral, wrapping past 2**63)
    pytest.param(lambda fd, x, fi, i, v: fd.ops.gather(x, fd.ops.cast(i, DataType.UInt64), 1),
                 "gather: index .* integer dtype", id="uint64-index-gather"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.index_select(x, v, 2), "index_select: dim 2 is out of range",
                 id="dim-out-of-range"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.scatter(x, i, x, -3), "scatter: dim -3 is out of range",
                 id="negative-dim-out-of-range"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.gather(x, v, 0), "gather: .*same number of dims",
                 id="gather-ranks"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.take_along_axis(x, v, 0), "take_along_axis: .*same number of dims",
                 id="take-along-ranks"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.scatter(x, i, v, 0), "scatter: .*src has 1", id="scatter-ranks"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.index_select(x, i, 0), "index_select: index .* 0-D or 1-D",
                 id="index-select-2d-index"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.embedding_fwd(v, v), "embedding_fwd: weight .* 2-D", id="embedding-1d-weight"),
    pytest.param(lambda fd, x, fi, i, v: fd.ops.scatter(x, i, fd.ops.cast(x, DataType.BFloat16), 0),
                 "scatter: src .* dtype", id="scatter-src-dtype"),
])
def test_definition_errors(build, match):
    _definition_error(build, match)


def test_a_static_index_longer_than_its_tensor_is_a_definition_error():
    with FusionDefinition() as fd:
        x = fd.define_tensor([3, 4], contiguity=True)
        i = fd.define_tensor([5, 2], contiguity=True, dtype=DataType.Int)
        with pytest.raises(fuser.FusionDefinitionError, match="gather: axis 0 of index .* is 5, longer than 3"):
            fd.ops.gather(x, i, 1)
        fd.add_output(x)


OUT_OF_RANGE = [  # (id, build, inputs): one index value past the end
    ("index_select", lambda fd, x, i: fd.ops.index_select(x, i, 1), lambda: [make((2, 3)), torch.tensor([0, 3])]),
    ("gather", lambda fd, x, i: fd.ops.gather(x, i, 1), lambda: [make((2, 3)), torch.tensor([[0], [5]])]),
    ("take_along_axis", lambda fd, x, i: fd.ops.take_along_axis(x, i, 1),
     lambda: [make((2, 3)), torch.tensor([[0, 3], [1, 2]])]),
    ("scatter", lambda fd, x, i: fd.ops.scatter(x, i, 1.0, 0), lambda: [make((2, 3)), torch.tensor([[0, 2, -9]])]),
    ("embedding_fwd", lambda fd, i, w: fd.ops.embedding_fwd(i, w), lambda: [torch.tensor([1, 10]), make((10, 2))]),
    ("select", lambda fd, x, s: fd.ops.select(x, s, 0), lambda: [make((2, 3)), 2]),
]


@pytest.mark.parametrize("name,build,inputs", [pytest.param(*c, id=c[0]) for c in OUT_OF_RANGE])
def test_index_values_out_of_range_are_input_errors(name, build, inputs):
    args = inputs()
    with FusionDefinition() as fd:
        vals = [fd.define_tensor([-1] * a.dim(), contiguity=True, dtype=TORCH_TO_DT[a.dtype])
                if isinstance(a, torch.Tensor) else fd.define_scalar(dtype=DataType.Int) for a in args]
        fd.add_output(build(fd, *vals))
    with pytest.raises(fuser.FusionInputError, match=f"^{name}: the index values"):
        fd.execute(args)
