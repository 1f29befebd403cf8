"""Shared pytest setup: every test gets its own reproducible torch seed, and interpreted
kernels are bounds-checked (tests/interpreter_bounds.py; FUSER_TEST_BOUNDS=0 turns it off).

The seed is derived from the test's node id, so a failing test reruns with the same "random"
inputs, while different tests (and different parametrizations) see different data.
"""
import os
import zlib

import pytest
import torch


def pytest_configure(config):
    if os.environ.get("FUSER_TEST_BOUNDS", "1") != "0":
        from tests.interpreter_bounds import install

        install()


@pytest.fixture(autouse=True)
def _seed_per_test(request):
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    yield seed
    # kernels a test left compiling in the background (codegen/tuning.py) finish within it: a
    # later test counting compiles must not see them
    from fuser.codegen import tuning

    assert tuning.wait_for_compiles(300), "background compiles still running after 300 s"
    tuning.forget_buckets()  # (a later test's first calls of the same kernels start afresh)


@pytest.fixture
def recorded(monkeypatch):
    """Compile jobs and launches recorded on the interpreter (tests/compile_jobs.py)."""
    from tests.compile_jobs import record

    yield from record(monkeypatch)


@pytest.fixture
def written_in_place(monkeypatch):
    """For tests of in-place writes (runtime/in_place.py): at the end of each call with aliased
    outputs, True for each its kernel wrote into its input, then False for each copied there
    after the run."""
    import fuser.frontend.definition as definition
    import fuser.frontend.program as program

    answers = []
    write_back = definition.write_back

    def spy(written, dsts, values):
        answers.extend([True] * len(written) + [False] * len(dsts))
        write_back(written, dsts, values)
    monkeypatch.setattr(definition, "write_back", spy)
    monkeypatch.setattr(program, "write_back", spy)
    return answers
