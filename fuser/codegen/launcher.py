"""Launching fuser's kernels without a C compile for each kernel signature.

Triton 3.6 launches a kernel through a C function written for its signature (the kinds of its
arguments) and built with the C compiler the first time that signature is seen: 0.1-0.3 s
each, on the critical path of a cold first call, where a fusion's kernels rarely share a
signature (a suite row's first call built 3-9 of them: 0.3-2.8 s summed, on the H200 machine).
`launcher.c` is one launcher for every signature, built once per Triton cache: a kernel's
launch function is made from a string of argument codes instead, and keeps the calling
convention of Triton's (the direct launches of codegen/steps.py and codegen/inline.py call it
the same way).

`install()` (at the first kernel fuser loads for a GPU) gives Triton's CUDA driver a launcher
class that uses it for fuser's kernels (marked by `mark`) and Triton's own for every other
kernel, for signatures it cannot describe (tensor descriptors), while the module is not built,
or where building it failed. Only Triton 3.6's driver, whose convention launcher.c follows, on
little-endian hosts. `FUSER_GENERIC_LAUNCHER=0` keeps Triton's launchers.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Callable, Optional

from ..dump import env_switch

SOURCE = Path(__file__).with_name("launcher.c")
MODULE_NAME = "fuser_launch"

# launcher.c's code of each scalar type in a Triton signature; pointers ("*fp32") are "p"
_CODES = {"constexpr": "c", "i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "L", "u1": "B", "u8": "B",
          "u16": "H", "u32": "I", "u64": "K", "fp16": "e", "bf16": "g", "fp32": "f", "f32": "f", "fp64": "d"}
_MAX_PARAMS = 126  # launcher.c's MAX_PARAMS

_lock = threading.Lock()
_installed = False
_build: Optional[threading.Thread] = None
_module = None
_failure: Optional[str] = None  # why the module is not used, once known


def enabled() -> bool:
    return env_switch("FUSER_GENERIC_LAUNCHER", True) and sys.byteorder == "little"


def mark(kernel) -> None:
    """Mark a JIT function as fuser's: its launches may use the generic launcher."""
    try:
        kernel.fuser_kernel = True
    except AttributeError:
        pass


def signature_codes(signature: dict) -> Optional[bytes]:
    """launcher.c's codes for a Triton signature (argument name -> type), or None where it
    cannot describe one (tensor descriptors, tuples) or has too many parameters."""
    codes = []
    for kind in signature.values():
        if not isinstance(kind, str):
            return None
        code = "p" if kind.startswith("*") else _CODES.get(kind)
        if code is None:
            return None
        codes.append(code)
    if sum(c != "c" for c in codes) > _MAX_PARAMS:
        return None
    return "".join(codes).encode()


def build_module(library_dirs: list, include_dirs: list, libraries: list):
    """The built launcher module (Triton's build helper: C compiler, cached by source)."""
    from triton.runtime import build

    return build.compile_module_from_src(src=SOURCE.read_text(), name=MODULE_NAME, library_dirs=library_dirs,
                                         include_dirs=include_dirs, libraries=libraries)


def status() -> str:
    """"in use", "building", "not installed", or why the generic launcher is not used."""
    if _failure is not None:
        return _failure
    if _module is not None:
        return "in use"
    return "building" if _build is not None else "not installed"


def install() -> None:
    """Once per process: give Triton 3.6's CUDA driver a launcher class that launches fuser's
    kernels through launcher.c, and start building the module in the background (the first
    kernel's compile takes longer than the build)."""
    global _installed, _build, _failure
    if _installed:
        return
    with _lock:
        if _installed:
            return
        _installed = True
        if not enabled():
            _failure = "turned off (FUSER_GENERIC_LAUNCHER=0)" if sys.byteorder == "little" else "big-endian host"
            return
        try:
            import triton
            from triton.backends.nvidia import driver as nvidia
            from triton.runtime import driver

            if not triton.__version__.startswith("3.6."):
                _failure = f"Triton {triton.__version__}: launcher.c follows Triton 3.6's launch convention"
                return
            active = driver.active
            if not isinstance(active, nvidia.CudaDriver) or active.launcher_cls is not nvidia.CudaLauncher:
                _failure = "Triton's active driver is not its CUDA driver with its own launcher"
                return
        except Exception as error:  # noqa: BLE001 - no CUDA backend: Triton's launchers, if any
            _failure = f"no CUDA driver ({type(error).__name__}: {error})"
            return
        _build = threading.Thread(target=_build_now, args=(nvidia,), name="fuser-launcher-build", daemon=True)
        _build.start()
        active.launcher_cls = _launcher_class(nvidia.CudaLauncher)


def _build_now(nvidia) -> None:
    global _module, _failure
    try:
        _module = build_module(nvidia.library_dirs(), nvidia.include_dirs, nvidia.libraries)
    except Exception as error:  # noqa: BLE001 - Triton's launchers stay in use
        _failure = f"building launcher.c failed ({type(error).__name__}: {str(error)[:200]})"


def _built():
    if _build is not None:
        _build.join()
    return _module


def _launcher_class(triton_launcher) -> Callable:
    """What Triton's driver calls as `launcher_cls(src, metadata)`."""
    generic = _generic_class(triton_launcher)

    def launcher(src, metadata):
        fn = getattr(src, "fn", None)
        codes = None
        if getattr(fn, "fuser_kernel", False) and not getattr(metadata, "tensordesc_meta", None):
            codes = signature_codes(getattr(src, "signature", {}))
        module = _built() if codes is not None else None
        if module is None:
            return triton_launcher(src, metadata)
        return generic(module.make_launch(codes), metadata)

    launcher.fuser_generic = True
    return launcher


def _generic_class(triton_launcher):
    class GenericLauncher(triton_launcher):
        """Triton's CUDA launcher with launcher.c's launch function: its call (scratch
        allocation, then `launch`) is inherited, its C function is not compiled."""

        fuser_generic = True  # (steps._raw_launch calls its `launch` directly)

        def __init__(self, launch, metadata):  # noqa: super().__init__ would build the C launcher
            self.launch = launch
            self.num_ctas = getattr(metadata, "num_ctas", 1)
            self.global_scratch_size = metadata.global_scratch_size
            self.global_scratch_align = metadata.global_scratch_align
            self.profile_scratch_size = metadata.profile_scratch_size
            self.profile_scratch_align = metadata.profile_scratch_align
            self.launch_cooperative_grid = metadata.launch_cooperative_grid
            self.launch_pdl = metadata.launch_pdl

    return GenericLauncher
