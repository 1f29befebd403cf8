"""The results of a test file that is also the script its ranks run (`rank_script.py`): the
file run once under torchrun, on the module's `WORLD` ranks (2 if it names none)."""
import pytest

from tests.multidevice.rank_script import torchrun_results


@pytest.fixture(scope="module")
def rank_results(request, tmp_path_factory):
    module = request.module
    stem = module.__name__.rsplit(".", 1)[-1]
    return torchrun_results(module.__file__, tmp_path_factory.mktemp(stem), world=getattr(module, "WORLD", 2))
