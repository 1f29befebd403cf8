"""The segmenter's graph queries grow with the size of the fusion, not with its square: a
model of many layers segments in time proportional to its layers (a 16-layer MLP stack took
0.7 s in segmentation when every query of a group's consumers asked every group for its
producers)."""
import torch

from fuser import DataType, FusionDefinition
from fuser.segment import segmenter


def _stack(layers: int):
    """`layers` RMSNorm + matmul + residual blocks: per layer a reduction kernel, an ATen
    matmul and a pointwise kernel reading the previous layer's output."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        ws = [fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float) for _ in range(layers)]
        h = x
        for w in ws:
            ms = fd.ops.sum(fd.ops.mul(h, h), [-1], keepdim=True)
            normed = fd.ops.mul(h, fd.ops.rsqrt(fd.ops.add(ms, 1e-6)))
            h = fd.ops.add(h, fd.ops.matmul(normed, w))
        fd.add_output(h)
    return fd


def _reference(x, ws):
    h = x
    for w in ws:
        h = h + (h * torch.rsqrt((h * h).sum(-1, keepdim=True) + 1e-6)) @ w
    return h


def _queries(layers: int, monkeypatch) -> int:
    calls = [0]
    original = segmenter.Segmenter.producers

    def counted(self, g):
        calls[0] += 1
        return original(self, g)
    monkeypatch.setattr(segmenter.Segmenter, "producers", counted)
    fd = _stack(layers)
    x, ws = torch.randn(4, 8), [torch.randn(8, 8) * 0.1 for _ in range(layers)]
    (out,) = fd.execute([x, *ws])
    torch.testing.assert_close(out, _reference(x, ws), rtol=1e-4, atol=1e-4)
    monkeypatch.undo()
    return calls[0]


def test_segmentation_queries_grow_linearly_with_layers(monkeypatch):
    small, large = _queries(4, monkeypatch), _queries(16, monkeypatch)
    assert large <= 6 * small, (small, large)  # 4x the layers; quadratic growth is 16x
