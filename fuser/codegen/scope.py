"""Scopes of generated code: lines, the names of the values computed there, and the tile dims
whose indices live there. A loop scope's parent is the program scope."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import InternalError

# tile dim d's index vector in generated code (INDEX[d], with INDEX[d]_mask and so on) and its
# extent (COUNT[d]: R rows, C columns)
INDEX = ("r", "c")
COUNT = ("R", "C")


@dataclass
class Scope:
    parent: Optional["Scope"]
    lines: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)
    offsets: dict[tuple[int, int], str] = field(default_factory=dict)
    dims: tuple[int, ...] = ()  # tile dims whose indices live in this scope

    def lookup(self, key: int) -> Optional[str]:
        s = self
        while s is not None:
            if key in s.names:
                return s.names[key]
            s = s.parent
        return None

    def owner_of_dim(self, dim: int) -> "Scope":
        s = self
        while s is not None:
            if dim in s.dims:
                return s
            s = s.parent
        raise InternalError(f"tile dim {dim} has no index in scope")
