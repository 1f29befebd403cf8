"""Meta kernels for the fake-quantize ops (QAT's quantizers) that torch has none for.

`torch.fake_quantize_per_tensor_affine` and `torch.fake_quantize_per_channel_affine` run as
ATen ops with only a CPU (and CUDA) kernel. FakeTensor runs such an op on zeros of the input's
sizes, which only static sizes have: under `fuser.jit`'s default `dynamic="rows"` Dynamo found
it "unsupported", broke the graph there and ran the op eagerly between two graphs (a
per-channel fake-quant alone captured no graph at all). With a Meta kernel the op stays in the
graph, where fuser runs it as one ATen step between its fusions.

Each kernel returns what the CPU kernel returns: tensors laid out like the input (its
`empty_like`), the bool mask the backward multiplies the gradient by, and for the learnable
ops' backward the fp32 gradients of the input, scale and zero point. They make the CPU
kernel's range and size checks, and the input's and scale's type checks (the learnable
backward's too), so such a bad call fails at trace, as in eager; a check of values (a
per-channel zero point out of range) is the op's own, when the graph runs it.

Registered only for an op this torch has no Meta kernel for (a torch that gains its own keeps
it); a failed registration leaves the op as it was (a graph break), never fails the import.

The per-channel op's backward (the incoming gradient times the mask) is CompositeImplicit: its
C++ decomposition asks the sizes for integers, which symbolic sizes refuse, so AOTAutograd could
not trace the backward once the weight's sizes were symbols. Traces decompose it in Python
instead (`py_impl`, as torch/_decomp does for such ops); eager calls keep the C++ one.
"""
from __future__ import annotations

import torch


def _check_range(quant_min: int, quant_max: int) -> None:
    torch._check(quant_min <= quant_max,
                 lambda: "`quant_min` should be less than or equal to `quant_max`.")


def _check_channels(self, scale, zero_point, axis: int) -> None:
    """Per-channel scale and zero point: one value for each index of `self`'s axis `axis`."""
    torch._check(scale.dim() == 1, lambda: "scale should be a 1-D tensor")
    torch._check(zero_point.dim() == 1, lambda: "zero point should be a 1-D tensor")
    torch._check(scale.numel() == zero_point.numel(),
                 lambda: "scale and zero-point need to have the same dimensions")
    torch._check(0 <= axis < self.dim(),
                 lambda: "`axis` must be between 0 and number of dimensions of input")
    torch._check(self.size(axis) == scale.numel(),
                 lambda: "dimensions of scale and zero-point are not consistent with input tensor")


def _output_and_mask(self):
    if not self.is_floating_point():  # (as the CPU kernel: "not implemented for 'Int'")
        raise NotImplementedError(f"fake-quantize: the input must be floating, found {self.dtype}")
    return torch.empty_like(self), torch.empty_like(self, dtype=torch.bool)


def fake_quantize_per_tensor_affine_cachemask(self, scale, zero_point, quant_min, quant_max):
    _check_range(quant_min, quant_max)
    torch._check(quant_min <= zero_point <= quant_max,
                 lambda: "`zero_point` must be between `quant_min` and `quant_max`.")
    return _output_and_mask(self)


def fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
        self, scale, zero_point, fake_quant_enabled, quant_min, quant_max):
    _check_range(quant_min, quant_max)
    return _output_and_mask(self)


def fake_quantize_per_channel_affine_cachemask(self, scale, zero_point, axis, quant_min, quant_max):
    _check_range(quant_min, quant_max)
    _check_channels(self, scale, zero_point, axis)
    torch._check(scale.dtype in (torch.float32, torch.bfloat16),
                 lambda: f"Scale must be Float or BFloat16, found {scale.dtype}")
    return _output_and_mask(self)


def fake_quantize_learnable_per_tensor_affine(self, scale, zero_point, quant_min, quant_max,
                                              grad_factor=1.0):
    _check_range(quant_min, quant_max)
    return torch.empty_like(self)


def fake_quantize_learnable_per_channel_affine(self, scale, zero_point, axis, quant_min, quant_max,
                                               grad_factor=1.0):
    _check_range(quant_min, quant_max)
    _check_channels(self, scale, zero_point, axis)
    return torch.empty_like(self)


def _learnable_gradients(grad, self, scale, zero_point, parameter_shape):
    """The learnable backward computes in fp32 (every tensor converted first where the input is
    bf16): the input's gradient laid out like it, the scale's and zero point's summed to the
    parameters' shape."""
    if self.dtype != torch.bfloat16:
        for name, t in (("grad", grad), ("self", self), ("scale", scale), ("zero_point", zero_point)):
            torch._check(t.dtype == torch.float32,
                         lambda: f"fake-quantize backward: {name} must be float32 (or the input "
                                 f"bfloat16), found {t.dtype}")
    return (torch.empty_like(self, dtype=torch.float32),
            self.new_empty(parameter_shape, dtype=torch.float32),
            self.new_empty(parameter_shape, dtype=torch.float32))


def fake_quantize_learnable_per_tensor_affine_backward(grad, self, scale, zero_point, quant_min,
                                                       quant_max, grad_factor=1.0):
    _check_range(quant_min, quant_max)
    return _learnable_gradients(grad, self, scale, zero_point, (1,))


def fake_quantize_learnable_per_channel_affine_backward(grad, self, scale, zero_point, axis,
                                                        quant_min, quant_max, grad_factor=1.0):
    _check_range(quant_min, quant_max)
    _check_channels(self, scale, zero_point, axis)
    return _learnable_gradients(grad, self, scale, zero_point, scale.shape)


def fake_quantize_per_channel_affine_cachemask_backward(grad, mask):
    """The gradient through a per-channel fake-quantize: the incoming one where the input was
    in range."""
    torch._check(mask.dtype == torch.bool,
                 lambda: f"fake-quantize backward: mask must be bool, found {mask.dtype}")
    torch._check(grad.numel() == mask.numel(),
                 lambda: "fake-quantize backward: `mask` and `dY` are not the same size")
    return grad * mask


# ATen op (default overload) -> its Meta kernel
META_KERNELS = {
    "fake_quantize_per_tensor_affine_cachemask": fake_quantize_per_tensor_affine_cachemask,
    "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams":
        fake_quantize_per_tensor_affine_cachemask_tensor_qparams,
    "fake_quantize_per_channel_affine_cachemask": fake_quantize_per_channel_affine_cachemask,
    "_fake_quantize_learnable_per_tensor_affine": fake_quantize_learnable_per_tensor_affine,
    "_fake_quantize_learnable_per_channel_affine": fake_quantize_learnable_per_channel_affine,
    "_fake_quantize_learnable_per_tensor_affine_backward":
        fake_quantize_learnable_per_tensor_affine_backward,
    "_fake_quantize_learnable_per_channel_affine_backward":
        fake_quantize_learnable_per_channel_affine_backward,
}

# the registrations last as long as this Library object
_META_LIBRARY = None


def register_missing_kernels() -> list[str]:
    """Registers each Meta kernel whose op has none in this torch, and the per-channel
    backward's decomposition; returns the names of the ops that got one."""
    global _META_LIBRARY
    registered = []
    try:
        _META_LIBRARY = _META_LIBRARY or torch.library.Library("aten", "IMPL")
    except Exception:  # no registry to add to: every op stays as it was
        return registered
    for name, kernel in META_KERNELS.items():
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "Meta"):
                continue
            _META_LIBRARY.impl(name, kernel, "Meta")
        except Exception:  # a torch without this op, or refusing it: the op stays as it was
            continue
        registered.append(name)
    if _register_decomposition("fake_quantize_per_channel_affine_cachemask_backward",
                               fake_quantize_per_channel_affine_cachemask_backward):
        registered.append("fake_quantize_per_channel_affine_cachemask_backward")
    return registered


def _register_decomposition(name: str, decomposition) -> bool:
    """Traces (Dynamo's, AOTAutograd's: the Python dispatcher) decompose the CompositeImplicit
    op `name` with `decomposition` instead of its C++ one; eager calls keep the C++ one."""
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    try:
        op = getattr(torch.ops.aten, name).default
        if key in op.py_kernels:
            return False
        op.py_impl(key)(decomposition)
    except Exception:  # a torch without this op, or refusing it: the op stays as it was
        return False
    return True


REGISTERED = register_missing_kernels()
