"""One kernel launch of a prepared launch: through Triton's JIT entry point (`_Step`, the
interpreter and the first call), or straight into the compiled kernel's launcher (`_DirectStep`,
the GPU's repeat calls), skipping Triton's per-call argument binding and cache lookup."""
from __future__ import annotations

import contextlib
import functools
from typing import Optional

import torch

from . import background, compile_pool


def step_args(template: list, slots, tensors: list) -> list:
    """A step's arguments: its `template` with tensor `k` at position `pos` for each (pos, k) of
    `slots` (a launch's steps are (step, template, slots))."""
    args = list(template)
    for pos, k in slots:
        args[pos] = tensors[k]
    return args


class _Step:
    """One kernel launch through Triton's JIT entry point."""

    def __init__(self, fn, grid: int, kwargs: dict):
        self.launch = fn[(grid,)]
        self.fn, self.grid, self.kwargs = fn, grid, kwargs

    def __call__(self, args: list) -> None:
        self.launch(*args, **self.kwargs)


NO_CONTEXT = contextlib.nullcontext()
# the keyword arguments of a launch that are Triton's compile or launch options, not kernel
# parameters (every key compile_options gives is one: tests/codegen/test_compile_options.py)
LAUNCH_OPTIONS = ("num_warps", "launch_cooperative_grid", "sanitize_overflow")


def compile_options() -> dict:
    """Triton compile options for fuser's compiled kernels, read as each step is made. By default
    Triton builds an overflow check around every integer add, sub and mul narrower than 64 bits,
    then drops it unless compiling with debug on (TRITON_DEBUG=1): a quarter of the front end's
    time for the wide shared-row kernel (docs/performance-history.md, twenty-first session). Kept where
    debug is on, or where this Triton has no such option."""
    from triton import knobs

    if knobs.runtime.debug or not _has_sanitize_option():
        return {}
    return {"sanitize_overflow": False}


@functools.cache
def _has_sanitize_option() -> bool:
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return False
    return "sanitize_overflow" in getattr(CUDAOptions, "__dataclass_fields__", {})


META = torch.device("meta")  # where a compile-ahead pass makes its tensors


class StandIn:
    """What compiling a kernel reads of a tensor argument, without the tensor (a runtime's
    compile-ahead pass has meta tensors): its dtype, its device, and an address whose
    alignment is the tensor's (Triton specializes on pointers divisible by 16). A stand-in
    that guesses the alignment wrong costs a compile at the launch, not a wrong kernel: the
    launch looks its kernel up by the real arguments."""

    __slots__ = ("dtype", "device", "address")

    def __init__(self, dtype: torch.dtype, device: torch.device, address: int = 0):
        self.dtype, self.device, self.address = dtype, device, address

    @staticmethod
    def of(t: torch.Tensor, device: torch.device) -> "StandIn":
        # a meta tensor's base is taken as aligned, as every allocation is
        address = t.storage_offset() * t.element_size() if t.device.type == "meta" else t.data_ptr()
        return StandIn(t.dtype, device, address)

    def data_ptr(self) -> int:
        return self.address


def raw_stream_fallback(device: int) -> int:
    return torch.cuda.current_stream(device).cuda_stream


raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", raw_stream_fallback)
current_device = getattr(torch._C, "_cuda_getDevice", lambda: torch.cuda.current_device())


def _hook(chain):
    """A launch hook for Triton's launcher: None where no hook is installed. Triton (3.6 on)
    keeps its hooks in chains that are never None, so each launch would build the launch
    metadata and call two empty chains (a few microseconds); the launcher skips a None hook."""
    calls = getattr(chain, "calls", None)
    return None if chain is None or (isinstance(calls, list) and not calls) else chain


def _raw_launch(run) -> Optional[tuple]:
    """(C launch function, cooperative-grid flag, PDL flag) behind Triton 3.6's CudaLauncher,
    for a kernel that needs no scratch memory: the launcher's Python `__call__` only allocates
    scratch memory and passes these flags before the kernel's arguments, a few microseconds a
    launch on a slow host. None for other Tritons and launchers (their own call is used)."""
    import triton

    if not triton.__version__.startswith("3.6."):
        return None
    from triton.backends.nvidia.driver import CudaLauncher

    # Triton's own, or fuser's generic one (codegen/launcher.py): not another subclass, whose
    # call may do more than pass its flags
    if type(run) is not CudaLauncher and not getattr(type(run), "fuser_generic", False):
        return None
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    launch = getattr(run, "launch", None)
    flags = (getattr(run, "launch_cooperative_grid", None), getattr(run, "launch_pdl", None))
    return None if launch is None or None in flags else (launch, *flags)


class _DirectStep(_Step):
    """A launch that calls the compiled kernel's launcher directly, skipping Triton's per-call
    argument binding and cache lookup (tens of microseconds a call). It is valid for one entry
    of the launch cache, whose sizes, strides and scalars fix the kernel's specialization; only
    pointer alignment can change between calls, so it is checked, and a call that differs, or
    a Triton whose launcher has another signature, takes the JIT path."""

    def __init__(self, fn, grid: int, kwargs: dict):
        kwargs = {**kwargs, **compile_options()}  # (compiled kernels only: the interpreter takes none)
        super().__init__(fn, grid, kwargs)
        self.compiled = None
        # the tensor arguments whose pointers were 16-byte aligned when the kernel compiled:
        # Triton specializes each pointer on that, so a later call must keep them aligned
        self.aligned_at: list[int] = []
        # in parameter order (the launch options are not parameters)
        self.constexprs = [v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS]
        self.usable = True
        self.hooks = None  # triton.knobs.runtime: its launch hooks are read at each launch
        self.raw = None  # Triton's C launch function with its flags, where it can be called directly

    def precompile(self, args: list, load: bool = True) -> None:
        """Compile the kernel for these arguments without launching it (parallel_compile),
        on the arguments' device; any error is left to the launch. `load`: also load it onto
        the GPU (False for a background compile: a module load while another thread captures
        a CUDA graph would spoil the capture; the first launch loads it)."""
        try:
            device = next((a.device for a in args if isinstance(a, (torch.Tensor, StandIn))), None)
            with torch.cuda.device(device) if device is not None and device.type == "cuda" else NO_CONTEXT:
                sent = compile_pool.compile_first(self.fn, args, self.kwargs, (self.grid,))  # in a worker, if any
                if background.exiting():  # (no compile starts here once the process exits: background.py)
                    return
                compiled = self.fn.run(*args, grid=(self.grid,), warmup=True, **self.kwargs)
                compile_pool.record_hit(sent, compiled)
                if load:
                    compiled._init_handles()
        except Exception:  # noqa: BLE001 - the launch compiles again and raises it there
            pass

    def _first(self, args: list) -> None:
        self.launch(*args, **self.kwargs)
        if self.compiled is None and self.usable:
            from triton import knobs

            self.aligned_at = [k for k, a in enumerate(args) if isinstance(a, torch.Tensor) and a.data_ptr() % 16 == 0]
            self.compiled = self.fn.run(*args, grid=(self.grid,), warmup=True, **self.kwargs)
            self.compiled._init_handles()
            self.hooks = knobs.runtime
            self.raw = _raw_launch(self.compiled.run)

    def raw_parts(self) -> Optional[dict]:
        """What a generated call of Triton's C launch function needs (`codegen/inline.py`):
        the function and its fixed arguments, the launch-hook chains as they are now (a call
        checks them unchanged and empty: None, or a chain whose `calls` list is empty), the
        arguments whose alignment the kernel assumes, and its JIT entry point with its keyword
        arguments (for a launcher that rejects the call). None where this step has no such
        call: not compiled yet, another launcher, a hook installed."""
        if self.compiled is None or not self.usable or self.raw is None:
            return None
        chains = (self.hooks.launch_enter_hook, self.hooks.launch_exit_hook)
        if any(_hook(c) is not None for c in chains):
            return None
        launch, cooperative, pdl = self.raw
        return dict(step=self, launch=launch, grid=self.grid, function=self.compiled.function, cooperative=cooperative,
                    pdl=pdl, packed=self.compiled.packed_metadata, hooks=self.hooks, chains=chains,
                    aligned_at=self.aligned_at, constexprs=self.constexprs, jit=self.launch, kwargs=self.kwargs)

    def __call__(self, args: list) -> None:
        kernel = self.compiled
        if kernel is None or not self.usable:
            return self._first(args)
        # each tensor's address, read once: Triton's C launcher, given a tensor, reads it again
        # and asks the driver about it (a driver call a pointer); given an int, it takes it
        addresses = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
        for k in self.aligned_at:
            if addresses[k] % 16:
                return self.launch(*args, **self.kwargs)
        # the current device's current stream, as Triton's own launch takes it
        stream = raw_stream(current_device())
        enter, leave = _hook(self.hooks.launch_enter_hook), _hook(self.hooks.launch_exit_hook)
        # (Triton's own launch hands its metadata to an exit hook too, with or without an enter hook)
        meta = kernel.launch_metadata((self.grid, 1, 1), stream, *args, *self.constexprs) \
            if enter is not None or leave is not None else None
        try:
            if self.raw is not None:
                launch, cooperative, pdl = self.raw
                launch(self.grid, 1, 1, stream, kernel.function, cooperative, pdl, None, None,
                       kernel.packed_metadata, meta, enter, leave, *addresses, *self.constexprs)
            else:
                kernel.run(self.grid, 1, 1, stream, kernel.function, kernel.packed_metadata, meta, enter, leave,
                           *args, *self.constexprs)
        except TypeError:  # a launcher of another shape: use Triton's entry point from now on
            self.usable = False
            self.launch(*args, **self.kwargs)
