"""A few rows written into a preallocated input (a KV cache) run in place
(frontend/reinplace.py): functionalized, the write was an out-of-place scatter of the whole
cache (`index_copy`, `index_put`, `slice_scatter`) and a `copy_` of it back, both ATen calls,
so each step cost the cache's size. Where a read wants the old value, the graph stays as it was."""
import pytest
import torch
import torch.nn as nn

import fuser
from tests.helpers import make

# ATen ops that make a tensor of the cache's size: left, the write is not in place
_WHOLE_CACHE = ("aten.index_copy.default", "aten.index_put.default", "aten.slice_scatter.default",
                "aten.select_scatter.default", "aten.copy_.default")


def _compiled(front, fn):
    return fuser.jit(fn) if front == "jit" else torch.compile(fn, backend="fuser")


def _aten_code(fn, *args) -> str:
    """The ATen graphs fuser compiled for `fn` (jitted) called with `args` (run once more)."""
    report = fuser.explain(fn, *args)
    return "\n".join(p.aten_code for g in report.graphs for p in g.programs)


def _whole_cache_ops(code: str) -> list[str]:
    return [op for op in _WHOLE_CACHE if f"torch.ops.{op}(" in code]


def index_copy(kc, k, pos):
    kc.index_copy_(2, pos, k)


def index_put(kc, k, pos):
    kc[:, :, pos] = k


def int_slice(kc, k, start: int):
    kc[:, :, start:start + 1] = k


def int_select(kc, k, start: int):
    kc[:, :, start] = k[:, :, 0]


_WRITES = {"index_copy": (index_copy, torch.tensor), "index_put": (index_put, torch.tensor),
           "int_slice": (int_slice, lambda p: p[0]), "int_select": (int_select, lambda p: p[0])}


@pytest.mark.parametrize("front", ["jit", "compile"])
@pytest.mark.parametrize("write", sorted(_WRITES))
def test_a_row_write_into_a_cache_runs_in_place(front, write):
    fn, position = _WRITES[write]
    jf = _compiled(front, fn)
    cache = make((1, 2, 16, 8))
    theirs, address = cache.clone(), cache.data_ptr()
    with torch.no_grad():
        for step in (3, 7, 15):
            k = make((1, 2, 1, 8))
            jf(cache, k, position([step]))
            fn(theirs, k, position([step]))
            torch.testing.assert_close(cache, theirs, rtol=0, atol=0)
        assert cache.data_ptr() == address
        code = _aten_code(jf, cache.clone(), make((1, 2, 1, 8)), position([1]))
    assert _whole_cache_ops(code) == [], code
    torch._dynamo.reset()


@pytest.mark.parametrize("front", ["jit", "compile"])
def test_a_row_written_at_a_negative_int_position_runs_in_place(front):
    jf = _compiled(front, int_select)
    cache = make((1, 2, 16, 8))
    theirs, address = cache.clone(), cache.data_ptr()
    with torch.no_grad():
        for step in (-1, -6, -16):  # (the second call traces the position as a SymInt)
            k = make((1, 2, 1, 8))
            jf(cache, k, step)
            int_select(theirs, k, step)
            torch.testing.assert_close(cache, theirs, rtol=0, atol=0)
        assert cache.data_ptr() == address
        code = _aten_code(jf, cache.clone(), make((1, 2, 1, 8)), -2)
    assert _whole_cache_ops(code) == [], code
    torch._dynamo.reset()


def test_a_row_at_an_int_position_past_the_cache_raises_eagers_index_error():
    jf = fuser.jit(int_select)
    kc, k = make((1, 2, 16, 8)), make((1, 2, 1, 8))
    with torch.no_grad():
        jf(kc.clone(), k, 3)
        jf(kc.clone(), k, 5)  # (the position a SymInt from now on)
        with pytest.raises(IndexError):
            int_select(kc.clone(), k, 16)
        with pytest.raises(IndexError):
            jf(kc.clone(), k, 16)


def test_the_written_cache_read_after_the_write_reads_the_new_rows():
    def step(q, k, v, kc, vc, pos):
        kc.index_copy_(2, pos, k)
        vc[:, :, pos] = v
        return (q @ kc.transpose(-1, -2)).softmax(-1) @ vc

    jf = fuser.jit(step)
    kc, vc = make((1, 2, 16, 8)), make((1, 2, 16, 8))
    ours = (kc.clone(), vc.clone())
    with torch.no_grad():
        for t in (2, 9):
            q, k, v, pos = make((1, 2, 1, 8)), make((1, 2, 1, 8)), make((1, 2, 1, 8)), torch.tensor([t])
            torch.testing.assert_close(jf(q, k, v, *ours, pos), step(q, k, v, kc, vc, pos), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(ours, (kc, vc), rtol=0, atol=0)
        code = _aten_code(jf, q, k, v, ours[0].clone(), ours[1].clone(), pos)
    assert _whole_cache_ops(code) == [], code


def test_two_writes_into_one_cache_run_in_place_in_order():
    def two(kc, a, b, start: int):
        kc[:, :, start:start + 2] = a
        kc[:, :, start + 1:start + 2] = b  # (overwrites the second row of the first write)

    jf = fuser.jit(two)
    kc = make((1, 2, 16, 8))
    ours = kc.clone()
    a, b = make((1, 2, 2, 8)), make((1, 2, 1, 8))
    with torch.no_grad():
        jf(ours, a, b, 4)
        two(kc, a, b, 4)
        code = _aten_code(jf, ours.clone(), a, b, 6)
    torch.testing.assert_close(ours, kc, rtol=0, atol=0)
    assert _whole_cache_ops(code) == [], code


@pytest.mark.parametrize("read", ["before", "clone"])
def test_a_read_of_the_old_value_keeps_the_out_of_place_write(read):
    def f(kc, k, pos):
        old = kc * 2 if read == "before" else kc.clone()
        kc.index_copy_(2, pos, k)
        return old + kc.sum(2, keepdim=True)

    jf = fuser.jit(f)
    kc, k, pos = make((1, 2, 16, 8)), make((1, 2, 1, 8)), torch.tensor([5])
    ours = kc.clone()
    with torch.no_grad():
        torch.testing.assert_close(jf(ours, k, pos), f(kc, k, pos), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours, kc, rtol=0, atol=0)
        code = _aten_code(jf, ours.clone(), k, pos)
    assert "aten.index_copy.default(" in code, code  # (the whole cache copied: the old value is read)


def test_a_read_of_the_old_value_keeps_the_out_of_place_row_write_at_an_int_position():
    def f(kc, k, s: int):
        old = kc * 2
        kc[:, :, s] = k
        return old + kc.sum(2, keepdim=True)

    jf = fuser.jit(f)
    kc = make((1, 2, 16, 8))
    ours = kc.clone()
    with torch.no_grad():
        for s in (5, -3):
            k = make((1, 2, 8))
            torch.testing.assert_close(jf(ours, k, s), f(kc, k, s), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(ours, kc, rtol=0, atol=0)
        code = _aten_code(jf, ours.clone(), k, 2)
    assert "aten.select_scatter.default(" in code, code  # (the whole cache copied: the old value is read)


@pytest.mark.parametrize("position", [3, -1])
def test_a_row_written_into_a_copy_in_a_training_graph_fuses_with_eagers_gradient(position):
    # (select_scatter, kept out of the decompositions for the cache writes, is lowered to the
    # where its decomposition made: the row write and select's backward stay in fusions)
    def f(x, v):
        y = x * 2
        y[:, position] = v.tanh()
        return (y * y[:, 1:2]).sum() + x[:, position].sum()

    x, v = make((4, 6, 5)), make((4, 5))
    ours = [t.clone().requires_grad_() for t in (x, v)]
    theirs = [t.clone().requires_grad_() for t in (x, v)]
    jf = fuser.jit(f)
    jf(*ours).backward()
    f(*theirs).backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)
    report = fuser.explain(jf, *ours)
    aten_calls = [op for g in report.graphs for p in g.programs for _, op, _ in p.eager]
    assert not [op for op in aten_calls if "select_scatter" in op], aten_calls


def test_a_position_past_the_cache_raises_eagers_index_error():
    jf = fuser.jit(index_copy)
    kc, k = make((1, 2, 16, 8)), make((1, 2, 1, 8))
    with torch.no_grad():
        jf(kc.clone(), k, torch.tensor([3]))
        with pytest.raises(IndexError):
            index_copy(kc.clone(), k, torch.tensor([16]))
        with pytest.raises(IndexError):
            jf(kc.clone(), k, torch.tensor([16]))


class _Cached(nn.Module):
    """A layer holding its cache as a buffer (an HF StaticCache-like decoder's)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("kc", torch.randn(1, 2, 16, 8))

    def forward(self, x, pos):
        self.kc.index_copy_(2, pos, self.proj(x))
        return self.kc.sum(2)


def test_a_module_buffer_cache_is_written_in_place():
    ours = _Cached()
    theirs = _Cached()
    theirs.load_state_dict(ours.state_dict())
    jf = torch.compile(ours, backend="fuser")
    address = ours.kc.data_ptr()
    with torch.no_grad():
        for t in (1, 6, 11):
            x, pos = make((1, 2, 1, 8)), torch.tensor([t])
            torch.testing.assert_close(jf(x, pos), theirs(x, pos), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours.kc, theirs.kc, rtol=1e-5, atol=1e-5)
        assert ours.kc.data_ptr() == address
        code = _aten_code(fuser.jit(ours), x, pos)
    assert _whole_cache_ops(code) == [], code
    torch._dynamo.reset()
