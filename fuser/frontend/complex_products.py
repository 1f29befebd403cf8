"""A complex product taken back to real numbers, as real arithmetic on the pairs.

Llama's rotary embedding (and Mistral's, DeepSeek's) views the real pairs of its queries and keys
as complex numbers, multiplies them by complex rotations and views the product as real pairs
again: `view_as_real(view_as_complex(x) * freqs)`. Complex tensors have no kernels here, so the
product ran as an ATen call between two fusions (three passes over the data where the real form
takes one, and no kernel at all in fp32). In Dynamo's graph, before AOTAutograd, such a product
becomes

    a, b = x[..., 0], x[..., 1];  c, d = view_as_real(freqs)[..., 0], [..., 1]
    stack((a c - b d, a d + b c), -1)

the product as ATen computes a complex one (c10::complex's `*`, the same float operations), so
that the forward and the gradient AOTAutograd derives from it are real math that fuses; the
rotations' own `view_as_real` is a view. Only a product whose complex value is used nowhere else
is rewritten, of a `view_as_complex` of a float32 or float64 tensor by a complex tensor of the
matching type (a complex64 beside float32, complex128 beside float64): other types promote
differently, and a complex result used elsewhere stays complex.
"""
from __future__ import annotations

import operator
from typing import Optional

import torch
from torch.fx import GraphModule, Node

_MULS = (operator.mul, torch.mul, torch.Tensor.mul)
_PAIRS = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def real_complex_products(gm: GraphModule) -> int:
    """Rewrites each `view_as_real(view_as_complex(x) * z)` of Dynamo's graph `gm` as real
    arithmetic (see the module's note); the number rewritten."""
    count = 0
    inputs = {id(v) for v in (_example(n) for n in gm.graph.nodes if n.op == "placeholder") if v is not None}
    for node in list(gm.graph.nodes):
        if _calls(node, torch.view_as_real) and isinstance(node.args[0], Node) and _rewritable(node, inputs):
            factors = _complex_product(node.args[0])
            if factors is not None:
                _replace(gm, node, node.args[0], *factors)
                count += 1
    if count:
        gm.recompile()
    return count


def _calls(node: Node, fn) -> bool:
    if node.op == "call_function":
        return node.target is fn
    return node.op == "call_method" and node.target == getattr(fn, "__name__", None)


def _rewritable(real_view: Node, inputs: set) -> bool:
    """Whether the real form can stand for `real_view`: its value is contiguous (the stack that
    replaces it is; the product of a transposed x keeps x's layout, which a later `view` may need),
    and the pairs viewed as complex are no view of an argument, whose storage offset the trace
    does not fix (view_as_complex refuses an odd one, a check the real form would drop)."""
    value = _example(real_view)
    if value is None or not value.is_contiguous():
        return False
    product = real_view.args[0]
    for n in product.args if isinstance(product, Node) else ():
        if isinstance(n, Node) and _calls(n, torch.view_as_complex):
            pairs = _example(n.args[0])
            if pairs is None or id(pairs._base if pairs._is_view() else pairs) in inputs:
                return False
    return True


def _complex_product(product: Node) -> Optional[tuple[Node, Node, Node]]:
    """(the view_as_complex node, x, z) for a product `view_as_complex(x) * z` used only by one
    view_as_real, of the types the module's note names; else None."""
    if len(product.users) != 1 or product.kwargs or len(product.args) != 2:
        return None
    if not any(_calls(product, fn) for fn in _MULS):
        return None
    for viewed, other in (product.args, tuple(reversed(product.args))):
        if isinstance(viewed, Node) and _calls(viewed, torch.view_as_complex) and isinstance(other, Node):
            x, z = _example(viewed.args[0]), _example(other)
            if x is not None and z is not None and _PAIRS.get(x.dtype) is z.dtype:
                return viewed, viewed.args[0], other
    return None


def _example(node) -> Optional[torch.Tensor]:
    value = node.meta.get("example_value") if isinstance(node, Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _replace(gm: GraphModule, real_view: Node, product: Node, viewed: Node, x: Node, z: Node) -> None:
    """The real form computed where the product was (an input written in place between the
    product and its view_as_real must not be read after the write)."""
    graph = gm.graph
    with graph.inserting_before(product):
        zr = graph.call_function(torch.view_as_real, (z,))
        a, b = (graph.call_function(torch.select, (x, -1, k)) for k in (0, 1))
        c, d = (graph.call_function(torch.select, (zr, -1, k)) for k in (0, 1))
        mul, add, sub = operator.mul, operator.add, operator.sub
        real = graph.call_function(sub, (graph.call_function(mul, (a, c)), graph.call_function(mul, (b, d))))
        imag = graph.call_function(add, (graph.call_function(mul, (a, d)), graph.call_function(mul, (b, c))))
        pairs = graph.call_function(torch.stack, ((real, imag), -1))
    real_view.replace_all_uses_with(pairs)
    for dead in (real_view, product, viewed):  # (the complex values, unused now)
        if not dead.users:
            graph.erase_node(dead)
