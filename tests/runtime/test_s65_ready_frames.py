"""A ready program's frame stays small (runtime/ready.py `_straight_line`): CPython 3.11 takes
frames from 16 KiB chunks, and a program of one local a slot (a 48-layer MLP's backward: 816
locals and 336 operand-stack slots) left the calls it made so little room that each mapped a
chunk of its own (90,000 mmap/munmap pairs a backward, 3-4x its host time). A large program
runs as parts of a bounded frame; a small one stays one function. Each test compares with
eager on fresh data."""
import copy
import re

import torch
import torch.nn as nn

import fuser
import fuser.runtime.ready as ready
from fuser import DataType, FusionDefinition
from fuser.runtime.ready import ReadyProgram
from tests.helpers import backend_env, make

# 2 KiB of frame (8 bytes a slot): an eighth of CPython 3.11's frame chunk
BOUND = 256


def _functions(run) -> list:
    """A ready program's generated functions: `run`, and its parts where it has them."""
    return [run] + [f for k, f in run.__globals__.items() if re.fullmatch(r"P\d+", k)]


def _frame(function) -> int:
    code = function.__code__
    return code.co_nlocals + code.co_stacksize


def _assert_bounded(run) -> None:
    frames = {f.__name__: _frame(f) for f in _functions(run)}
    assert max(frames.values()) <= BOUND, frames


def _programs(fd) -> list:
    return [r for r in fd.cache.ready_calls() if isinstance(r, ReadyProgram)]


BLOCKS = 60


def test_a_long_program_runs_in_frames_of_bounded_size():
    """180 ATen steps of 61 arguments (their unpacking as deep an operand stack in the
    one-function form, and a local each), each value returned: its parts' frames stay within
    the bound, and every output equals eager's on fresh data."""
    with backend_env("aten"):
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
            v = x
            for _ in range(BLOCKS):
                w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
                v = fd.ops.matmul(fd.ops.tanh(v), w)
                fd.add_output(v)
                fd.add_output(fd.ops.mul(v, 0.5))
        for _ in range(3):
            x, ws = make((3, 4)), [make((4, 4)) * 0.5 for _ in range(BLOCKS)]
            got = fd.execute([x, *ws])
            v, want = x, []
            for w in ws:
                v = torch.tanh(v) @ w
                want += [v, v * 0.5]
            assert len(got) == len(want)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b)
    (program,) = _programs(fd)
    _assert_bounded(program._run)


class _MLP(nn.Module):
    """The probe's model: LayerNorm -> Linear -> GELU residual blocks."""

    def __init__(self, layers: int, d: int = 16):
        super().__init__()
        self.layers = nn.ModuleList([nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU())
                                     for _ in range(layers)])

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


def test_a_deep_mlp_backward_runs_in_bounded_frames(monkeypatch):
    """A 12-layer MLP's forward and backward (the backward's program: 800 slots): every
    generated function's frame stays within the bound; the output, the input's and every
    parameter's gradient equal eager's on fresh data."""
    made = []
    straight_line = ready._straight_line

    def recorded(*args, **kwargs):
        made.append(straight_line(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(ready, "_straight_line", recorded)
    torch.manual_seed(5)
    eager = _MLP(12)
    inner = copy.deepcopy(eager)
    with backend_env("aten"):
        jitted = fuser.jit(inner)
        for _ in range(3):
            x, grad = make((4, 16)), make((4, 16))
            inner.zero_grad()
            eager.zero_grad()
            xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
            ya, yb = jitted(xa), eager(xb)
            ya.backward(grad)
            yb.backward(grad)
            torch.testing.assert_close(ya, yb)
            torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-4, atol=1e-5)
            for p, q in zip(inner.parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert made
    for run in made:
        _assert_bounded(run)


def test_kernels_in_place_writes_and_permutes_across_parts(monkeypatch, written_in_place):
    """Every step its own part (the bounds lowered): a kernel writing into its input, a
    matmul reading a weight through two permutes, a kernel after it and an input returned
    cross the parts through their list; the values equal eager's on fresh data, the update
    is still written in place."""
    monkeypatch.setattr(ready, "_FRAME_SLOTS", 0)
    monkeypatch.setattr(ready, "_PART_SLOTS", 1)
    with FusionDefinition() as fd:
        p = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        g = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        new = fd.ops.sub(p, fd.ops.mul(g, 0.1))
        fd.add_output(new, alias_input=p)
        twice = fd.ops.permute(fd.ops.permute(w, [1, 0]), [1, 0])
        m = fd.ops.matmul(fd.ops.tanh(new), twice)
        fd.add_output(fd.ops.exp(m))
        fd.add_output(fd.ops.permute(m, [1, 0]))
        fd.add_output(w)
    p = make((3, 4))
    for _ in range(3):
        g, w = make((3, 4)), make((4, 5))
        want_p = p - g * 0.1
        m = torch.tanh(want_p) @ w
        e, mt, same = fd.execute([p, g, w])
        torch.testing.assert_close(p, want_p)
        torch.testing.assert_close(e, torch.exp(m))
        torch.testing.assert_close(mt, m.t())
        assert same is w or torch.equal(same, w)
    (program,) = _programs(fd)
    assert len(_functions(program._run)) > 2  # (it ran in parts)
    assert written_in_place == [True] * 3


def test_a_small_program_stays_one_function():
    """A program of a few slots keeps the one-function form: a local a slot, no parts."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.relu(fd.ops.matmul(fd.ops.exp(x), w)))
    for _ in range(3):
        x, w = make((6, 4)), make((4, 5))
        (out,) = fd.execute([x, w])
        torch.testing.assert_close(out, torch.relu(torch.exp(x) @ w))
    (program,) = _programs(fd)
    assert _functions(program._run) == [program._run]
    assert {"s0", "s1"} <= set(program._run.__code__.co_varnames)
