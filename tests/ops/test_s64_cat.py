"""cat as nvFuser's frontend takes it: `dim` defaults to 0, and `manual_padding=True` (how
nvFuser's printed definitions write every cat: each input padded to the output's extent first)
selects, at each position along `dim`, the input whose un-padded region covers it, so the
output is the cat of the pads' sources; pads that do not tile the axis are refused."""
import pytest
import torch

import fuser
from fuser import FusionDefinition
from tests.helpers import cases, make, run_and_check

f32, bf16 = torch.float32, torch.bfloat16
DECLS = {"static": {"static": True}, "symbolic": {"size1_broadcast": False}}


def _pads_then_cat(dim: int, sizes: list[int], ndim: int, value=None):
    """A builder that pads each input along `dim` to the total of `sizes` (its source placed
    after the ones before it) and cats the padded tensors with manual_padding, as nvFuser's
    printed definitions do."""
    total = sum(sizes)

    def build(fd, *ts):
        padded, before = [], 0
        for t, size in zip(ts, sizes):
            widths = [0, 0] * (ndim - 1 - dim) + [before, total - before - size]
            padded.append(fd.ops.pad(t, widths) if value is None else fd.ops.pad(t, widths, value))
            before += size
        return fd.ops.cat(padded, dim=dim, manual_padding=True)
    return build


MANUAL = [  # (id, shapes, dim, pad value)
    ("last-dim", [(4, 6), (4, 2)], -1, None),
    ("dim0-three", [(3, 5), (1, 5), (2, 5)], 0, None),
    ("middle-dim-pad-value", [(2, 3, 4), (2, 5, 4)], 1, 7.0),
]


@pytest.mark.parametrize("shapes,dim,value,dtype,decl,backend", cases(
    [pytest.param(*c[1:], dt, decl, id=f"{c[0]}-{str(dt)[6:]}-{decl}")
     for c in MANUAL for dt in (f32, bf16) for decl in DECLS]))
def test_cat_of_padded_inputs_with_manual_padding_is_the_cat_of_their_sources(shapes, dim, value, dtype,
                                                                             decl, backend):
    xs = [make(s, dtype) for s in shapes]
    ndim = len(shapes[0])
    sizes = [s[dim] for s in shapes]
    run_and_check(_pads_then_cat(dim % ndim, sizes, ndim, value), lambda *ts: torch.cat(ts, dim), xs,
                  decl=[DECLS[decl]] * len(xs), backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_a_padded_input_also_used_elsewhere_keeps_its_padding_there(backend):
    """The pad stays a tensor of its own: an output of the fusion beside the cat, fused with
    the arithmetic that follows the cat."""
    a, b = make((4, 6)), make((4, 2))

    def build(fd, x, y):
        pa, pb = fd.ops.pad(x, [0, 2]), fd.ops.pad(y, [6, 0])
        return [fd.ops.exp(fd.ops.cat([pa, pb], dim=1, manual_padding=True)), pa]
    run_and_check(build, lambda x, y: [torch.cat([x, y], 1).exp(), torch.nn.functional.pad(x, [0, 2])],
                  [a, b], backend=backend)


@pytest.mark.parametrize("dtype,decl,backend", cases([pytest.param(f32, "static", id="float32-static"),
                                                       pytest.param(bf16, "symbolic", id="bfloat16-symbolic")]))
def test_cat_without_dim_joins_axis_0(dtype, decl, backend):
    xs = [make((4, 6), dtype), make((3, 6), dtype)]
    run_and_check(lambda fd, a, b: fd.ops.cat([a, b]), lambda a, b: torch.cat([a, b]), xs,
                  decl=[DECLS[decl]] * 2, backend=backend)


def _define_cat(build, shapes):
    with FusionDefinition() as fd:
        ts = [fd.define_tensor(shape=list(s), contiguity=True) for s in shapes]
        fd.add_output(build(fd, *ts))
    return fd


@pytest.mark.parametrize("name,shapes,build,words", [
    ("padded to different extents", [(4, 6), (4, 2)],
     lambda fd, a, b: fd.ops.cat([fd.ops.pad(a, [0, 2]), fd.ops.pad(b, [6, 1])], dim=1, manual_padding=True),
     ["manual_padding", "padded to the output's extent", "8", "9"]),
    ("overlapping sources", [(4, 6), (4, 2)],
     lambda fd, a, b: fd.ops.cat([fd.ops.pad(a, [0, 2]), fd.ops.pad(b, [5, 1])], dim=1, manual_padding=True),
     ["manual_padding", "pads 5 before", "cover 6", "tile"]),
    ("the first source not at the start", [(4, 6), (4, 2)],
     lambda fd, a, b: fd.ops.cat([fd.ops.pad(a, [1, 1]), fd.ops.pad(b, [6, 0])], dim=1, manual_padding=True),
     ["manual_padding", "input 0", "pads 1 before"]),
    ("the last source short of the end", [(4, 6), (4, 2)],
     lambda fd, a, b: fd.ops.cat([fd.ops.pad(a, [0, 3]), fd.ops.pad(b, [6, 1])], dim=1, manual_padding=True),
     ["manual_padding", "last input", "pads 1 after"]),
    ("an input that is no pad", [(4, 6), (4, 8)],
     lambda fd, a, b: fd.ops.cat([fd.ops.pad(a, [0, 2]), b], dim=1, manual_padding=True),
     ["manual_padding", "input 1", "not a pad"]),
    ("another axis padded", [(4, 6), (4, 2)],
     lambda fd, a, b: fd.ops.cat([fd.ops.pad(a, [0, 2, 1, 0]), fd.ops.pad(b, [6, 0, 1, 0])], dim=1,
                                 manual_padding=True),
     ["manual_padding", "other than dim 1"]),
])
def test_manual_padding_that_does_not_tile_the_axis_is_refused(name, shapes, build, words):
    with pytest.raises(fuser.FusionDefinitionError) as err:
        _define_cat(build, shapes)
    for w in words:
        assert w in str(err.value), (name, str(err.value))


def test_symbolic_sources_of_other_sizes_than_the_pads_assume_are_refused_at_execution():
    """Pad widths are numbers: with symbolic inputs they fix the sources' sizes, which each
    execution checks (a source of 5 under widths that place the next one at 6 leaves a gap)."""
    fd = _define_cat(lambda fd, a, b: fd.ops.cat([fd.ops.pad(a, [0, 2]), fd.ops.pad(b, [6, 0])], dim=1,
                                                 manual_padding=True), [(-1, -1), (-1, -1)])
    a, b = make((4, 6)), make((4, 2))
    torch.testing.assert_close(fd.execute([a, b])[0], torch.cat([a, b], 1))
    with pytest.raises(fuser.FusionInputError):
        fd.execute([make((4, 5)), b])
