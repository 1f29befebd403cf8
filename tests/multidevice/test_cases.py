"""Every multi-device case in one process, with a mesh of one device (the same cases run on
two ranks in test_torchrun.py)."""
import pytest

from tests.multidevice.cases import CASES


@pytest.mark.parametrize("name", list(CASES))
def test_one_device_mesh(name):
    CASES[name]("cpu")
