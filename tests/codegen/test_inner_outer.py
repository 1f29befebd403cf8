"""The inner-outer template: a norm's backward (row reductions for dx, column reductions for dw
and db) as one persistent kernel plus the combine step of its per-program partial sums, against
eager PyTorch. On the interpreter the persistent kernel runs a few programs
(heuristics.INNER_OUTER_INTERPRETER_PROGRAMS), so partial rows come from several programs, each
over several row blocks."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics
from fuser.schedulers.plan import Template

F32 = DataType.Float
SIZES = [(1, 1), (7, 5), (37, 33), (130, 100), (37, 256), (130, 1), (1, 256), (7, 100)]
# dx, dw and db against an fp32 reference, by input dtype (bf16: the outputs round to bf16)
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 5e-2)}


def dt(torch_dtype):
    return DataType.from_torch(torch_dtype)


def close(actual, expected, dtype):
    rtol, atol = TOL[dtype]
    assert actual.dtype == dtype and actual.shape == expected.shape
    # a sum over rows grows with them: scale the absolute tolerance by the reference's size
    atol = atol * max(1.0, expected.abs().max().item() / 4)
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol)


def templates(fd):
    return [s.params.template if s.params is not None else s.kind for s in fd.last_segments()]


def rmsnorm_bwd_fd(dtype, eps=1e-6):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dt(dtype))
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=dt(dtype))
        dy = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dt(dtype))
        n = x.shape()[1]
        xf, dyf = fd.ops.cast(x, F32), fd.ops.cast(dy, F32)
        rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.div(fd.ops.sum(fd.ops.mul(xf, xf), [-1], True), n), eps))
        xhat = fd.ops.mul(xf, rstd)
        g = fd.ops.mul(dyf, fd.ops.cast(w, F32))
        proj = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), [-1], True), n)
        fd.add_output(fd.ops.cast(fd.ops.mul(rstd, fd.ops.sub(g, fd.ops.mul(xhat, proj))), dt(dtype)))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(dyf, xhat), [0]), dt(dtype)))
    return fd


def layernorm_bwd_fd(dtype, stats_as_inputs, eps=1e-5):
    """dx, dw, db of layer norm; mean and rstd recomputed with var_mean or given as inputs."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dt(dtype))
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=dt(dtype))
        dy = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dt(dtype))
        n = x.shape()[1]
        xf, dyf = fd.ops.cast(x, F32), fd.ops.cast(dy, F32)
        if stats_as_inputs:
            mean = fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=F32)
            rstd = fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=F32)
        else:
            var, mean = fd.ops.var_mean(xf, [-1], 0, True)
            rstd = fd.ops.rsqrt(fd.ops.add(var, eps))
        xhat = fd.ops.mul(fd.ops.sub(xf, mean), rstd)
        g = fd.ops.mul(dyf, fd.ops.cast(w, F32))
        mg = fd.ops.div(fd.ops.sum(g, [-1], True), n)
        proj = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), [-1], True), n)
        dx = fd.ops.mul(rstd, fd.ops.sub(fd.ops.sub(g, mg), fd.ops.mul(xhat, proj)))
        fd.add_output(fd.ops.cast(dx, dt(dtype)))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(dyf, xhat), [0]), dt(dtype)))
        fd.add_output(fd.ops.cast(fd.ops.sum(dyf, [0]), dt(dtype)))
    return fd


def rmsnorm_grads(x, w, dy, eps=1e-6):
    xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
    (xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + eps) * wr).backward(dy.float())
    return xr.grad, wr.grad


def layernorm_grads(x, w, dy, eps=1e-5):
    xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
    br = torch.zeros_like(wr, requires_grad=True)
    torch.nn.functional.layer_norm(xr, (x.shape[-1],), wr, br, eps).backward(dy.float())
    return xr.grad, wr.grad, br.grad


def inputs(rows, cols, dtype, device):
    return (torch.randn(rows, cols, dtype=dtype, device=device), torch.randn(cols, dtype=dtype, device=device),
            torch.randn(rows, cols, dtype=dtype, device=device))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", SIZES)
def test_rmsnorm_backward(dtype, rows, cols, device):
    fd = rmsnorm_bwd_fd(dtype)
    x, w, dy = inputs(rows, cols, dtype, device)
    dx, dw = fd.execute([x, w, dy])
    ref_dx, ref_dw = rmsnorm_grads(x, w, dy)
    close(dx, ref_dx, dtype)
    close(dw, ref_dw, dtype)
    assert templates(fd) == [Template.inner_outer]


@pytest.mark.parametrize("stats_as_inputs", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", SIZES)
def test_layernorm_backward(dtype, rows, cols, stats_as_inputs, device):
    fd = layernorm_bwd_fd(dtype, stats_as_inputs)
    x, w, dy = inputs(rows, cols, dtype, device)
    args = [x, w, dy]
    if stats_as_inputs:
        var, mean = torch.var_mean(x.float(), -1, correction=0, keepdim=True)
        args += [mean, torch.rsqrt(var + 1e-5)]
    dx, dw, db = fd.execute(args)
    for actual, expected in zip((dx, dw, db), layernorm_grads(x, w, dy)):
        close(actual, expected, dtype)
    assert templates(fd) == [Template.inner_outer]


def test_one_kernel_and_its_combine_step():
    fd = layernorm_bwd_fd(torch.bfloat16, False)
    x, w, dy = inputs(130, 100, torch.bfloat16, "cpu")
    fd.execute([x, w, dy])
    (seg,) = fd.last_segments()
    assert seg.kind.value == "kernel" and "inner-outer" in seg.why
    code = fd.last_triton_code()
    # the pass over rows stores one partial row per program for dw and db; the combine sums them
    assert code.count("def fuser_") == 2
    assert "for r_start in tl.range(pid * BLOCK0, R, tl.num_programs(0) * BLOCK0, num_stages=" in code
    assert "tl.store(W0_ptr + pid * C + c" in code and "tl.store(W1_ptr + pid * C + c" in code
    assert "split (combine)" in code


def test_several_programs_each_over_several_rows(monkeypatch):
    # rows spread over the programs round-robin, the last block of rows partial
    monkeypatch.setattr(heuristics, "INNER_OUTER_INTERPRETER_PROGRAMS", 4)
    monkeypatch.setattr(heuristics, "TILE_ELEMENTS", 64)  # 2 rows a block of 33 columns
    fd = rmsnorm_bwd_fd(torch.float32)
    x, w, dy = inputs(19, 33, torch.float32, "cpu")
    dx, dw = fd.execute([x, w, dy])
    ref_dx, ref_dw = rmsnorm_grads(x, w, dy)
    close(dx, ref_dx, torch.float32)
    close(dw, ref_dw, torch.float32)


def test_combine_splits_columns_for_every_processor(monkeypatch):
    """The combine step takes fewer columns a program (down to 16) until there are two programs
    a processor: 100 columns with 8 processors run 7 programs of 16 columns, and dw still
    matches."""
    from fuser.codegen import launch
    assert heuristics.inner_outer_combine(4096, 264, 132).block1 == 16
    assert heuristics.inner_outer_combine(8192, 264, 132).block1 == 16
    assert heuristics.inner_outer_combine(32768, 264, 132).block1 == 64
    assert heuristics.inner_outer_combine(4096, 264, 0).block1 == 128
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    monkeypatch.setattr(heuristics, "INNER_OUTER_INTERPRETER_PROGRAMS", 3)
    launched = []
    real_call = launch.Launch.__call__
    monkeypatch.setattr(launch.Launch, "__call__",
                        lambda self, *a, **k: launched.append([s.kwargs["BLOCK1"] for s, *_ in self.steps])
                        or real_call(self, *a, **k))
    fd = rmsnorm_bwd_fd(torch.float32)
    x, w, dy = inputs(19, 100, torch.float32, "cpu")
    dx, dw = fd.execute([x, w, dy])
    assert launched[-1][1] == 16
    ref_dx, ref_dw = rmsnorm_grads(x, w, dy)
    close(dx, ref_dx, torch.float32)
    close(dw, ref_dw, torch.float32)


def norm_case(kind, rows, cols, device):
    """(definition, inputs, eager gradients) of one backward: rmsnorm, layernorm recomputing
    mean and rstd, or layernorm given them."""
    x, w, dy = inputs(rows, cols, torch.float32, device)
    if kind == "rmsnorm":
        return rmsnorm_bwd_fd(torch.float32), [x, w, dy], rmsnorm_grads(x, w, dy)
    args = [x, w, dy]
    if kind == "layernorm_stats":
        var, mean = torch.var_mean(x, -1, correction=0, keepdim=True)
        args += [mean, torch.rsqrt(var + 1e-5)]
    return layernorm_bwd_fd(torch.float32, kind == "layernorm_stats"), args, layernorm_grads(x, w, dy)


@pytest.mark.parametrize("kind,looped_rows", [("rmsnorm", True), ("layernorm", False), ("layernorm_stats", True)])
def test_long_rows_run_as_two_kernels(monkeypatch, kind, looped_rows, device):
    # rows too long for registers: a row kernel (dx, and the row statistics dw needs) and a
    # column kernel, as the segmenter cut the group before the inner-outer template
    monkeypatch.setattr(heuristics, "INNER_OUTER_MAX_PERSISTENT", 32)
    if looped_rows:  # the row kernel loops over the row too (var_mean's looped form is slow interpreted)
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    fd, args, expected = norm_case(kind, 37, 100, device)
    for actual, ref in zip(fd.execute(args), expected):
        close(actual, ref, torch.float32)
    assert templates(fd) == [Template.inner_outer]
    code = fd.last_triton_code()
    assert "_rows_" in code and "_columns_" in code and "tl.num_programs(0)" not in code
    assert ("_rows_looped" in code) == looped_rows
    # short rows in the same definition take the one-pass kernel
    _, args, expected = norm_case(kind, 37, 20, device)
    for actual, ref in zip(fd.execute(args), expected):
        close(actual, ref, torch.float32)
    assert "tl.num_programs(0)" in fd.last_triton_code()


def test_three_dims_rows_folded(device):
    # rows over two axes [B, T, N]: dw sums over both
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=True, dtype=F32)
        dy = fd.define_tensor(shape=[-1, -1, -1], contiguity=True, dtype=F32)
        rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.div(fd.ops.sum(fd.ops.mul(x, x), [-1], True), x.shape()[2]), 1e-6))
        xhat = fd.ops.mul(x, rstd)
        fd.add_output(fd.ops.mul(dy, xhat))
        fd.add_output(fd.ops.sum(fd.ops.mul(dy, xhat), [0, 1]))
        fd.add_output(fd.ops.max(dy, [0, 1]))
    x, dy = torch.randn(3, 5, 33, device=device), torch.randn(3, 5, 33, device=device)
    y, dw, m = fd.execute([x, dy])
    xhat = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(y, dy * xhat)
    torch.testing.assert_close(dw, (dy * xhat).sum((0, 1)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m, dy.amax((0, 1)))
    assert templates(fd) == [Template.inner_outer]


def test_column_result_used_along_rows_is_cut(device):
    # x - mean over rows needs the whole column sum before any row: not one pass
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        centered = fd.ops.sub(x, fd.ops.div(fd.ops.sum(x, [0], True), x.shape()[0]))
        fd.add_output(fd.ops.sum(fd.ops.mul(centered, centered), [-1]))
    x = torch.randn(7, 33, device=device)
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, (x - x.mean(0)).pow(2).sum(-1), rtol=1e-5, atol=1e-5)
    assert Template.inner_outer not in templates(fd)
    assert len(fd.last_segments()) == 2


def test_siblings_sharing_inputs_join():
    # dx and db are computed from the inputs only (no value flows between them): the segmenter
    # joins the two groups because the inner-outer plan reads x and dy once
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        dy = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        fd.add_output(fd.ops.mul(dy, fd.ops.sum(fd.ops.mul(x, dy), [-1], True)))
        fd.add_output(fd.ops.sum(fd.ops.mul(dy, x), [0]))
    x, dy = torch.randn(37, 33), torch.randn(37, 33)
    a, b = fd.execute([x, dy])
    torch.testing.assert_close(a, dy * (x * dy).sum(-1, keepdim=True), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b, (dy * x).sum(0), rtol=1e-5, atol=1e-5)
    assert templates(fd) == [Template.inner_outer]


class RMSNorm(torch.nn.Module):
    def __init__(self, n, dtype):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n, dtype=dtype))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight.float()).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_jit_layer_norm_training(dtype):
    def ln(x, w, b):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)

    jitted = fuser.jit(ln)
    x = torch.randn(37, 33, dtype=dtype, requires_grad=True)
    w, b = (torch.randn(33, dtype=dtype, requires_grad=True) for _ in range(2))
    dy = torch.randn(37, 33, dtype=dtype)
    jitted(x, w, b).backward(dy)
    got = [t.grad for t in (x, w, b)]
    expected = layernorm_grads(x.detach(), w.detach(), dy)
    for actual, ref in zip(got, expected):
        close(actual, ref, dtype)
    text = fuser.explain(jitted, x, w, b)
    backward = str(text).split("backward: fusion")[1]
    assert backward.count("kernel segment") == 1 and "inner-outer" in backward


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_jit_rmsnorm_module_training(dtype):
    module = RMSNorm(33, dtype)
    jitted = fuser.jit(module)
    x = torch.randn(5, 7, 33, dtype=dtype, requires_grad=True)
    dy = torch.randn(5, 7, 33, dtype=dtype)
    jitted(x).backward(dy)
    gx, gw = x.grad, module.weight.grad
    ref_dx, ref_dw = rmsnorm_grads(x.detach().reshape(35, 33), module.weight.detach(), dy.reshape(35, 33))
    close(gx.reshape(35, 33), ref_dx, dtype)
    close(gw, ref_dw, dtype)
    text = str(fuser.explain(jitted, x))
    backward = text.split("backward: fusion")[1]
    assert backward.count("kernel segment") == 1 and "inner-outer" in backward


def test_a_row_sum_of_a_factor_from_another_row_sum_shares_its_pass(monkeypatch, device):
    """The RMSNorm backward recomputing rstd: sum(g * x * rstd) waits for rstd, from sum(x * x),
    only through a factor constant along the row; the looped row kernel sums g * x beside x * x
    and multiplies by rstd after the pass (two passes over the row, not three)."""
    monkeypatch.setattr(heuristics, "INNER_OUTER_MAX_PERSISTENT", 32)
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    fd, args, expected = norm_case("rmsnorm", 37, 100, device)
    for actual, ref in zip(fd.execute(args), expected):
        close(actual, ref, torch.float32)
    code = fd.last_triton_code()
    rows_kernel = code[code.index("_rows_looped"):code.index("_columns_")]
    assert rows_kernel.count("for c_start in") == 2


def planned(fd, args):
    """The inner-outer plan of a definition, planned on these inputs."""
    fd.execute(args)
    (launcher,) = [k for k in fd.cache.last_runtime.launchers.values() if k.plan.parts is not None]
    return launcher.plan


@pytest.mark.parametrize("kind", ["layernorm", "layernorm_stats"])
def test_a_column_sum_of_inputs_alone_can_be_computed_apart(kind):
    """The LayerNorm backward's db = sum(dy) reads dy alone: its plan divides into an
    inner-outer plan of dx and dw and an outer reduction of db (ApartParts), for rows whose two
    column sums would not both fit the shared-row kernel."""
    fd, args, _ = norm_case(kind, 8, 64, "cpu")
    apart = planned(fd, args).parts.apart
    assert apart is not None and apart.kept.template is Template.inner_outer
    assert apart.apart.template is Template.outer_reduction
    dy = fd.fusion.inputs[2] if not callable(fd.fusion.inputs) else fd.fusion.inputs()[2]
    assert [v.name for v in apart.apart.inputs] == [dy.name]  # db's kernel reads dy, not x
    assert len(apart.kept.outputs) == 2 and apart.kept.parts.apart is None


def test_no_column_output_apart_where_none_stands_alone():
    """RMSNorm's one column sum stays; so do column sums that one output reads together
    (dw + db), and one whose terms read a row statistic (rstd recomputed)."""
    fd, args, _ = norm_case("rmsnorm", 8, 64, "cpu")
    assert planned(fd, args).parts.apart is None
    with FusionDefinition() as fd:
        x, w, dy = (fd.define_tensor(shape=s, contiguity=True, dtype=F32) for s in ([-1, -1], [-1], [-1, -1]))
        rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.div(fd.ops.sum(fd.ops.mul(x, x), [-1], True), x.shape()[1]), 1e-6))
        xhat = fd.ops.mul(x, rstd)
        fd.add_output(fd.ops.mul(fd.ops.mul(dy, w), rstd))
        fd.add_output(fd.ops.add(fd.ops.sum(fd.ops.mul(dy, xhat), [0]), fd.ops.sum(dy, [0])))
    tensors = list(inputs(8, 64, torch.float32, "cpu"))
    assert planned(fd, tensors).parts.apart is None
    with FusionDefinition() as fd:
        x, w, dy = (fd.define_tensor(shape=s, contiguity=True, dtype=F32) for s in ([-1, -1], [-1], [-1, -1]))
        rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.div(fd.ops.sum(fd.ops.mul(x, x), [-1], True), x.shape()[1]), 1e-6))
        fd.add_output(fd.ops.mul(fd.ops.mul(dy, w), rstd))
        fd.add_output(fd.ops.sum(fd.ops.mul(dy, rstd), [0]))  # reads rstd: the pass over rows has it
        fd.add_output(fd.ops.sum(fd.ops.mul(dy, fd.ops.mul(x, rstd)), [0]))
    assert planned(fd, tensors).parts.apart is None


@pytest.mark.parametrize("kind", ["layernorm", "layernorm_stats"])
def test_the_division_computes_what_the_whole_plan_does(kind, monkeypatch, device):
    """Rows too long for registers: the launch takes the division where the kept plan runs in
    one pass (the shared-row kernel: GPU only). Here the kept plan may take its own two
    kernels, so that the division's three kernels run and their outputs come back in the
    definition's order (dx, dw, db); by default the whole plan's two kernels run. On a GPU too:
    untimed (FUSER_AUTOTUNE=0: timed, the GPU takes the faster form, the two kernels), and
    without the shared-row form (FUSER_SHARED_ROW=0), as on the CPU, where the division is
    tried only for the test's hook."""
    from fuser.codegen import launch

    monkeypatch.setenv("FUSER_SHARED_ROW", "0")
    monkeypatch.setenv("FUSER_AUTOTUNE", "0")
    monkeypatch.setattr(heuristics, "INNER_OUTER_MAX_PERSISTENT", 32)
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    fd, args, expected = norm_case(kind, 9, 40, device)
    for actual, ref in zip(fd.execute(args), expected):
        close(actual, ref, torch.float32)
    assert "_kept_" not in fd.last_triton_code()
    monkeypatch.setattr(launch, "APART_KEEPS_TWO_KERNELS", True)
    fd, args, expected = norm_case(kind, 9, 40, device)
    outputs = fd.execute(args)
    for actual, ref in zip(outputs, expected):
        close(actual, ref, torch.float32)
    code = fd.last_triton_code()
    assert "_kept_rows_" in code and "_kept_columns_" in code and "_apart_" in code


@pytest.mark.parametrize("faster", ["a column output apart", "two kernels", None])
def test_the_division_is_timed_against_two_kernels_where_asked(faster, monkeypatch, tmp_path):
    """Where APART_TIMED says so, the launch times the division against the whole plan's two
    kernels once per bucket and keeps the faster: here on CPU (a target stood in for a tuned
    one) with a timer that makes `faster` win, each candidate compiled first (two launches of
    two kernels each, the kept part's own on CPU). By default (None) nothing is timed and the
    division runs: it won every timing on the H200."""
    from fuser.codegen import autotune, launch

    if faster is not None:
        monkeypatch.setattr(launch, "APART_TIMED", True)
    monkeypatch.setattr(heuristics, "INNER_OUTER_MAX_PERSISTENT", 32)
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    monkeypatch.setattr(launch, "APART_KEEPS_TWO_KERNELS", True)
    monkeypatch.setattr(launch, "TUNED_TARGETS", ("cuda", "cpu"))
    monkeypatch.delenv("FUSER_AUTOTUNE", raising=False)
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    timed = []  # the candidates in the order timed: the division first, then two kernels

    def timer(launch_once, device):
        launch_once()
        timed.append(["a column output apart", "two kernels"][len(timed)])
        return 0.5 if timed[-1] == faster else 1.0
    monkeypatch.setattr(autotune, "cuda_time_ms", timer)
    fd, args, expected = norm_case("layernorm_stats", 9, 40, "cpu")
    for actual, ref in zip(fd.execute(args), expected):
        close(actual, ref, torch.float32)
    assert len(timed) == (0 if faster is None else 2)
    code = fd.last_triton_code()
    assert ("_kept_" in code and "_apart_" in code) == (faster != "two kernels")
    assert ("_rows_" in code and "_kept_rows_" not in code) == (faster == "two kernels")
