"""`fd.validate`: outputs compared with reference outputs, by default fuser's ATen evaluation of
the same definition, with a tolerance per dtype that widens with the number of elements a
reduction feeding the output combines (rounding errors of a sum grow about with its root)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from ..errors import FusionInputError, ValidationError
from ..evaluate.binding import bind_inputs
from ..ir import DataType, Fusion, ReductionOp, TensorView, VarMeanOp

# (rtol, atol) of one rounding-free op per dtype; a reduction of n elements scales atol by sqrt(n)
_TOLERANCE = {
    torch.float64: (1e-7, 1e-7), torch.float32: (1.3e-6, 1e-5), torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5), torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7),
    # fp8: one unit in the last place (a float32 value a rounding apart can round to the next
    # fp8 value), its smallest subnormal near 0; e8m0 holds powers of two alone
    torch.float8_e4m3fn: (2.0 ** -3, 2.0 ** -9), torch.float8_e5m2: (2.0 ** -2, 2.0 ** -16),
    torch.float8_e8m0fnu: (1.0, 2.0 ** -127),
}


def check_outputs(fusion: Fusion, outs: Sequence[Any], references: Sequence[Any], inputs: Sequence[Any]) -> None:
    if len(outs) != len(references):
        raise ValidationError(f"validate: {len(outs)} outputs but {len(references)} reference outputs")
    widths = _reduction_widths(fusion, inputs)
    for k, (out, ref) in enumerate(zip(outs, references)):
        if not isinstance(ref, torch.Tensor):
            raise ValidationError(f"validate: reference output {k} is a {type(ref).__name__}, "
                                  f"not a tensor")
        if ref.is_meta:
            raise FusionInputError(f"validate: reference output {k} is a meta tensor {tuple(ref.shape)}, "
                                   f"which holds no values to compare; give a tensor on the CPU or a GPU")
        if tuple(out.shape) != tuple(ref.shape):
            raise ValidationError(f"validate: output {k} has shape {tuple(out.shape)}, "
                                  f"its reference {tuple(ref.shape)}")
        if out.dtype != ref.dtype:  # (a cast reference would hide a wrong type, or its rounding)
            raise ValidationError(f"validate: output {k} is {out.dtype}, its reference {ref.dtype}; "
                                  f"cast the reference if the output's type is meant")
        ref = ref.to(out.device)
        if DataType.from_torch(out.dtype).is_opaque:  # (packed fp4, which torch cannot convert: equal bytes)
            out, ref = out.view(torch.uint8), ref.view(torch.uint8)
        if not (out.is_floating_point() or out.is_complex()):
            if not torch.equal(out, ref):
                wrong = int((out != ref).sum())
                raise ValidationError(f"validate: output {k} ({out.dtype}) differs from its reference "
                                      f"in {wrong} of {out.numel()} elements")
            continue
        rtol, atol = _TOLERANCE.get(out.dtype, (1e-2, 1e-2))
        atol *= math.sqrt(widths.get(k, 1))
        if not torch.allclose(*_comparable(out, ref), rtol=rtol, atol=atol, equal_nan=True):
            err = (out.to(torch.float64) - ref.to(torch.float64)).abs().nan_to_num(nan=math.inf).max().item()
            raise ValidationError(f"validate: output {k} ({out.dtype}) differs from its reference by up to "
                                  f"{err:.3g} (rtol {rtol:.2g}, atol {atol:.2g})")


def _comparable(out: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two as allclose can take them: fp8 (one byte a float) widened to float32, exactly,
    as torch has no arithmetic on it ("mul_cpu_reduced_float" not implemented)."""
    if out.dtype.itemsize == 1:
        return out.float(), ref.float()
    return out, ref



def _reduction_widths(fusion: Fusion, inputs: Sequence[Any]) -> dict[int, int]:
    """Per output position, the most elements one reduction upstream of it combines."""
    if not any(isinstance(e, (ReductionOp, VarMeanOp)) for e in fusion.exprs):
        return {}
    table = bind_inputs(fusion, inputs)
    width: dict[int, int] = {}  # id(value) -> widest reduction upstream
    for e in fusion.exprs:
        w = max((width.get(id(v), 1) for v in e.inputs), default=1)
        if isinstance(e, (ReductionOp, VarMeanOp)) and isinstance(e.inp, TensorView):
            ids = e.inp.domain.no_reductions()
            w = max(w, math.prod(table.extent(ids[a].extent) for a in e.axes))
        for o in e.outputs:
            width[id(o)] = w
    return {k: width.get(id(o), 1) for k, o in enumerate(fusion.outputs())}
