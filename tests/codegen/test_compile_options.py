"""Triton compile options of fuser's kernels (codegen/steps.py, compile_options): Triton's
integer overflow checks, which it builds around every 32-bit add, sub and mul and then drops
unless debug is on, are not built; with TRITON_DEBUG they are."""
import re
import tempfile

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen.shared_row import gluon_names
from fuser.codegen.steps import _DirectStep, compile_options


def test_overflow_checks_are_off_unless_triton_debugs(monkeypatch):
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "debug", False)
    assert compile_options() == {"sanitize_overflow": False}
    monkeypatch.setattr(knobs.runtime, "debug", True)
    assert compile_options() == {}


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
def test_the_option_leaves_the_compiled_kernel_as_it_was(monkeypatch):
    """The shared-row kernel (the largest fuser writes) compiled for sm_90 with and without the
    checks: the same machine code (they only cost the front end its time)."""
    from benchmarks import sweep_shared_row as sweep

    monkeypatch.setenv("TRITON_CACHE_DIR", tempfile.mkdtemp())
    ks, cfg = sweep.generate("rmsnorm", ("x", "w", "dy"), (), 4, 16)
    codes = []
    for sanitize in (True, False):
        monkeypatch.setattr(sweep, "EXTRA_OPTIONS", {"sanitize_overflow": sanitize})
        sass: list = []
        _, usage = sweep.compile_for_sm90(ks, cfg, sass=sass)
        if usage == sweep.NO_CUOBJDUMP:
            pytest.skip(usage)
        codes.append([re.sub(r"/\*[0-9a-f]{4}\*/", "", line) for line in "\n".join(sass).splitlines() if "/*" in line])
    assert len(codes[0]) > 1000 and codes[0] == codes[1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kernels_compile_without_the_checks():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.mul(xf, fd.ops.sum(xf, [-1], True)), DataType.BFloat16))
    x = torch.randn(64, 1000, device="cuda", dtype=torch.bfloat16)
    (out,) = fd.execute([x])
    xf = x.float()
    torch.testing.assert_close(out.float(), xf * xf.sum(-1, keepdim=True), rtol=2e-2, atol=2e-2)
    steps = [step for launcher in fd.cache.last_runtime.launchers.values() for launch in launcher.launches.values()
             if launch is not None for step, _, _ in launch.steps if isinstance(step, _DirectStep)]
    assert steps and all(step.compiled.metadata.sanitize_overflow is False for step in steps)
