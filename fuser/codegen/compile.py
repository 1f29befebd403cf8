"""Turning generated source into a callable kernel, cached in memory and on disk.

Each kernel's source is written once to the cache directory as a module whose file name holds a
digest of the source and of the fuser, Triton and torch versions; a second process imports the
same file (and Triton's own cache then finds the compiled binary). A file that is unreadable or
does not match its digest is rewritten, never trusted. A lock makes concurrent callers of one
fusion compile each kernel once. Where no file can be written at all (a full disk, a quota), the
kernel's module is made from its source in memory.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import importlib
import importlib.util
import linecache
import os
import shutil
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..dump import env_switch
from ..errors import InternalError
from ..timing import phase
from . import compile_pool, launcher
from .canonical import canonical_form
from .interpreter import Interpreted

_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # a child forked mid-load would find the lock held for good
    os.register_at_fork(before=_lock.acquire, after_in_parent=_lock.release, after_in_child=_lock.release)
_memory: dict[str, Any] = {}


def cache_dir() -> Path:
    """FUSER_CACHE_DIR (a `~` expanded: an ENV line or a .env file leaves it as written), else
    $XDG_CACHE_HOME/fuser or ~/.cache/fuser; its `kernels` folder."""
    base = (os.environ.get("FUSER_CACHE_DIR") or "").strip() or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fuser")
    return Path(os.path.expanduser(base)) / "kernels"


@functools.cache
def _versions() -> str:
    import torch
    import triton

    from .. import __version__

    return f"fuser={__version__} triton={triton.__version__} torch={torch.__version__}"


def source_key(source: str, target: str) -> str:
    return hashlib.sha256(f"{_versions()}\n{target}\n{source}".encode()).hexdigest()[:24]


def _read_umask() -> int:
    """This process's umask. Linux shows it in /proc/self/status; elsewhere it is read by
    setting it (os.umask has no read-only form) and back, which changes it for every thread of
    the process meanwhile: done once, at import."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# what open() gives a new file, under the umask at import (a later os.umask change is not seen)
_FILE_MODE = 0o666 & ~_read_umask()


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        # mkstemp makes the file 0600 whatever the umask: a cache one user filled (a Docker
        # build as root, a shared FUSER_CACHE_DIR) was unreadable to every other
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        raise


@functools.cache
def _private_dir() -> Path:
    """Where this process writes its kernels when the cache folder cannot take them (removed
    when it exits)."""
    folder = tempfile.mkdtemp(prefix="fuser-kernels-")
    owner = os.getpid()  # (a forked child's exit runs the parent's atexit handlers too)
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(folder, ignore_errors=True))
    return Path(folder)


if hasattr(os, "register_at_fork"):  # a forked child makes a folder of its own, and removes it at
    # its exit: reusing the parent's, it recreated it after the parent's exit removed it, for good
    os.register_at_fork(after_in_child=_private_dir.cache_clear)


def _write_kernel(path: Path, source: str) -> Optional[Path]:
    """`source` written at `path`, or, where the cache folder cannot be written (read-only, a
    file in its place), in a folder of this process's own, with one warning: Triton reads a
    kernel's source from its file, so the kernel still needs one. None, with one warning, where
    neither can be written (a full disk, a quota): the kernel's module is then made in memory."""
    try:
        _write_atomic(path, source)
        return path
    except OSError as e:
        cache_error = e
    try:
        private = _private_dir() / path.name
        _write_atomic(private, source)
    except OSError as e:  # (no usable temporary folder is a FileNotFoundError of tempfile's)
        _warn_once("memory", f"fuser: cannot write its kernel cache {path.parent} ({cache_error}) nor a "
                   f"temporary folder ({e}); this process keeps its kernels in memory (free some disk "
                   f"space or set FUSER_CACHE_DIR to a writable folder)")
        return None
    _warn_once("private", f"fuser: cannot write its kernel cache {path.parent} ({cache_error}); this "
               f"process writes its kernels to {private.parent} instead (set FUSER_CACHE_DIR to a "
               f"writable folder)")
    return private


_warned_unwritable: set[str] = set()  # the cases warned about: "private", "memory"


def _warn_once(case: str, message: str) -> None:
    if case not in _warned_unwritable:
        _warned_unwritable.add(case)
        warnings.warn(message, stacklevel=3)


def _import(path: Optional[Path], module_name: str, source: str):
    """The kernel module `module_name`: imported from `path`, or made from `source` where it
    has no file (None)."""
    if path is None:
        return _module_in_memory(module_name, source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # triton resolves helper functions through the module
    spec.loader.exec_module(module)
    # Triton reads a kernel's source again at its first launch (through inspect, so linecache):
    # held there, a cache folder removed meanwhile costs nothing (mtime None: never re-checked)
    linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
    return module


def _module_in_memory(module_name: str, source: str):
    """`source` run as the module `module_name` without a file. Triton (its JIT and its
    interpreter) reads a kernel's source through inspect, which finds it in linecache under
    the code's file name, `<module_name>` (mtime None: never looked for on disk)."""
    pseudo_path = _pseudo_path(module_name)
    linecache.cache[pseudo_path] = (len(source), None, source.splitlines(True), pseudo_path)
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module  # triton resolves helper functions through the module
    exec(compile(source, pseudo_path, "exec"), module.__dict__)
    return module


def _pseudo_path(module_name: str) -> str:
    return f"<{module_name}>"


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


def load_plain(name: str, source: str, target: str) -> Callable:
    """The kernel `name` of a module `source` as written (no canonical form: a batched
    kernel, batched.py, names its member's helpers and body as its module does)."""
    with phase("load"):
        return _load_kernel(name, source, target, ())


def _load_kernel(name: str, source: str, target: str, scalar_params: Sequence[str]) -> Callable:
    key = source_key(source, target)
    fn = _memory.get(key)
    if fn is not None:
        return fn
    with _lock:
        fn = _memory.get(key)
        if fn is not None:
            return fn
        home = cache_dir() / f"{name}_{key}.py"
        module_name = f"fuser_kernels.{name}_{key}"
        try:  # (only a regular file is read: a FIFO in its place would block the read)
            stale = not home.is_file() or home.read_text() != source
        except (OSError, UnicodeDecodeError):
            stale = True
        path = _write_kernel(home, source) if stale else home  # (None: no file, in memory)
        try:
            module = _import(path, module_name, source)
        except Exception:  # a half-written or corrupted file: write it again once
            path = _write_kernel(home, source)
            try:
                module = _import(path, module_name, source)
            except SyntaxError as e:  # (the source as generated: codegen's fault, not the file's)
                raise InternalError(f"the generated kernel {name} does not parse: {e.msg} at line "
                                    f"{e.lineno} of {path or _pseudo_path(module_name)}") from e
        raw = getattr(module, name, None)
        if raw is None:
            raise InternalError(f"generated module {path or _pseudo_path(module_name)} has no kernel "
                                f"{name}")
        language = getattr(module, "KERNEL_LANGUAGE", "triton")
        fn = _wrap(raw, target, scalar_params, language)
        if target != "interpreter" and path is not None:  # (a compile worker needs a file)
            # what a compile worker needs to load it (compile_pool.py)
            fn.fuser_origin = (str(path), module_name, name, language, list(scalar_params))
        _memory[key] = fn
        return fn


def _wrap(raw: Callable, target: str, scalar_params: Sequence[str], language: str = "triton"):
    """`raw` as a kernel: Triton's JIT, Gluon's for a Gluon module (codegen/shared_row.py; it
    has no interpreter), or the interpreter's."""
    import triton

    if target == "interpreter":
        return Interpreted(raw)
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
    if not env_switch("FUSER_TRITON_KEY_CACHE", True):
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
