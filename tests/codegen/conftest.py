import pytest
import torch

_HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not _HAS_CUDA, reason="needs a CUDA device")])])
def device(request):
    """Each kernel test runs on CPU tensors (Triton's interpreter) and, where a GPU exists,
    on CUDA tensors (compiled Triton)."""
    return torch.device(request.param)
