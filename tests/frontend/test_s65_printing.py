"""What fuser prints for people (sixty-fifth session): `str(fuser.explain(...))` has each
fusion's definition as the HTML form does; an explained call counts in the jitted function's
cache_info; segment reasons and Triton headers print extents in the IR's notation, not sympy's
(`Max(..)`, `floor(..)`); and the objects a notebook user meets (fd.ops, fd.fec, LRUCache,
PythonProfiler) print what they hold, not `<... object at 0x...>`."""
import re

import torch

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import make

_ADDRESS = re.compile(r"object at 0x[0-9a-f]+")
_SYMPY_NAMES = ("floor(", "ceiling(", "Max(", "Min(")


def _softmax_add_relu(x, w):
    return (torch.softmax(x * 2, -1) + w).relu()


def test_the_text_report_has_each_fusions_definition_as_the_html_has():
    x, w = make((4, 8)).requires_grad_(), make((8,)).requires_grad_()
    report = fuser.explain(_softmax_add_relu, x, w)
    text, page = str(report), report._repr_html_()
    assert report.fusions  # (forward and backward)
    for f in report.fusions:
        assert "def nvfuser_fusion" in f.definition
        assert f"-- definition --\n{f.definition.strip()}\n" in text, f.name
    assert text.count("def nvfuser_fusion") == page.count("def nvfuser_fusion") == len(report.fusions)


def test_an_explained_call_counts_in_the_functions_cache_info():
    jitted = fuser.jit(_softmax_add_relu)
    x, w = make((4, 8)), make((8,))
    report = fuser.explain(jitted, x, w)
    assert report.info.calls == 1
    assert jitted.cache_info().calls == 1
    x2, w2 = make((4, 8)), make((8,))
    torch.testing.assert_close(jitted(x2, w2), _softmax_add_relu(x2, w2))
    assert jitted.cache_info().calls == 2


def _ir_extents(fd: FusionDefinition) -> set[str]:
    """The extents the printed IR gives its axes: `iS1{( ceilDiv(i0, 2) )}` -> `( ceilDiv(i0, 2) )`."""
    return set(re.findall(r"\b[a-z]+[A-Z]?\d+\{(.*?)\}(?=[ ,\]])", str(fd.fusion)))


def test_segment_reasons_and_triton_headers_print_extents_as_the_ir_does():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.slice(x, [1], [x.size(0)], [2]), 2.0))
        fd.add_output(fd.ops.mul(fd.ops.slice(x, [0], [fd.ops.div(x.size(0), 2)], [1]), 3.0))
    xt = make((9,))
    a, b = fd.execute([xt])
    torch.testing.assert_close(a, xt[1::2] * 2)
    torch.testing.assert_close(b, xt[:4] * 3)
    segments, code = fd.last_segments(), fd.last_triton_code()
    printed = "".join(s.why for s in segments) + code
    assert [name for name in _SYMPY_NAMES if name in printed] == []
    ir = _ir_extents(fd)
    assert len(segments) == 2
    for seg in segments:
        tiled = re.search(r"dim1 \[(.*)\]", seg.why).group(1)
        assert tiled in ir, (seg.why, ir)
    headers = re.findall(r"^# X0 = (.*)$", code, re.M)
    assert len(headers) == 2 and set(headers) <= ir, (headers, ir)


def test_fd_ops_executor_caches_and_profilers_print_what_they_hold():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.exp(x))
    xt = make((16,))
    with fuser.PythonProfiler() as prof:
        (out,) = fd.execute([xt])
    torch.testing.assert_close(out, xt.exp())
    lru = fuser.LRUCache(4)
    lru.cache_compile(fd.fusion)
    lru.cache_compile(fd.fusion)
    reprs = {"fd.ops": repr(fd.ops), "fd.fec": repr(fd.fec), "LRUCache": repr(lru),
             "PythonProfiler": repr(prof), "empty PythonProfiler": repr(fuser.PythonProfiler())}
    assert [name for name, r in reprs.items() if _ADDRESS.search(r)] == [], reprs
    assert re.fullmatch(r"<fd\.ops: \d+ ops, dir\(fd\.ops\) lists them>", reprs["fd.ops"])
    assert reprs["fd.fec"] == "FusionExecutorCache(inputs=1, outputs=1, runtimes=1)"
    assert reprs["LRUCache"] == "LRUCache(max_fusions=4, fusions=1, lookups=2, hits=1)"
    assert re.fullmatch(r"PythonProfiler\(profiles=1, last: segments=1, host_time_ms=\d+\.\d{3}\)",
                        reprs["PythonProfiler"])
    assert reprs["empty PythonProfiler"] == "PythonProfiler(profiles=0)"
