"""A long chain of pointwise ops segments in time proportional to its length: each op joins the
chain's group without a new plan of the whole group (`PointwiseAxes`; also after a row or a
column reduction, a normalization's tail, and `InnerOuterAxes` after a norm's backward, on its
dx and on its dw), where planning the growing group once per op made segmentation quadratic (a 400-op chain through torch.compile
spent 32 s of its 40 s first call planning). Counted in exprs planned, not seconds, so that the
bound holds on any machine; and the segments are the ones planning every merge makes."""
import random

import pytest

from fuser import DataType, FusionDefinition
from fuser.codegen.kernel import can_emit
from fuser.schedulers.plan import plan_kernel
from fuser.segment import SegmentKind, segment_fusion, segmenter


def _chain(kind: str, n: int) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        row = fd.define_tensor([1, -1], contiguity=True, dtype=DataType.Float)
        col = fd.define_tensor([-1, 1], contiguity=True, dtype=DataType.Float)
        y = x
        if kind in ("norm_backward", "norm_columns"):  # a LayerNorm backward's dx, dw and db: an inner-outer group
            y = _layer_norm_backward(fd, x, w)
        if kind == "norm_columns":  # the chain on dw (an optimizer's update of the weight)
            fd.add_output(y)
            y = fd.fusion.outputs()[-3]
        if kind in ("rows", "columns"):  # a reduction first: the chain is a normalization's tail
            axis = 1 if kind == "rows" else 0
            y = fd.ops.sub(x, fd.ops.sum(x, [axis], True))
        for i in range(n):
            if kind == "unary":  # the torch.compile repro: (x * 1.001 + 0.01).tanh(), x.sin() + x
                y = fd.ops.tanh(fd.ops.add(fd.ops.mul(y, 1.001), 0.01)) if i % 3 else fd.ops.add(fd.ops.sin(y), y)
            elif kind in ("rows", "columns", "norm_backward"):
                y = fd.ops.add(fd.ops.mul(fd.ops.tanh(y), 1.001), x)
            elif kind == "norm_columns":
                y = fd.ops.add(fd.ops.mul(fd.ops.tanh(y), 1.001), w)
            elif kind == "bias":  # a broadcast of w at every step, and x far back in the chain
                y = fd.ops.sub(fd.ops.add(fd.ops.mul(y, 0.999), w), fd.ops.mul(x, 0.001))
            else:  # the same [1, n] and [m, 1] tensors at every step: broadcast axes of the group
                y = fd.ops.add(fd.ops.mul(fd.ops.mul(y, row), col), 0.01)
        fd.add_output(y)
    return fd


def _layer_norm_backward(fd, x, w, dy=None):
    """dx of a LayerNorm over x's rows (dy the gradient: x itself unless given), with dw and db
    as outputs."""
    dy = x if dy is None else dy
    n = 64.0
    xc = fd.ops.sub(x, fd.ops.div(fd.ops.sum(x, [1], True), n))
    rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.div(fd.ops.sum(fd.ops.mul(xc, xc), [1], True), n), 1e-5))
    xhat = fd.ops.mul(xc, rstd)
    g = fd.ops.mul(dy, fd.ops.broadcast(w, [True, False]))
    a, b = fd.ops.sum(g, [1], True), fd.ops.sum(fd.ops.mul(g, xhat), [1], True)
    fd.add_output(fd.ops.sum(fd.ops.mul(dy, xhat), [0]))
    fd.add_output(fd.ops.sum(dy, [0]))
    return fd.ops.mul(fd.ops.sub(fd.ops.sub(g, fd.ops.div(a, n)), fd.ops.mul(xhat, fd.ops.div(b, n))), rstd)


def _segments(fusion, grow: bool = True, monkeypatch=None):
    """The segments the runtime makes of `fusion` on the CPU, and the number of exprs planned
    in all. `grow=False`: every merge planned (no group grows by its known axes)."""
    planned = [0]
    lowerable = lambda e: can_emit(e, "interpreter")  # noqa: E731

    def try_kernel(exprs, inputs, outputs):
        planned[0] += len(exprs)
        return plan_kernel(exprs, inputs, outputs, lowerable)
    if not grow:
        monkeypatch.setattr(segmenter, "growable_axes", lambda plan: None)
    segments = segment_fusion(fusion, try_kernel, lowerable)
    if not grow:
        monkeypatch.undo()
    return segments, planned[0]


def _described(segments) -> list:
    return [(s.kind, [id(e) for e in s.exprs], [id(v) for v in s.outputs], s.why) for s in segments]


def _cuts(segments) -> list:
    """The segments without the reasons they give: a merge refused for good is not planned
    again, so its group's reasons may lack those a later plan of it would add."""
    return [d[:3] for d in _described(segments)]


KINDS = ["unary", "bias", "broadcast", "rows", "columns", "norm_backward", "norm_columns"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_long_chain_plans_each_op_a_bounded_number_of_times(kind):
    fusion = _chain(kind, 100).fusion
    segments, planned = _segments(fusion)
    assert [s.kind for s in segments] == [SegmentKind.kernel]
    exprs = len(segments[0].exprs)
    # each op planned alone as it joins, the whole chain once at the end (and the first
    # merges): planning the growing group at each op was about exprs**2 / 2
    # (a norm's backward plans its own 27 exprs as each joins: 3 * 327 exprs + 57)
    assert planned <= (4 if kind.startswith("norm") else 3) * exprs, (planned, exprs)


@pytest.mark.parametrize("kind", KINDS)
def test_a_chain_is_cut_as_planning_every_merge_cuts_it(kind, monkeypatch):
    fusion = _chain(kind, 20).fusion
    assert _described(_segments(fusion)[0]) == _described(_segments(fusion, False, monkeypatch)[0])


def _refused_tail(n: int) -> FusionDefinition:
    """A tail reading a LayerNorm backward's dx and a broadcast of its dw at each op: it may not
    join the inner-outer group (a column result along rows), whose union with it was planned
    again at each op the tail grew by."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        dx = _layer_norm_backward(fd, x, w)
        along_rows = fd.ops.broadcast(fd.fusion.outputs()[-2], [True, False])
        y = dx
        for _ in range(n):
            y = fd.ops.add(fd.ops.mul(fd.ops.tanh(y), along_rows), dx)
        fd.add_output(y)
    return fd


def test_a_tail_refused_for_good_is_not_planned_with_its_group_again(monkeypatch):
    segments, planned = _segments(_refused_tail(100).fusion)
    assert [s.kind for s in segments] == [SegmentKind.kernel, SegmentKind.evaluator, SegmentKind.kernel]
    assert "meets" in segments[-1].why or "meets" in segments[0].why
    assert planned <= 4 * sum(len(s.exprs) for s in segments), planned
    fusion = _refused_tail(20).fusion
    grown = _segments(fusion)[0]
    assert _described(grown) == _described(_segments(fusion, False, monkeypatch)[0])
    _no_lasting_refusals(monkeypatch)
    assert _cuts(grown) == _cuts(_segments(fusion)[0])


def _no_lasting_refusals(monkeypatch):
    monkeypatch.setattr(segmenter.Segmenter, "lasting_refusal", lambda self, a, b: None)


def test_a_producer_laid_out_the_other_way_does_not_grow_a_norm_backward(monkeypatch):
    """A permute of a [N, M] input, the fusion's first expr, read by a LayerNorm backward's dx:
    joined without a plan, its input became the union's first tensor, the loop axes swapped,
    the group planned no more and ran op by op through ATen."""
    with FusionDefinition() as fd:
        y = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        p = fd.ops.permute(y, [1, 0])
        fd.add_output(fd.ops.add(_layer_norm_backward(fd, x, w), p))
    grown, _ = _segments(fd.fusion)
    assert [(s.kind, len(s.exprs)) for s in grown] == [(SegmentKind.evaluator, 1), (SegmentKind.kernel, 28)]
    assert _described(grown) == _described(_segments(fd.fusion, False, monkeypatch)[0])


def test_a_refusal_in_one_layout_is_not_kept_for_a_union_laid_out_the_other_way(monkeypatch):
    """A row sum and a column sum of a permuted [N, M] input, refused as one group in its
    layout (the column sum's result would meet the row's values), are one inner-outer group
    once an op on an [M, N] input (earlier in the fusion) joins and lays the union out the
    other way: that refusal does not last (`LASTING`), and the cut is planning's."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        x2 = fd.ops.exp(x)
        p = fd.ops.permute(y, [1, 0])
        rows = fd.ops.broadcast(fd.ops.sum(p, [1]), [False, True])
        z = fd.ops.mul(p, rows)
        c = fd.ops.sum(z, [0])
        for _ in range(12):
            c = fd.ops.tanh(c)
        fd.add_output(z)
        fd.add_output(fd.ops.mul(x2, rows))
        fd.add_output(fd.ops.add(c, fd.ops.sum(fd.ops.mul(x2, p), [0])))
    grown, _ = _segments(fd.fusion)
    assert [s.kind for s in grown] == [SegmentKind.kernel]
    _no_lasting_refusals(monkeypatch)
    assert _cuts(grown) == _cuts(_segments(fd.fusion)[0])


def _random_fusion(seed: int) -> FusionDefinition:
    """Pointwise ops over square shapes, with broadcasts, permutes, expands, reductions and
    values read again: where a join may merge two loop axes of the group (the broadcast axis
    of a [4, 1] value meeting a 4 that the group's permute moved) and must be planned."""
    rng = random.Random(seed)
    with FusionDefinition() as fd:
        pool = [fd.define_tensor([rng.choice([1, 4, 4, -1]) for _ in range(rng.choice([2, 3]))],
                                 contiguity=True, dtype=DataType.Float) for _ in range(rng.randint(1, 3))]
        for _ in range(40):
            a, b, r = rng.choice(pool[-5:]), rng.choice(pool), rng.random()
            try:
                if r < 0.3:
                    v = getattr(fd.ops, rng.choice(["tanh", "sin", "neg"]))(a)
                elif r < 0.6:
                    v = getattr(fd.ops, rng.choice(["add", "mul", "maximum"]))(a, b)
                elif r < 0.7:
                    v = fd.ops.permute(a, rng.sample(range(a.ndim), a.ndim))
                elif r < 0.8:
                    v = fd.ops.broadcast_in_dim(a, shape=[4] * (a.ndim + 1), broadcast_dims=list(range(1, a.ndim + 1)))
                elif r < 0.85:
                    v = fd.ops.sum(a, [rng.randrange(a.ndim)], keepdim=rng.random() < 0.5)
                elif r < 0.9:
                    v = fd.ops.expand(a, [4] * a.ndim)
                else:
                    v = fd.ops.where(fd.ops.gt(a, 0.0), a, b)
            except Exception:  # (shapes an op refuses)
                continue
            pool.append(v)
        fd.add_output(pool[-1])
    return fd


def _random_norm_tail(seed: int) -> FusionDefinition:
    """A LayerNorm backward (an inner-outer group), then random ops reading its dx, dw, db, the
    row statistics' inputs and broadcasts of them, and ops on dw, db and w: where a join onto
    the group's row side or its combine side must be planned (one reading a column result
    along rows, one whose output does not vary along rows, one reading a value only the other
    side computes, a reduction of a column result)."""
    rng = random.Random(seed)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        dy = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        # (an input laid out the other way, permuted by the fusion's first op)
        transposed = fd.ops.permute(fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float), [1, 0])
        dx = _layer_norm_backward(fd, x, w, dy)
        dw, db = fd.fusion.outputs()[-2:]
        pool, columns = [dx, x, dy, transposed], [dw, db, w]
        for _ in range(30):
            r = rng.random()
            if rng.random() < 0.4:  # on the column side
                a, b = rng.choice(columns[-3:]), rng.choice(columns)
                if r < 0.3:
                    v = getattr(fd.ops, rng.choice(["tanh", "neg", "exp"]))(a)
                elif r < 0.7:
                    v = getattr(fd.ops, rng.choice(["add", "mul", "sub"]))(a, b)
                elif r < 0.8:
                    v = fd.ops.mul(a, fd.ops.sum(rng.choice(pool), [0]))
                elif r < 0.9:
                    pool.append(fd.ops.mul(rng.choice(pool), fd.ops.broadcast(a, [True, False])))
                    continue
                else:
                    v = fd.ops.mul(a, fd.ops.broadcast(fd.ops.sum(b, [0]), [True]))
                columns.append(v)
                continue
            a, b = rng.choice(pool[-4:]), rng.choice(pool)
            if r < 0.3:
                v = getattr(fd.ops, rng.choice(["tanh", "neg", "exp"]))(a)
            elif r < 0.6:
                v = getattr(fd.ops, rng.choice(["add", "mul"]))(a, b)
            elif r < 0.7:
                v = fd.ops.add(a, fd.ops.broadcast(rng.choice(columns), [True, False]))
            elif r < 0.8:
                v = fd.ops.sum(a, [rng.choice([0, 1])], True)
            elif r < 0.9:
                v = fd.ops.mul(a, fd.ops.sum(a, [1], True))
            else:
                v = fd.ops.permute(a, [1, 0]) if rng.random() < 0.5 else fd.ops.where(fd.ops.gt(a, 0.0), a, b)
            pool.append(v)
        fd.add_output(pool[-1])
        if len(columns) > 3:
            fd.add_output(columns[-1])
        if rng.random() < 0.5:
            fd.add_output(pool[rng.randrange(4, len(pool))])
    return fd


@pytest.mark.parametrize("build", [_random_fusion, _random_norm_tail])
def test_random_fusions_are_cut_as_planning_every_merge_cuts_them(build, monkeypatch):
    for seed in range(40 if build is _random_norm_tail else 25):
        fusion = build(seed).fusion
        grown, _ = _segments(fusion)
        assert _described(grown) == _described(_segments(fusion, False, monkeypatch)[0]), seed
        # and as planning every merge refused before for good (`LASTING`) cuts them
        _no_lasting_refusals(monkeypatch)
        assert _cuts(grown) == _cuts(_segments(fusion)[0]), seed
        monkeypatch.undo()
