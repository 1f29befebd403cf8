"""`import fuser` stays light: an installed fuser registers its torch.compile backend through an
entry point, so Dynamo is imported only when something compiles."""
import subprocess
import sys
from importlib import metadata

import pytest


def _installed() -> bool:
    try:
        eps = metadata.distribution("fuser").entry_points
    except metadata.PackageNotFoundError:
        return False
    return any(ep.group == "torch_dynamo_backends" and ep.name == "fuser" for ep in eps)


@pytest.mark.skipif(not _installed(), reason="needs fuser installed (pip install -e .)")
def test_import_does_not_import_dynamo_and_the_backend_is_found_by_name():
    code = ("import sys, torch, fuser\n"
            "assert 'torch._dynamo' not in sys.modules, 'import fuser imported Dynamo'\n"
            "f = torch.compile(lambda x: torch.sigmoid(x) * 2, backend='fuser', dynamic=True)\n"
            "x = torch.randn(4, 6)\n"
            "torch.testing.assert_close(f(x), torch.sigmoid(x) * 2)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
