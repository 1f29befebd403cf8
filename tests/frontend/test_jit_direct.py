"""The direct call path of `fuser.jit` (frontend/direct.py): repeat calls skip Dynamo's wrapper
but never its guards, so every change Dynamo would notice still reaches Dynamo."""
import sys

import pytest
import torch

import fuser
from fuser.errors import FusionInputError
from tests.helpers import make

from .jit_helpers import assert_close_to_eager

SCALE = 2.0


def scaled(x, y):
    return torch.relu(x * y + SCALE).sum(-1)


def test_repeat_calls_take_the_direct_path_and_match_eager():
    jitted = fuser.jit(scaled)
    for _ in range(3):
        x, y = torch.randn(6, 9), torch.randn(6, 9)
        assert_close_to_eager(jitted(x, y), scaled(x, y))
    assert jitted._direct.hits == 2
    assert jitted.cache_info().calls == 3
    assert jitted.cache_info().compiles == 1


def test_keyword_arguments_take_the_direct_path_placed_by_name():
    def affine(x, w, bias=None, scale=1.0):
        y = x * w * scale
        return y if bias is None else y + bias

    jitted = fuser.jit(affine)
    x, w, b = torch.randn(6, 9), torch.randn(9), torch.randn(9)
    for _ in range(3):
        assert_close_to_eager(jitted(x, w=w, bias=b), affine(x, w=w, bias=b))
    assert jitted._direct.hits == 2
    hits = jitted._direct.hits
    assert_close_to_eager(jitted(x, bias=b, w=w), affine(x, bias=b, w=w))  # (any order)
    assert_close_to_eager(jitted(w=w, x=x, bias=b), affine(w=w, x=x, bias=b))
    assert jitted._direct.hits == hits + 2
    assert_close_to_eager(jitted(x, w, b), affine(x, w, b))  # (the same locals, positionally)
    assert jitted._direct.hits == hits + 3
    assert_close_to_eager(jitted(x, w=w), affine(x, w=w))  # (bias None: another entry)
    assert_close_to_eager(jitted(x, w=w, scale=3.0), affine(x, w=w, scale=3.0))


@pytest.mark.parametrize("call", [
    lambda f, x, w: f(x, w=w, colour=1),  # an unknown keyword
    lambda f, x, w: f(x, w, w=w),  # a repeated one
    lambda f, x, w: f(x),  # a required argument missing
])
def test_keywords_python_refuses_raise_its_error(call):
    def affine(x, w, bias=None):
        return x * w if bias is None else x * w + bias

    jitted = fuser.jit(affine)
    x, w = torch.randn(4, 8), torch.randn(8)
    jitted(x, w=w)
    jitted(x, w=w)  # (remembered: the next call tries the direct path first)
    with pytest.raises(TypeError) as ours:
        call(jitted, x, w)
    with pytest.raises(TypeError) as eager:
        call(affine, x, w)
    assert str(ours.value) == str(eager.value)


def test_a_positional_only_argument_given_by_keyword_is_refused():
    def scaled(x, s, /, t=1.0):
        return x * s * t

    jitted = fuser.jit(scaled)
    x, s = torch.randn(4, 8), torch.randn(8)
    jitted(x, s, t=2.0)
    assert_close_to_eager(jitted(x, s, t=2.0), scaled(x, s, t=2.0))
    assert jitted._direct.hits == 1
    with pytest.raises(TypeError, match="positional-only"):
        jitted(x, s=s)


def test_a_module_called_with_keywords_takes_the_direct_path():
    class Gate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8))

        def forward(self, x, mask=None):
            y = torch.sigmoid(x * self.w)
            return y if mask is None else y * mask

    module = Gate()
    jitted = fuser.jit(module)
    x, mask = torch.randn(4, 8), torch.rand(4, 8)
    with torch.no_grad():
        for _ in range(3):
            assert_close_to_eager(jitted(x, mask=mask), module(x, mask=mask))
    assert jitted._jit._direct.hits == 2


def test_a_changed_global_is_seen():
    global SCALE
    jitted = fuser.jit(scaled)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    jitted(x, y)
    jitted(x, y)
    try:
        SCALE = -1.5
        assert_close_to_eager(jitted(x, y), scaled(x, y))
        assert_close_to_eager(jitted(x, y), scaled(x, y))
    finally:
        SCALE = 2.0
    assert_close_to_eager(jitted(x, y), scaled(x, y))


def test_a_changed_closure_value_is_seen():
    offset = 1.0

    def shifted(x):
        return torch.sigmoid(x) + offset

    jitted = fuser.jit(shifted)
    x = torch.randn(5, 7)
    for value in (1.0, 1.0, 3.0, 3.0, -2.0):
        offset = value
        assert_close_to_eager(jitted(x), torch.sigmoid(x) + value)


def test_new_dtype_and_grad_mode_reach_dynamo():
    jitted = fuser.jit(scaled)
    x, y = torch.randn(3, 10), torch.randn(3, 10)
    jitted(x, y)
    jitted(x, y)
    xd, yd = x.double(), y.double()
    out = jitted(xd, yd)
    assert out.dtype == torch.float64
    assert_close_to_eager(out, scaled(xd, yd))
    # an input that needs a gradient: the training graph, and gradients as eager
    xg = x.clone().requires_grad_()
    for _ in range(2):
        (g,) = torch.autograd.grad(jitted(xg, y).sum(), [xg])
        xe = x.clone().requires_grad_()
        (ge,) = torch.autograd.grad(scaled(xe, y).sum(), [xe])
        assert_close_to_eager(g, ge)
    with torch.no_grad():
        assert not jitted(xg, y).requires_grad


def test_default_arguments_and_shapes():
    def affine(x, w, bias=0.5):
        return x * w + bias

    jitted = fuser.jit(affine)
    for rows in (2, 3, 5):
        x, w = torch.randn(rows, 6), torch.randn(6)
        for _ in range(2):
            assert_close_to_eager(jitted(x, w), affine(x, w))
        for _ in range(2):
            assert_close_to_eager(jitted(x, w, 1.5), affine(x, w, 1.5))
    assert jitted._direct.hits >= 4


def test_graph_break_keeps_the_dynamo_path():
    def broken(x):
        y = torch.cos(x) * 2
        torch._dynamo.graph_break()
        return torch.sin(y) + 1

    jitted = fuser.jit(broken)
    x = torch.randn(4, 4)
    for _ in range(3):
        assert_close_to_eager(jitted(x), broken(x))
    assert jitted._direct.hits == 0


def test_dynamo_reset_and_eager_stance():
    jitted = fuser.jit(scaled)
    x, y = torch.randn(2, 5), torch.randn(2, 5)
    jitted(x, y)
    jitted(x, y)
    hits = jitted._direct.hits
    torch._dynamo.reset()  # invalidates the remembered entry: the next call compiles again
    assert_close_to_eager(jitted(x, y), scaled(x, y))
    assert jitted._direct.hits == hits
    assert_close_to_eager(jitted(x, y), scaled(x, y))
    assert jitted._direct.hits == hits + 1
    hits = jitted._direct.hits
    with torch.compiler.set_stance("force_eager"):
        assert_close_to_eager(jitted(x, y), scaled(x, y))
    assert jitted._direct.hits == hits


@pytest.mark.parametrize("case", ["view_of_input", "mutates_input"])
def test_outputs_aliasing_or_mutating_inputs_keep_their_semantics(case):
    if case == "view_of_input":
        def fn(x):
            return x.view(-1), torch.exp(x)
    else:
        def fn(x):
            x.add_(1.0)
            return torch.exp(x)

    jitted = fuser.jit(fn)
    for _ in range(3):
        x = torch.randn(3, 4)
        expected_input = x.clone()
        expected = fn(expected_input)
        out = jitted(x)
        if case == "view_of_input":
            assert out[0].data_ptr() == x.data_ptr()
            assert_close_to_eager(out[1], expected[1])
        else:
            assert_close_to_eager(x, expected_input)
            assert_close_to_eager(out, expected)


def test_parameters_take_the_direct_path_and_odd_tensors_still_get_named():
    """The remembered entry's guards cover every argument: a Parameter (a Tensor subclass)
    takes the direct path; a sparse tensor fails the guards and gets fuser's error."""
    def scale(x, w):
        return torch.tanh(x) * w

    jitted = fuser.jit(scale)
    x, w = torch.randn(4, 8), torch.nn.Parameter(torch.randn(8))
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(jitted(x, w), scale(x, w))
    assert jitted._direct.hits == 2
    with pytest.raises(FusionInputError, match="argument 'x'"):
        jitted(x.to_sparse(), w)
    # a (strided) nested tensor makes the guards' check itself raise: still named
    nested = torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(3, 8)])
    with pytest.raises(FusionInputError, match="argument 'x' is a nested tensor"):
        jitted(nested, w)


def test_a_program_of_fusions_leaves_grad_mode_alone_and_outputs_need_no_grad():
    def f(x):
        return x.sin() + 1

    jitted = fuser.jit(f)
    x = torch.randn(5, 3)
    for _ in range(3):
        out = jitted(x)
        assert torch.is_grad_enabled() and not out.requires_grad
        torch.testing.assert_close(out, f(x))


class _Block(torch.nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.ln = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x, scale: float = 2.0):
        y = torch.nn.functional.gelu(self.fc(self.ln(x)))
        return (y * scale if self.training else y * 3.0) + x


def test_modules_take_the_direct_path_and_see_mode_parameter_and_hook_changes():
    block = _Block()
    jitted = fuser.jit(block)
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(3):
            assert_close_to_eager(jitted(x), block(x))
        assert jitted._jit._direct.hits == 2
        block.eval()  # self.training is guarded: Dynamo compiles the other branch
        assert_close_to_eager(jitted(x), block(x))
        block.fc.weight.add_(0.5)  # parameters are read at call time
        assert_close_to_eager(jitted(x), block(x))
        hits = jitted._jit._direct.hits
        handle = block.register_forward_hook(lambda mod, args, out: out * 0 + 7.0)
        out = jitted(x)  # Module.__call__ runs hooks outside Dynamo's frame: not the direct path
        assert jitted._jit._direct.hits == hits
        torch.testing.assert_close(out, torch.full_like(out, 7.0))
        handle.remove()
        assert_close_to_eager(jitted(x), block(x))


def test_two_instances_of_one_module_class_keep_their_own_weights():
    a, b = _Block(), _Block()
    ja, jb = fuser.jit(a), fuser.jit(b)
    x = torch.randn(3, 16)
    with torch.no_grad():
        for _ in range(3):
            assert_close_to_eager(ja(x), a(x))
            assert_close_to_eager(jb(x), b(x))


def test_fusers_frames_skip_dynamos_profiler_hooks():
    """Dynamo's code for a frame reads the graph's arguments between two profiler hooks
    ("Pregraph bytecode") on every call; frames compiled by fuser.jit go without them, and the
    result is unchanged."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    def f(x):
        return torch.relu(x * 2.0).sum(-1)

    x = torch.randn(4, 9)
    jitted = fuser.jit(f)
    torch.testing.assert_close(jitted(x), f(x))
    (entry,) = _debug_get_cache_entry_list(f.__code__)
    assert "record_pregraph_bytecode_enter" not in entry.code.co_names
    assert torch._dynamo.config.record_runtime_overhead  # patched only while fuser compiles


SCALE = 0.5  # a module-level float the jitted function reads


def test_floats_are_traced_once_as_constants(monkeypatch):
    """A float argument and a float global become constants in fuser.jit's one trace; with
    Dynamo's default (a 0-dim tensor input) the backend had to ask for a second trace. Other
    values of the float argument compile anew (guarded by value) and stay correct."""
    from fuser.frontend import backend

    restarts = []
    original = backend._restart_with_floats_specialized

    def spy(gm, example_inputs):
        try:
            original(gm, example_inputs)
        except Exception:
            restarts.append(gm)
            raise
    monkeypatch.setattr(backend, "_restart_with_floats_specialized", spy)

    def f(x, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * SCALE

    x = torch.randn(4, 24)
    jitted = fuser.jit(f)
    for eps in (1e-6, 0.25, 1e-6):
        torch.testing.assert_close(jitted(x, eps), f(x, eps))
    assert restarts == []
    assert not torch._dynamo.config.specialize_float  # Dynamo's own default outside fuser.jit

def test_dynamos_settings_are_set_only_while_dynamo_compiles(monkeypatch):
    """A call through Dynamo's wrapper (as `fuser.explain` makes) sets fuser's Dynamo settings
    only where Dynamo compiles a frame: a compiled call leaves torch's config alone, and a call
    that compiles anew (another dtype) traces under the settings (its floats constants)."""
    jit_module = sys.modules["fuser.frontend.jit"]  # (the package's `jit` is the function)
    seen = []  # each time the settings are set: whether Dynamo's own float default was changed
    original = jit_module._DynamoSettings.set

    def spy(self):
        original(self)
        seen.append(torch._dynamo.config.specialize_float)
    monkeypatch.setattr(jit_module._DynamoSettings, "set", spy)

    def f(x, scale=1.0):
        return torch.relu(x * scale).sum(-1)

    jitted = fuser.jit(f)

    def through_dynamo(x):
        return jitted._call(jitted._stats, (x,), {"scale": 0.5}, direct=False)
    x = torch.randn(4, 9)
    torch.testing.assert_close(through_dynamo(x), f(x, scale=0.5))
    compiled = len(seen)
    assert compiled >= 1 and all(seen)
    for _ in range(3):
        torch.testing.assert_close(through_dynamo(x), f(x, scale=0.5))
    assert len(seen) == compiled  # (compiled: Dynamo's callback was not called)
    y = torch.randn(4, 9, dtype=torch.float64)
    torch.testing.assert_close(through_dynamo(y), f(y, scale=0.5))
    assert len(seen) > compiled and all(seen)
    assert not torch._dynamo.config.specialize_float  # Dynamo's own default outside the compiles


def test_overlapping_calls_restore_dynamos_settings_when_the_last_leaves():
    """Calls in several threads overlap: the first to leave must not restore the settings under
    the others, nor the last leave them changed (what one config.patch per call would do)."""
    from fuser.frontend.jit import _DYNAMO_SETTINGS

    quiet, config = _DYNAMO_SETTINGS, torch._dynamo.config
    first, second = quiet, quiet
    first.__enter__()
    second.__enter__()
    assert not config.record_runtime_overhead and config.specialize_float
    first.__exit__(None, None, None)
    assert not config.record_runtime_overhead and config.specialize_float  # still compiling
    second.__exit__(None, None, None)
    assert config.record_runtime_overhead and not config.specialize_float


def test_a_function_with_cell_variables_takes_the_direct_path():
    # (a local read by a comprehension or an inner function is a cell on Python 3.11; the
    # entry's code makes its own cells)
    def scaled(x, ws):
        return [x * w for w in ws]

    def with_inner(x, k):
        def g(y):
            return y * k + x.sum()
        return x.cos(), g

    for f, make_args in ((scaled, lambda: (torch.randn(4, 8), [1.5, 2.5])),
                         (with_inner, lambda: (torch.randn(3), 2.0))):
        jitted = fuser.jit(f)
        for _ in range(4):
            args = make_args()
            got, expected = jitted(*args), f(*args)
            if f is with_inner:
                y = torch.randn(3)
                got, expected = [got[0], got[1](y)], [expected[0], expected[1](y)]
            for a, b in zip(got, expected):
                torch.testing.assert_close(a, b)
        assert jitted._direct.hits >= 2, f.__name__


def test_a_replaced_code_is_another_function():
    """`fn.__code__ = ...` (IPython's autoreload replaces an edited function's code so) is not
    the remembered entry's frame: the new code is traced, then taken directly itself."""
    def edited(x):
        return x * 2 + 1

    def new_version(x):
        return x * 3 - 1
    jitted = fuser.jit(edited)
    for _ in range(3):
        x = torch.randn(5, 7)
        assert_close_to_eager(jitted(x), x * 2 + 1)
    edited.__code__ = new_version.__code__
    for _ in range(3):
        x = torch.randn(5, 7)
        assert_close_to_eager(jitted(x), x * 3 - 1)
    assert jitted._direct.hits == 4 and jitted.cache_info().graphs == 2


class _Counted(torch.nn.Module):
    """A class whose `__call__` does work of its own before `nn.Module`'s (and whose forward
    ends in a graph break: its frame then has an entry of its own)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return super().__call__(*args, **kwargs)

    @torch.compiler.disable
    def _logged(self, y):
        return y

    def forward(self, x):
        return self._logged(x.sin() * self.calls)


def test_a_module_class_with_its_own_call_runs_it_each_call():
    eager, jitted_block = _Counted(), _Counted()
    jitted = fuser.jit(jitted_block)
    for k in range(4):
        x = torch.randn(8, 16)
        assert_close_to_eager(jitted(x), eager(x))
        assert jitted_block.calls == eager.calls == k + 1
    assert jitted._jit._direct.hits == 0


def test_calls_alternating_between_two_entries_take_the_direct_path():
    # one entry was remembered, and only while it was Dynamo's most recently used: calls
    # alternating between two dtypes went through Dynamo each time (114 us a call against 53)
    def scaled(x):
        return (x * 2).sin() + 1

    jitted = fuser.jit(scaled)
    xs = [make((4, 8)), make((4, 8), dtype=torch.float64)]
    for x in xs:
        jitted(x)  # (the two entries traced)
    hits = jitted._direct.hits
    for _ in range(3):
        for x in xs:
            torch.testing.assert_close(jitted(x), scaled(x))
    assert jitted._direct.hits - hits == 6
    assert jitted.cache_info().graphs == 2
