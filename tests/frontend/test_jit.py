"""`fuser.jit` and `torch.compile(backend="fuser")`: decorator forms, dynamic shapes and the
compile counters, eager fallback for ops with no lowering, bad arguments."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import fuser

from .jit_helpers import assert_close_to_eager


def gelu_bias(x, bias):
    return F.gelu(x + bias, approximate="tanh")


def test_decorator_forms_match_eager():
    @fuser.jit
    def plain(x):
        return torch.sigmoid(x) * x + 1.0

    @fuser.jit(dynamic=True, fallback="eager")
    def configured(x):
        return torch.sigmoid(x) * x + 1.0

    x = torch.randn(5, 7)
    expected = torch.sigmoid(x) * x + 1.0
    assert_close_to_eager(plain(x), expected)
    assert_close_to_eager(configured(x), expected)
    assert plain.__name__ == "plain"
    assert fuser.jit(plain) is plain


def test_torch_compile_backend_by_name():
    compiled = torch.compile(gelu_bias, backend="fuser", dynamic=True)
    x, b = torch.randn(6, 10), torch.randn(10)
    assert_close_to_eager(compiled(x, b), gelu_bias(x, b))


def test_torch_compiles_modes_compile_the_same_and_its_options_are_refused():
    """torch.compile's `mode` (Inductor's searches, CUDA graphs) has no counterpart in fuser and
    is taken as the default (it was a TypeError through the installed entry point); `options`
    are Inductor's settings, refused by name rather than left silently unapplied."""
    x, b = torch.randn(6, 10), torch.randn(10)
    for mode in ("reduce-overhead", "max-autotune"):
        compiled = torch.compile(gelu_bias, backend="fuser", mode=mode)
        assert_close_to_eager(compiled(x, b), gelu_bias(x, b))
    compiled = torch.compile(gelu_bias, backend="fuser", options={"triton.cudagraphs": True})
    with pytest.raises(Exception, match="options \\['triton.cudagraphs'\\] are Inductor's settings"):
        compiled(x, b)


def test_six_batch_sizes_compile_once():
    jitted = fuser.jit(gelu_bias)
    bias = torch.randn(24)
    for batch in (2, 3, 5, 8, 13, 21):
        x = torch.randn(batch, 24)
        assert_close_to_eager(jitted(x, bias), gelu_bias(x, bias))
    info = jitted.cache_info()
    assert info.calls == 6
    assert info.graphs == 1
    assert info.compiles == 1, info
    assert info.kernels >= 1
    assert info.fallback_ops == 0


def test_batch_and_sequence_lengths_share_one_program():
    @fuser.jit
    def norm(x, w):
        return F.layer_norm(x, (x.shape[-1],), w) * torch.sigmoid(x)

    w = torch.randn(16)
    for batch, seq in ((2, 3), (4, 9), (3, 17)):
        x = torch.randn(batch, seq, 16)
        assert_close_to_eager(norm(x, w), F.layer_norm(x, (16,), w) * torch.sigmoid(x))
    assert norm.cache_info().compiles == 1


def test_a_row_length_is_fixed_in_the_first_trace_and_symbolic_from_a_second():
    """dynamic="rows" (the default): the first trace has each floating-point argument's last
    size (its row length) as a number, its other sizes symbolic; a new row length traces once
    more with every size symbolic, and later lengths reuse that. The marks on the arguments
    are taken off after each call."""
    @fuser.jit
    def norm(x, w):
        return F.layer_norm(x, (x.shape[-1],), w) * torch.sigmoid(x)

    def fusion_input_extents(jitted, graph):
        record = list(jitted._stats.records.values())[graph]
        (fd,) = [step.fd for p in record.programs for step in p.fusion_steps][:1]
        return [str(d.extent) for d in fd.fusion.inputs()[0].get_logical_domain()]

    calls = [(2, 3, 16), (4, 9, 16), (3, 5, 24), (5, 2, 40), (2, 7, 16)]
    for k, (batch, seq, hidden) in enumerate(calls):
        x, w = torch.randn(batch, seq, hidden), torch.randn(hidden)
        assert_close_to_eager(norm(x, w), F.layer_norm(x, (hidden,), w) * torch.sigmoid(x))
        assert x.__dict__ == {} and w.__dict__ == {}, (x.__dict__, w.__dict__)  # (marks taken off)
        assert norm.cache_info().graphs == (1 if k < 2 else 2)
    first, second = fusion_input_extents(norm, 0), fusion_input_extents(norm, 1)
    assert first[-1] == "16" and not first[0].isdigit() and not first[1].isdigit(), first
    assert not any(e.isdigit() for e in second), second
    everything = fuser.jit(norm._fn, dynamic=True)  # every size symbolic from the first call
    for batch, seq, hidden in calls:
        x, w = torch.randn(batch, seq, hidden), torch.randn(hidden)
        everything(x, w)
    assert everything.cache_info().graphs == 1
    assert not fusion_input_extents(everything, 0)[-1].isdigit()


@pytest.mark.parametrize("again", ["the same jit", "a copy of the function"])
def test_a_second_trace_keeps_equal_sizes_one_symbol(again):
    """A trace after a first one at other sizes (of the same jit, or a new jit of a copy of the
    function's code, whose sizes Dynamo remembers) gives equal sizes one symbol, as the first
    trace does: the cross entropy's targets and its logits' rows are one extent, so the targets'
    logits are picked inside the row kernel, not gathered through ATen between kernels."""
    import types

    from tests.helpers import explained_plans

    def ce(logits, target):
        return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())

    first = fuser.jit(ce)
    first(torch.randn(2, 8, 96), torch.randint(0, 96, (2, 8)))
    logits = torch.randn(3, 5, 160, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 160, (3, 5))
    copy = types.FunctionType(ce.__code__.replace(), ce.__globals__, ce.__name__)
    jitted = first if again == "the same jit" else fuser.jit(copy)
    report = fuser.explain(jitted, logits, target)
    text = str(report)
    assert "GatherOp" not in text and "ScatterOp" not in text, text
    assert len(explained_plans(report, "forward")) == 3 and len(explained_plans(report, "backward")) == 1, text
    out = jitted(logits, target)
    (grad,) = torch.autograd.grad(out, logits)
    want_logits = logits.detach().clone().requires_grad_()
    want = F.cross_entropy(want_logits.float().flatten(0, 1), target.flatten())
    (want_grad,) = torch.autograd.grad(want, want_logits)
    assert_close_to_eager(out, want)
    assert_close_to_eager(grad, want_grad)


def test_sizes_a_trace_s_guards_say_are_equal_are_one_extent():
    """With Dynamo's own dynamic shapes (dynamic=None, and torch.compile's backend), a second
    trace at other sizes gives each changed size a symbol of its own: the cross entropy's
    targets [s48, s24] and logits [s88, s3, V], flattened, have rows s24*s48 and s3*s88, and
    the trace a guard that they are equal. Written alike, they are one extent: the targets'
    logits are picked inside the row kernel, not gathered through ATen between kernels."""
    from tests.helpers import explained_plans

    def ce(logits, target):
        return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())

    def forward_backward(fn, logits, target):
        logits = logits.detach().clone().requires_grad_()
        out = fn(logits, target)
        return out, torch.autograd.grad(out, logits)[0]

    jitted = fuser.jit(ce, dynamic=None)
    compiled = torch.compile(ce, backend="fuser")
    for shape in ((2, 8, 96), (3, 5, 160), (4, 6, 160)):
        logits = torch.randn(*shape, dtype=torch.bfloat16)
        target = torch.randint(0, shape[-1], shape[:-1])
        want = forward_backward(ce, logits, target)
        for fn in (jitted, compiled):
            for got, expected in zip(forward_backward(fn, logits, target), want):
                assert_close_to_eager(got, expected)
    report = fuser.explain(jitted, logits.requires_grad_(), target)
    text = str(report)
    assert "GatherOp" not in text and "ScatterOp" not in text, text
    assert len(explained_plans(report, "forward")) == 3 and len(explained_plans(report, "backward")) == 1, text


def test_ops_with_no_lowering_run_eagerly_between_fusions():
    def f(x):
        y = torch.logcumsumexp(torch.exp(x), dim=-1)
        values, indices = torch.kthvalue(y * 2.0, 3, dim=-1)
        return values.tanh() + 1.0, indices

    jitted = fuser.jit(f)
    x = torch.randn(4, 9)
    got, want = jitted(x), f(x)
    assert_close_to_eager(got[0], want[0])
    assert torch.equal(got[1], want[1])
    info = jitted.cache_info()
    assert info.fallback_ops >= 2  # logcumsumexp and kthvalue
    assert info.fusions >= 2  # exp before them, the rest after


def test_python_scalars_and_int_arguments():
    @fuser.jit
    def f(x, scale, n: int):
        return x[:, :n] * scale + n

    x = torch.randn(6, 10)
    for n in (3, 5):
        assert_close_to_eager(f(x, 0.5, n), x[:, :n] * 0.5 + n)
    assert_close_to_eager(f(x, scale=2.0, n=4), x[:, :4] * 2.0 + 4)


def test_outputs_views_inputs_and_non_tensors():
    @fuser.jit
    def f(x):
        y = x * 2
        return y.t(), (x + 1).reshape(-1), x, None, x.shape[0]

    x = torch.randn(4, 6)
    a, b, c, d, e = f(x)
    assert_close_to_eager(a, (x * 2).t())
    assert_close_to_eager(b, (x + 1).reshape(-1))
    assert c is x and d is None and e == 4


def test_copies_do_not_alias_their_input():
    @fuser.jit
    def f(x):
        return x.clone(), x.to(torch.float32), x.contiguous()

    x = torch.randn(3, 5)
    for out in f(x):
        out.add_(1.0)
    torch.testing.assert_close(x, x.clone())  # x itself untouched
    a, _, _ = f(x)
    assert a.data_ptr() != x.data_ptr()


def test_in_place_update_of_an_input_is_kept():
    @fuser.jit
    def f(x, y):
        x.mul_(2.0)
        return x + y

    x, y = torch.randn(4, 4), torch.randn(4, 4)
    x0 = x.clone()
    out = f(x, y)
    torch.testing.assert_close(x, x0 * 2)
    assert_close_to_eager(out, x0 * 2 + y)


def test_graph_break_gives_two_graphs():
    @fuser.jit
    def f(x):
        y = torch.exp(x)
        if y.sum().item() > 0:  # data-dependent Python: Dynamo breaks the graph here
            y = y * 3.0
        return y - 1.0

    x = torch.randn(5, 3)
    assert_close_to_eager(f(x), torch.exp(x) * 3.0 - 1.0)
    assert f.cache_info().graphs >= 2


def test_mixed_dtypes_and_integer_ops():
    @fuser.jit
    def f(x, idx, mask):
        scaled = x.to(torch.bfloat16) * 3
        shifted = (idx * 2 + 1) // 3
        return scaled.float() + shifted, torch.where(mask, x, -x).amax(-1), (idx > 2).sum(-1)

    x = torch.randn(5, 6)
    idx = torch.randint(-5, 6, (5, 6))
    mask = torch.rand(5, 6) > 0.5
    got = f(x, idx, mask)
    want = ((x.to(torch.bfloat16) * 3).float() + (idx * 2 + 1) // 3,
            torch.where(mask, x, -x).amax(-1), (idx > 2).sum(-1))
    # the bf16 product stays in fp32 inside the kernel (eager rounds it): bf16 tolerance
    torch.testing.assert_close(got[0], want[0], rtol=2e-2, atol=2e-2)
    for g, w in zip(got[1:], want[1:]):
        assert_close_to_eager(g, w)


# -- arguments fuser cannot trace ------------------------------------------------------------


def add_one(x, y):
    return x + y + 1


@pytest.mark.parametrize("make, what", [
    (lambda: torch.eye(3).to_sparse(), "layout torch.sparse_coo"),
    (lambda: torch.randn(3, 3, device="meta"), "device meta"),
])
def test_untraceable_argument_is_a_fuser_error_naming_it(make, what):
    jitted = fuser.jit(add_one)
    with pytest.raises(fuser.FusionInputError) as info:
        jitted(torch.randn(3, 3), make())
    assert "'y'" in str(info.value) and what in str(info.value)


def test_untraceable_argument_inside_a_container_is_named():
    @fuser.jit
    def f(xs):
        return xs[0] + xs[1]

    with pytest.raises(fuser.FusionInputError, match=r"'xs'\[1\]"):
        f([torch.randn(2), torch.eye(2).to_sparse()])


def test_untraceable_argument_falls_back_to_eager_when_asked():
    jitted = fuser.jit(add_one, fallback="eager")
    x = torch.randn(3, 3)
    with pytest.warns(UserWarning, match="running add_one eagerly"):
        out = jitted(torch.randn(3, 3, device="meta"), torch.randn(3, 3, device="meta"))
    assert out.device.type == "meta"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert_close_to_eager(jitted(x, x), x + x + 1)


def test_bad_jit_arguments():
    with pytest.raises(fuser.FusionInputError, match="fallback"):
        fuser.jit(add_one, fallback="maybe")
    with pytest.raises(fuser.FusionInputError, match="function or an nn.Module"):
        fuser.jit(3)
    with pytest.raises(fuser.FusionInputError, match="dynamic must be one of"):
        fuser.jit(add_one, dynamic="columns")
    with pytest.raises(fuser.FusionInputError, match="unknown option 'fallbak'"):
        fuser.jit(add_one, fallbak="eager")


def test_a_failure_inside_fuser_is_an_internal_error_or_eager_when_asked(monkeypatch):
    import fuser.frontend.backend as backend

    def broken(graph):
        raise RuntimeError("a planted bug")

    monkeypatch.setattr(backend, "plan_graph", broken)

    def f(x):
        return x.cos() * 3.0

    with pytest.raises(fuser.InternalError, match="planted bug"):
        fuser.jit(f)(torch.randn(3, 4))

    def g(x):
        return x.cos() * 4.0

    jitted = fuser.jit(g, fallback="eager")
    x = torch.randn(3, 4)
    with pytest.warns(UserWarning, match="running it eagerly"):
        assert_close_to_eager(jitted(x), g(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        assert_close_to_eager(jitted(x), g(x))  # eager from now on, without another compile


def test_composite_ops_reach_the_graph_decomposed_with_the_core_table():
    """fuser's table is the core-ATen list without export's entries for composite ops:
    AOTAutograd's tracing decomposes those (linear, layer_norm's composite parts) itself, and
    softmax is decomposed while silu stays whole, as the partitioner and the kernels want."""
    from fuser.frontend.backend import decompositions

    aten = torch.ops.aten
    table = decompositions()
    assert aten._softmax.default in table and aten.silu.default not in table

    def f(x, w):
        return F.silu(F.linear(x, w)).softmax(-1)

    x, w = torch.randn(4, 8), torch.randn(6, 8)
    report = fuser.explain(f, x, w)
    code = "\n".join(p.aten_code for g in report.graphs for p in g.programs)
    assert "aten.linear" not in code and ("aten.mm" in code or "aten.addmm" in code)
    assert "aten.silu" in code and "aten._softmax" not in code and "aten.amax" in code
    assert_close_to_eager(fuser.jit(f)(x, w), f(x, w))


def test_a_composite_op_with_a_cpu_kernel_is_still_decomposed():
    """native_channel_shuffle has a CPU kernel beside its composite form, so tracing keeps it
    whole unless the table decomposes it (into views and a copy, which fuse)."""
    def f(x):
        return F.native_channel_shuffle(x, 2) + 1

    x = torch.randn(1, 6, 3, 3)
    jitted = fuser.jit(f)
    assert_close_to_eager(jitted(x), f(x))
    assert jitted.cache_info().fallback_ops == 0


@fuser.jit
def _doubled_gelu(x):
    return F.gelu(x) * 2


def test_a_jitted_module_copies_and_pickles_as_its_module_jitted_again():
    """`copy.deepcopy` (an EMA model) and `torch.save` of a jitted module, and of a module that
    holds a jitted function: the copy has its own parameters and its own compiled programs, made
    again with the same options; a jitted function copies as a function does (itself) and
    pickles by name."""
    import copy
    import io
    import pickle

    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.act = _doubled_gelu

        def forward(self, x):
            return self.act(self.lin(x))

    x = torch.randn(3, 8)
    jitted = fuser.jit(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)), fallback="eager")
    want = jitted(x)
    twin = copy.deepcopy(jitted)
    assert isinstance(twin, type(jitted)) and twin._jit_options == {"dynamic": "rows", "fallback": "eager"}
    assert_close_to_eager(twin(x), want)
    with torch.no_grad():
        twin._orig_mod[0].weight.add_(1.0)  # (its own parameters)
    assert not torch.equal(twin(x), want) and torch.equal(jitted(x), want)
    buffer = io.BytesIO()
    torch.save(jitted, buffer)
    buffer.seek(0)
    assert_close_to_eager(torch.load(buffer, weights_only=False)(x), want)

    holder = Holder()
    assert copy.deepcopy(_doubled_gelu) is _doubled_gelu
    assert pickle.loads(pickle.dumps(_doubled_gelu)) is _doubled_gelu
    assert_close_to_eager(copy.deepcopy(holder)(x), holder(x))
