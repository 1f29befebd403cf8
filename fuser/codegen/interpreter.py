"""Running generated kernels through Triton's interpreter (CPU tensors, or TRITON_INTERPRET).

`Interpreted` launches a kernel there in a process where Triton was imported for GPUs, and the
`_fix_*` functions mend what the interpreter gets wrong or does too slowly for fuser's kernels;
each is installed once, the first time a kernel is interpreted.
"""
from __future__ import annotations

import os
import threading
from typing import Callable

import numpy

_interpret_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a child forked mid-launch: the lock held, Triton's language patched
    os.register_at_fork(before=_interpret_lock.acquire, after_in_parent=_interpret_lock.release,
                        after_in_child=_interpret_lock.release)


_rewritten: dict[int, Callable] = {}
_launch_patched_lang = False  # (under _interpret_lock) the launch in progress patched tl and tl.core


def _interpreted_device_call(jit_fn, *args, **kwargs):
    """Run a library JIT function (tl.zeros, tl.sum, ...) as the interpreter runs device
    functions: with the language the launch patched, or else patched for its own module and
    restored afterwards."""
    from triton.runtime.interpreter import InterpretedFunction, _patch_lang

    fn = _rewritten.get(id(jit_fn))
    if fn is None:
        fn = _rewritten[id(jit_fn)] = InterpretedFunction(jit_fn.fn).rewrite()
    if _launch_patched_lang:
        return fn(*args, **kwargs)
    scope = _patch_lang(jit_fn.fn)
    try:
        return fn(*args, **kwargs)
    finally:
        scope.restore()


def _fix_interpreter_index() -> None:
    """Older interpreters (Triton 3.6 with NumPy 2) turn a scalar into an index with
    `int(array_of_one)`, which NumPy 2 refuses; loops over runtime bounds need it."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "fuser_fixed", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched.fuser_fixed = True
    interpreter._patch_lang_tensor = patched


def _fix_interpreter_bf16() -> None:
    """Triton's interpreter converts between fp32 and bf16 through a generic float conversion
    that gets subnormal numbers wrong both ways (5.2e-39 to bf16 read 9.1e-39; a bf16 1e-40
    widened to 0). The two formats share their exponent, so a bf16 is the top half of an
    fp32's bits: widen by shifting the bits up, narrow by taking the top half, truncating as
    the interpreter does (`.to`) or rounding to nearest even (`fp_to_fp` with RTNE)."""
    import numpy as np
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.cast_impl, "fuser_fixed", False):
        return
    cast_impl, fp_to_fp = builder.cast_impl, builder.create_fp_to_fp

    def converted(src, dst_type, round_to_even: bool):
        src_type, dst = src.dtype.scalar, dst_type.scalar
        if src_type == tl.bfloat16 and dst == tl.float32:
            data = (src.data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif src_type == tl.float32 and dst == tl.bfloat16:
            bits = src.data.view(np.uint32)
            if round_to_even:
                nan = (bits & 0x7FFFFFFF) > 0x7F800000
                bits = np.where(nan, bits | 0x00400000, bits + 0x7FFF + ((bits >> 16) & 1))
            data = (bits >> 16).astype(np.uint16)
        else:
            return None
        return interpreter.TensorHandle(data, dst)

    def patched_cast(self, src, dst_type):
        found = converted(src, dst_type, False)
        return cast_impl(self, src, dst_type) if found is None else found

    def patched_fp_to_fp(self, src, dst_type, rounding_mode):
        found = converted(src, dst_type, rounding_mode == ir.ROUNDING_MODE.RTNE)
        return fp_to_fp(self, src, dst_type, rounding_mode) if found is None else found

    patched_cast.fuser_fixed = True
    builder.cast_impl = patched_cast
    builder.create_fp_to_fp = patched_fp_to_fp  # (create_fp_ext and the rest call self.cast_impl)


class _ScalarOnly(TypeError):
    """A reduce's combine asked for the truth of a value of several elements."""


def _truth_of_one(value) -> bool:
    data = value.handle.data
    if data.size != 1:
        raise _ScalarOnly("the truth of a value of several elements")
    return bool(data.reshape(-1)[0])


def _fix_interpreter_reduce() -> None:
    """The interpreter runs a `tl.reduce` with a user combine function (fuser's Welford, its
    NaN-propagating max, a pair of sums) one element at a time, a Python call each: a column
    Welford over 700 rows took a minute. Reduce in log2(n) rounds instead, each combining
    neighbours along the axis as whole arrays, earlier elements on the left; the order of a
    GPU's tree rather than a left fold. A combine written for scalars only (Python control flow
    on its values, which the interpreter would read as true for any array) keeps the
    element-wise path: during the rounds the truth of a value of several elements is an error."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    ops = interpreter.ReduceOps
    if getattr(ops.generic_reduce, "fuser_fixed", False):
        return
    elementwise = ops.generic_reduce

    def halve(self, data: list, dtypes: list, axis: int, n: int) -> list:
        """One round: each pair of neighbours along `axis` combined, the odd one out last."""
        pairs = n // 2
        left = [self.to_tensor(np.take(d, np.arange(0, 2 * pairs, 2), axis), t) for d, t in zip(data, dtypes)]
        right = [self.to_tensor(np.take(d, np.arange(1, 2 * pairs, 2), axis), t) for d, t in zip(data, dtypes)]
        out = self.combine_fn.fn(*left, *right)
        shape = left[0].handle.data.shape
        merged = []
        for o, d in zip(out if isinstance(out, tuple) else (out,), data):
            values = o.handle.data if isinstance(o, tl.core.tensor) else o
            values = np.broadcast_to(np.asarray(values), shape).astype(d.dtype)
            if n % 2:
                values = np.concatenate([values, np.take(d, [n - 1], axis)], axis)
            merged.append(values)
        return merged

    def tree_reduce(self, input):
        axis = 0 if self.axis is None else self.axis  # (None: the whole block, flattened)
        dtypes = [arg.dtype for arg in input]
        data = [arg.handle.data if self.axis is not None else arg.handle.data.reshape(-1) for arg in input]
        n = data[0].shape[axis]
        if n == 0:
            return elementwise(self, input)
        truth = tl.core.tensor.__bool__
        tl.core.tensor.__bool__ = _truth_of_one
        try:
            while n > 1:
                data, n = halve(self, data, dtypes, axis, n), (n + 1) // 2
        except _ScalarOnly:
            return elementwise(self, input)
        finally:
            tl.core.tensor.__bool__ = truth
        results = []
        for d, t in zip(data, dtypes):
            if not self.keep_dims:
                d = np.squeeze(d, axis)
                d = d.item() if self.axis is None else d
            results.append(self.to_tensor(d, t))
        return results

    tree_reduce.fuser_fixed = True
    ops.generic_reduce = tree_reduce


def _fix_interpreter_dtype_lookup() -> None:
    """The interpreter maps a Triton type to NumPy's through a table of 19 types it builds
    anew at every call (hashing each), a twelfth of an interpreted reduction's time; remember
    each answer instead."""
    import triton.language as tl
    from triton.runtime import interpreter

    build = interpreter._get_np_dtype
    if getattr(build, "fuser_fixed", False):
        return
    known: dict = {}

    def np_dtype(tt_dtype):
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if isinstance(scalar, tl.pointer_type):  # (unhashable; an address)
            return build(scalar)
        found = known.get(scalar)
        if found is None:
            found = known[scalar] = build(scalar)
        return found

    np_dtype.fuser_fixed = True
    interpreter._get_np_dtype = np_dtype


def _import_gluon_before_interpreting() -> None:
    """Import Gluon's language (where this Triton has it) before the first interpreted launch.
    Gluon wraps Triton's math builtins when it is imported, and Triton 3.9 imports it during an
    interpreted launch, while the interpreter has those builtins swapped for its own: Gluon
    then keeps the interpreter's, and a later Gluon kernel of the same process that calls one
    (tl.rsqrt in a shared-row kernel) fails to compile ("Did you forget to add
    @triton.gluon.jit?")."""
    try:
        import triton.experimental.gluon.language  # noqa: F401
    except ImportError:
        pass


class _LanguageModules:
    """What Triton's `_patch_lang` reads of a function: globals naming triton.language and its
    core module, whose builtins it swaps for the interpreter's."""

    @property
    def __globals__(self) -> dict:
        import triton.language as tl

        return {"tl": tl, "core": tl.core}


_LANGUAGE_MODULES = _LanguageModules()


class Interpreted:
    """A kernel run by Triton's interpreter in a process where Triton was imported for GPUs.

    Triton's library functions (tl.sum, tl.cdiv, ...) are then compiled-mode JIT functions,
    which refuse to be called from Python. During an interpreted launch they are made to run
    their Python body, as they would had TRITON_INTERPRET=1 been set before importing Triton.
    """

    def __init__(self, raw: Callable):
        from triton.runtime.interpreter import InterpretedFunction

        _fix_interpreter_index()
        _fix_interpreter_bf16()
        _fix_interpreter_reduce()
        _fix_interpreter_dtype_lookup()
        _import_gluon_before_interpreting()
        self.fn = InterpretedFunction(raw)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            from triton import knobs
            from triton.runtime.interpreter import _patch_lang
            from triton.runtime.jit import JITFunction

            global _launch_patched_lang
            with _interpret_lock:
                saved_call, saved_knob = JITFunction.__call__, knobs.runtime.interpret
                JITFunction.__call__ = _interpreted_device_call
                knobs.runtime.interpret = True
                # the language patched once for the launch's device calls (a patch and its
                # restore for each call of tl.sum or a combine was a fifth of a Welford test's
                # time); made before the kernel's own patches, so restored after them
                lang = _patch_lang(_LANGUAGE_MODULES)
                _launch_patched_lang = True
                try:
                    # lanes a mask leaves out compute on what they hold (the log of a row sum of
                    # zero, past the last row): the GPU does so silently, and so does eager, so
                    # NumPy's warnings for it would only be noise in a CPU user's output
                    with numpy.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
                        return self.fn[grid](*args, **kwargs)
                finally:
                    _launch_patched_lang = False
                    lang.restore()
                    JITFunction.__call__, knobs.runtime.interpret = saved_call, saved_knob

        return launch
