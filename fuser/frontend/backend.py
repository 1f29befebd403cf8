"""The TorchDynamo backend: `torch.compile(fn, backend="fuser")`.

Dynamo captures Python into FX graphs (graph breaks are its business). AOTAutograd traces each
graph to ATen with the core-ATen decompositions, functionalizes it, and, when gradients are
needed, splits the joint graph into forward and backward with the min-cut partitioner (after
fuser's common-subexpression elimination, `cse.py`), which chooses the activations to save
(recomputing cheap pointwise values rather than storing them,
never storing one value twice). Each ATen graph is planned (`partition.py`) and becomes a
`GraphProgram`.

One backend object exists per set of options, so every `fuser.jit` with the same options
shares Dynamo's cache for a function instead of recompiling it per decorator.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.autograd.forward_ad as _forward_ad

from ..codegen.inline import address_span
from ..errors import FusionInputError, UnsupportedError
from ..evaluate.binding import meta_input_error
from . import ahead
from .complex_products import real_complex_products
from .cse import eliminate_common_subexpressions
from .eager_checks import check_dynamo_rewrites, may_write_inputs, writes_uncastable_result
from . import fake_kernels  # noqa: F401 (Meta kernels for the fake-quantize ops: no graph break)
from .foreach import foreach_decompositions, whole_foreach_lerps
from .gc_pause import GC_PAUSE
from .meta import size_expr
from .partition import plan_graph
from .reinplace import reinplace_scatters
from .program import CURRENT_STATS, GraphProgram
from .second_order import AotCall
from .softmax_backward import backward_softmax_without_division
from .training import TrainingCall, forward_facts, plain_aot_metadata


@dataclass(eq=False)
class GraphRecord:
    """One graph Dynamo captured, and the programs compiled from it (inference, or forward and
    backward, the backward compiled when first needed)."""

    dynamo_code: str
    programs: list[GraphProgram] = field(default_factory=list)
    # it writes (or may write) an input in place: a jitted call that fails after running it is
    # not run again eagerly, which would apply the write twice (jit.py)
    writes_inputs: bool = False


@functools.cache
def decompositions() -> dict:
    """Core-ATen decompositions, plus softmax and log-softmax, less silu, the CPU
    flash-attention forward and the few ops noted below.

    Softmax and log-softmax are decomposed (max, exp, sum) so that the partitioner can save the
    input and the per-row max and sum (or its log: softmax_backward.py) for the backward, which
    recomputes the probabilities in its one kernel, instead of saving the fp32 probabilities (4
    bytes an element written by the forward and read by the backward). silu has a lowering of
    its own (layer norm and gelu stay whole in the core set already). The CPU flash-attention
    forward's decomposition returns a second output its (undecomposed) backward does not
    expect, so gradients came out wrong; it stays one ATen call, like the GPU attention kernels.

    The table is the core-ATen list itself, without the entries `core_aten_decompositions()`
    adds for every CompositeImplicitAutograd op (for export, which traces above autograd):
    AOTAutograd traces below it, where the dispatcher decomposes those ops already (the same
    graphs for every suite function, the llama pieces and the train_block model), and building
    them imports torch.export and walks every ATen op (60 ms a process on the development CPU)."""
    from torch import _decomp
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    core = getattr(_decomp, "_core_aten_decompositions_post_autograd", None) or _decomp.core_aten_decompositions
    table = dict(core())
    table.update(get_decompositions([aten._softmax, aten._log_softmax]))
    # batch norm, which the core set keeps whole (an ATen call between fusions, its running
    # statistics written back by two more): decomposed, its statistics a var_mean over the
    # input upcast to fp32, the output rounded once, the new running statistics computed in
    # fp32 (group norm has a rule of its own, rules/reduction.py)
    batch_norm = get_decompositions([aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit,
                                     aten._native_batch_norm_legit_no_training])
    table.update({op: _statistics_in_fp32(fn) for op, fn in batch_norm.items()})
    table.update(foreach_decompositions())
    # composite ops with a CPU kernel of their own: the dispatcher runs that kernel rather than
    # decomposing them, so their composite form is asked for here (export's table had it)
    for op in (getattr(aten, "native_channel_shuffle", None),):
        if op is not None:
            table.setdefault(op.default, op.default.decompose)
    for name in ("silu", "_scaled_dot_product_flash_attention_for_cpu"):
        op = getattr(aten, name, None)
        if op is not None:
            table.pop(op.default, None)
    # masked_fill with a number has a lowering of its own, which checks the number against the
    # tensor's dtype as eager does (the decomposition's scalar_tensor does not)
    table.pop(aten.masked_fill.Scalar, None)
    # _unsafe_view (a bias-free linear's or a matmul's 3-D result) stays itself: AOTAutograd
    # takes its output for a new tensor, and decomposed into a view the program returned a view
    # of the 2-D product, which autograd then forbade the caller to write in place (`y += r`)
    table.pop(aten._unsafe_view.default, None)
    # select_scatter (`kc[:, :, s] = k` functionalized) stays itself, lowered to the same where
    # (rules/shape.py): decomposed, it was a where over the whole tensor, which reinplace.py
    # cannot tell from other arithmetic, so a KV-cache row write at an int position copied the
    # whole cache twice
    table.pop(aten.select_scatter.default, None)
    # ops kept whole, for what their decompositions lose:
    # - bernoulli of a probability tensor: its lowering gives NaN where a probability is outside
    #   [0, 1], where `rand < p` quietly gave 0 or 1 (eager raises);
    # - threshold and addcmul, which have rules of their own: threshold's where against a float
    #   took an integer tensor through fp32 (123456789 became 123456792); addcmul's refused a
    #   float value with integer tensors, which eager truncates (an InternalError);
    # - index_add and index_copy refuse a negative index, which index_put wraps (a KV-cache
    #   write to position -1 wrote the last row); index_fill refuses a value its tensor cannot
    #   hold, which scalar_tensor stores as inf;
    # - max_unpool2d/3d check each index against its own plane, where the decomposition's
    #   index_put over the flattened batch wrote an index past it into the next channel
    for name, overloads in (("bernoulli", ("default",)), ("threshold", ("default",)), ("addcmul", ("default",)),
                            ("index_add", ("default",)), ("index_copy", ("default",)),
                            ("max_unpool2d", ("default",)), ("max_unpool3d", ("default",)),
                            ("index_fill", ("int_Scalar", "int_Tensor"))):
        for overload in overloads:
            table.pop(getattr(getattr(aten, name, None), overload, None), None)
    # the losses' dtype checks are their CPU kernels' (none in the meta functions or the
    # decompositions): an int32 class target, a weight of another type than the input, an
    # integer BCE target computed where eager refuses them; and the regression losses'
    # backward divided by the element count in Python, failing on an empty batch
    for op in (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default):
        if op in table:
            table[op] = _checked_class_target(table[op])
    if aten.binary_cross_entropy.default in table:
        table[aten.binary_cross_entropy.default] = _checked_target_type(table[aten.binary_cross_entropy.default])
    for name in ("mse_loss_backward", "smooth_l1_loss_backward", "huber_loss_backward"):
        op = getattr(getattr(aten, name, None), "default", None)
        if op in table:
            table[op] = _empty_safe_loss_backward(table[op])
    # group norm's backward divides by a group's element count in Python (float division by zero
    # for an empty spatial extent, where eager returns an empty input gradient)
    if aten.native_group_norm_backward.default in table:
        table[aten.native_group_norm_backward.default] = _empty_safe_group_norm_backward(
            table[aten.native_group_norm_backward.default])
    # huber and soft margin losses: eager's kernels write the elementwise loss into a tensor of the
    # input's type (a wider target's promotion gave an fp32 loss of a bf16 input); huber's
    # backward kernel refuses a target of another type, which the decomposition computed: kept
    # whole then, ATen's op raises eager's error when the backward runs
    for op in (aten.huber_loss.default, aten.soft_margin_loss.default):
        if op in table:
            table[op] = _loss_of_input_dtype(table[op])
    huber_backward = aten.huber_loss_backward.default
    if huber_backward in table:
        table[huber_backward] = _whole_for_other_target_type(table[huber_backward])
    # the scalar checks of eager's kernels, which the decompositions lack: celu's alpha of 0
    # (divided by), smooth_l1_loss's negative beta (both computed a value)
    for op in (aten.celu.default, aten.celu_.default):
        if op in table:
            table[op] = _checked_celu_alpha(table[op])
    if aten.smooth_l1_loss.default in table:
        table[aten.smooth_l1_loss.default] = _checked_smooth_l1_beta(table[aten.smooth_l1_loss.default])
    # elu's and leaky_relu's backward from the result of the in-place op (elu_, leaky_relu_): with
    # a negative slope the result's sign is not the input's, and the decompositions, choosing the
    # branch by it, gave the positive branch's gradient where eager's backward refuses; kept whole
    # then, the ATen op raises eager's error when the backward runs, as eager does (a check at
    # trace time would raise in the forward, which eager computes)
    if aten.elu_backward.default in table:
        table[aten.elu_backward.default] = _elu_backward_whole_for_negative_alpha(table[aten.elu_backward.default])
    if aten.leaky_relu_backward.default in table:
        table[aten.leaky_relu_backward.default] = _leaky_relu_backward_whole_for_negative_slope(
            table[aten.leaky_relu_backward.default])
    # rrelu in evaluation is leaky_relu with the slope (lower + upper) / 2 (eager's kernels compute
    # it so, forward and backward): decomposed, it fuses; training's random slopes stay ATen's
    table.update(_rrelu_in_evaluation())
    # logit's backward with eps: torch's where(lo <= x <= hi, ...) gave 0 at a NaN input,
    # where eager's kernels give NaN (0 only outside the bounds)
    if aten.logit_backward.default in table:
        table[aten.logit_backward.default] = _logit_backward
    # all() decomposes to logical_not(any(logical_not(x))), and ATen has no logical_not for
    # uint16 to uint64 (a raw NotImplementedError where eager's all computes): those stay whole
    for overload in ("default", "dim", "dims"):
        op = getattr(aten.all, overload, None)
        if op in table:
            table[op] = _whole_for_wide_unsigned(table[op])
    # ops eager refuses for operands of two dtypes, whose decompositions promote them (a bf16
    # matrix times an fp32 vector computed in fp32), or for a dtype eager has no kernel of, which
    # the decompositions compute (a bool mv) or fail in another op (a complex heaviside's lt):
    # those stay whole, and ATen's op raises eager's error
    for op, no_kernel in ((aten.heaviside.default, _is_complex), (aten.heaviside_.default, _is_complex),
                          (aten.linalg_cross.default, _is_bool), (aten.mv.default, _is_bool)):
        if op in table:
            table[op] = _whole_for_mixed_dtypes(table[op], no_kernel)
    return table


def _logit_backward(grad_output: torch.Tensor, x: torch.Tensor, eps: Optional[float] = None) -> torch.Tensor:
    """d logit(x) as eager's kernels compute it: 0 outside [eps, 1 - eps] (with eps), NaN where
    x is NaN or (without eps) outside [0, 1]."""
    derivative = grad_output / (x * (1.0 - x))
    if eps is None:
        return torch.where((x < 0.0) | (x > 1.0), float("nan"), derivative)
    return torch.where((x < eps) | (x > 1.0 - eps), 0.0, derivative)


def _statistics_in_fp32(decomposition):
    """Batch norm's decomposition taking a half or bf16 input upcast to fp32, its output rounded
    once to the input's type: the same arithmetic, but for a CPU input torch's rounds the saved
    mean and 1/std to the input's type (as its CPU kernel does), and the backward read them so
    (a bf16 input gradient up to 9% off float64, 0.4% from fp32 ones); the trace and the GPU
    keep them fp32."""
    def decompose(x, *args, **kwargs):
        if x.dtype not in (torch.float16, torch.bfloat16):
            return decomposition(x, *args, **kwargs)
        output, *rest = decomposition(x.float(), *args, **kwargs)
        return (output.to(x.dtype), *rest)
    return decompose


def _checked_class_target(decomposition):
    def decompose(x, target, weight=None, *args, **kwargs):
        torch._check(target.dtype in (torch.int64, torch.uint8),
                     lambda: f"expected target dtype to be Long or Byte, but got {target.dtype}")
        torch._check(weight is None or weight.dtype == x.dtype,
                     lambda: f"expected scalar type {x.dtype} but found {weight.dtype}")
        return decomposition(x, target, weight, *args, **kwargs)
    return decompose


def _checked_target_type(decomposition):
    def decompose(x, target, *args, **kwargs):
        torch._check(target.dtype == x.dtype, lambda: f"Found dtype {target.dtype} but expected {x.dtype}")
        return decomposition(x, target, *args, **kwargs)
    return decompose


def _empty_safe_loss_backward(decomposition):
    def decompose(grad_output, x, *args, **kwargs):
        if x.numel() == 0:
            return torch.zeros_like(x)
        return decomposition(grad_output, x, *args, **kwargs)
    return decompose


def _empty_safe_group_norm_backward(decomposition):
    """Group norm's backward, its input gradient the empty tensor it is where a group has no
    elements; the weight's and bias's gradients the decomposition's (eager's: NaN and 0, from
    the NaN 1/std of an empty group)."""
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    def decompose(grad_output, x, mean, rstd, weight, N, C, HxW, group, output_mask):
        if not (output_mask[0] and guard_or_false(HxW * (C // group) == 0)):
            return decomposition(grad_output, x, mean, rstd, weight, N, C, HxW, group, output_mask)
        _, grad_weight, grad_bias = decomposition(grad_output, x, mean, rstd, weight, N, C, HxW, group,
                                                  [False, *output_mask[1:]])
        return torch.zeros_like(x), grad_weight, grad_bias
    return decompose


def _loss_of_input_dtype(decomposition):
    """An elementwise loss rounded to its input's type before the reduction, as eager's kernels
    write it (into `empty_like(input)`), where the target's type differs. Where the loss needs a
    gradient, the result keeps the promoted type, eager's values in it: AOTAutograd takes the
    outputs' types from torch's meta functions, which promote, and traces the backward for a
    gradient of that type (one of the input's type would not bind to it)."""
    from torch._decomp.decompositions import Reduction, apply_loss_reduction

    def decompose(x, target, reduction=Reduction.MEAN.value, *args, **kwargs):
        if target.dtype == x.dtype:
            return decomposition(x, target, reduction, *args, **kwargs)
        loss = decomposition(x, target, Reduction.NONE.value, *args, **kwargs)
        rounded = apply_loss_reduction(loss.to(x.dtype), reduction)
        needs_grad = torch.is_grad_enabled() and (x.requires_grad or target.requires_grad)
        return rounded.to(loss.dtype) if needs_grad else rounded
    return decompose


def _whole_for_other_target_type(decomposition):
    def decompose(grad_output, x, target, *args, **kwargs):
        if target.dtype != x.dtype:
            return NotImplemented  # (eager's kernel refuses it)
        return decomposition(grad_output, x, target, *args, **kwargs)
    return decompose


def _checked_celu_alpha(decomposition):
    def decompose(x, alpha=1.0):
        torch._check(alpha != 0, lambda: "ZeroDivisionError: alpha cannot be 0 for CELU")
        return decomposition(x, alpha)
    return decompose


def _checked_smooth_l1_beta(decomposition):
    def decompose(x, target, reduction=1, beta=1.0):
        torch._check(beta >= 0, lambda: "smooth_l1_loss does not support negative values for beta.")
        return decomposition(x, target, reduction, beta)
    return decompose


def _elu_backward_whole_for_negative_alpha(decomposition):
    def decompose(grad_output, alpha, scale, input_scale, is_result, self_or_result):
        if is_result and alpha < 0:
            return NotImplemented  # (eager's kernel refuses it)
        return decomposition(grad_output, alpha, scale, input_scale, is_result, self_or_result)
    return decompose


def _leaky_relu_backward_whole_for_negative_slope(decomposition):
    def decompose(grad_output, x, negative_slope, self_is_result):
        if self_is_result and negative_slope < 0:
            return NotImplemented  # (eager's kernel refuses it)
        return decomposition(grad_output, x, negative_slope, self_is_result)
    return decompose


def _rrelu_in_evaluation() -> dict:
    """rrelu's forward and backward out of training as leaky_relu's; in training (random slopes,
    the noise saved for the backward) NotImplemented: ATen's ops."""
    aten = torch.ops.aten
    forward_op = getattr(aten, "rrelu_with_noise_functional", None)
    if forward_op is None:  # pragma: no cover - a torch whose functionalization names it otherwise
        return {}

    def forward(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
        if training:
            return NotImplemented
        # (noise: the out-of-training kernel leaves it as it is)
        return aten.leaky_relu.default(x, (lower + upper) / 2), noise.clone()

    def backward(grad_output, x, noise, lower, upper, training, self_is_result):
        if training:
            return NotImplemented
        return aten.leaky_relu_backward.default(grad_output, x, (lower + upper) / 2, self_is_result)
    return {forward_op.default: forward, aten.rrelu_with_noise_backward.default: backward}


_WIDE_UNSIGNED = tuple(getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name))


def _whole_for_wide_unsigned(decomposition):
    """`decomposition`, or the op kept whole (NotImplemented: make_fx then records the op
    itself) for a uint16, uint32 or uint64 tensor."""
    def decompose(x, *args, **kwargs):
        if isinstance(x, torch.Tensor) and x.dtype in _WIDE_UNSIGNED:
            return NotImplemented
        return decomposition(x, *args, **kwargs)
    return decompose


def _whole_for_mixed_dtypes(decomposition, no_kernel):
    """`decomposition`, or the op kept whole (NotImplemented) where its two tensor operands
    differ in dtype or `no_kernel(dtype)` holds for their dtype."""
    def decompose(x, other, *args, **kwargs):
        if isinstance(x, torch.Tensor) and isinstance(other, torch.Tensor) and \
                (x.dtype != other.dtype or no_kernel(x.dtype)):
            return NotImplemented
        return decomposition(x, other, *args, **kwargs)
    return decompose


def _is_complex(dtype: torch.dtype) -> bool:
    return dtype.is_complex


def _is_bool(dtype: torch.dtype) -> bool:
    return dtype is torch.bool


# functions eager computes for floating tensors only: on an integer or bool one it raises
# (NotImplementedError: "GeluKernelImpl" not implemented for 'Long'), where their lowerings and
# decompositions (AOTAutograd's own for some: hardshrink's where) would compute integers; and
# those it refuses for bool tensors only
_FLOATING_ONLY = frozenset({
    "gelu", "softplus", "logsigmoid", "log_sigmoid", "logaddexp", "logaddexp2", "hardswish", "hardsigmoid", "mish",
    "hardshrink", "softshrink", "frac", "lerp", "addcdiv", "elu", "celu", "selu", "glu", "silu", "leaky_relu",
    "rrelu", "mse_loss", "smooth_l1_loss", "huber_loss", "nextafter", "softmax", "log_softmax", "softmin",
    "special_softmax", "special_log_softmax", "_softmax", "_log_softmax"})
_NOT_FOR_BOOL = frozenset({"hardtanh", "relu6", "threshold", "abs", "ceil", "floor", "round", "trunc", "pow"})
# by their input's type: those that refuse a bool input whose result is a float; and one eager
# has no half or bfloat16 kernel of (its decomposition computes any float)
_INPUT_REFUSED = {"mvlgamma": frozenset({torch.bool}), "special_multigammaln": frozenset({torch.bool}),
                  "special_log_ndtr": frozenset({torch.float16, torch.bfloat16})}
# what eager does with a float8 tensor: casts, moves and copies, comparisons for equality, abs
# and isnan; it refuses arithmetic, reductions and promotion with another float type, which
# the lowerings (computing in fp32, as nvFuser's ops do) would compute
_FLOAT8_OPS = frozenset({
    "to", "float", "half", "bfloat16", "double", "int", "long", "short", "bool", "char", "byte", "type", "type_as",
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "contiguous", "expand", "expand_as",
    "squeeze", "unsqueeze", "flatten", "unflatten", "narrow", "select", "getitem", "setitem", "split",
    "split_with_sizes", "chunk", "unbind", "movedim", "moveaxis", "as_strided", "clone", "detach", "cat", "concat",
    "concatenate", "stack", "where", "eq", "ne", "abs", "isnan", "copy", "fill", "zero", "zeros_like", "ones_like",
    "empty_like", "full_like", "new_empty", "new_zeros", "new_ones", "new_full", "index_select", "index_put", "flip",
    "roll", "repeat", "pad", "size", "stride", "dim", "numel", "element_size", "_scaled_mm", "_scaled_grouped_mm",
    "getattr", "swapaxes", "swapdims", "ravel", "broadcast_to", "tensor_split", "diagonal", "tile",
    "repeat_interleave", "unfold", "hstack", "vstack", "cpu", "cuda"})
# of those, the ones that refuse a float8 operand beside one of another float type (promotion)
_FLOAT8_SAME_TYPE = frozenset({"where", "eq", "ne", "cat", "concat", "concatenate", "stack", "hstack", "vstack"})
_FLOAT8 = frozenset(getattr(torch, name) for name in dir(torch) if name.startswith("float8_"))


def _float8_refused(node: torch.fx.Node, name: str) -> bool:
    """Whether eager refuses `node` (named `name`) for the float8 tensors it reads."""
    dtypes = set()
    for a in node.all_input_nodes:
        v = a.meta.get("example_value")
        if isinstance(v, torch.Tensor):
            dtypes.add(v.dtype)
    if not dtypes & _FLOAT8:
        return False
    if name not in _FLOAT8_OPS:
        return True
    if name in _FLOAT8_SAME_TYPE:
        return any(d.is_floating_point and d not in _FLOAT8 for d in dtypes)
    return name == "setitem" and torch.bool in dtypes  # (a masked fill: eager has none for float8)


# functions whose decompositions in torch itself (registered at the Autograd key too, so that
# AOTAutograd's trace takes them whatever fuser's table) compute wrong values: the graph runs as
# traced. multilabel_margin_loss counted the target slots after the first -1 as class 0.
_DECOMPOSED_WRONGLY = frozenset({"multilabel_margin_loss"})


def _interpolates_empty(node: torch.fx.Node, name: str) -> bool:
    """Whether `node` interpolates (F.interpolate, nn.Upsample, an upsample op) from or to an
    empty spatial extent. Eager then raises "Input and output sizes should be greater than 0"
    (mode="area", an adaptive average pooling, computes); the decompositions torch applies
    above fuser's table lack the check and computed an empty tensor."""
    interpolates = name == "interpolate" or name.lstrip("_").startswith("upsample")
    if not interpolates or "backward" in name or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    x, y = node.args[0].meta.get("example_value"), node.meta.get("example_value")
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        return False
    return any(extent == 0 for extent in (*x.shape[2:], *y.shape[2:]))


def _drops_out_outside_unit_range(node: torch.fx.Node, name: str) -> bool:
    """Whether `node` is a dropout (F.dropout, torch.dropout) whose probability is a number
    outside [0, 1] or NaN. Eager raises "dropout probability has to be between 0 and 1"; torch's
    decomposition of aten.dropout, registered at the Autograd key (so above fuser's table), lacks
    the check: out of training it copied the input, in training bernoulli_ raised its own error.
    (The other dropouts' ATen checks run on Dynamo's fake tensors already.) An int p (2, -1)
    is a number too; a bool is 0 or 1, always in range."""
    if name != "dropout" or not node.args:
        return False
    p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p")
    return isinstance(p, (int, float)) and not isinstance(p, bool) and not 0.0 <= p <= 1.0


def _runs_as_traced(gm: torch.fx.GraphModule) -> bool:
    """Whether Dynamo's graph runs as traced, unfused: it calls one of those functions where
    its result (the type its operands promote to) is one eager refuses, or an op eager has no
    float8 form of on a float8 tensor, or an in-place op whose result its tensor cannot hold
    (running it raises eager's own error; an integer target of mse_loss promotes with the
    float input: computed), or one torch decomposes wrongly, or an interpolation from or to
    an empty extent, or a dropout of a probability outside [0, 1] (eager raises its own error)."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        name = (node.target if node.op == "call_method" else getattr(node.target, "__name__", "")).rstrip("_")
        if name in _DECOMPOSED_WRONGLY or _float8_refused(node, name) or writes_uncastable_result(node):
            return True
        if _interpolates_empty(node, name) or _drops_out_outside_unit_range(node, name):
            return True
        refused = _INPUT_REFUSED.get(name)
        if refused is not None and node.args and isinstance(node.args[0], torch.fx.Node):
            v = node.args[0].meta.get("example_value")
            if isinstance(v, torch.Tensor) and v.dtype in refused:
                return True
        if name not in _FLOATING_ONLY and name not in _NOT_FOR_BOOL:
            continue
        v = node.meta.get("example_value")
        if isinstance(v, torch.Tensor) and (v.dtype is torch.bool if name in _NOT_FOR_BOOL else
                                            not (v.is_floating_point() or v.is_complex())):
            return True
        if name == "addcdiv":  # (eager refuses an integer quotient whatever the input's type)
            quotient = [a.meta.get("example_value") for a in node.args[1:3] if isinstance(a, torch.fx.Node)]
            if len(quotient) == 2 and all(isinstance(q, torch.Tensor) and not (q.is_floating_point() or q.is_complex())
                                          for q in quotient):
                return True
    return False


# torch.compile's modes, as of torch 2.13
_MODES = frozenset({"default", "lite", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"})


def _restart_with_floats_specialized(gm: torch.fx.GraphModule, example_inputs: list) -> None:
    """With dynamic shapes Dynamo turns each Python float into a 0-dim float64 CPU tensor input
    (a "tensorified" SymFloat), and on the GPU every op using it would mix devices and cut the
    fusion. Ask Dynamo to trace again with those floats as constants (guarded by value), as
    AOTAutograd's own pass does for the floats it cannot keep."""
    names = set()
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if isinstance(value, torch.SymFloat):
            # (an unbacked float, an `.item()` captured with capture_scalar_outputs, has no
            # value to specialize to: it stays a tensor)
            names |= {str(sym) for sym in value.node.expr.free_symbols if not str(sym).startswith("zuf")}
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    shape_env = getattr(fake_mode, "shape_env", None)
    if shape_env is not None:  # floats already specialized to a value, keeping their symbol
        names |= {str(sym) for sym in getattr(shape_env, "backed_var_to_val", {})
                  if str(sym).startswith("zf")}
    if not names:
        return
    try:
        from torch._dynamo.exc import TensorifyScalarRestartAnalysis
        from torch._dynamo.symbolic_convert import TensorifyState
    except ImportError:  # pragma: no cover - a torch without the mechanism keeps the floats
        return
    if all(TensorifyState.should_specialize(n) for n in names):
        return  # already asked once: keep what Dynamo made
    for n in names:
        TensorifyState.specialize(n)
    raise TensorifyScalarRestartAnalysis


def _partition_joint(joint: torch.fx.GraphModule, joint_inputs: Any, *, keep: Optional[dict] = None,
                     **kwargs: Any) -> Any:
    """The min-cut partitioner after fuser's CSE of the joint graph, standing in for
    AOTAutograd's own (turned off while fuser compiles: it imports Inductor, see cse.py), and
    after the division is taken out of softmax's backward (softmax_backward.py).
    `keep["backward"]` gets the backward graph (compiled ahead with the forward)."""
    from functorch.compile import min_cut_rematerialization_partition

    changed = eliminate_common_subexpressions(joint.graph)
    if "num_fwd_outputs" in kwargs:
        changed = backward_softmax_without_division(joint.graph, kwargs["num_fwd_outputs"]) > 0 or changed
    if changed:
        joint.recompile()
    _save_reads_of_mutated_inputs(joint)
    forward, backward = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    if keep is not None:
        keep["backward"] = backward
    return forward, backward


def _save_reads_of_mutated_inputs(joint: torch.fx.GraphModule) -> None:
    """Marks the forward's reads of an input the graph writes back into (`copy_(input, new)` at
    its end: a step counter's buffer, `self.n += 1`) as values to save: the partitioner would
    otherwise recompute them in the backward from the input, which the forward has changed by
    then (gradients with the count added twice: AOTAutograd's own partitioner does this too).
    The backward's reads of the value written are taken from the input itself (see
    `_read_written_value_from_input`)."""
    from torch.utils.checkpoint import CheckpointPolicy

    nodes = list(joint.graph.nodes)
    writes = {n.args[0]: n.args[1] for n in nodes if n.target is torch.ops.aten.copy_.default
              and isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"}
    if not writes:
        return
    backward = {n for n in nodes if n.op == "placeholder" and n.name.startswith("tangents")}
    for n in nodes:  # (graph order: a node after one that reads a tangent is backward's too)
        if n.op == "call_function" and any(a in backward for a in n.all_input_nodes):
            backward.add(n)
    changed = False
    for primal, value in writes.items():
        for user in primal.users:
            if user.op == "call_function" and user not in backward and user.target is not torch.ops.aten.copy_.default:
                user.meta["recompute"] = CheckpointPolicy.MUST_SAVE
        changed = _read_written_value_from_input(primal, value, backward) or changed
    if changed:
        joint.recompile()


def _read_written_value_from_input(primal: torch.fx.Node, value: Any, backward: set) -> bool:
    """Has the backward read the value written into `primal` (`copy_(primal, value)`) from
    `primal` itself, as eager's backward reads the buffer it saved (`self.n += 1; y * self.n`
    saves `n`): the forward graph writes the input before its outputs are saved, so the saved
    input holds that value, and a later write to it (a second forward before the backward, the
    caller's `n.add_(1)`) bumps the version autograd checks and raises its "modified by an
    inplace operation" error, as eager's does. Saved as the fresh tensor `value`, the write
    went unseen and the backward used the stale count. Only where `value` is the input's whole
    new content (its dtype and shape: no cast or broadcast in the `copy_`)."""
    if not isinstance(value, torch.fx.Node) or value.op != "call_function":
        return False
    old, new = primal.meta.get("val"), value.meta.get("val")
    if not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor) \
            or old.dtype != new.dtype or old.device != new.device or old.dim() != new.dim() \
            or any(size_expr(a) != size_expr(b) for a, b in zip(old.shape, new.shape)):
        return False  # (sizes compared as expressions: no guard added after the trace)
    readers = [u for u in value.users if u in backward]
    for user in readers:
        user.replace_input_with(value, primal)
    return bool(readers)


def _clone_saved_inputs_written_after(graph: torch.fx.GraphModule) -> None:
    """A forward graph that saves for the backward an input which AOTAutograd's runtime writes
    into after it (`x.mul_(w)` with x needing grad: the write is applied outside the graph, by
    `copy_`), or a view of one, saves a copy instead, as eager's in-place op keeps the value
    from before the write: saved itself, the write bumps its version and autograd refuses the
    backward where eager's runs."""
    meta = getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None)
    try:
        from torch._functorch._aot_autograd.schemas import MutationType

        info, start, tokens = meta.input_info, meta.num_forward, len(meta.tokens)
        written_after = [i.mutates_data and i.mutation_type == MutationType.MUTATED_OUT_GRAPH for i in info]
    except (AttributeError, ImportError, TypeError):  # no metadata, or another torch's
        return
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    if not any(written_after) or tokens or len(placeholders) != len(info):
        return
    written = {p for p, w in zip(placeholders, written_after) if w}
    out = next(n for n in graph.graph.nodes if n.op == "output")
    values = list(out.args[0])
    changed = False
    for pos in range(start, len(values)):
        value = base = values[pos]
        while isinstance(base, torch.fx.Node) and base.op == "call_function" and getattr(base.target, "is_view", False):
            base = base.args[0]
        if base not in written:
            continue
        with graph.graph.inserting_after(value):
            copy = graph.graph.call_function(torch.ops.aten.clone.default, (value,))
        val = value.meta.get("val")
        copy.meta["val"] = val.clone() if isinstance(val, torch.Tensor) else val
        values[pos] = copy
        changed = True
    if changed:
        out.args = (type(out.args[0])(values),)
        graph.recompile()


def _plan_backward_early(backward: torch.fx.GraphModule, record: "GraphRecord") -> Optional[tuple]:
    """The backward graph's program, planned when the forward is (on a copy: AOTAutograd
    compiles its own copy later), with the code it was planned from: AOTAutograd's backward
    compile takes this program if its graph's code is the same. None if planning fails
    (the backward's own compile meets it)."""
    import copy

    from torch._subclasses.fake_tensor import unset_fake_temporarily

    try:
        code = backward.code
        with unset_fake_temporarily():  # (lifted constants are real tensors)
            graph = copy.deepcopy(backward)
        names = _output_names(graph)
        return code, GraphProgram(plan_graph(graph), "backward", record, names)
    except Exception:  # noqa: BLE001 - planned again, and reported, at the backward's compile
        return None


def _wrapper_is_inert(graph: torch.fx.GraphModule, n_inputs: int) -> bool:
    """Whether AOTAutograd's runtime wrapper around this inference graph would only pass the
    arguments through (it costs several microseconds a call; see `plain_aot_metadata`)."""
    meta = plain_aot_metadata(graph, n_inputs)
    if meta is None:
        return False
    outputs = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    return isinstance(outputs, (list, tuple)) and len(outputs) == len(meta.output_info)


class _InferenceCall:
    """An inference program called as Dynamo calls a compiled graph, without AOTAutograd's
    (inert, see `_wrapper_is_inert`) runtime wrapper. Grad mode is off while the program runs,
    as there, unless the program is fusions alone and no input needs a gradient (Dynamo guards
    on each input's requires_grad): then nothing it runs can record an autograd graph. An input
    that needs one can reach an inference graph whose outputs need none (`x.detach() @ w`), and
    ATen segments inside a fusion (a matmul) would record on it."""

    def __init__(self, program: GraphProgram, inputs_need_grad: bool = True):
        self.program = program
        self.grad_off = bool(program.eager_steps) or inputs_need_grad
        self.run = program.positional_call()

    def __call__(self, *args: Any) -> Any:
        if _forward_ad._current_level >= 0:
            # forward-mode AD: the graph's ATen ops carry the tangents; the kernels would drop them
            return self.program.plan.graph(*args)
        if not self.grad_off or not torch.is_grad_enabled():
            return self.run(*args)
        torch._C._set_grad_enabled(False)
        try:
            return self.run(*args)
        finally:
            torch._C._set_grad_enabled(True)


def _output_names(graph: torch.fx.GraphModule) -> list:
    """The name of each output of `graph` (None where an output is no node)."""
    out = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    return [a.name if isinstance(a, torch.fx.Node) else None
            for a in (out if isinstance(out, (list, tuple)) else [out])]


def _aot_compile(gm: torch.fx.GraphModule, example_inputs: list, **aot_options: Any) -> Any:
    """AOTAutograd on a graph Dynamo captured, as torch's `aot_autograd` backend wrapper runs it
    but without importing Inductor's `debug` module on the way (for its AOT logging switch; with
    Inductor's IR and scheduler it took 0.05 s of every process's first jit call on the development
    CPU, about 0.15 s on the H200 host). As there, Dynamo must not trace the backward's compile,
    the backward it makes, or the compiled callable."""
    from torch._dynamo import disable
    from torch._functorch.aot_autograd import aot_module_simplified

    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs) or os.environ.get("TORCH_COMPILE_DEBUG") == "1":
        # nested inputs (compiled autograd's), which torch's wrapper flattens first, or
        # TORCH_COMPILE_DEBUG, under which it writes AOTAutograd's debug log
        from torch._dynamo.backends.common import aot_autograd
        return aot_autograd(**aot_options)(gm, example_inputs)
    compile_backward = aot_options.get("bw_compiler") or aot_options["fw_compiler"]

    def bw_compiler(*args: Any, **kwargs: Any) -> Any:
        return disable(disable(compile_backward)(*args, **kwargs))

    aot_options["bw_compiler"] = bw_compiler
    return disable(aot_module_simplified(gm, example_inputs, **aot_options))


def _named_inputs(gm: torch.fx.GraphModule, example_inputs: list) -> list[tuple[str, Any]]:
    """(name, value) of each input of a graph Dynamo captured: an argument by its own name,
    anything else (a module's buffer) by Dynamo's source."""
    out = []
    for node, value in zip((n for n in gm.graph.nodes if n.op == "placeholder"), example_inputs):
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = getattr(source, "local_name", None) or getattr(source, "name", node.name)
        out.append((name() if callable(name) else name, value))  # (a method in older torch, then a property)
    return out


def _refuse_meta_inputs(gm: torch.fx.GraphModule, example_inputs: list) -> None:
    for name, value in _named_inputs(gm, example_inputs):
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            raise meta_input_error(f"argument {name}")


_SHARED_ELEMENTS = "refers to a single memory location"  # (eager's refusal of a write to such elements)


def _expanded_inputs(names: list[str], inputs: Any) -> list[str]:
    """Each of `inputs` more than one of whose elements share memory (an expanded one), by its
    name in `names`, shape and strides."""
    return [f"{name} (shape {list(value.shape)}, strides {list(value.stride())})"
            for name, value in zip(names, inputs) if _is_expanded(value)]


def _is_expanded(value: Any) -> bool:
    """Whether `value` is a tensor more than one of whose elements share memory."""
    return isinstance(value, torch.Tensor) and torch._debug_has_internal_overlap(value) == 1


def _aot_refuses_expanded_writes(e: RuntimeError, example_inputs: list) -> bool:
    """Whether `e` is eager's refusal of a write to elements sharing memory, met by AOTAutograd
    writing back a mutated input that is expanded. Its functional form writes the whole input
    back, which the refusal meets even where the function writes a part whose elements share
    no memory (`x[0] = 3.0` of `x = row.expand(4, 8)`), which eager runs."""
    return _SHARED_ELEMENTS in str(e) and any(_is_expanded(t) for t in example_inputs)


def _writes_expanded_input(example_inputs: list, mutated: list[int]) -> bool:
    """Whether an input the graph writes (`mutated`) is expanded. In training AOTAutograd
    compiles such a graph and refuses only at the call, when its runtime writes the whole input
    back (`_aot_refuses_expanded_writes`)."""
    return any(_is_expanded(example_inputs[k]) for k in mutated)


class _ExpandedWrites:
    """Dynamo's graph run as traced, in-place ops in order, for an expanded input written in
    place (`_aot_refuses_expanded_writes`): each write runs or raises as in eager. A write that
    covers elements sharing memory (`x.add_(1)` of the whole expanded x) is the caller's input
    at fault: eager's refusal, which names no tensor, is raised as a FusionInputError naming it."""

    __slots__ = ("run", "names")

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list):
        # (the names now: Dynamo drops the placeholders' sources once the graph is compiled)
        self.run, self.names = gm.forward, [name for name, _ in _named_inputs(gm, example_inputs)]

    def __call__(self, *args: Any) -> Any:
        try:
            return self.run(*args)
        except RuntimeError as e:
            expanded = _expanded_inputs(self.names, args) if _SHARED_ELEMENTS in str(e) else []
            if not expanded:
                raise
            raise FusionInputError(
                f"input {', '.join(expanded)} is written in place, but more than one of its elements refers "
                f"to a single memory location (it is expanded); clone() it before the call, as eager "
                f"PyTorch requires") from e


# AOTAutograd's refusals (its merge_view_inputs' AssertionErrors) of inputs sharing memory, one
# of them written: views of another dtype (`a` and `a.view(torch.int32)`), and, in training,
# views that are not differentiable views of one another (a deep-copied module's buffer viewing
# another keeps the shared storage but not its `._base`). Eager runs both.
_AOT_OVERLAPPING_WRITE_LIMITS = (
    "aot_autograd() does not yet handle input mutations on views with different dtypes",
    "aot_autograd() does not yet handle non-differentiable view input mutations",
)


def _aot_refuses_overlapping_writes(e: AssertionError) -> bool:
    """Whether `e` is one of those refusals (any other AssertionError is a bug to surface)."""
    return str(e).startswith(_AOT_OVERLAPPING_WRITE_LIMITS)


# a backward kernel's dispatch missing the dtype: i1's '"i1_backward" not implemented for 'BFloat16''
_BACKWARD_KERNEL_LACKS_DTYPE = re.compile(r"\"\w+_backward\" not implemented for '\w+'")


def _lacks_derivative(e: Exception) -> bool:
    """Whether `e` is torch's report of an op without a derivative: a NotImplementedError
    (igamma's "the derivative for 'igamma' is not implemented") or a RuntimeError (floor_divide's
    "derivative for aten::floor_divide is not implemented"); or of a derivative without a kernel
    for the dtype, a NotImplementedError raised tracing the backward (bf16 special.i1's)."""
    if "derivative for" in str(e) and "not implemented" in str(e):
        return True
    return isinstance(e, NotImplementedError) and _BACKWARD_KERNEL_LACKS_DTYPE.search(str(e)) is not None


def _not_differentiable(e: Exception) -> UnsupportedError:
    """AOTAutograd traces the backward of every output needing grad with the forward, so an op
    torch has no derivative of fails the compile where eager's forward runs (its backward()
    would raise)."""
    return UnsupportedError(
        f"an output needing grad comes from an op torch cannot differentiate, so AOTAutograd, which "
        f"traces the backward of every such output with the forward, fails where eager PyTorch runs "
        f"this forward (a backward() through that op would raise). Call it under torch.no_grad() or "
        f"detach that op's input where no gradient is wanted (fuser.jit: or fallback=\"eager\"); "
        f"torch: {e}")


def _compile_ahead(program: GraphProgram, graph: torch.fx.GraphModule, kept: dict, record: GraphRecord) -> None:
    """Where the graph's device compiles ahead, start compiling kernels in the background
    (frontend/ahead.py): for a forward, the backward's, its graph (`kept["backward"]`, from
    the partitioner) planned now and its program kept in `kept["early"]` for the backward's
    compile; they compile while the forward's first call runs. A forward's or inference
    graph's own kernels only where it has several fusions, which then compile side by side
    rather than each at its first execute: the first call of a one-fusion graph comes as soon
    as Dynamo returns, with little to overlap, and the compiling thread's Python would compete
    with Dynamo's."""
    backward = kept.pop("backward", None)
    device = ahead.wanted(graph)
    if device is None:
        return
    programs = [program] if len(program.fusion_steps) > 1 else []
    if backward is not None:
        kept["early"] = _plan_backward_early(backward, record)
        if kept["early"] is not None:
            programs.append(kept["early"][1])
    if programs:
        ahead.start(programs, device)


def _input_info() -> Optional[list]:
    """AOTAutograd's metadata of each input of the graph it last traced, None where not left."""
    return getattr(getattr(torch._guards.TracingContext.try_get(), "fw_metadata", None), "input_info", None)


def _written(info: Any) -> bool:
    return getattr(info, "mutates_data", False) or getattr(info, "mutates_metadata", False)


def _mutated_inputs(n_inputs: int) -> list[int]:
    """The graph inputs AOTAutograd's metadata says the graph writes (in place, or their
    metadata); [] where it cannot tell."""
    info = _input_info()
    if info is None or len(info) != n_inputs:
        return []
    return [k for k, i in enumerate(info) if _written(i)]


def _traced_on_overlapping_arguments(n_inputs: int) -> bool:
    """Whether AOTAutograd's metadata lists fewer inputs than the graph has, having merged
    arguments that share memory, one of them written, into a synthetic base."""
    info = _input_info()
    return info is not None and len(info) < n_inputs and any(_written(i) for i in info)


def _argument_inputs(gm: torch.fx.GraphModule, n_inputs: int) -> list[int]:
    """The graph inputs that come from the function's own arguments: a local, or an element or
    attribute of one (`*args`, a list, a dict, an object), as Dynamo's guard source tells; not
    a module's parameters or buffers, nor globals, which a caller does not pass as views of one
    another. Every input where the sources are not recorded."""
    sources = [getattr(n.meta.get("grapharg"), "source", None) for n in gm.graph.nodes if n.op == "placeholder"]
    if len(sources) != n_inputs or any(s is None for s in sources):
        return list(range(n_inputs))
    return [k for k, s in enumerate(sources) if _guard_source(s) is torch._guards.GuardSource.LOCAL]


def _guard_source(source: Any) -> Any:
    found = source.guard_source  # (a method up to torch 2.11, a property since)
    return found() if callable(found) else found


class _Counted:
    """A graph run as traced (its ATen ops in order), counted as its programs count a call in
    the statistics of the jitted callable calling it (CURRENT_STATS): the direct path compares
    the graphs a call ran with those of the frame it remembers (direct.py)."""

    __slots__ = ("run", "record")

    def __init__(self, run: Any, record: GraphRecord):
        self.run, self.record = run, record

    def __call__(self, *args: Any) -> Any:
        stats = CURRENT_STATS.get()
        if stats is not None:
            stats.saw(self.record)
        return self.run(*args)


class _AliasedWrites:
    """A graph that writes some inputs in place was traced for inputs that share no memory
    (Dynamo guards the identity of a tensor passed twice, not two views of one storage), and
    its functional form reads every input before writing any. Called with an input it writes
    overlapping another input (`f(b[0], b[0])` as two view objects), it would read the value
    before the write where eager reads it after (PyTorch issue 139789, `torch.compile` alike):
    such a call runs Dynamo's graph eagerly instead, in-place ops in order."""

    def __init__(self, compiled: Any, gm: torch.fx.GraphModule, written: list[int], arguments: list[int]):
        self.compiled, self.gm, self.written, self.arguments = compiled, gm, written, arguments

    def __call__(self, *args: Any) -> Any:
        if _overlap_any(args, self.written, self.arguments):
            return self.gm(*args)
        return self.compiled(*args)

    def __getattr__(self, name: str) -> Any:  # (TrainingCall's plan and the like, for inspection)
        return getattr(self.__dict__["compiled"], name)


def _overlap_any(args: tuple, written: list[int], arguments: list[int]) -> bool:
    """Whether an argument in `written` shares memory with another of `arguments` (by the
    address ranges they span: distinct allocations never overlap)."""
    spans = {k: address_span(args[k]) for k in arguments if k < len(args) and isinstance(args[k], torch.Tensor)}
    for k in written:
        span = spans.get(k)
        if span is None:
            continue
        for j, other in spans.items():
            if j != k and other is not None and other[0] < span[1] and span[0] < other[1] \
                    and args[j] is not args[k]:
                return True
    return False


class FuserBackend:
    def __init__(self, **options: Any):
        self.options = dict(options)
        # weak: a record lives while the compiled callables that run its programs do
        # (GraphProgram.record); held strongly, every graph a process compiled stayed alive
        # past torch._dynamo.reset()
        self._records: list[weakref.ref] = []
        self._lock = threading.Lock()

    @property
    def records(self) -> list[GraphRecord]:
        """The graphs compiled so far whose compiled callables still exist, oldest first."""
        with self._lock:
            return [r for r in (ref() for ref in self._records) if r is not None]

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list, mode: Optional[str] = None,
                 options: Optional[dict] = None) -> Any:
        """`mode` and `options`: torch.compile's. Its modes choose among Inductor's searches and
        CUDA graphs, which fuser has no counterpart of: every mode compiles the same. Its
        options are Inductor's settings: fuser takes none, and refuses them rather than leave
        them silently unapplied."""
        from torch._functorch import config as aot_config

        if options:
            raise UnsupportedError(f"torch.compile(backend=\"fuser\"): options {sorted(options)} are Inductor's "
                                   f"settings; fuser takes none (compile with options=None)")
        if mode is not None and mode not in _MODES:
            raise UnsupportedError(f"torch.compile(backend=\"fuser\"): no mode {mode!r}; torch.compile's modes are "
                                   f"{', '.join(sorted(_MODES))}")

        _refuse_meta_inputs(gm, example_inputs)
        check_dynamo_rewrites(gm)
        whole_foreach_lerps(gm)  # (Adam's `_foreach_lerp_`, which Dynamo traced as a sub and an addcmul_)
        record = GraphRecord(dynamo_code=gm.code)
        if _runs_as_traced(gm):
            record.writes_inputs = may_write_inputs(gm)
            return _Counted(gm.forward, record)
        _restart_with_floats_specialized(gm, example_inputs)
        real_complex_products(gm)  # (llama's complex rotary embedding as real math, which fuses)

        direct: list[GraphProgram] = []
        facts: list = []  # the forward graph's ForwardFacts (training only)
        # the closures below keep only the count: AOTAutograd keeps the backward compiler until
        # the backward's first call, and a closure over `example_inputs` would keep the first
        # call's tensors and their autograd graph (stale gradient accumulators) alive with it
        n_inputs = len(example_inputs)
        kept: dict = {}  # the backward graph, from the partitioner; then its early program

        def compiler(kind: str):
            def compile_graph(graph: torch.fx.GraphModule, inputs: list) -> GraphProgram:
                # (the names AOTAutograd gave the outputs, which planning may give to copies:
                # the backward's inputs are named after them)
                if kind == "forward":
                    _clone_saved_inputs_written_after(graph)
                elif kind == "inference":
                    reinplace_scatters(graph)  # (a KV-cache row write: no copy of the whole cache)
                names = _output_names(graph)
                early = kept.pop("early", None) if kind == "backward" else None
                with GC_PAUSE:  # the backward's compile runs at its first call, outside __call__
                    if early is not None and early[0] == graph.code:
                        program = early[1]  # (its kernels are being compiled already)
                    else:
                        program = GraphProgram(plan_graph(graph), kind, record, names)
                        if kind != "backward":
                            try:
                                _compile_ahead(program, graph, kept, record)
                            except Exception:  # noqa: BLE001 - best effort: compiled at first execute
                                kept.pop("early", None)
                record.programs.append(program)
                if kind == "inference" and _wrapper_is_inert(graph, n_inputs):
                    direct.append(program)
                if kind == "forward":
                    facts.append(forward_facts(graph, n_inputs))
                return program
            return compile_graph

        with aot_config.patch(cse=False), GC_PAUSE:
            try:
                compiled = _aot_compile(
                    gm, example_inputs, fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                    inference_compiler=compiler("inference"), decompositions=decompositions(),
                    partition_fn=functools.partial(_partition_joint, keep=kept),
                    keep_inference_input_mutations=True)
            except RuntimeError as e:  # (NotImplementedError among them)
                if _lacks_derivative(e):
                    raise _not_differentiable(e) from e
                if not _aot_refuses_expanded_writes(e, example_inputs):
                    raise
                compiled = _Counted(_ExpandedWrites(gm, example_inputs), record)
            except AssertionError as e:
                if not _aot_refuses_overlapping_writes(e):
                    raise
                compiled = None
        if compiled is None or _traced_on_overlapping_arguments(n_inputs):
            # AOTAutograd merged arguments sharing memory into one "synthetic base", and its
            # runtime wrapper returns the wrong values for that case (a view of the argument
            # not written, read before the write) and for any later call; or it refused to
            # merge them: the graph runs as traced, in-place ops in order
            compiled = _Counted(gm, record)
        elif direct and len(record.programs) == 1 and record.programs[0] is direct[0]:
            compiled = _InferenceCall(direct[0], any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in example_inputs))
        elif len(facts) == 1 and facts[0] is not None:
            compiled = TrainingCall(compiled, record, facts[0])
        elif facts:  # (a training graph AOTAutograd's runtime layers run: its node needs the hook)
            compiled = AotCall(compiled, record)
        arguments = _argument_inputs(gm, n_inputs)
        mutated = _mutated_inputs(n_inputs)
        if mutated and not isinstance(compiled, _Counted) and _writes_expanded_input(example_inputs, mutated):
            compiled = _Counted(_ExpandedWrites(gm, example_inputs), record)
        # (where AOTAutograd's metadata is not the graph's own, Dynamo's graph tells)
        metadata_silent = isinstance(compiled, _Counted) or _input_info() is None
        record.writes_inputs = bool(mutated) or (metadata_silent and may_write_inputs(gm))
        written = [k for k in mutated if k in arguments]
        if written and not isinstance(compiled, _Counted):
            compiled = _AliasedWrites(compiled, _Counted(gm, record), written, arguments)
        # registered only now: AOTAutograd may have asked Dynamo to trace again instead
        with self._lock:
            self._records = [r for r in self._records if r() is not None] + [weakref.ref(record)]
        stats = CURRENT_STATS.get()
        if stats is not None:
            stats.saw(record)
        return compiled

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"FuserBackend({opts})"


_BACKENDS: dict[tuple, FuserBackend] = {}


def backend_for(**options: Any) -> FuserBackend:
    key = tuple(sorted(options.items()))
    found = _BACKENDS.get(key)
    if found is None:
        found = _BACKENDS.setdefault(key, FuserBackend(**options))
    return found


def fuser_backend(gm: torch.fx.GraphModule, example_inputs: list, **compile_kwargs: Any) -> Any:
    """The registered `"fuser"` backend (default options); `compile_kwargs`: torch.compile's
    `mode` and `options` (`FuserBackend.__call__`)."""
    return backend_for()(gm, example_inputs, **compile_kwargs)


def register() -> None:
    """Make `torch.compile(fn, backend="fuser")` work."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "fuser" not in _COMPILER_FNS:
        register_backend(backend_for(), name="fuser")


_REGISTRY = "torch._dynamo.backends.registry"


def register_unless_installed() -> None:
    """At `import fuser`: an installed fuser is found by Dynamo through its
    `torch_dynamo_backends` entry point (pyproject.toml) when a `torch.compile` first names it,
    so importing fuser need not import Dynamo (0.7 s on the development CPU, 2.2 s on the H200
    host). Running from a checkout (no entry point), the backend registers once Dynamo's backend
    registry is imported (`_RegisterOnImport`); with Dynamo imported already, now. (An installed
    fuser never registers itself: Dynamo loading the entry point imports fuser, and would then
    find the name taken.)"""
    from importlib import metadata

    try:
        found = metadata.distribution("fuser").entry_points
    except metadata.PackageNotFoundError:
        found = []
    if any(ep.group == "torch_dynamo_backends" and ep.name == "fuser" for ep in found):
        return
    if _REGISTRY in sys.modules or "torch._dynamo" in sys.modules:
        register()
    else:
        sys.meta_path.insert(0, _RegisterOnImport())


class _RegisterOnImport:
    """A module finder for Dynamo's backend registry alone: it finds the module through the
    finders after it and wraps the loader, so that fuser's backend registers once the module has
    run. It leaves `sys.meta_path` at its first use."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _REGISTRY:
            return None
        # a new list rather than a removal: another thread's import may be walking the old one
        # (a removal would shift it past the finder after this one)
        sys.meta_path = [finder for finder in sys.meta_path if finder is not self]
        for finder in sys.meta_path:
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RegisteringLoader(spec.loader)
                return spec
        return None


class _RegisteringLoader:
    """A module's loader, and fuser's backend registered once the module has run."""

    def __init__(self, loader: Any):
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        # (register() imports from the module, which is in sys.modules while it runs). This runs
        # inside `import torch._dynamo`: an error here would fail every backend, so it warns
        try:
            register()
        except Exception as error:  # noqa: BLE001
            import warnings

            warnings.warn(f"fuser: torch.compile's backend 'fuser' was not registered: "
                          f"{type(error).__name__}: {error}", RuntimeWarning, stacklevel=2)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the module's loader's
        if name == "loader" or name.startswith("__"):  # (a copy or unpickling has no `loader` yet)
            raise AttributeError(name)
        return getattr(self.loader, name)
