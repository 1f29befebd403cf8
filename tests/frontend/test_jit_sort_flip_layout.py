"""flip, sort and argsort of a computed tensor keep eager's memory layout under fuser.jit.

They run through ATen inside the fusion (flip as an index_select by a descending iota, sort
as torch.sort), whose results were row-major where eager's keep a channels-last or transposed
input's layout; a `.view` that eager allows after a permute then raised "view size is not
compatible with input tensor's size and stride" inside the jitted function."""
import pytest
import torch

import fuser

# (op on a 4-D tensor along its channels, the same op on a 2-D tensor along its rows)
OPS = {
    "flip": (lambda y: torch.flip(y, [1]), lambda y: torch.flip(y, [0])),
    "flip_two_dims": (lambda y: torch.flip(y, [1, 3]), lambda y: torch.flip(y, [0, 1])),
    "sort_values": (lambda y: torch.sort(y, 1)[0], lambda y: torch.sort(y, 0)[0]),
    "sort_indices": (lambda y: torch.sort(y, 1, descending=True)[1], lambda y: torch.sort(y, 0)[1]),
    "argsort": (lambda y: torch.argsort(y, 1), lambda y: torch.argsort(y, stable=True, dim=0)),
}


def _input(layout: str, requires_grad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(62)
    if layout == "channels_last":
        x = torch.randn(2, 3, 4, 5, generator=g).to(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = torch.randn(5, 7, generator=g).t()
    else:  # the row-major control
        x = torch.randn(2, 3, 4, 5, generator=g)
    return x.requires_grad_(requires_grad)


def _op(name: str, x: torch.Tensor):
    return OPS[name][0] if x.dim() == 4 else OPS[name][1]


def _flat_view(y: torch.Tensor) -> torch.Tensor:
    """A view that needs eager's layout: channels-last read as NHWC rows, a transposed result
    read back transposed, a row-major one as it is."""
    if y.dim() == 2:
        return y.t().view(-1)
    if y.is_contiguous():
        return y.view(2, -1)
    return y.permute(0, 2, 3, 1).view(2, -1)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # (the tests share one function's code: past Dynamo's recompile limit it would run eagerly)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _jit_call(f, x):
    """`f(x)` through fuser.jit, checked to have run a fusion rather than eager code."""
    jf = fuser.jit(f)
    out = jf(x)
    assert jf.cache_info().fusions >= 1, jf.cache_info()
    return out


def _dense_strides_of(t: torch.Tensor) -> list:
    return [(s, n) for s, n in zip(t.stride(), t.shape) if n > 1]


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "row_major"])
@pytest.mark.parametrize("name", list(OPS))
def test_result_of_a_computed_tensor_has_eager_strides(name, layout):
    x = _input(layout)
    op = _op(name, x)

    def f(x):
        return op(x * 2.0 + 0.5)

    got, want = _jit_call(f, x), f(x)
    torch.testing.assert_close(got, want)
    assert _dense_strides_of(got) == _dense_strides_of(want), (got.stride(), want.stride())


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "row_major"])
@pytest.mark.parametrize("name", ["flip", "sort_values", "sort_indices", "argsort"])
def test_view_after_the_op_runs_as_in_eager(name, layout):
    x = _input(layout)
    op = _op(name, x)

    def f(x):
        return _flat_view(op(x * 2.0))

    torch.testing.assert_close(_jit_call(f, x), f(x))


def test_sort_of_a_flip_keeps_the_layout():
    """A sort whose input another ATen op computed (a flip): both keep eager's layout."""
    x = _input("channels_last")

    def f(x):
        y = torch.flip(x * 2.0, [2])
        return torch.sort(y, 1)[0].permute(0, 2, 3, 1).view(2, -1), y

    got, want = _jit_call(f, x), f(x)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)
        assert _dense_strides_of(a) == _dense_strides_of(e), (a.stride(), e.stride())


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "row_major"])
@pytest.mark.parametrize("name", ["flip", "sort_values"])
def test_backward_matches_eager(name, layout):
    op = _op(name, _input(layout))

    def f(x):
        return _flat_view(op(x * 2.0)).sin()

    x, xe = _input(layout, True), _input(layout, True)
    got, want = _jit_call(f, x), f(xe)
    torch.testing.assert_close(got, want)
    g = torch.randn(want.shape, generator=torch.Generator().manual_seed(7))
    got.backward(g)
    want.backward(g)
    torch.testing.assert_close(x.grad, xe.grad)


@pytest.mark.parametrize("layout", ["channels_last", "transposed"])
def test_roll_follows_its_traced_layout(layout):
    """roll is decomposed to an index_select before fuser sees it, and Dynamo's fake roll is
    row-major (so a `.view` eager allows after it fails in Dynamo's own trace, for
    torch.compile too): its result takes that traced layout, CUDA's eager roll's."""
    x = _input(layout)

    def f(x):
        return torch.roll(x * 2.0, 1, 1) if x.dim() == 4 else torch.roll(x * 2.0, (1, 2), (0, 1))

    got, want = _jit_call(f, x), f(x)
    torch.testing.assert_close(got, want)
    assert got.is_contiguous()
