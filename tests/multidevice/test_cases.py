"""Every multi-device case in one process, with a mesh of one device (the same cases run on
two ranks in test_torchrun.py), on CPU tensors and, where there is a GPU, on CUDA tensors."""
import pytest
import torch

from tests.multidevice.cases import CASES


@pytest.mark.parametrize("name", list(CASES))
def test_one_device_mesh(name):
    CASES[name]("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", list(CASES))
def test_one_device_mesh_cuda(name):
    CASES[name]("cuda")
