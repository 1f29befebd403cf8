"""Random fusions (tests/fuzz_fusions.py) with fixed seeds: pointwise chains, casts, broadcasts,
reductions, shape ops, scalar inputs and intermediate outputs, on odd sizes and non-contiguous,
transposed and expanded inputs. Generated kernels are compared with the ATen evaluator and,
where the fusion stays in fp32, with eager torch. Odd cases also run with a few interpreter
"processors" so that split outer reductions and the inner-outer template are exercised. Each
definition is called twice more, on new values (the ready call its layout made) and on the first
inputs again.

A failing seed reproduces alone: `python -m tests.fuzz_fusions SEED 1 PROCESSORS [--forms]`."""
import warnings

import pytest
import torch

from tests.fuzz_fusions import run_case

SEEDS = range(0, 240)
FORM_SEEDS = range(0, 120)  # (each of the ten FORM_PROFILES twelve times)


@pytest.mark.parametrize("chunk", range(8))
def test_random_fusions(chunk):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the interpreter's numpy on NaN and inf
        for seed in SEEDS[chunk::8]:
            run_case(seed, processors=(seed % 5) if seed % 2 else 0, repeat=True)


@pytest.mark.parametrize("chunk", range(3))
def test_random_fusions_in_the_forms_of_long_rows(chunk):
    """The same, with rows of up to 301 columns and heuristic limits shrunk (fuzz_fusions.FORM_PROFILES)
    so that they take the looped, aligned, read-twice and split forms of long rows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for seed in FORM_SEEDS[chunk::3]:
            run_case(seed, processors=(seed % 5) if seed % 2 else 0, forms=True, repeat=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_random_fusions_in_the_forms_of_long_rows_on_the_gpu():
    """The forms' seeds as compiled kernels: Triton's compiler and the interpreter can differ
    (an unrolled loop over an inverted range ran its steps on the GPU only)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for seed in FORM_SEEDS:
            run_case(seed, forms=True, device="cuda", repeat=True)


def test_a_result_as_far_from_the_exact_value_as_the_reference_passes_and_a_wrong_one_does_not():
    """The fuzzer's last judge (fuzz_fusions.as_near_as_reference): an ill-conditioned chain
    moves both results away from the fp64 value alike; a wrong kernel moves further, and a
    reference that is not finite where the exact value is judges nothing."""
    from tests.fuzz_fusions import as_near_as_reference

    exact = torch.linspace(-3, 3, 50, dtype=torch.float64)
    reference = (exact + 7e-4 * torch.sin(torch.arange(50.0, dtype=torch.float64))).float()
    near = (exact + 7e-4 * torch.cos(torch.arange(50.0, dtype=torch.float64))).float()
    assert as_near_as_reference(near, reference, exact, torch.float32)
    assert not as_near_as_reference(near + 0.01 * (torch.arange(50) == 3), reference, exact, torch.float32)
    assert not as_near_as_reference(near, torch.where(torch.arange(50) == 5, float("nan"), reference),
                                    exact, torch.float32)
