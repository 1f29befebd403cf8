"""fuser's one launcher for every kernel signature (codegen/launcher.c, launcher.py).

On the CPU: the module is built against a stand-in libcuda.so.1 that records each launch
(launcher_stub.py runs it in a process of its own), so the bytes of every kind of parameter,
the launch configuration, hooks and errors are checked without a GPU. Needs a C compiler, the
Python headers and Triton's copy of cuda.h; skipped without them. On a GPU: fuser's kernels
launch through it, and other Triton kernels keep Triton's launchers.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from fuser.codegen import launcher

STUB = r"""
#include "cuda.h"
#include <stdint.h>
#include <string.h>

static int launches, param_count, attribute_count, non_portable;
static uint64_t params[130], config[9], attributes[8][3];
static CUresult fail_next = CUDA_SUCCESS;

CUresult cuGetErrorString(CUresult code, const char **text) { *text = "stub error"; return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *context) { *context = (CUcontext)0x1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) { *device = 0; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) { *context = (CUcontext)0x1; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext context) { return CUDA_SUCCESS; }
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  non_portable = a == CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED && v == 1;
  return CUDA_SUCCESS;
}
/* odd addresses are host memory; device addresses are translated by 0x100 */
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr address) {
  if (address & 1) return CUDA_ERROR_INVALID_VALUE;
  *(CUdeviceptr *)data = address + 0x100;
  return CUDA_SUCCESS;
}
/* the function handle is the number of parameters to record */
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **kernel_params, void **extra) {
  if (fail_next != CUDA_SUCCESS) { CUresult r = fail_next; fail_next = CUDA_SUCCESS; return r; }
  launches++;
  param_count = (int)(uintptr_t)f;
  for (int k = 0; k < param_count; k++) memcpy(&params[k], kernel_params[k], 8);
  uint64_t values[9] = {c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                        c->sharedMemBytes, (uint64_t)(uintptr_t)c->hStream, (uint64_t)(uintptr_t)f};
  memcpy(config, values, sizeof values);
  attribute_count = c->numAttrs;
  for (unsigned k = 0; k < c->numAttrs && k < 8; k++) {
    attributes[k][0] = c->attrs[k].id;
    attributes[k][1] = c->attrs[k].value.clusterDim.x;  /* the first word of the value */
    attributes[k][2] = c->attrs[k].value.clusterDim.y;
  }
  return CUDA_SUCCESS;
}
int stub_launches(void) { return launches; }
int stub_param_count(void) { return param_count; }
uint64_t stub_param(int k) { return params[k]; }
uint64_t stub_config(int k) { return config[k]; }
int stub_attribute_count(void) { return attribute_count; }
uint64_t stub_attribute(int k, int j) { return attributes[k][j]; }
int stub_non_portable(void) { return non_portable; }
void stub_fail_next_launch(int code) { fail_next = (CUresult)code; }
"""


def _cuda_header_dir():
    try:
        import triton
    except ImportError:
        return None
    found = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    return found if (found / "cuda.h").exists() else None


def _stub_results(tmp_path) -> dict:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    headers, python_headers = _cuda_header_dir(), sysconfig.get_paths()["include"]
    if cc is None or headers is None or not Path(python_headers, "Python.h").exists():
        pytest.skip("needs a C compiler, the Python headers and Triton's cuda.h")
    (tmp_path / "stub.c").write_text(STUB)
    stub = tmp_path / "libcuda.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", f"-I{headers}",
                    str(tmp_path / "stub.c"), "-o", str(stub)], check=True)
    module = tmp_path / f"fuser_launch{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-Wno-unused-parameter",
                    str(launcher.SOURCE), f"-I{headers}", f"-I{python_headers}", f"-L{tmp_path}",
                    "-l:libcuda.so.1", f"-Wl,-rpath,{tmp_path}", "-o", str(module)], check=True)
    run = subprocess.run([sys.executable, str(Path(__file__).with_name("launcher_stub.py")), str(stub), str(module)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _bits(fmt: str, value) -> int:
    return int.from_bytes(struct.pack("<" + fmt, value), "little")


@pytest.fixture(scope="module")
def stub_results(tmp_path_factory):
    return _stub_results(tmp_path_factory.mktemp("launcher"))


def test_every_parameter_kind_lands_in_its_bytes(stub_results):
    got = stub_results["scalars"]
    assert got["launches"] == 1
    # (value, bytes the kernel reads): a slot's first bytes hold the parameter
    expected = [(0x10000 + 0x100, 8),  # a tensor: data_ptr(), then the driver's device address
                (0x20000, 8),          # an int is the address itself
                (_bits("i", -5), 4), (_bits("f", 1.5), 4),
                (_bits("f", -2.75) >> 16, 2),  # bf16: the fp32's high half, as Triton packs it
                (_bits("e", 0.5), 2), (_bits("d", 3.25), 8), (_bits("q", -(2 ** 40)), 8),
                # the constexpr is passed, not a parameter
                (_bits("b", -3), 1), (_bits("h", -300), 2), (255, 1), (65535, 2), (2 ** 32 - 1, 4),
                (2 ** 64 - 1, 8),
                (0, 8), (0x30000 + 0x100, 8)]  # global scratch (None), profile scratch
    assert len(got["params"]) == len(expected)
    for k, ((value, size), param) in enumerate(zip(expected, got["params"])):
        mask = (1 << (8 * size)) - 1
        assert param & mask == value, f"parameter {k}: {param:#x} against {value:#x}"
    config = got["config"]
    assert (config["gridX"], config["gridY"], config["gridZ"]) == (2, 3, 4)
    assert (config["blockX"], config["blockY"], config["blockZ"]) == (128, 1, 1)
    assert config["shared"] == 1024 and config["stream"] == 77
    # programmatic stream serialization (PDL) asked, value 1
    assert got["attributes"] == [[6, 1, 0]]


def test_clusters_cooperative_grid_and_hooks(stub_results):
    got = stub_results["clusters"]
    assert got["config"]["gridX"] == 5 * 2 and got["config"]["blockX"] == 8 * 32
    ids = [a[0] for a in got["attributes"]]
    assert ids == [2, 4, 5]  # cooperative, cluster dimension, cluster scheduling policy (cuda.h's ids)
    assert got["attributes"][1][1:] == [2, 1]  # a cluster of 2 CTAs along x
    assert got["hooks"] == ["meta", ["exit", "meta"]]
    assert stub_results["empty_grid_launches"] == 0
    assert stub_results["sixteen_ctas"]["non_portable"] == 1


def test_bad_arguments_raise_before_launching(stub_results):
    errors = stub_results["errors"]
    assert errors["count"][0] == "TypeError" and "arguments" in errors["count"][1]
    assert errors["i32_range"][0] == "OverflowError" and "argument 2" in errors["i32_range"][1]
    assert errors["host_pointer"][0] == "ValueError" and "argument 0" in errors["host_pointer"][1]
    assert errors["not_a_pointer"][0] == "TypeError"  # as Triton's: direct launches fall back on it
    assert errors["grid_range"][0] == "OverflowError"  # never a grid cut down to 5 programs
    assert errors["bad_code"][0] == "ValueError" and "x" in errors["bad_code"][1]
    assert errors["metadata"][0] == "TypeError"
    assert errors["launch_fails"] == ["RuntimeError", "Triton Error [CUDA]: stub error"]


def test_signature_codes():
    sig = {"x": "*bf16", "n": "i32", "m": "i64", "s": "fp32", "B": "constexpr", "flag": "i1", "u": "u64"}
    assert launcher.signature_codes(sig) == b"piLfcbK"
    assert launcher.signature_codes({"d": "tensordesc<fp16[64, 64]>"}) is None
    assert launcher.signature_codes({"t": ("*fp32", "i32")}) is None
    assert launcher.signature_codes({f"p{k}": "*fp32" for k in range(127)}) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fuser_kernels_launch_through_it_and_others_do_not():
    import triton
    import triton.language as tl

    from fuser.codegen import compile as kcompile

    if not triton.__version__.startswith("3.6."):
        pytest.skip("the generic launcher follows Triton 3.6's launch convention")
    source = (
        "import triton\nimport triton.language as tl\n\n\n"
        "def scaled_shift(x_ptr, out_ptr, a, b, c, n, BLOCK: tl.constexpr):\n"
        "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    m = i < n\n"
        "    x = tl.load(x_ptr + i, mask=m)\n"
        "    tl.store(out_ptr + i, x * c + a + b.to(tl.float32), mask=m)\n")
    kernel = kcompile.load_kernel("scaled_shift", source, "cuda", ("a", "b", "c", "n"))
    x = torch.randn(1000, device="cuda")
    out = torch.empty_like(x)
    compiled = kernel[(4,)](x, out, -3, 2 ** 33, 0.25, x.numel(), BLOCK=256)
    torch.testing.assert_close(out, x * 0.25 - 3 + 2.0 ** 33)
    assert launcher.status() == "in use"
    assert type(compiled.run).__name__ == "GenericLauncher"

    @triton.jit
    def plain(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)

    y = torch.zeros(8, device="cuda")
    other = plain[(1,)](y, 8, BLOCK=8)
    torch.testing.assert_close(y, torch.ones(8, device="cuda"))
    assert type(other.run).__name__ == "CudaLauncher"
