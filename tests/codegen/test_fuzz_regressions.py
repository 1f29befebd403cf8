"""Discrepancies found by the random-fusion fuzzer (tests/fuzz_fusions.py), minimized."""
import torch

from fuser import DataType, FusionDefinition
from fuser.ir import ReshapeOp
from fuser.ir.fusion import live_exprs
from fuser.runtime import FusionExecutorCache
from fuser.schedulers.axes import analyze_axes


def test_pow_integer_exponent_is_exact_on_the_interpreter():
    # seed 21900: eq(x, pow(x, n)) with n == 1 was False in the kernel, True in ATen: the
    # interpreter's pow, exp2(n * log2|x|) in fp32, missed x ** 1 by an ulp
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        n = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int32)
        p = fd.ops.pow(x, n)
        fd.add_output(p)
        fd.add_output(fd.ops.eq(x, p))
    xs = torch.tensor([-0.3798202574253082, 0.3798202574253082, 1.7, -2.9, 0.1, 3.3, -0.37])
    ns = torch.tensor([1, 1, 2, 3, 2, 1, 3], dtype=torch.int32)
    power, same = fd.execute([xs, ns])
    expected = FusionExecutorCache(fd.fusion, use_kernels=False).execute([xs, ns])
    assert torch.equal(power, torch.pow(xs, ns)) and torch.equal(power, expected[0])
    assert torch.equal(same, expected[1])


def test_round_keeps_the_sign_of_zero_on_the_interpreter():
    # seed 104723: atan2(round(x), round(x)) was 0 in the kernel and -pi in ATen for x in
    # (-0.5, 0): the interpreter's round, floor(x + 0.5), gave +0.0 where rint gives -0.0
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.reciprocal(fd.ops.round(x)))
    xs = torch.tensor([-0.3, -0.5, 0.3, 0.5, -1.5, 2.5, -0.0])
    (actual,) = fd.execute([xs])
    assert torch.equal(actual, torch.reciprocal(torch.round(xs)))


def test_squeezed_axis_is_no_loop_axis():
    # fuzz_jit seed 2037: sum(squeeze(x[1:2])) is 0-d, but the squeezed axis (size 1) was a loop
    # axis on the rows of the tile; the squeeze's input varied along the rows, so the 0-d
    # result was a column of copies and its store failed (pointer [1, 1], value [BLOCK0, 1])
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        row = fd.ops.squeeze(fd.ops.slice(x, [1, 0], [2, x.shape()[1]]), [0])
        total = fd.ops.sum(row, [0])
        fd.add_output(fd.ops.add(fd.ops.broadcast(total, [True]), w))
        fd.add_output(fd.ops.broadcast(total, [True]))
    for rows, cols in ((5, 8), (3, 13)):
        xs, ws = torch.randn(rows, cols), torch.randn(cols)
        shifted, total = fd.execute([xs, ws])
        torch.testing.assert_close(total, xs[1].sum().reshape(1))
        torch.testing.assert_close(shifted, xs[1].sum() + ws)
        # (x's columns and w's axis are two extents: the sum is a kernel of its own, not one
        # summed again for each element of w, test_recomputed_reductions.py)
        assert [s.kind.value for s in fd.last_segments()] == ["evaluator", "kernel", "kernel"]


def test_broadcast_axis_meeting_two_extents_is_two_loop_axes():
    # fuzz_jit seed 2682: b [m, 1] meets x [m, n] in one op and flat(x) [m * n] in another; its
    # broadcast axis joined the n and m * n axes into one loop axis of extent m * n, and x was
    # read (and x * b written) past its rows: wrong values, then a corrupted heap
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        m = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        b = fd.ops.broadcast(fd.ops.neg(m), [False, True])
        flat = fd.ops.broadcast(fd.ops.reshape(x, [-1]), [True, False])
        fd.add_output(fd.ops.mul(flat, b))
        fd.add_output(fd.ops.mul(x, fd.ops.sigmoid(b)))
    # checked before running: the old plan's kernel corrupts the heap
    kernel_exprs = [e for e in fd.fusion.exprs if not isinstance(e, ReshapeOp)]
    axes, _ = analyze_axes(kernel_exprs)
    assert sorted(str(a.extent) for a in axes.axes) == ["i0", "i0*i1", "i1"]
    xs, ms = torch.randn(5, 7), torch.randn(5)
    outer, scaled = fd.execute([xs, ms])
    torch.testing.assert_close(outer, xs.reshape(-1) * -ms[:, None])
    torch.testing.assert_close(scaled, xs * torch.sigmoid(-ms[:, None]))
    assert [s.kind.value for s in fd.last_segments()] == ["evaluator", "kernel"]


def test_constants_outside_fp32_range_stay_fp32():
    # tests/codegen/test_property.py on the H200: maximum(-c, 2.2250738585072014e-308) summed
    # over rows failed to compile, as Triton types a float below fp32's normal range as fp64 and
    # the loop's fp32 accumulator became fp64; eager converts the constant to fp32 first
    from fuser.codegen.elementwise import ElementwiseEmitter
    from fuser.ir import Scalar

    def literal(value, dtype=DataType.Float):
        return ElementwiseEmitter().literal(Scalar(0, DataType.Double, value=value), dtype)
    assert literal(2.2250738585072014e-308) == "0.0" and literal(1e39) == "float('inf')"
    assert literal(-1e39) == "float('-inf')" and literal(0.1) == repr(float(torch.tensor(0.1).item()))
    assert literal(1e-40) == f"tl.full([1, 1], {torch.tensor(1e-40).item()!r}, tl.float32)"  # subnormal
    assert literal(2.2250738585072014e-308, DataType.Double) == "2.2250738585072014e-308"
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        small = fd.ops.maximum(fd.ops.neg(x), 2.2250738585072014e-308)
        fd.add_output(fd.ops.sum(fd.ops.maximum(small, 1e-40), [0]))
    xs = torch.randn(70, 9)
    (out,) = fd.execute([xs])
    want = torch.maximum(torch.maximum(-xs, torch.tensor(2.2250738585072014e-308)), torch.tensor(1e-40)).sum(0)
    torch.testing.assert_close(out, want)
    code = "\n".join(line for line in fd.last_triton_code().splitlines() if not line.startswith("#"))
    assert "e-308" not in code and "tl.full([1, 1], 9.99994610111476e-41, tl.float32)" in code


def test_half_width_comparisons_match_eager_on_each_device(device):
    # 0.1 is 0.0999755859375 in half and 0.10009765625 in bf16: eager compares in the tensor's
    # type on the CPU and on CUDA, so a value equal to the rounded constant is not below it
    for dtype, dt, values in ((torch.half, DataType.Half, [0.0999755859375, 0.1000213623046875, 0.5]),
                              (torch.bfloat16, DataType.BFloat16, [0.10009765625, 0.099609375, 3.0])):
        x = torch.tensor(values, dtype=dtype, device=device)
        with FusionDefinition() as fd:
            t = fd.define_tensor([-1], contiguity=True, dtype=dt)
            s = fd.define_scalar(dtype=DataType.Double)
            fd.add_output(fd.ops.lt(t, 0.1))
            fd.add_output(fd.ops.eq(t, s))
            fd.add_output(fd.ops.ge(0.1, t))
        lt, eq, ge = fd.execute([x, 0.1])
        assert torch.equal(lt, x < 0.1) and torch.equal(eq, x == 0.1) and torch.equal(ge, x <= 0.1)


def test_an_op_no_output_needs_gets_no_segment():
    # fuzz_fusions seed 205 (--forms): a cast whose result nothing read became a kernel segment
    # with no outputs; over rows of 8192 columns or more (aligned tiles) its kernel's unmasked
    # branch was empty and the generated source did not parse. Only what an output needs runs.
    with FusionDefinition() as fd:
        idx = fd.define_tensor(shape=[-1, -1], contiguity=[None, True], dtype=DataType.Int)
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Half)
        fd.ops.cast(idx, DataType.Int32)  # dead
        fd.ops.exp(fd.ops.mul(x, x))  # dead, and reads what the output reads
        fd.add_output(fd.ops.add(x, 1.5))
    assert [e.op_name for e in live_exprs(fd.fusion.exprs, fd.fusion.outputs())] == ["add"]
    for cols in (301, 8195):
        a = torch.arange(cols).expand(2, cols)
        b = torch.randn(2, cols).half()
        (out,) = fd.execute([a, b])
        torch.testing.assert_close(out, b + 1.5)
        segments = fd.last_segments()
        assert [[e.op_name for e in s.exprs] for s in segments] == [["add"]]
        (reference,) = FusionExecutorCache(fd.fusion, use_kernels=False).execute([a, b])
        assert torch.equal(out, reference)
