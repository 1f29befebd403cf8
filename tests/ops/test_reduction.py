"""Reductions (sum, prod, max, min) and var / var_mean against eager PyTorch: dims (negative,
several, all), keepdim, dtypes (integers and bools sum in int64), the positional
`sum(t, dims, keepdim, dtype)` form, size-0 / size-1 / non-contiguous inputs."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from tests.helpers import backend_env, cases, dtype_name, make, run_and_check

f32, bf16, f16, i64, i32, b8 = (torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                torch.int32, torch.bool)


def _prod(t, dims, keepdim):
    for d in sorted((d % t.dim() for d in dims), reverse=True):
        t = torch.prod(t, d, keepdim=keepdim)
    return t


REDUCTIONS = {
    "sum": lambda t, dims, keepdim: torch.sum(t, dims, keepdim=keepdim),
    "prod": _prod,
    "max": lambda t, dims, keepdim: torch.amax(t, dims, keepdim=keepdim),
    "min": lambda t, dims, keepdim: torch.amin(t, dims, keepdim=keepdim),
}
DIMS = [[0], [-1], [1], [0, 2], [0, 1, 2]]

REDUCE_CASES = [pytest.param(n, dims, keep, id=f"{n}-{dims}-{'keep' if keep else 'drop'}")
                for n in REDUCTIONS for dims in DIMS for keep in (False, True)]


@pytest.mark.parametrize("name,dims,keepdim,backend", cases(REDUCE_CASES, backends=("aten",)) + cases(
    [p for p in REDUCE_CASES if p.values[1] in ([-1], [0, 2])], backends=("kernel",)))
def test_reduction_dims(name, dims, keepdim, backend):
    x = make((2, 3, 4))
    run_and_check(lambda fd, t: getattr(fd.ops, name)(t, dims, keepdim),
                  lambda t: REDUCTIONS[name](t, dims, keepdim), [x], backend=backend)


DTYPE_CASES = [pytest.param(n, d, id=f"{n}-{dtype_name(d)}") for n in REDUCTIONS
               for d in (f32, bf16, f16, i64, i32, b8)]


@pytest.mark.parametrize("name,dtype,backend", cases(DTYPE_CASES))
def test_reduction_dtypes(name, dtype, backend):
    """Integer and bool sums and products accumulate in int64, as in eager."""
    x = make((3, 5), dtype)
    if dtype == f16 and name == "prod":
        x = x.clamp(-2, 2)
    run_and_check(lambda fd, t: getattr(fd.ops, name)(t, [1]), lambda t: REDUCTIONS[name](t, [1], False),
                  [x], backend=backend)


@pytest.mark.parametrize("dtype,backend", cases([pytest.param(d, id=dtype_name(d)) for d in (f32, bf16, f16)]))
def test_sum_positional_form_with_dtype(dtype, backend):
    """nvFuser's `fd.ops.sum(t, [-1], False, DataType.Float)`: bf16/fp16 summed in fp32."""
    x = make((3, 7), dtype)
    run_and_check(lambda fd, t: fd.ops.sum(t, [-1], False, DataType.Float),
                  lambda t: torch.sum(t.float(), -1), [x], backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_whole_tensor_form_with_a_dtype(backend):
    """nvFuser's `fd.ops.prod(t, DataType.Float)` (the dtype in the dims' place) and an int dim."""
    x = make((2, 3, 4), bf16)
    run_and_check(lambda fd, t: [fd.ops.prod(t, DataType.Float), fd.ops.sum(t, DataType.Float),
                                 fd.ops.prod(t, 1, True, DataType.Float)],
                  lambda t: [torch.prod(t.float()), torch.sum(t.float()), torch.prod(t.float(), 1, True)],
                  [x], backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_sum_keywords_and_all_dims(backend):
    x = make((2, 3, 4))
    run_and_check(lambda fd, t: [fd.ops.sum(t, dims=[0, 1], keepdim=True), fd.ops.sum(t)],
                  lambda t: [torch.sum(t, [0, 1], keepdim=True), torch.sum(t)], [x], backend=backend)


LAYOUT_CASES = [  # (id, tensor factory, define keywords, dims)
    ("size0-reduced", lambda: make((0, 5)), {}, [0]),
    ("size0-kept", lambda: make((0, 5)), {}, [1]),
    ("size1-broadcast", lambda: make((3, 1, 5)), {}, [1]),
    ("size1-symbolic", lambda: make((1, 5)), {"size1_broadcast": False}, [0]),
    ("transposed", lambda: make((5, 3)).t(), {"stride_order": [0, 1]}, [1]),
    ("permuted3d", lambda: make((3, 4, 2)).permute(2, 0, 1), {"stride_order": [0, 2, 1]}, [0, 2]),
    ("strided", lambda: make((3, 10))[:, ::2], {"contiguity": False}, [-1]),
]


@pytest.mark.parametrize("name,layout,backend", cases(
    [pytest.param(n, c[0], id=f"{n}-{c[0]}") for n in ("sum", "prod", "max") for c in LAYOUT_CASES
     if not (n == "max" and c[0] == "size0-reduced")]))
def test_reduction_layouts(name, layout, backend):
    factory, kw, dims = next((c[1], c[2], c[3]) for c in LAYOUT_CASES if c[0] == layout)
    x = factory()
    run_and_check(lambda fd, t: getattr(fd.ops, name)(t, dims), lambda t: REDUCTIONS[name](t, dims, False),
                  [x], decl=[kw], backend=backend)


def test_max_of_static_empty_axis_is_a_definition_error():
    import fuser
    with pytest.raises(fuser.FusionDefinitionError, match="empty axis"):
        with fuser.FusionDefinition() as fd:
            t = fd.define_tensor([0, 5], contiguity=True)
            fd.add_output(fd.ops.max(t, [0]))


# -- var / var_mean --------------------------------------------------------------------------

VAR_CASES = [pytest.param(c, dims, keep, id=f"c{c}-{dims}-{'keep' if keep else 'drop'}")
             for c in (0, 1, 2) for dims in ([1], [0, 2], [-1]) for keep in (False, True)]


@pytest.mark.parametrize("correction,dims,keepdim,backend", cases(VAR_CASES, backends=("aten",)) + cases(
    [p for p in VAR_CASES if p.values[1] == [-1]], backends=("kernel",)))
def test_var_mean(correction, dims, keepdim, backend):
    x = make((2, 3, 4))
    run_and_check(lambda fd, t: [*fd.ops.var_mean(t, dims, correction, keepdim),
                                 fd.ops.var(t, dims, correction, keepdim)],
                  lambda t: [*torch.var_mean(t, dims, correction=correction, keepdim=keepdim),
                             torch.var(t, dims, correction=correction, keepdim=keepdim)],
                  [x], backend=backend)


@pytest.mark.parametrize("dtype,backend", cases([pytest.param(d, id=dtype_name(d)) for d in (bf16, f16)]))
def test_var_mean_reduced_precision(dtype, backend):
    x = make((3, 6), dtype)
    run_and_check(lambda fd, t: list(fd.ops.var_mean(t, [1])), lambda t: list(torch.var_mean(t, [1])),
                  [x], backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_var_mean_in_fp32_of_bf16(backend):
    """The layer-norm pattern: cast bf16 to Float, var_mean with correction=0, cast back."""
    x = make((3, 7), bf16)

    def build(fd, t):
        var, mean = fd.ops.var_mean(fd.ops.cast(t, DataType.Float), [-1], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(fd.ops.cast(t, DataType.Float), mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
        return fd.ops.cast(y, DataType.BFloat16)

    def ref(t):
        var, mean = torch.var_mean(t.float(), -1, correction=0, keepdim=True)
        return ((t.float() - mean) * torch.rsqrt(var + 1e-5)).bfloat16()

    run_and_check(build, ref, [x], backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_var_mean_keyword_form_and_size1(backend):
    x = make((3, 1, 5))
    run_and_check(lambda fd, t: list(fd.ops.var_mean(t, dims=[0, 2], correction=1, keepdim=False)),
                  lambda t: list(torch.var_mean(t, [0, 2], correction=1)), [x], backend=backend)


@pytest.mark.parametrize("block_rows", [1, 2, 8])
def test_var_mean_rows_of_every_conditioning(monkeypatch, block_rows):
    """The inline var_mean of a row (one or two rows a program: sums of x and x^2 in one step,
    the two-pass form where they would cancel in any of them; more rows: the two-pass form)
    against float64:
    centred rows, rows whose mean is far beyond their spread, a constant row, an outlier as first
    element, tiny spread, values whose squares overflow fp32, inf and NaN."""
    from fuser.schedulers import heuristics
    monkeypatch.setattr(heuristics, "TILE_ELEMENTS", 64 * block_rows)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(9, 64, generator=g)
    x[1] += 1000.0
    x[2] = 5.0
    x[3, 0] = 1e4
    x[4] = x[4] * 1e-3 + 0.5
    x[5] *= 1e20
    x[6, 3] = float("inf")
    x[7, 5] = float("nan")
    x[8] = x[8] * 3 + 2  # mean^2 below 4 variances: the sums
    fd = FusionDefinition()
    with fd:
        t = fd.define_tensor([-1, -1], dtype=DataType.Float)
        var, mean = fd.ops.var_mean(t, [1], correction=1)
        fd.add_output(var)
        fd.add_output(mean)
    from fuser.codegen import launch
    launched = []
    real_call = launch.Launch.__call__
    monkeypatch.setattr(launch.Launch, "__call__",
                        lambda self, *a, **k: launched.append(self.steps[0][0].kwargs) or real_call(self, *a, **k))
    with backend_env("kernel"):
        var, mean = fd.execute([x])
    assert "tl.sum" in fd.last_triton_code()  # a generated kernel, not ATen
    # the sums for one or two rows a program (a static branch on BLOCK0), deviations beyond
    assert "if BLOCK0 <= 2:" in fd.last_triton_code() and launched[-1]["BLOCK0"] == block_rows
    want_var, want_mean = torch.var_mean(x.double(), 1, correction=1)
    torch.testing.assert_close(mean, want_mean.float(), rtol=1e-6, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(var[:6], want_var[:6].float(), rtol=2e-5, atol=1e-9)
    torch.testing.assert_close(var[8], want_var[8].float(), rtol=2e-5, atol=1e-9)
    assert var[6:8].isnan().all() and mean[6:8].isnan().all()
