"""frontend/meta.py `equal_sizes`: size expressions a trace's guards equate are written alike."""
import sympy
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

from fuser.frontend.meta import equal_sizes, size_expr


def _sizes(env, **hints):
    """SymInts of a shape environment without duck sizing (as automatic dynamic shapes make)."""
    return [env.create_symintnode(env.create_symbol(hint, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC),
                                  hint=hint) for name, hint in hints.items()]


def test_products_a_guard_equates_are_written_alike_in_every_size():
    env = ShapeEnv(duck_shape=False)
    batch, seq, rows, cols = _sizes(env, batch=2, seq=8, rows=4, cols=4)
    assert size_expr(batch * seq) != size_expr(rows * cols)  # (no guard yet)
    assert bool(batch * seq == rows * cols)  # (the guard a shape check records)
    assert size_expr(batch * seq) == size_expr(rows * cols)
    assert size_expr(3 * rows * cols) == 3 * size_expr(batch * seq)  # (inside a larger product too)
    kept = size_expr(rows * cols)
    (other,) = [e for e in (size_expr(batch) * size_expr(seq), size_expr(rows) * size_expr(cols)) if e != kept]
    assert equal_sizes(env).members == {kept: [other]}  # (the lowering's way back where kept is not computable)


def test_a_size_a_guard_fixes_is_its_number_and_lone_symbols_are_left_to_dynamo():
    env = ShapeEnv(duck_shape=False)
    a, b, c = _sizes(env, a=6, b=3, c=5)
    assert bool(a * b == 18) and bool(c - 2 == b)
    assert size_expr(a * b) == 18 and size_expr(2 * a * b + c) == 36 + size_expr(c)
    assert size_expr(c) == size_expr(b) + 2  # (a lone symbol: Dynamo's own replacement)
    assert equal_sizes(env).members == {}


def test_a_chain_of_equal_sizes_is_one_class_written_with_fewest_symbols():
    """Guards a*b == 6*c and 6*c == d*c: all three are written 6*c (found by review: pair by
    pair, a*b became 6*c while 6*c became d*c, two extents for one size)."""
    env = ShapeEnv(duck_shape=False)
    a, b, c, d = _sizes(env, a=3, b=4, c=2, d=6)
    assert bool(a * b == 6 * c) and bool(6 * c == d * c)
    written = {size_expr(a * b), size_expr(6 * c), size_expr(d * c)}
    assert written == {6 * size_expr(c)}, written


def test_a_symbol_is_never_written_through_a_root():
    """Under a guard x**2 == y*z the lone x stays x, and x**3 keeps integer powers (found by
    review: sympy's subs wrote x as sqrt(y)*sqrt(z), which no input carries)."""
    env = ShapeEnv(duck_shape=False)
    x, y, z = _sizes(env, x=6, y=4, z=9)
    assert bool(x * x == y * z)
    assert size_expr(x).is_Symbol
    assert all(p.exp.is_Integer for p in size_expr(x * x * x).atoms(sympy.Pow)), size_expr(x * x * x)


def test_a_size_written_as_one_the_backward_cannot_read_falls_back_to_its_equal():
    """A token-weighted cross entropy: the weights' row length is a number in the first trace
    (Eq(s3*s88, 6*s88) among the guards); wherever a graph cannot compute the size as written,
    it is computed as its equal, and nothing runs through ATen (found by review: 8 ops did)."""
    import torch
    import torch.nn.functional as F

    import fuser

    def weighted(logits, target, w):
        per_token = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none")
        return (per_token * w.flatten()).sum() / w.sum()

    jitted = fuser.jit(weighted)
    logits = torch.randn(4, 6, 96, requires_grad=True)
    target, w = torch.randint(0, 96, (4, 6)), torch.rand(4, 6)
    out = jitted(logits, target, w)
    (grad,) = torch.autograd.grad(out, logits)
    want_logits = logits.detach().clone().requires_grad_()
    want = weighted(want_logits, target, w)
    (want_grad,) = torch.autograd.grad(want, want_logits)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(grad, want_grad)
    assert jitted.cache_info().fallback_ops == 0, fuser.explain(jitted, logits, target, w)
