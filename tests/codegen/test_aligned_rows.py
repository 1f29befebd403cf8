"""Looped row reductions over rows whose starts are not 16-byte aligned (a vocabulary of 50257):
the chunks start at aligned addresses (codegen/kernel.py `aligned_rows`, layout.row_alignment),
inner chunks load and store unmasked, the first and last of a row masked; results match eager."""
import re

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.codegen.kernel import _eviction_hints
from fuser.codegen.layout import Layout, row_alignment
from fuser.schedulers import heuristics
from tests.helpers import sm90_ptx


@pytest.fixture
def short_chunks(monkeypatch):
    # rows longer than 32 loop, 16 columns a chunk: a row of 301 has a head, inner chunks and a tail
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    monkeypatch.setattr(heuristics, "LOOPED_BLOCK", 16)


def softmax_fd(dtype):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.from_torch(dtype))
        xf = fd.ops.cast(x, DataType.Float)
        m = fd.ops.max(xf, [-1], True)
        e = fd.ops.exp(fd.ops.sub(xf, m))
        fd.add_output(fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, [-1], True)), DataType.from_torch(dtype)))
        fd.add_output(fd.ops.sum(xf, [-1]))  # a row output beside the tile output
    return fd


INNER_LOOP = re.compile(r"for c_start in (?:range\(c_lo, c_hi, BLOCK1\)|"
                        r"tl\.range\(c_lo, tl\.maximum\(c_hi, c_lo\), BLOCK1, loop_unroll_factor=\d+\)):")
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cols,block", [(301, 16), (37, 16), (320 + 8, 16), (37, 64), (60, 64)])
def test_rows_of_any_length_match_eager(short_chunks, monkeypatch, dtype, cols, block, device):
    """Rows with inner chunks, rows of a head and a tail chunk only, rows in one chunk."""
    monkeypatch.setattr(heuristics, "LOOPED_BLOCK", block)
    fd = softmax_fd(dtype)
    x = (torch.randn(7, cols, device=device) * 4).to(dtype)  # each row starts at another offset
    y, s = fd.execute([x])
    tol = TOL[dtype]
    torch.testing.assert_close(y, torch.softmax(x.float(), -1).to(dtype), rtol=tol, atol=tol)
    torch.testing.assert_close(s, x.float().sum(-1), rtol=1e-4, atol=1e-3)
    code = fd.last_triton_code()
    assert "looped_aligned" in code, code
    heads = re.findall(INNER_LOOP, code)
    inner = re.split(INNER_LOOP, code)[1:]
    assert len(inner) >= 2, code  # a pass for the reductions, one for the outputs
    # the reductions' pass unrolled (heuristics.ROW_PASS_UNROLL), the outputs' pass plain
    assert f"loop_unroll_factor={heuristics.ROW_PASS_UNROLL}" in heads[0] and "tl.range" not in heads[-1], heads
    for loop in inner:
        loop = loop.split("for c_edge in range(0, 2):")[0]
        assert "tl.load(" in loop and "mask=" not in loop, loop  # whole vectors, unmasked


def test_aligned_rows_and_lengths_keep_the_plain_loop(short_chunks, device):
    fd = softmax_fd(torch.bfloat16)
    x = torch.randn(3, 320, device=device).to(torch.bfloat16)  # Triton sees 16-element rows itself
    y, _ = fd.execute([x])
    torch.testing.assert_close(y, torch.softmax(x.float(), -1).to(torch.bfloat16), rtol=2e-2, atol=2e-2)
    assert "looped_aligned" not in fd.last_triton_code()


def test_tensors_with_other_row_strides_keep_the_plain_loop(short_chunks, device):
    """A view whose rows are 320 apart, written to rows 301 apart: no common aligned start."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[False, True], dtype=DataType.Float)
        fd.add_output(fd.ops.div(x, fd.ops.sum(x, [-1], True)))
    base = torch.rand(5, 320, device=device) + 0.5
    x = base[:, 3:304]  # (an unaligned data pointer too)
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, x / x.sum(-1, keepdim=True), rtol=1e-5, atol=1e-6)
    assert "looped_aligned" not in fd.last_triton_code()


def test_fuser_jit_cross_entropy_forward_and_backward(short_chunks):
    def loss(logits, target):
        return F.cross_entropy(logits.float(), target)

    logits = (torch.randn(6, 301) * 3).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, 301, (6,))
    ours = fuser.jit(loss)(logits, target)
    (g_ours,) = torch.autograd.grad(ours, logits)
    theirs = loss(logits, target)
    (g_theirs,) = torch.autograd.grad(theirs, logits)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g_ours, g_theirs, rtol=2e-2, atol=1e-4)


def test_row_alignment_takes_equal_row_strides_and_contiguous_columns():
    layout = Layout(((0,),), ((1,),))
    extents = [4, 301]

    def align(strides, sizes, both=None, cols=301, block=4096, ext=extents, lay=layout):
        return row_alignment(lay, strides, ext, sizes, both or [True] * len(strides), cols, block)
    assert align([[301, 1], [301, 1]], [2, 4]) == 8  # 16 bytes of the narrowest dtype
    assert align([[301, 1], [301, 1]], [4, 4]) == 4
    assert align([[301, 1], [1, 0]], [4, 4], [True, False]) == 4  # a value per row
    assert align([[320, 1], [320, 1]], [2, 2], cols=320, ext=[4, 320]) == 0  # aligned already
    assert align([[320, 1], [320, 1]], [2, 2]) == 8  # a ragged end
    assert align([[301, 1], [0, 1]], [2, 2], [True, False]) == 8  # a value per column (a weight)
    assert align([[301, 1], [1, 0]], [2, 2]) == 0  # spans both, passed expanded
    assert align([[301, 1], [0, 0]], [2, 2]) == 0
    assert align([[320, 1], [301, 1]], [2, 2]) == 0  # other row strides
    assert align([[1, 4], [1, 4]], [2, 2]) == 0  # strided columns
    assert align([[301, 1]], [2], block=4) == 0  # a chunk narrower than a vector
    assert align([[3010, 301, 1]], [2], ext=[2, 10, 301], lay=Layout(((0,), (1,)), ((2,),))) == 0


def test_a_branch_of_a_pass_takes_its_passes_eviction_hint():
    body = ("a = tl.load(p@evict:T0@)\nb = tl.load(p@evict+:T0@)\n"
            "c = tl.load(p@evict:T0@)\nd = tl.load(p@evict+:T0@)\n")
    lines = _eviction_hints(body).splitlines()
    assert all('"evict_last"' in line for line in lines[:2]), lines
    assert all('"evict_first"' in line for line in lines[2:]), lines


@pytest.mark.parametrize("aligned", [True, False])
def test_whole_vectors_load_and_store_16_bytes_on_sm90(monkeypatch, tmp_path, aligned):
    """A softmax over bf16 rows of 40001 (looped: beyond MAX_PERSISTENT): 16-byte loads and
    stores (ld.global.v4.b32, st.global.v4.b32) with aligned rows, none without."""
    from fuser.codegen import launch

    if not aligned:
        monkeypatch.setattr(launch, "row_alignment", lambda *args: 0)
    fd = softmax_fd(torch.bfloat16)
    x = torch.randn(2, 40001).to(torch.bfloat16)
    y, _ = fd.execute([x])
    torch.testing.assert_close(y, torch.softmax(x.float(), -1).to(torch.bfloat16), rtol=2e-2, atol=1e-4)
    code = fd.last_triton_code()
    assert ("looped_aligned" in code) == aligned
    constexprs = {"BLOCK0": 1, "BLOCK1": 4096, "INT64": False, "EVEN0": True, "EVEN1": False,
                  "T0_stride1": 1, "T9_stride1": 1}
    if aligned:
        constexprs["ALIGN"] = 8
    ptx = sm90_ptx(code, constexprs, {"T0_ptr": "*bf16", "T9_ptr": "*bf16", "T10_ptr": "*fp32"}, tmp_path)
    vectors = len(re.findall(r"ld\.global[\w.:]*\.v4\.b32", ptx)), len(re.findall(r"st\.global[\w.:]*\.v4\.b32", ptx))
    assert (vectors[0] > 0 and vectors[1] > 0) == aligned, vectors


def scaled_exp_fd():
    """exp(x - lse) over bf16 rows, lse a value per row: a cross entropy's backward's shape."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        lse = fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.exp(fd.ops.sub(fd.ops.cast(x, DataType.Float), lse))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    return fd


@pytest.fixture
def short_aligned_tiles(monkeypatch):
    monkeypatch.setattr(heuristics, "ALIGNED_TILE_MIN_COLS", 1)  # (rows of a few hundred columns)


@pytest.mark.parametrize("cols", [301, 5000, 37, 7, 2048 + 3])
def test_a_pointwise_kernel_over_unaligned_rows_matches_eager(short_aligned_tiles, cols, device):
    fd = scaled_exp_fd()
    x = torch.randn(5, cols, device=device).to(torch.bfloat16)
    lse = torch.randn(5, 1, device=device)
    (y,) = fd.execute([x, lse])
    torch.testing.assert_close(y, torch.exp(x.float() - lse).to(torch.bfloat16), rtol=2e-2, atol=1e-2)
    assert "tile_aligned" in fd.last_triton_code()


@pytest.mark.parametrize("aligned", [True, False])
def test_a_pointwise_kernel_over_unaligned_rows_stores_16_bytes_on_sm90(short_aligned_tiles, monkeypatch, tmp_path,
                                                                        aligned):
    from fuser.codegen import launch

    if not aligned:
        monkeypatch.setattr(launch, "row_alignment", lambda *args: 0)
    fd = scaled_exp_fd()
    x, lse = torch.randn(3, 301).to(torch.bfloat16), torch.randn(3, 1)
    (y,) = fd.execute([x, lse])
    torch.testing.assert_close(y, torch.exp(x.float() - lse).to(torch.bfloat16), rtol=2e-2, atol=1e-2)
    code = fd.last_triton_code()
    assert ("tile_aligned" in code) == aligned
    constexprs = {"BLOCK0": 1 if aligned else 2, "BLOCK1": 2048 if aligned else 1024, "INT64": False,
                  "EVEN0": True, "EVEN1": False, "T0_stride1": 1, "T5_stride1": 1}
    if aligned:
        constexprs["ALIGN"] = 8
    ptx = sm90_ptx(code, constexprs, {"T0_ptr": "*bf16", "T1_ptr": "*fp32", "T5_ptr": "*bf16"}, tmp_path,
                   num_warps=4)  # (the launch's: 16 elements a thread)
    vectors = len(re.findall(r"ld\.global[\w.:]*\.v4\.b32", ptx)), len(re.findall(r"st\.global[\w.:]*\.v4\.b32", ptx))
    assert (vectors[0] > 0 and vectors[1] > 0) == aligned, vectors


def test_short_unaligned_rows_keep_several_rows_a_program(device):
    fd = scaled_exp_fd()
    x, lse = torch.randn(9, 301, device=device).to(torch.bfloat16), torch.randn(9, 1, device=device)
    (y,) = fd.execute([x, lse])
    torch.testing.assert_close(y, torch.exp(x.float() - lse).to(torch.bfloat16), rtol=2e-2, atol=1e-2)
    assert "tile_aligned" not in fd.last_triton_code()  # (a chunk a row would be mostly masked)


def product_fds():
    """sum(x * y) over rows (looped) and x * y - lse (pointwise), y declared [R, C]."""
    with FusionDefinition() as looped:
        x = looped.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = looped.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        looped.add_output(looped.ops.sum(looped.ops.mul(x, y), [-1]))
    with FusionDefinition() as pointwise:
        x = pointwise.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        y = pointwise.define_tensor(shape=[-1, -1], dtype=DataType.Float)
        lse = pointwise.define_tensor(shape=[-1, 1], contiguity=True, dtype=DataType.Float)
        pointwise.add_output(pointwise.ops.sub(pointwise.ops.mul(x, y), lse))
    return looped, pointwise


@pytest.mark.parametrize("make_y", [lambda r, c: torch.randn(r, 1).expand(r, c),   # column stride 0
                                    lambda r, c: torch.randn(1, 1).expand(r, c),   # both strides 0
                                    lambda r, c: torch.randn(1, c).expand(r, c),   # a value per column
                                    lambda r, c: torch.randn(c, r).t()])           # columns strided
def test_tensors_not_laid_out_as_the_rows_keep_the_plain_kernels(short_chunks, short_aligned_tiles, make_y):
    """An input declared [R, C] but passed expanded or transposed is not at the rows' aligned
    offsets: both kernels keep their plain forms and read it through its own strides."""
    looped, pointwise = product_fds()
    x, y, lse = torch.randn(5, 301), make_y(5, 301), torch.randn(5, 1)
    (s,) = looped.execute([x, y])
    torch.testing.assert_close(s, (x * y).sum(-1), rtol=1e-5, atol=1e-4)
    assert "looped_aligned" not in looped.last_triton_code()
    (o,) = pointwise.execute([x, y, lse])
    torch.testing.assert_close(o, x * y - lse)
    assert "tile_aligned" not in pointwise.last_triton_code()


def test_a_softmax_gradient_of_a_sum_at_a_vocabulary_of_50257():
    """autograd's gradient of .sum() is a tensor of ones expanded (strides 0, 0): the backward's
    kernels read it as it is, beside the aligned forward's."""
    def f(x):
        return torch.softmax(x.float(), -1)

    x = torch.randn(3, 50257).requires_grad_()
    (ours,) = torch.autograd.grad(fuser.jit(f)(x).sum(), x)
    (theirs,) = torch.autograd.grad(f(x).sum(), x)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def test_chunks_narrower_than_a_vector_keep_the_plain_loop(short_chunks, monkeypatch):
    monkeypatch.setattr(heuristics, "LOOPED_BLOCK", 4)  # fp16: 8 elements a vector
    fd = softmax_fd(torch.float16)
    x = torch.randn(3, 301).to(torch.float16)
    y, s = fd.execute([x])
    torch.testing.assert_close(s, x.float().sum(-1), rtol=1e-4, atol=1e-3)
    assert "looped_aligned" not in fd.last_triton_code()


def test_rows_of_a_multiple_of_16_load_16_bytes_in_the_plain_loop_on_sm90(tmp_path):
    """The plain looped kernel over rows Triton sees aligned (65536 bf16 columns) keeps its
    16-byte loads and stores: aligned rows are for the others only."""
    fd = softmax_fd(torch.bfloat16)
    x = torch.randn(1, 65536).to(torch.bfloat16)
    y, _ = fd.execute([x])
    torch.testing.assert_close(y, torch.softmax(x.float(), -1).to(torch.bfloat16), rtol=2e-2, atol=1e-5)
    code = fd.last_triton_code()
    assert "looped_aligned" not in code and "_looped_" in code
    constexprs = {"BLOCK0": 1, "BLOCK1": 4096, "INT64": False, "EVEN0": True, "EVEN1": True,
                  "T0_stride1": 1, "T9_stride1": 1}
    # (integer arguments that are multiples of 16, as Triton's launcher marks them)
    ptx = sm90_ptx(code, constexprs, {"T0_ptr": "*bf16", "T9_ptr": "*bf16", "T10_ptr": "*fp32"}, tmp_path,
                   divisible=("T0_stride0", "T9_stride0", "X1"))
    assert re.search(r"ld\.global[\w.:]*\.v4\.b32", ptx) and re.search(r"st\.global[\w.:]*\.v4\.b32", ptx)


def layernorm_fd():
    """The suite's LayerNorm forward definition, bf16 x, w and b (a fresh one: not the cached)."""
    from benchmarks import fuser_defs

    return fuser_defs.layernorm_fwd.__wrapped__()


@pytest.mark.parametrize("cols", [301, 37, 16 * 7 + 3])
def test_a_layernorm_with_weight_and_bias_over_unaligned_rows_matches_eager(short_chunks, cols, device):
    """A weight and a bias vary along the columns alone: they load lane by lane at the row's
    columns while x loads and y stores whole vectors at the row's aligned offsets."""
    gen = torch.Generator().manual_seed(cols)
    x = (torch.randn(6, cols, generator=gen) * 3 + 2).bfloat16().to(device)
    w, b = (torch.randn(cols, generator=gen).bfloat16().to(device) for _ in range(2))
    want = F.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5).bfloat16()
    fd = layernorm_fd()
    (y,) = fd.execute([x, w, b])
    torch.testing.assert_close(y, want, rtol=2e-2, atol=2e-2)
    assert "looped_aligned" in fd.last_triton_code()
    fn = fuser.jit(lambda x, w, b: F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5).to(x.dtype))
    torch.testing.assert_close(fn(x, w, b), want, rtol=2e-2, atol=2e-2)


def bias_gelu_fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        xb = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.broadcast_in_dim(fd.ops.cast(b, DataType.Float),
                                                                                 x.shape(), [1]))
        fd.add_output(fd.ops.cast(fd.ops.mul(xb, fd.ops.sigmoid(xb)), DataType.BFloat16))
    return fd


@pytest.mark.parametrize("cols", [301, 2048 + 3])
def test_a_pointwise_kernel_with_a_bias_over_unaligned_rows_matches_eager(short_aligned_tiles, cols, device):
    fd = bias_gelu_fd()
    gen = torch.Generator().manual_seed(cols)
    x = torch.randn(5, cols, generator=gen).bfloat16().to(device)
    b = torch.randn(cols, generator=gen).bfloat16().to(device)
    (y,) = fd.execute([x, b])
    xb = x.float() + b.float()
    torch.testing.assert_close(y, (xb * torch.sigmoid(xb)).bfloat16(), rtol=2e-2, atol=2e-2)
    assert "tile_aligned" in fd.last_triton_code()
