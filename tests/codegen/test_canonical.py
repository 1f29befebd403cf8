"""Kernels alike but for their tensors' names compile once (codegen/canonical.py)."""
import re

import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import compile as kernel_compile
from fuser.codegen.canonical import canonical_form
from tests.runtime.test_segmenter_scaling import _reference, _stack


def _digest(text: str) -> str:
    return kernel_compile.source_key(text, "interpreter")


def test_canonical_form_renumbers_tensor_names_in_order_of_first_use():
    source = ("# IR: T7 = T3 + T5\nimport triton\n\n"
              "@triton.jit\ndef fuser_pointwise_T7_tile(T5_ptr, T3_ptr, T7_ptr, X0, T5_n):\n"
              "    acc7 = tl.load(T5_ptr) + tl.load(T3_ptr)\n    T7 = acc7 * T5_n\n    tl.store(T7_ptr, T7)\n")
    name, code, params = canonical_form("fuser_pointwise_T7_tile", source, ["X0", "T5_n"], _digest)
    assert re.fullmatch(r"fuser_pointwise_tile_[0-9a-f]{10}", name)
    assert f"def {name}(T0_ptr, T1_ptr, T2_ptr, X0, T0_n):" in code
    assert "acc2 = tl.load(T0_ptr) + tl.load(T1_ptr)" in code and "T2 = acc2 * T0_n" in code
    assert "# IR" not in code and params == ["X0", "T0_n"]
    # the same kernel over other tensors: the same canonical form
    other = source.replace("T7", "T40").replace("T5", "T12").replace("T3", "T31").replace("acc7", "acc40")
    assert canonical_form("fuser_pointwise_T40_tile", other, ["X0", "T12_n"], _digest) == (name, code, params)


def test_a_models_layers_share_their_kernels(device):
    """Sixteen layers of RMSNorm, matmul and residual: per layer a reduction kernel (with the
    residual add of the layer before), all alike but the first, and a last residual add: three
    kernels compile, not seventeen."""
    layers = 16
    fd = _stack(layers)
    x, ws = torch.randn(4, 8, device=device), [torch.randn(8, 8, device=device) * 0.1 for _ in range(layers)]
    before = set(kernel_compile._memory)
    (out,) = fd.execute([x, *ws])
    torch.testing.assert_close(out, _reference(x, ws), rtol=1e-4, atol=1e-4)
    kernels = [s for s in fd.last_segments() if s.source]
    assert len(kernels) == layers + 1
    names = {re.search(r"def (fuser_\w+)\(", s.source).group(1) for s in kernels}
    assert len(names) <= 3
    assert len(set(kernel_compile._memory) - before) <= len(names)


def test_the_source_users_read_keeps_the_fusions_tensor_names():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.exp(b), a))
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    (out,) = fd.execute([x, y])
    torch.testing.assert_close(out, torch.exp(y) * x)
    (seg,) = fd.last_segments()
    # the IR above the code and the code name T0 and T1 alike; the kernel has its canonical name
    assert "tl.load(T1_ptr" in seg.source and "T0_g_float" in seg.source
    assert re.search(r"def fuser_pointwise_\w+_[0-9a-f]{10}\(", seg.source)


def test_helpers_named_after_the_kernel_are_renamed_with_it():
    """A split kernel's parts are functions named after it (`<name>_partial`): renamed with the
    kernel, they no longer carry the segment's tensor number."""
    def split_source(n: int) -> str:
        name = f"fuser_outer_reduction_T{n}_split"
        return (f"@triton.jit\ndef {name}_partial(T{n}_ptr):\n    return 0\n\n"
                f"@triton.jit\ndef {name}(T{n}_ptr, T{n + 1}_ptr):\n    pid1 = {name}_partial(T{n}_ptr)\n")
    first = canonical_form("fuser_outer_reduction_T5_split", split_source(5), [], _digest)
    second = canonical_form("fuser_outer_reduction_T40_split", split_source(40), [], _digest)
    assert first == second
    name, code, _ = first
    assert f"def {name}_partial(T0_ptr):" in code and f"pid1 = {name}_partial(T0_ptr)" in code
    assert "_T5" not in code


def test_cache_info_counts_kernels_generated_and_compiled():
    """A jitted stack of four alike layers: each layer's kernels are generated (per segment)
    but compile once."""
    import fuser

    def stack(x, w0, w1, w2, w3):
        for w in (w0, w1, w2, w3):
            x = x + torch.tanh(x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)) @ w
        return x

    args = [torch.randn(4, 8)] + [torch.randn(8, 8) * 0.1 for _ in range(4)]
    jitted = fuser.jit(stack)
    torch.testing.assert_close(jitted(*args), stack(*args), rtol=1e-4, atol=1e-4)
    info = jitted.cache_info()
    assert info.kernels >= 4 and info.compiled < info.kernels, info
