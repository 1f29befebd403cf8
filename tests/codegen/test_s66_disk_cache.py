"""The kernel cache's files (codegen/compile.py): kernels kept in memory where no file can be
written, files readable by other users as the umask allows, a forked child's own private folder,
and an autotune file nested too deep for json (codegen/autotune.py)."""
import errno
import inspect
import os
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from fuser.codegen import autotune
from fuser.codegen import compile as kcompile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# a kernel no other test loads: made from its source alone, its interpreter launch is checked
# against eager and its source must reach Triton through inspect (as its JIT reads it on the GPU)
SCALE_SOURCE = textwrap.dedent("""
    import triton
    import triton.language as tl


    def fuser_s66_scale(X, Y, N, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < N
        x = tl.load(X + offsets, mask=mask)
        y = tl.where(0.0 < x < 1.0, x * 2.71875, x - 0.5)  # (a chained comparison: the interpreter's rewrite)
        tl.store(Y + offsets, y, mask=mask)
""")


def no_space(path, text):
    raise OSError(errno.ENOSPC, "No space left on device", str(path))


def test_a_kernel_is_made_in_memory_where_no_file_can_be_written(tmp_path, monkeypatch):
    """No file anywhere (a full disk): the private folder's fallback raised tempfile's raw
    FileNotFoundError ("No usable temporary directory found"), or the write's OSError."""
    import triton
    from triton.runtime.interpreter import FunctionRewriter

    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kcompile, "_write_atomic", no_space)
    with warnings.catch_warnings():  # (its one warning: the next test, in a process of its own)
        warnings.simplefilter("ignore")
        kernel = kcompile.load_plain("fuser_s66_scale", SCALE_SOURCE, "interpreter")
    assert not (tmp_path / "kernels").exists()
    torch.manual_seed(0)
    x = torch.rand(300) * 3 - 1
    y = torch.empty_like(x)
    kernel[(3,)](x, y, x.numel(), BLOCK=128)
    torch.testing.assert_close(y, torch.where((0 < x) & (x < 1), x * 2.71875, x - 0.5))

    raw = kernel.fn.fn  # (Interpreted -> Triton's InterpretedFunction -> the module's function)
    assert "x * 2.71875" in inspect.getsource(raw)
    assert FunctionRewriter(raw).rewrite_ast() is not raw  # (its source read: rewritten, not run as is)
    jitted = triton.jit(raw)  # the GPU's JIT reads the source the same way
    assert jitted.src.startswith("def fuser_s66_scale(") and jitted.file_name.startswith("<fuser_kernels.")


NO_SPACE_CHILD = textwrap.dedent("""
    import resource, signal, warnings
    import torch
    from fuser import FusionDefinition, DataType
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    torch.manual_seed(0)
    x = torch.randn(200)
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.tanh(a), 1.15625))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))  # no file grows from here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, = fd.execute([x])
    print("close", torch.allclose(out, torch.tanh(x) * 1.15625, rtol=1.3e-6, atol=1e-5))
    for w in caught:
        print("warning", w.message)
""")


def test_a_fusion_runs_with_one_warning_when_no_file_can_grow(tmp_path):
    """RLIMIT_FSIZE=0 makes every write fail, as a full disk or a quota does (stdout is a pipe)."""
    res = subprocess.run([sys.executable, "-c", NO_SPACE_CHILD], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, FUSER_CACHE_DIR=str(tmp_path)), timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "close True", res.stdout
    warned = [line for line in lines if line.startswith("warning fuser:")]
    assert len(warned) == 1 and str(tmp_path / "kernels") in warned[0] and "in memory" in warned[0], lines


MODE_CHILD = textwrap.dedent("""
    import torch
    from fuser import FusionDefinition, DataType
    torch.manual_seed(0)
    x = torch.randn(6, 40)
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.mul(a, 0.90625), [-1]))
    out, = fd.execute([x])
    print(torch.allclose(out, (x * 0.90625).sum(-1), rtol=1.3e-6, atol=1e-5))
""")


def test_kernel_files_get_the_mode_the_umask_allows(tmp_path):
    """mkstemp's 0600 made a cache one user filled (a Docker build as root, a shared
    FUSER_CACHE_DIR) unreadable to every other: each rewrote every kernel in a folder of its own."""
    res = subprocess.run([sys.executable, "-c", MODE_CHILD], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, FUSER_CACHE_DIR=str(tmp_path)), umask=0o002, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "True", res.stderr
    files = list((tmp_path / "kernels").glob("*.py"))
    assert files and {oct(stat.S_IMODE(f.stat().st_mode)) for f in files} == {oct(0o664)}


FORK_CHILD = textwrap.dedent("""
    import os, signal, sys, warnings
    import torch
    from fuser import FusionDefinition, DataType
    warnings.simplefilter("ignore")

    def matches(c):
        with FusionDefinition() as fd:
            a = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
            fd.add_output(fd.ops.mul(fd.ops.exp(a), c))
        x = torch.randn(32)
        return torch.allclose(fd.execute([x])[0], torch.exp(x) * c, rtol=1.3e-6, atol=1e-5)

    print("parent", matches(1.40625), flush=True)
    parent_gone, parent_alive = os.pipe()
    if os.fork() == 0:  # a child that outlives its parent (a daemonized worker)
        signal.alarm(120)
        os.close(parent_alive)
        os.read(parent_gone, 1)  # end of file: the parent exited, its exit handlers ran
        print("child", matches(1.65625), flush=True)  # a new kernel
        sys.exit(0)  # a normal exit: its own exit handlers run
    os.close(parent_gone)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_that_outlives_its_parent_removes_its_private_folder(tmp_path):
    """The child reused the parent's private folder's path, made it again after the parent's
    exit removed it, and nobody removed it: one folder left in /tmp for good per such child."""
    unwritable = tmp_path / "a-file"
    unwritable.write_text("x")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, FUSER_CACHE_DIR=str(unwritable), TMPDIR=str(temp))
    # (the output pipe stays open until the child exits too: run returns after both)
    res = subprocess.run([sys.executable, "-c", FORK_CHILD], cwd=ROOT, capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == ["True", "True", "child", "parent"], res.stdout + res.stderr
    assert list(temp.iterdir()) == []


def test_an_autotune_file_nested_too_deep_means_timing_again(tmp_path, monkeypatch):
    """json raises RecursionError on arrays nested too deep, which escaped the reader."""
    path = tmp_path / "autotune.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(path))
    assert autotune.fastest("k", [lambda: 2.0, lambda: 1.0], torch.device("cpu"), lambda c, d: c()) == 1
    assert autotune.CHOICES.get("k") == 1
