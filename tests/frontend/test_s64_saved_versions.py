"""A buffer the forward updates and the backward reads, written again before the backward (a
second forward, the caller's own write): eager raises autograd's in-place error at every call,
fuser raised it on the first call only and then used the stale value silently. And a jitted
module's `load_state_dict` reports its missing and unexpected keys under the wrapped module's
names, as `state_dict()` gives them, not under `_orig_mod.`."""
import copy

import pytest
import torch
import torch._dynamo

import fuser
from tests.helpers import assert_eager, make

_IN_PLACE_ERROR = "modified by an inplace operation"


class _Counted(torch.nn.Module):
    """`self.count += 1; return lin(x) * self.count`: eager's mul saves the buffer itself."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("count", make((8,), positive=True))

    def forward(self, x):
        self.count += 1
        return self.lin(x) * self.count


def _eager_and_jitted(module_class):
    torch._dynamo.reset()
    eager = module_class()
    model = copy.deepcopy(eager)
    return eager, model, fuser.jit(model)


def _outcome(step) -> str:
    """"ran" or "raised" (autograd's in-place error), as the step went."""
    try:
        step()
    except RuntimeError as e:
        if _IN_PLACE_ERROR not in str(e):
            raise
        return "raised"
    return "ran"


def test_a_write_to_the_saved_buffer_before_backward_raises_at_every_call_as_eager():
    eager, model, jitted = _eager_and_jitted(_Counted)
    for call in range(3):
        x = make((4, 8))

        def write_between(mod, buffer):
            y = mod(x)
            buffer.add_(1)  # the caller's write, after the forward saved the buffer
            y.sum().backward()

        expected = _outcome(lambda: write_between(eager, eager.count))
        assert expected == "raised"
        assert _outcome(lambda: write_between(jitted, model.count)) == expected, f"call {call}"
        assert_eager(model.count, eager.count)


def test_two_forwards_through_the_updated_buffer_then_one_backward_raise_at_every_call_as_eager():
    # (gradient accumulation over two forwards: the second forward's update is a write to the
    # buffer the first one's backward reads)
    eager, model, jitted = _eager_and_jitted(_Counted)
    for call in range(3):
        x1, x2 = make((4, 8)), make((4, 8))

        def two_forwards(mod):
            (mod(x1).sum() + mod(x2).sum()).backward()

        expected = _outcome(lambda: two_forwards(eager))
        assert expected == "raised"
        assert _outcome(lambda: two_forwards(jitted)) == expected, f"call {call}"
        assert_eager(model.count, eager.count)


def test_gradients_through_the_updated_buffer_stay_eager_s():
    # forward and backward in turn (no write between): the backward reads the updated count
    eager, model, jitted = _eager_and_jitted(_Counted)
    for call in range(3):
        x = make((4, 8))
        out, ref = jitted(x), eager(x)
        assert_eager(out, ref)
        grad = make((4, 8))
        out.backward(grad)
        ref.backward(grad)
        assert_eager(model.count, eager.count)
        for p, q in zip(model.parameters(), eager.parameters()):
            assert_eager(p.grad, q.grad)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class _Model(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(x))


def _state_dict_with_faults(prefix: str) -> dict:
    """`lin.bias` missing, `extra` unexpected (under `prefix`)."""
    return {prefix + "lin.weight": make((4, 4)), prefix + "extra": make((2,))}


def test_load_state_dict_not_strict_reports_the_wrapped_module_s_keys():
    sd = _state_dict_with_faults("")
    eager, jitted = _Block(), fuser.jit(_Block())
    expected = eager.load_state_dict(sd, strict=False)
    assert expected.missing_keys == ["lin.bias"] and expected.unexpected_keys == ["extra"]
    assert jitted.load_state_dict(sd, strict=False) == expected
    assert_eager(jitted.lin.weight, eager.lin.weight)


def test_load_state_dict_not_strict_reports_the_keys_of_a_held_jitted_module():
    sd = dict(_state_dict_with_faults("block."), **{"head.weight": make((2, 4))})
    eager, jitted = _Model(_Block()), _Model(fuser.jit(_Block()))
    expected = eager.load_state_dict(sd, strict=False)
    assert expected.missing_keys == ["block.lin.bias", "head.bias"]
    assert jitted.load_state_dict(sd, strict=False) == expected
    # a jitted module inside a jitted model
    twice = fuser.jit(_Model(fuser.jit(_Block())))
    assert twice.load_state_dict(sd, strict=False) == expected
    assert_eager(twice.block.lin.weight, eager.block.lin.weight)


def test_load_state_dict_keeps_a_held_compiled_module_s_own_prefix():
    # (torch.compile's module names its keys under `_orig_mod.`, and its state dict keeps them)
    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.compile(torch.nn.Linear(4, 4), backend="eager")

    sd = {"enc._orig_mod.weight": make((4, 4)), "enc._orig_mod.junk": make((1,))}
    expected = Holder().load_state_dict(sd, strict=False)
    assert expected.missing_keys == ["enc._orig_mod.bias"]
    assert fuser.jit(Holder()).load_state_dict(sd, strict=False) == expected


def test_load_state_dict_strict_error_names_the_wrapped_module_s_keys():
    sd = dict(_state_dict_with_faults("block."), **{"head.weight": make((3, 4)), "head.bias": make((2,))})
    errors = []
    for model in (_Model(_Block()), _Model(fuser.jit(_Block()))):
        with pytest.raises(RuntimeError) as caught:
            model.load_state_dict(sd)
        errors.append(str(caught.value))
    assert '"block.lin.bias"' in errors[0] and '"block.extra"' in errors[0] \
        and "size mismatch for head.weight" in errors[0]
    assert errors[1] == errors[0]
    # a size mismatch inside the jitted module
    sd = {"lin.weight": make((3, 4)), "lin.bias": make((4,))}
    with pytest.raises(RuntimeError, match=r"size mismatch for lin\.weight: copying a param with shape "
                                           r"torch\.Size\(\[3, 4\]\)") as caught:
        fuser.jit(_Block()).load_state_dict(sd)
    assert "_orig_mod" not in str(caught.value)
