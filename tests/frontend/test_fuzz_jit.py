"""Random small PyTorch programs through fuser.jit and torch.compile(backend="fuser") against
eager: forward, gradients, repeated calls with the same and other shapes, and no_grad. The
generator and checker are in fuzz_jit.py; run `python tests/frontend/fuzz_jit.py START COUNT`
for many more seeds. Failures found so far are minimized in test_fuzz_jit_regressions.py."""
import warnings

import pytest

from tests.frontend.fuzz_jit import make_program, run_in_forms, run_program

SEEDS = list(range(12))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_matches_eager(seed):
    prog = make_program(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            run_program(prog)
        except Exception as e:
            raise AssertionError(f"fuzz program failed:\n{prog.describe()}") from e


@pytest.mark.parametrize("seed", range(9))
def test_random_program_in_the_forms_of_long_rows(seed):
    """Rows of 37 to 301 columns under each of fuzz_fusions.FORM_PROFILES (heuristic limits
    shrunk: looped, aligned, read-twice and split forms); `fuzz_jit.py START COUNT --forms`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_in_forms(1000 + seed)
