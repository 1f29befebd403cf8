"""Random small PyTorch programs through fuser.jit and torch.compile(backend="fuser") against
eager: forward, gradients, repeated calls with the same and other shapes, and no_grad. The
generator and checker are in fuzz_jit.py; run `python tests/frontend/fuzz_jit.py START COUNT`
for many more seeds. Failures found so far are minimized in test_fuzz_jit_regressions.py."""
import warnings

import pytest

from tests.frontend.fuzz_jit import make_program, run_program

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
