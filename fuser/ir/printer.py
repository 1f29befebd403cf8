"""The IR in nvFuser's notation. Printing lives apart from the nodes; names come from the
nodes' numbers, so the text of two structurally equal fusions is the same."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .domain import IterDomain, Merge, Split
from .nodes import (BinaryOp, BinaryOpType, CastOp, Expr, LoadStoreOp, ReductionOp, RNGOp, Scalar,
                    TensorView, TernaryOp, UnaryOp, Val)
from .symbolic import format_extent

if TYPE_CHECKING:
    from .fusion import Fusion

_INFIX = {
    BinaryOpType.add: "+", BinaryOpType.sub: "-", BinaryOpType.mul: "*", BinaryOpType.div: "/",
    BinaryOpType.eq: "==", BinaryOpType.ne: "!=", BinaryOpType.lt: "<", BinaryOpType.le: "<=",
    BinaryOpType.gt: ">", BinaryOpType.ge: ">=", BinaryOpType.logical_and: "&&",
    BinaryOpType.logical_or: "||", BinaryOpType.bitwise_and: "&", BinaryOpType.bitwise_or: "|",
    BinaryOpType.bitwise_xor: "^", BinaryOpType.remainder: "%",
}


def format_id(d: IterDomain) -> str:
    text = f"{d.iter_type.value}{d.parallel_type.value}{d.name}{{{format_extent(d.extent)}"
    if d.expanded_extent is not None:
        text += f" ex {format_extent(d.expanded_extent)}"
    return text + "}" + ("rf" if d.is_rfactor else "")


def format_tv(tv: TensorView) -> str:
    ids = ", ".join(format_id(d) for d in tv.domain.loop)
    text = f"T{tv.name}_{tv.memory_type.value}_{tv.dtype.ir_name}[{ids}]"
    if tv.device_mesh is not None:
        text += f" ({tv.device_mesh!r})"
    return text


def format_scalar(s: Scalar) -> str:
    if s.is_constant:
        return repr(s.value)
    return format_extent(s.expr)


def format_val(v: Val) -> str:
    return format_tv(v) if isinstance(v, TensorView) else format_scalar(v)


def format_expr(e: Expr) -> str:
    outs = ",\n   ".join(format_val(o) for o in e.outputs)
    ins = [format_val(v) for v in e.inputs]
    if isinstance(e, BinaryOp) and e.kind in _INFIX:
        return f"{outs}\n   = {ins[0]}\n   {_INFIX[e.kind]} {ins[1]};"
    if isinstance(e, UnaryOp):
        return f"{outs}\n   = {e.kind.value}({ins[0]});"
    if isinstance(e, BinaryOp):  # (no infix symbol: maximum, pow, gcd, ... by name)
        return f"{outs}\n   = {e.kind.value}({ins[0]},\n     {ins[1]});"
    if isinstance(e, CastOp):
        return f"{outs}\n   = __to_{e.dtype.ir_name}({ins[0]});"
    if isinstance(e, TernaryOp):
        return f"{outs}\n   = {e.kind.value}(" + ",\n     ".join(ins) + ");"
    if isinstance(e, ReductionOp):
        return (f"{outs}\n   = reduction( {ins[0]}, op = {e.kind.value}, axes = {list(e.axes)} );")
    attrs = _attributes(e)
    if isinstance(e, RNGOp):
        name = e.op_name  # rng_uniform, rng_normal
    elif isinstance(e, LoadStoreOp):
        name = e.kind.value
    else:
        name = _snake(type(e).__name__)
    args = ",\n     ".join(ins + attrs)
    return f"{outs}\n   = {name}( {args} );"


def _attributes(e: Expr) -> list[str]:
    skip = {"inputs", "outputs", "kind"}
    return [f"{k} = {v}" for k, v in vars(e).items() if k not in skip]


def _snake(name: str) -> str:
    name = name.removesuffix("Op")
    out = "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")
    return out


def format_fusion(f: "Fusion", label: str = "kernel") -> str:
    lines = ["Inputs:"]
    lines += [f"  {format_val(v)}" for v in f.inputs()]
    lines.append("Outputs:")
    lines += [f"  {format_val(v)}" for v in f.outputs()]
    lines.append("")
    lines.append(f"%{label} {{")
    lines += [format_expr(e) for e in f.exprs]
    lines.append(f"}} // %{label}")
    return "\n".join(lines) + "\n"


def format_transform(t) -> str:
    if isinstance(t, Split):
        kind = "Split" if t.inner_split else "Outer split"
        return (f"{kind}: {format_id(t.input)} by factor {format_extent(t.factor)} -> "
                f"{format_id(t.outer)}, {format_id(t.inner)}")
    assert isinstance(t, Merge)
    return f"Merge: {format_id(t.outer)} and {format_id(t.inner)} -> {format_id(t.output)}"


def _contig(c) -> str:
    return "n" if c is None else ("t" if c else "f")


def format_tv_transforms(tv: TensorView) -> str:
    dom = tv.domain
    ids = lambda ds: "(" + ", ".join(format_id(d) for d in ds) + ")"  # noqa: E731
    lines = [format_tv(tv)]
    if dom.root is not None:
        lines.append(f" root domain : {ids(dom.root)}")
        lines += [f"  {format_transform(t)}" for t in dom.root_transforms]
    lines.append(f" logical domain : {ids(dom.logical)}")
    if dom.allocation is not None:
        lines.append(f" allocation domain : {ids(dom.allocation)}")
    lines.append(" contiguity: " + " ".join(_contig(c) for c in dom.contiguity))
    lines += [f"  {format_transform(t)}" for t in dom.transforms]
    lines.append(f" loop domain : {ids(dom.loop)}")
    return "\n".join(lines)


def format_transforms(f: "Fusion") -> str:
    tvs = [v for v in f.inputs() if isinstance(v, TensorView)]
    for e in f.exprs:
        tvs += [o for o in e.outputs if isinstance(o, TensorView)]
    seen, out = set(), []
    for tv in tvs:
        if id(tv) not in seen:
            seen.add(id(tv))
            out.append(format_tv_transforms(tv))
    return "TransformPrinter : \n" + "\n".join(out) + "\n"
