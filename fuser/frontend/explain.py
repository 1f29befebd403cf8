"""`fuser.explain(fn, *args)`: what fuser made of a function, for people and notebooks.

It runs `fn` once through `fuser.jit` (and its backward, when an output requires grad, without
touching any `.grad`), then reports, per graph Dynamo captured: the Dynamo graph; per ATen
graph (inference, forward, backward): its code, each fusion in nvFuser notation with its
segments and why they were cut, the generated Triton source, and the ATen ops run between
fusions with the reason for each. `str(report)` is text; `report._repr_html_()` renders it with
collapsible sections in a notebook.
"""
from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from .. import timing
from ..ir import TensorView
from .gc_pause import Overlapped
from .jit import JitFunction, JitModule, Stats, jit
from .partition import ELEMENT, SIZE
from .program import EagerStep, FusionStep, GraphProgram


@dataclass
class FusionReport:
    name: str
    nodes: list[str]
    fusion: str
    definition: str
    segments: list[str]
    triton: list[str]


@dataclass
class ProgramReport:
    kind: str
    aten_code: str
    fusions: list[FusionReport] = field(default_factory=list)
    eager: list[tuple[str, str, str]] = field(default_factory=list)  # (node, op, reason)


@dataclass
class GraphReport:
    dynamo_code: str
    programs: list[ProgramReport] = field(default_factory=list)


class ExplainReport:
    def __init__(self, graphs: list[GraphReport], info: Any, times: Optional[dict[str, float]] = None,
                 fuser_failed: bool = False, uncompiled: Optional[str] = None):
        self.graphs = graphs
        self.info = info
        # fuser could not compile the function, and fallback="eager" runs it eagerly (no Dynamo skip)
        self.fuser_failed = fuser_failed
        # why fuser.jit ran the call as the plain function, not through Dynamo (a global module
        # hook, a torch.func transform, ...): `Stats.uncompiled_reason`; None where it did not
        self.uncompiled = uncompiled
        # ms of the explained call (forward and backward) per phase of fuser.timing, and in all
        self.times = times or {}

    def time_line(self) -> str:
        """Where the explained call's time went: a first call compiles, so this is its compile
        time; "Dynamo, AOTAutograd and the rest" is the call less fuser's own phases."""
        if not self.times:
            return ""
        total = self.times["total"]
        phases = [(k, v) for k, v in self.times.items() if k not in ("total", "other") and v >= 0.05]
        rest = total - sum(v for _, v in phases)
        inner = ", ".join(f"{k} {v:.1f}" for k, v in phases)
        return (f"this call: {total:.1f} ms; fuser's phases: {inner or 'none (nothing compiled in this call)'}; "
                f"Dynamo, AOTAutograd and the rest: {rest:.1f} ms")

    def eager_note(self) -> str:
        """Why a call that reached no fuser graph ran as it did (empty where one ran)."""
        if self.graphs:
            return ""
        if self.fuser_failed:
            return ("no graph of this call ran through fuser: fuser could not compile the function "
                    "(the warning of the call that failed says why), and with fallback=\"eager\" it "
                    "runs eagerly from then on (the default, fallback=\"error\", raises the failure)")
        if self.uncompiled is not None:
            return (f"no graph of this call ran through fuser: {self.uncompiled}, so fuser.jit ran the call "
                    f"uncompiled, not through Dynamo; calls compile again once that no longer holds")
        return ("no graph of this call ran through fuser: Dynamo ran it eagerly (a frame it skips, its "
                "recompile limit reached, torch.compiler.disable) or it computes nothing; "
                "TORCH_LOGS=recompiles,graph_breaks says which")

    @property
    def fusions(self) -> list[FusionReport]:
        return [f for g in self.graphs for p in g.programs for f in p.fusions]

    def __str__(self) -> str:
        out = [f"fuser.explain: {len(self.graphs)} captured graph(s); {self.info}"]
        if self.times:
            out.append(self.time_line())
        if not self.graphs:
            out.append(self.eager_note())
        for gi, g in enumerate(self.graphs):
            out += [_rule(f"graph {gi}: captured by Dynamo"), g.dynamo_code.strip()]
            for p in g.programs:
                out += [_rule(f"graph {gi} {p.kind}: ATen graph"), p.aten_code.strip()]
                for f in p.fusions:
                    out += [_rule(f"graph {gi} {p.kind}: {f.name} (nodes {', '.join(f.nodes)})"),
                            f.fusion.strip(), "", "-- definition --", f.definition.strip(), "", "-- segments --"]
                    out += [s.strip() for s in f.segments] or ["(not run yet)"]
                    if f.triton:
                        out += ["", "-- Triton --"] + [t.strip() for t in f.triton]
                if p.eager:
                    out += [_rule(f"graph {gi} {p.kind}: ATen calls between fusions")]
                    out += [f"{n} = {op}: {why}" for n, op, why in p.eager]
        return "\n".join(out) + "\n"

    def _repr_html_(self) -> str:
        esc = html.escape
        pre = lambda text: f"<pre style='font-size:85%'>{esc(text.strip())}</pre>"  # noqa: E731
        parts = [f"<div><b>fuser.explain</b>: {len(self.graphs)} captured graph(s)<br>"
                 f"<code>{esc(str(self.info))}</code>" + (f"<br>{esc(self.time_line())}" if self.times else "")
                 + (f"<br>{esc(self.eager_note())}" if not self.graphs else "")]
        for gi, g in enumerate(self.graphs):
            parts.append(f"<details open><summary><b>graph {gi}</b></summary>")
            parts.append(f"<details><summary>captured by Dynamo</summary>{pre(g.dynamo_code)}</details>")
            for p in g.programs:
                parts.append(f"<details open><summary><b>{esc(p.kind)}</b>: {len(p.fusions)} "
                             f"fusion(s), {len(p.eager)} ATen call(s)</summary>")
                parts.append(f"<details><summary>ATen graph</summary>{pre(p.aten_code)}</details>")
                for f in p.fusions:
                    parts.append(f"<details><summary>{esc(f.name)}: {esc(', '.join(f.nodes))}</summary>")
                    parts.append(pre(f.fusion))
                    parts.append(f"<details><summary>definition</summary>{pre(f.definition)}</details>")
                    parts.append("<b>segments</b>" + "".join(pre(s) for s in f.segments))
                    if f.triton:
                        parts.append("<details><summary>Triton</summary>" +
                                     "".join(pre(t) for t in f.triton) + "</details>")
                    parts.append("</details>")
                if p.eager:
                    rows = "".join(f"<tr><td><code>{esc(n)}</code></td><td><code>{esc(op)}</code></td>"
                                   f"<td>{esc(why)}</td></tr>" for n, op, why in p.eager)
                    parts.append(f"<details><summary>ATen calls between fusions</summary>"
                                 f"<table>{rows}</table></details>")
                parts.append("</details>")
            parts.append("</details>")
        return "".join(parts) + "</div>"


class _PhaseTimes(Overlapped):
    """The phase timer on while explain calls run (in several threads, the timer is process-wide:
    each report's phases count the others' compiles too)."""

    def set(self) -> None:
        self.was_on = timing.enabled()
        timing.enable()

    def put_back(self) -> None:
        timing.enable(self.was_on)


_PHASE_TIMES = _PhaseTimes()


def explain(fn: Any, /, *args: Any, **kwargs: Any) -> ExplainReport:
    """Run `fn(*args, **kwargs)` through fuser once (and its backward, if any output requires
    grad) and report what was captured, fused, cut and generated."""
    jitted = fn if isinstance(fn, (JitFunction, JitModule)) else jit(fn)
    target = jitted._jit if isinstance(jitted, JitModule) else jitted
    stats = Stats()
    before = timing.totals()
    try:
        with _PHASE_TIMES:
            start = time.perf_counter()
            with timing.phase("other"):
                out = target._call(stats, args, kwargs, direct=False)
                _run_backward(out, fn, args, kwargs, stats)
            total = (time.perf_counter() - start) * 1e3
            after = timing.totals()
    finally:
        # the graphs are the function's own now: its later calls may take the direct path, which
        # counts only graphs a call through Dynamo recorded (cache_info read 0 graphs after it);
        # and so is the call (cache_info read calls=0 where the report's own line said 1)
        for record in stats.records.values():
            target._stats.saw(record)
        target._stats.calls += stats.calls
        target._stats.uncompiled += stats.uncompiled
    times = {k: (v - before.get(k, 0.0)) * 1e3 for k, v in after.items()}
    times["total"] = total
    return ExplainReport([_graph_report(r) for r in stats.records.values()], stats.info(), times,
                         fuser_failed=target._failed, uncompiled=stats.uncompiled_reason)


def _run_backward(out: Any, fn: Any, args: tuple, kwargs: dict, stats: Stats) -> None:
    outs = [t for t in _tensors(out) if t.requires_grad]
    if not outs:
        return
    wrt = [t for t in _tensors((args, kwargs)) if t.requires_grad and t.is_leaf]
    if isinstance(fn, torch.nn.Module):
        wrt += [p for p in fn.parameters() if p.requires_grad]
    if not wrt:
        return
    grads = [torch.randn_like(t) for t in outs]
    from .program import CURRENT_STATS

    token = CURRENT_STATS.set(stats)
    try:
        torch.autograd.grad(outs, wrt, grads, allow_unused=True)
    finally:
        CURRENT_STATS.reset(token)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _graph_report(record) -> GraphReport:
    return GraphReport(record.dynamo_code, [_program_report(p) for p in record.programs])


def _program_report(program: GraphProgram) -> ProgramReport:
    report = ProgramReport(program.kind, program.plan.graph.code)
    fusions = 0
    for step in program.steps:
        if isinstance(step, FusionStep):
            rt = step.fd.cache.last_runtime if step.fd.cache is not None else None
            report.fusions.append(FusionReport(
                name=f"fusion {fusions}", nodes=[n.name for n in step.region.nodes],
                fusion=str(step.fd.fusion), definition=definition_as_run(step.fd),
                segments=[s.describe() for s in rt.segments] if rt else [],
                triton=rt.triton_code() if rt else []))
            fusions += 1
        elif isinstance(step, EagerStep) and step.eager.kind not in (SIZE, ELEMENT):
            node = step.eager.node
            report.eager.append((node.name, str(node.target), step.eager.reason))
    return report


# a recorded line's results: `tv3 = `, `tv3, _ = `, `[s1, s2] = ` (fd.ops.shape)
_RESULTS = re.compile(r"^\s*\[?(\w+(?:, \w+)*)\]? = ")
_NAME = re.compile(r"\b(?:tv|s)\d+\b")
DEAD_MARK = "# not run, no output reads it: "


def definition_as_run(fd) -> str:
    """`repr(fd)` with each op whose results nothing reads commented out as not run. The
    lowering drops such ops from the fusion (a constant inlined into its users, the zeros a
    scatter does not read), but the recorded definition still lists them. A line stays where
    a result is a fusion input, an op's output in the fusion, or named by a line that stays
    (`tv2.shape()[0]`, a scalar); inputs and constants (`fd.define_*`) always stay."""
    fusion = fd.fusion
    live = {f"tv{v.name}" for v in fusion.inputs() if isinstance(v, TensorView)}
    live |= {f"tv{o.name}" for e in fusion.exprs for o in e.outputs if isinstance(o, TensorView)}
    lines = repr(fd).splitlines()
    for k in range(len(lines) - 1, 0, -1):  # (backwards: a line's readers come after it)
        line = lines[k]
        results = _RESULTS.match(line)
        names = set(results.group(1).split(", ")) - {"_"} if results else set()
        if names and "fd.ops." in line and live.isdisjoint(names):
            lines[k] = line.replace(line.lstrip(), DEAD_MARK + line.lstrip(), 1)
        else:
            live |= set(_NAME.findall(line))
    return "\n".join(lines) + "\n"


def _rule(title: str) -> str:
    return f"\n=== {title} " + "=" * max(3, 88 - len(title))
