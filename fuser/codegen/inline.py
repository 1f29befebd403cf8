"""A prepared launch inline in generated code: the lines a ready call's function (runtime/ready.py)
runs on a GPU instead of calling `Launch.__call__`, `_run`, `tensors_for` and each
`_DirectStep.__call__`: the outputs from Inductor's C++ allocators, the stream's workspaces, and
each kernel handed straight to Triton's C launcher, with the checks under which that is what the
prepared launch would do. About five Python calls and their lists fewer a kernel launch: the
host time of a small call on the H200 machines (docs/performance-history.md, tenth session)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch

from .scratch import stream_key
from .steps import _DirectStep, current_device, raw_stream

if TYPE_CHECKING:
    from .launches import Launch


def _fast_allocators() -> dict:
    """Allocators of a strided tensor on the current device by device type, in C++ without the
    dispatcher's argument parsing (the ones Inductor's generated code calls): about 1 us a
    tensor on the H200 hosts against 3.3-4.5 us for `torch.empty`. Empty for a torch that lacks
    them (`torch.empty_strided` is used). They take a tuple of ints and skip what the dispatcher
    adds: dispatch modes do not see them, and deterministic mode's fill of new memory does not
    apply (every kernel writes all of its outputs)."""
    try:
        from torch._C._dynamo.guards import _empty_strided_cpu, _empty_strided_cuda
    except ImportError:  # pragma: no cover - depends on the torch build
        return {}
    return {"cuda": _empty_strided_cuda, "cpu": _empty_strided_cpu}


FAST_EMPTY = _fast_allocators()


def writable_into(t: torch.Tensor, layout: tuple, others: Sequence[Any]) -> bool:
    """Whether a launch writing an output of `layout` (shape, strides, dtype) can write it into
    `t`, the input it aliases (runtime/in_place.py planned that the kernel may): `t` has that
    layout and a 16-byte aligned address (the kernels assume their outputs so), and none of
    the fusion's `others` arguments touches its memory (the same tensor passed twice
    included: it may be read transposed, or by a later kernel)."""
    if not layout_fits(t, layout) or t.data_ptr() % 16:
        return False
    return not any(isinstance(a, torch.Tensor) and overlap(a, t) for a in others)


def overlap(a: torch.Tensor, t: torch.Tensor) -> bool:
    """Whether `a` touches memory `t` holds."""
    if a.device != t.device:
        return False
    sa, st = address_span(a), address_span(t)
    return sa is not None and st is not None and sa[0] < st[1] and st[0] < sa[1]


def span_lengths(args: Sequence[Any]) -> tuple[int, ...]:
    """The bytes each argument spans from its address (0: not a tensor, or empty): fixed by a
    call's layout, so a ready call computes them once."""
    spans = [address_span(a) if isinstance(a, torch.Tensor) else None for a in args]
    return tuple(0 if span is None else span[1] - span[0] for span in spans)


def disjoint(args: Sequence[Any], lengths: Sequence[int]) -> bool:
    """Whether no two of the tensor arguments share a byte (`lengths`: `span_lengths`), by one
    sort of their address ranges. Tensors of two devices may compare as overlapping: a copy
    where none was needed, never a missed overlap."""
    return apart([(a.data_ptr(), n) for a, n in zip(args, lengths) if n])


def apart(spans: list[tuple[int, int]]) -> bool:
    """Whether no two (address, bytes) spans share a byte: sorted, any overlap shows between
    neighbours."""
    spans = sorted(spans)
    return all(start + n <= after for (start, n), (after, _) in zip(spans, spans[1:]))


class Disjoint:
    """`disjoint` for one ready call's layout (`lengths`, fixed by it), remembering its last
    answer by the arguments' addresses: a training loop passes the same tensors each step, and
    an optimizer's 90 arguments took a sort each call (open lead 15)."""

    __slots__ = ("at", "lengths", "last")

    def __init__(self, lengths: Sequence[int]):
        self.at = [k for k, n in enumerate(lengths) if n]
        self.lengths = [lengths[k] for k in self.at]
        self.last: tuple = ((), True)  # (addresses, answer): one attribute, read and set whole

    def __call__(self, args: Sequence[Any]) -> bool:
        addresses = tuple([args[k].data_ptr() for k in self.at])
        last = self.last
        if addresses == last[0]:
            return last[1]
        answer = apart(list(zip(addresses, self.lengths)))
        self.last = (addresses, answer)
        return answer


def layout_fits(t: Any, layout: tuple) -> bool:
    """Whether tensor `t` has the (shape, strides, dtype) of `layout`."""
    shape, strides, dtype = layout
    return isinstance(t, torch.Tensor) and t.dtype == dtype and t.stride() == strides and tuple(t.shape) == shape


def address_span(t: torch.Tensor) -> Optional[tuple[int, int]]:
    """[first, last + 1) of the addresses `t` reads (strides >= 0, as views give); None when
    it holds no element."""
    try:
        start = t.data_ptr()
    except RuntimeError:  # (a tensor subclass without storage)
        return None
    if t.is_contiguous():  # (its bytes, end to end: an optimizer's 36 counters a call)
        size = t.nbytes
        return (start, start + size) if size else None
    if t.numel() == 0:
        return None
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


# what a generated launch reads of `_DirectStep.raw_parts`, by the name it has there
_RAW_NAMES = {"launch": "L", "function": "F", "packed": "P", "cooperative": "CO", "pdl": "PD", "step": "S",
              "jit": "J", "kwargs": "KW"}


def _raw_launch_lines(raw: dict, template: list, slots: list, ins: list[str], tensors: list[str], checks: list[str],
                      env: dict, tag: str, stream: str) -> list[str]:
    """One kernel's call of Triton's C launcher in generated code (`inline_lines`): its
    arguments the tensors named by `slots` and the template's constants, then its constexprs.
    A launcher that rejects them (TypeError, raised before anything is enqueued) leaves the
    step to Triton's entry point from then on, as `_DirectStep.__call__` does. Adds to
    `checks` what must hold for the call: the inputs the kernel was compiled aligned for still
    aligned, the step still usable."""
    env.update({f"{short}{tag}": raw[key] for key, short in _RAW_NAMES.items()})
    args, pointers, filled = [], [], dict(slots)
    for pos, value in enumerate(template):
        k = filled.get(pos)
        if k is None:
            env[f"C{tag}_{pos}"] = value
            args.append(f"C{tag}_{pos}")
            pointers.append(f"C{tag}_{pos}")
            continue
        args.append(tensors[k])
        # the launcher takes an int as the address itself; given a tensor, it calls data_ptr
        # and asks the driver for the address (cuPointerGetAttribute, one driver call per
        # pointer). The tensors here are on the launch's device (the ready key or check holds)
        if k < len(ins) and pos in raw["aligned_at"]:  # (the allocators align what they make)
            # the check reads the address once, the launch (after every check) reuses it
            checks.append(f"(p_{ins[k]} := {ins[k]}.data_ptr()) % 16")
            pointers.append(f"p_{ins[k]}")
        else:
            pointers.append(f"{tensors[k]}.data_ptr()")
    constexprs = []
    for i, value in enumerate(raw["constexprs"]):
        env[f"X{tag}_{i}"] = value
        constexprs.append(f"X{tag}_{i}")
    checks.append(f"not S{tag}.usable")
    return ["try:",
            f"    L{tag}({raw['grid']}, 1, 1, {stream}, F{tag}, CO{tag}, PD{tag}, None, None, P{tag}, None, None, None, "
            f"{', '.join(pointers + constexprs)})",
            "except TypeError:  # a launcher of another shape",
            f"    S{tag}.usable = False",
            f"    J{tag}({''.join(a + ', ' for a in args)}**KW{tag})"]


def inline_lines(launch: "Launch", ins: list[str], outs: list[str], fallback: str, env: dict, tag: str,
                 device: torch.device, into: Optional[dict[int, tuple[str, str]]] = None) -> Optional[list[str]]:
    """Lines of a generated function (a ready call's) that make `launch` on the tensors
    named `ins` and leave its outputs in the names `outs`: on a GPU they allocate the
    outputs, take the stream's workspaces and call Triton's C launcher for each kernel
    inline, as `_run` and `_DirectStep.__call__` would, without their calls and lists.
    Where the call's input pointers lose the alignment a kernel assumes (the allocators
    align what they make), the current device is another, a launch hook was installed
    since or a step's launcher rejected its arguments before, the lines take `fallback` (an
    expression whose value is the outputs) instead. Names the lines read go
    into `env`, suffixed with `tag`. `into`: {output position: (the name of the input it is
    written into, the condition under which it is at that call: its layout fixed by the ready
    key, `disjoint` arguments and an aligned address)}. None: this launch has no such form (not compiled yet,
    another launcher)."""
    empty = FAST_EMPTY.get(device.type)
    if device.type != "cuda" or device.index is None or empty is None or launch.cold or not outs \
            or len(outs) != len(launch.out_layouts):
        return None
    raws = [step.raw_parts() if isinstance(step, _DirectStep) else None for step, _, _ in launch.steps]
    if not raws or any(raw is None for raw in raws):
        return None
    env.update({f"EMPTY{tag}": empty, f"DEV{tag}": device, "current_device": current_device,
                "raw_stream": raw_stream, "stream_key": stream_key})
    body = [f"stream{tag} = raw_stream({device.index})"]
    for k, (shape, strides, dtype) in enumerate(launch.out_layouts):
        env[f"OS{tag}_{k}"], env[f"OT{tag}_{k}"], env[f"OD{tag}_{k}"] = shape, strides, dtype
        allocated = f"EMPTY{tag}(OS{tag}_{k}, OT{tag}_{k}, OD{tag}_{k})"
        if into and k in into:
            dest, condition = into[k]
            allocated = f"{dest} if {condition} else {allocated}"
        body.append(f"{outs[k]} = {allocated}")
    scratch = []
    if launch.workspaces is not None or launch.semaphores is not None:
        body.append(f"key{tag} = stream_key(DEV{tag})")
        if launch.workspaces is not None:
            env[f"WS{tag}"] = launch.workspaces
            scratch += [f"ws{tag}_{j}" for j in range(len(launch.workspaces.specs))]
            body.append(f"{''.join(w + ', ' for w in scratch)}= WS{tag}.get(DEV{tag}, key{tag})")
        if launch.semaphores is not None:
            env[f"SEM{tag}"] = launch.semaphores
            scratch.append(f"sem{tag}")
            body.append(f"sem{tag} = SEM{tag}.get(DEV{tag}, key{tag})")
    checks: list[str] = []
    for j, ((_, template, slots), raw) in enumerate(zip(launch.steps, raws)):
        body += _raw_launch_lines(raw, template, slots, ins, ins + outs + scratch, checks, env,
                                  f"{tag}_{j}", f"stream{tag}")
    for j, raw in enumerate({id(raw["hooks"]): raw for raw in raws}.values()):  # (Triton's one knobs object)
        env[f"HK{tag}_{j}"] = raw["hooks"]
        for i, hook in enumerate(("launch_enter_hook", "launch_exit_hook")):
            # (a chain, as Triton 3.6 keeps hooks, is empty while its list of calls is)
            chain = env[f"HC{tag}_{j}_{i}"] = raw["chains"][i]
            checks.append(f"HK{tag}_{j}.{hook} is not HC{tag}_{j}_{i}"
                          + (f" or HC{tag}_{j}_{i}.calls" if chain is not None else ""))
    checks.append(f"current_device() != {device.index}")
    return ([f"if {' or '.join(dict.fromkeys(checks))}:", f"    {''.join(o + ', ' for o in outs)}= {fallback}",
             "else:"] + ["    " + line for line in body])
