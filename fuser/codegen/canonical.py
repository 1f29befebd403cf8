"""The canonical form of a generated kernel, so that kernels alike but for their tensors' names
compile once.

Generated code names its values after the fusion's tensors (`T17_ptr`, `T17`, `acc17`) and the
kernel after the segment (`fuser_pointwise_T17_tile`), so each layer of a model gave a kernel of
its own text for the same computation, and Triton compiled every one (a 16-layer MLP stack's
forward and backward: 81 kernels, 37 of them different). The canonical form renumbers the tensor
names in order of first use and names the kernel after its kind and a digest of that text; the
kernel is compiled and cached under that form. The source users read keeps the fusion's names
(they match the IR printed above it) with the canonical kernel name, the one profilers show.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

# a value named after tensor N: T{N}, T{N}_ptr, T{N}_stride0, acc{N}, acc{N}_m2r, ...; the kernel's
# own name (fuser_..._T{N}_...) is no match (no word boundary before its T)
_TENSOR_NAME = re.compile(r"\b(T|acc)(\d+)(?=\b|_)")
_SEGMENT_TAG = re.compile(r"_T\d+(?=_|$)")
_PLACEHOLDER = "FUSER_CANONICAL_KERNEL"


def _without_header(source: str) -> str:
    """`source` less its leading comment block (the segment's IR, in the fusion's names)."""
    lines = source.splitlines(keepends=True)
    k = 0
    while k < len(lines) and (not lines[k].strip() or lines[k].lstrip().startswith("#")):
        k += 1
    return "".join(lines[k:])


def _renamer() -> Callable[[str], str]:
    numbers: dict[str, int] = {}

    def rename(text: str) -> str:
        return _TENSOR_NAME.sub(lambda m: f"{m.group(1)}{numbers.setdefault(m.group(2), len(numbers))}", text)
    return rename


def canonical_form(name: str, source: str, scalar_params: Sequence[str],
                   digest: Callable[[str], str]) -> tuple[str, str, list[str]]:
    """(canonical kernel name, canonical code, scalar parameter names in that code) of kernel
    `name` in `source`; `digest` hashes a text (with the versions and target it compiles for)."""
    code = _without_header(source)
    rename = _renamer()
    # the kernel's name, and its helpers' (a split kernel's `<name>_partial`), carry the tag
    body = rename(named(code, name, _PLACEHOLDER))
    params = [rename(p) for p in scalar_params]
    cname = f"{_SEGMENT_TAG.sub('', name)}_{digest(body)[:10]}"
    return cname, body.replace(_PLACEHOLDER, cname), params


def named(source: str, old: str, new: str) -> str:
    """`source` with kernel name `old`, and the names it begins, changed to `new`."""
    return re.sub(rf"\b{re.escape(old)}", new, source)
