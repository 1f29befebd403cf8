"""linear, matmul and sdpfa_fwd against eager PyTorch (these run through ATen evaluator
segments on either backend)."""
import math

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.errors import FusionDefinitionError
from tests.helpers import assert_eager, cases, make, run_and_check

f32, bf16, f16 = torch.float32, torch.bfloat16, torch.float16

LINEARS = [  # (id, input shape, weight shape, bias shape or None, dtype)
    ("2d", (3, 4), (5, 4), None, f32),
    ("bias", (3, 4), (5, 4), (5,), f32),
    ("3d-input", (2, 3, 4), (5, 4), (5,), f32),
    ("1d-weight", (3, 4), (4,), None, f32),
    ("bf16", (3, 8), (2, 8), (2,), bf16),
    ("f16", (2, 3, 8), (5, 8), None, f16),
    ("size1-rows", (1, 4), (5, 4), None, f32),
]


@pytest.mark.parametrize("sx,sw,sb,dtype,backend", cases([pytest.param(*c[1:], id=c[0]) for c in LINEARS]))
def test_linear(sx, sw, sb, dtype, backend):
    ins = [make(sx, dtype), make(sw, dtype)] + ([make(sb, dtype)] if sb else [])
    decl = [{"size1_broadcast": False}] * len(ins)
    run_and_check(lambda fd, *ts: fd.ops.linear(*ts), F.linear, ins, decl=decl, backend=backend)


MATMULS = [  # (id, a shape, b shape, b transposed in memory)
    ("mm", (3, 4), (4, 5), False),
    ("mm-b-transposed", (3, 4), (4, 5), True),
    ("batched-by-2d", (2, 3, 4), (4, 5), False),
    ("bmm", (2, 3, 4), (2, 4, 5), False),
    ("bcast-batch", (2, 3, 4), (1, 4, 5), False),
    ("mv", (3, 4), (4,), False),
    ("vm", (4,), (4, 5), False),
    ("vv", (4,), (4,), False),
]


@pytest.mark.parametrize("sa,sb,transposed,backend", cases([pytest.param(*c[1:], id=c[0]) for c in MATMULS]))
def test_matmul(sa, sb, transposed, backend):
    a = make(sa)
    b = make(sb[::-1]).t() if transposed else make(sb)
    decl = [None, {"stride_order": [0, 1]} if transposed else None]
    run_and_check(lambda fd, x, y: fd.ops.matmul(x, y), torch.matmul, [a, b], decl=decl, backend=backend)


@pytest.mark.parametrize("dtype,backend", cases([(bf16,), (f16,)]))
def test_matmul_reduced_precision(dtype, backend):
    a, b = make((3, 8), dtype), make((8, 5), dtype)
    run_and_check(lambda fd, x, y: fd.ops.matmul(x, y), torch.matmul, [a, b], backend=backend)


def test_matmul_contraction_mismatch_is_an_input_error():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.matmul(a, b))
    with pytest.raises(fuser.ExtentConflictError, match="input 0.*input 1|input 1.*input 0"):
        fd.execute([make((3, 4)), make((5, 6))])
    assert fd.execute([make((3, 4)), make((4, 6))])[0].shape == (3, 6)


def test_matmul_of_int_tensors_is_a_definition_error():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int)
        with pytest.raises(fuser.FusionDefinitionError):
            fd.ops.matmul(a, a)
        fd.add_output(a)


def _sdpa_ref(q, k, v, is_causal=False, scale=None):
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = q.float() @ k.float().transpose(-2, -1) * s
    if is_causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
    return [out, torch.logsumexp(scores, -1)]


SDPAS = [  # (id, q shape, kv length, v head size, is_causal, scale, dtype)
    ("basic", (2, 3, 5, 4), 6, 7, False, None, f32),
    ("causal", (1, 2, 5, 4), 5, 4, True, None, f32),
    ("scale", (2, 3, 5, 4), 6, 4, False, 0.3, f32),
    ("bf16", (1, 2, 3, 8), 4, 8, False, None, bf16),
    ("f16-causal", (1, 1, 4, 8), 4, 8, True, None, f16),
]


@pytest.mark.parametrize("qs,s,ev,causal,scale,dtype,backend", cases([pytest.param(*c[1:], id=c[0]) for c in SDPAS]))
def test_sdpfa_fwd(qs, s, ev, causal, scale, dtype, backend):
    n, h, l, e = qs
    q, k, v = make(qs, dtype), make((n, h, s, e), dtype), make((n, h, s, ev), dtype)
    decl = [{"size1_broadcast": False}] * 3

    def build(fd, a, b, c):
        out, lse, seed, offset = fd.ops.sdpfa_fwd(a, b, c, None, None, 0.0, causal, scale)
        return [out, lse]

    fd, outs = run_and_check(build, lambda a, b, c: _sdpa_ref(a, b, c, causal, scale), [q, k, v], decl=decl,
                             backend=backend, rtol=2e-2 if dtype != f32 else 1e-5,
                             atol=2e-2 if dtype != f32 else 1e-5)
    assert fd.fusion.outputs()[1].dtype is DataType.Float  # log-sum-exp is fp32 for 16- and 32-bit inputs


@pytest.mark.parametrize("bias_shape,with_mask,causal", [
    ((2, 3, 5, 6), False, False),  # a full [N, H, L, S] bias
    ((5, 6), True, False),  # a [L, S] bias broadcast over batch and heads, and a mask
    ((1, 3, 1, 6), False, True),  # per head and key position, causal
])
def test_sdpfa_fwd_with_bias_and_mask(bias_shape, with_mask, causal):
    """nvFuser's order: (query, key, value, bias, mask, dropout_p, is_causal, scale); bias and
    mask are added to the scaled scores, as F.scaled_dot_product_attention's float attn_mask."""
    q, k, v = make((2, 3, 5, 4)), make((2, 3, 6, 4)), make((2, 3, 6, 7))
    bias = make(bias_shape)
    mask = torch.where(torch.rand(5, 6) < 0.3, float("-inf"), 0.0) if with_mask else None
    if mask is not None:
        mask[:, 0] = 0.0  # every query sees at least one key
    with FusionDefinition() as fd:
        tq, tk, tv = (fd.from_pytorch(t) for t in (q, k, v))
        tb = fd.from_pytorch(bias)
        tm = fd.from_pytorch(mask) if mask is not None else None
        out, lse, _, _ = fd.ops.sdpfa_fwd(tq, tk, tv, tb, tm, 0.0, causal, 0.4)
        fd.add_output(out)
        fd.add_output(lse)
    args = [q, k, v, bias] + ([mask] if mask is not None else [])
    out, lse = fd.execute(args)
    attn = bias + (mask if mask is not None else 0.0)
    scores = q @ k.transpose(-2, -1) * 0.4 + attn
    if causal:
        scores = scores.masked_fill(~torch.ones(5, 6, dtype=torch.bool).tril(), float("-inf"))
    assert_eager(out, torch.softmax(scores, -1) @ v, rtol=1e-5, atol=1e-5)
    assert_eager(lse, torch.logsumexp(scores, -1), rtol=1e-5, atol=1e-5)


def test_sdpfa_fwd_bool_mask_keeps_where_true():
    """nvFuser's Bool mask (its test_sdpa_fwd_bias_mask): the scores stay where True and are
    -inf elsewhere, beside a bias; the same as F.scaled_dot_product_attention's Bool attn_mask."""
    q, k, v = make((2, 3, 5, 4)), make((2, 3, 6, 4)), make((2, 3, 6, 7))
    bias = make((2, 3, 5, 6))
    mask = torch.rand(2, 1, 5, 6) > 0.3
    mask[..., 0] = True
    mask[1, 0, 2] = False  # a query that sees no key: 0, as eager's SDPA gives (not NaN)
    with FusionDefinition() as fd:
        tq, tk, tv, tb = (fd.from_pytorch(t) for t in (q, k, v, bias))
        tm = fd.define_tensor([-1, 1, -1, -1], contiguity=[True, None, True, True], dtype=DataType.Bool)
        out, lse, _, _ = fd.ops.sdpfa_fwd(tq, tk, tv, bias=tb, mask=tm)
        fd.add_output(out)
        fd.add_output(lse)
    out, lse = fd.execute([q, k, v, bias, mask])
    scores = (q @ k.transpose(-2, -1) / 2.0 + bias).masked_fill(~mask, float("-inf"))
    assert_eager(out, torch.softmax(scores, -1).nan_to_num(0.0) @ v, rtol=1e-5, atol=1e-5)
    assert out[1, :, 2].eq(0).all() and lse[1, :, 2].eq(float("-inf")).all()
    assert_eager(lse, torch.logsumexp(scores, -1), rtol=1e-5, atol=1e-5)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.masked_fill(~mask, float("-inf")))
    assert_eager(out, want, rtol=1e-5, atol=1e-5)


def test_sdpfa_fwd_several_batch_axes():
    """[N*, H, L, E]: two batch axes (nvFuser's test_alphafold3), with a bias over the last ones."""
    q, k, v = make((2, 3, 2, 5, 4)), make((2, 3, 2, 6, 4)), make((2, 3, 2, 6, 7))
    bias = make((3, 1, 5, 6))
    with FusionDefinition() as fd:
        tq, tk, tv, tb = (fd.from_pytorch(t) for t in (q, k, v, bias))
        out, lse, _, _ = fd.ops.sdpfa_fwd(tq, tk, tv, tb, None, 0.0, True, 0.7)
        fd.add_output(out)
        fd.add_output(lse)
    out, lse = fd.execute([q, k, v, bias])
    assert out.shape == (2, 3, 2, 5, 7) and lse.shape == (2, 3, 2, 5)
    scores = (q @ k.transpose(-2, -1) * 0.7 + bias).masked_fill(~torch.ones(5, 6, dtype=torch.bool).tril(),
                                                                 float("-inf"))
    assert_eager(out, torch.softmax(scores, -1) @ v, rtol=1e-5, atol=1e-5)
    assert_eager(lse, torch.logsumexp(scores, -1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", ["3d", "ranks", "bool_bias"])
def test_sdpfa_fwd_shapes_and_types_refused(bad):
    with pytest.raises(FusionDefinitionError, match={"3d": "query must be", "ranks": "key must be",
                                                     "bool_bias": "bias must be"}[bad]):
        with FusionDefinition() as fd:
            q = fd.define_tensor([2, 5, 4] if bad == "3d" else [2, 3, 5, 4], contiguity=True)
            k = fd.define_tensor([1, 2, 3, 6, 4] if bad == "ranks" else [2, 3, 6, 4], contiguity=True)
            b = fd.define_tensor([5, 6], contiguity=True, dtype=DataType.Bool) if bad == "bool_bias" else None
            fd.add_output(fd.ops.sdpfa_fwd(q, k, k, b)[0])


def test_sdpfa_fwd_bias_that_does_not_broadcast_is_a_definition_error():
    with pytest.raises(FusionDefinitionError, match="bias"):
        with FusionDefinition() as fd:
            q = fd.define_tensor([2, 3, 5, 4], contiguity=True)
            k = fd.define_tensor([2, 3, 6, 4], contiguity=True)
            b = fd.define_tensor([5, 7], contiguity=True)  # 7 keys against 6
            fd.add_output(fd.ops.sdpfa_fwd(q, k, k, b)[0])


@pytest.mark.parametrize("batch_axes", [1, 2])
def test_sdpfa_fwd_multidevice_axis_map(batch_axes):
    """Batch axes and heads shard every operand with the output; L follows the query, the value's
    head size the output's; a bias's axes align right with [N*, H, L, S] (S maps to nothing)."""
    from fuser.multidevice.axis_map import axis_pairs
    nb = batch_axes
    with FusionDefinition() as fd:
        q, k, v = (fd.define_tensor([-1] * (nb + 3), contiguity=True) for _ in range(3))
        b = fd.define_tensor([1, -1, -1], contiguity=[None, True, True])  # [1, L, S]
        out, lse, _, _ = fd.ops.sdpfa_fwd(q, k, v, b)
        fd.add_output(out)
        fd.add_output(lse)
    (e,) = [x for x in fd.fusion.exprs if type(x).__name__ == "SdpaFwdOp"]
    ids = {t: t.domain.no_reductions() for t in (q, k, v, b)}
    o, ol = out.domain.no_reductions(), lse.domain.no_reductions()
    shared = list(range(nb + 1))
    assert axis_pairs(e, q, out) == [(ids[q][a], o[a]) for a in shared + [nb + 1]]
    assert axis_pairs(e, k, out) == [(ids[k][a], o[a]) for a in shared]
    assert axis_pairs(e, v, out) == [(ids[v][a], o[a]) for a in shared + [nb + 2]]
    assert axis_pairs(e, v, lse) == [(ids[v][a], ol[a]) for a in shared]
    assert axis_pairs(e, b, out) == [(ids[b][1], o[nb + 1])]  # L; the broadcast H maps to nothing


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_sdpfa_fwd_several_batch_axes_through_flash_on_cuda(causal):
    """On the GPU flash takes one batch axis: several are flattened into it and back."""
    q, k, v = (torch.randn(2, 3, 4, 64, 32, device="cuda", dtype=bf16) for _ in range(3))
    with FusionDefinition() as fd:
        tq, tk, tv = (fd.from_pytorch(t) for t in (q, k, v))
        out, lse, _, _ = fd.ops.sdpfa_fwd(tq, tk, tv, None, None, 0.0, causal, None)
        fd.add_output(out)
        fd.add_output(lse)
    out, lse = fd.execute([q, k, v])
    want = F.scaled_dot_product_attention(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), is_causal=causal)
    assert out.shape == (2, 3, 4, 64, 32) and lse.shape == (2, 3, 4, 64)
    assert_eager(out, want.unflatten(0, (2, 3)), rtol=2e-2, atol=2e-2)
    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(32)
    if causal:
        scores = scores.masked_fill(~torch.ones(64, 64, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1), rtol=1e-3, atol=1e-3)


def _expanded(fd, t, size):
    return fd.ops.expand(t, [size, *[t.size(k) for k in range(1, t.ndim)]])


def test_matmul_of_an_operand_expanded_on_a_batch_axis():
    """An expanded broadcast's size counts on a batch axis, as the contraction's did: the product
    was refused with an InternalError (its batch axis taken as 1), and a declared batch that
    disagrees with the expanded size is an ExtentConflictError naming both."""
    x = make((1, 4, 6))
    for w in (make((1, 6, 2)), make((3, 6, 2))):
        with FusionDefinition() as fd:
            tx = fd.define_tensor([1, -1, -1], contiguity=[None, True, True])
            tw = fd.define_tensor([1 if w.shape[0] == 1 else -1, -1, -1], contiguity=True)
            n = fd.define_scalar(dtype=DataType.Int)
            fd.add_output(fd.ops.matmul(_expanded(fd, tx, n), tw))
        out, = fd.execute([x, w, w.shape[0] if w.shape[0] > 1 else 4])
        assert_eager(out, torch.matmul(x.expand(out.shape[0], 4, 6), w), rtol=1e-5, atol=1e-5)
    with pytest.raises(fuser.ExtentConflictError, match="two values"):
        fd.execute([x, make((3, 6, 2)), 4])


def test_sdpfa_fwd_of_a_query_expanded_over_the_batch():
    """A query shared by the batch (declared [1, ...], expanded to the key's batch): refused
    as a size conflict on the key before, its batch axis taken as 1."""
    q, k, v = make((1, 2, 4, 8)), make((3, 2, 5, 8)), make((3, 2, 5, 8))
    with FusionDefinition() as fd:
        tq = fd.define_tensor([1, -1, -1, -1], contiguity=[None, True, True, True])
        tk, tv = (fd.define_tensor([-1, -1, -1, -1], contiguity=True) for _ in range(2))
        out, _, _, _ = fd.ops.sdpfa_fwd(_expanded(fd, tq, tk.size(0)), tk, tv)
        fd.add_output(out)
    got, = fd.execute([q, k, v])
    assert_eager(got, F.scaled_dot_product_attention(q.expand(3, 2, 4, 8), k, v), rtol=1e-5, atol=1e-5)


def test_sdpfa_bwd_refuses_a_logsumexp_made_with_a_bias_or_mask():
    """sdpfa_bwd (nvFuser's arguments) takes no bias or mask: from a logsumexp that includes
    one, its gradients left it out, silently wrong by up to 1.5."""
    for which in ("bias", "mask"):
        with FusionDefinition() as fd:
            q, k, v, g = (fd.define_tensor([-1, -1, -1, -1], contiguity=True) for _ in range(4))
            extra = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Bool if which == "mask" else DataType.Float)
            out, lse, seed, offset = fd.ops.sdpfa_fwd(q, k, v, **{which: extra})
            with pytest.raises(fuser.FusionDefinitionError, match=f"sdpfa_fwd with a {which}"):
                fd.ops.sdpfa_bwd(g, q, k, v, out, lse, 0.0, False, seed, offset, None)
            fd.add_output(out)


def test_double_attention_and_grouped_and_scaled_matmuls_keep_doubles():
    """The evaluator's math forms ran Double operands in fp32 (errors of 2e-7 to 4e-7 against
    eager in fp64); its log-sum-exp is Double too."""
    f64 = torch.float64
    q, k, v, g = (make((1, 2, 4, 8), f64) for _ in range(4))
    with FusionDefinition() as fd:
        tq, tk, tv, tg = (fd.from_pytorch(t) for t in (q, k, v, g))
        out, lse, seed, offset = fd.ops.sdpfa_fwd(tq, tk, tv)
        grads = fd.ops.sdpfa_bwd(tg, tq, tk, tv, out, lse, 0.0, False, seed, offset, None)
        for t in (out, lse, *grads):
            fd.add_output(t)
    got = fd.execute([q, k, v, g])
    want = _eager_grads_f64(q, k, v, g)
    assert got[1].dtype == f64
    for a, b in zip([got[0], *got[2:]], want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    a, b, offsets = make((7, 5), f64), make((3, 5, 6), f64), torch.tensor([0, 4, 7], dtype=torch.int32)
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.grouped_mm(*(fd.from_pytorch(t) for t in (a, b, offsets))))
    torch.testing.assert_close(fd.execute([a, b, offsets])[0], torch.cat([a[:4] @ b[1], a[4:] @ b[2]]),
                               rtol=1e-12, atol=1e-12)
    a, b = make((4, 5), f64), make((5, 3), f64)
    s1, s2 = make((4, 1)).abs() + 0.5, make((1, 3)).abs() + 0.5
    with FusionDefinition() as fd:
        out, _, _ = fd.ops.scaled_mm(*(fd.from_pytorch(t) for t in (a, b, s1, s2)), dtype=DataType.Double)
        fd.add_output(out)
    torch.testing.assert_close(fd.execute([a, b, s1, s2])[0], (a * s1.double()) @ (b * s2.double()),
                               rtol=1e-12, atol=1e-12)


def _eager_grads_f64(q, k, v, g):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v)
    out.backward(g)
    return [out.detach(), q.grad, k.grad, v.grad]


def test_linear_bias_of_one_element_and_a_vector_weights_bias():
    """A [1] bias broadcasts over a 2-D weight's rows, as in eager (the weight's rows were
    forced to 1); a 1-D weight takes a 0-dim bias (an InternalError from ATen at execute
    before) and refuses a 1-D one by name."""
    x, w, b = make((4, 6)), make((5, 6)), make((1,))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.linear(*(fd.from_pytorch(t) for t in (x, w, b))))
    assert_eager(fd.execute([x, w, b])[0], F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    w1, b0 = make((6,)), make(())
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.linear(*(fd.from_pytorch(t) for t in (x, w1, b0))))
    for _ in range(2):  # (the second execute takes the ready program's direct call)
        assert_eager(fd.execute([x, w1, b0])[0], x @ w1 + b0, rtol=1e-5, atol=1e-5)
    with pytest.raises(fuser.FusionDefinitionError, match="0 with a 1-D weight"), FusionDefinition() as fd:
        fd.ops.linear(*(fd.from_pytorch(t) for t in (x, w1, make((3,)))))


@pytest.mark.parametrize("s1_shape, s2_shape", [((16, 1), (1, 1)), ((1, 1), (1, 24))], ids=["row-tensor", "tensor-col"])
def test_scaled_mm_with_a_per_tensor_scale_beside_a_row_or_column_one(s1_shape, s2_shape):
    # torch._scaled_mm refuses the mix with a ValueError, which the math form's fallback missed
    m, k, n = 16, 32, 24
    g = torch.Generator().manual_seed(5)
    a = (torch.randn(m, k, generator=g) * 20).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=g) * 20).to(torch.float8_e4m3fn).t()
    s1, s2 = torch.rand(s1_shape, generator=g) * 0.1, torch.rand(s2_shape, generator=g) * 0.1
    with FusionDefinition() as fd:
        A = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float8_e4m3fn, stride_order=[1, 0])
        B = fd.define_tensor(shape=[-1, -1], dtype=DataType.Float8_e4m3fn, stride_order=[0, 1])
        S1 = fd.define_tensor(shape=[-1 if d != 1 else 1 for d in s1_shape], dtype=DataType.Float)
        S2 = fd.define_tensor(shape=[-1 if d != 1 else 1 for d in s2_shape], dtype=DataType.Float)
        fd.add_output(fd.ops.scaled_mm(A, B, S1, S2, dtype=DataType.BFloat16)[0])
    out, = fd.execute([a, b, s1, s2])
    expected = ((a.float() * s1) @ (b.float() * s2)).to(torch.bfloat16)
    torch.testing.assert_close(out, expected)
