"""Random fusions (tests/fuzz_fusions.py) with fixed seeds: pointwise chains, casts, broadcasts,
reductions, shape ops, scalar inputs and intermediate outputs, on odd sizes and non-contiguous,
transposed and expanded inputs. Generated kernels are compared with the ATen evaluator and,
where the fusion stays in fp32, with eager torch. Odd cases also run with a few interpreter
"processors" so that split outer reductions and the inner-outer template are exercised.

A failing seed reproduces alone: `python -m tests.fuzz_fusions SEED 1 PROCESSORS`."""
import warnings

import pytest

from tests.fuzz_fusions import run_case

SEEDS = range(0, 240)


@pytest.mark.parametrize("chunk", range(8))
def test_random_fusions(chunk):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the interpreter's numpy on NaN and inf
        for seed in SEEDS[chunk::8]:
            run_case(seed, processors=(seed % 5) if seed % 2 else 0)
