"""The hot path of FusionExecutorCache.execute: a repeat call with the exact argument layout and
scalar values of an earlier one reuses that call's prepared launch (runtime.cache.ReadyCall).
It is found by the call's key before binding: the key fixes everything binding checks, so only
a key that an earlier, checked call had is served; anything else is bound and checked."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import ExtentConflictError, FusionInputError


def scaled_reciprocal():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.div(1.0, fd.ops.mul(x, s)))
    return fd


def test_negative_zero_scalar_is_not_served_the_launch_of_zero():
    fd = scaled_reciprocal()
    x = torch.rand(3, 5) + 1.0
    for s in (0.0, -0.0, 0.0, -0.0):
        (out,) = fd.execute([x, s])
        torch.testing.assert_close(out, 1.0 / (x * s))  # +inf or -inf per sign


def test_repeat_calls_reuse_the_ready_launch_and_follow_new_values():
    fd = scaled_reciprocal()
    x = torch.rand(4, 6) + 0.5
    fd.execute([x, 2.0])
    cache = fd.cache
    assert len(cache._ready) == 1
    ready = cache.ready_calls()[0]
    y = torch.rand(4, 6) + 0.5  # same layout, new data: the same ready launch
    torch.testing.assert_close(fd.execute([y, 2.0])[0], 1.0 / (y * 2.0))
    assert cache.ready_calls()[0] is ready and len(cache._ready) == 1
    torch.testing.assert_close(fd.execute([y, 3.0])[0], 1.0 / (y * 3.0))  # a new scalar value
    z = torch.rand(7, 6) + 0.5  # a new size: a new launch, the same runtime
    torch.testing.assert_close(fd.execute([z, 3.0])[0], 1.0 / (z * 3.0))
    assert len(cache._ready) == 3 and cache.num_runtimes == 1


def test_a_call_that_differs_from_a_ready_one_is_still_checked():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.add(a, b))
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    fd.execute([a, b])
    fd.execute([a, b])
    with pytest.raises(ExtentConflictError):
        fd.execute([a, torch.randn(3, 5)])
    with pytest.raises(FusionInputError, match="dtype"):
        fd.execute([a, b.double()])
    with pytest.raises(FusionInputError):
        fd.execute([a, b, b])


def test_the_ready_key_is_the_call_key_of_plain_calls():
    from fuser.runtime.cache import call_key, compile_ready_key

    fd = scaled_reciprocal()
    x = torch.rand(3, 5) + 1.0
    fd.execute([x, 2.0])
    key = compile_ready_key(fd.cache._binder)
    for args in ([x, 2.0], [x.t(), -0.0], (torch.nn.Parameter(x), 3), [x, 1 + 0j]):
        assert key(args) == call_key(args)
    # no ready call is made for these, so none is looked up
    assert key([x, torch.tensor(2.0)]) is None
    assert key([x]) is None and key(x) is None

    class Marked(torch.Tensor):
        pass
    assert key([x.as_subclass(Marked), 2.0]) is None


def test_the_ready_check_passes_only_calls_with_the_same_key():
    from fuser.runtime.cache import compile_ready_check, compile_ready_key

    fd = scaled_reciprocal()
    x = torch.rand(3, 5) + 1.0
    fd.execute([x, 2.0])
    key = compile_ready_key(fd.cache._binder)
    fits = compile_ready_check(fd.cache._binder)([x, 2.0])
    if fits is None:
        pytest.skip("this torch has no Dynamo guards")

    class Marked(torch.Tensor):
        pass
    assert fits([torch.rand(3, 5), 2.0]) and fits((torch.rand(3, 5), 2.0))
    others = [[x, 3.0], [x, 2], [x, True], [x, -2.0], [x, torch.tensor(2.0)], [torch.rand(3, 6), 2.0],
              [torch.rand(5, 3).t(), 2.0], [x.double(), 2.0], [torch.nn.Parameter(x), 2.0],
              [torch._neg_view(x), 2.0], [x.as_subclass(Marked), 2.0], [x, 2.0, 1.0], [x], x,
              [x.clone().requires_grad_(), 2.0], [torch.rand(3, 5, device="meta"), 2.0]]
    for args in others:
        assert not fits(args), args
    fits_zero = compile_ready_check(fd.cache._binder)([x, 0.0])
    assert fits_zero([x, 0.0]) and not fits_zero([x, -0.0])
    assert key([x, 0.0]) != key([x, -0.0])


def test_a_repeat_call_is_found_without_computing_its_key(monkeypatch):
    fd = scaled_reciprocal()
    x, y = torch.rand(4, 6) + 0.5, torch.rand(4, 6) + 0.5
    fd.execute([x, 2.0])
    fd.execute([y, 3.0])  # the last entry is now (y's layout, 3.0)
    cache, keyed = fd.cache, []
    real = cache._ready_key
    monkeypatch.setattr(cache, "_ready_key", lambda args: keyed.append(1) or real(args))
    if cache._last.fits is None:
        pytest.skip("this torch has no Dynamo guards")
    torch.testing.assert_close(fd.execute([x, 3.0])[0], 1.0 / (x * 3.0))
    assert keyed == []
    torch.testing.assert_close(fd.execute([x, 2.0])[0], 1.0 / (x * 2.0))  # found by its key
    torch.testing.assert_close(fd.execute([y, 2.0])[0], 1.0 / (y * 2.0))  # then by the check
    assert keyed == [1]


def test_calls_keep_their_keys_where_dynamos_guards_cannot_be_made(monkeypatch):
    import fuser.runtime.cache as cache_module

    def refuse(*args, **kwargs):
        raise TypeError("another torch's TensorGuards")
    monkeypatch.setattr(cache_module, "TensorGuards", refuse)
    fd = scaled_reciprocal()
    x = torch.rand(4, 6) + 0.5
    for s in (2.0, 2.0, 3.0, 2.0):
        torch.testing.assert_close(fd.execute([x, s])[0], 1.0 / (x * s))
    assert fd.cache._last.fits is None and len(fd.cache._ready) == 2


def test_one_tensor_passed_twice_is_served_through_its_key():
    """Dynamo's guards refuse a tensor passed in two places; such calls find their ready call
    by its key, and alternate correctly with calls of two tensors."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sub(fd.ops.mul(a, 2.0), b))
    z, y = torch.randn(3, 4), torch.randn(3, 4)
    for args in ([z, z], [z, y], [z, z], [y, z], [z, z]):
        torch.testing.assert_close(fd.execute(args)[0], args[0] * 2.0 - args[1])
    assert len(fd.cache._ready) == 1  # one layout: one ready call


def test_outputs_that_are_inputs_come_back_on_the_ready_path():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.neg(x))
        fd.add_output(x)
    x = torch.randn(10)
    for _ in range(3):
        neg, same = fd.execute([x])
        assert same is x
        torch.testing.assert_close(neg, -x)


def test_a_parameter_whose_data_changes_layout_gets_a_new_launch():
    """A Parameter is the same object call after call, while `.data` may be swapped for another
    layout: the launch is keyed by its shape and strides, never by its identity."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=False, dtype=DataType.Float)
        p = fd.define_tensor([-1, -1], contiguity=False, dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.mul(x, 2.0), p))
    x = torch.randn(4, 6)
    param = torch.nn.Parameter(torch.randn(4, 6))
    with torch.no_grad():
        torch.testing.assert_close(fd.execute([x, param])[0], x * 2 + param)
        param.data = torch.randn(6, 4).t()  # same shape, transposed strides
        torch.testing.assert_close(fd.execute([x, param])[0], x * 2 + param)
        param.data = torch.randn(4, 6)[:, ::2].repeat(1, 2)  # and back to a dense layout
        torch.testing.assert_close(fd.execute([x, param])[0], x * 2 + param)


def test_scalars_passed_as_0_dim_tensors_are_read_every_call():
    fd = scaled_reciprocal()
    x = torch.rand(3, 4) + 1.0
    for s in (2.0, 3.0, 5.0):
        torch.testing.assert_close(fd.execute([x, torch.tensor(s, dtype=torch.float64)])[0], 1.0 / (x * s))


def test_a_lazily_negated_tensor_is_read_as_its_value():
    """`torch._neg_view(x)` holds x in memory with a negation bit: a kernel reading the memory
    got x * 2 for -x * 2, first call or ready call alike (found by review)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(a, 2.0))
    x = torch.randn(3, 4)
    torch.testing.assert_close(fd.execute([x])[0], x * 2)  # a ready call for this layout
    neg = torch._neg_view(x)
    torch.testing.assert_close(fd.execute([neg])[0], -x * 2)
    torch.testing.assert_close(fd.execute([x])[0], x * 2)


@pytest.mark.parametrize("contiguity", [True, False])
def test_a_sparse_tensor_is_a_fusion_input_error_naming_the_input(contiguity):
    """A sparse tensor has no strided memory a kernel could read: with contiguity=False it
    reached the kernel and failed with NotImplementedError from torch (found while checking
    layouts after the lazy-negation fix)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=contiguity, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(a, 2.0))
    x = torch.randn(3, 4)
    fd.execute([x])  # a ready call for the dense layout
    with pytest.raises(FusionInputError, match=r"input 0 \(T0\).*layout torch.sparse_coo"):
        fd.execute([x.to_sparse()])
    torch.testing.assert_close(fd.execute([x])[0], x * 2)


def test_a_runtime_of_several_segments_replays_its_steps():
    """A matmul (ATen) between two kernels: a repeat call with the same layout replays the
    first call's steps (ReadyProgram: each kernel's prepared launch, the matmul's ATen rule)
    and follows new data; another layout, a conflicting extent among them, is still bound and
    refused."""
    from fuser.runtime.ready import ReadyProgram

    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        c = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.relu(fd.ops.add(fd.ops.matmul(fd.ops.exp(a), b), c)))
    g = torch.Generator().manual_seed(6)
    args = [torch.randn(5, 4, generator=g), torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g)]
    for _ in range(3):
        (out,) = fd.execute(args)
        torch.testing.assert_close(out, torch.relu(torch.exp(args[0]) @ args[1] + args[2]))
        args = [torch.randn_like(t) for t in args]
    (ready,) = fd.cache.ready_calls()
    assert isinstance(ready, ReadyProgram) and len(fd.last_segments()) > 1
    assert [type(s).__name__ for s in ready.steps] == ["_KernelStep", "_AtenStep", "_KernelStep"]
    with pytest.raises(ExtentConflictError):
        fd.execute([args[0], args[1], torch.randn(6, 3)])  # c's rows against a's


def test_sizes_kept_per_set_of_sizes_follow_each_call():
    """An ATen reshape between kernels takes its target sizes from the runtime's sizes kept
    per set of sizes (KnownSizes): calls alternating between shapes each get their own."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        flat = fd.ops.reshape(fd.ops.exp(x), [fd.ops.mul(x.shape()[0], x.shape()[1])])
        fd.add_output(fd.ops.mul(flat, 2.0))
    g = torch.Generator().manual_seed(8)
    for shape in ((3, 4), (5, 2), (3, 4), (6, 3), (5, 2)):
        x = torch.randn(*shape, generator=g)
        (out,) = fd.execute([x])
        torch.testing.assert_close(out, torch.exp(x).reshape(-1) * 2.0)
    assert len(fd.cache.runtimes()) == 1
    (runtime,) = fd.cache.runtimes()
    assert len(runtime._known_sizes) == 3
