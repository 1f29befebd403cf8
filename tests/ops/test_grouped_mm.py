"""grouped_mm and scaled_mm (ATen evaluator segments) against eager per-group matmuls in fp32
on fresh random data."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import FusionDefinitionError, FusionInputError, UnsupportedError
from tests.helpers import assert_eager, make

f32, bf16, fp8 = torch.float32, torch.bfloat16, torch.float8_e4m3fn
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def offsets_of(sizes, device="cpu"):
    return torch.tensor(sizes, dtype=torch.int32, device=device).cumsum(0, dtype=torch.int32)


def reference_grouped_mm(a, b, offs, s1=None, s2=None, dtype=None):
    """Eager: slice each group out, matmul it in fp32, scale its rows and columns, cast."""
    ends = offs.tolist()
    starts = [0] + ends[:-1]
    dtype = dtype or a.dtype
    a, b = a.float(), b.float()
    s1 = s1.float() if s1 is not None else None
    s2 = s2.float() if s2 is not None else None
    parts = []
    for g, (lo, hi) in enumerate(zip(starts, ends)):
        if a.dim() == 2 and b.dim() == 2:
            p, r1, r2 = a[:, lo:hi] @ b[lo:hi], (s1[g] if s1 is not None else 1), (s2[g] if s2 is not None else 1)
        elif a.dim() == 3:
            p, r1, r2 = a[g] @ b[:, lo:hi], (s1[g] if s1 is not None else 1), (s2[:, lo:hi] if s2 is not None else 1)
        else:
            p, r1, r2 = a[lo:hi] @ b[g], (s1[lo:hi] if s1 is not None else 1), (s2[g] if s2 is not None else 1)
        parts.append(r1 * p * r2)
    if a.dim() == 2 and b.dim() == 2:
        out = torch.stack(parts)
    else:
        out = torch.cat(parts, dim=1 if a.dim() == 3 else 0)
    return out.to(dtype)


def rebuilt(fd):
    """The definition that repr(fd) prints, run."""
    ns = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), ns)  # noqa: S102 - the printed definition is the thing under test
    with FusionDefinition() as again:
        ns["nvfuser_fusion"](again)
    return again


def grouped_fusion(a, b, offs, scales=(), dtype=None, symbolic=True):
    with FusionDefinition() as fd:
        ins = [fd.define_tensor([-1 if symbolic else s for s in t.shape], contiguity=True,
                                dtype=DataType.from_torch(t.dtype)) for t in (a, b, offs)]
        sc = [fd.define_tensor([1 if s == 1 else -1 for s in t.shape], contiguity=True, dtype=DataType.Float)
              for t in scales]
        if scales:
            out, _, _ = fd.ops.grouped_mm(*ins, *sc, dtype=dtype)
        else:
            out = fd.ops.grouped_mm(*ins)
        fd.add_output(out)
    return fd


LAYOUTS = [  # (id, (m, k, n, g) -> the operands' shapes, the position in (m, k, n) the groups split)
    ("2d-3d", lambda m, k, n, g: ((m, k), (g, k, n)), 0),
    ("3d-2d", lambda m, k, n, g: ((g, m, k), (k, n)), 2),
    ("2d-2d", lambda m, k, n, g: ((m, k), (k, n)), 1),
]
GROUPS = [3, 0, 5]  # unequal, with an empty group


@pytest.mark.parametrize("shapes,split", [pytest.param(s, p, id=i) for i, s, p in LAYOUTS])
@pytest.mark.parametrize("dtype", [f32, bf16])
@pytest.mark.parametrize("k", [16, 5])  # k = 16: aligned as torch._grouped_mm needs, 5: not
def test_grouped_mm(shapes, split, dtype, k):
    m, n = 4, 16
    dims = [m, k, n]
    dims[split] = sum(GROUPS)  # the split axis holds the groups one after the other
    sa, sb = shapes(*dims, len(GROUPS))
    a, b, offs = make(sa, dtype), make(sb, dtype), offsets_of(GROUPS)
    fd = grouped_fusion(a, b, offs)
    (out,) = fd.execute([a, b, offs])
    assert_eager(out, reference_grouped_mm(a, b, offs))


def test_grouped_mm_symbolic_sizes_reuse_the_fusion_and_repr_round_trips():
    a, b, offs = make((8, 6)), make((3, 6, 5)), offsets_of([1, 4, 3])
    fd = grouped_fusion(a, b, offs)
    (out,) = fd.execute([a, b, offs])
    assert_eager(out, reference_grouped_mm(a, b, offs))
    a2, b2, offs2 = make((11, 7)), make((4, 7, 2)), offsets_of([0, 6, 2, 3])  # other sizes and group count
    (out2,) = fd.execute([a2, b2, offs2])
    assert_eager(out2, reference_grouped_mm(a2, b2, offs2))
    assert fd._cache.num_runtimes == 1  # the other sizes reused the compiled fusion
    fd2 = rebuilt(fd)
    assert_eager(fd2.execute([a2, b2, offs2])[0], out2)


@pytest.mark.parametrize("shapes,split", [pytest.param(s, p, id=i) for i, s, p in LAYOUTS])
def test_scaled_grouped_mm_fp8_rowwise(shapes, split):
    m, k, n = 4, 16, 8
    dims = [m, k, n]
    dims[split] = sum(GROUPS)
    sa, sb = shapes(*dims, len(GROUPS))
    a, b, offs = make(sa).to(fp8), make(sb).to(fp8), offsets_of(GROUPS)
    g, (m, k, n) = len(GROUPS), dims
    # per row of mat1 and column of mat2, per group where the output or the operand has groups
    s1 = torch.rand((g, m, 1) if len(sa) == 3 or split == 1 else (m, 1)) + 0.5
    s2 = torch.rand((g, 1, n) if len(sb) == 3 or split == 1 else (1, n)) + 0.5
    fd = grouped_fusion(a, b, offs, (s1, s2))
    (out,) = fd.execute([a, b, offs, s1, s2])
    assert_eager(out, reference_grouped_mm(a, b, offs, s1, s2, dtype=bf16))
    assert_eager(rebuilt(fd).execute([a, b, offs, s1, s2])[0], out)


def test_grouped_mm_bad_offsets_are_an_input_error():
    a, b = make((8, 4)), make((2, 4, 3))
    fd = grouped_fusion(a, b, offsets_of([3, 5]))
    with pytest.raises(FusionInputError, match="grouped_mm: offsets"):
        fd.execute([a, b, offsets_of([3, 4])])  # the groups cover 7 of mat1's 8 rows
    with pytest.raises(FusionInputError, match="non-decreasing"):
        fd.execute([a, b, torch.tensor([5, 8], dtype=torch.int32).flip(0)])


def _define(fd, shape, dtype):
    return fd.define_tensor(shape, contiguity=True, dtype=dtype)


@pytest.mark.parametrize("bad,match", [
    (lambda fd: fd.ops.grouped_mm(_define(fd, [-1, -1], DataType.Float), _define(fd, [-1, -1, -1], DataType.Float),
                                  _define(fd, [-1], DataType.Int)), "offsets must be a 1-D Int32"),
    (lambda fd: fd.ops.grouped_mm(_define(fd, [4, 6], DataType.Float), _define(fd, [3, 5, 2], DataType.Float),
                                  _define(fd, [3], DataType.Int32)), "K"),
    (lambda fd: fd.ops.grouped_mm(_define(fd, [4, 6], DataType.Float), _define(fd, [2, 6, 2], DataType.Float),
                                  _define(fd, [3], DataType.Int32)), "groups of mat2"),
    (lambda fd: fd.ops.grouped_mm(_define(fd, [2, 4, 6], DataType.Float), _define(fd, [2, 6, 2], DataType.Float),
                                  _define(fd, [2], DataType.Int32)), "use matmul"),
    (lambda fd: fd.ops.grouped_mm(_define(fd, [4, 6], DataType.Float), _define(fd, [2, 6, 2], DataType.BFloat16),
                                  _define(fd, [2], DataType.Int32)), "share a dtype"),
    (lambda fd: fd.ops.grouped_mm(_define(fd, [4, 6], DataType.Float8_e4m3fn),
                                  _define(fd, [2, 6, 2], DataType.Float8_e4m3fn),
                                  _define(fd, [2], DataType.Int32)), "fp8 takes scale1 and scale2"),
    (lambda fd: fd.ops.grouped_mm(_define(fd, [4, 6], DataType.Float8_e4m3fn),
                                  _define(fd, [2, 6, 2], DataType.Float8_e4m3fn), _define(fd, [2], DataType.Int32),
                                  _define(fd, [4, 6], DataType.Float), _define(fd, [2, 1, 2], DataType.Float)),
     "scale1 must have 2 axes with axis 1 of size 1"),
    (lambda fd: fd.ops.grouped_mm(_define(fd, [4, 6], DataType.Float), _define(fd, [2, 6, 2], DataType.Float),
                                  _define(fd, [2], DataType.Int32), dtype=DataType.BFloat16), "scaled form"),
    (lambda fd: fd.ops.scaled_mm(_define(fd, [4, 6], DataType.Float8_e4m3fn), _define(fd, [5, 2], DataType.Float8_e4m3fn),
                                 _define(fd, [1], DataType.Float), _define(fd, [1], DataType.Float)), "K"),
    (lambda fd: fd.ops.scaled_mm(_define(fd, [4, 6], DataType.Float8_e4m3fn), _define(fd, [6, 2], DataType.Float8_e4m3fn),
                                 _define(fd, [4, 1], DataType.Float), _define(fd, [1, 3], DataType.Float)),
     "axis 1 of scale2"),
    (lambda fd: fd.ops.scaled_mm(_define(fd, [4, 6], DataType.Float8_e4m3fn), _define(fd, [6, 2], DataType.Float8_e4m3fn),
                                 _define(fd, [1], DataType.BFloat16), _define(fd, [1], DataType.Float)),
     "scale1 must be a Float"),
    (lambda fd: fd.ops.scaled_mm(_define(fd, [2, 4, 6], DataType.Float8_e4m3fn),
                                 _define(fd, [6, 2], DataType.Float8_e4m3fn),
                                 _define(fd, [1], DataType.Float), _define(fd, [1], DataType.Float)), "must be 2-D"),
    (lambda fd: fd.ops.scaled_mm(_define(fd, [4, 6], DataType.Float8_e4m3fn), _define(fd, [6, 2], DataType.Float8_e4m3fn),
                                 _define(fd, [1], DataType.Float), _define(fd, [1], DataType.Float),
                                 beta=_define(fd, [1], DataType.Float)), "beta needs bias"),
])
def test_definition_errors_name_the_op_and_operand(bad, match):
    with pytest.raises(FusionDefinitionError, match=match):
        with FusionDefinition() as fd:
            bad(fd)


def test_quantized_outputs_are_unsupported():
    with pytest.raises(UnsupportedError, match="scaled_mm: quantized outputs"):
        with FusionDefinition() as fd:
            a, b = _define(fd, [4, 6], DataType.Float8_e4m3fn), _define(fd, [6, 2], DataType.Float8_e4m3fn)
            s = _define(fd, [1], DataType.Float)
            fd.ops.scaled_mm(a, b, s, s, output_block_scale_size=16)


SCALED = [  # (id, mat dtype, scale1 shape, scale2 shape, alpha, bias, beta, out dtype)
    ("fp8-per-tensor", fp8, (), (), False, False, False, DataType.BFloat16),
    ("fp8-rowwise", fp8, (8, 1), (1, 6), False, False, False, DataType.BFloat16),
    ("fp8-bias-f32-out", fp8, (1,), (1, 1), False, True, False, DataType.Float),
    ("fp8-alpha-bias-beta", fp8, (8, 1), (1, 6), True, True, True, DataType.BFloat16),
    ("f32", f32, (8, 1), (), False, True, False, DataType.Float),
    ("bf16", bf16, (), (1, 6), True, False, False, DataType.BFloat16),
]


@pytest.mark.parametrize("dtype,ss1,ss2,alpha,bias,beta,out_dtype", [pytest.param(*c[1:], id=c[0]) for c in SCALED])
def test_scaled_mm(dtype, ss1, ss2, alpha, bias, beta, out_dtype):
    m, k, n = 8, 16, 6
    a, b = make((m, k)).to(dtype), make((k, n)).to(dtype)
    s1, s2 = torch.rand(ss1) + 0.5, torch.rand(ss2) + 0.5
    extra = {"alpha": torch.rand(()) + 0.5 if alpha else None, "bias": make((n,)) if bias else None,
             "beta": torch.rand(()) + 0.5 if beta else None}
    given = {name: t for name, t in extra.items() if t is not None}
    with FusionDefinition() as fd:
        defs = [fd.define_tensor([-1 if s > 1 else 1 for s in t.shape], contiguity=True, dtype=DataType.from_torch(t.dtype))
                for t in (a, b, s1, s2, *given.values())]
        kw = dict(zip(given, defs[4:]))
        out, gamma_scale, gamma = fd.ops.scaled_mm(*defs[:4], **kw, dtype=out_dtype)
        assert gamma_scale is None and gamma is None
        fd.add_output(out)
    (res,) = fd.execute([a, b, s1, s2, *given.values()])
    expected = (a.float() * s1) @ (b.float() * s2)
    expected = expected * extra["alpha"] if alpha else expected
    expected = expected + (extra["beta"] if beta else 1) * extra["bias"] if bias else expected
    assert_eager(res, expected.to(res.dtype))
    assert res.dtype == out_dtype.to_torch()
    fd2 = rebuilt(fd)
    assert_eager(fd2.execute([a, b, s1, s2, *given.values()])[0], res)


@pytest.mark.gpu
@needs_cuda
def test_grouped_mm_cuda_bf16_kernel():
    """torch._grouped_mm on the GPU (bf16, 16-byte aligned), against the fp32 per-group form."""
    a, b, offs = make((64, 32), bf16).cuda(), make((4, 32, 48), bf16).cuda(), offsets_of([16, 0, 40, 8], "cuda")
    (out,) = grouped_fusion(a, b, offs).execute([a, b, offs])
    assert_eager(out, reference_grouped_mm(a, b, offs))
    assert_eager(out, torch._grouped_mm(a, b, offs))


@pytest.mark.gpu
@needs_cuda
def test_scaled_grouped_mm_cuda_fp8_kernel():
    """torch._scaled_grouped_mm on the GPU (fp8 rowwise scales, bf16 out)."""
    a = make((64, 32)).to(fp8).cuda()
    b = make((4, 32, 48)).to(fp8).cuda()
    offs = offsets_of([16, 0, 32, 16], "cuda")
    s1, s2 = (torch.rand(64, 1) + 0.5).cuda(), (torch.rand(4, 1, 48) + 0.5).cuda()
    (out,) = grouped_fusion(a, b, offs, (s1, s2)).execute([a, b, offs, s1, s2])
    assert_eager(out, reference_grouped_mm(a, b, offs, s1, s2, dtype=bf16))


@pytest.mark.gpu
@needs_cuda
def test_scaled_mm_cuda_fp8_kernel():
    """torch._scaled_mm on the GPU, per tensor and rowwise, against the reference form."""
    a, b = make((32, 64)).to(fp8).cuda(), make((64, 48)).to(fp8).cuda()
    for s1, s2 in ((torch.tensor(0.5), torch.tensor(2.0)), (torch.rand(32, 1) + 0.5, torch.rand(1, 48) + 0.5)):
        s1, s2 = s1.cuda(), s2.cuda()
        with FusionDefinition() as fd:
            defs = [fd.define_tensor([-1 if s > 1 else 1 for s in t.shape], contiguity=True,
                                     dtype=DataType.from_torch(t.dtype)) for t in (a, b, s1, s2)]
            fd.add_output(fd.ops.scaled_mm(*defs)[0])
        (out,) = fd.execute([a, b, s1, s2])
        assert_eager(out, ((a.float() * s1) @ (b.float() * s2)).to(bf16))
        assert_eager(out, torch._scaled_mm(a, b.t().contiguous().t(), s1, s2, out_dtype=bf16))


def test_multidevice_axis_map_shards_only_rows_and_columns_no_group_splits():
    from fuser.multidevice.axis_map import axis_pairs
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float8_e4m3fn)  # [m, k]: groups split m
        b = fd.define_tensor([-1, -1, -1], contiguity=True, dtype=DataType.Float8_e4m3fn)  # [g, k, n]
        offs = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int32)
        s1 = fd.define_tensor([-1, 1], contiguity=True, dtype=DataType.Float)
        s2 = fd.define_tensor([-1, 1, -1], contiguity=True, dtype=DataType.Float)
        out, _, _ = fd.ops.grouped_mm(a, b, offs, s1, s2)
        fd.add_output(out)
    (e,) = [x for x in fd.fusion.exprs if type(x).__name__ == "GroupedMmOp"]
    o = out.domain.no_reductions()
    assert axis_pairs(e, a, out) == []  # m is split by the groups, k is contracted
    assert axis_pairs(e, b, out) == [(b.domain.no_reductions()[2], o[1])]
    assert axis_pairs(e, s2, out) == [(s2.domain.no_reductions()[2], o[1])]
    assert axis_pairs(e, offs, out) == []


def test_jit_lowers_grouped_mm_and_scaled_mm():
    import fuser

    def f(x, w, offs, a8, b8, sa, sb):  # (the meta kernel of torch._grouped_mm takes bf16 only)
        moe = torch._grouped_mm(x, w, offs)
        return moe.relu(), torch._scaled_mm(a8, b8, sa, sb, out_dtype=torch.float32) * 2

    g = fuser.jit(f)
    args = (make((8, 16), bf16), make((3, 16, 8), bf16), offsets_of([3, 0, 5]), make((8, 16)).to(fp8),
            make((8, 16)).to(fp8).t(), torch.rand(8, 1) + 0.5, torch.rand(1, 8) + 0.5)
    for got, want in zip(g(*args), f(*args)):
        assert_eager(got, want)
    assert g.cache_info().fallback_ops == 0
