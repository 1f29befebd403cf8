"""Generated kernels against eager PyTorch: one kernel per suite function, odd sizes, broadcast
and transposed inputs, integer sums, where, NaN and Inf. On CPU the kernels run through Triton's
interpreter, so these tests exercise the code generator in CI."""
import math

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition

TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2), torch.float16: (1e-2, 1e-2)}


def kinds(fd):
    return [s.kind.value for s in fd.last_segments()]


def close(actual, expected):
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    rtol, atol = TOL.get(expected.dtype, (0, 0))
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


def dt(torch_dtype):
    return DataType.from_torch(torch_dtype)


def rmsnorm_fd(dtype, eps=1e-6):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dt(dtype))
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=dt(dtype))
        xf = fd.ops.cast(x, DataType.Float)
        ms = fd.ops.div(fd.ops.sum(fd.ops.mul(xf, xf), [-1], True), x.shape()[1])
        y = fd.ops.mul(fd.ops.mul(xf, fd.ops.rsqrt(fd.ops.add(ms, eps))), fd.ops.cast(w, DataType.Float))
        fd.add_output(fd.ops.cast(y, dt(dtype)))
    return fd


def rmsnorm_ref(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 700), (5, 1000), (2, 3)])
def test_rmsnorm_one_kernel(dtype, rows, cols, device):
    fd = rmsnorm_fd(dtype)
    x, w = torch.randn(rows, cols, dtype=dtype, device=device), torch.randn(cols, dtype=dtype, device=device)
    (out,) = fd.execute([x, w])
    close(out, rmsnorm_ref(x, w))
    assert kinds(fd) == ["kernel"]
    assert "tl.sum" in fd.last_triton_code()


def test_rmsnorm_looped_kernel(monkeypatch, device):
    # a row longer than the persistent limit runs the looped kernel (two passes over the row)
    monkeypatch.setattr(fuser.schedulers.heuristics, "MAX_PERSISTENT", 64)
    fd = rmsnorm_fd(torch.float32)
    # (rows of 304 fp32 start on 16-byte boundaries: rows that do not take codegen/kernel.py's
    # aligned loops, tests/codegen/test_aligned_rows.py)
    x, w = torch.randn(3, 304, device=device), torch.randn(304, device=device)
    (out,) = fd.execute([x, w])
    close(out, rmsnorm_ref(x, w))
    code = fd.last_triton_code()
    assert "aligned" not in code
    # the first pass asks L2 to keep x for the second, which then lets it go first; the weight,
    # which every row reads (in the second pass), stays in L2
    first, second = code.split("for c_start in ")[1:3]
    load = lambda name, text: next(l for l in text.splitlines() if f"tl.load({name}_ptr" in l)  # noqa: E731
    assert 'eviction_policy="evict_last"' in load("T0", first)
    assert 'eviction_policy="evict_first"' in load("T0", second)
    assert 'eviction_policy="evict_last"' in load("T1", second)


def test_column_sum_streams_its_input_once(device):
    """A column sum reads each element once: its loads ask L2 to drop the lines first."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.sum(fd.ops.cast(x, DataType.Float), [0]))
    x = torch.randn(37, 300, device=device, dtype=torch.bfloat16)
    (out,) = fd.execute([x])
    close(out, x.float().sum(0))
    load = next(l for l in fd.last_triton_code().splitlines() if "tl.load(T0_ptr" in l)
    assert 'eviction_policy="evict_first"' in load


def softmax_fd(dtype):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dt(dtype))
        xf = fd.ops.cast(x, DataType.Float)
        m = fd.ops.max(xf, [-1], True)
        e = fd.ops.exp(fd.ops.sub(xf, m))
        y = fd.ops.div(e, fd.ops.sum(e, [-1], True))
        fd.add_output(fd.ops.cast(y, dt(dtype)))
    return fd


@pytest.mark.parametrize("persistent", [True, False])
def test_softmax_one_kernel(monkeypatch, persistent, device):
    if not persistent:
        monkeypatch.setattr(fuser.schedulers.heuristics, "MAX_PERSISTENT", 32)
    fd = softmax_fd(torch.bfloat16)
    x = torch.randn(7, 131, dtype=torch.bfloat16, device=device) * 4
    (out,) = fd.execute([x])
    close(out, torch.softmax(x.float(), -1).bfloat16())
    assert kinds(fd) == ["kernel"]


def test_gelu_bias_one_kernel(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        h = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(b, DataType.Float))
        inner = fd.ops.mul(fd.ops.add(h, fd.ops.mul(fd.ops.mul(fd.ops.mul(h, h), h), 0.044715)),
                           math.sqrt(2 / math.pi))
        y = fd.ops.mul(fd.ops.mul(h, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    x, b = torch.randn(9, 1000, dtype=torch.bfloat16, device=device), torch.randn(1000, dtype=torch.bfloat16, device=device)
    (out,) = fd.execute([x, b])
    close(out, torch.nn.functional.gelu(x + b, approximate="tanh"))
    assert kinds(fd) == ["kernel"]


def test_add_rmsnorm_two_outputs_one_kernel(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        r = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        h = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(r, DataType.Float))
        hb = fd.ops.cast(h, DataType.BFloat16)
        hf = fd.ops.cast(hb, DataType.Float)
        ms = fd.ops.div(fd.ops.sum(fd.ops.mul(hf, hf), [-1], True), x.shape()[1])
        y = fd.ops.mul(fd.ops.mul(hf, fd.ops.rsqrt(fd.ops.add(ms, 1e-6))), fd.ops.cast(w, DataType.Float))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
        fd.add_output(hb)
    x, r, w = (torch.randn(6, 700, dtype=torch.bfloat16, device=device), torch.randn(6, 700, dtype=torch.bfloat16, device=device),
               torch.randn(700, dtype=torch.bfloat16, device=device))
    out, h = fd.execute([x, r, w])
    close(h, x + r)
    close(out, rmsnorm_ref(x + r, w))
    assert kinds(fd) == ["kernel"]


@pytest.mark.parametrize("persistent", [True, False])
def test_layernorm_var_mean_one_kernel(monkeypatch, persistent, device):
    if not persistent:
        monkeypatch.setattr(fuser.schedulers.heuristics, "MAX_PERSISTENT", 64)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        var, mean = fd.ops.var_mean(xf, [-1], 0, True)
        y = fd.ops.mul(fd.ops.sub(xf, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
        y = fd.ops.add(fd.ops.mul(y, fd.ops.cast(w, DataType.Float)), fd.ops.cast(b, DataType.Float))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    x = torch.randn(5, 333, dtype=torch.bfloat16, device=device) + 3
    w, b = torch.randn(333, dtype=torch.bfloat16, device=device), torch.randn(333, dtype=torch.bfloat16, device=device)
    (out,) = fd.execute([x, w, b])
    close(out, torch.nn.functional.layer_norm(x, (333,), w, b, 1e-5))
    assert kinds(fd) == ["kernel"]


@pytest.mark.parametrize("rows,cols", [(3, 5), (700, 3), (1000, 70)])
def test_column_sum_outer_reduction(rows, cols, device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.sum(fd.ops.cast(x, DataType.Float), [0]))
    x = torch.randn(rows, cols, dtype=torch.bfloat16, device=device)
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x.float().sum(0), rtol=1e-4, atol=1e-3)
    assert kinds(fd) == ["kernel"]
    assert "outer reduction" in fd.last_segments()[0].why


def test_linear_then_epilogue_is_evaluator_plus_kernel(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.linear(x, w)
        fd.add_output(fd.ops.relu(fd.ops.add(y, b)))
    x, w, b = torch.randn(5, 7, device=device), torch.randn(3, 7, device=device), torch.randn(3, device=device)
    (out,) = fd.execute([x, w, b])
    close(out, torch.relu(x @ w.t() + b))
    assert kinds(fd) == ["evaluator", "kernel"]


def test_broadcast_and_transposed_inputs(device):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float, stride_order=[0, 1])
        b = fd.define_tensor(shape=[1, -1], contiguity=True, dtype=DataType.Float)
        c = fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.mul(a, b), c))
    a = torch.randn(70, 3, device=device).t()  # [3, 70], column-major
    b, c = torch.randn(1, 70, device=device), torch.randn(3, 1, device=device)
    (out,) = fd.execute([a, b, c])
    close(out, a * b + c)
    assert kinds(fd) == ["kernel"]


def test_integer_sum_and_where(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Int32)
        y = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(x, [1]))
        fd.add_output(fd.ops.where(fd.ops.gt(x, 0), y, fd.ops.neg(y)))
    x = torch.randint(-50, 50, (4, 1000), dtype=torch.int32, device=device)
    y = torch.randn(4, 1000, device=device)
    s, w = fd.execute([x, y])
    assert s.dtype == torch.int64 and torch.equal(s, x.sum(1))
    close(w, torch.where(x > 0, y, -y))


def test_nan_and_inf_propagate(device):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.max(x, [1]))
        fd.add_output(fd.ops.sum(x, [1]))
        fd.add_output(fd.ops.maximum(x, 0.0))
        fd.add_output(fd.ops.exp(x))
    x = torch.randn(5, 9, device=device)
    x[1, 3] = float("nan")
    x[2, 4] = float("inf")
    x[3, 0] = float("-inf")
    outs = fd.execute([x])
    refs = [x.amax(1), x.sum(1), torch.maximum(x, torch.tensor(0.0, device=device)), torch.exp(x)]
    for o, r in zip(outs, refs):
        close(o, r)


def test_one_kernel_serves_every_row_count(device):
    fd = softmax_fd(torch.float32)
    for rows in (1, 3, 17):
        x = torch.randn(rows, 40, device=device)
        (out,) = fd.execute([x])
        close(out, torch.softmax(x, -1))
    launcher = next(iter(fd.cache.last_runtime.launchers.values()))
    assert len(launcher.variants) == 1


def test_aten_option_on_cpu(monkeypatch):
    device = "cpu"
    monkeypatch.setenv("FUSER_CPU_KERNELS", "aten")
    fd = softmax_fd(torch.float32)
    x = torch.randn(3, 8, device=device)
    (out,) = fd.execute([x])
    close(out, torch.softmax(x, -1))
    assert kinds(fd) == ["evaluator"]


@pytest.mark.parametrize("one_kernel", [True, False])
@pytest.mark.parametrize("op", ["sum", "max", "var_mean"])
def test_split_outer_reduction(monkeypatch, device, op, one_kernel):
    # few columns: the rows are reduced in chunks, the chunks then by the last program of each
    # column block (one kernel) or by a second kernel
    from fuser.codegen import launch

    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    monkeypatch.setattr(launch, "SPLIT_IN_ONE_KERNEL", one_kernel)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        if op == "var_mean":
            var, mean = fd.ops.var_mean(xf, [0], 1)
            fd.add_output(var)
            fd.add_output(fd.ops.cast(mean, DataType.BFloat16))
        else:
            fd.add_output(getattr(fd.ops, op)(xf, [0]))
    x = torch.randn(3000, 5, dtype=torch.bfloat16, device=device)
    outs = fd.execute([x])
    if op == "var_mean":
        var, mean = torch.var_mean(x.float(), 0, correction=1)
        torch.testing.assert_close(outs[0], var, rtol=1e-4, atol=1e-4)
        close(outs[1], mean.bfloat16())
    else:
        ref = x.float().sum(0) if op == "sum" else x.float().amax(0)
        torch.testing.assert_close(outs[0], ref, rtol=1e-4, atol=1e-3)
    code = fd.last_triton_code()
    if device.type == "cpu":
        assert ("split in one kernel" in code) == one_kernel
        assert ("split (partial)" in code and "split (combine)" in code) == (not one_kernel)


def _with_specials(rows, n, device):
    """[rows, n] with inf, -inf and NaN in its first rows, never as a row's last element: ATen's
    mean of a row with one inf is NaN but for one position that its reduction order picks
    (the last on CPU; see _welford_mean)."""
    x = torch.randn(rows, n, device=device)
    inf, nan = float("inf"), float("nan")
    specials = [{n // 2: inf}, {0: -inf}, {1: nan}, {2: inf, n - 2: -inf}, {3: inf, n // 3: inf},
                {n // 4: nan, n // 2: inf}, {0: inf, 1: inf, 2: inf}]
    for row, marks in enumerate(specials):
        for col, v in marks.items():
            x[row, col] = v
    return x


@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("variant", ["persistent", "row loop", "looped", "column", "split"])
def test_var_mean_with_inf_and_nan_matches_aten(monkeypatch, device, variant, correction):
    """A row holding an inf or NaN has var NaN and mean NaN in ATen (its Welford mean turns
    NaN past an inf), in every kernel form: rows whole in registers (one row block a program,
    or programs looping over row blocks) or looped over, columns looped over or split into
    chunks of rows."""
    from fuser.codegen import launch

    if variant == "row loop":
        monkeypatch.setattr(fuser.schedulers.heuristics, "ROW_LOOP_MIN_COLS", 1)
    if variant == "looped":
        monkeypatch.setattr(fuser.schedulers.heuristics, "MAX_PERSISTENT", 64)
    if variant == "split":
        monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    rows, n = {"persistent": (9, 40), "row loop": (9, 40), "looped": (9, 300), "column": (9, 40),
               "split": (9, 3000)}[variant]
    x = _with_specials(rows, n, device)
    dim = 1
    if variant in ("column", "split"):
        x, dim = x.t().contiguous(), 0
    with FusionDefinition() as fd:
        xs = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        var, mean = fd.ops.var_mean(xs, [dim], correction)
        fd.add_output(var)
        fd.add_output(mean)
    var, mean = fd.execute([x])
    want_var, want_mean = torch.var_mean(x, dim, correction=correction)
    close(mean, want_mean)
    close(var, want_var)
    assert mean[:7].isnan().all() and mean[7:].isfinite().all()
    if device.type == "cpu":
        code = fd.last_triton_code()
        assert {"persistent": "persistent", "row loop": "persistent over rows", "looped": "looped",
                "column": "looped", "split": "split in one kernel"}[variant] in code


@pytest.mark.parametrize("dim", [0, 1])
def test_var_mean_of_one_element_is_that_element(device, dim):
    # a lone inf (or NaN) is its own mean, as in ATen: a NaN m2 makes the mean NaN only where
    # the row has more than one element
    x = torch.tensor([[float("inf"), float("-inf"), float("nan"), 2.5, -1.0]], device=device)
    x = x if dim == 0 else x.t().contiguous()
    with FusionDefinition() as fd:
        xs = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        var, mean = fd.ops.var_mean(xs, [dim], 0)
        fd.add_output(var)
        fd.add_output(mean)
    var, mean = fd.execute([x])
    want_var, want_mean = torch.var_mean(x, dim, correction=0)
    close(mean, want_mean)
    close(var, want_var)
    assert kinds(fd) == ["kernel"]


def test_outer_product_is_one_kernel(device):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        ab = fd.ops.mul(fd.ops.broadcast(a, [False, True]), fd.ops.broadcast(b, [True, False]))
        fd.add_output(fd.ops.exp(ab))
    a, b = torch.randn(7, device=device), torch.randn(33, device=device)
    (out,) = fd.execute([a, b])
    close(out, torch.exp(a[:, None] * b[None, :]))
    assert kinds(fd) == ["kernel"]


def test_iota_one_hot_and_full_in_one_kernel(device):
    """The cross-entropy gradient's shape: softmax minus a one-hot made with iota, scaled."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        t = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int)
        n = x.shape()[1]
        cls = fd.ops.broadcast(fd.ops.iota(n, 0, 1, DataType.Int), [True, False])
        hot = fd.ops.eq(cls, fd.ops.broadcast(t, [False, True]))
        e = fd.ops.exp(fd.ops.sub(x, fd.ops.max(x, [1], True)))
        p = fd.ops.div(e, fd.ops.sum(e, [1], True))
        ones = fd.ops.full([x.shape()[0], n], 1.0, DataType.Float)
        fd.add_output(fd.ops.sub(p, fd.ops.where(hot, ones, 0.0)))
    x = torch.randn(5, 37, device=device)
    t = torch.randint(0, 37, (5,), device=device)
    (out,) = fd.execute([x, t])
    close(out, torch.softmax(x, 1) - torch.nn.functional.one_hot(t, 37).float())
    assert kinds(fd) == ["kernel"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.half])
def test_a_half_precision_iota_holds_rounded_positions(dtype, device):
    """Eager's bf16 and fp16 aranges hold positions rounded to the dtype (257 is 256 in bf16,
    2049 is 2048 in fp16); used inside a kernel, not only where it is stored, the iota is too."""
    n = 2100
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        at = fd.ops.iota(fd.ops.size(x, 0), 0, 1, DataType.BFloat16 if dtype is torch.bfloat16 else DataType.Half)
        fd.add_output(fd.ops.add(x, at))
    x = torch.randn(n, device=device)
    (out,) = fd.execute([x])
    assert torch.equal(out, x + torch.arange(n, dtype=dtype, device=device).float())


def test_sizes_from_scalar_inputs_are_part_of_the_launch_key(device):
    # the output's extent comes from a scalar input alone: a new value must not reuse the
    # launch prepared for the old one
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=DataType.Float)
        n = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.exp(fd.ops.expand(x, [x.shape()[0], n])))
    x = torch.randn(3, 1, device=device)
    for cols in (4, 9):
        (out,) = fd.execute([x, cols])
        close(out, torch.exp(x).expand(3, cols))


def test_bf16_casts_round_to_nearest_even(device):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.cast(a, DataType.BFloat16))
        fd.add_output(fd.ops.mul(fd.ops.cast(fd.ops.cast(a, DataType.BFloat16), DataType.Float), 3.0))
    x = torch.randn(3000, device=device)
    x[:4] = torch.tensor([float("inf"), -0.0, 3.4e38, 1.0 + 2**-8], device=device)  # the last is a tie
    stored, rounded_then_scaled = fd.execute([x])
    assert torch.equal(stored, x.bfloat16())
    assert torch.equal(rounded_then_scaled, x.bfloat16().float() * 3.0)


def test_integer_constants_wrap_like_eager(device):
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int32)
        fd.add_output(fd.ops.add(a, 2**40 + 7))
        fd.add_output(fd.ops.mul(a, -2**33 + 5))
    x = torch.randint(-100, 100, (17,), dtype=torch.int32, device=device)
    s, m = fd.execute([x])
    assert torch.equal(s, x + (2**40 + 7)) and torch.equal(m, x * (-2**33 + 5))
