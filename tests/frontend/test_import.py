"""`import fuser` stays light: an installed fuser registers its torch.compile backend through an
entry point, and one run from a checkout once Dynamo's backend registry is imported, so Dynamo is
imported only when something compiles."""
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


@pytest.mark.skipif(not _installed(), reason="needs fuser installed (pip install -e .)")
@pytest.mark.parametrize("first", ["import torch", "import torch, torch._dynamo, fuser"])
def test_the_entry_point_alone_registers_the_backend(first):
    # without `import fuser`, Dynamo loads the entry point, which imports fuser: fuser then
    # registered itself too, and Dynamo's own registration found the name taken
    code = (f"{first}\n"
            "f = torch.compile(lambda x: torch.sigmoid(x) * 2, backend='fuser')\n"
            "x = torch.randn(4, 6)\n"
            "torch.testing.assert_close(f(x), torch.sigmoid(x) * 2)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


# run first in a subprocess: fuser as from a checkout, with no entry point to be found
AS_FROM_A_CHECKOUT = ("from importlib import metadata\n"
                      "real = metadata.distribution\n"
                      "def distribution(name):\n"
                      "    if name == 'fuser':\n"
                      "        raise metadata.PackageNotFoundError(name)\n"
                      "    return real(name)\n"
                      "metadata.distribution = distribution\n")


def test_from_a_checkout_the_backend_registers_when_dynamo_is_imported():
    code = AS_FROM_A_CHECKOUT + (
        "import sys, torch, fuser\n"
        "assert 'torch._dynamo' not in sys.modules, 'import fuser imported Dynamo'\n"
        "f = torch.compile(lambda x: torch.sigmoid(x) * 2, backend='fuser', dynamic=True)\n"
        "x = torch.randn(4, 6)\n"
        "torch.testing.assert_close(f(x), torch.sigmoid(x) * 2)\n"
        "from torch._dynamo.backends.registry import _COMPILER_FNS\n"
        "assert 'fuser' in _COMPILER_FNS\n"
        "import inspect\n"  # (the registry's loader still answers for its source)
        "assert 'def register_backend' in inspect.getsource(sys.modules['torch._dynamo.backends.registry'])\n"
        "assert not any(type(f).__name__ == '_RegisterOnImport' for f in sys.meta_path)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_from_a_checkout_the_finder_leaves_a_new_list_and_a_copyable_loader():
    """The finder leaves `sys.meta_path` by rebinding it (another thread's import may be walking
    the old list: a removal would make it skip the next finder), and the wrapped loader copies
    and pickles (found by review: both recursed)."""
    code = AS_FROM_A_CHECKOUT + (
        "import copy, pickle, sys, torch, fuser\n"
        "old = sys.meta_path\n"
        "n = len(old)\n"
        "import torch._dynamo\n"
        "assert len(old) == n and sys.meta_path is not old, 'the list walked by other imports changed'\n"
        "assert not any(type(f).__name__ == '_RegisterOnImport' for f in sys.meta_path)\n"
        "loader = sys.modules['torch._dynamo.backends.registry'].__loader__\n"
        "assert type(loader).__name__ == '_RegisteringLoader'\n"
        "copy.copy(loader); pickle.loads(pickle.dumps(loader))\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_from_a_checkout_a_failing_registration_warns_and_other_backends_work():
    """The registration runs inside `import torch._dynamo`: an error there must not fail every
    backend (found by review)."""
    code = AS_FROM_A_CHECKOUT + (
        "import sys, warnings, torch, fuser\n"
        "import fuser.frontend.backend as b\n"
        "def broken(**options):\n"
        "    raise RuntimeError('a broken backend')\n"
        "b.backend_for = broken\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    f = torch.compile(lambda x: x * 2, backend='eager')\n"
        "    torch.testing.assert_close(f(torch.ones(3)), torch.full((3,), 2.0))\n"
        "assert any('not registered' in str(w.message) for w in seen), [str(w.message) for w in seen]\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_from_a_checkout_with_dynamo_imported_already_the_backend_registers_at_import():
    code = AS_FROM_A_CHECKOUT + (
        "import sys, torch, torch._dynamo\n"
        "from torch._dynamo.backends.registry import _COMPILER_FNS\n"
        "assert 'fuser' not in _COMPILER_FNS\n"
        "import fuser\n"
        "assert 'fuser' in _COMPILER_FNS\n"
        "assert not any(type(f).__name__ == '_RegisterOnImport' for f in sys.meta_path)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_first_jit_call_does_not_import_inductor():
    """fuser runs AOTAutograd itself rather than through torch's `aot_autograd` wrapper, which
    imports Inductor's debug module (and with it Inductor's IR and scheduler) for a logging switch:
    0.05 s of every process's first jit call on the development CPU, 0.15 s on the H200 host.
    Forward and backward."""
    code = ("import sys, torch, fuser\n"
            "f = fuser.jit(lambda x, w: torch.softmax(x * w, -1))\n"
            "x = torch.randn(4, 6, requires_grad=True); w = torch.randn(6)\n"
            "y = f(x, w); dy = torch.randn(4, 6)\n"
            "(g,) = torch.autograd.grad(y, x, dy)\n"
            "x0 = x.detach().requires_grad_()\n"
            "(ref,) = torch.autograd.grad(torch.softmax(x0 * w, -1), x0, dy)\n"
            "torch.testing.assert_close(g, ref)\n"
            "assert 'torch._inductor.debug' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
