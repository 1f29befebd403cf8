"""An RNN cell unrolled by a Python loop segments in work about proportional to its steps: the
segmenter's searches for cycles went through every group downstream (reaching the last step
from each), the sibling join started its scan over at each join and planned every pair of the
steps' input slices, so that a GRU cell over 64 steps spent 1.8 s in segmentation. Counted in
groups walked and exprs planned, not seconds, so that the bound holds on any machine; and the
segments are those that an unbounded search for cycles gives."""
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen.kernel import can_emit
from fuser.schedulers.plan import plan_kernel
from fuser.segment import segment_fusion, segmenter


def _unrolled(steps: int) -> FusionDefinition:
    """h = tanh(xs[t] + h @ w + b) for each step, every h an output: per step a slice of xs
    (views), an ATen matmul and a kernel reading the bias every step reads."""
    with FusionDefinition() as fd:
        xs = fd.define_tensor([steps, 4, 8], contiguity=True, dtype=DataType.Float)
        h = fd.define_tensor([4, 8], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([8, 8], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([8], contiguity=True, dtype=DataType.Float)
        for t in range(steps):
            x = fd.ops.squeeze(fd.ops.slice(xs, [t, 0, 0], [t + 1, 4, 8]), [0])
            h = fd.ops.tanh(fd.ops.add(fd.ops.add(x, fd.ops.matmul(h, w)), b))
            fd.add_output(h)
    return fd


def _lowerable(e) -> bool:
    return can_emit(e, "interpreter")


def _segments(steps: int, monkeypatch):
    """The segments of `_unrolled(steps)`, the groups the segmenter's searches walked (each
    group's consumers or producers asked) and the exprs it planned."""
    walked, planned = [0], [0]
    consumers, producers = segmenter.Segmenter.consumers, segmenter.Segmenter.producers

    def counted(edges):
        def walk(self, g):
            walked[0] += 1
            return edges(self, g)
        return walk

    def try_kernel(exprs, inputs, outputs):
        planned[0] += len(exprs)
        return plan_kernel(exprs, inputs, outputs, _lowerable)
    monkeypatch.setattr(segmenter.Segmenter, "consumers", counted(consumers))
    monkeypatch.setattr(segmenter.Segmenter, "producers", counted(producers))
    segments = segment_fusion(_unrolled(steps).fusion, try_kernel, _lowerable)
    monkeypatch.undo()
    return segments, walked[0], planned[0]


def test_segmenting_twice_the_steps_takes_about_twice_the_work(monkeypatch):
    _, walked16, planned16 = _segments(16, monkeypatch)
    segments, walked32, planned32 = _segments(32, monkeypatch)
    assert sum(s.kind.name == "kernel" for s in segments) == 32  # a kernel per step
    # (before: 7.7x the groups walked and 3.4x the exprs planned, a cubic and a quadratic)
    assert walked32 <= 3.5 * walked16, (walked16, walked32)
    assert planned32 <= 2.5 * planned16, (planned16, planned32)


def _reaches_unbounded(self, src, dst) -> bool:
    """Whether `dst` depends on `src` through a third group, searching every group downstream."""
    stack, seen = [h for h in self.consumers(src) if h is not dst], set()
    while stack:
        h = stack.pop()
        if h is dst:
            return True
        if h not in seen:
            seen.add(h)
            stack.extend(self.consumers(h))
    return False


def test_the_bounded_searches_cut_as_unbounded_ones(monkeypatch):
    fusion = _unrolled(12).fusion

    def described():
        return [(s.kind, [id(e) for e in s.exprs], [id(v) for v in s.outputs], s.why)
                for s in segment_fusion(fusion, lambda e, i, o: plan_kernel(e, i, o, _lowerable), _lowerable)]
    bounded = described()
    monkeypatch.setattr(segmenter.Segmenter, "reaches", _reaches_unbounded)
    monkeypatch.setattr(segmenter.Segmenter, "through_another",
                        lambda self, g, edges, within: _through_another_unbounded(self, g, edges))
    assert described() == bounded


def _through_another_unbounded(self, g, edges) -> set:
    found, stack = set(), [n for h in edges(g) for n in edges(h)]
    while stack:
        h = stack.pop()
        if h not in found:
            found.add(h)
            stack.extend(edges(h))
    return found


def test_an_unrolled_loop_computes_as_eager():
    steps = 6
    gen = torch.Generator().manual_seed(0)
    xs, h, w, b = (torch.randn(*shape, generator=gen) for shape in ([steps, 4, 8], [4, 8], [8, 8], [8]))
    outs = _unrolled(steps).execute([xs, h, w, b])
    for t, out in enumerate(outs):
        h = torch.tanh(xs[t] + h @ w + b)
        torch.testing.assert_close(out, h, rtol=1e-5, atol=1e-5)
