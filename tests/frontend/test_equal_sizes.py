"""frontend/meta.py `equal_sizes`: size expressions a trace's guards equate are written alike."""
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
    assert equal_sizes(env).other == {kept: other}  # (the lowering's way back where kept is not computable)


def test_a_size_a_guard_fixes_is_its_number_and_lone_symbols_are_left_to_dynamo():
    env = ShapeEnv(duck_shape=False)
    a, b, c = _sizes(env, a=6, b=3, c=5)
    assert bool(a * b == 18) and bool(c - 2 == b)
    assert size_expr(a * b) == 18 and size_expr(2 * a * b + c) == 36 + size_expr(c)
    assert size_expr(c) == size_expr(b) + 2  # (a lone symbol: Dynamo's own replacement)
    assert equal_sizes(env).other == {}
