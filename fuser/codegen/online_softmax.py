"""The online softmax pass of a looped reduction: the row maximum m = max(x) and the sum
s = sum(exp(x - m)) in one pass over the row instead of two, so a looped softmax (rows beyond
the registers) reads its input twice, not three times.

Each lane keeps a running maximum and a sum relative to it; when a chunk raises the maximum,
the sum is rescaled by exp(old - new). After the pass the lanes' maxima reduce to m and their
sums, rescaled to m, add up to s. Where the unfused sum meets inf - inf (a row whose maximum is
+inf, -inf or NaN) it is NaN, and so is this one; an empty row sums to 0, as before.

A split reduction (few long rows, codegen/split_kernel.py) runs the same pass over its chunk of
the row and stores the chunk's pair (its maximum, its sum relative to it) as partials; the
combine step runs the pass over the chunks' pairs, each adding its sum rescaled to the running
maximum, and finishes as above.

Taken where a kernel computes max(x) over the looped dim and sum(exp(x - max)) of the same x
(softmax, log-softmax, cross entropy; logsumexp shifts by the max made 0 where infinite) in
fp32: schedulers/plan.py `softmax_pairs`."""
from __future__ import annotations

from typing import Optional

from ..ir import DataType, Expr, ReductionOp, ReductionOpType
from ..schedulers.inner_outer import reduced_axes_of
from ..schedulers.plan import SoftmaxPair
from .math import EXP_FLUSH


def online_pair(writer, e: Expr) -> Optional[SoftmaxPair]:
    """The softmax pair whose sum to compute in `e`'s pass, where `e` is its max; or None."""
    for pair in writer.plan.online_pairs:
        if pair.max is e and not writer.program_scope.lookup(id(pair.sum.out)):
            return pair
    return None


def emit_online_softmax(writer, pair: SoftmaxPair) -> None:
    """Emit the pass computing a pair's max and sum together, and bind both (a split's partial
    step stores them as its chunk's partials instead)."""
    m, s = pair.max, pair.sum
    ps, rd, split = writer.program_scope, writer.red, writer.split
    # the flushing exp is exact here whatever the outputs: each lane's sum holds exp(0) = 1 for
    # its maximum, and the row's sum that of the row's, so a flushed term (below 2^-126) is far
    # below the sum's last bit
    exp = EXP_FLUSH[writer.target]
    shape, mask = writer.reduce_shape(m), writer.reduce_mask(m)
    big, small = f"acc{m.out.name}", f"acc{s.out.name}"
    ps.lines += [f"{big} = " + writer.block(shape, "float('-inf')", "tl.float32"),
                 f"{small} = " + writer.block(shape, "0.0", "tl.float32")]
    body = writer.loop_scope()
    # chosen before the pair is bound: an output fed by it is not ready
    outputs = writer.outputs_ready_in_pass()
    ws = {w: k for k, (w, _) in enumerate(writer.workspaces)}
    if split == "combine":  # the chunks' pairs: each chunk's maximum, and its sum relative to it
        x, weight = f"{big}_part", f"{small}_part"
        body.lines += [f"{x} = " + writer.partial_load(m, ws[m], mask, "float('-inf')"),
                       f"{weight} = " + writer.partial_load(s, ws[s], mask, "0.0")]
    else:
        x, weight = writer.operand(body, m.inp, m.out.dtype), "1.0"
    # One exp a term: with d = x - max, a lane whose maximum rises to x rescales its sum by
    # exp(-d) and adds the weight, another adds weight * exp(d); both are exp(-|d|), the same
    # values as the two exps of the textbook update (max_old - max_new = -d exactly). A term of
    # -inf (or masked) leaves the lane as it is (-inf - -inf would be NaN).
    seen = f"{big}_x"
    body.lines += [
        f"{seen} = tl.where({mask}, {x}, float('-inf'))",
        f"{big}_d = {seen} - {big}",
        f"{big}_e = {exp}(-tl.abs({big}_d))",
        f"{small} = tl.where({seen} == float('-inf'), {small}, tl.where({big}_d > 0, {small} * {big}_e + {weight}, "
        f"{small} + {weight} * {big}_e))",
    ]
    # sums of x - max(x) (a log-softmax's row sum: label smoothing) take the pass too, each lane
    # relative to its running max (shifted_sums)
    shifted = [] if split is not None else shifted_sums(writer, pair)
    count, top_now = f"{big}_n", f"{big}_new"  # (the lane's elements so far; its max with this chunk's)
    if shifted:
        ps.lines.append(f"{count} = " + writer.block(shape, "0.0", "tl.float32"))
        body.lines.append(f"{top_now} = _max_nan({big}, {seen})")
        for f in shifted:
            acc = f"acc{f.out.name}"
            ps.lines.append(f"{acc} = " + writer.block(shape, "0.0", "tl.float32"))
            body.lines.append(
                f"{acc} = {acc} + tl.where({count} > 0, {count} * tl.where({top_now} == {big}, 0.0, {big} - {top_now}), 0.0)"
                f" + tl.where({mask}, {x} - tl.where({top_now} == float('-inf'), 0.0, {top_now}), 0.0)")
        body.lines += [f"{count} = {count} + tl.where({mask}, 1.0, 0.0)", f"{big} = {top_now}"]
    else:
        body.lines.append(f"{big} = _max_nan({big}, {seen})")
    # the kernel's other reductions ready now take this pass too, rather than a pass of their own
    # over the row (a cross entropy's target logit, picked from x beside max(x) and the sum)
    others = [] if split is not None else [f for f in writer.plan.exprs
                                            if f is not m and writer._ready_reduction(f)]
    finish_others = writer.accumulate_together(others, body)
    for o in outputs:  # (a split's partial step has no later pass to store them)
        writer.emit_store(body, o)
    writer.close_loop(body, accumulating=True)
    top = writer.tname(m.out)
    ps.lines.append(f"{top} = tl.reduce({big}, {rd}, _max_nan, keep_dims=True)")
    ps.lines.append(f"{small}_row = tl.sum(tl.where({big} == float('-inf'), 0.0, {small} * {exp}({big} - {top})), "
                    f"axis={rd}, keep_dims=True)")
    if split == "partial":
        writer.store_partial(ws[m], top)
        writer.store_partial(ws[s], f"{small}_row")
        # (done: no later pass of this step computes them again)
        ps.names[id(m.out)], ps.names[id(s.out)] = top, writer.tname(s.out)
        return
    ps.names[writer.key(m.out)] = top
    # where the row's max is not finite, its sums are NaN, as eager's (0 for an empty row)
    finite = f"({top} == {top}) & (tl.abs({top}) != float('inf'))"
    empty = f"tl.where({writer.reduced_count()} > 0, float('nan'), 0.0)"
    if pair.zero_if_infinite:  # exp(x - 0) where the max is infinite: a row of -inf sums to 0
        writer.bind(ps, s.out, f"tl.where({top} == float('inf'), float('inf'), {small}_row)")
    else:
        writer.bind(ps, s.out, f"tl.where({finite}, {small}_row, {empty})")
    for f in shifted:  # each lane's sum moved to the row's max, as the pass moved it to the lane's
        acc = f"acc{f.out.name}"
        moved = f"tl.where(({count} > 0) & ({big} != {top}), {count} * ({big} - {top}), 0.0)"
        writer.bind(ps, f.out, f"tl.where({finite}, tl.sum({acc} + {moved}, axis={rd}, keep_dims=True), {empty})")
    finish_others()  # (after the pair: a factored sum's factors may read its results)


def shifted_sums(writer, pair: SoftmaxPair) -> list[ReductionOp]:
    """The kernel's sums of `x - max(x)` along the pair's dim, of the value whose exp the pair
    sums (a log-softmax's row sum, `frontend/rules/reduction.py`: label smoothing). Each lane
    keeps its sum of `x - m` for m its running max, adding `count (m_old - m_new)` as m rises,
    and the lanes' sums move to the row's max after the pass: every term is at most 0, so
    nothing cancels or overflows that eager's `sum(x - max)` would not (a sum of `x - r` for a
    fixed r far below the max did both). A -inf term is -inf (not -inf - -inf); the row's sum is
    NaN where its max is not finite, as eager's."""
    if pair.zero_if_infinite or writer.one_pass:
        return []
    exp = writer.producer.get(id(pair.sum.inp))
    shifted = exp.inputs[0]
    axes = writer.axes
    return [f for f in writer.plan.exprs if isinstance(f, ReductionOp) and f.kind is ReductionOpType.sum
            and f.inp is shifted and f is not pair.sum and f.out.dtype in (DataType.Float, DataType.Double)
            and reduced_axes_of(f, axes) == reduced_axes_of(pair.sum, axes)
            and not writer.program_scope.lookup(id(f.out))]
