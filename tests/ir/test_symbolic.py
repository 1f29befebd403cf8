"""Extent expressions: nvFuser-style printing, ceilDiv simplification and fast evaluation."""
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from fuser.ir.symbolic import ceilDiv, compile_extent, format_extent, make_symbol

i0, i1, i2 = (make_symbol(f"i{k}") for k in range(3))


@pytest.mark.parametrize("expr,text", [
    (ceilDiv(i0, 3), "( ceilDiv(i0, 3) )"),
    (i0 * i2, "( i0 * i2 )"),
    (i0 * i1 * i2, "( i0 * i1 * i2 )"),
    (i0, "i0"),
    (sympy.Integer(8), "8"),
    (i0 + 2, "( i0 + 2 )"),
    (i0 - 1, "( i0 - 1 )"),
    (i0 + i1, "( i0 + i1 )"),
    (ceilDiv(i0 * i2, 3), "( ceilDiv(( i0 * i2 ), 3) )"),
    (ceilDiv(ceilDiv(i0, 2), 3), "( ceilDiv(( ceilDiv(i0, 2) ), 3) )"),
])
def test_format_extent(expr, text):
    assert format_extent(expr) == text


@pytest.mark.parametrize("expr,value", [
    (ceilDiv(8, 1), 8), (ceilDiv(sympy.Integer(8), sympy.Integer(1)), 8), (ceilDiv(7, 2), 4),
    (ceilDiv(6, 3), 2), (ceilDiv(1, 5), 1), (ceilDiv(0, i0), 0),
])
def test_ceildiv_of_constants_simplifies(expr, value):
    assert expr == sympy.Integer(value)
    assert isinstance(expr, sympy.Integer)
    assert format_extent(expr) == str(value)


def test_ceildiv_by_one_is_the_symbol():
    assert ceilDiv(i0, 1) is i0
    assert format_extent(ceilDiv(i0, 1)) == "i0"


def test_ceildiv_stays_symbolic_and_hashes_equal():
    e = ceilDiv(i0, 3)
    assert isinstance(e, ceilDiv) and e.free_symbols == {i0}
    assert e == ceilDiv(i0, 3) and hash(e) == hash(ceilDiv(i0, 3))
    assert e != ceilDiv(i1, 3)


def test_ceildiv_by_zero_raises():
    with pytest.raises(ZeroDivisionError):
        ceilDiv(5, 0)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 10_000), k=st.integers(1, 64), m=st.integers(0, 50))
def test_compiled_extents_match_integer_arithmetic(n, k, m):
    env = {"i0": n, "i1": m}
    assert compile_extent(ceilDiv(i0, k))(env) == -(-n // k)
    assert compile_extent(i0 * i1)(env) == n * m
    assert compile_extent(ceilDiv(i0 * i1, k))(env) == -(-(n * m) // k)
    assert compile_extent(i0 + i1 - 1)(env) == n + m - 1
    assert compile_extent(sympy.Max(i0 - k, 0))(env) == max(n - k, 0)
    assert compile_extent(sympy.Min(i0, i1))(env) == min(n, m)


def test_compiled_exact_division_stays_integral():
    f = compile_extent(i0 * i1 / i2)
    assert f({"i0": 3, "i1": 4, "i2": 6}) == 2
    assert isinstance(f({"i0": 3, "i1": 4, "i2": 6}), int)


def test_compiled_extent_names_the_missing_symbol():
    with pytest.raises(KeyError, match="i1"):
        compile_extent(i0 + i1)({"i0": 3})


def test_format_negated_term():
    text = format_extent(5 - i0)
    assert "* -1" not in text, text


def test_equal_extents_follow_new_constraints_and_substitutions():
    """`Fusion.equal_extents` is built once per state of the constraints (planning asks it for
    every group) and must still see a constraint added, or an extent rewritten, after that."""
    from fuser.ir.fusion import Fusion

    f = Fusion()
    a, b, c = (make_symbol(f"e{k}") for k in range(3))
    f._input_symbols |= {a, b, c}  # (inputs' symbols: unify keeps them, adding constraints)
    f.unify(a + 1, b * 2, "first")
    same = f.equal_extents()
    assert same(a + 1) == same(b * 2) and same(c + 3) != same(a + 1)
    f.unify(c + 3, b * 2, "second")
    same = f.equal_extents()
    assert same(c + 3) == same(a + 1)
    f.substitute({c: a})
    assert f.equal_extents()(a + 3) == f.equal_extents()(b * 2)
