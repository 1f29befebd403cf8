"""fuser's version as nvFuser's `version()` gives its own: a string that compares as a version
with strings ("0.1.0", a local part after "+" ignored) and with packaging's Version."""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _release(v: Any) -> tuple[int, ...]:
    text = str(v).split("+")[0]
    try:
        parts = tuple(int(p) for p in text.split("."))
    except ValueError:
        raise ValueError(f"version: cannot compare with {v!r}; expected a version such as '0.1.0'") from None
    return parts + (0,) * (3 - len(parts))


class FuserVersion(str):
    def __eq__(self, other: Any) -> bool:
        return _release(self) == _release(other)

    def __ne__(self, other: Any) -> bool:
        return _release(self) != _release(other)

    def __lt__(self, other: Any) -> bool:
        return _release(self) < _release(other)

    def __le__(self, other: Any) -> bool:
        return _release(self) <= _release(other)

    def __gt__(self, other: Any) -> bool:
        return _release(self) > _release(other)

    def __ge__(self, other: Any) -> bool:
        return _release(self) >= _release(other)

    __hash__ = str.__hash__


def version() -> FuserVersion:
    """fuser's version, comparable as nvfuser_direct.version() is: `version() > "0.0.0"`."""
    return FuserVersion(__version__)
