"""Repro scripts: a definition's text and its inputs' layouts as a standalone Python script, to
attach to a bug report (nvFuser's `fd.repro_script_for`). Inputs are described, never kept:
fresh random tensors of the same sizes, strides, dtypes and devices stand for them."""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import torch

from ..errors import UnsupportedError
from ..ir import DataType

# dtypes torch.testing.make_tensor cannot draw: drawn in float32, then converted
_CONVERTED = {t for t in (getattr(torch, n, None) for n in (
    "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16", "uint32",
    "uint64")) if t is not None}


def python_literal(v: Any) -> str:
    """Python source that rebuilds a value (a number exactly: a non-finite float as float('inf'), a
    complex one part at a time (`(-0+0j)` read back as 0j, `(inf+1j)` not at all), a numpy
    scalar as the Python number it holds: `np.float32(2.0)` names a module the code
    lacks). Anything else, an enum included, as its repr."""
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        v = v.item()
    if type(v) in (int, float, complex, bool):
        if isinstance(v, complex):
            return f"complex({python_literal(v.real)}, {python_literal(v.imag)})"
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float({str(v)!r})"
    return repr(v)


def _tensor(t: torch.Tensor, index_bound: int) -> str:
    size, stride, device = tuple(t.shape), tuple(t.stride()), str(t.device)
    dense = t.is_contiguous()
    # the elements a strided view spans: a flat tensor of that many, viewed with t's strides
    span = 0 if t.numel() == 0 else 1 + sum((n - 1) * s for n, s in zip(size, stride))
    drawn = size if dense else (span,)
    if _opaque(t.dtype):  # (packed fp4, which no conversion makes: random bytes, viewed as the type)
        text = f"torch.randint(0, 256, {drawn}, dtype=torch.uint8, device={device!r}).view({t.dtype})"
    elif t.dtype in _CONVERTED:
        text = f"torch.testing.make_tensor({drawn}, dtype=torch.float32, device={device!r}).to({t.dtype})"
    elif t.dtype.is_floating_point or t.dtype.is_complex or t.dtype is torch.bool:
        text = f"torch.testing.make_tensor({drawn}, dtype={t.dtype}, device={device!r})"
    else:  # (an index, likely: drawn where every input's axes have a place)
        text = f"torch.testing.make_tensor({drawn}, dtype={t.dtype}, device={device!r}, low=0, high={index_bound})"
    return text if dense else f"{text}.as_strided({size}, {stride})"


def _opaque(dtype: torch.dtype) -> bool:
    try:
        return DataType.from_torch(dtype).is_opaque
    except UnsupportedError:  # (a type no definition takes: drawn as any other)
        return False


def describe_inputs(inputs: Sequence[Any]) -> list[str]:
    """One Python expression per input: a tensor's layout, a scalar's value, a vector's list.
    Integer tensors are drawn in [0, the inputs' shortest axis): index tensors then index."""
    sizes = [n for v in inputs if isinstance(v, torch.Tensor) for n in v.shape if n > 0]
    index_bound = max(1, min(sizes, default=1))
    lines = []
    for v in inputs:
        if isinstance(v, torch.Tensor):
            lines.append(_tensor(v, index_bound))
        elif isinstance(v, (list, tuple)):
            lines.append("[" + ", ".join(python_literal(x) for x in v) + "]")
        else:
            lines.append(python_literal(v))
    return lines


def repro_script(definition: str, inputs: Optional[list[str]]) -> str:
    """`definition`: the text of `repr(fd)`; `inputs`: describe_inputs' lines, or None for a
    script that only defines the fusion."""
    script = f"\nimport torch\nfrom fuser import FusionDefinition, DataType\n{definition}" \
             "with FusionDefinition() as fd:\n    nvfuser_fusion(fd)\n"
    if inputs is not None:
        script += "\ninputs = [\n" + "".join(f"    {line},\n" for line in inputs) + "]\nfd.execute(inputs)\n"
    return script
