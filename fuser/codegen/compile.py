"""Turning generated source into a callable kernel, cached in memory and on disk.

Each kernel's source is written once to the cache directory as a module whose file name holds a
digest of the source and of the fuser, Triton and torch versions; a second process imports the
same file (and Triton's own cache then finds the compiled binary). A file that is unreadable or
does not match its digest is rewritten, never trusted. A lock makes concurrent callers of one
fusion compile each kernel once.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import InternalError
from ..timing import phase
from . import compile_pool, launcher
from .canonical import canonical_form

_lock = threading.Lock()
_memory: dict[str, Any] = {}


def cache_dir() -> Path:
    base = os.environ.get("FUSER_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fuser")
    return Path(base) / "kernels"


@functools.cache
def _versions() -> str:
    import torch
    import triton

    from .. import __version__

    return f"fuser={__version__} triton={triton.__version__} torch={torch.__version__}"


def source_key(source: str, target: str) -> str:
    return hashlib.sha256(f"{_versions()}\n{target}\n{source}".encode()).hexdigest()[:24]


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _import(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # triton resolves helper functions through the module
    spec.loader.exec_module(module)
    return module


def load_kernel(name: str, source: str, target: str, scalar_params: Sequence[str] = ()) -> Callable:
    """The kernel `name` defined by `source`, as a Triton JIT function (cuda) or an
    interpreted one (interpreter). Scalar parameters are never specialized on their value
    (Triton would turn a 1 into a constant, without `.to`)."""
    return load_canonical(name, source, target, scalar_params)[1]


def load_canonical(name: str, source: str, target: str, scalar_params: Sequence[str] = ()) -> tuple[str, Callable]:
    """(canonical name, kernel): `load_kernel` of the kernel's canonical form (canonical.py),
    shared by every kernel alike but for its tensors' names."""
    with phase("load"):  # the first kernel of a process also imports Triton (source_key)
        digest = lambda text: source_key(text, target)  # noqa: E731
        cname, code, params = canonical_form(name, source, scalar_params, digest)
        return cname, _load_kernel(cname, code, target, params)


def _load_kernel(name: str, source: str, target: str, scalar_params: Sequence[str]) -> Callable:
    key = source_key(source, target)
    fn = _memory.get(key)
    if fn is not None:
        return fn
    with _lock:
        fn = _memory.get(key)
        if fn is not None:
            return fn
        path = cache_dir() / f"{name}_{key}.py"
        module_name = f"fuser_kernels.{name}_{key}"
        try:
            stale = not path.exists() or path.read_text() != source
        except (OSError, UnicodeDecodeError):
            stale = True
        if stale:
            _write_atomic(path, source)
        try:
            module = _import(path, module_name)
        except Exception:  # a half-written or corrupted file: write it again once
            _write_atomic(path, source)
            module = _import(path, module_name)
        raw = getattr(module, name, None)
        if raw is None:
            raise InternalError(f"generated module {path} has no kernel {name}")
        language = getattr(module, "KERNEL_LANGUAGE", "triton")
        fn = _wrap(raw, target, scalar_params, language)
        if target != "interpreter":  # what a compile worker needs to load it (compile_pool.py)
            fn.fuser_origin = (str(path), module_name, name, language, list(scalar_params))
        _memory[key] = fn
        return fn


def _wrap(raw: Callable, target: str, scalar_params: Sequence[str], language: str = "triton"):
    """`raw` as a kernel: Triton's JIT, Gluon's for a Gluon module (codegen/shared_row.py; it
    has no interpreter), or the interpreter's."""
    import triton

    if target == "interpreter":
        return _Interpreted(raw)
    _keep_triton_key()
    launcher.install()
    compile_pool.start()
    if language == "gluon":
        from triton.experimental import gluon

        kernel = gluon.jit(raw, do_not_specialize=list(scalar_params))
    else:
        kernel = triton.jit(raw, do_not_specialize=list(scalar_params))
    launcher.mark(kernel)
    return kernel


def triton_key_now() -> str:
    """Triton's installation digest as this process has it (kept, see below)."""
    from triton.runtime import cache

    return cache.triton_key()


# -- Triton's installation digest, kept across processes ---------------------------------------

def _keep_triton_key() -> None:
    """Triton keys every compiled kernel, and every lookup in its disk cache, by a digest of
    its own installation (`triton.runtime.cache.triton_key`): once per process it hashes its
    Python files and libtriton, about 500 MB, which costs 0.3-1 s before even a cache hit. The
    digest depends on those files only, so it is kept in fuser's cache directory under their
    sizes, modification times and inodes, and a new process reads it back instead of hashing.
    The key Triton sees is the same string; any change to the files makes a new stamp.
    `FUSER_TRITON_KEY_CACHE=0` leaves Triton's function alone."""
    if os.environ.get("FUSER_TRITON_KEY_CACHE", "1") == "0":
        return
    # where Triton defines or reads the function (before 3.3 it lived in triton.compiler.compiler)
    homes = [_try_import(m) for m in ("triton.runtime.cache", "triton.compiler.compiler")]
    homes = [m for m in homes if m is not None and callable(getattr(m, "triton_key", None))]
    if not homes or any(getattr(m.triton_key, "fuser_kept", False) for m in homes):
        return
    original = homes[0].triton_key

    @functools.cache
    def kept() -> str:
        import triton

        try:
            stamp = _triton_stamp(Path(triton.__file__).parent, triton.__version__)
            path = cache_dir().parent / "triton" / f"key-{stamp}.txt"
            key = path.read_text() if path.exists() else ""
        except (OSError, UnicodeDecodeError):
            path, key = None, ""
        if not key.startswith(triton.__version__):  # Triton's key begins with its version
            key = ""
        if not key:
            key = original()
            if path is not None:
                try:
                    _write_atomic(path, key)
                except OSError:
                    pass
        return key

    kept.fuser_kept = True
    for m in homes:
        m.triton_key = kept


def _try_import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _triton_stamp(root: Path, version: str) -> str:
    """A digest of the version, location, size, modification time and inode of every file
    `triton_key` reads (a superset: all of Triton's Python files and shared libraries)."""
    entries = [version, str(root)]
    for sub in ("compiler", "backends", "language", "runtime", "_C"):
        for folder, dirs, files in os.walk(root / sub):
            dirs.sort()
            for f in sorted(files):
                if f.endswith((".py", ".so")):
                    st = os.stat(os.path.join(folder, f))
                    entries.append(f"{folder}/{f} {st.st_size} {st.st_mtime_ns} {st.st_ino}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:24]


_interpret_lock = threading.Lock()


_rewritten: dict[int, Callable] = {}


def _interpreted_device_call(jit_fn, *args, **kwargs):
    """Run a library JIT function (tl.zeros, tl.sum, ...) as the interpreter runs device
    functions, with the language patched for its own module and restored afterwards."""
    from triton.runtime.interpreter import InterpretedFunction, _patch_lang

    fn = _rewritten.get(id(jit_fn))
    if fn is None:
        fn = _rewritten[id(jit_fn)] = InterpretedFunction(jit_fn.fn).rewrite()
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


class _Interpreted:
    """A kernel run by Triton's interpreter in a process where Triton was imported for GPUs.

    Triton's library functions (tl.sum, tl.cdiv, ...) are then compiled-mode JIT functions,
    which refuse to be called from Python. During an interpreted launch they are made to run
    their Python body, as they would had TRITON_INTERPRET=1 been set before importing Triton.
    """

    def __init__(self, raw: Callable):
        from triton.runtime.interpreter import InterpretedFunction

        _fix_interpreter_index()
        _fix_interpreter_bf16()
        _import_gluon_before_interpreting()
        self.fn = InterpretedFunction(raw)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            from triton import knobs
            from triton.runtime.jit import JITFunction

            with _interpret_lock:
                saved_call, saved_knob = JITFunction.__call__, knobs.runtime.interpret
                JITFunction.__call__ = _interpreted_device_call
                knobs.runtime.interpret = True
                try:
                    return self.fn[grid](*args, **kwargs)
                finally:
                    JITFunction.__call__, knobs.runtime.interpret = saved_call, saved_knob

        return launch
