"""fuser's common-subexpression elimination of the joint graph (fuser/frontend/cse.py), which
stands in for AOTAutograd's (that one imports Inductor)."""
import subprocess
import sys
import textwrap

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import fuser
from fuser.frontend.cse import eliminate_common_subexpressions
from tests.frontend.jit_helpers import assert_close_to_eager

aten = torch.ops.aten


def _calls(gm, target=None):
    return [n for n in gm.graph.nodes if n.op == "call_function" and (target is None or n.target is target)]


def _traced(fn, *args):
    gm = make_fx(fn)(*args)
    want = gm(*args)
    removed = eliminate_common_subexpressions(gm.graph)
    gm.recompile()
    return gm, removed, want


def test_repeated_computations_merge_and_the_graph_computes_the_same():
    def f(x):
        return (x * 2).sin() + (x * 2).sin(), (x * 2).cos()

    x = torch.randn(5, 7)
    gm, removed, want = _traced(f, x)
    assert removed == 3  # two of the three x * 2, and the second sin
    assert len(_calls(gm, aten.mul.Tensor)) == 1 and len(_calls(gm, aten.sin.default)) == 1
    torch.testing.assert_close(gm(x), want)


def test_arguments_equal_in_python_but_of_other_types_stay_apart():
    def f(x):
        return x + 1, x + 1.0, x + True

    x = torch.arange(6, dtype=torch.int32)
    gm, removed, want = _traced(f, x)
    assert removed == 0
    got = gm(x)
    assert [t.dtype for t in got] == [torch.int32, torch.float32, torch.int32]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_random_ops_are_never_merged():
    def f(x):
        return torch.rand_like(x) + torch.rand_like(x)

    gm, removed, _ = _traced(f, torch.randn(4, 4))
    assert removed == 0 and len(_calls(gm, aten.rand_like.default)) == 2


def test_nothing_merges_across_a_mutation():
    def f(x):
        before = x + 1
        x.mul_(3)
        after = x + 1  # reads x after the write: not `before`
        return before, after

    x = torch.randn(3, 5)
    gm = make_fx(f)(x.clone())
    removed = eliminate_common_subexpressions(gm.graph)
    gm.recompile()
    assert removed == 0
    got = gm(x.clone())
    torch.testing.assert_close(got[0], x + 1)
    torch.testing.assert_close(got[1], x * 3 + 1)


def test_jit_training_with_shared_subexpressions_matches_eager():
    def f(x, w):
        a = torch.tanh(x * w) * torch.tanh(x * w)
        return (a + torch.tanh(x * w)).sum(-1)

    x = torch.randn(6, 10, requires_grad=True)
    w = torch.randn(10, requires_grad=True)
    xe, we = (t.detach().clone().requires_grad_() for t in (x, w))
    out, want = fuser.jit(f)(x, w), f(xe, we)
    assert_close_to_eager(out, want)
    g = torch.randn_like(want)
    out.backward(g)
    want.backward(g)
    assert_close_to_eager(x.grad, xe.grad)
    assert_close_to_eager(w.grad, we.grad)


def test_a_training_compile_does_not_import_inductor():
    """AOTAutograd's CSE imported Inductor's pattern matcher and lowerings (0.5 s and more of
    the first training call in a process); fuser's pass does not."""
    code = textwrap.dedent("""
        import sys, torch, fuser
        x = torch.randn(4, 8, requires_grad=True)
        f = fuser.jit(lambda x: torch.sin(x * 2).sum(-1) + torch.sin(x * 2).sum(-1))
        f(x).sum().backward()
        assert x.grad is not None
        print(sorted(m for m in sys.modules if m.startswith("torch._inductor.pattern_matcher")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_zero_and_negative_zero_arguments_stay_apart():
    def f(x):
        return 1 / (x * -0.0), 1 / (x * 0.0)

    x = torch.rand(4) + 0.5
    gm, removed, want = _traced(f, x)
    assert removed == 0
    got = gm(x)
    assert torch.equal(got[0], want[0]) and (got[0] < 0).all() and (got[1] > 0).all()


def test_computations_on_both_sides_of_a_random_op_merge():
    def f(x):
        return torch.tanh(x * 2) + torch.rand_like(x) + torch.tanh(x * 2)

    gm, removed, _ = _traced(f, torch.randn(4, 4))
    assert removed == 2 and len(_calls(gm, aten.rand_like.default)) == 1
