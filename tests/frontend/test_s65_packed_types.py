"""Types that run through ATen (packed fp4, float8_e8m0fnu, complex): `.contiguous()` of a
transposed one kept its transposed strides (the evaluator's copy cloned the layout; a kernel
writes row-major), so a `.view(-1)` after it raised where eager runs; `fd.validate` of packed fp4
raised torch's NotImplementedError, and `fd.repro_script_for` wrote a script that could not draw
it."""
import subprocess
import sys

import pytest
import torch

import fuser
from fuser import FusionDefinition, ValidationError
from tests.helpers import make

_FP4 = getattr(torch, "float4_e2m1fn_x2", None)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)


def _fp4(shape):
    return torch.randint(0, 256, shape, dtype=torch.uint8).view(_FP4)


@pytest.mark.parametrize("case", ["e8m0", "fp4", "complex"])
def test_contiguous_of_a_transposed_aten_type_is_row_major(case):
    if case == "e8m0":
        if _E8M0 is None:
            pytest.skip("this torch has no float8_e8m0fnu")
        fn, arg = (lambda x: x.t().to(_E8M0).contiguous().view(-1)), make((8, 16)).abs() + 0.5
    elif case == "fp4":
        if _FP4 is None:
            pytest.skip("this torch has no float4_e2m1fn_x2")
        fn, arg = (lambda q: q.t().contiguous().view(-1)), _fp4((8, 16))
    else:
        fn, arg = (lambda z: (z.t() * 2).contiguous().view(-1)), torch.complex(make((8, 16)), make((8, 16)))
    out, theirs = fuser.jit(fn)(arg), fn(arg)
    assert out.stride() == theirs.stride()
    if out.dtype in (_FP4, _E8M0):
        out, theirs = out.view(torch.uint8), theirs.view(torch.uint8)
    assert torch.equal(out, theirs)


@pytest.mark.skipif(_FP4 is None, reason="this torch has no float4_e2m1fn_x2")
def test_validate_and_repro_of_packed_fp4(tmp_path):
    x = _fp4((8, 8))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.permute(fd.from_pytorch(x), [1, 0]))
    out, = fd.execute([x])
    fd.validate([x])
    wrong = x.t().contiguous().view(torch.uint8).clone()
    wrong[0, 0] ^= 1  # (one code off by its last bit)
    with pytest.raises(ValidationError, match="differs from its reference in 1 of 64"):
        fd.validate([x], [wrong.view(_FP4)])
    script = tmp_path / "repro.py"
    script.write_text(fd.repro_script_for([x]))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
