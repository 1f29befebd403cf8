"""The one pass of an arg reduction in a looped or split kernel: the extreme of x along the
reduced dim and the first position reaching it (argmax, argmin, max / min along a dim:
schedulers/plan.py `arg_pairs`), read once instead of twice.

Each lane keeps a running (value, position) pair, starting at (the extreme's identity, the
fill) and taking an element that beats its value, or ties it at an earlier position
(`_argmax_pair` / `_argmin_pair`: NaN beats every number, and NaNs tie). After the pass the
lanes' pairs reduce by the same rule, so the result is the row's extreme and its first
position whatever order the lanes combine in; an element equal to the identity (-inf in a
max) ties a lane that has taken none, and its position wins over the fill. The value kept is
the winning element itself, so a row whose extreme is a tie of -0.0 and 0.0 gives the first
one's sign, as eager's pair does.

A split reduction (few long rows, codegen/split_kernel.py) runs the pass over its chunk and
stores the chunk's pair as partials (the extreme's and the positions' workspaces); the combine
step runs the pass over the chunks' pairs."""
from __future__ import annotations

from typing import Optional

from ..schedulers.plan import ArgPair
from .types import compute_type


def arg_pair_of(writer, e, scope=None) -> Optional[ArgPair]:
    """The arg pair `e` belongs to (its extreme or its positions), not yet emitted in `scope`
    (the program's by default); or None."""
    scope = scope or writer.program_scope
    for pair in writer.plan.arg_pairs:
        if (pair.extreme is e or pair.index is e) and not scope.lookup(writer.key(pair.index.out)):
            return pair
    return None


def emit_inline_arg(writer, scope, pair: ArgPair) -> None:
    """A pair's extreme and first position of a tile holding the whole reduced extent: one
    reduction of (value, position) pairs, binding both."""
    m, idx = pair.extreme, pair.index
    mask, ident = writer.reduce_mask(m), writer.identity(m.kind, m.out.dtype)
    x = writer.operand(scope, m.inp, m.out.dtype)
    p = writer.operand(scope, pair.positions, idx.out.dtype)
    fill = writer.operand(scope, pair.fill, idx.out.dtype)
    top, first = writer.tname(m.out), writer.tname(idx.out)
    scope.lines.append(f"{top}, {first} = tl.reduce((tl.where({mask}, {x}, {ident}), tl.where({mask}, {p}, {fill})), "
                       f"{writer.red}, {_combine(pair)}, keep_dims=True)")
    scope.names[writer.key(m.out)], scope.names[writer.key(idx.out)] = top, first
    writer.round_to_storage(scope, m)


def _combine(pair: ArgPair) -> str:
    return "_argmax_pair" if pair.largest else "_argmin_pair"


def emit_online_arg(writer, pair: ArgPair) -> None:
    """Emit the pass computing a pair's extreme and first position together, and bind both (a
    split's partial step stores them as its chunk's partials instead)."""
    m, idx = pair.extreme, pair.index
    ps, rd, split = writer.program_scope, writer.red, writer.split
    combine = _combine(pair)
    shape, mask = writer.reduce_shape(m), writer.reduce_mask(m)
    value, position = f"acc{m.out.name}", f"acc{idx.out.name}"
    ident = writer.identity(m.kind, m.out.dtype)
    fill = writer.operand(ps, pair.fill, idx.out.dtype)
    ps.lines.append(f"{value} = " + writer.block(shape, ident, compute_type(m.out.dtype)))
    if pair.fill.is_constant:
        ps.lines.append(f"{position} = " + writer.block(shape, fill, compute_type(idx.out.dtype)))
    else:  # (a row length known at launch: a [1, 1] block)
        ps.lines.append(f"{position} = " + writer.block(shape, "0", compute_type(idx.out.dtype)) + f" + {fill}")
    body = writer.loop_scope()
    # chosen before the pair is bound: an output fed by it is not ready
    outputs = writer.outputs_ready_in_pass()
    ws = {w: k for k, (w, _) in enumerate(writer.workspaces)}
    if split == "combine":  # the chunks' pairs
        x = writer.partial_load(m, ws[m], mask, ident)
        p = writer.partial_load(idx, ws[idx], mask, fill)
    else:
        x = f"tl.where({mask}, {writer.operand(body, m.inp, m.out.dtype)}, {ident})"
        p = f"tl.where({mask}, {writer.operand(body, pair.positions, idx.out.dtype)}, {fill})"
    body.lines.append(f"{value}, {position} = {combine}({value}, {position}, {x}, {p})")
    # the kernel's other reductions ready now take this pass too (a row's sum beside its argmax)
    others = [] if split is not None else [f for f in writer.plan.exprs
                                            if f is not m and f is not idx and writer._ready_reduction(f)]
    finish_others = writer.accumulate_together(others, body)
    for o in outputs:  # (a split's partial step has no later pass to store them)
        writer.emit_store(body, o)
    writer.close_loop(body, accumulating=True)
    top, first = writer.tname(m.out), writer.tname(idx.out)
    ps.lines.append(f"{top}, {first} = tl.reduce(({value}, {position}), {rd}, {combine}, keep_dims=True)")
    ps.names[writer.key(m.out)], ps.names[writer.key(idx.out)] = top, first
    if split == "partial":  # (and no later pass of this step computes them again)
        writer.store_partial(ws[m], top)
        writer.store_partial(ws[idx], first)
        return
    writer.round_to_storage(ps, m)
    finish_others()
