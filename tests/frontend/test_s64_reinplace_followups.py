"""Follow-ups of the in-place KV-cache writes (frontend/reinplace.py) and of the eager verdict
(frontend/jit.py's `_eager_verdict`):

- an IndexError an ATen op of the compiled program raised on the real tensors (a position past
  the cache) was taken for a tracing failure: with fallback="eager" the function ran again on
  the caller's tensors, and the program's in-place writes before it applied twice;
- the eager verdict ran the function on copies that dropped an argument's expansion and the
  memory arguments share, so that eager's "more than one element ... refers to a single memory
  location" read as a tracing failure (an UnsupportedError);
- a broadcast row written through a strided slice (`c[:, ::2] = k`) stayed out of place: the
  `sym_size` that sizes k's expand read as a read of the cache."""
import sys
import warnings

import pytest
import torch

import fuser
from tests.helpers import make

# ATen ops that make a tensor of the cache's size: left, the write is not in place
_WHOLE_CACHE = ("aten.index_copy.default", "aten.index_put.default", "aten.slice_scatter.default",
                "aten.select_scatter.default", "aten.copy_.default")


def accumulate_then_copy(c, k, i, p):
    c.index_put_((i,), k, accumulate=True)
    c.index_copy_(0, p, k)  # (p past the cache: IndexError, after the accumulate ran)


def _run_both(jf, p, rows=(0, 3)):
    """`accumulate_then_copy` eagerly and through `jf` on one fresh cache: (eager's cache,
    jf's cache, eager's error type, jf's error type, jf's warnings)."""
    cache, k, i = make((16, 8)), make((2, 8)), torch.tensor(rows)
    theirs = cache.clone()
    errors = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for fn, c in ((accumulate_then_copy, theirs), (jf, cache)):
            try:
                fn(c, k, i, p)
                errors.append(None)
            except IndexError as e:
                errors.append(type(e))
    return theirs, cache, errors[0], errors[1], [str(w.message) for w in caught]


@pytest.mark.parametrize("calls_before", [0, 2], ids=["first_call", "remembered_entry"])
def test_an_index_error_of_the_running_program_is_raised_without_running_again(calls_before):
    jf = fuser.jit(accumulate_then_copy, fallback="eager")
    with torch.no_grad():
        for _ in range(calls_before):
            theirs, ours, _, _, caught = _run_both(jf, torch.tensor([1, 2]))
            torch.testing.assert_close(ours, theirs)
        theirs, ours, eager_error, error, caught = _run_both(jf, torch.tensor([1, 99]))
        assert eager_error is IndexError and error is IndexError
        torch.testing.assert_close(ours, theirs)  # (the accumulate applied once, as eager's)
        assert caught == []  # (no fallback: fuser did not fail)
        theirs, ours, _, error, caught = _run_both(jf, torch.tensor([5, 6]))
    assert error is None and caught == []
    torch.testing.assert_close(ours, theirs)
    assert jf.cache_info().graphs >= 1  # (still compiled, not eager from now on)


def test_an_index_error_while_tracing_still_raises_eagers_error():
    def past_the_end(x):
        return x[7]

    x = make((6, 4))
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 6"):
        fuser.jit(past_the_end)(x)


def write_at(c, k, s: int):
    c[:, s] = k


def test_a_write_into_an_expanded_cache_raises_eagers_error():
    cache, k = make((1, 16, 8)).expand(2, 16, 8), make((2, 8))
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="refers to a single memory location") as eager:
            write_at(cache, k, 3)
        with pytest.raises(RuntimeError) as ours:
            fuser.jit(write_at)(cache, k, 3)
    assert type(ours.value) is RuntimeError and str(ours.value) == str(eager.value)


def test_the_eager_verdict_copies_keep_strides_and_shared_memory():
    copies = sys.modules["fuser.frontend.jit"]._copies  # (`fuser.frontend.jit` names the function)
    base = make((10, 8))
    leaf = make((4, 5)).requires_grad_()
    originals = (base[2:5], base[4:7, ::2], make((1, 3)).expand(4, 3), leaf, leaf * 2)
    args, kwargs = copies((originals, {"k": base}))
    for original, copy in zip((*originals, base), (*args, kwargs["k"])):
        assert copy.data_ptr() != original.data_ptr() and copy.stride() == original.stride()
        torch.testing.assert_close(copy, original, rtol=0, atol=0)
    kwargs["k"][4, 0] = 100.0  # (the copies share memory as the originals do)
    assert args[0][2, 0].item() == 100.0 and args[1][0, 0].item() == 100.0 and base[4, 0].item() != 100.0
    assert args[3].is_leaf and args[3].requires_grad and args[4].grad_fn is not None


def broadcast_row(c, k):
    c[:, ::2] = k  # k (2, 1, 8): broadcast over the strided rows


@pytest.mark.parametrize("front", ["jit", "compile"])
def test_a_broadcast_row_written_through_a_strided_slice_runs_in_place(front):
    jf = fuser.jit(broadcast_row) if front == "jit" else torch.compile(broadcast_row, backend="fuser")
    with torch.no_grad():
        for length in (16, 24):  # (the second traces the cache's length as a symbol)
            cache, k = make((2, length, 8)), make((2, 1, 8))
            theirs, address = cache.clone(), cache.data_ptr()
            jf(cache, k)
            broadcast_row(theirs, k)
            torch.testing.assert_close(cache, theirs, rtol=0, atol=0)
            assert cache.data_ptr() == address
        if front == "jit":
            report = fuser.explain(jf, make((2, 20, 8)), make((2, 1, 8)))
            code = "\n".join(p.aten_code for g in report.graphs for p in g.programs)
            assert [op for op in _WHOLE_CACHE if f"torch.ops.{op}(" in code] == [], code
    torch._dynamo.reset()
