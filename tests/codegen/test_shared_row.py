"""The shared-row form of the inner-outer template (codegen/shared_row.py): a norm backward over
rows too long for registers as one Gluon kernel holding the row in shared memory, against eager
PyTorch on the GPU; on CPU, its source compiled for sm_90 (Gluon has no interpreter)."""
import os
import re
import subprocess
import sys

import pytest
import torch

import fuser
from fuser.codegen.layout import Layout
from fuser import DataType, FusionDefinition
from fuser.ir import TensorView
from fuser.codegen.shared_row import SharedRowConfig, generate_shared_row, gluon_names
from fuser.schedulers.heuristics import SHARED_ROW_VECTOR_BYTES

WIDE_WARPS = 32  # the warps of RMSNorm's kernel at 32768 columns (16 would unroll 16 chunks a pass)

from benchmarks.sweep_shared_row import NO_CUOBJDUMP, compile_for_sm90, rmsnorm_bwd_given_rstd
from tests.codegen.test_inner_outer import close, layernorm_bwd_fd, rmsnorm_bwd_fd

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
hopper = pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")


@pytest.fixture(autouse=True)
def _compiled_at_the_first_call(monkeypatch):
    """These tests read the shared-row kernel a first call runs (and times): nothing compiles
    in the background while a stand-in runs (codegen/tuning.py, tested in test_tuning.py)."""
    monkeypatch.setenv("FUSER_BACKGROUND_COMPILE", "0")


def rmsnorm_reference(x, w, dy, eps=1e-6):
    xf, dyf, wf = x.double(), dy.double(), w.double()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    xhat, g = xf * rstd, dyf * wf
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx, (dyf * xhat).sum(0)


def inputs(rows, cols, device="cuda", dtype=torch.bfloat16):
    return (torch.randn(rows, cols, device=device, dtype=dtype), torch.randn(cols, device=device, dtype=dtype),
            torch.randn(rows, cols, device=device, dtype=dtype))


def rmsnorm_plan(given_rstd: bool, rows=8, cols=2048):
    """The inner-outer plan of a RMSNorm backward definition (planned on CPU tensors)."""
    fd = rmsnorm_bwd_given_rstd() if given_rstd else rmsnorm_bwd_fd(torch.bfloat16)
    args = list(inputs(rows, cols, "cpu"))
    fd.execute(args + [torch.rand(rows, 1) + 0.5] if given_rstd else args)
    (launcher,) = [k for k in fd.cache.last_runtime.launchers.values() if k.plan.parts is not None]
    return launcher.plan


def along_the_row(plan) -> tuple:
    """The tensor inputs (by position) that vary along the row: those the launch stages."""
    tensors = [v for v in plan.inputs if isinstance(v, TensorView)]
    return tuple(k for k, v in enumerate(tensors) if 1 in plan.axes.of(v))


def chunks_of(code: str) -> int:
    """The chunks of the shared-row kernel in a definition's code (its plan's comment)."""
    return int(re.search(r"\((\d+) chunks of \d+ columns\)", code).group(1))


def check_rmsnorm(outputs, x, w, dy):
    ref_dx, ref_dw = rmsnorm_reference(x, w, dy)
    for got, ref in zip(outputs, (ref_dx, ref_dw)):
        close(got, ref.to(torch.bfloat16), torch.bfloat16)


@pytest.mark.parametrize("rows, cols", [(300, 32768), (5, 20480), (1000, 24576), (133, 32768), (7, 20000)])
@pytest.mark.gpu
@hopper
def test_rmsnorm_backward_over_long_rows_holds_the_row_in_shared_memory(rows, cols):
    x, w, dy = inputs(rows, cols)
    fd = rmsnorm_bwd_fd(torch.bfloat16)
    check_rmsnorm(fd.execute([x, w, dy]), x, w, dy)
    assert "row in shared memory" in fd.last_triton_code()


@pytest.mark.parametrize("misaligned_first", [False, True])
@pytest.mark.gpu
@hopper
def test_a_misaligned_input_takes_the_two_kernel_form(misaligned_first, monkeypatch):
    """A call whose x sits 2 bytes past an aligned address (the same sizes and strides: the
    same prepared launch) runs two kernels; alignment is checked at each call, so aligned
    calls keep the shared-row kernel whichever comes first."""
    from fuser.codegen import launch

    checked = []  # each call of the shared-row launch: whether it took the two kernels
    real = launch.SharedRowLaunch.__call__

    def call(self, inputs, device, dests=None):
        checked.append(launch.misaligned(inputs, self.staged))
        return real(self, inputs, device, dests)
    monkeypatch.setattr(launch.SharedRowLaunch, "__call__", call)
    # (one form, not timed: the timing's calls would be counted)
    monkeypatch.setattr(launch, "_fastest_form", lambda default, *a, **k: default)
    rows, cols = 64, 32768
    x, w, dy = inputs(rows, cols)
    buf = torch.empty(rows * cols + 1, device="cuda", dtype=torch.bfloat16)
    shifted = buf[1:].view(rows, cols)
    shifted.copy_(x)
    fd = rmsnorm_bwd_fd(torch.bfloat16)
    calls = [[x, w, dy], [shifted, w, dy]]
    for args in calls[::-1] if misaligned_first else calls + calls[:1]:
        check_rmsnorm(fd.execute(args), x, w, dy)
    assert checked == ([True, False] if misaligned_first else [False, True, False])


@pytest.mark.parametrize("rows, cols", [(133, 32768), (7, 20000)])
@pytest.mark.parametrize("schedule", range(4))
@pytest.mark.gpu
@hopper
def test_every_copy_schedule_the_launch_may_time(rows, cols, schedule, monkeypatch):
    """The copy schedules the launch times where SHARED_ROW_SCHEDULES names several (no chunk or
    the first ones held twice, one chunk or two a barrier): each of them, forced, against eager."""
    from fuser.codegen import launch

    monkeypatch.delenv("FUSER_AUTOTUNE", raising=False)  # (=0 would leave nothing to time)
    monkeypatch.setattr(launch, "SHARED_ROW_SCHEDULES", ((False, 1), (True, 1), (False, 2), (True, 2)))
    labels = []

    def pick(default, forms, *args, **kwargs):
        labels.extend(label for label, _ in forms)
        return default if schedule == 0 else forms[schedule][1]()
    monkeypatch.setattr(launch, "_fastest_form", pick)
    x, w, dy = inputs(rows, cols)
    fd = rmsnorm_bwd_fd(torch.bfloat16)
    outputs = fd.execute([x, w, dy])
    code = fd.last_triton_code()
    assert "row in shared memory" in code and len(labels) == 4
    held, batch = (int(n) for n in re.findall(r"\d+", labels[schedule]))
    assert ("_ahead = tl.allocate_shared_memory" in code) == (held > 0)
    chunks = chunks_of(code)
    assert code.count("async_copy.wait_group(") == -(-chunks // batch) + 1  # the first pass's, the last
    check_rmsnorm(outputs, x, w, dy)


@pytest.mark.gpu
@hopper
def test_the_plain_copy_schedule_runs_untimed_by_default(monkeypatch):
    """By default (SHARED_ROW_SCHEDULES: the plain schedule alone) the launch compiles and runs
    one shared-row kernel, with no chunk held twice and a wait a chunk, and times no schedule."""
    from fuser.codegen import launch

    monkeypatch.delenv("FUSER_AUTOTUNE", raising=False)
    timed = []
    real = launch._fastest_form
    monkeypatch.setattr(launch, "_fastest_form", lambda default, forms, *a, **k: (
        timed.extend(label for label, _ in forms), real(default, forms, *a, **k))[1])
    x, w, dy = inputs(133, 32768)
    fd = rmsnorm_bwd_fd(torch.bfloat16)
    outputs = fd.execute([x, w, dy])
    code = fd.last_triton_code()
    assert "row in shared memory" in code and not any("held twice" in label for label in timed)  # none timed
    assert "_ahead = tl.allocate_shared_memory" not in code
    assert chunks_of(code) == 8  # (32 warps of 4 bf16 a thread a chunk)
    assert code.count("async_copy.wait_group(") == chunks_of(code) + 1
    check_rmsnorm(outputs, x, w, dy)


@pytest.mark.gpu
@hopper
def test_jit_rmsnorm_backward_over_long_rows():
    def rmsnorm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

    x, w, dy = inputs(256, 32768)
    x.requires_grad_(True)
    w.requires_grad_(True)
    fuser.jit(rmsnorm)(x, w).backward(dy)
    got = (x.grad, w.grad)
    x.grad = w.grad = None
    rmsnorm(x, w).backward(dy)
    for a, e in zip(got, (x.grad, w.grad)):
        close(a, e, torch.bfloat16)


def layernorm_reference(x, w, dy, eps=1e-5):
    xf, dyf, wf = x.double(), dy.double(), w.double()
    var, mean = torch.var_mean(xf, -1, correction=0, keepdim=True)
    xhat = (xf - mean) * torch.rsqrt(var + eps)
    g = dyf * wf
    dx = torch.rsqrt(var + eps) * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx, (dyf * xhat).sum(0), dyf.sum(0)


# (300 and 1000 rows: programs that take several rows, and so each row's values loaded a row ahead)
@pytest.mark.parametrize("rows, cols", [(64, 32768), (7, 20000), (300, 32768), (1000, 24576)])
@pytest.mark.parametrize("stats_given", [False, True])
@pytest.mark.parametrize("form", ["apart", "two kernels"])
@pytest.mark.gpu
@hopper
def test_layernorm_backward_over_long_rows_in_either_form_it_times(rows, cols, stats_given, form, monkeypatch):
    """LayerNorm's two column sums do not fit the shared-row kernel's registers together: where
    rows are not split over pairs of programs (turned off here; tested below) the launch runs
    db apart (dx and dw in the shared-row kernel, db a column sum of dy), timed against two
    kernels where APART_TIMED says so. Each, forced, against float64."""
    from fuser.codegen import launch, shared_row

    monkeypatch.setattr(shared_row, "PAIRS", False)
    monkeypatch.setattr(launch, "APART_TIMED", True)  # (untimed by default: db apart runs)
    monkeypatch.delenv("FUSER_AUTOTUNE", raising=False)  # (=0 would leave the choice untimed)
    pick = (lambda default, forms, *a, **k: default) if form == "apart" else (
        lambda default, forms, *a, **k: forms[1][1]())
    monkeypatch.setattr(launch, "_fastest_form", pick)
    x, w, dy = inputs(rows, cols)
    args = [x, w, dy]
    if stats_given:
        var, mean = torch.var_mean(x.float(), -1, correction=0, keepdim=True)
        args += [mean, torch.rsqrt(var + 1e-5)]
    fd = layernorm_bwd_fd(torch.bfloat16, stats_as_inputs=stats_given)
    outputs = fd.execute(args)
    code = fd.last_triton_code()
    assert ("row in shared memory" in code and "_apart_" in code) == (form == "apart")
    for a, e in zip(outputs, layernorm_reference(x, w, dy), strict=True):
        close(a, e.to(torch.bfloat16), torch.bfloat16)


@pytest.mark.gpu
@hopper
def test_the_kept_kernel_compiles_beside_the_column_forms_db_times(tmp_path, monkeypatch):
    """db apart: preparing db's launch compiles its column forms side by side and times them;
    the shared-row kernel of dx and dw compiles in that batch (parallel_compile.joined_by), not
    alone at its first launch after the timing."""
    from fuser.codegen import autotune, parallel_compile, steps

    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSER_AUTOTUNE", raising=False)
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    batches, compiled = [], []
    together, precompile = parallel_compile.compile_together, steps._DirectStep.precompile

    def counted(jobs):
        batches.append(len(jobs))
        together(jobs)

    def noted(self, args, load=True):
        compiled.append((len(batches), self.fn.__name__))
        precompile(self, args, load)
    monkeypatch.setattr(parallel_compile, "compile_together", counted)
    monkeypatch.setattr(steps._DirectStep, "precompile", noted)
    x, w, dy = inputs(300, 32768)
    fd = layernorm_bwd_fd(torch.bfloat16, stats_as_inputs=False)
    outputs = fd.execute([x, w, dy])
    assert "row in shared memory" in fd.last_triton_code() and "_apart_" in fd.last_triton_code()
    first_batch = {name for batch, name in compiled if batch == 1}
    assert batches and batches[0] >= 3, batches  # db's forms (the kept kernel's jobs join inside)
    assert any("_kept_" in name for name in first_batch) and any("_apart_" in name for name in first_batch), compiled
    assert not any("_kept_" in name for batch, name in compiled if batch > 1), compiled  # not compiled again
    for a, e in zip(outputs, layernorm_reference(x, w, dy), strict=True):
        close(a, e.to(torch.bfloat16), torch.bfloat16)


# (1 and 7 rows: fewer than the pairs; 300 and 1000: pairs that take several rows, each
# exchanging its sums while the next row's first pass runs)
@pytest.mark.parametrize("rows, cols", [(1, 32768), (7, 32768), (300, 32768), (1000, 24576), (300, 20480)])
@pytest.mark.gpu
@hopper
def test_layernorm_backward_given_its_statistics_splits_each_row_over_a_pair(rows, cols):
    """Given mean and rstd (two passes over the row), the LayerNorm backward's rows too long
    for one program's dw and db accumulators are each split over a pair of programs that
    exchange their partial row sums (codegen/shared_row_pair.py). Three calls on fresh data,
    each against float64: a call that found its exchanged words left over from the last would
    take stale sums."""
    fd = layernorm_bwd_fd(torch.bfloat16, stats_as_inputs=True)
    for _ in range(3):
        x, w, dy = inputs(rows, cols)
        var, mean = torch.var_mean(x.float(), -1, correction=0, keepdim=True)
        outputs = fd.execute([x, w, dy, mean, torch.rsqrt(var + 1e-5)])
        assert "two Gluon programs a row" in fd.last_triton_code()
        for a, e in zip(outputs, layernorm_reference(x, w, dy), strict=True):
            close(a, e.to(torch.bfloat16), torch.bfloat16)
        # every exchanged word zero again (and `broken`, the last, never set)
        words = [t for k in fd.cache.last_runtime.launchers.values() for launch in k.launches.values()
                 if getattr(launch, "semaphores", None) is not None for t in launch.semaphores.by_stream.values()]
        assert len(words) == 1 and words[0].numel() == rows * 2 * 2 + 1 and not words[0].any()


@pytest.mark.gpu
@hopper
def test_layernorm_backward_recomputing_its_statistics_is_not_split_over_pairs():
    """Recomputing mean and rstd takes three passes over the row, which the pair form has not:
    the launch keeps db apart or two kernels."""
    x, w, dy = inputs(64, 32768)
    fd = layernorm_bwd_fd(torch.bfloat16, stats_as_inputs=False)
    outputs = fd.execute([x, w, dy])
    assert "two Gluon programs a row" not in fd.last_triton_code()
    for a, e in zip(outputs, layernorm_reference(x, w, dy), strict=True):
        close(a, e.to(torch.bfloat16), torch.bfloat16)


@pytest.mark.gpu
@hopper
def test_jit_layernorm_backward_over_long_rows():
    """Through fuser.jit (the forward saves mean and rstd: the backward's rows split over pairs
    of programs), two calls on fresh data, each against eager."""
    def layernorm(x, w, b):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    jitted = fuser.jit(layernorm)
    for _ in range(2):
        x, w, dy = inputs(64, 32768)
        b = torch.randn_like(w)
        for t in (x, w, b):
            t.requires_grad_(True)
        jitted(x, w, b).backward(dy)
        got = (x.grad, w.grad, b.grad)
        x.grad = w.grad = b.grad = None
        layernorm(x, w, b).backward(dy)
        for a, e in zip(got, (x.grad, w.grad, b.grad)):
            close(a, e, torch.bfloat16)


def test_the_form_is_off_without_a_gpu_or_when_turned_off(monkeypatch):
    from fuser.codegen.shared_row import shared_row_config

    plan = rmsnorm_plan(False)
    layout = Layout(((0,),), ((1,),))
    tensors = list(inputs(4, 32768, "cpu"))
    strides = [[32768, 1], [0, 1], [32768, 1]]
    assert shared_row_config(plan, layout, 32768, tensors, strides, [4, 32768], torch.device("cpu")) is None
    monkeypatch.setenv("FUSER_SHARED_ROW", "0")
    assert shared_row_config(plan, layout, 32768, tensors, strides, [4, 32768], torch.device("cuda")) is None


def on_a_hopper(monkeypatch):
    """shared_row_config as on an H200 (227 KiB of shared memory a block), on CPU."""
    from fuser.codegen import shared_row

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(shared_row, "max_shared_memory", lambda device: 227 * 1024)
    monkeypatch.setattr(shared_row, "gluon_names", lambda: frozenset({"full"}))
    return shared_row.shared_row_config


@pytest.mark.parametrize("cols, chunks, ahead, warps", [(32768, 8, 2, 32), (28672, 7, 3, 32), (24576, 12, 10, 16),
                                                       (20000, 10, 10, 16), (8192, 4, 4, 16)])
def test_the_gate_holds_as_many_first_chunks_twice_as_shared_memory_allows(cols, chunks, ahead, warps, monkeypatch):
    """x and dy (bf16, 4 bytes a column) and w (2 bytes, once): 6 bytes a column of 227 KiB,
    less the 1 KiB reserve; each chunk held twice takes 4 bytes of its columns more (at most
    every chunk: the next row whole). 4 bf16 a thread: chunks of 2048 columns on 16 warps, of
    4096 on 32 where 16 warps would unroll more than 12 chunks a pass."""
    gate = on_a_hopper(monkeypatch)
    plan, rows = rmsnorm_plan(False), 4
    x, w, dy = inputs(rows, cols, "cpu")
    cfg = gate(plan, Layout(((0,),), ((1,),)), cols, [x, w, dy], [[cols, 1], [0, 1], [cols, 1]], [rows, cols],
               torch.device("cuda"))
    assert (cfg.chunks, cfg.ahead, cfg.warps) == (chunks, ahead, warps)


def test_a_kept_kernel_of_three_passes_keeps_16_warps_where_its_chunks_are_few(monkeypatch):
    """The LayerNorm backward's kept kernel (db apart) at 18432 columns, where no pair form
    applies: 9 chunks of 2048 on 16 warps (on 32, 4.5 chunks of 4096 took 333 us against 251
    on the H200)."""
    gate = on_a_hopper(monkeypatch)
    plan, rows, cols = layernorm_kept_plan(False), 4, 18432
    x, w, dy = inputs(rows, cols, "cpu")
    cfg = gate(plan, Layout(((0,),), ((1,),)), cols, [x, dy, w], [[cols, 1], [cols, 1], [0, 1]], [rows, cols],
               torch.device("cuda"))
    assert (cfg.warps, cfg.chunks) == (16, 9)


@pytest.mark.parametrize("kind, passes, warps", [("rmsnorm recomputing rstd", 2, 32), ("rmsnorm given rstd", 2, 32),
                                                  ("layernorm kept, recomputing mean and rstd", 3, 16)])
def test_more_warps_only_for_kernels_of_two_passes(kind, passes, warps, monkeypatch):
    """At 32768 columns 16 warps would unroll 16 chunks a pass: a kernel of two passes takes 32
    warps (8 chunks); one with a pass between them keeps 16 (on 32 the LayerNorm's ran 2.5%
    slower on the H200)."""
    from fuser.codegen.shared_row import row_passes

    gate = on_a_hopper(monkeypatch)
    plan = layernorm_kept_plan(False) if kind.startswith("layernorm") else rmsnorm_plan(kind.endswith("given rstd"))
    rows, cols, layout = 4, 32768, Layout(((0,),), ((1,),))
    x, w, dy = inputs(rows, cols, "cpu")
    tensors, strides = [x, dy, w], [[cols, 1], [cols, 1], [0, 1]]
    if kind.startswith("rmsnorm"):
        tensors, strides = [x, w, dy], [[cols, 1], [0, 1], [cols, 1]]
        if kind.endswith("given rstd"):
            tensors, strides = tensors + [torch.rand(rows, 1)], strides + [[1, 0]]
    cfg = gate(plan, layout, cols, tensors, strides, [rows, cols], torch.device("cuda"))
    assert row_passes(plan, layout, cfg) == passes
    assert (cfg.warps, cfg.chunks) == (warps, 32768 // (4 * 32 * warps))


_COPY = re.compile(r"COPY\((T\w+)\.index\((.+?)\), T\w+_ptr \+ (?:(pid|nxt) \* T\w+_stride0 \+ )?"
                   r"(?:\((\d+) \* BLOCK1 \+ cols\)|(c)) \*")
_LOAD = re.compile(r"(T\w+)\.index\((.+?)\)\.load\(")


_CHUNK_LOOP = re.compile(r"(\s*)for chunk in range\((\d+), (\d+)\):")


def _unroll_chunk_loops(lines: list[str]) -> list[str]:
    """A pass looping over the chunks, written out chunk by chunk."""
    out, k = [], 0
    while k < len(lines):
        m = _CHUNK_LOOP.fullmatch(lines[k])
        if m is None:
            out.append(lines[k])
            k += 1
            continue
        indent, body = len(m.group(1)), []
        k += 1
        while k < len(lines) and len(lines[k]) - len(lines[k].lstrip()) > indent:
            body.append(lines[k])
            k += 1
        for j in range(int(m.group(2)), int(m.group(3))):
            out += [re.sub(r"\bchunk\b", str(j), line) for line in body]
    return out


_OUTLINED = re.compile(r"@gluon\.jit\ndef (\w+_pass\w*)\((.*?)\):\n((?:    .*\n)+)")
_CALL = re.compile(r"(\s*)(?:([\w, ]+) = )?(\w+_pass\w*)\((.*)\)$")


def _split_args(text: str) -> list[str]:
    """A call's arguments, split at its top-level commas."""
    args, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            args.append(text[start:k].strip())
            start = k + 1
    return args + [text[start:].strip()]


def inline_outlined(source: str) -> str:
    """`source` with each call of an outlined pass (codegen/outline.py) replaced by the pass's
    lines, its parameters replaced by the call's arguments (a chunk's `tl.to_tensor(j)` by j),
    as Triton's inliner and constant propagation make of it; the functions themselves dropped."""
    functions = {m.group(1): (m.group(2).split(", "), m.group(3).splitlines()) for m in _OUTLINED.finditer(source)}
    out = []
    for line in _OUTLINED.sub("", source).splitlines():
        m = _CALL.fullmatch(line)
        if m is None or m.group(3) not in functions:
            out.append(line)
            continue
        params, body = functions[m.group(3)]
        args = [re.sub(r"^tl\.to_tensor\((\d+)\)$", r"\1", a) for a in _split_args(m.group(4))]
        names = dict(zip(params, args))
        for t in body:
            if t.strip().startswith("return "):
                continue
            out.append(m.group(1) + re.sub(r"\b\w+\b", lambda n: names.get(n.group(0), n.group(0)), t[4:]))
    return "\n".join(out) + "\n"


def simulate_copies(source: str, iterations: int = 3) -> int:
    """Run the copies, waits and loads of a shared-row kernel's source over `iterations` rows of
    one program (pid 0, one program), as the hardware may: a copy lands in its slot at any time
    until a wait_group leaves its group out of the last N. Every load must find the chunk of
    the row it reads there, landed; returns the number of loads checked."""
    head, body = inline_outlined(source).split("    for row in range(pid, R, tl.num_programs(0)):\n")
    body = "\n".join(_unroll_chunk_loops(body.splitlines()))
    slots: dict = {}  # (buffer, slot) -> [row, chunk, landed]
    copied: set = set()  # (buffer, row, chunk): each copied once
    groups: list[list] = [[]]  # open copy groups, oldest first; the last is being filled
    checked = 0

    def run(lines, row, par):
        nonlocal checked
        chunk = None
        for line in lines:
            line = line.strip()
            if line.startswith("c_start = "):
                chunk = int(line.split()[2])
            elif (m := _COPY.search(line)) is not None:
                buffer, index, which, col, here = m.groups()
                content = [None if which is None else row + (which == "nxt"), chunk if here else int(col), False]
                assert (buffer, *content[:2]) not in copied, f"{buffer} row {content[0]} chunk {content[1]} copied twice"
                copied.add((buffer, *content[:2]))
                slots[(buffer, eval(index, {"par": par}))] = content
                groups[-1].append(content)
            elif line == "async_copy.commit_group()":
                groups.append([])
            elif line.startswith("async_copy.wait_group("):
                n = int(line[len("async_copy.wait_group("):-1])
                done = groups[:-1][:len(groups) - 1 - n] if n else groups[:-1]
                for content in (c for g in done for c in g):
                    content[2] = True
                del groups[:len(done)]
            for buffer, index in _LOAD.findall(line):
                got = slots.get((buffer, eval(index, {"par": par})))
                want_row = None if buffer in column_buffers else row
                assert got == [want_row, chunk, True], f"row {row} chunk {chunk}: {buffer}[{index}] holds {got}"
                checked += 1

    column_buffers = {m.group(1) for m in _COPY.finditer(head) if m.group(3) is None}
    run(head.splitlines(), 0, 0)
    for it in range(iterations):
        run(body.splitlines(), it, it % 2)
    return checked


def layernorm_plan(stats_given: bool):
    """The whole LayerNorm backward's inner-outer plan (dx, dw and db), planned on CPU."""
    fd = layernorm_bwd_fd(torch.bfloat16, stats_as_inputs=stats_given)
    x, w, dy = inputs(8, 256, "cpu")
    args = [x, w, dy]
    if stats_given:
        var, mean = torch.var_mean(x.float(), -1, correction=0, keepdim=True)
        args += [mean, torch.rsqrt(var + 1e-5)]
    fd.execute(args)
    (launcher,) = [k for k in fd.cache.last_runtime.launchers.values() if k.plan.parts is not None]
    return launcher.plan


def layernorm_kept_plan(stats_given: bool):
    """The LayerNorm backward's plan with db apart (ApartParts.kept): three passes over the row
    where mean and rstd are recomputed (var_mean; the row sums; dx and dw), two where given."""
    return layernorm_plan(stats_given).parts.apart.kept


@pytest.mark.parametrize("chunks, ahead, batch", [(4, 0, 1), (4, 2, 1), (4, 4, 1), (16, 4, 1), (9, 0, 2), (7, 3, 2)])
def test_a_middle_pass_loops_and_finds_its_chunks(chunks, ahead, batch):
    """A pass between the first and the last (the recomputing LayerNorm backward's row sums)
    loops over the chunks, held twice or not, rather than unrolling them."""
    plan = layernorm_kept_plan(False)
    cfg = SharedRowConfig(4, 16, chunks, along_the_row(plan), ahead=ahead, batch=batch)
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), "k", cfg)
    assert ks.source.count("for chunk in range(") == (1 if ahead in (0, chunks) else 2)
    # the first and last passes, unrolled: a call a chunk of each pass's function of a chunk
    assert ks.source.count("tl.to_tensor(0)") == 2
    assert inline_outlined(ks.source).count("c_start = 0 * BLOCK1") == 2
    assert simulate_copies(ks.source) >= 3 * chunks * 3  # x and dy, each pass of each row


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
@pytest.mark.parametrize("stats_given", [False, True])
def test_the_kept_kernels_compile_without_a_stack(stats_given, fresh_triton_cache):
    """The LayerNorm backward's kept kernels at 32768 columns (sm_90): recomputing mean and rstd
    (three passes; with its middle pass unrolled too it spilled a 128-byte stack), and given
    them (two values a row, each loaded a row ahead)."""
    plan = layernorm_kept_plan(stats_given)
    cfg = SharedRowConfig(4, 16, 16, along_the_row(plan))
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), f"fuser_kept_{int(stats_given)}", cfg)
    assert ks.source.count("_next = tl.load(") == (4 if stats_given else 0)
    shared, usage = compile_for_sm90(ks, cfg)
    if usage == NO_CUOBJDUMP:
        pytest.skip(usage)
    assert re.search(r"STACK:0\b", usage), usage


@pytest.mark.parametrize("stats_given", [False, True], ids=["rmsnorm given rstd", "layernorm given mean, rstd"])
def test_a_value_a_row_is_loaded_a_row_ahead(stats_given):
    """A saved mean or rstd is loaded for the next row as this row starts (its latency from HBM
    stalled each row's first pass): the first row's before the loop, at the program's row; in
    the loop, this row's value taken from the last load before the next row's is loaded. An
    input along the row (x, dy) or the columns (w) is not."""
    plan = layernorm_kept_plan(stats_given) if stats_given else rmsnorm_plan(True)
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), "k", SharedRowConfig(4, 16, 4, along_the_row(plan)))
    head, body = ks.source.split("for row in range(pid, R, tl.num_programs(0)):")
    first = re.findall(r"(T\d+)_next = tl\.load\((T\d+)_ptr \+ \(pid \+ ", head)
    assert len(first) == (2 if stats_given else 1) and all(a == b for a, b in first)
    lines = [line.strip() for line in body.splitlines()]
    for name, _ in first:
        took = lines.index(f"{name} = {name}_next.to(tl.float32)")
        assert lines[took + 1].startswith(f"{name}_next = tl.load({name}_ptr + (nxt + ")
        assert not any(re.match(rf"{name} = tl\.load", line) for line in lines)
        assert min(k for k, line in enumerate(lines) if re.search(rf"\b{name}\b", line)) == took


@pytest.mark.parametrize("given_rstd", [True, False])
@pytest.mark.parametrize("chunks, ahead, batch", [(4, 0, 1), (4, 1, 1), (4, 4, 1), (16, 4, 1), (1, 1, 1),
                                                  (4, 0, 2), (5, 1, 2), (16, 4, 2), (3, 0, 4), (2, 2, 2),
                                                  (9, 0, 2), (11, 5, 2)])
def test_every_load_finds_its_chunk_copied_and_waited_for(given_rstd, chunks, ahead, batch):
    """The copy schedule of the generated kernel, simulated: a row's first `ahead` chunks held
    twice by parity, the next row's copied into the other slots in the first pass, the rest
    copied in the last pass into the slots the row leaves, `batch` chunks a round, each wait
    (one a batch) leaving out exactly the groups committed after the chunks it waits for."""
    plan = rmsnorm_plan(given_rstd)
    cfg = SharedRowConfig(4, 16, chunks, along_the_row(plan), ahead=ahead, batch=batch)
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), "k", cfg)
    assert simulate_copies(ks.source) >= 3 * chunks * 2  # x and dy, each chunk of each row at least


def test_the_simulation_finds_a_wait_too_short_and_a_slot_overwritten_early():
    plan = rmsnorm_plan(True)
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), "k", SharedRowConfig(4, 16, 4, along_the_row(plan),
                                                                                    ahead=1))
    simulate_copies(ks.source)
    with pytest.raises(AssertionError, match="holds"):  # chunk 1's wait leaving one group too many out
        simulate_copies(ks.source.replace("async_copy.wait_group(3)", "async_copy.wait_group(4)", 1))
    with pytest.raises(AssertionError, match="holds"):  # the next row's chunk 0 into this row's slot
        simulate_copies(ks.source.replace("(1 - par) * 1 + 0", "par * 1 + 0", 1))


@pytest.fixture
def fresh_triton_cache(tmp_path, monkeypatch):
    """Triton compiles here, not from its cache: a kernel compiled once would hide a compile
    that now fails."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
@pytest.mark.parametrize("warps, most_spilled", [(WIDE_WARPS, 64), (16, 0)])
@pytest.mark.parametrize("given_rstd", [True, False])
def test_the_kernel_compiles_for_hopper_within_shared_memory_and_registers(given_rstd, warps, most_spilled,
                                                                           fresh_triton_cache):
    """The generated source, compiled for sm_90 as the launch specializes it (16-byte aligned
    pointers and row strides, unit column strides): it fits a block's shared memory and keeps
    its accumulators in registers, in the form fuser.jit runs (rstd given: one row sum) and in
    the definition that recomputes rstd, whose second row sum shares the first's pass (rstd
    factored out of it; with a third pass it spilled a 128-byte stack and read 0.72-0.73 of copy
    at 4096x32768 on the H200 against 0.80). On 16 warps no stack; on the 32 the launch takes
    (64 registers a thread) a few spilled words: 0-24 bytes with Triton 3.6, 40-48 with 3.9."""
    per_thread = SHARED_ROW_VECTOR_BYTES // 2
    cols, plan = 32768, rmsnorm_plan(given_rstd)
    # the plain copy schedule, which the launch runs (the gate's four chunks held twice spilled
    # 40 bytes with Triton 3.6, the H200's, recomputing rstd on 16 warps)
    cfg = SharedRowConfig(per_thread, warps, cols // (per_thread * 32 * warps), along_the_row(plan))
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), f"fuser_shared_row_test_{warps}", cfg)
    assert ks is not None
    shared, usage = compile_for_sm90(ks, cfg)
    assert shared <= 227 * 1024
    assert inline_outlined(ks.source).count("c_start = 0 * BLOCK1") == 2  # passes over the row: its sums, then dx
    if usage == NO_CUOBJDUMP:
        pytest.skip(usage)
    assert int(re.search(r"STACK:(\d+)", usage).group(1)) <= most_spilled, usage


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
def test_the_kernel_compiles_with_64_bit_offsets(fresh_triton_cache):
    """Rows x columns of 2^31 or more (65536x32768) index in int64, the row too: the parity
    that picks a chunk's slot must still be an int32 index."""
    plan = rmsnorm_plan(True)
    cfg = SharedRowConfig(4, 16, 16, along_the_row(plan), ahead=4)
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), "fuser_shared_row_int64", cfg)
    shared, _ = compile_for_sm90(ks, cfg, int64=True)
    assert shared <= 227 * 1024


def test_an_input_expanded_along_the_row_is_read_with_plain_loads(monkeypatch):
    """The gate stages the inputs that vary along the row at this call, and the kernel copies
    exactly those: dy expanded from a row (`ones.expand`, as `.sum().backward()` makes it)
    has column stride 0 and is loaded, not copied (a 2-byte copy would not compile)."""
    from fuser.codegen import shared_row

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(shared_row, "max_shared_memory", lambda device: 227 * 1024)
    monkeypatch.setattr(shared_row, "gluon_names", lambda: frozenset({"full"}))
    plan, cols = rmsnorm_plan(False), 32768
    x, w, dy = inputs(4, cols, "cpu")
    # (the plan's inputs: x, dy, w)
    cfg = shared_row.shared_row_config(plan, Layout(((0,),), ((1,),)), cols, [x, dy.expand(4, cols), w],
                                       [[cols, 1], [0, 0], [0, 1]], [4, cols], torch.device("cuda"))
    assert cfg is not None and cfg.staged == (0, 2)  # x and w; dy (input 1) is not staged
    monkeypatch.undo()
    ks = generate_shared_row(plan, Layout(((0,),), ((1,),)), "k", cfg)
    names = [v.name for v in plan.inputs]
    # (x's chunks may all be held twice: its buffer is then `_ahead` alone)
    assert re.search(rf"T{names[0]}_(smem|ahead) = ", ks.source) and f"T{names[2]}_smem = " in ks.source
    assert f"T{names[1]}_smem" not in ks.source and f"T{names[1]}_ahead" not in ks.source
    # every chunk of every pass reads the expanded row's one line: each load asks L2 to keep it
    loads = re.findall(rf"tl\.load\(T{names[1]}_ptr[^\n]*", ks.source)
    assert len(loads) == 2 and all('eviction_policy="evict_last"' in t for t in loads) and "@evict" not in ks.source
    assert not re.search(r"\bS\d+\b", ks.source)  # shared buffers named after tensors: canonical form renames them


def test_a_kernel_gluon_cannot_compile_is_declined_once():
    """A plan whose code names what Gluon lacks (a max over rows: `tl.PropagateNan`) keeps the
    two-kernel form; the declined key is remembered outside the launcher's kernels, which
    `cache_info` lists."""
    from fuser.codegen.launch import KernelLauncher

    F32 = DataType.Float
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, F32)
        fd.add_output(fd.ops.cast(fd.ops.div(xf, fd.ops.sum(xf, [-1], True)), DataType.BFloat16))
        fd.add_output(fd.ops.max(xf, [0]))
    fd.execute([torch.randn(8, 256, dtype=torch.bfloat16)])
    (launcher,) = [k for k in fd.cache.last_runtime.launchers.values() if k.plan.parts is not None]
    fresh = KernelLauncher(launcher.plan, "fuser_declined")
    cfg = SharedRowConfig(4, 16, 16, (0,))
    layout = Layout(((0,),), ((1,),))
    assert fresh.kernel(layout, "shared_row", "cuda", config=cfg) is None
    assert fresh.kernel(layout, "shared_row", "cuda", config=cfg) is None
    assert len(fresh.declined) == 1 and None not in fresh.variants.values()


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
def test_a_column_sum_can_accumulate_in_shared_memory(fresh_triton_cache):
    """The LayerNorm backward with dy alone staged and db's accumulator in shared memory (a form
    benchmarks/sweep_shared_row.py measures; fuser's launches keep accumulators in registers)
    compiles for sm_90 within a block's shared memory: 64 KB of dy, 128 KB of db's partial."""
    from benchmarks.sweep_shared_row import generate

    ks, cfg = generate("layernorm", ("dy",), (1,), 4, 16)
    assert ks is not None and "_smem.index(0).store(" in ks.source
    shared, _ = compile_for_sm90(ks, cfg)
    assert 192 * 1024 <= shared <= 227 * 1024


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
def test_a_process_that_interpreted_kernels_still_compiles_gluon_ones(tmp_path):
    """Triton 3.9 imports Gluon during the first interpreted launch, while the interpreter has
    Triton's math builtins swapped for its own; Gluon imported then keeps them, and a later
    Gluon kernel calling one (the RMSNorm backward definition's tl.rsqrt) failed to compile.
    fuser imports Gluon before it interprets (codegen/compile.py). A fresh process: a test run
    before this one may have imported Gluon already."""
    script = """
import sys, torch
sys.path.insert(0, ".")
from fuser import DataType, FusionDefinition
with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
    fd.add_output(fd.ops.rsqrt(x))
fd.execute([torch.rand(16) + 1])  # Triton's interpreter, first in this process
from tests.codegen.test_shared_row import along_the_row, rmsnorm_plan
from benchmarks.sweep_shared_row import compile_for_sm90
from fuser.codegen.layout import Layout
from fuser.codegen.shared_row import SharedRowConfig, generate_shared_row
plan = rmsnorm_plan(False)
cfg = SharedRowConfig(4, 16, 16, along_the_row(plan))
print(compile_for_sm90(generate_shared_row(plan, Layout(((0,),), ((1,),)), "fuser_interpreted_first", cfg), cfg))
"""
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"), FUSER_CACHE_DIR=str(tmp_path / "fuser"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
@pytest.mark.parametrize("v2", [False, True])
def test_the_layernorm_pair_probe_compiles_for_hopper(v2, fresh_triton_cache, capsys):
    """benchmarks/sweep_layernorm_pair.py (a probe: a row split over two processors that
    exchange their row sums; `v2` its second form, the exchange's latency hidden) compiles for
    sm_90 within a block's shared memory, without a stack of spills, in its first configuration."""
    from benchmarks import sweep_layernorm_pair as pair

    pair.compile_only(32768, 4, 16, v2)
    line = capsys.readouterr().out
    shared = int(re.search(r"shared (\d+) B", line).group(1))
    assert shared <= 227 * 1024, line
    if "REG" in line:
        assert re.search(r"STACK:0\b", line), line
