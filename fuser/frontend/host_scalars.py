"""0-dim CPU tensors in a GPU graph: where their arithmetic runs.

ATen lets a 0-dim CPU tensor join an op on a GPU as a number. An optimizer with
`capturable=False` keeps its step counters so: a foreach Adam step adds one to each counter
on the CPU, computes its bias corrections there (`pow(beta, step)`, `1 - ...`, `sqrt`) and
divides the GPU moments by them. Grouped by device, that arithmetic was a CPU fusion of its
own (run by Triton's interpreter) and each GPU op reading it ran eagerly, cutting the step's
one pass over the parameters into several.

So, in a graph with GPU tensors:
- a 0-dim CPU value computed from 0-dim CPU values alone, and read only by fusible ops on one
  GPU (directly or through other such values), is *lifted*: computed inside the GPU fusion
  that reads it, a number per program;
- one that something else also reads (the new step counter, written back into the CPU
  tensor) stays on the CPU; a GPU fusion reading it copies it to the GPU at each call (an
  asynchronous copy of a few bytes, see `program.FusionStep`);
- a CPU region left with 0-dim values only runs as ATen calls (a kernel of Triton's
  interpreter for a number costs far more).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.fx import Node

from .meta import meta_val, node_device
from .rules import Kind, find_rule


def is_host_scalar(node: Node) -> bool:
    """Whether the node's traced value is a 0-dim tensor on the CPU."""
    val = meta_val(node)
    return isinstance(val, torch.Tensor) and val.dim() == 0 and val.device.type == "cpu"


def has_gpu_tensors(nodes: list[Node]) -> bool:
    return any(d is not None and d.type != "cpu" for d in map(node_device, nodes))


def lifted(nodes: list[Node], eager: dict) -> dict[Node, torch.device]:
    """{0-dim CPU node: the GPU whose fusions compute it} (see the module docstring), for
    `nodes` in graph order and the nodes that run eagerly."""
    out: dict[Node, torch.device] = {}
    for node in reversed(nodes):
        if node.op != "call_function" or node in eager or not is_host_scalar(node):
            continue
        rule = find_rule(node.target)
        if rule is None or rule.kind is not Kind.pointwise or rule.fn.__module__.endswith(".random"):
            continue  # (elementwise math only: a random number drawn on the GPU would not be the CPU's)
        if not all(is_host_scalar(i) for i in node.all_input_nodes if isinstance(meta_val(i), torch.Tensor)):
            continue  # (a sum of a CPU vector: the vector would be copied to the GPU)
        device = _only_gpu_reader(node, eager, out)
        if device is not None:
            out[node] = device
    return out


def _only_gpu_reader(node: Node, eager: dict, lifted_so_far: dict) -> Optional[torch.device]:
    devices = set()
    for user in node.users:
        if user.op != "call_function" or user in eager:
            return None
        device = lifted_so_far.get(user) or node_device(user)
        if device is None or device.type == "cpu":
            return None
        devices.add(device)
    return devices.pop() if len(devices) == 1 else None


def scalars_only(members: list[Node]) -> bool:
    """Whether every tensor a region computes is a 0-dim CPU tensor."""
    return all(is_host_scalar(n) or not isinstance(meta_val(n), torch.Tensor) for n in members)
