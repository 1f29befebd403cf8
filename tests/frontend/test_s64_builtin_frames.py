"""torch's own functions jitted directly (`fuser.jit(torch.exp)`, `fuser.jit(F.mish)`): torch.compile
runs every one of them through its one shared `wrap_inline` frame, whose cache and recompile limit
(8) they all shared, so from the ninth jitted in a process on each ran eagerly, unfused, for good
(`cache_info().graphs == 0`), or under no_grad returned the eighth's result (torch.compile's own
behaviour there). Each now gets a frame of its own (jit.py `_own_frame`), as torch's own modules
do."""
import functools

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser.frontend.jit import _frame_shared

from ..helpers import make
from .jit_helpers import assert_close_to_eager

# builtins (torch.exp), a method of Tensor's, and Python functions torch traces as one op (F.mish);
# each with the arguments after the input
TORCH_FUNCTIONS = [
    (torch.exp, ()), (torch.tanh, ()), (torch.sigmoid, ()), (torch.cos, ()), (torch.sin, ()),
    (torch.abs, ()), (torch.rsqrt, ()), (torch.Tensor.neg, ()), (F.gelu, ()), (F.mish, ()),
    (F.hardswish, ()), (F.softmax, (-1,)),
]


def test_each_jitted_torch_function_has_its_own_recompile_budget():
    # one Dynamo state for all twelve (a reset between them would empty the shared frame's
    # cache too, and hide the fault); more functions than the recompile limit
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=8), torch.no_grad():
        for fn, extra in TORCH_FUNCTIONS:
            jitted = fuser.jit(fn)
            x = make((8, 64), positive=True)  # (rsqrt's domain)
            assert_close_to_eager(jitted(x, *extra), fn(x, *extra))
            info = jitted.cache_info()
            assert info.graphs >= 1 and info.fallback_ops == 0, (fn, info)


def test_a_python_function_of_torchs_takes_the_direct_path():
    # the frame of its own has F.softmax's parameters and defaults: a repeat call, keywords
    # included, skips Dynamo's wrapper, as a module's does
    torch._dynamo.reset()
    jitted = fuser.jit(F.softmax)
    with torch.no_grad():
        for _ in range(3):
            x = make((8, 64))
            assert_close_to_eager(jitted(x, dim=-1), F.softmax(x, dim=-1))
    assert jitted._direct.hits == 2
    assert jitted.cache_info().graphs == 1


@pytest.mark.parametrize("call", [
    lambda f, x: f(x, bogus=1),  # an unknown keyword
    lambda f, x: f(),  # the input missing
    lambda f, x: f(x, False, 3),  # one argument too many
], ids=["keyword", "missing", "too_many"])
def test_a_call_python_refuses_raises_eagers_type_error(call):
    x = make((4, 8))
    with pytest.raises(TypeError) as eager:
        call(F.mish, x)
    with pytest.raises(TypeError) as jitted:
        call(fuser.jit(F.mish), x)
    assert str(jitted.value) == str(eager.value)


def _users_function(x):
    return x.exp() * 2


def test_only_frames_dynamo_would_share_get_one_of_their_own():
    # a function of the user's keeps its own frame (and its direct path); a partial has no code
    # of its own, so Dynamo would run it through the shared frame too
    assert not _frame_shared(_users_function)
    assert fuser.jit(_users_function)._frame is _users_function
    assert _frame_shared(torch.exp) and _frame_shared(F.mish)
    partial = functools.partial(F.softmax, dim=-1)
    assert _frame_shared(partial)
    torch._dynamo.reset()
    jitted = fuser.jit(partial)
    x = make((8, 64))
    with torch.no_grad():
        assert_close_to_eager(jitted(x), partial(x))
    assert jitted.cache_info().graphs == 1
