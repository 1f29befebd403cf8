"""Discrepancies found by the random-fusion fuzzer (tests/fuzz_fusions.py), minimized."""
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime import FusionExecutorCache


def test_pow_integer_exponent_is_exact_on_the_interpreter():
    # seed 21900: eq(x, pow(x, n)) with n == 1 was False in the kernel, True in ATen: the
    # interpreter's pow, exp2(n * log2|x|) in fp32, missed x ** 1 by an ulp
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        n = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int32)
        p = fd.ops.pow(x, n)
        fd.add_output(p)
        fd.add_output(fd.ops.eq(x, p))
    xs = torch.tensor([-0.3798202574253082, 0.3798202574253082, 1.7, -2.9, 0.1, 3.3, -0.37])
    ns = torch.tensor([1, 1, 2, 3, 2, 1, 3], dtype=torch.int32)
    power, same = fd.execute([xs, ns])
    expected = FusionExecutorCache(fd.fusion, use_kernels=False).execute([xs, ns])
    assert torch.equal(power, torch.pow(xs, ns)) and torch.equal(power, expected[0])
    assert torch.equal(same, expected[1])


def test_round_keeps_the_sign_of_zero_on_the_interpreter():
    # seed 104723: atan2(round(x), round(x)) was 0 in the kernel and -pi in ATen for x in
    # (-0.5, 0): the interpreter's round, floor(x + 0.5), gave +0.0 where rint gives -0.0
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.reciprocal(fd.ops.round(x)))
    xs = torch.tensor([-0.3, -0.5, 0.3, 0.5, -1.5, 2.5, -0.0])
    (actual,) = fd.execute([xs])
    assert torch.equal(actual, torch.reciprocal(torch.round(xs)))
