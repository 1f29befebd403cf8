"""Indexing: index_select, embedding, gather and scatter become the IR's indexing ops, which
run through ATen inside the fusion, between the generated kernels of their neighbours.
(`select.int` is a slice in shape.py; gathers and scatters of one index per row are one-hots
there, which kernels fuse, and come here otherwise.)"""
from __future__ import annotations

import torch

from . import Kind, register

aten = torch.ops.aten


@register(aten.index_select.default, kind=Kind.movement)
def _index_select(b, node, x, dim, index):
    return b.fd.ops.index_select(x, index, dim)


@register(aten.embedding.default, kind=Kind.movement)
def _embedding(b, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # padding_idx and the two flags only change the gradient, which the backward graph computes
    return b.fd.ops.embedding_fwd(indices, weight)


def gather(b, x, dim, index):
    return b.fd.ops.gather(x, index, dim)


@register(aten.scatter.src, kind=Kind.movement)
def _scatter_src(b, node, x, dim, index, src):
    return b.fd.ops.scatter(x, index, src, dim)


def scatter_value(b, x, dim, index, value):
    return b.fd.ops.scatter(x, index, value, dim)
