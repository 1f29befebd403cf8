"""Triton compile options of fuser's kernels (codegen/steps.py, compile_options): Triton's
integer overflow checks, which it builds around every add, sub and mul narrower than 64 bits and
then drops unless debug is on, are not built; with TRITON_DEBUG they are."""
import re
import tempfile

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen.shared_row import gluon_names
from fuser.codegen.steps import LAUNCH_OPTIONS, _DirectStep, compile_options


def test_overflow_checks_are_off_unless_triton_debugs(monkeypatch):
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "debug", False)
    assert compile_options() == {"sanitize_overflow": False}
    monkeypatch.setattr(knobs.runtime, "debug", True)
    assert compile_options() == {}


def test_the_options_are_not_passed_as_kernel_arguments(monkeypatch):
    """The C launcher takes the constexprs after the tensors, in parameter order: an option
    among them would make it refuse every call (and the launch fall back to Triton's JIT)."""
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "debug", False)
    assert set(compile_options()) <= set(LAUNCH_OPTIONS)
    jit_function = {(1,): None}  # (a step takes `fn[grid]`, Triton's entry point, at once)
    step = _DirectStep(jit_function, 1, {"BLOCK0": 4, "EVEN0": True, "num_warps": 4, **compile_options()})
    assert step.constexprs == [4, True]


@pytest.mark.skipif(not gluon_names(), reason="this Triton has no Gluon")
def test_the_option_leaves_the_compiled_kernel_as_it_was(monkeypatch):
    """The shared-row kernel (the largest fuser writes) compiled for sm_90 with and without the
    checks: two compiles (the option is part of the kernel's key) of the same machine code."""
    from benchmarks import sweep_shared_row as sweep

    monkeypatch.setenv("TRITON_CACHE_DIR", tempfile.mkdtemp())
    ks, cfg = sweep.generate("rmsnorm", ("x", "w", "dy"), (), 4, 16)
    codes, kernels = [], []
    for sanitize in (True, False):
        monkeypatch.setattr(sweep, "EXTRA_OPTIONS", {"sanitize_overflow": sanitize})
        sass: list = []
        _, usage = sweep.compile_for_sm90(ks, cfg, sass=sass, compiled_kernels=kernels)
        if usage == sweep.NO_CUOBJDUMP:
            pytest.skip(usage)
        codes.append([re.sub(r"/\*[0-9a-f]{4}\*/", "", line) for line in "\n".join(sass).splitlines() if "/*" in line])
    assert [k.metadata.sanitize_overflow for k in kernels] == [True, False]
    assert kernels[0].hash != kernels[1].hash
    assert len(codes[0]) > 1000 and codes[0] == codes[1]


def _normalized_rows():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        fd.add_output(fd.ops.cast(fd.ops.mul(xf, fd.ops.sum(xf, [-1], True)), DataType.BFloat16))
    return fd


def _compiled_steps(fd) -> list:
    return [step for launcher in fd.cache.last_runtime.launchers.values() for launch in launcher.launches.values()
            if launch is not None for step, _, _ in launch.steps if isinstance(step, _DirectStep)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("debug", [False, True])
def test_kernels_compile_without_the_checks_unless_debugging(debug, monkeypatch):
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "debug", debug)
    fd = _normalized_rows()
    x = torch.randn(64, 1000 + debug, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):  # the second call through the compiled kernel's C launcher
        (out,) = fd.execute([x])
    xf = x.float()
    torch.testing.assert_close(out.float(), xf * xf.sum(-1, keepdim=True), rtol=2e-2, atol=2e-2)
    steps = _compiled_steps(fd)
    assert steps and all(step.compiled.metadata.sanitize_overflow is debug for step in steps)
    assert all(step.compiled.metadata.debug is debug for step in steps)
    if not debug:  # the second call went through the C launcher, which took the constexprs it was given
        assert all(step.usable and step.raw is not None for step in steps)
