import random

import pytest
import torch

from fuser.codegen import launch
from fuser.schedulers import heuristics

_HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not _HAS_CUDA, reason="needs a CUDA device")])])
def device(request):
    """Each kernel test runs on CPU tensors (Triton's interpreter) and, where a GPU exists,
    on CUDA tensors (compiled Triton)."""
    return torch.device(request.param)


@pytest.fixture(params=["reversed", "shuffled"])
def any_program_order(request, monkeypatch):
    """The interpreter runs a grid's programs in reverse or shuffled order, as a GPU may: the
    last program of a split reduction's kept block is then not the last of the grid."""
    from triton.runtime import interpreter
    builder = getattr(interpreter, "interpreter_builder", None)
    if builder is None or not hasattr(builder, "set_grid_idx"):
        pytest.skip("this Triton's interpreter has no grid index hook")
    real = builder.set_grid_idx
    orders: dict = {}

    def set_grid_idx(x, y, z):
        n = builder.grid_dim[0]
        order = orders.get(n)
        if order is None:
            order = orders[n] = list(range(n))[::-1]
            if request.param == "shuffled":
                random.Random(n).shuffle(order)
        return real(order[x], y, z)
    monkeypatch.setattr(builder, "set_grid_idx", set_grid_idx)


@pytest.fixture
def small_splits(monkeypatch):
    """Rows of 64 columns or more split into chunks of 2 or more blocks of 16 columns, for 4
    programs a processor on 4 processors: the interpreter's small tensors split as few long
    rows do on a GPU (tests/codegen/test_inner_split.py, test_split_softmax.py)."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 4)
    monkeypatch.setattr(heuristics, "INNER_SPLIT_MIN_COLS", 64)
    monkeypatch.setattr(heuristics, "INNER_SPLIT_BLOCK", 16)
    monkeypatch.setattr(heuristics, "INNER_SPLIT_MIN_CHUNK", 32)
