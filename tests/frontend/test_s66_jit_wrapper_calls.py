"""fuser.jit's wrappers as callables (frontend/jit.py): torch.compiler.disable of a jitted module
runs the module eagerly, as for a jitted function and torch.compile's modules (its compiled
program ran); a jitted function taking a keyword named `self` is called with it (a TypeError
from the wrapper's own `self`)."""
import copy
import io

import torch

import fuser
from tests.helpers import make

from .jit_helpers import assert_close_to_eager


class _TracedOrEager(torch.nn.Module):
    """Adds 1 where Dynamo traces it, subtracts 1 where it runs eagerly."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        return y + 1 if torch.compiler.is_compiling() else y - 1


def test_disable_of_a_jitted_module_runs_it_eagerly():
    jitted = fuser.jit(_TracedOrEager())
    x = make((4, 8))
    with torch.no_grad():
        plain = jitted._orig_mod.lin(x)
        assert_close_to_eager(jitted(x), plain + 1)  # (compiled)
        assert_close_to_eager(torch.compiler.disable(jitted)(x), plain - 1)
        assert_close_to_eager(jitted(x), plain + 1)  # (still compiled)
        assert torch._dynamo.explain(jitted)(x).graph_count == 1


def test_copies_of_a_jitted_module_name_their_own_module():
    jitted = fuser.jit(_TracedOrEager())
    saved = io.BytesIO()
    torch.save(jitted, saved)
    saved.seek(0)
    x = make((4, 8))
    for other in (copy.deepcopy(jitted), torch.load(saved, weights_only=False)):
        with torch.no_grad():
            plain = other._orig_mod.lin(x)
            assert_close_to_eager(other(x), plain + 1)
            assert_close_to_eager(torch.compiler.disable(other)(x), plain - 1)
        assert list(other.state_dict()) == ["lin.weight", "lin.bias"]


def _scaled(x, self=1.0):
    return x * self + 1


def test_a_keyword_named_self_reaches_the_function():
    jitted = fuser.jit(_scaled)
    for scale in (2.0, 3.0, 2.0):  # (the direct path on later calls)
        x = make((16,))
        assert_close_to_eager(jitted(x, self=scale), _scaled(x, self=scale))
    assert_close_to_eager(jitted(x), _scaled(x))
