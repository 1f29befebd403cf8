"""Bounds checks for kernels run by Triton's interpreter in tests.

Every masked load and store of an interpreted launch must fall inside the storage of one of the
launch's tensor arguments; anything else raises an error naming the kernel and its arguments,
where without the check the interpreter reads garbage or writes over the heap (fuzz seed 2682
crashed the test process that way before its fix). `install()` patches Triton's interpreter
and fuser's interpreted launcher for the session (tests/conftest.py; FUSER_TEST_BOUNDS=0 turns
it off). It depends on interpreter internals: with another Triton it installs nothing.
"""
from __future__ import annotations

import threading

import numpy as np
import torch

# per thread (tests launch from several): [start, end) byte ranges of the current launch's
# storages, and what to name in an error
_launch = threading.local()


class OutOfBoundsAccess(AssertionError):
    pass


def _check(ptrs, mask, what: str, itemsize: int) -> None:
    ranges = getattr(_launch, "ranges", None)
    p = ptrs.data[mask.data].astype(np.uint64)
    if p.size == 0 or not ranges:
        return
    ok = np.zeros(p.shape, bool)
    for lo, hi in ranges:
        ok |= (p >= lo) & (p + itemsize <= hi)
    if not ok.all():
        raise OutOfBoundsAccess(f"{what} outside every tensor argument in {_launch.name}: "
                                f"{int((~ok).sum())} of {p.size} lanes; arguments {_launch.args}")


def install() -> bool:
    try:
        import triton.runtime.interpreter as interpreter

        from fuser.codegen import batched, interpreter as fuser_interpreter

        builder = interpreter.InterpreterBuilder
        load, store = builder.create_masked_load, builder.create_masked_store
        np_dtype = interpreter._get_np_dtype
        launcher = fuser_interpreter.Interpreted
    except (ImportError, AttributeError):
        return False
    if getattr(launcher, "_bounds_checked", False):
        return True
    getitem = launcher.__getitem__

    def checked_getitem(self, grid):
        inner = getitem(self, grid)

        def launch(*args, **kwargs):
            # (and those a batched launch reaches through its table: codegen/batched.py)
            tensors = [a for a in args if isinstance(a, torch.Tensor)] + (getattr(batched.REACHED, "tensors", None) or [])
            _launch.ranges = [(s.data_ptr(), s.data_ptr() + s.nbytes()) for s in (t.untyped_storage() for t in tensors)]
            _launch.name = getattr(getattr(self.fn, "fn", None), "__name__", str(self.fn))
            _launch.args = [("tensor", tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else a
                            for a in args]
            try:
                return inner(*args, **kwargs)
            finally:
                _launch.ranges = None
        return launch

    def checked_load(self, ptrs, mask, other, *rest):
        _check(ptrs, mask, "load", np.dtype(np_dtype(ptrs.get_element_ty())).itemsize)
        return load(self, ptrs, mask, other, *rest)

    def checked_store(self, ptrs, value, mask, *rest):
        _check(ptrs, mask, "store", np.dtype(np_dtype(ptrs.get_element_ty())).itemsize)
        return store(self, ptrs, value, mask, *rest)

    launcher.__getitem__ = checked_getitem
    builder.create_masked_load = checked_load
    builder.create_masked_store = checked_store
    launcher._bounds_checked = True
    return True
