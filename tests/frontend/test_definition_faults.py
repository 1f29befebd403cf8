"""Faults of the definition API, its cache and its inspection found by probing them as a user
would (forty-ninth session), each checked against eager PyTorch or nvFuser's rule."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition, FusionDefinitionError, FusionInputError
from fuser.multidevice import DeviceMesh
from tests.helpers import assert_eager, make


def _define(build, *dtypes):
    with FusionDefinition() as fd:
        ts = [fd.define_tensor([-1], contiguity=True, dtype=dt) for dt in dtypes]
        fd.add_output(build(fd, *ts))
    return fd


@pytest.mark.parametrize("build", [
    lambda fd, t: fd.ops.add(t, 2**70),
    lambda fd, t: fd.ops.eq(t, 2**64 + 1),
    lambda fd, t: fd.ops.add(fd.ops.cast(t, DataType.Double), 10**400),
    lambda fd, t: fd.ops.add(t, fd.define_scalar(2**70)),
    lambda fd, t: fd.ops.add(t, fd.ops.full([3], 2**64 + 5, DataType.Int)),
], ids=["add", "eq", "past-a-double", "define_scalar", "full"])
def test_an_integer_past_64_bits_is_refused(build):
    # a kernel's literal wrapped it: t + 2**70 was t, and eq(t, 2**64 + 1) true where t == 1
    with pytest.raises(FusionDefinitionError, match="does not fit in 64 bits"):
        _define(build, DataType.Int)


def test_a_float_of_2_to_the_70_is_a_double_scalar():
    fd = _define(lambda fd, t: fd.ops.add(t, fd.define_scalar(2**70, DataType.Double)), DataType.Double)
    x = torch.randn(3, dtype=torch.float64)
    assert_eager(fd.execute([x])[0], x + 2.0**70)


@pytest.mark.parametrize("build, match", [
    (lambda fd, t: fd.ops.pad(t, [1, 1], t), "pad: value must be a scalar"),
    (lambda fd, t: fd.ops.full([2], t, DataType.Float), "full: fill_value must be a scalar"),
    (lambda fd, t: fd.ops.where(fd.define_scalar(0.25), t, -1.0), "where: the condition must be a bool scalar"),
    (lambda fd, t: fd.ops.where(fd.define_scalar(DataType.Int), t, -1.0), "where: the condition must be a bool scalar"),
    (lambda fd, t: fd.ops.where(t, t, -1.0), "where: the condition must be a bool tensor"),
    (lambda fd, t: fd.ops.sum(t, [True]), "dim True"),
    (lambda fd, t: fd.ops.permute(t, [False]), "dim False"),
], ids=["pad-tensor-value", "full-tensor-fill", "where-double", "where-int-input", "where-float-tensor",
        "sum-bool-dim", "permute-bool-dim"])
def test_operands_nvfuser_refuses_are_refused(build, match):
    # a tensor pad value read each row's element and past the end; a Double condition picked by
    # truthiness (nvFuser's and eager's where take Bool only)
    with pytest.raises(FusionDefinitionError, match=match):
        _define(build, DataType.Float)


@pytest.mark.parametrize("kind", ["fmod", "remainder"])
def test_fmod_and_remainder_of_bools_are_refused(kind):
    # eager: "fmod_cpu" not implemented for 'Bool'; the kernel crashed in Triton
    with pytest.raises(FusionDefinitionError, match=f"{kind}: not defined for two bool operands"):
        _define(lambda fd, t: getattr(fd.ops, kind)(t, True), DataType.Bool)


@pytest.mark.parametrize("value, match", [(float("nan"), "cannot cast nan"), (1e30, "out of the range")])
def test_full_of_an_integer_type_checks_its_scalar_input(value, match):
    # the kernel filled with the raw double: Triton's ValueError / OverflowError on the CPU
    with FusionDefinition() as fd:
        s = fd.define_scalar(DataType.Double)
        fd.add_output(fd.ops.full([3], s, DataType.Int))
    assert fd.execute([2.9])[0].tolist() == [2, 2, 2]
    with pytest.raises(FusionInputError, match=match):
        fd.execute([value])


def test_nvfusers_operand_keywords():
    # nvfuser_direct names the leading operands arg, arg1 and arg2
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        c = fd.ops.cast(arg=fd.ops.matmul(arg1=a, arg2=b), dtype=DataType.Double)
        fd.add_output(fd.ops.sum(arg=c, dims=[0]))
    x, y = make((3, 4)), make((4, 5))
    assert_eager(fd.execute([x, y])[0], (x @ y).double().sum(0))
    assert "fd.ops.matmul(tv0, tv1)" in repr(fd)
    with pytest.raises(FusionDefinitionError, match="arg2= given beside 0 positional"):
        with FusionDefinition() as fd:
            a = fd.define_tensor([-1, -1], contiguity=True)
            fd.ops.matmul(arg2=a)


def _scaled(c):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Double)
        s = fd.define_scalar(DataType.Double)
        fd.add_output(fd.ops.mul(x, fd.ops.sub(s, c)))
    return fd


def test_constants_past_15_digits_are_two_fusions_in_one_cache():
    # sympy printed both constants as 9.00719925474099e+15: one structural hash, and the second
    # definition computed with the first one's constant through an LRUCache
    a, b = _scaled(2.0**53), _scaled(2.0**53 + 2)
    assert a.fusion.structural_hash() != b.fusion.structural_hash()
    cache = fuser.LRUCache(8)
    x = torch.ones(3, dtype=torch.float64)
    for fd, expected in ((a, 0.0), (b, -2.0)):
        fd.fec = cache.cache_compile(fd.fusion)
        assert fd.execute([x, 2.0**53])[0].tolist() == [expected] * 3
    assert cache.num_fusions() == 2
    assert "2.00000000000000" in str(_scaled(2.0).fusion)  # (a double sympy's 15 digits hold)


def _plus_scalar(dtype):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.add(x, fd.define_scalar(dtype)))
    return fd


def test_scalar_inputs_of_other_types_are_other_fusions():
    # the notation writes Int and Int32 scalars alike (i1): one cache entry, and the first
    # definition's binder decided the second's range check
    a, b = _plus_scalar(DataType.Int), _plus_scalar(DataType.Int32)
    assert a.fusion.structural_hash() != b.fusion.structural_hash()
    cache = fuser.LRUCache(8)
    x = torch.arange(3)
    for fd in (b, a):
        fd.fec = cache.cache_compile(fd.fusion)
    assert a.execute([x, 2**40])[0].tolist() == [2**40, 2**40 + 1, 2**40 + 2]
    with pytest.raises(FusionInputError, match="32-bit integer"):
        b.execute([x, 2**40])


def test_a_2d_mesh_prints_and_rebuilds_as_2d():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.relu(x))
        x.set_device_mesh(DeviceMesh([[0, 1], [2, 3]]))
    assert "DeviceMesh{{0 1}{2 3}}" in str(fd.fusion)
    assert "DeviceMesh([[0, 1], [2, 3]])" in repr(fd)
    assert repr(DeviceMesh([0, 1, 2, 3])) == "DeviceMesh{0 1 2 3}"
    assert DeviceMesh([[0, 1], [2, 3]]).as_list() == [[0, 1], [2, 3]]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only machine's answer")
def test_compile_ahead_for_cuda_without_cuda_names_the_device():
    fd = _define(lambda fd, t: fd.ops.relu(t), DataType.Float)
    meta = torch.empty(4, device="meta")
    with pytest.raises(FusionInputError, match="no CUDA device; pass device='cpu'"):
        fd.compile_ahead([meta])
    with pytest.raises(FusionInputError, match="device='banana' is not a device"):
        fd.compile_ahead([meta], device="banana")
    assert fd.compile_ahead([meta], device="cpu") == 0


def test_cache_info_counts_what_explain_compiled():
    # explain's call remembered the entry with its graphs in explain's own counts, so later
    # direct calls left cache_info at 0 graphs and 0 kernels
    f = fuser.jit(lambda x: (x * 2).relu())
    x = make((4, 8))
    fuser.explain(f, x)
    f(x)
    f(x)
    info = f.cache_info()
    assert info.calls == 3 and info.graphs == 1 and info.fusions == 1 and info.kernels == 1  # (explain's call too)


def test_a_contiguity_error_names_an_inner_axis_declared_none():
    # [True, None]: axis 1 declared expanded (stride 0); a dense tensor's error blamed axis 0 alone
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, None])
        fd.add_output(fd.ops.sum(fd.ops.exp(x), [1]))
    e = make((4, 1)).expand(4, 5)
    assert_eager(fd.execute([e])[0], e.exp().sum(1))
    with pytest.raises(FusionInputError, match=r"axis 1 is declared None \(a broadcast or expanded axis, "
                                               r"stride 0\) but has stride 1"):
        fd.execute([make((4, 5))])


def test_a_kernels_header_names_its_scalar_parameters():
    # kernel parameters s0, s1 are positional; the header maps them to the IR's names
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        s = fd.define_scalar(DataType.Double)
        fd.add_output(fd.ops.mul(fd.ops.exp(x), s))
    x = make((4, 8))
    assert_eager(fd.execute([x, 2.0])[0], x.exp() * 2.0)
    assert f"# s0 = {s!r}" in fd.last_triton_code()


def _full_only() -> FusionDefinition:
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.full([3], 2.0, DataType.Float))
    return fd


@pytest.mark.parametrize("device", [7, "cuda:5", "no-such-device", -1, True])
def test_execute_names_a_device_it_cannot_run_on(device):
    """`execute`'s device was accepted and ignored (a fusion without tensor inputs ran on the
    CPU whatever it named)."""
    with pytest.raises(fuser.FusionInputError, match=r"execute: device="):
        _full_only().execute([], device=device)


def test_execute_refuses_a_device_its_tensor_inputs_are_not_on():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.add(x, 1.0))
    x = torch.randn(3)
    torch.testing.assert_close(fd.execute([x], device="cpu")[0], x + 1)
    torch.testing.assert_close(fd.execute([x], device="cpu:0")[0], x + 1)  # (the CPU, as x.to("cpu:0"))
    with pytest.raises(fuser.FusionInputError, match="input 0 is on cpu"):
        fd.execute([x], device="meta")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_execute_puts_a_tensorless_fusions_outputs_on_its_device():
    (out,) = _full_only().execute([], device=0)
    assert out.device == torch.device("cuda", 0) and torch.equal(out.cpu(), torch.full([3], 2.0))


@pytest.mark.parametrize("build, match", [
    (lambda fd, a: fd.ops.sum(a, [1], keepdim="no"), "sum: keepdim must be a bool, got 'no'"),
    (lambda fd, a: fd.ops.var_mean(a, [1], 1, "False"), "var_mean: keepdim must be a bool"),
    (lambda fd, a: fd.ops.max(a, [1], keepdim=None), "max: keepdim must be a bool, got None"),
    (lambda fd, a: fd.ops.sum(a, [1.0]), r"sum: dim 1.0 must be an int"),
    (lambda fd, a: fd.ops.sum(a, [True]), r"sum: dim True must be an int"),
    (lambda fd, a: fd.ops.welford(a), r"welford: dims must be a non-empty list of dims, got None"),
    # var's errors named var_mean, which the user never called
    (lambda fd, a: fd.ops.var(a, [1], correction=-1), r"^var: correction must be a non-negative int"),
    (lambda fd, a: fd.ops.var(a, [5]), r"^var: dim 5 is out of range"),
    (lambda fd, a: fd.ops.var(fd.ops.cast(a, DataType.Int), [0]), r"^var: needs a floating tensor"),
])
def test_reduction_arguments_of_the_wrong_type_are_refused(build, match):
    # a truthy string kept the dim (any object counted as True), a float dim was called "out
    # of range", and welford without dims was a raw TypeError
    with pytest.raises(FusionDefinitionError, match=match):
        with FusionDefinition() as fd:
            build(fd, fd.define_tensor([-1, -1]))


def test_an_int_keepdim_is_taken_as_nvfusers_binding_takes_it():
    x = torch.randn(3, 4)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.sum(fd.from_pytorch(x), [1], keepdim=1))
    (out,) = fd.execute([x])
    assert_eager(out, x.sum(1, keepdim=True))


def test_execute_records_no_autograd_graph():
    # an ATen segment (the matmul) recorded MmBackward0 on an input needing grad where the
    # kernel's output had no graph; and an output's alias written into a leaf parameter raised
    # autograd's in-place error: nvFuser's execute runs outside autograd
    x = torch.randn(4, 3)
    w = torch.nn.Parameter(torch.randn(3, 5))
    with FusionDefinition() as fd:
        tx, tw = fd.from_pytorch(x), fd.from_pytorch(w)
        mm = fd.ops.matmul(tx, tw)
        fd.add_output(mm)
        fd.add_output(fd.ops.exp(mm))
        fd.add_output(fd.ops.permute(tw, [1, 0]))
    outs = fd.execute([x, w])
    assert all(o.grad_fn is None for o in outs)  # (the permute, a view of w, says requires_grad as torch's views do)
    assert not outs[0].requires_grad and not outs[1].requires_grad
    assert_eager(outs[1], torch.exp(x @ w).detach())
    assert torch.is_grad_enabled()
    with FusionDefinition() as step:
        p = step.from_pytorch(w)
        step.add_output(step.ops.mul(p, 0.5), alias_input=p)
    before = w.detach().clone()
    step.execute([w])
    assert_eager(w.detach(), before * 0.5)
    assert w.requires_grad and w.grad_fn is None


@pytest.mark.parametrize("start, step, dtype, match", [
    (0.5, 1, DataType.Int, r"iota: start 0.5 is DataType.Double, which an iota of DataType.Int cannot take"),
    (0, 1.5, DataType.Int32, r"iota: step 1.5 is DataType.Double"),
    (2, 0, DataType.Int, r"iota: step must be finite and not 0, got 0"),
    (float("inf"), 1.0, DataType.Float, r"iota: start must be finite, got inf"),
    (1j, 1, DataType.Float, r"iota: start .* which an iota of DataType.Float cannot take"),
])
def test_iota_refuses_what_nvfuser_refuses(start, step, dtype, match):
    # an Int iota of start 0.5 held 0.5, 1.5, ... in a kernel and 0, 1, ... through ATen; a
    # step of 0 or an infinite start gave a constant tensor
    with pytest.raises(FusionDefinitionError, match=match):
        with FusionDefinition() as fd:
            fd.ops.iota(4, start, step, dtype)


@pytest.mark.parametrize("dtype, good, bad, match", [
    (DataType.Int, [5, 3, -2], [5, 3, 0], r"iota: step i\d+ = 0, expected a finite value other than 0"),
    (DataType.Float, [4, 0.5, 0.25], [4, 0.0, float("inf")], r"iota: step d\d+ = inf"),
    (DataType.Float, [4, 0.5, 0.25], [4, float("nan"), 1.0], r"iota: start d\d+ = nan, expected a finite value "),
])
def test_iota_checks_scalar_inputs_as_it_checks_constants(dtype, good, bad, match):
    # given by scalar inputs, a step of 0 gave a constant tensor and an infinite one NaNs
    scalar = DataType.Int if dtype is DataType.Int else DataType.Double
    with FusionDefinition() as fd:
        n, start, step = fd.define_scalar(DataType.Int), fd.define_scalar(scalar), fd.define_scalar(scalar)
        fd.add_output(fd.ops.iota(n, start, step, dtype))
    for _ in range(2):  # (the second call binds on the fast path)
        (out,) = fd.execute(good)
        want = torch.arange(good[0], dtype=out.dtype) * good[2] + good[1]
        assert_eager(out, want)
        with pytest.raises(FusionInputError, match=match):
            fd.execute(bad)


def test_an_integer_arange_from_a_fractional_start_rounds_as_eager():
    # lowered to an Int iota of start 0.5, the kernel added 0.5, 1.5, ... where eager adds 0, 1, ...
    def f(x):
        return x + torch.arange(0.5, 4.5, dtype=torch.int64)
    x = torch.randn(4)
    assert_eager(fuser.jit(f)(x), f(x))


@pytest.mark.parametrize("build, match", [
    (lambda fd, t: fd.ops.sum(t, 3.0), "sum: dims must be a list, got 3.0"),
    (lambda fd, t: fd.ops.var_mean(t, 3.0), "var_mean: dims must be a list"),
    (lambda fd, t: fd.ops.welford(t, 1.0), "welford: dims must be a non-empty list"),
    (lambda fd, t: fd.ops.permute(t, 1.0), "permute: dims must be a list"),
    (lambda fd, t: fd.ops.squeeze(t, 1.0), "squeeze: dims must be a list"),
    (lambda fd, t: fd.ops.broadcast(t, True), "broadcast: is_broadcast_dim must be a list"),
    (lambda fd, t: fd.ops.broadcast_in_dim(t, [4, 1, 5], 2.0), "broadcast_in_dim: broadcast_dims must be a list"),
    (lambda fd, t: fd.ops.expand(t, 3.0), "expand: shape must be a list"),
    (lambda fd, t: fd.ops.reshape(t, 20.0), "reshape: new_shape must be a list"),
    (lambda fd, t: fd.ops.cat(t, 0), "cat: tensors must be a list"),
    (lambda fd, t: fd.ops.slice(t, 0, 2), "slice: start_indices must be a list"),
    (lambda fd, t: fd.ops.pad(t, 1), "pad: pad_widths must be a list"),
    (lambda fd, t: fd.ops.full(3, 1.0, DataType.Float), "full: shape must be a list"),
])
def test_a_number_given_for_a_list_is_refused_by_name(build, match):
    # each was a raw TypeError from iterating the number (nvFuser's error tests pass such input)
    with pytest.raises(FusionDefinitionError, match=match):
        with FusionDefinition() as fd:
            build(fd, fd.define_tensor([4, 1, 5]))


# -- fifty-seventh session's probe of the definition API --------------------------------------

def test_is_cpu_declares_a_cpu_scalar_tensor():
    # nvFuser's CPU scalar: shape [] only; from_pytorch marks a CPU 0-dim tensor so
    with FusionDefinition() as fd:
        with pytest.raises(FusionDefinitionError, match="is_cpu=True declares a CPU scalar tensor"):
            fd.define_tensor([-1, -1], contiguity=True, is_cpu=True)
        s = fd.from_pytorch(torch.tensor(2.0))
        t = fd.define_tensor([-1], contiguity=True)
        fd.add_output(fd.ops.mul(t, s))
    assert "is_cpu=True" in repr(fd)
    x, scale = make((5,)), torch.tensor(3.0)
    assert_eager(fd.execute([scale, x])[0], x * scale)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cpu_scalar_tensor_beside_gpu_tensors():
    with FusionDefinition() as fd:
        s = fd.define_tensor([], dtype=DataType.Float, is_cpu=True)
        t = fd.define_tensor([-1], contiguity=True)
        fd.add_output(fd.ops.add(fd.ops.mul(t, s), s))
    x, scale = make((7,)).cuda(), torch.tensor(1.5)
    for _ in range(2):  # (the repeat call's ready path too)
        out = fd.execute([scale, x])[0]
        assert out.is_cuda
        assert_eager(out, x * 1.5 + 1.5)
    assert_eager(fd.execute([scale.cuda(), x])[0], x * 1.5 + 1.5)  # (on the GPU too)


def test_define_vector_of_no_element_takes_an_empty_list():
    with FusionDefinition() as fd:
        x = fd.define_tensor([1], contiguity=True)
        fd.add_output(fd.ops.reshape(x, fd.define_vector(0)))
    x = make((1,))
    assert_eager(fd.execute([x, []])[0], x.reshape([]))
    with FusionDefinition() as fd:  # (it took the next vector's size: "a define_vector(2) ... got 0")
        x = fd.define_tensor([-1], contiguity=True)
        fd.define_vector(0)
        fd.add_output(fd.ops.reshape(x, fd.define_vector(2)))
    x = make((6,))
    assert_eager(fd.execute([x, [], [2, 3]])[0], x.reshape(2, 3))
    with pytest.raises(FusionInputError, match=r"input 1: a define_vector\(0\) takes a list of 0 values, got 1"):
        fd.execute([x, [6], [2, 3]])


@pytest.mark.parametrize("build,match", [
    (lambda fd, x: fd.ops.full([fd.define_scalar(-2)], 1.0, DataType.Float),
     r"full: shape entry .* \(the constant -2\) must be non-negative"),
    (lambda fd, x: fd.ops.broadcast_in_dim(x, [fd.define_scalar(-2), x.size(0)], [1]),
     r"shape entry .* \(the constant -2\) must be non-negative"),
    (lambda fd, x: x.size(5), r"size: axis 5 is out of range .* with 1 dims"),
    (lambda fd, x: x.size(True), r"size: axis True is out of range"),
    (lambda fd, x: fd.define_tensor([-1, -1], contiguity=["no", "no"]), r"contiguity\[0\] is 'no'"),
], ids=["full", "broadcast_in_dim", "size-past", "size-bool", "contiguity-string"])
def test_definition_entries_checked_when_defined(build, match):
    # a constant negative size failed at execute naming no op; size(5) raised a raw IndexError;
    # contiguity "no" counted as contiguous
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True)
        with pytest.raises(FusionDefinitionError, match=match):
            build(fd, x)
        fd.add_output(x)


def test_numpy_contiguity_and_axes_are_taken():
    # (the entries' check refused numpy's bools, which compute_tensor_descriptor itself made)
    np = pytest.importorskip("numpy")
    with FusionDefinition() as fd:
        x = fd.define_tensor(sizes=np.array([3, 4]), strides=np.array([4, 1]))
        y = fd.define_tensor([-1, -1], contiguity=[np.True_, np.True_])
        fd.add_output(fd.ops.add(x, fd.ops.broadcast_in_dim(fd.ops.sum(y, [1]), [x.size(np.int64(0)), 1], [0])))
    a, b = make((3, 4)), make((3, 5))
    assert_eager(fd.execute([a, b])[0], a + b.sum(1, keepdim=True))


# -- fifty-eighth session: a probe of bad input through the definition API ---------------------

@pytest.mark.parametrize("bad_op", [
    lambda fd, a, b: fd.ops.add(a, b),
    lambda fd, a, b: fd.ops.cat([a, b], 0),
    lambda fd, a, b: fd.ops.where(fd.ops.gt(a, 0.0), a, b),
], ids=["add", "cat", "where"])
def test_an_op_that_fails_part_way_leaves_no_extent_merged(bad_op):
    # add unified axis 0 of a and b, then refused axis 1: later inputs of other row counts
    # were refused for an extent the user never asked to be one
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, 8], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1, 9], contiguity=True, dtype=DataType.Float)
        with pytest.raises(FusionDefinitionError, match="8 and 9"):
            bad_op(fd, a, b)
        fd.add_output(fd.ops.exp(a))
        fd.add_output(fd.ops.exp(b))
    x, y = make((3, 8)), make((5, 9))
    ex, ey = fd.execute([x, y])
    torch.testing.assert_close(ex, x.exp())
    torch.testing.assert_close(ey, y.exp())
    assert "fd.ops.add" not in repr(fd) and "fd.ops.cat" not in repr(fd)


@pytest.mark.parametrize("call, match", [
    (lambda fd, a: fd.ops.add(a), r"fd\.ops\.add\(a, b\): missing a required argument: 'b'"),
    (lambda fd, a: fd.ops.add(a, a, a), r"fd\.ops\.add\(a, b\): too many positional arguments"),
    (lambda fd, a: fd.ops.sum(), r"fd\.ops\.sum\(tv, .*missing a required argument: 'tv'"),
    (lambda fd, a: fd.ops.exp(a, y=a), r"fd\.ops\.exp\(x\): got an unexpected keyword argument 'y'"),
    (lambda fd, a: fd.ops.linear(a, a, "bias"), "linear: bias must be a TensorView, got 'bias'"),
    (lambda fd, a: fd.ops.set(a, a), "set: kind must be a LoadStoreOpType"),
    (lambda fd, a: fd.ops.stride_order(a, 5), "stride_order: stride_order must be a list, got 5"),
], ids=["too-few", "too-many", "none", "keyword", "linear-bias", "set-kind", "stride-order"])
def test_a_call_with_wrong_arguments_names_the_op_and_its_parameters(call, match):
    # Python's TypeError named an internal function and counted the fusion argument
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        with pytest.raises(FusionDefinitionError, match=match):
            call(fd, a)
        fd.add_output(fd.ops.exp(a))


def test_another_definitions_tensor_is_refused_by_name():
    # f1.ops.exp(f2's tensor) went into f2's fusion while f1's repr recorded it: repr(f2)
    # named a tensor it never defined
    with FusionDefinition() as f2:
        t = f2.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        with FusionDefinition() as f1:
            u = f1.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
            with pytest.raises(FusionDefinitionError, match="belongs to another FusionDefinition"):
                f1.ops.exp(t)
            f1.add_output(f1.ops.exp(u))
        f2.add_output(f2.ops.exp(t))
    x = make((5,))
    torch.testing.assert_close(f2.execute([x])[0], x.exp())
    scope = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(f2), scope)  # the repr rebuilds the definition
    with FusionDefinition() as again:
        scope["nvfuser_fusion"](again)
    torch.testing.assert_close(again.execute([x])[0], x.exp())
    assert repr(f1).count("fd.ops.exp") == 1


def test_a_definition_whose_block_raised_does_not_execute():
    fd = FusionDefinition()
    with pytest.raises(FusionDefinitionError, match="out of range"):
        with fd:
            a = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
            fd.add_output(fd.ops.exp(a))
            fd.ops.sum(a, [5])
    with pytest.raises(FusionDefinitionError, match="with-block raised .*define it again"):
        fd.execute([make((2, 3))])


def test_execute_refuses_a_keyword_it_does_not_know():
    fd = _define(lambda fd, t: fd.ops.exp(t), DataType.Float)
    x = make((4,))
    with pytest.raises(FusionInputError, match="no keyword 'devcie'"):
        fd.execute([x], devcie="cuda:7")
    # nvFuser's debugging options are taken and ignored, and nvfuser_direct's auto_schedule
    torch.testing.assert_close(fd.execute([x], print_repro=False, _enable_options=[])[0], x.exp())
    torch.testing.assert_close(fd.execute([x], auto_schedule=True)[0], x.exp())
    with pytest.raises(FusionDefinitionError, match="no user schedules"):
        fd.execute([x], auto_schedule=False)
