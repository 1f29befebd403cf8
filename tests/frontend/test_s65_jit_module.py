"""A jitted module's copies and its registrations, as a plain module's:

- `copy.deepcopy` and `torch.save`/`torch.load` of a jitted module dropped the hooks registered
  on the jitted module itself (its copy is the wrapped module's, jitted again);
- `jm.register_buffer` / `register_parameter` / `add_module` went to the wrapper, where the
  wrapped forward never saw them (its output silently differed);
- `@fuser.jit` above `@staticmethod` bound the instance as a first argument."""
import copy
import io

import torch

import fuser
from tests.helpers import make


def _sevens(module, args, out):
    return torch.full_like(out, 7.0)


def _zero_input(module, args):
    return (torch.zeros_like(args[0]),)


def test_copies_keep_the_hooks_registered_on_the_jitted_module():
    jitted = fuser.jit(torch.nn.Linear(8, 4))
    jitted.register_forward_hook(_sevens)
    x = make((3, 8))
    buffer = io.BytesIO()
    torch.save(jitted, buffer)
    buffer.seek(0)
    for copied in (copy.deepcopy(jitted), torch.load(buffer, weights_only=False)):
        torch.testing.assert_close(copied(x), torch.full((3, 4), 7.0))
    other = fuser.jit(torch.nn.Linear(8, 4))
    other.register_forward_pre_hook(_zero_input)
    copied = copy.deepcopy(other)
    torch.testing.assert_close(copied(x), copied._orig_mod.bias.expand(3, 4))
    assert copied.state_dict().keys() == other.state_dict().keys()  # (fuser's own key hooks: once)


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        y = self.lin(x)
        if hasattr(self, "shift"):
            y = y + self.shift
        if hasattr(self, "gain"):
            y = y * self.gain
        if hasattr(self, "extra"):
            y = self.extra(y)
        return y


def test_registrations_through_the_jitted_module_reach_the_wrapped_forward():
    eager, jitted = Scaled(), fuser.jit(Scaled())
    jitted.load_state_dict(eager.state_dict())
    shift, gain = make((6,)), torch.nn.Parameter(make((6,)))
    for module in (eager, jitted):
        module.register_buffer("shift", shift.clone())
        module.register_parameter("gain", torch.nn.Parameter(gain.detach().clone()))
        module.add_module("extra", torch.nn.Tanh())
    x = make((4, 6))
    torch.testing.assert_close(jitted(x), eager(x))
    assert jitted.state_dict().keys() == eager.state_dict().keys()
    assert "_orig_mod.gain" in dict(jitted.named_parameters())


class WithStatic:
    @fuser.jit
    @staticmethod
    def scale(x):
        return x * 2 + 1


def test_a_jitted_staticmethod_called_through_an_instance():
    x = make((5,))
    torch.testing.assert_close(WithStatic().scale(x), x * 2 + 1)
    torch.testing.assert_close(WithStatic.scale(x), x * 2 + 1)
