"""The interpreter's lowerings of round, acosh, asin, atan and sinh (codegen/math.py's helpers,
where CUDA has libdevice) at the edges of their domains, against eager: round exact for
integers past 2^23 (fp32) or 2^52 (fp64) and halves to even; acosh NaN below 1; -0.0 kept by
the odd functions. Each in every float dtype (half and bf16 computed in fp32)."""
import pytest
import torch

from fuser import FusionDefinition
from tests.helpers import TORCH_TO_DT, dtype_name

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# the helper each op's interpreter lowering calls (fp64 asin and atan run in ATen instead)
HELPER = {"round": "_rint(", "acosh": "_acosh(", "asin": "_atan(", "atan": "_atan(", "sinh": "_sinh("}


def _unary(name: str, x: torch.Tensor) -> torch.Tensor:
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=True, dtype=TORCH_TO_DT[x.dtype])
        fd.add_output(getattr(fd.ops, name)(t))
    (out,) = fd.execute([x])
    if not (x.dtype is torch.float64 and name in ("asin", "atan")):
        assert HELPER[name] in fd.last_triton_code(), fd.last_triton_code()
    return out


def _assert_same(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor) -> None:
    """Equal values (NaN where eager's is NaN) and equal signs of zero."""
    same = (got == want) | (got.isnan() & want.isnan())
    assert same.all(), [(a, b, c) for a, b, c, s in zip(x.tolist(), got.tolist(), want.tolist(), same) if not s]
    zeros = want == 0
    assert torch.equal(got[zeros].signbit(), want[zeros].signbit()), (x[zeros], got[zeros], want[zeros])


@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_name)
def test_round_of_large_integers_and_halves(dtype):
    # the odd integers where adding 0.5 rounds: 2^23 + 1 and on in fp32, 2^52 + 1 in fp64 (half
    # and bf16 hold them in fp32: their own largest odd integers, 2^11 - 1 and 2^8 - 1, are far
    # below); halves tie to even, either sign; 0.49999997 + 0.5 is 1.0 in fp32
    mantissa = {torch.float64: 52, torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}[dtype]
    big = 2.0 ** mantissa
    edges = [big + 1, big + 3, -(big + 1), 2 * big - 1, -(2 * big - 1), big - 0.5, -(big - 0.5),
             0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.3, 0.0, -0.0,
             float("inf"), float("-inf"), float("nan")]
    # random values of many magnitudes, and random halves
    magnitudes = 2.0 ** torch.randint(-8, mantissa + 3, (64,)).double()
    halves = torch.randint(-1000, 1000, (32,)).double() + 0.5
    x = torch.cat([torch.tensor(edges, dtype=torch.float64), torch.randn(64, dtype=torch.float64) * magnitudes,
                   halves]).to(dtype)
    _assert_same(_unary("round", x), torch.round(x), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_name)
def test_acosh_below_one_is_nan(dtype):
    limit = torch.finfo(dtype).max
    below = [-1e10, -8388609.0, -1e5, -300.0, -2.0, -1.0, 0.0, 0.5, 0.99, float("-inf"), -limit]
    x = torch.tensor([v for v in below if abs(v) <= limit], dtype=dtype)
    x = torch.cat([x, 1.0 + torch.rand(16).to(dtype) * 100, -torch.rand(16).to(dtype) * 1e4])
    got, want = _unary("acosh", x), torch.acosh(x)
    assert torch.equal(got.isnan(), want.isnan()), (x, got, want)
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_name)
@pytest.mark.parametrize("name", ["asin", "atan", "sinh"])
def test_odd_functions_keep_the_sign_of_zero(name, dtype):
    x = torch.cat([torch.tensor([-0.0, 0.0]), torch.rand(14) * 1.8 - 0.9]).to(dtype)  # (asin's domain)
    got, want = _unary(name, x), getattr(torch, name)(x)
    torch.testing.assert_close(got, want)
    assert torch.equal(got[:2].signbit(), torch.tensor([True, False])), got[:2]
