"""welford (a var_mean reduction, fused with its neighbours), tensor metadata as values
(shape, size, stride_order) and sdpfa_bwd, against eager PyTorch."""
import math

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.segment import SegmentKind
from tests.frontend.test_repr import check_roundtrip
from tests.helpers import assert_eager, backend_env, cases, make, run_and_check

f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16


@pytest.mark.parametrize("dtype,dims,backend", cases([(f32, [-1]), (bf16, [0, 2]), (f32, [1])]))
def test_welford(dtype, dims, backend):
    """(avg, var_sum, n): the mean, the sum of squared deviations and the int64 count, each
    shaped like the reduced tensor; var_sum / n is the population variance."""
    x = make((3, 4, 5), dtype)

    def build(fd, t):
        avg, var_sum, n = fd.ops.welford(t, dims)
        return [avg, var_sum, n, fd.ops.div(var_sum, n)]

    def reference(t):
        var, mean = torch.var_mean(t.float(), dims, correction=0)
        count = math.prod(t.shape[d] for d in dims)
        return [mean.to(dtype), (var * count).to(dtype), torch.full(mean.shape, count), var.to(dtype)]

    run_and_check(build, reference, [x], backend=backend)


@pytest.mark.parametrize("backend", ["kernel", "aten"])
def test_welford_over_no_element(backend):
    """var_sum is a sum over nothing: 0 (var is 0/0 there, and var_sum was var * 0 = NaN)."""
    with backend_env(backend), FusionDefinition() as fd:
        avg, var_sum, n = fd.ops.welford(fd.define_tensor([-1, -1], contiguity=True), [1])
        for out in (avg, var_sum, n):
            fd.add_output(out)
    with backend_env(backend):
        avg, var_sum, n = fd.execute([make((3, 0))])
        assert var_sum.tolist() == [0.0] * 3 and n.tolist() == [0] * 3 and avg.isnan().all()
        x = make((3, 5))
        torch.testing.assert_close(fd.execute([x])[1], x.var(1, correction=0) * 5)


def test_welford_fuses_into_one_normalization_kernel():
    """A layer norm written with welford: one generated kernel, and a second size reuses it."""
    def build(fd, t):
        avg, var_sum, n = fd.ops.welford(t, [1])
        rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.div(var_sum, n), 1e-5))
        centered = fd.ops.sub(t, fd.ops.broadcast(avg, [False, True]))
        return fd.ops.mul(centered, fd.ops.broadcast(rstd, [False, True]))

    x = make((4, 16))
    fd, _ = run_and_check(build, lambda t: F.layer_norm(t, (16,), eps=1e-5), [x], backend="kernel", atol=1e-4)
    assert [s.kind for s in fd.last_segments()] == [SegmentKind.kernel]
    y = make((3, 24))
    assert_eager(fd.execute([y])[0], F.layer_norm(y, (24,), eps=1e-5), atol=1e-4)
    assert fd.cache.num_runtimes == 1


def test_welford_errors():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        i = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        with pytest.raises(fuser.FusionDefinitionError, match="welford: dims must be a non-empty list"):
            fd.ops.welford(t, [])
        with pytest.raises(fuser.FusionDefinitionError, match="welford: dim 2 is out of range"):
            fd.ops.welford(t, [2])
        with pytest.raises(fuser.FusionDefinitionError, match="welford: needs a floating tensor"):
            fd.ops.welford(i, [0])
        fd.add_output(t)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_shape_and_size_as_operands(backend):
    """shape / size give the extents as scalars: shape entries of reshape, full and
    broadcast_in_dim, and operands of arithmetic; symbolic, so a second size reuses the cache."""
    def build(fd, t, v):
        n, m = fd.ops.shape(t)
        last = fd.ops.size(t, -1)
        flat = fd.ops.reshape(t, [fd.ops.mul(n, m)])
        ones = fd.ops.full([n, 2], 1.5, DataType.Float)
        rows = fd.ops.broadcast_in_dim(v, [n, last], [1])
        return [fd.ops.mul(flat, 2.0), ones, fd.ops.add(rows, t), fd.ops.mul(t, last)]

    def reference(t, v):
        return [t.reshape(-1) * 2, torch.full((t.shape[0], 2), 1.5), v + t, t * t.shape[1]]

    fd, _ = run_and_check(build, reference, [make((3, 4)), make((4,))], backend=backend)
    t, v = make((5, 2)), make((2,))
    with backend_env(backend):
        for got, want in zip(fd.execute([t, v]), reference(t, v)):
            assert_eager(got, want)
    assert fd.cache.num_runtimes == 1
    if backend == "aten":  # (the round trip compares on ATen: fd's cache keeps its backend)
        check_roundtrip(fd, [t, v])


def test_shape_of_an_expanded_dim_and_errors():
    with FusionDefinition() as fd:
        t = fd.define_tensor([1, -1], contiguity=True)
        e = fd.ops.expand(t, [3, -1])
        assert fd.ops.size(e, 0).expr == 3 and fd.ops.shape(t)[0].expr == 1
        with pytest.raises(fuser.FusionDefinitionError, match="size: dim 2 is out of range"):
            fd.ops.size(t, 2)
        fd.add_output(e)


@pytest.mark.parametrize("order,backend", cases([([0, 1, 2],), ([1, 0, 2],), ([],)]))
def test_stride_order(order, backend):
    """The output is allocated with dim k at stride rank order[k] (0 the innermost), dense."""
    x = make((2, 3, 4))
    fd, (out,) = run_and_check(lambda fd, t: fd.ops.stride_order(fd.ops.exp(t), order), torch.exp, [x],
                               backend=backend)
    want = torch.empty_permuted(x.shape, sorted(range(3), key=lambda k: -order[k])) if order else x
    assert out.stride() == want.stride()
    if backend == "aten":  # (the round trip compares on ATen: fd's cache keeps its backend)
        check_roundtrip(fd, [x])


def test_stride_order_needs_a_permutation():
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        with pytest.raises(fuser.FusionDefinitionError, match=r"stride_order: stride_order \[0, 0\] must be"):
            fd.ops.stride_order(t, [0, 0])
        fd.add_output(t)


# -- sdpfa_bwd ------------------------------------------------------------------------------

SDPA_BWDS = [  # (id, query shape, key length, value head size, causal, scale, dtype)
    ("plain", (2, 3, 5, 8), 5, 8, False, None, f32),
    ("causal-cross", (1, 2, 4, 8), 6, 4, True, None, f32),
    ("scale", (1, 2, 3, 4), 5, 4, False, 0.3, f32),
    ("bf16-causal", (1, 2, 4, 8), 4, 8, True, None, bf16),
]


def _sdpa_backward_definition(causal, scale, dtype):
    dt = DataType.from_torch(dtype)
    with FusionDefinition() as fd:
        q, k, v, g = (fd.define_tensor([-1, -1, -1, -1], contiguity=True, dtype=dt) for _ in range(4))
        out, lse, seed, offset = fd.ops.sdpfa_fwd(q, k, v, dropout_p=0.0, is_causal=causal, scale=scale)
        grads = fd.ops.sdpfa_bwd(g, q, k, v, out, lse, 0.0, causal, seed, offset, scale)
        for t in (out, *grads):
            fd.add_output(t)
    return fd


def _eager_attention_grads(q, k, v, grad, causal, scale):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    out.backward(grad)
    return [out.detach(), q.grad, k.grad, v.grad]


@pytest.mark.parametrize("qs,s,ev,causal,scale,dtype", [pytest.param(*c[1:], id=c[0]) for c in SDPA_BWDS])
def test_sdpfa_bwd(qs, s, ev, causal, scale, dtype):
    n, h, l, e = qs
    q, k, v, g = make(qs, dtype), make((n, h, s, e), dtype), make((n, h, s, ev), dtype), make((n, h, l, ev), dtype)
    fd = _sdpa_backward_definition(causal, scale, dtype)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype != f32 else dict(rtol=1e-5, atol=1e-5)
    for got, want in zip(fd.execute([q, k, v, g]), _eager_attention_grads(q, k, v, g, causal, scale)):
        assert_eager(got, want, **tol)


def test_sdpfa_bwd_repr_and_errors():
    fd = _sdpa_backward_definition(True, None, f32)
    check_roundtrip(fd, [make((1, 2, 3, 4)) for _ in range(4)])
    with FusionDefinition() as fd:
        q = fd.define_tensor([-1, -1, -1, -1], contiguity=True)
        out, lse, seed, offset = fd.ops.sdpfa_fwd(q, q, q)
        with pytest.raises(fuser.FusionDefinitionError, match="sdpfa_bwd: logsumexp must be"):
            fd.ops.sdpfa_bwd(q, q, q, q, out, out, 0.0, False, seed, offset, None)
        fd.add_output(out)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sdpfa_bwd_flash_on_gpu():
    """On CUDA both directions run flash attention's kernels."""
    shape = (2, 4, 64, 64)
    q, k, v, g = (make(shape, f16).cuda() for _ in range(4))
    fd = _sdpa_backward_definition(True, None, f16)
    for got, want in zip(fd.execute([q, k, v, g]), _eager_attention_grads(q, k, v, g, True, None)):
        assert_eager(got, want, rtol=2e-2, atol=2e-2)
